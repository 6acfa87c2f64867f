"""Train a Vision Transformer from scratch, on a wall-clock budget.

The entry point that the book, the benchmarks and the README use; the code is in
:mod:`vitref.training` (see its docstring for the budget, the recipe and the outputs)::

    python -m vitref.train --dataset fashion-mnist --minutes 10     # last line: test_accuracy=0.xxxx wall_seconds=NNN
    from vitref.train import train, TrainConfig, PRESETS, load_checkpoint
"""
from .training import (
    PRESETS,
    TTA_MODES,
    ThreadTuner,
    TrainConfig,
    available_cores,
    build_model,
    evaluate,
    init_sincos_positions,
    load_checkpoint,
    lr_at,
    train,
)
from .training.cli import main

__all__ = ["train", "TrainConfig", "PRESETS", "load_checkpoint", "lr_at", "evaluate", "TTA_MODES",
           "init_sincos_positions", "build_model", "ThreadTuner", "available_cores", "main"]

if __name__ == "__main__":
    main()
