"""Train a Vision Transformer from scratch, on a wall-clock budget: the entry point.

The code is in :mod:`vitref.training` (see its docstring for the budget, the recipe and the outputs).
This module stays beside it because ``vitref.train`` is the name the course gives out: the command
``python -m vitref.train`` (the book, the README, bench/train_to_accuracy.py) and the imports of the
book's chapters, vitref.finetune and the benchmarks, which use only the names below::

    python -m vitref.train --dataset fashion-mnist --minutes 10     # last line: test_accuracy=0.xxxx wall_seconds=NNN
    from vitref.train import train, TrainConfig, PRESETS, load_checkpoint
"""
from .training import PRESETS, TrainConfig, evaluate, init_sincos_positions, load_checkpoint, lr_at, train
from .training.cli import main

__all__ = ["train", "TrainConfig", "PRESETS", "load_checkpoint", "lr_at", "evaluate", "init_sincos_positions",
           "main"]

if __name__ == "__main__":
    main()
