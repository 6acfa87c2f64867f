"""The training loop: :func:`train` runs a whole training run and returns ``(model, history)``.

See :mod:`vitref.training` for the budget, the default recipe and the outputs of a run.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import data as vdata
from .config import TrainConfig, resolve_device
from .evaluate import evaluate, forward_passes
from .models import build_model, init_sincos_positions
from .optim import lr_at, param_groups
from .teacher import distillation_loss, distillation_targets
from .tuner import SlicedForward, ThreadTuner, available_cores, batch_slices, cpu_options


def forward_backward(model, x, y, teacher_batch, config: TrainConfig, splits: int = 1, pool=None):
    """One batch's loss, backward included: returns ``(loss, correct)`` (batch-mean loss, number right).

    With ``splits > 1`` the batch is cut into that many slices, each run forward and backward in
    a thread of ``pool`` at the same time; each slice's loss is weighted by its share of the
    batch, so the gradients accumulated in the shared parameters are the whole batch's (PyTorch
    adds concurrent backward passes' gradients under a lock). The model must not depend on the
    batch as a whole (no BatchNorm), which holds for the ViT. ``teacher_batch (B, K)`` holds the
    distillation teacher's logits for the batch, or ``None``.
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
    results = list(pool.map(run, batch_slices(size, splits)))
    return sum(r[0] for r in results), sum(r[1] for r in results)



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
    device = resolve_device(config.device)
    tuner = None
    adaptive = config.threads == 0 or (config.threads is None and config.minutes is not None)
    if adaptive and device.type == "cpu" and available_cores() > 1:
        tuner = ThreadTuner(cpu_options())
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
    optimizer = torch.optim.AdamW(param_groups(model, config.weight_decay), lr=config.lr,
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
        passes = forward_passes(config.tta)
        # at most a third of the training window: a tiny budget still trains (and may run over)
        return min(window / 3, 2.0 + 1.5 * len(test_labels) * passes * seconds_per_image / 3)

    history = dict(config=dataclasses.asdict(config), model=getattr(model, "config", None),
                   num_parameters=num_parameters, device=str(device), threads=torch.get_num_threads(),
                   torch=torch.__version__, steps_per_epoch=steps_per_epoch, epochs=[],
                   data_seconds=round(data_seconds, 2))
    soft_targets = None
    if config.distill != "none":
        soft_targets = distillation_targets(config, history, train_images, train_labels, info, deadline,
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
    if tuner is not None and tuner.max_splits > 1:
        from concurrent.futures import ThreadPoolExecutor

        slice_pool = ThreadPoolExecutor(tuner.max_splits, thread_name_prefix="vitref-slice")
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
            loss, batch_correct = forward_backward(step_model, x, y, teacher_batch, config,
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
                result = evaluate(step_model, test_images, test_labels, info, config.eval_batch_size, config.tta,
                                  device)
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
        eval_model = SlicedForward(step_model, tuner.splits, slice_pool)
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


__all__ = ["train", "forward_backward"]
