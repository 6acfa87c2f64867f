"""The pieces around attention: residual add, LayerNorm, feed-forward block, encoder block.

Pre-LN (used by ViT) normalises *before* each sub-layer and keeps a clean residual path::

    x = x + MSA(LN(x));   x = x + MLP(LN(x))

Post-LN (the original Transformer) normalises *after* the residual sum::

    x = LN(x + MSA(x));   x = LN(x + MLP(x))
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import expect_last_dim
from .multihead import MultiHeadAttention


class ResidualAdd(nn.Module):
    """``x + fn(x)``: the skip connection of the slides' Q6."""

    def __init__(self, fn: nn.Module):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return x + self.fn(x, **kwargs)


class LayerNorm(nn.Module):
    """Layer normalisation from scratch, equal to ``nn.LayerNorm(dim, eps)``.

    Each token vector (last axis) is shifted to mean 0 and scaled to variance 1 (the biased
    variance, dividing by ``dim``), then scaled by ``weight`` and shifted by ``bias``.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expect_last_dim(x, self.dim, "D", "LayerNorm")
        mean = x.mean(dim=-1, keepdim=True)                       # (..., 1)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)        # (..., 1), biased
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class FeedForwardBlock(nn.Sequential):
    """Position-wise MLP: ``Linear(E, expansion*E) -> GELU -> Dropout -> Linear(expansion*E, E)``.

    ``hidden_dim`` overrides ``expansion * emb_size`` (ViT configs give ``mlp_dim`` directly).
    """

    def __init__(self, emb_size: int, expansion: int = 4, drop_p: float = 0.0, hidden_dim: int | None = None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(
            nn.Linear(emb_size, hidden),   # (..., E) -> (..., hidden)
            nn.GELU(),
            nn.Dropout(drop_p),
            nn.Linear(hidden, emb_size),   # (..., hidden) -> (..., E)
        )


class TransformerEncoderBlock(nn.Module):
    """One encoder block: multi-head self-attention and a feed-forward block, each with a
    residual connection and a LayerNorm (pre-LN with ``norm_first=True``, else post-LN).

    ``forward(x (B, N, E), mask=None, return_attention=False)`` -> ``(B, N, E)``
    [and ``weights (B, heads, N, N)``].
    """

    def __init__(
        self,
        emb_size: int = 768,
        num_heads: int = 8,
        drop_p: float = 0.0,
        forward_expansion: int = 4,
        forward_drop_p: float = 0.0,
        norm_first: bool = True,
        mlp_dim: int | None = None,
        norm_eps: float = 1e-5,
        attn_drop_p: float = 0.0,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(emb_size, eps=norm_eps)
        self.attn = MultiHeadAttention(emb_size, num_heads, dropout=attn_drop_p)
        self.drop1 = nn.Dropout(drop_p)
        self.norm2 = nn.LayerNorm(emb_size, eps=norm_eps)
        self.mlp = FeedForwardBlock(emb_size, forward_expansion, forward_drop_p, hidden_dim=mlp_dim)
        self.drop2 = nn.Dropout(drop_p)

    def forward(self, x, mask=None, return_attention: bool = False):
        if self.norm_first:
            attn_out = self.attn(self.norm1(x), mask=mask, return_attention=return_attention)
            attn_out, weights = attn_out if return_attention else (attn_out, None)
            x = x + self.drop1(attn_out)
            x = x + self.drop2(self.mlp(self.norm2(x)))
        else:
            attn_out = self.attn(x, mask=mask, return_attention=return_attention)
            attn_out, weights = attn_out if return_attention else (attn_out, None)
            x = self.norm1(x + self.drop1(attn_out))
            x = self.norm2(x + self.drop2(self.mlp(x)))
        return (x, weights) if return_attention else x


__all__ = ["ResidualAdd", "LayerNorm", "FeedForwardBlock", "TransformerEncoderBlock"]
