"""Small input-validation helpers shared by the modules: errors in the user's terms."""
from __future__ import annotations

import torch


def shape_str(shape) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


def expect_dims(x: torch.Tensor, names: str, what: str) -> None:
    """Raise ValueError unless ``x`` has one dimension per name in ``names`` (e.g. "B, N, D")."""
    expected = [n.strip() for n in names.split(",")]
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor of shape ({names}), got {type(x).__name__}")
    if x.dim() != len(expected):
        raise ValueError(
            f"{what}: expected a tensor of shape ({names}), got {x.dim()} dimensions {shape_str(x.shape)}"
        )


def expect_last_dim(x: torch.Tensor, size: int, name: str, what: str) -> None:
    if x.shape[-1] != size:
        raise ValueError(
            f"{what}: expected last dimension {name} = {size}, got {x.shape[-1]} (input shape {shape_str(x.shape)})"
        )


def expect_same_keys(keys_name: str, keys: torch.Tensor, axis: int, values_name: str, values: torch.Tensor) -> None:
    """Raise ValueError unless ``keys``' axis ``axis`` (its number of keys S) matches the rows of
    ``values (..., S, d_v)``; the names carry the layouts, e.g. ``"k (..., S, d_k)"``."""
    if keys.shape[axis] != values.shape[-2]:
        raise ValueError(
            f"{keys_name} = {shape_str(keys.shape)} and {values_name} = {shape_str(values.shape)} "
            f"disagree on the number of keys S ({keys.shape[axis]} vs {values.shape[-2]})"
        )


def check_divisible(dim: int, num_heads: int) -> int:
    if num_heads <= 0:
        raise ValueError(f"number of heads must be positive, got {num_heads}")
    if dim % num_heads:
        raise ValueError(f"embedding dim {dim} is not divisible by the number of heads {num_heads}")
    return dim // num_heads
