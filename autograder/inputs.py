"""Deterministic test inputs, built with numpy only.

The probe (student's process) and the judge (grader's process) both call these with the same
arguments and get bit-identical arrays; the judge never trusts inputs reported by the probe.
"""
from __future__ import annotations

import numpy as np


def _rng(*seed: int) -> np.random.Generator:
    return np.random.default_rng([int(s) for s in seed])


def randn(shape, seed: int, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """float32 normal values ``offset + scale * N(0, 1)``."""
    return (offset + scale * _rng(1, seed).standard_normal(shape)).astype(np.float32)


def randint(shape, high: int, seed: int) -> np.ndarray:
    """int64 values in ``[0, high)``."""
    return _rng(2, seed).integers(0, high, size=shape).astype(np.int64)


def bernoulli_mask(shape, seed: int, p_allowed: float = 0.6, full_rows=(), ensure_one: bool = True) -> np.ndarray:
    """bool mask, True = allowed. ``full_rows``: index tuples (over the leading axes and the
    query axis) whose row is entirely blocked. Other rows keep at least one allowed key."""
    mask = _rng(3, seed).random(shape) < p_allowed
    if ensure_one:
        empty = ~mask.any(axis=-1)
        mask[..., 0] = mask[..., 0] | empty
    for row in full_rows:
        mask[row] = False
    return mask


def param_values(shape, seed: int, module_index: int, param_index: int, name: str) -> np.ndarray:
    """The values the checker writes into parameter ``param_index`` of the
    ``module_index``-th module built in a case (float32)."""
    rng = _rng(4, seed, module_index, param_index)
    shape = tuple(int(s) for s in shape)
    if len(shape) == 0:
        return np.float32(rng.standard_normal()).reshape(())
    if len(shape) == 1:
        base = 1.0 if name.endswith("weight") else 0.0    # LayerNorm gains near 1, biases near 0
        return (base + 0.5 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
