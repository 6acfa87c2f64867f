"""Multi-head attention, two ways, plus cross-attention.

* :class:`MultiHeadAttentionLoop` is the textbook picture: ``h`` independent
  :class:`~vitref.attention.AttentionHead` modules, outputs concatenated, then ``W^O``.
* :class:`MultiHeadAttention` computes the same function with one ``qkv`` projection,
  einops ``rearrange`` and batched matrix products (the slides' Q5). It is what the
  models use; when no attention weights are requested it calls PyTorch's fused kernel.

:func:`fused_from_loop` copies a loop module's weights into a fused one, so the two can be
compared number for number.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ._checks import check_divisible, expect_dims, expect_last_dim, shape_str
from .attention import AttentionHead, _mask_as_bool, causal_mask, scaled_dot_product_attention


# On a CPU, PyTorch's fused attention kernel is built for long sequences: for short ones two
# batched matrix products and a softmax are 2-4x faster, forward and backward
# (bench/RESULTS.md, "Attention on a CPU"). Keys up to this many take the explicit path.
EXPLICIT_MAX_KEYS = 128


def _attend_explicit(q, k, v, mask, dropout_p):
    """``softmax(q k^T / sqrt(d)) v`` with PyTorch's softmax: the fast path for short CPU sequences.

    ``mask`` is already broadcastable to ``(B, h, T, S)``; rows with nothing to attend to give zeros.
    """
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)               # (B, h, T, S)
    if mask is not None:
        allowed = _mask_as_bool(mask, scores.shape)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                                # (B, h, T, S)
    if mask is not None:
        weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)   # fully blocked rows: NaN -> 0
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return weights @ v                                                     # (B, h, T, d)


def _attend(q, k, v, mask, causal, dropout_p, need_weights, training):
    """Attention over heads: ``q (B, h, T, d)``, ``k, v (B, h, S, d)`` -> ``(B, h, T, d)`` [, weights].

    ``mask`` may be ``(T, S)`` (shared), ``(B, T, S)`` (one per example, the same for every
    head) or anything broadcastable to ``(B, h, T, S)``.
    """
    T, S = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = torch.as_tensor(mask, device=q.device)
        if mask.dim() == 3:                       # (B, T, S) -> (B, 1, T, S): per example, shared by heads
            mask = mask.unsqueeze(1)
    if causal:
        if T != S:
            raise ValueError(f"a causal mask needs as many queries as keys, got T={T}, S={S}")
        cm = causal_mask(T, device=q.device)
        mask = cm if mask is None else _mask_as_bool(mask, (*q.shape[:-1], S)) & cm
    if need_weights:
        out, weights = scaled_dot_product_attention(q, k, v, mask)          # (B, h, T, d), (B, h, T, S)
        if dropout_p and training:
            weights = F.dropout(weights, dropout_p)
            out = weights @ v
        return out, weights
    if q.device.type == "cpu" and S <= EXPLICIT_MAX_KEYS:
        return _attend_explicit(q, k, v, mask, dropout_p if training else 0.0), None
    if mask is None:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p if training else 0.0)
        return out, None
    allowed = _mask_as_bool(mask, (*q.shape[:-1], S))                      # broadcastable to (B, h, T, S)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p if training else 0.0)
    fully_blocked = ~allowed.any(dim=-1, keepdim=True)                     # rows with nothing to attend to
    return out.masked_fill(fully_blocked, 0.0), None


class MultiHeadAttention(nn.Module):
    """Fused multi-head self-attention.

    ``forward(x (B, N, E), mask=None, causal=False, return_attention=False)`` returns
    ``out (B, N, E)``, or ``(out, weights (B, heads, N, N))`` with ``return_attention=True``.
    The ``qkv`` output is laid out as ``(qkv heads head_dim)``, the same as timm's.
    """

    def __init__(self, emb_size: int = 768, num_heads: int = 8, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.head_dim = check_divisible(emb_size, num_heads)
        self.emb_size, self.num_heads, self.dropout = emb_size, num_heads, dropout
        self.qkv = nn.Linear(emb_size, 3 * emb_size, bias=bias)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, causal: bool = False, return_attention: bool = False):
        expect_dims(x, "B, N, E", "MultiHeadAttention")
        expect_last_dim(x, self.emb_size, "E", "MultiHeadAttention")
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", qkv=3, h=self.num_heads)  # each (B, h, N, d)
        out, weights = _attend(q, k, v, mask, causal, self.dropout, return_attention, self.training)
        out = self.projection(rearrange(out, "b h n d -> b n (h d)"))        # (B, N, E)
        return (out, weights) if return_attention else out


class MultiHeadAttentionLoop(nn.Module):
    """Multi-head attention as a Python loop over independent heads.

    ``head_i = Attention(x W_i^Q, x W_i^K, x W_i^V)``; ``out = concat(head_1..head_h) W^O``.
    Same signature and results as :class:`MultiHeadAttention` (see :func:`fused_from_loop`).
    """

    def __init__(self, emb_size: int = 768, num_heads: int = 8):
        super().__init__()
        self.head_dim = check_divisible(emb_size, num_heads)
        self.emb_size, self.num_heads = emb_size, num_heads
        self.heads = nn.ModuleList(AttentionHead(emb_size, self.head_dim) for _ in range(num_heads))
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, causal: bool = False, return_attention: bool = False):
        expect_dims(x, "B, N, E", "MultiHeadAttentionLoop")
        expect_last_dim(x, self.emb_size, "E", "MultiHeadAttentionLoop")
        if causal:
            cm = causal_mask(x.shape[1], device=x.device)
            mask = cm if mask is None else (mask != 0) & cm
        outputs, weights = zip(*(head(x, mask) for head in self.heads))   # h x (B, N, d), h x (B, N, N)
        out = self.projection(torch.cat(outputs, dim=-1))                  # (B, N, h*d) -> (B, N, E)
        return (out, torch.stack(weights, dim=1)) if return_attention else out


@torch.no_grad()
def fused_from_loop(loop: MultiHeadAttentionLoop) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` that computes exactly what ``loop`` computes.

    The fused ``qkv`` weight stacks, in order, every head's query rows, then every head's
    key rows, then every head's value rows: the ``(qkv h d)`` layout.
    """
    fused = MultiHeadAttention(loop.emb_size, loop.num_heads)
    fused = fused.to(dtype=loop.projection.weight.dtype, device=loop.projection.weight.device)
    for part, name in ((fused.qkv.weight, "weight"), (fused.qkv.bias, "bias")):
        blocks = [getattr(getattr(head, role), name) for role in ("query", "key", "value") for head in loop.heads]
        part.copy_(torch.cat(blocks, dim=0))
    fused.projection.load_state_dict(loop.projection.state_dict())
    return fused


class CrossAttention(nn.Module):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``.

    ``forward(x (B, T, E), context (B, S, C), mask=None, return_attention=False)`` returns
    ``out (B, T, E)`` [and ``weights (B, heads, T, S)``]. ``mask`` is broadcastable to
    ``(B, heads, T, S)`` (e.g. ``(B, 1, 1, S)`` to hide padded context positions).
    """

    def __init__(self, emb_size: int, num_heads: int, context_dim: int | None = None, dropout: float = 0.0):
        super().__init__()
        self.head_dim = check_divisible(emb_size, num_heads)
        self.emb_size, self.num_heads, self.dropout = emb_size, num_heads, dropout
        self.context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(self.context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention: bool = False):
        expect_dims(x, "B, T, E", "CrossAttention queries")
        expect_dims(context, "B, S, C", "CrossAttention context")
        expect_last_dim(x, self.emb_size, "E", "CrossAttention queries")
        expect_last_dim(context, self.context_dim, "C", "CrossAttention context")
        if x.shape[0] != context.shape[0]:
            raise ValueError(
                f"CrossAttention: batch sizes differ, queries {shape_str(x.shape)} vs context {shape_str(context.shape)}"
            )
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)                       # (B, h, T, d)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)  # (B, h, S, d)
        out, weights = _attend(q, k, v, mask, False, self.dropout, return_attention, self.training)
        out = self.projection(rearrange(out, "b h t d -> b t (h d)"))       # (B, T, E)
        return (out, weights) if return_attention else out


__all__ = ["MultiHeadAttention", "MultiHeadAttentionLoop", "fused_from_loop", "CrossAttention"]
