"""The optimiser's side of a run: AdamW parameter groups and the learning-rate schedule.

Shared by the ViT's loop (:mod:`vitref.training.loop`) and the distillation teacher
(:mod:`vitref.training.teacher`).
"""
from __future__ import annotations

import math

import torch


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on weight matrices only (not biases, norms, positions, class token)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or "pos_embed" in name or "cls_token" in name else decay).append(param)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]


def warmup_cosine(progress: float, lr: float, warmup: float, min_lr: float = 0.0) -> float:
    """Learning rate at ``progress`` in [0, 1]: linear warm-up to ``lr`` over the first ``warmup``
    of the progress, then a cosine decay to ``min_lr`` at ``progress = 1``."""
    if warmup > 0 and progress < warmup:
        return lr * progress / warmup
    decay = min(1.0, (progress - warmup) / max(1e-12, 1.0 - warmup))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * decay))


def lr_at(progress: float, config) -> float:
    """Learning rate of a run at ``progress`` in [0, 1]: :func:`warmup_cosine` with the ``lr``,
    ``warmup`` and ``min_lr`` of ``config`` (a :class:`~vitref.training.config.TrainConfig`)."""
    return warmup_cosine(progress, config.lr, config.warmup, config.min_lr)


__all__ = ["param_groups", "warmup_cosine", "lr_at"]
