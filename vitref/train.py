"""Train a Vision Transformer from scratch, on a wall-clock budget.

Command line (the last line printed is ``test_accuracy=0.xxxx wall_seconds=NNN``)::

    python -m vitref.train --dataset fashion-mnist --minutes 10
    python -m vitref.train --dataset fashion-mnist --epochs 5 --seed 1
    python -m vitref.train --dataset cifar10 --epochs 100 --device cuda --preset cifar10-gpu

In the book (chapter 7) or a notebook::

    from vitref.train import train
    model, history = train(dataset="fashion-mnist", minutes=2, out=None)

**The budget.** ``--minutes M`` bounds the whole command (process start, data loading,
training and the final test evaluation). The learning-rate schedule (linear warm-up, then
cosine decay to zero) runs on *progress* ``p`` from 0 to 1. With ``--minutes`` the progress is
the fraction of the training time used, so the schedule stretches or shrinks to the speed of
the machine -- also when other programs slow it down midway -- and training ends with the
learning rate at zero just in time for the final evaluation. With ``--epochs`` or ``--steps``
the progress is the fraction of steps done, and a run is deterministic given ``--seed``
(same machine, same number of threads). A timed run records its number of steps in the
history; ``--steps N`` reruns that many steps on a step-based schedule, deterministically.
On a CPU, a timed run also picks how to use the cores as it goes (:class:`ThreadTuner`): one
thread, all cores, or the batch cut into slices that run in parallel threads (the fastest for
this small model on an idle machine); on a shared machine one thread can be many times faster
than all cores.

**The default recipe** (Fashion-MNIST on a 2-core CPU; chosen on a validation split carved
from the training set, never on the test set; every recipe tried is in bench/RESULTS.md):
patch 7 (4 x 4 = 16 patches + CLS), D = 64, 4 blocks, 4 heads, MLP 128 (139,018 parameters:
small, so that it sees about 50 epochs in 10 minutes on an idle 2-core machine); positions
start at a 2-D sine-cosine table; AdamW (lr 2e-3, weight decay 0.05), batch 256, 5% warm-up
then cosine to zero, label smoothing 0.1, gradient clipping at 1; random shifts of up to one
pixel (crop with padding 1) and horizontal flips; test-time averaging of 10 views of each
image (the image and its mirror, each also shifted one pixel up, down, left and right).
Optional, tried and not in the default: distillation from a small CNN trained first in the
same budget (``--distill soft``, :mod:`vitref.teacher`), weight averaging (``--ema``), mean
pooling (``--pool mean``), crops that start late (``--crop-from``).

Outputs go to a run folder (default ``runs/<dataset>-<time>``): ``model.pt`` (state dict, the
model's arguments and the config) and ``history.json`` (config, per-epoch loss and accuracy,
seconds, test accuracy). ``VITREF_FAST=1`` (tests only) trains on 2,048 images and tests on
1,000 so that a run takes seconds.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from . import data as vdata
from .teacher import distillation_loss


def _process_start_time() -> float:
    """Wall-clock time (``time.time()``) at which this process started (Linux), else now."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        started = boot + start_ticks / os.sysconf("SC_CLK_TCK")
        # btime has 1 s resolution: never claim a start in the future or implausibly far back.
        return min(started, time.time()) if time.time() - started < 3600 else time.time()
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


@dataclass
class TrainConfig:
    """Everything that defines a run. Defaults are the Fashion-MNIST CPU recipe."""

    dataset: str = "fashion-mnist"
    # budget: any of minutes (wall clock for everything), epochs, steps; the first reached ends training
    minutes: float | None = None
    epochs: float | None = None
    steps: int | None = None
    # model (vitref.ViT)
    patch_size: int = 7
    dim: int = 64
    depth: int = 4
    heads: int = 4
    mlp_dim: int = 128
    dropout: float = 0.0
    arch: str = "vitref"          # 'vitref' or 'timm' (timm's VisionTransformer, for comparisons)
    pos_init: str = "sincos"      # 'sincos' (start at a 2-D sine-cosine table, still learned) or 'random'
    pool: str = "cls"             # what the head sees: 'cls' (class token) or 'mean' (average of the patch tokens)
    # optimisation
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: float = 0.05          # fraction of the progress spent warming up linearly
    min_lr: float = 0.0           # learning rate at the end of the cosine decay
    beta2: float = 0.999
    label_smoothing: float = 0.1
    grad_clip: float | None = 1.0
    ema: float = 0.0              # >0: evaluate an exponential moving average of the weights with this decay
    # distillation from a small CNN trained first, in the same budget (vitref.teacher)
    distill: str = "none"         # 'none', 'soft' (match the teacher's probabilities) or 'hard' (its argmax as a second label)
    distill_weight: float = 0.5   # loss = (1 - w) * label loss + w * distillation loss
    distill_temperature: float = 1.0
    teacher_share: float = 0.25   # timed runs: fraction of the training time that trains the teacher
    teacher_epochs: float = 5.0   # counted runs (--epochs/--steps): the teacher's epochs
    teacher_arch: str = "fc"      # vitref.teacher.ConvTeacher: 'fc' or 'gap'
    teacher_lr: float = 2e-3
    # augmentation (on whole batches, see vitref.data.augment_batch)
    crop_padding: int = 1
    crop_from: float = 0.0        # random crops start at this fraction of the progress (0: from the start)
    flip: bool = True
    erase: float = 0.0
    # evaluation
    tta: str = "flip-shift"       # test-time augmentation: 'none', 'flip' (2 views), 'flip-shift' (10 views)
    val_size: int = 0             # training images held out for validation (recipe tuning)
    eval_every_epoch: bool = False  # also evaluate on the test set after each epoch (costs time)
    eval_batch_size: int = 1000
    # machine
    seed: int = 0
    threads: int | None = None    # torch threads; None: adaptive for timed CPU runs (ThreadTuner), else torch's; 0: adaptive
    device: str = "auto"
    compile: bool = False
    train_limit: int | None = None  # use only the first N training images (VITREF_FAST sets it)
    test_limit: int | None = None
    out: str | None = "runs"      # run folder parent (None: save nothing)
    name: str | None = None       # run folder name (default <dataset>-<time>)
    progress: bool = True


PRESETS = {
    # the Fashion-MNIST CPU recipe: the TrainConfig defaults
    "fashion-mnist-cpu": {},
    # CIFAR-10 on a GPU (Colab T4 or better): vit_tiny_cifar10's shape, stronger regularisation
    "cifar10-gpu": dict(dataset="cifar10", patch_size=4, dim=128, depth=6, heads=4, mlp_dim=512, batch_size=128,
                        lr=1e-3, weight_decay=0.05, warmup=0.05, label_smoothing=0.1, crop_padding=4,
                        flip=True, erase=0.25, dropout=0.0, pos_init="sincos", tta="flip", epochs=100),
}


def lr_at(progress: float, config: TrainConfig) -> float:
    """Learning rate at ``progress`` in [0, 1]: linear warm-up to ``lr``, then cosine to ``min_lr``."""
    if config.warmup > 0 and progress < config.warmup:
        return config.lr * progress / config.warmup
    decay = min(1.0, (progress - config.warmup) / max(1e-12, 1.0 - config.warmup))
    return config.min_lr + (config.lr - config.min_lr) * 0.5 * (1.0 + math.cos(math.pi * decay))


def build_model(config: TrainConfig, info: dict) -> torch.nn.Module:
    """The model of ``config`` for a dataset described by ``info`` (see ``vitref.data.DATASET_INFO``)."""
    if config.arch == "vitref":
        from .vit import ViT

        return ViT(img_size=info["img_size"], patch_size=config.patch_size, in_channels=info["in_channels"],
                   num_classes=info["num_classes"], dim=config.dim, depth=config.depth, num_heads=config.heads,
                   mlp_dim=config.mlp_dim, dropout=config.dropout, pool=config.pool)
    if config.arch == "timm":
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(img_size=info["img_size"], patch_size=config.patch_size,
                                 in_chans=info["in_channels"], num_classes=info["num_classes"],
                                 embed_dim=config.dim, depth=config.depth, num_heads=config.heads,
                                 mlp_ratio=config.mlp_dim / config.dim, drop_rate=config.dropout,
                                 proj_drop_rate=config.dropout, global_pool="token" if config.pool == "cls" else "avg",
                                 fc_norm=False)   # final norm before pooling, as vitref.ViT (timm's 'avg' default norms after)
    raise ValueError(f"unknown arch {config.arch!r}: expected 'vitref' or 'timm'")


@torch.no_grad()
def init_sincos_positions(model: torch.nn.Module) -> None:
    """Start the learned ``pos_embed (1, N+1, D)`` at a 2-D sine-cosine table.

    The first ``D/2`` features encode the patch's row, the last ``D/2`` its column, each with
    :func:`vitref.sinusoidal_encoding`; the class token's position starts at zero. The
    positions stay trainable: only their starting point changes.
    """
    from .positional import sinusoidal_encoding

    num_tokens, dim = model.pos_embed.shape[1:]
    side = math.isqrt(num_tokens - 1)
    if side * side != num_tokens - 1 or dim % 4:
        raise ValueError(f"sincos positions need a square grid and dim divisible by 4, got {num_tokens - 1} patches, dim {dim}")
    table = sinusoidal_encoding(side, dim // 2)                           # (side, D/2)
    rows = table[:, None, :].expand(side, side, dim // 2)                 # (side, side, D/2): row of each patch
    cols = table[None, :, :].expand(side, side, dim // 2)                 # (side, side, D/2): column of each patch
    grid = torch.cat([rows, cols], dim=-1).reshape(side * side, dim)      # (N, D), row-major like the patches
    model.pos_embed[0, 0].zero_()
    model.pos_embed[0, 1:] = grid.to(model.pos_embed)


def _param_groups(model: torch.nn.Module, weight_decay: float):
    """AdamW groups: weight decay on weight matrices only (not biases, norms, positions, class token)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or "pos_embed" in name or "cls_token" in name else decay).append(param)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]


def _shift(images: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """Shift a batch ``(B, C, H, W)`` by ``dy`` rows and ``dx`` columns, repeating the edge pixels."""
    if dy == 0 and dx == 0:
        return images
    H, W = images.shape[-2:]
    padded = F.pad(images, (1, 1, 1, 1), mode="replicate")                 # (B, C, H+2, W+2)
    return padded[..., 1 - dy:1 - dy + H, 1 - dx:1 - dx + W]


TTA_MODES = ("none", "flip", "flip-shift")


@torch.no_grad()
def evaluate(model, images, labels, info, batch_size=1000, tta="none", device="cpu") -> dict:
    """Cross-entropy and accuracy of ``model`` on ``images uint8 (N, C, H, W)``, ``labels (N,)``.

    ``tta`` (test-time augmentation) averages the logits over several views of each image:
    ``'flip'`` the image and its mirror image; ``'flip-shift'`` those two, each also shifted by
    one pixel up, down, left and right (10 views). Returns ``dict(loss, accuracy)`` for the
    chosen views, plus ``accuracy_plain`` (one view) and, with ``'flip-shift'``,
    ``accuracy_flip`` (two views) from the same forward passes.
    """
    tta = {True: "flip", False: "none", None: "none"}.get(tta, tta)
    if tta not in TTA_MODES:
        raise ValueError(f"unknown tta {tta!r}: expected one of {TTA_MODES}")
    was_training = model.training
    model.eval()
    total_loss, correct, correct_plain, correct_flip = 0.0, 0, 0, 0
    shifts = [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)] if tta == "flip-shift" else [(0, 0)]
    loader = vdata.BatchLoader(images, labels, batch_size, info["mean"], info["std"], device=device)
    for x, y in loader:
        logits = model(x)                                    # (B, num_classes)
        correct_plain += (logits.argmax(-1) == y).sum().item()
        if tta != "none":
            logits = logits + model(x.flip(-1))
            correct_flip += (logits.argmax(-1) == y).sum().item()
            for dy, dx in shifts[1:]:
                shifted = _shift(x, dy, dx)
                logits = logits + model(shifted) + model(shifted.flip(-1))
            logits = logits / (2 * len(shifts))
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
    model.train(was_training)
    result = dict(loss=total_loss / len(labels), accuracy=correct / len(labels))
    if tta != "none":
        result["accuracy_plain"] = correct_plain / len(labels)
    if tta == "flip-shift":
        result["accuracy_flip"] = correct_flip / len(labels)
    return result


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _threads_of(option) -> int:
    return option if isinstance(option, int) else option[0]


def _splits_of(option) -> int:
    return 1 if isinstance(option, int) else option[1]


def _label(option):
    """How an option appears in the history: ``2`` (threads) or ``'1x2'`` (1 thread in each of 2 batch slices)."""
    return option if isinstance(option, int) else f"{option[0]}x{option[1]}"


class ThreadTuner:
    """Keep the fastest of several ways to use the CPU cores, re-checked while training.

    An option is a number of torch threads (``2``), or ``(threads, splits)``: the batch is cut
    into ``splits`` slices that run forward and backward at the same time in their own Python
    threads, each op on ``threads`` cores (see :func:`_forward_backward`). For a small model,
    ``(1, 2)`` keeps both cores busy with one synchronisation per step, where ``2`` threads
    synchronise inside every operation.

    On a shared machine, all-cores parallelism can be many times *slower* than one thread
    (every parallel operation waits for a thread that another program has taken off its core),
    while on an idle machine it is nearly twice as fast. Every ``interval`` seconds the tuner
    times a few real training steps with each option (fewest threads first) and keeps the
    fastest; an option that is clearly slower is dropped after one step, and the interval doubles
    while the answer stays the same. Three steps in a row at over twice the timed speed (the
    load changed) start a new check at once. Used for timed CPU runs (``threads=0``); it changes
    only speed, not the method. ``splits`` is the current option's number of batch slices.
    """

    def __init__(self, options, interval: float = 60.0, steps_per_option: int = 3, max_interval: float = 240.0):
        # fewest threads first: the safe baseline
        self.options = sorted(set(options), key=lambda o: (_threads_of(o) * _splits_of(o), _splits_of(o)))
        self.best = self.options[0]
        self.base_interval, self.interval, self.max_interval = interval, interval, max_interval
        self.steps_per_option = steps_per_option
        self.next_probe = 0.0
        self.plan: list = []
        self.samples: dict = {}
        self.choices: list[dict] = []
        self.slow_steps = 0
        self.splits = 1
        self.warmed = {self.best}     # an option's first step pays one-off costs (new threads, allocations): not timed
        self._use(self.best)

    def _use(self, option) -> None:
        if torch.get_num_threads() != _threads_of(option):
            torch.set_num_threads(_threads_of(option))
        self.splits = _splits_of(option)

    def before_step(self, now: float) -> None:
        if not self.plan and len(self.options) > 1 and now >= self.next_probe:
            # Time the safest option first (fewest threads: at worst about cores-times slower),
            # so that an option which the machine's load makes far slower is dropped after one step.
            self.plan = [o for o in self.options
                         for _ in range(self.steps_per_option + (o not in self.warmed))]
            self.samples = {}
        self._use(self.plan[0] if self.plan else self.best)

    def after_step(self, seconds: float, now: float, step: int) -> None:
        if not self.plan:
            # The load changed (3 steps in a row at over twice the timed speed): check again now.
            reference = min(self.samples.get(self.best, [math.inf]))
            self.slow_steps = self.slow_steps + 1 if seconds > 2 * reference else 0
            if self.slow_steps >= 3:
                self.next_probe, self.slow_steps = now, 0
            return
        option = self.plan.pop(0)
        if option not in self.warmed:
            self.warmed.add(option)
            return
        self.samples.setdefault(option, []).append(seconds)
        others = [min(v) for k, v in self.samples.items() if k != option]
        if others and seconds > 2 * min(others):               # clearly slower: stop timing it
            self.plan = [o for o in self.plan if o != option]
        if not self.plan:
            previous = self.best
            self.best = min(self.samples, key=lambda k: min(self.samples[k]))
            # a first check, or a changed answer, is re-checked soon; the same answer less and less often
            same = self.best == previous and bool(self.choices)
            self.interval = min(self.max_interval, self.interval * 2) if same else self.base_interval
            self.next_probe = now + self.interval
            self.choices.append(dict(step=step, threads=_label(self.best),
                                     ms_per_step={_label(k): round(1000 * min(v), 1) for k, v in self.samples.items()}))
            self._use(self.best)


def _cpu_options() -> list:
    """What a timed CPU run chooses from: one thread, all cores, and one thread per batch slice on each core."""
    cores = available_cores()
    return [1, cores, (1, cores)]


def _forward_backward(model, x, y, teacher_batch, config: TrainConfig, splits: int = 1, pool=None):
    """One batch's loss, backward included: returns ``(loss, correct)`` (batch-mean loss, number right).

    With ``splits > 1`` the batch is cut into that many slices, each run forward and backward in
    a thread of ``pool`` at the same time; each slice's loss is weighted by its share of the
    batch, so the gradients accumulated in the shared parameters are the whole batch's (PyTorch
    adds concurrent backward passes' gradients under a lock). The model must not depend on the
    batch as a whole (no BatchNorm), which holds for the ViT.
    """
    size = len(y)

    def run(part: slice):
        logits = model(x[part])                                               # (b, num_classes)
        loss = F.cross_entropy(logits, y[part], label_smoothing=config.label_smoothing)
        if teacher_batch is not None:
            if config.distill == "soft":
                distill_loss = distillation_loss(logits, teacher_batch[part], config.distill_temperature)
            else:
                distill_loss = F.cross_entropy(logits, teacher_batch[part].argmax(-1))
            loss = (1 - config.distill_weight) * loss + config.distill_weight * distill_loss
        loss = loss * (len(logits) / size)
        loss.backward()
        return loss.detach(), (logits.argmax(-1) == y[part]).sum()

    if splits <= 1 or pool is None:
        return run(slice(None))
    return _combine(pool.map(run, _slices(size, splits)))


def _slices(size: int, splits: int) -> list[slice]:
    bounds = [round(i * size / splits) for i in range(splits + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def _combine(results):
    results = list(results)
    return sum(r[0] for r in results), sum(r[1] for r in results)


class _SlicedForward:
    """``model(x)`` computed as ``splits`` slices of the batch in parallel threads (evaluation only)."""

    def __init__(self, model, splits: int, pool):
        self.model, self.splits, self.pool = model, splits, pool

    def __getattr__(self, name):                  # .training, .eval(), .train() ... of the model
        return getattr(self.model, name)

    def __call__(self, x):
        def run(part):
            with torch.no_grad():                 # grad mode is per thread
                return self.model(x[part])
        return torch.cat(list(self.pool.map(run, _slices(len(x), self.splits))))   # (B, num_classes)


def _teacher_phase(config, history, images, labels, info, deadline, reserve, device, validation=None):
    """Train the distillation teacher, then return its logits for every training image ``(N, K)``.

    Timed runs give the teacher ``teacher_share`` of the time left for training; counted runs
    ``teacher_epochs``. What the teacher did goes into ``history['teacher']``.
    """
    from .teacher import teacher_logits, train_teacher

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


def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def train(config: TrainConfig | None = None, *, start_time: float | None = None, **overrides):
    """Train a ViT; returns ``(model, history)``.

    ``config`` (or keyword overrides of :class:`TrainConfig`, e.g. ``train(minutes=2, dim=64)``)
    defines the run. ``start_time`` (``time.time()``) is when the budget started (the command
    line passes the process start); default now. ``history`` is the dict saved as
    ``history.json``.
    """
    threads_before = torch.get_num_threads()
    try:
        return _train(config, start_time, overrides)
    finally:
        torch.set_num_threads(threads_before)        # thread settings do not leak out of a run


def _train(config, start_time, overrides):
    start = time.time() if start_time is None else start_time
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    fast = os.environ.get("VITREF_FAST", "") not in ("", "0")
    if fast:
        config = dataclasses.replace(config, train_limit=config.train_limit or 2048,
                                     test_limit=config.test_limit or 1000)
    if config.minutes is None and config.epochs is None and config.steps is None:
        raise ValueError("give a budget: minutes, epochs or steps")
    if config.dataset not in vdata.DATASET_INFO:
        raise ValueError(f"unknown dataset {config.dataset!r}: expected one of {sorted(vdata.DATASET_INFO)}")
    device = _resolve_device(config.device)
    tuner = None
    adaptive = config.threads == 0 or (config.threads is None and config.minutes is not None)
    if adaptive and device.type == "cpu" and available_cores() > 1:
        tuner = ThreadTuner(_cpu_options())
    elif config.threads:
        torch.set_num_threads(config.threads)
    deadline = start + config.minutes * 60 if config.minutes is not None else math.inf
    info = vdata.DATASET_INFO[config.dataset]

    # data: whole datasets as uint8 tensors
    train_images, train_labels = vdata.load_tensors(config.dataset, train=True)
    test_images, test_labels = vdata.load_tensors(config.dataset, train=False)
    if config.val_size:
        split = torch.randperm(len(train_labels), generator=torch.Generator().manual_seed(12345))
        val_index, train_index = split[:config.val_size], split[config.val_size:]
        val_images, val_labels = train_images[val_index], train_labels[val_index]
        train_images, train_labels = train_images[train_index], train_labels[train_index]
    if config.train_limit:
        train_images, train_labels = train_images[:config.train_limit], train_labels[:config.train_limit]
    if config.test_limit:
        test_images, test_labels = test_images[:config.test_limit], test_labels[:config.test_limit]
    data_seconds = time.time() - start

    torch.manual_seed(config.seed)
    model = build_model(config, info)
    if config.pos_init == "sincos":
        init_sincos_positions(model)
    elif config.pos_init != "random":
        raise ValueError(f"unknown pos_init {config.pos_init!r}: expected 'random' or 'sincos'")
    model = model.to(device)
    num_parameters = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if config.compile else model
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                                  betas=(0.9, config.beta2), fused=device.type in ("cpu", "cuda"))
    generator = torch.Generator().manual_seed(config.seed + 1)
    loader = vdata.BatchLoader(train_images, train_labels, config.batch_size, info["mean"], info["std"],
                               shuffle=True, generator=generator,
                               crop_padding=config.crop_padding if config.crop_from <= 0 else 0,
                               flip=config.flip, erase=config.erase, drop_last=True, device=device)
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise ValueError(f"batch size {config.batch_size} is larger than the {len(train_labels)} training images")
    max_steps = math.inf
    if config.steps is not None:
        max_steps = config.steps
    if config.epochs is not None:
        max_steps = min(max_steps, math.ceil(config.epochs * steps_per_epoch))

    # Time kept back for the final test evaluation, re-estimated from the measured step time:
    # a forward pass costs about a third of a training step per image; times the TTA views; x1.5 margin.
    def final_reserve(seconds_per_image: float, window: float = math.inf) -> float:
        passes = {"none": 1, "flip": 2, "flip-shift": 10}.get(config.tta, 10)
        # at most a third of the training window: a tiny budget still trains (and may run over)
        return min(window / 3, 2.0 + 1.5 * len(test_labels) * passes * seconds_per_image / 3)

    history = dict(config=dataclasses.asdict(config), model=getattr(model, "config", None),
                   num_parameters=num_parameters, device=str(device), threads=torch.get_num_threads(),
                   torch=torch.__version__, steps_per_epoch=steps_per_epoch, epochs=[],
                   data_seconds=round(data_seconds, 2))
    soft_targets = None
    if config.distill != "none":
        soft_targets = _teacher_phase(config, history, train_images, train_labels, info, deadline,
                                      final_reserve(2e-4), device,
                                      (val_images, val_labels) if config.val_size else None)
        loader.targets = soft_targets
    progress_bar = None
    if config.progress:
        from tqdm.auto import tqdm

        progress_bar = tqdm(total=None if max_steps == math.inf else max_steps, unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    model.train()
    step, epoch, progress = 0, 0, 0.0
    ema_model = None
    if config.ema:
        from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

        ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema), use_buffers=True)
    slice_pool = None
    if tuner is not None and any(_splits_of(o) > 1 for o in tuner.options):
        from concurrent.futures import ThreadPoolExecutor

        slice_pool = ThreadPoolExecutor(max(_splits_of(o) for o in tuner.options), thread_name_prefix="vitref-slice")
    train_start = time.time()
    window = deadline - train_start
    train_deadline = deadline - final_reserve(2e-4, window)   # provisional, until steps are timed
    seconds_per_step = None
    done = False
    while not done:
        epoch += 1
        loss_sum, correct, seen, epoch_start = 0.0, 0, 0, time.time()
        for batch in loader:
            x, y = batch[0], batch[1]                                          # (B, C, H, W), (B,)
            if progress >= 1.0 or step >= max_steps:
                done = True
                break
            lr = lr_at(progress, config)
            loader.crop_padding = config.crop_padding if progress >= config.crop_from else 0   # for the next batch
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_start = time.time()
            if tuner is not None and step >= 1:                 # step 0 includes one-off warm-up costs
                tuner.before_step(step_start)
            optimizer.zero_grad(set_to_none=True)
            teacher_batch = batch[2] if soft_targets is not None else None   # (B, num_classes) teacher logits
            loss, batch_correct = _forward_backward(step_model, x, y, teacher_batch, config,
                                                    tuner.splits if tuner is not None else 1, slice_pool)
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            if ema_model is not None:
                ema_model.update_parameters(model)
            step += 1
            if tuner is not None and step >= 2:
                tuner.after_step(time.time() - step_start, time.time(), step)
            loss_sum = loss_sum + loss * len(y)                               # kept on the device: no sync
            correct = correct + batch_correct
            seen += len(y)
            now = time.time()
            if step == 2:                       # step 1 includes warm-up costs (allocation, compilation)
                timing_start, timing_steps = now, step
            elif step > 2:
                seconds_per_step = (now - timing_start) / (step - timing_steps)
                if (step % 20 == 0 or step == 3) and math.isfinite(deadline):
                    train_deadline = deadline - final_reserve(seconds_per_step / config.batch_size, window)
            # progress: of the time budget (timed runs) or of the steps (counted runs), whichever is ahead
            time_progress = (now - train_start) / max(1e-9, train_deadline - train_start)
            step_progress = step / max_steps
            progress = max(progress, time_progress, step_progress)
            if progress_bar is not None:
                if math.isfinite(deadline) and progress > 0:
                    progress_bar.total = max(step, round(step / progress))
                progress_bar.update(1)
                if step % 10 == 0 or step == 1:
                    progress_bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", refresh=False)
        if seen:
            record = dict(epoch=epoch, steps=step, fraction=round(seen / (steps_per_epoch * config.batch_size), 4),
                          train_loss=float(loss_sum) / seen, train_accuracy=int(correct) / seen, lr=lr,
                          seconds=round(time.time() - start, 2), epoch_seconds=round(time.time() - epoch_start, 2))
            if config.val_size:
                result = evaluate(step_model, val_images, val_labels, info, config.eval_batch_size, config.tta, device)
                record.update({f"val_{k}": v for k, v in result.items()})
            if config.eval_every_epoch:
                result = evaluate(step_model, test_images, test_labels, info, config.eval_batch_size, config.tta, device)
                record.update({f"test_{k}": v for k, v in result.items()})
            history["epochs"].append(record)
            if progress_bar is not None:
                extra = f" val_acc={record['val_accuracy']:.4f}" if config.val_size else ""
                progress_bar.write(f"epoch {epoch}: train_loss={record['train_loss']:.4f} "
                                   f"train_acc={record['train_accuracy']:.4f}{extra} ({record['seconds']:.0f} s)")
    if progress_bar is not None:
        progress_bar.close()
    train_seconds = time.time() - train_start
    if ema_model is not None:                       # evaluate and save the averaged weights
        model.load_state_dict(ema_model.module.state_dict())

    eval_start = time.time()
    eval_model = step_model
    if tuner is not None and tuner.splits > 1:      # evaluate the way the tuner found fastest
        eval_model = _SlicedForward(step_model, tuner.splits, slice_pool)
    result = evaluate(eval_model, test_images, test_labels, info, config.eval_batch_size, config.tta, device)
    if slice_pool is not None:
        slice_pool.shutdown()
    if tuner is not None:
        history["thread_choices"] = tuner.choices
    history.update(steps=step, epochs_run=round(step / steps_per_epoch, 3), train_seconds=round(train_seconds, 2),
                   seconds_per_step=seconds_per_step, eval_seconds=round(time.time() - eval_start, 2),
                   **{f"test_{k}": v for k, v in result.items()})
    if config.val_size:
        if ema_model is not None:
            result = evaluate(step_model, val_images, val_labels, info, config.eval_batch_size, config.tta, device)
            history.update({f"val_{k}": v for k, v in result.items()})
        elif history["epochs"] and "val_accuracy" in history["epochs"][-1]:
            history.update({k: v for k, v in history["epochs"][-1].items() if k.startswith("val_")})
    if config.out is not None:
        run_dir = Path(config.out) / (config.name or f"{config.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")
        run_dir.mkdir(parents=True, exist_ok=True)
        torch.save(dict(state_dict=model.state_dict(), model=getattr(model, "config", None),
                        config=dataclasses.asdict(config)), run_dir / "model.pt")
        history["run_dir"] = str(run_dir)
    history["seconds"] = round(time.time() - start, 2)
    if config.out is not None:
        (run_dir / "history.json").write_text(json.dumps(history, indent=1))
    return model, history


def load_checkpoint(path) -> torch.nn.Module:
    """The :class:`~vitref.vit.ViT` saved in ``model.pt`` by :func:`train`, in eval mode."""
    from .vit import ViT

    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = ViT(**saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def _parse_args(argv=None) -> TrainConfig:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(prog="python -m vitref.train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="start from a named recipe; other options override it")
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not None else None
        if f.name == "dataset":
            parser.add_argument(flag, choices=sorted(vdata.DATASET_INFO), default=None)
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=f"(default {f.default})")
        elif f.name in ("minutes", "epochs"):
            parser.add_argument(flag, type=float, default=None)
        elif f.name == "threads":
            parser.add_argument(flag, type=int, default=None,
                                help="torch threads (default: timed CPU runs pick 1 or all cores as they go; 0 forces that)")
        elif f.name in ("steps", "train_limit", "test_limit"):
            parser.add_argument(flag, type=int, default=None)
        elif f.name == "grad_clip":
            parser.add_argument(flag, type=float, default=None, help=f"(default {f.default}; 0 disables)")
        elif f.name == "tta":
            parser.add_argument(flag, choices=TTA_MODES, default=None, help=f"(default {f.default})")
        elif f.name in ("out", "name", "device", "arch", "pos_init"):
            parser.add_argument(flag, type=str, default=None, help=f"(default {f.default})")
        else:
            parser.add_argument(flag, type=kind, default=None, help=f"(default {f.default})")
    args = vars(parser.parse_args(argv))
    config = dataclasses.replace(defaults, **PRESETS.get(args.pop("preset") or "", {}))
    given = {k: v for k, v in args.items() if v is not None}
    if args.get("out") == "none":
        given["out"] = None
    config = dataclasses.replace(config, **given)
    if config.minutes is None and config.epochs is None and config.steps is None:
        config = dataclasses.replace(config, minutes=10.0)
    return config


def main(argv=None) -> None:
    start = _process_start_time()
    config = _parse_args(argv)
    model, history = train(config, start_time=start)
    where = f" in {history['run_dir']}" if "run_dir" in history else ""
    print(f"{history['num_parameters']:,} parameters, {history['steps']} steps "
          f"({history['epochs_run']} epochs), saved{where}" if where else
          f"{history['num_parameters']:,} parameters, {history['steps']} steps ({history['epochs_run']} epochs)")
    print(f"test_accuracy={history['test_accuracy']:.4f} wall_seconds={time.time() - start:.0f}")


if __name__ == "__main__":
    main()
