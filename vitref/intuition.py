"""Where attention comes from: kernel regression and score functions (chapter 3).

Attention pooling predates the Transformer. Given training pairs ``(x_s, y_s)``, the
Nadaraya-Watson estimator (1964) predicts at a query ``x`` the weighted average

    f(x) = sum_s alpha(x, x_s) y_s,      alpha(x, x_s) = K(x - x_s) / sum_s' K(x - x_s'),

which is attention with the query ``x``, the keys ``x_s`` and the values ``y_s``. With the
Gaussian kernel ``K(u) = exp(-|u|^2 / (2 sigma^2))`` the weights are a softmax of the scores
``-|x - x_s|^2 / (2 sigma^2)``. Average pooling is the special case of equal weights.

Attention in general is ``softmax(score(q, k)) v`` for some score function. Two classic ones:

* dot product (Luong et al., 2015; scaled by ``1/sqrt(d)`` in Vaswani et al., 2017):
  ``q . k / sqrt(d)``, which needs ``d_q = d_k``;
* additive (Bahdanau et al., 2015): ``w_v . tanh(W_q q + W_k k)``, a one-hidden-layer MLP that
  accepts queries and keys of different sizes.

Shapes follow :mod:`vitref.attention`: ``q (..., T, d_q)``, ``k (..., S, d_k)``,
``v (..., S, d_v)``, scores and weights ``(..., T, S)``.
"""
from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from ._checks import expect_same_keys, shape_str
from .attention import mask_as_bool, softmax


def _as_points(x: torch.Tensor, name: str) -> torch.Tensor:
    """``(n,)`` scalars or ``(n, d)`` vectors -> ``(n, d)``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 1:
        return x[:, None]                                                   # (n,) -> (n, 1)
    if x.dim() == 2:
        return x
    raise ValueError(f"{name} must be (n,) scalars or (n, d) vectors, got {shape_str(x.shape)}")


def gaussian_kernel_weights(queries: torch.Tensor, keys: torch.Tensor, bandwidth: float = 1.0) -> torch.Tensor:
    """Nadaraya-Watson weights with a Gaussian kernel: ``(T, S)``, each row sums to 1.

    ``queries (T,)`` or ``(T, d)``, ``keys (S,)`` or ``(S, d)``;
    ``weights[t, s] = softmax_s(-|q_t - k_s|^2 / (2 bandwidth^2))``.
    """
    if not bandwidth > 0:
        raise ValueError(f"the bandwidth must be positive, got {bandwidth}")
    q, k = _as_points(queries, "queries"), _as_points(keys, "keys")        # (T, d), (S, d)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries {shape_str(queries.shape)} and keys {shape_str(keys.shape)} must have the same "
            f"dimension d ({q.shape[-1]} vs {k.shape[-1]})"
        )
    if k.shape[0] == 0:
        raise ValueError("there must be at least one key (S >= 1)")
    squared_distance = (rearrange(q, "t d -> t 1 d") - rearrange(k, "s d -> 1 s d")).pow(2).sum(-1)  # (T, S)
    return softmax(-squared_distance / (2 * bandwidth**2), dim=-1)         # (T, S)


def nadaraya_watson(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bandwidth: float = 1.0):
    """Gaussian-kernel regression as attention: returns ``(predictions, weights (T, S))``.

    ``values (S,)`` gives predictions ``(T,)``; ``values (S, d_v)`` gives ``(T, d_v)``.
    """
    weights = gaussian_kernel_weights(queries, keys, bandwidth)            # (T, S)
    if values.dim() not in (1, 2) or values.shape[0] != weights.shape[1]:
        raise ValueError(
            f"values must be (S,) or (S, d_v) with S = {weights.shape[1]} (one per key), got {shape_str(values.shape)}"
        )
    return weights.to(values.dtype) @ values, weights                      # (T,) or (T, d_v)


def average_pooling(queries: torch.Tensor, values: torch.Tensor):
    """The baseline with equal weights ``1/S``: every query gets the mean of the values.

    ``queries (T,)`` or ``(T, d)`` (only their number is used), ``values (S,)`` or ``(S, d_v)``;
    returns ``(predictions (T,) or (T, d_v), weights (T, S))``.
    """
    num_queries = _as_points(queries, "queries").shape[0]
    if values.dim() not in (1, 2) or values.shape[0] == 0:
        raise ValueError(f"values must be (S,) or (S, d_v) with S >= 1, got {shape_str(values.shape)}")
    weights = torch.full((num_queries, values.shape[0]), 1.0 / values.shape[0], dtype=values.dtype)  # (T, S)
    return weights @ values, weights


def dot_product_scores(q: torch.Tensor, k: torch.Tensor, scaled: bool = True) -> torch.Tensor:
    """``q (..., T, d) , k (..., S, d) -> (..., T, S)``: ``q . k``, divided by ``sqrt(d)`` if ``scaled``."""
    if q.dim() < 2 or k.dim() < 2:
        raise ValueError(f"q and k must be (..., T, d) and (..., S, d), "
                         f"got {shape_str(q.shape)} and {shape_str(k.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"dot-product scores need queries and keys of the same size d: q {shape_str(q.shape)}, "
            f"k {shape_str(k.shape)} ({q.shape[-1]} vs {k.shape[-1]}); additive scores do not"
        )
    scores = q @ k.transpose(-2, -1)                                       # (..., T, S)
    return scores / math.sqrt(q.shape[-1]) if scaled else scores


class AdditiveScore(nn.Module):
    """Additive (Bahdanau) score: ``score(q, k) = w_v . tanh(W_q q + W_k k)``.

    ``forward(q (..., T, query_dim), k (..., S, key_dim)) -> scores (..., T, S)``.
    ``W_q (hidden_dim, query_dim)``, ``W_k (hidden_dim, key_dim)``, ``w_v (hidden_dim,)``:
    a small MLP applied to every (query, key) pair, which materialises a
    ``(..., T, S, hidden_dim)`` tensor. ``|score| <= sum |w_v|`` whatever the inputs.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("hidden_dim", hidden_dim)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=False)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        if q.dim() < 2 or q.shape[-1] != self.query_dim:
            raise ValueError(f"AdditiveScore expected queries (..., T, {self.query_dim}), got {shape_str(q.shape)}")
        if k.dim() < 2 or k.shape[-1] != self.key_dim:
            raise ValueError(f"AdditiveScore expected keys (..., S, {self.key_dim}), got {shape_str(k.shape)}")
        if q.shape[:-2] != k.shape[:-2]:
            raise ValueError(
                f"AdditiveScore: the batch dimensions of q {shape_str(q.shape)} and k {shape_str(k.shape)} differ"
            )
        q_hidden = rearrange(self.W_q(q), "... t h -> ... t 1 h")          # (..., T, 1, h)
        k_hidden = rearrange(self.W_k(k), "... s h -> ... 1 s h")          # (..., 1, S, h)
        features = torch.tanh(q_hidden + k_hidden)                         # (..., T, S, h)
        return rearrange(self.w_v(features), "... t s 1 -> ... t s")        # (..., T, S)


def attention_from_scores(scores: torch.Tensor, values: torch.Tensor, mask=None):
    """``softmax(scores) values`` for any score function: ``(out (..., T, d_v), weights (..., T, S))``.

    ``scores (..., T, S)``, ``values (..., S, d_v)``, ``mask`` broadcastable to ``(..., T, S)``
    (True where allowed). Fully masked rows give zero weights, as in
    :func:`vitref.scaled_dot_product_attention`.
    """
    if scores.dim() < 2 or values.dim() < 2:
        raise ValueError(
            f"scores must be (..., T, S) and values (..., S, d_v), "
            f"got {shape_str(scores.shape)} and {shape_str(values.shape)}"
        )
    expect_same_keys("scores (..., T, S)", scores, -1, "values (..., S, d_v)", values)
    if mask is not None:
        scores = scores.masked_fill(~mask_as_bool(mask, scores.shape), float("-inf"))
    weights = softmax(scores, dim=-1)                                      # (..., T, S)
    return weights @ values, weights                                       # (..., T, d_v)


class AdditiveAttention(nn.Module):
    """Attention with additive scores: ``forward(q, k, v, mask=None) -> (out (..., T, d_v), weights (..., T, S))``.

    ``q (..., T, query_dim)``, ``k (..., S, key_dim)``, ``v (..., S, d_v)``.
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int):
        super().__init__()
        self.score = AdditiveScore(query_dim, key_dim, hidden_dim)

    def forward(self, q, k, v, mask=None):
        return attention_from_scores(self.score(q, k), v, mask)


__all__ = [
    "gaussian_kernel_weights", "nadaraya_watson", "average_pooling", "dot_product_scores",
    "AdditiveScore", "attention_from_scores", "AdditiveAttention",
]
