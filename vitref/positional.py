"""Positions and token embeddings.

Self-attention treats its input as a *set*: without position information, permuting the
tokens just permutes the outputs. Positional encodings break that symmetry.

Sinusoidal encoding (Vaswani et al., 2017), for position ``k`` and pair index ``i``::

    P[k, 2i]   = sin(k / n^(2i/d))
    P[k, 2i+1] = cos(k / n^(2i/d))

with ``n = 10000`` in the paper (the slides' worked example uses ``n = 100``).

Rotary position embedding (RoPE; Su et al., 2021, "RoFormer: Enhanced Transformer with Rotary
Position Embedding", arXiv:2104.09864) rotates queries and keys instead of adding a table to the
tokens: :func:`apply_rope`.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import expect_dims


def sinusoidal_encoding(seq_len: int, d_model: int, n: float = 10000) -> torch.Tensor:
    """Sinusoidal position table of shape ``(seq_len, d_model)`` (float32).

    Row ``k`` encodes position ``k``; columns ``2i`` and ``2i+1`` hold ``sin`` and ``cos``
    of ``k / n^(2i/d_model)``. ``d_model`` must be even (one sin/cos pair per frequency).
    """
    if seq_len < 0:
        raise ValueError(f"seq_len must be >= 0, got {seq_len}")
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even number (sin/cos pairs), got {d_model}")
    if n <= 0:
        raise ValueError(f"the frequency base n must be positive, got {n}")
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]            # (L, 1)
    pair_index = torch.arange(d_model // 2, dtype=torch.float64)[None, :]      # (1, d/2)
    denominator = torch.pow(torch.tensor(float(n), dtype=torch.float64), 2 * pair_index / d_model)
    angles = positions / denominator                                          # (L, d/2)
    table = torch.empty(seq_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()                                                       # (L, d)


def _check_length(num_tokens: int, num_positions: int) -> None:
    if num_tokens > num_positions:
        raise ValueError(
            f"sequence length {num_tokens} exceeds the positional table ({num_positions} positions)"
        )


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table of ``num_positions`` vectors added to the tokens: ``(B, N, D) -> (B, N, D)``."""

    def __init__(self, num_positions: int, dim: int, init_std: float = 0.02):
        super().__init__()
        self.num_positions, self.dim = num_positions, dim
        self.positions = nn.Parameter(torch.randn(num_positions, dim) * init_std)  # (num_positions, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_dims(x, "B, N, D", "LearnedPositionalEmbedding")
        _check_length(x.shape[1], self.num_positions)
        return x + self.positions[: x.shape[1]]


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal table (a buffer, not trained) added to the tokens: ``(B, N, D) -> (B, N, D)``."""

    positions: torch.Tensor   # registered as a buffer in __init__

    def __init__(self, max_len: int, dim: int, n: float = 10000):
        super().__init__()
        self.num_positions, self.dim = max_len, dim
        self.register_buffer("positions", sinusoidal_encoding(max_len, dim, n), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_dims(x, "B, N, D", "SinusoidalPositionalEncoding")
        _check_length(x.shape[1], self.num_positions)
        return x + self.positions[: x.shape[1]].to(x.dtype)


def _check_token_ids(token_ids: torch.Tensor, vocab_size: int) -> None:
    if token_ids.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool):
        raise TypeError(f"token ids must be an integer tensor, got dtype {token_ids.dtype}")
    if token_ids.numel() and (token_ids.min() < 0 or token_ids.max() >= vocab_size):
        bad = token_ids[(token_ids < 0) | (token_ids >= vocab_size)][0].item()
        raise ValueError(f"token id {bad} is out of range for a vocabulary of {vocab_size} tokens")


def embedding_lookup(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Row lookup: ``token_ids (...)`` and ``weight (V, D)`` give ``(..., D)``; what ``nn.Embedding`` does."""
    _check_token_ids(token_ids, weight.shape[0])
    return weight[token_ids]


def one_hot_embedding(token_ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same embedding written as a matrix product: ``one_hot(ids) (..., V) @ weight (V, D)``."""
    _check_token_ids(token_ids, weight.shape[0])
    one_hot = nn.functional.one_hot(token_ids, num_classes=weight.shape[0]).to(weight.dtype)  # (..., V)
    return one_hot @ weight                                                                     # (..., D)



def apply_rope(x: torch.Tensor, base: float = 10000) -> torch.Tensor:
    """Rotary position embedding of queries or keys ``x`` of shape ``(..., T, D)`` (Su et al., 2021).

    Token ``t``'s features are taken in interleaved pairs ``(2i, 2i+1)`` and pair ``i`` is rotated
    by the angle ``t * base^(-2i/D)``::

        out[..., t, 2i]   = x[..., t, 2i] cos(angle) - x[..., t, 2i+1] sin(angle)
        out[..., t, 2i+1] = x[..., t, 2i] sin(angle) + x[..., t, 2i+1] cos(angle)

    Positions count from 0 (token 0 is left as it is); the result has ``x``'s shape, dtype and device.
    A rotation keeps lengths, and the dot product of a query rotated at ``t`` with a key rotated at
    ``s`` depends on ``s - t`` only: attention scores see the offset between tokens, not where they are.
    ``D`` must be even (GPT-NeoX and Hugging Face's LLaMA pair feature ``i`` with ``i + D/2`` instead:
    another convention, other numbers).
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"apply_rope expects a tensor of shape (..., T, D), got {getattr(x, 'shape', type(x))}")
    seq_len, width = x.shape[-2], x.shape[-1]
    if width % 2:
        raise ValueError(f"apply_rope rotates pairs of features: the width D (the last dimension) must be even, "
                         f"got D = {width}")
    if base <= 0:
        raise ValueError(f"the frequency base must be positive, got {base}")
    positions = torch.arange(seq_len, dtype=torch.float64)[:, None]                 # (T, 1)
    pair_index = torch.arange(width // 2, dtype=torch.float64)[None, :]             # (1, D/2)
    angles = positions * torch.pow(torch.tensor(float(base), dtype=torch.float64), -2 * pair_index / width)
    cos = torch.cos(angles).to(device=x.device, dtype=x.dtype)                     # (T, D/2)
    sin = torch.sin(angles).to(device=x.device, dtype=x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]                                         # (..., T, D/2) each
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., T, D/2, 2)
    return rotated.flatten(-2)                                                       # (..., T, D)


__all__ = [
    "sinusoidal_encoding",
    "LearnedPositionalEmbedding",
    "SinusoidalPositionalEncoding",
    "embedding_lookup",
    "one_hot_embedding",
    "apply_rope",
]
