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
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .. import data as vdata
from .config import TrainConfig, autocast_dtype, resolve_device, resolved
from .evaluate import evaluate, forward_passes
from .graphed import CapturedStep, capturable_adamw, set_learning_rate
from .models import build_model, init_sincos_positions
from .optim import lr_at, param_groups
from .teacher import distillation_loss, distillation_targets
from .tuner import SlicedForward, ThreadTuner, available_cores, batch_slices, cpu_options

if TYPE_CHECKING:
    from torch.optim.swa_utils import AveragedModel


def forward_backward(model, x, y, teacher_batch, config: TrainConfig, splits: int = 1, pool=None):
    """One batch's loss, backward included: returns ``(loss, correct)`` (batch-mean loss, number right).

    With ``splits > 1`` the batch is cut into that many slices, each run forward and backward in
    a thread of ``pool`` at the same time; each slice's loss is weighted by its share of the
    batch, so the gradients accumulated in the shared parameters are the whole batch's (PyTorch
    adds concurrent backward passes' gradients under a lock). The model must not depend on the
    batch as a whole (no BatchNorm), which holds for the ViT. ``teacher_batch (B, K)`` holds the
    distillation teacher's logits for the batch, or ``None``. With ``config.precision`` bf16 the
    forward pass and the loss run under autocast (per thread: autocast is thread-local).
    """
    size = len(y)
    dtype = autocast_dtype(config.precision, x.device, config.timed)

    def run(part: slice):
        with torch.autocast(x.device.type, dtype=dtype) if dtype is not None else nullcontext():
            logits = model(x[part])                                           # (b, num_classes)
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
    threads_before, precision_before = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        return _train(config, start_time, overrides)
    finally:
        torch.set_num_threads(threads_before)        # thread and precision settings do not leak out of a run
        torch.set_float32_matmul_precision(precision_before)


def _train(config: TrainConfig | None, start_time: float | None, overrides: dict):
    """The run, one named step after another (see :func:`train`)."""
    start = time.time() if start_time is None else start_time
    config = _settings(config, overrides)
    device = resolve_device(config.device)
    config = resolved(config, device)                  # 'auto' precision, compile=None: what they mean here
    if config.tf32:
        torch.set_float32_matmul_precision("high")     # float32 matrix products on TF32 units (GPU)
    tuner = _thread_tuner(config, device)
    deadline = start + config.minutes * 60 if config.minutes is not None else math.inf
    info = vdata.DATASET_INFO[config.dataset]
    data = _load_data(config)
    data_seconds = time.time() - start

    model, step_model, optimizer = _model_and_optimizer(config, info, device)
    loader = _batch_loader(config, info, data, device)
    steps_per_epoch = len(loader)
    max_steps = _max_steps(config, steps_per_epoch)
    history = dict(config=dataclasses.asdict(config), model=getattr(model, "config", None),
                   num_parameters=sum(p.numel() for p in model.parameters()), device=str(device),
                   threads=torch.get_num_threads(), torch=torch.__version__, steps_per_epoch=steps_per_epoch,
                   epochs=[], data_seconds=round(data_seconds, 2))
    if config.distill != "none":              # a teacher first; its logits ride along with each batch
        loader.targets = distillation_targets(config, history, data.train_images, data.train_labels, info,
                                              deadline, _final_reserve(config, len(data.test_labels), 2e-4),
                                              device, data.validation)

    run = _Run(config, model, step_model, optimizer, loader, tuner, data, info, device, start,
               distilled=config.distill != "none", progress_bar=_progress_bar(config, max_steps))
    model.train()
    run.ema_model = _ema_model(config, model)
    run.slice_pool = _slice_pool(tuner)
    if config.cuda_graph:
        run.captured_step = CapturedStep(lambda x, y, teacher: _update(run, x, y, teacher), device)
    budget = _Budget(config, deadline, max_steps, len(data.test_labels))
    epoch = 0
    while not budget.done:
        epoch += 1
        record = _epoch(run, epoch, budget, steps_per_epoch)
        if record is not None:
            history["epochs"].append(record)
    if run.progress_bar is not None:
        run.progress_bar.close()
    train_seconds = time.time() - budget.start
    if run.captured_step is not None:
        history["captured_step"] = run.captured_step.captured     # False on the CPU (eager there)
    if run.ema_model is not None:                   # evaluate and save the averaged weights
        model.load_state_dict(run.ema_model.module.state_dict())

    _final_evaluation(run, history, budget, train_seconds, steps_per_epoch)
    if config.out is not None:
        run_dir = _save_checkpoint(config.out, config, model, history)
    history["seconds"] = round(time.time() - start, 2)
    if config.out is not None:
        (run_dir / "history.json").write_text(json.dumps(history, indent=1))
    return model, history


def _settings(config: TrainConfig | None, overrides: dict) -> TrainConfig:
    """``config`` (default :class:`TrainConfig`) with ``overrides``, limited to 2,048 training and
    1,000 test images under ``VITREF_FAST``; it must have a budget and a known dataset."""
    config = dataclasses.replace(config or TrainConfig(), **overrides)
    if os.environ.get("VITREF_FAST", "") not in ("", "0"):
        config = dataclasses.replace(config, train_limit=config.train_limit or 2048,
                                     test_limit=config.test_limit or 1000)
    if config.minutes is None and config.epochs is None and config.steps is None:
        raise ValueError("give a budget: minutes, epochs or steps")
    if config.cuda_graph and config.compile:
        raise ValueError("cuda_graph and compile are two ways to cut launches: choose one")
    if config.dataset not in vdata.DATASET_INFO:
        raise ValueError(f"unknown dataset {config.dataset!r}: expected one of {sorted(vdata.DATASET_INFO)}")
    return config


def _thread_tuner(config: TrainConfig, device: torch.device) -> ThreadTuner | None:
    """The tuner that picks how a CPU run uses its cores (``threads=0``, or a timed run that fixes
    no thread count, on a machine with several cores); else the fixed thread count is set."""
    adaptive = config.threads == 0 or (config.threads is None and config.timed)
    if adaptive and device.type == "cpu" and available_cores() > 1:
        if config.compile:
            # A compiled model is compiled again for each thread count (~25 s each), and two slice
            # threads compiling it at once can deadlock: a compiled run keeps all cores, untuned.
            torch.set_num_threads(available_cores())
            return None
        return ThreadTuner(cpu_options())
    if config.threads:
        torch.set_num_threads(config.threads)
    return None


@dataclasses.dataclass
class _Data:
    """The run's images, uint8 ``(N, C, H, W)``, and labels ``(N,)``: training, test and, with
    ``val_size``, validation (a seeded split held out of the training images)."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor
    val_images: torch.Tensor | None = None
    val_labels: torch.Tensor | None = None

    @property
    def validation(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(images, labels)`` of the validation split, or None without one."""
        if self.val_images is None or self.val_labels is None:
            return None
        return self.val_images, self.val_labels


def _load_data(config: TrainConfig) -> _Data:
    """Whole datasets as uint8 tensors, split and limited as ``config`` says."""
    train_images, train_labels = vdata.load_tensors(config.dataset, train=True)     # (N, C, H, W), (N,)
    test_images, test_labels = vdata.load_tensors(config.dataset, train=False)
    data = _Data(train_images, train_labels, test_images, test_labels)
    if config.val_size:
        split = torch.randperm(len(train_labels), generator=torch.Generator().manual_seed(12345))
        val_index, train_index = split[:config.val_size], split[config.val_size:]
        data.val_images, data.val_labels = train_images[val_index], train_labels[val_index]
        data.train_images, data.train_labels = train_images[train_index], train_labels[train_index]
    if config.train_limit:
        data.train_images = data.train_images[:config.train_limit]
        data.train_labels = data.train_labels[:config.train_limit]
    if config.test_limit:
        data.test_images, data.test_labels = test_images[:config.test_limit], test_labels[:config.test_limit]
    return data


def _model_and_optimizer(config: TrainConfig, info: dict, device: torch.device):
    """``(model, step_model, optimizer)``: the seeded model on ``device``, the module the steps call
    (``torch.compile``'d with ``compile=True``, else the model) and AdamW over its parameters."""
    torch.manual_seed(config.seed)
    model = build_model(config, info)
    if config.pos_init == "sincos":
        init_sincos_positions(model)
    elif config.pos_init != "random":
        raise ValueError(f"unknown pos_init {config.pos_init!r}: expected 'random' or 'sincos'")
    model = model.to(device)
    step_model = torch.compile(model) if config.compile else model
    groups = param_groups(model, config.weight_decay)
    if config.cuda_graph:
        return model, step_model, capturable_adamw(groups, config, device)
    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, config.beta2), fused=device.type in ("cpu", "cuda"))
    return model, step_model, optimizer


def _batch_loader(config: TrainConfig, info: dict, data: _Data, device: torch.device) -> vdata.BatchLoader:
    """Shuffled, augmented training batches ``(B, C, H, W)`` (full batches only), seeded by ``seed + 1``."""
    generator = torch.Generator().manual_seed(config.seed + 1)
    loader = vdata.BatchLoader(data.train_images, data.train_labels, config.batch_size, info["mean"], info["std"],
                               shuffle=True, generator=generator,
                               crop_padding=config.crop_padding if config.crop_from <= 0 else 0,
                               flip=config.flip, erase=config.erase, drop_last=True, device=device)
    if len(loader) == 0:
        raise ValueError(f"batch size {config.batch_size} is larger than the {len(data.train_labels)} "
                         f"training images")
    return loader


def _max_steps(config: TrainConfig, steps_per_epoch: int) -> float:
    """The step budget: ``steps``, ``epochs`` (in steps), the smaller of both, or infinity (timed runs)."""
    max_steps = math.inf
    if config.steps is not None:
        max_steps = config.steps
    if config.epochs is not None:
        max_steps = min(max_steps, math.ceil(config.epochs * steps_per_epoch))
    return max_steps


def _final_reserve(config: TrainConfig, test_images: int, seconds_per_image: float, window: float = math.inf) -> float:
    """Seconds kept back for the final test evaluation, re-estimated from the measured step time:
    a forward pass costs about a third of a training step per image; times the TTA views; x1.5
    margin; at most a third of the training window (a tiny budget still trains, and may run over)."""
    passes = forward_passes(config.tta)
    return min(window / 3, 2.0 + 1.5 * test_images * passes * seconds_per_image / 3)


def _progress_bar(config: TrainConfig, max_steps: float) -> Any:
    """A tqdm bar on stderr with ``progress=True``, else None."""
    if not config.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=None if max_steps == math.inf else max_steps, unit="step", dynamic_ncols=True,
                file=sys.stderr)


def _ema_model(config: TrainConfig, model: torch.nn.Module) -> AveragedModel | None:
    """The exponential moving average of the weights with ``ema`` (a decay), else None."""
    if not config.ema:
        return None
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema), use_buffers=True)


def _slice_pool(tuner: ThreadTuner | None) -> ThreadPoolExecutor | None:
    """The threads that run a batch's slices at once, when the tuner may choose slices; else None."""
    if tuner is None or tuner.max_splits <= 1:
        return None
    return ThreadPoolExecutor(tuner.max_splits, thread_name_prefix="vitref-slice")


@dataclasses.dataclass
class _Run:
    """What the training steps use: the settings, the model and the module the steps call, the
    optimizer and loader, the thread tuner and slice threads, the data, and the run's start."""

    config: TrainConfig
    model: torch.nn.Module
    step_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: vdata.BatchLoader
    tuner: ThreadTuner | None
    data: _Data
    info: dict
    device: torch.device
    start: float                       # time.time() when the run's budget started
    distilled: bool                    # batches carry the teacher's logits as a third element
    progress_bar: Any = None                         # a tqdm bar, or None
    ema_model: AveragedModel | None = None
    slice_pool: ThreadPoolExecutor | None = None
    captured_step: CapturedStep | None = None        # cuda_graph=True: the step, recorded and replayed


class _Budget:
    """Where training stands against its budget: ``step`` (optimizer steps taken) and ``progress``
    (0 -> 1: the share of the training time used (timed runs) or of the steps (counted runs),
    whichever is ahead). Training time ends at ``train_deadline``: the run's deadline less the
    reserve for the final evaluation, re-estimated as steps are timed."""

    def __init__(self, config: TrainConfig, deadline: float, max_steps: float, test_images: int):
        self.config, self.deadline, self.max_steps, self.test_images = config, deadline, max_steps, test_images
        self.step, self.progress, self.done = 0, 0.0, False
        self.seconds_per_step: float | None = None
        self.timing_start, self.timing_steps = 0.0, 0
        self.start = time.time()
        self.window = deadline - self.start
        # provisional, until steps are timed
        self.train_deadline = deadline - _final_reserve(config, test_images, 2e-4, self.window)

    def spent(self) -> bool:
        """Whether the budget is used up (then ``done`` is set)."""
        self.done = self.progress >= 1.0 or self.step >= self.max_steps
        return self.done

    def after_step(self, now: float) -> None:
        """Step ``step`` ended at ``now``: the step time, the training deadline, the progress."""
        if self.step == 2:                  # step 1 includes warm-up costs (allocation, compilation)
            self.timing_start, self.timing_steps = now, self.step
        elif self.step > 2:
            self.seconds_per_step = (now - self.timing_start) / (self.step - self.timing_steps)
            if (self.step % 20 == 0 or self.step == 3) and math.isfinite(self.deadline):
                self.train_deadline = self.deadline - _final_reserve(
                    self.config, self.test_images, self.seconds_per_step / self.config.batch_size, self.window)
        # progress: of the time budget (timed runs) or of the steps (counted runs), whichever is ahead
        time_progress = (now - self.start) / max(1e-9, self.train_deadline - self.start)
        step_progress = self.step / self.max_steps
        self.progress = max(self.progress, time_progress, step_progress)


def _epoch(run: _Run, epoch: int, budget: _Budget, steps_per_epoch: int) -> dict | None:
    """One pass over the training batches, or less when the budget ends inside it: its record
    for ``history['epochs']`` (with validation and test results where asked), None when no
    step ran."""
    config = run.config
    loss_sum, correct, seen, epoch_start = 0.0, 0, 0, time.time()
    lr = 0.0
    for batch in run.loader:
        if budget.spent():
            break
        loss, batch_correct, lr = _step(run, batch, budget)
        y = batch[1]                                                             # (B,)
        loss_sum = loss_sum + loss * len(y)                                      # kept on the device: no sync
        correct = correct + batch_correct
        seen += len(y)
        budget.after_step(time.time())
        if run.progress_bar is not None:
            _show_step(run.progress_bar, budget, epoch, loss, lr)
    if not seen:
        return None
    record = dict(epoch=epoch, steps=budget.step, fraction=round(seen / (steps_per_epoch * config.batch_size), 4),
                  train_loss=float(loss_sum) / seen, train_accuracy=int(correct) / seen, lr=lr,
                  seconds=round(time.time() - run.start, 2), epoch_seconds=round(time.time() - epoch_start, 2))
    if config.val_size:
        result = evaluate(run.model, run.data.val_images, run.data.val_labels, run.info, config.eval_batch_size,
                          config.tta, run.device)
        record.update({f"val_{k}": v for k, v in result.items()})
    if config.eval_every_epoch:
        result = evaluate(run.model, run.data.test_images, run.data.test_labels, run.info,
                          config.eval_batch_size, config.tta, run.device)
        record.update({f"test_{k}": v for k, v in result.items()})
    if run.progress_bar is not None:
        extra = f" val_acc={record['val_accuracy']:.4f}" if config.val_size else ""
        run.progress_bar.write(f"epoch {epoch}: train_loss={record['train_loss']:.4f} "
                               f"train_acc={record['train_accuracy']:.4f}{extra} ({record['seconds']:.0f} s)")
    return record


def _step(run: _Run, batch, budget: _Budget):
    """One optimizer step on ``batch`` ``(x (B, C, H, W), y (B,)[, teacher logits (B, K)])`` at the
    learning rate of the current progress, counted in ``budget.step``: ``(loss, correct, lr)``
    (the batch-mean loss and the number right, both on the device)."""
    config, tuner = run.config, run.tuner
    x, y = batch[0], batch[1]                                                  # (B, C, H, W), (B,)
    lr = lr_at(budget.progress, config)
    run.loader.crop_padding = config.crop_padding if budget.progress >= config.crop_from else 0   # for the next batch
    set_learning_rate(run.optimizer, lr)
    step_start = time.time()
    if tuner is not None and budget.step >= 1:              # step 0 includes one-off warm-up costs
        tuner.before_step(step_start)
    teacher_batch = batch[2] if run.distilled else None      # (B, num_classes) teacher logits
    if run.captured_step is not None:
        loss, batch_correct = run.captured_step(x, y, teacher_batch)
    else:
        loss, batch_correct = _update(run, x, y, teacher_batch, tuner.splits if tuner is not None else 1)
    if run.ema_model is not None:
        run.ema_model.update_parameters(run.model)
    budget.step += 1
    if tuner is not None and budget.step >= 2:
        tuner.after_step(time.time() - step_start, time.time(), budget.step)
    return loss, batch_correct, lr


def _update(run: _Run, x: torch.Tensor, y: torch.Tensor, teacher_batch: torch.Tensor | None, splits: int = 1):
    """The math of one optimizer step (what :class:`CapturedStep` records): gradients of the batch
    ``x (B, C, H, W)``, ``y (B,)``, clipped, then AdamW at the groups' learning rate; returns
    ``(loss, correct)`` on the device. No host synchronisation, so that a CUDA graph can record it."""
    run.optimizer.zero_grad(set_to_none=True)
    loss, batch_correct = forward_backward(run.step_model, x, y, teacher_batch, run.config, splits, run.slice_pool)
    if run.config.grad_clip:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.config.grad_clip)
    run.optimizer.step()
    return loss, batch_correct


def _show_step(progress_bar, budget: _Budget, epoch: int, loss: torch.Tensor, lr: float) -> None:
    """The progress bar after a step (its total re-estimated from the progress of timed runs)."""
    if math.isfinite(budget.deadline) and budget.progress > 0:
        progress_bar.total = max(budget.step, round(budget.step / budget.progress))
    progress_bar.update(1)
    if budget.step % 10 == 0 or budget.step == 1:
        progress_bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", refresh=False)


def _final_evaluation(run: _Run, history: dict, budget: _Budget, train_seconds: float, steps_per_epoch: int) -> None:
    """The test results of the trained (or averaged) weights, and the run's numbers, into ``history``;
    the validation results too (of the averaged weights, or of the last epoch)."""
    config, data = run.config, run.data
    eval_start = time.time()
    eval_model: torch.nn.Module | SlicedForward = run.model
    if run.tuner is not None and run.tuner.splits > 1:      # evaluate the way the tuner found fastest
        eval_model = SlicedForward(run.model, run.tuner.splits, run.slice_pool)
    result = evaluate(eval_model, data.test_images, data.test_labels, run.info, config.eval_batch_size, config.tta,
                      run.device)
    if run.slice_pool is not None:
        run.slice_pool.shutdown()
    if run.tuner is not None:
        history["thread_choices"] = run.tuner.choices
    history.update(steps=budget.step, epochs_run=round(budget.step / steps_per_epoch, 3),
                   train_seconds=round(train_seconds, 2), seconds_per_step=budget.seconds_per_step,
                   eval_seconds=round(time.time() - eval_start, 2), **{f"test_{k}": v for k, v in result.items()})
    if config.val_size:
        if run.ema_model is not None:
            result = evaluate(run.model, data.val_images, data.val_labels, run.info, config.eval_batch_size,
                              config.tta, run.device)
            history.update({f"val_{k}": v for k, v in result.items()})
        elif history["epochs"] and "val_accuracy" in history["epochs"][-1]:
            history.update({k: v for k, v in history["epochs"][-1].items() if k.startswith("val_")})


def _save_checkpoint(out: str, config: TrainConfig, model: torch.nn.Module, history: dict) -> Path:
    """``OUT/NAME/model.pt`` (weights, model settings, run settings); returns the run's folder."""
    run_dir = Path(out) / (config.name or f"{config.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(dict(state_dict=model.state_dict(), model=getattr(model, "config", None),
                    config=dataclasses.asdict(config)), run_dir / "model.pt")
    history["run_dir"] = str(run_dir)
    return run_dir


__all__ = ["train", "forward_backward"]
