"""A small convolutional teacher for distilling a ViT (DeiT, Touvron et al. 2021).

A ViT has no built-in notion that neighbouring pixels belong together: it has to learn it from
data, which takes more images or more epochs than a small budget gives. A convolutional
network has that bias built in and learns fast. DeiT's answer is *distillation*: train the
ViT to match the teacher's predictions as well as the labels. The student stays a plain ViT;
the teacher only supplies training targets and is thrown away afterwards.

Here the teacher is trained from scratch on the same training images, inside the same time
budget, by :func:`train_teacher`; :func:`teacher_logits` then computes its predictions for
every training image once (averaged with the mirror image), so that distillation costs the
student's loop nothing per step.

``ConvTeacher`` ``(B, C, H, W) -> (B, num_classes)``: 3x3 convolution blocks
(conv-BatchNorm-ReLU) with 2x2 max-pooling, then a linear classifier; ``arch='fc'`` (the
default: two blocks, the classifier sees the whole feature map) or ``'gap'`` (three blocks,
global average pooling).

:func:`distillation_targets` is the distillation phase of a run (``vitref.training.train(distill=...)``):
it trains the teacher in its share of the budget and returns its logits for the training images.
"""
from __future__ import annotations

import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from .. import data as vdata
from .config import TrainConfig
from .optim import param_groups, warmup_cosine
from .tuner import ThreadTuner, available_cores


def _conv_block(in_channels: int, out_channels: int) -> list[nn.Module]:
    return [nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False), nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True)]


class ConvTeacher(nn.Sequential):
    """``ConvTeacher(in_channels, num_classes, img_size, arch)``: ``(B, C, H, W) -> (B, num_classes)``.

    ``arch='gap'``: three conv blocks (32, 64, 128 channels), global average pooling, linear.
    ``arch='fc'``: two conv blocks (32, 64 channels), then a linear layer on the whole
    ``64 x H/4 x W/4`` map (it keeps where things are).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, img_size: int = 28, arch: str = "fc"):
        if arch == "gap":
            layers = [*_conv_block(in_channels, 32), nn.MaxPool2d(2),      # (B, 32, H/2, W/2)
                      *_conv_block(32, 64), nn.MaxPool2d(2),               # (B, 64, H/4, W/4)
                      *_conv_block(64, 128),                               # (B, 128, H/4, W/4)
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(),               # (B, 128)
                      nn.Linear(128, num_classes)]                         # (B, num_classes)
        elif arch == "fc":
            side = img_size // 4
            layers = [*_conv_block(in_channels, 32), nn.MaxPool2d(2),      # (B, 32, H/2, W/2)
                      *_conv_block(32, 64), nn.MaxPool2d(2),               # (B, 64, H/4, W/4)
                      nn.Flatten(),                                        # (B, 64 * H/4 * W/4)
                      nn.Linear(64 * side * side, num_classes)]            # (B, num_classes)
        else:
            raise ValueError(f"unknown teacher arch {arch!r}: expected 'fc' or 'gap'")
        super().__init__(*layers)


def train_teacher(images, labels, info, *, epochs: float | None = None, deadline: float | None = None,
                  steps: int | None = None, batch_size: int = 256, lr: float = 2e-3, weight_decay: float = 0.05,
                  warmup: float = 0.05,
                  seed: int = 0, device="cpu", progress_bar=None, tuner=None,
                  arch: str = "fc") -> tuple[ConvTeacher, dict]:
    """Train a :class:`ConvTeacher` on ``images uint8 (N, C, H, W)``, ``labels (N,)``.

    The budget is ``epochs``, ``steps`` (optimiser steps) or a wall-clock ``deadline``
    (``time.time()``), whichever comes first; the learning rate warms up linearly and decays on a
    cosine over the budget's progress, as the student's does. Random horizontal flips. ``tuner`` (a
    :class:`~vitref.training.tuner.ThreadTuner`) picks the number of CPU threads as it goes. Returns
    ``(teacher in eval mode, summary dict)``.
    """
    _check_budget(epochs, deadline, steps)
    device = torch.device(device)
    torch.manual_seed(seed)
    teacher = ConvTeacher(info["in_channels"], info["num_classes"], info["img_size"], arch).to(device)
    channels_last = device.type == "cpu"              # oneDNN's convolutions are faster in NHWC on a CPU
    if channels_last:
        teacher = teacher.to(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(param_groups(teacher, weight_decay), lr=lr)    # no decay on biases and norms
    loader = vdata.BatchLoader(images, labels, batch_size, info["mean"], info["std"], shuffle=True,
                               generator=torch.Generator().manual_seed(seed + 2), flip=True, drop_last=True,
                               device=device)
    max_steps = min(math.ceil(epochs * len(loader)) if epochs is not None else math.inf,
                    steps if steps is not None else math.inf)
    start = time.time()
    step, progress, loss = 0, 0.0, None
    teacher.train()
    while progress < 1.0:
        for x, y in loader:
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            for group in optimizer.param_groups:
                group["lr"] = warmup_cosine(progress, lr, warmup)   # the student's schedule
            step_start = time.time()
            if tuner is not None and step >= 1:
                tuner.before_step(step_start)
            loss = F.cross_entropy(teacher(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if tuner is not None and step >= 2:
                tuner.after_step(time.time() - step_start, time.time(), step)
            time_progress = 0.0
            if deadline is not None:       # a deadline already past: one step, then stop
                time_progress = 1.0 if deadline <= start else (time.time() - start) / (deadline - start)
            progress = max(step / max_steps, time_progress)
            if progress_bar is not None:
                progress_bar.update(1)
                if step % 10 == 0:
                    progress_bar.set_postfix(teacher_loss=f"{loss.item():.3f}", refresh=False)
            if progress >= 1.0:
                break
    teacher.eval()
    return teacher, dict(steps=step, epochs=round(step / len(loader), 3), seconds=round(time.time() - start, 2),
                         num_parameters=sum(p.numel() for p in teacher.parameters()))


def _check_budget(epochs, deadline, steps) -> None:
    if epochs is None and deadline is None and steps is None:
        raise ValueError("give the teacher a budget: epochs, steps or deadline")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive whole number of optimiser steps, got {steps!r}")


@torch.no_grad()
def teacher_logits(teacher: nn.Module, images, info, batch_size: int = 1000, device="cpu") -> torch.Tensor:
    """The teacher's logits for every image, averaged with its mirror image's: ``(N, num_classes)``.

    The average is the target for the image whichever way the student's augmentation flips it
    (a mirrored garment is the same garment).
    """
    teacher.eval()
    channels_last = torch.device(device).type == "cpu"
    out = []
    loader = vdata.BatchLoader(images, torch.zeros(len(images), dtype=torch.long), batch_size,
                               info["mean"], info["std"], device=device)
    for x, _ in loader:
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out.append((teacher(x) + teacher(x.flip(-1))) / 2)                     # (B, num_classes)
    return torch.cat(out)                                                      # (N, num_classes)


def distillation_loss(logits, teacher_logits_batch, temperature: float = 1.0) -> torch.Tensor:
    """Soft distillation: ``T^2 KL(softmax(t / T) || softmax(s / T))``, averaged over the batch.

    ``logits (B, K)`` are the student's, ``teacher_logits_batch (B, K)`` the teacher's; the
    ``T^2`` keeps the gradient's size independent of the temperature (Hinton et al. 2015).
    """
    student = F.log_softmax(logits / temperature, dim=-1)
    target = F.log_softmax(teacher_logits_batch / temperature, dim=-1)
    return F.kl_div(student, target, log_target=True, reduction="batchmean") * temperature ** 2


def distillation_targets(config: TrainConfig, history: dict, images, labels, info, deadline: float, reserve: float,
                         device, validation=None) -> torch.Tensor:
    """The distillation phase of a run: train the teacher, return its logits for every training image ``(N, K)``.

    Timed runs (finite ``deadline``, ``time.time()``) give the teacher ``config.teacher_share`` of
    the time left for training, after keeping ``reserve`` seconds for the final evaluation;
    counted runs ``config.teacher_epochs``. ``validation`` is ``(images, labels)`` or ``None``.
    What the teacher did goes into ``history['teacher']``.
    """
    if config.distill not in ("soft", "hard"):
        raise ValueError(f"unknown distill {config.distill!r}: expected 'none', 'soft' or 'hard'")
    if not 0 < config.distill_weight <= 1:
        raise ValueError(f"distill_weight must be in (0, 1], got {config.distill_weight}")
    teacher_deadline = None
    if math.isfinite(deadline):
        if not 0 < config.teacher_share < 1:
            raise ValueError(f"teacher_share must be between 0 and 1, got {config.teacher_share}")
        teacher_deadline = time.time() + config.teacher_share * (deadline - reserve - time.time())
    epochs = None if teacher_deadline is not None and config.epochs is None and config.steps is None \
        else config.teacher_epochs
    tuner = None
    if device.type == "cpu" and config.threads in (None, 0) and teacher_deadline is not None and available_cores() > 1:
        tuner = ThreadTuner([available_cores(), 1])         # the teacher has BatchNorm: no batch slices
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="teacher", unit="step", dynamic_ncols=True, file=sys.stderr)
    started = time.time()
    teacher, summary = train_teacher(images, labels, info, epochs=epochs, deadline=teacher_deadline,
                                     seed=config.seed, device=device, progress_bar=bar, tuner=tuner,
                                     arch=config.teacher_arch, lr=config.teacher_lr)
    targets = teacher_logits(teacher, images, info, config.eval_batch_size, device)      # (N, num_classes)
    if bar is not None:
        bar.close()
    summary.update(seconds_with_targets=round(time.time() - started, 2),
                   train_accuracy=(targets.argmax(-1) == labels.to(targets.device)).float().mean().item())
    if validation is not None:
        val_images, val_labels = validation
        val_logits = teacher_logits(teacher, val_images, info, config.eval_batch_size, device)
        summary["val_accuracy"] = (val_logits.argmax(-1) == val_labels.to(val_logits.device)).float().mean().item()
    history["teacher"] = summary
    if bar is not None:
        bar.write(f"teacher: {summary['epochs']} epochs in {summary['seconds']:.0f} s, "
                  f"train accuracy {summary['train_accuracy']:.4f}"
                  + (f", val accuracy {summary['val_accuracy']:.4f}" if "val_accuracy" in summary else ""))
    return targets


__all__ = ["ConvTeacher", "train_teacher", "teacher_logits", "distillation_loss", "distillation_targets"]
