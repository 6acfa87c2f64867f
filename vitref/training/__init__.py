"""Training a Vision Transformer from scratch, on a wall-clock budget (not part of the taught model).

Command line (the last line printed is ``test_accuracy=0.xxxx wall_seconds=NNN``)::

    python -m vitref.train --dataset fashion-mnist --minutes 10      # or: vitref-train ...
    python -m vitref.train --dataset fashion-mnist --epochs 5 --seed 1
    python -m vitref.train --dataset cifar10 --epochs 100 --device cuda --preset cifar10-gpu

In the book (chapter 7) or a notebook::

    from vitref.train import train          # the same function as vitref.training.train
    model, history = train(dataset="fashion-mnist", minutes=2, out=None)

The modules, by responsibility (each imports only those above it, never a private name)::

    config    TrainConfig (every setting of a run, defaults = the recipe), PRESETS, resolve_device,
              autocast_dtype, compiles, resolved (what 'auto' precision and compile=None mean on a device)
    optim     param_groups (AdamW decay / no decay), warmup_cosine and lr_at (the schedule)
    models    build_model, init_sincos_positions, load_checkpoint
    evaluate  evaluate with test-time augmentation (TTA_MODES), shift_images
    tuner     available_cores, ThreadTuner, batch_slices, SlicedForward (how a CPU run uses its cores)
    teacher   ConvTeacher, train_teacher, teacher_logits, distillation_loss, distillation_targets
    loop      train (the whole run), forward_backward (one batch's loss and gradients)
    cli       parse_args, main (``python -m vitref.train``, ``vitref-train``), keep_freed_memory

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
than all cores. Where the CPU multiplies bfloat16 matrices in hardware (Intel AMX), a timed run
of 5 minutes or more also autocasts the forward pass to bfloat16 and ``torch.compile``s the model
(``precision='auto'``, ``compile=None``; weights, gradients, optimizer and evaluation stay
float32): about 1.3 times the steps there, and the history records what ran. A compiled run
keeps all cores and is not tuned (each thread count would be a compilation of its own). Counted
runs stay float32 on every CPU (``--precision bf16`` or ``--compile`` ask for them). The command line also
keeps the memory a step frees for the next one (:func:`~vitref.training.cli.keep_freed_memory`).

**The default recipe** (Fashion-MNIST on a 2-core CPU; chosen on a validation split carved
from the training set, never on the test set; every recipe tried is in bench/RESULTS.md):
patch 7 (4 x 4 = 16 patches + CLS), D = 64, 4 blocks, 4 heads, MLP 128 (139,018 parameters:
small, so that it sees about 50 epochs in 10 minutes on an idle 2-core machine); positions
start at a 2-D sine-cosine table; AdamW (lr 2e-3, weight decay 0.05), batch 256, 5% warm-up
then cosine to zero, label smoothing 0.1, gradient clipping at 1; random shifts of up to one
pixel (crop with padding 1) and horizontal flips; test-time averaging of 10 views of each
image (the image and its mirror, each also shifted one pixel up, down, left and right).
Optional, tried and not in the default: distillation from a small CNN trained first in the
same budget (``--distill soft``, :mod:`vitref.training.teacher`), weight averaging (``--ema``),
mean pooling (``--pool mean``), crops that start late (``--crop-from``).

Outputs go to a run folder (default ``runs/<dataset>-<time>``): ``model.pt`` (state dict, the
model's arguments and the config) and ``history.json`` (config, per-epoch loss and accuracy,
seconds, test accuracy). ``VITREF_FAST=1`` (tests only) trains on 2,048 images and tests on
1,000 so that a run takes seconds.
"""
from .config import PRESETS, TrainConfig, resolve_device
from .evaluate import TTA_MODES, evaluate, shift_images
from .loop import forward_backward, train
from .models import build_model, init_sincos_positions, load_checkpoint
from .optim import lr_at, param_groups, warmup_cosine
from .teacher import ConvTeacher, distillation_loss, teacher_logits, train_teacher
from .tuner import SlicedForward, ThreadTuner, available_cores, batch_slices

__all__ = [
    "TrainConfig", "PRESETS", "resolve_device",
    "lr_at", "warmup_cosine", "param_groups",
    "build_model", "init_sincos_positions", "load_checkpoint",
    "TTA_MODES", "evaluate", "shift_images",
    "available_cores", "ThreadTuner", "batch_slices", "SlicedForward",
    "ConvTeacher", "train_teacher", "teacher_logits", "distillation_loss",
    "train", "forward_backward",
]
