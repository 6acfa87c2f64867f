"""The command line: ``python -m vitref.train`` and ``vitref-train`` (same options).

    python -m vitref.train --dataset fashion-mnist --minutes 10
    vitref-train --dataset fashion-mnist --epochs 5 --seed 1

The last line printed is ``test_accuracy=0.xxxx wall_seconds=NNN`` (a contract that
bench/train_to_accuracy.py and the tests rely on); ``wall_seconds`` counts from the start of
the process, as the ``--minutes`` budget does.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import sys
import time
import typing
from typing import Any

from .. import data as vdata
from .config import PRECISIONS, PRESETS, TrainConfig, resolve_device
from .evaluate import TTA_MODES
from .loop import train

DESCRIPTION = "Train a Vision Transformer from scratch, on a wall-clock budget."


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


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep what a train step frees for the next step (Linux with glibc
    only; returns whether it could). By default a tensor over glibc's mmap threshold (128 KiB at
    first, raised as blocks are freed) is a fresh ``mmap`` that ``free`` hands back to the system,
    so a step faults its activations in again; with the thresholds at 1 GiB they are reused from
    the heap. Process-wide, so only the command line sets it (bench/RESULTS.md, "CPU levers")."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):         # musl or another C library: leave it as it is
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 1 << 30))


def _program_name() -> str:
    """``vitref-train`` when run as the console script, else ``python -m vitref.train``."""
    return "vitref-train" if os.path.basename(sys.argv[0]) == "vitref-train" else "python -m vitref.train"


# what the config's field types do not say: choices, other names, help beyond the default
CHOICES: dict[str, Any] = {"dataset": lambda: sorted(vdata.DATASET_INFO), "tta": lambda: TTA_MODES,
                          "precision": lambda: PRECISIONS}
ALIASES = {"num_heads": ("--heads",)}
HELP = {
    "threads": "torch threads (default: timed CPU runs pick 1 or all cores as they go; 0 forces that)",
    "grad_clip": "(default 1.0; 0 disables)",
    "num_heads": "(default 4; --heads is its old name)",
}


def _option_type(hint) -> type:
    """The one type of a field's annotation: ``float | None`` -> float."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    if len(kinds) != 1 or kinds[0] not in (bool, int, float, str):
        raise TypeError(f"a TrainConfig field must be a bool, int, float or str (or None), got {hint}")
    return kinds[0]


def build_parser() -> argparse.ArgumentParser:
    """``--preset``, then one option per :class:`TrainConfig` field, typed by the field's annotation:
    ``--no-<flag>`` beside each bool, ``--<flag> N`` for the others. Every default is None, so that
    what was not given leaves the preset's or the config's value in place."""
    parser = argparse.ArgumentParser(prog=_program_name(), description=DESCRIPTION,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None,
                        help="start from a named recipe; other options override it")
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag, kind = "--" + f.name.replace("_", "-"), _option_type(hints[f.name])
        help_text = HELP.get(f.name, f"(default {f.default})")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        choices = CHOICES[f.name]() if f.name in CHOICES else None
        parser.add_argument(flag, *ALIASES.get(f.name, ()), dest=f.name, type=kind, choices=choices, default=None,
                            help=help_text)
    return parser


def parse_args(argv=None) -> TrainConfig:
    """The :class:`TrainConfig` of a command line (:func:`build_parser`). ``--out none`` saves nothing.
    Without ``--minutes``, ``--epochs`` or ``--steps`` the budget is 10 minutes."""
    defaults = TrainConfig()
    args = vars(build_parser().parse_args(argv))
    config = dataclasses.replace(defaults, **PRESETS.get(args.pop("preset") or "", {}))
    given = {k: v for k, v in args.items() if v is not None}
    if args.get("out") == "none":
        given["out"] = None
    config = dataclasses.replace(config, **given)
    if config.minutes is None and config.epochs is None and config.steps is None:
        config = dataclasses.replace(config, minutes=10.0)
    return config


def main(argv=None) -> None:
    """Train as the command line says; the last line printed is ``test_accuracy=0.xxxx wall_seconds=NNN``."""
    start = _process_start_time()
    config = parse_args(argv)
    try:
        resolve_device(config.device)
    except ValueError as error:            # e.g. the GPU preset on a machine without CUDA: one line
        sys.exit(f"{_program_name()}: {error}")
    keep_freed_memory()
    model, history = train(config, start_time=start)
    where = f" in {history['run_dir']}" if "run_dir" in history else ""
    print(f"{history['num_parameters']:,} parameters, {history['steps']} steps "
          f"({history['epochs_run']} epochs), saved{where}" if where else
          f"{history['num_parameters']:,} parameters, {history['steps']} steps ({history['epochs_run']} epochs)")
    print(f"test_accuracy={history['test_accuracy']:.4f} wall_seconds={time.time() - start:.0f}")


__all__ = ["build_parser", "parse_args", "main", "keep_freed_memory", "DESCRIPTION"]
