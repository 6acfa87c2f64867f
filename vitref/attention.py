"""Scaled dot-product attention, from scratch.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Conventions used everywhere in the course: ``q (..., T, d_k)``, ``k (..., S, d_k)``,
``v (..., S, d_v)``; a mask broadcastable to ``(..., T, S)`` holds 1/True where query ``t``
may look at key ``s`` and 0/False where it is blocked.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import expect_same_keys, shape_str


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracting the maximum first keeps ``exp`` from overflowing (``exp(1000)`` is ``inf`` in
    float32) without changing the result. A slice that is entirely ``-inf`` (a fully masked
    row) gives all zeros instead of NaN.
    """
    row_max = x.amax(dim=dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exps = torch.exp(x - row_max)
    total = exps.sum(dim=dim, keepdim=True)
    return exps / torch.where(total > 0, total, torch.ones_like(total))


def causal_mask(T: int, device=None) -> torch.Tensor:
    """``(T, T)`` boolean mask, True where query ``t`` may attend key ``s`` (``s <= t``)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def mask_as_bool(mask, scores_shape: torch.Size) -> torch.Tensor:
    """``mask`` (1/True = allowed) as a boolean tensor, checked to broadcast to ``scores_shape (..., T, S)``."""
    if not isinstance(mask, torch.Tensor):
        mask = torch.as_tensor(mask)
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {shape_str(mask.shape)} cannot be broadcast to the attention scores "
            f"(..., T, S) = {shape_str(scores_shape)}"
        )
    return mask if mask.dtype == torch.bool else mask != 0


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise a ValueError naming the shapes when q, k, v do not fit together."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., length, dim), got {shape_str(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q (..., T, d_k) = {shape_str(q.shape)} and k (..., S, d_k) = {shape_str(k.shape)} "
            f"disagree on d_k ({q.shape[-1]} vs {k.shape[-1]})"
        )
    expect_same_keys("k (..., S, d_k)", k, -2, "v (..., S, d_v)", v)


def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention from scratch: returns ``(out (..., T, d_v), weights (..., T, S))``.

    ``weights[..., t, s]`` is how much query ``t`` takes from value ``s``; each row sums to 1
    (or is all zeros when the mask blocks the whole row).
    """
    check_qkv(q, k, v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)                 # (..., T, S)
    if mask is not None:
        allowed = mask_as_bool(mask, scores.shape)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = softmax(scores, dim=-1)                                 # (..., T, S)
    out = weights @ v                                                 # (..., T, d_v)
    return out, weights


class AttentionHead(nn.Module):
    """One self-attention head: three linear maps ``dim -> head_dim``, then attention.

    ``forward(x (B, T, dim), mask=None) -> (out (B, T, head_dim), weights (B, T, T))``
    """

    def __init__(self, dim: int, head_dim: int, bias: bool = True):
        super().__init__()
        self.dim, self.head_dim = dim, head_dim
        self.query = nn.Linear(dim, head_dim, bias=bias)
        self.key = nn.Linear(dim, head_dim, bias=bias)
        self.value = nn.Linear(dim, head_dim, bias=bias)

    def forward(self, x: torch.Tensor, mask=None):
        if x.shape[-1] != self.dim:
            raise ValueError(f"AttentionHead expected inputs (B, T, {self.dim}), got {shape_str(x.shape)}")
        q, k, v = self.query(x), self.key(x), self.value(x)           # each (B, T, head_dim)
        return scaled_dot_product_attention(q, k, v, mask)


__all__ = ["softmax", "causal_mask", "mask_as_bool", "scaled_dot_product_attention", "AttentionHead",
           "check_qkv"]
