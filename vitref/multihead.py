"""Multi-head attention, two ways, plus cross-attention.

* :class:`MultiHeadAttentionLoop` is the textbook picture: ``h`` independent
  :class:`~vitref.attention.AttentionHead` modules, outputs concatenated, then ``W^O``.
* :class:`MultiHeadAttention` computes the same function with one ``qkv`` projection,
  einops ``rearrange`` and batched matrix products (the slides' Q5). It is what the models use.
* :func:`attend` is the attention itself, written once for all heads at once, as chapter 3 does
  for one head: the scores, the mask (:func:`allowed_keys`), a softmax, dropout, and the weighted
  sum of the values. PyTorch's fused kernel ``F.scaled_dot_product_attention`` is a named fast
  path inside it, the same function without the weights, taken only in the cases
  :func:`use_fused_kernel` lists: nothing masked (``causal`` is the kernel's own flag) and no
  weights requested, on a GPU or for more than :data:`EXPLICIT_MAX_KEYS` keys on a CPU.
* :class:`CrossAttention` (queries from one sequence, keys and values from another) calls the
  same :func:`attend`.

:func:`fused_from_loop` copies a loop module's weights into a fused one, so the two can be
compared number for number.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ._checks import check_divisible, expect_dims, expect_last_dim, shape_str
from .attention import AttentionHead, causal_mask, mask_as_bool, softmax


# On a CPU, PyTorch's fused attention kernel is built for long sequences: for short ones two
# batched matrix products and a softmax are 2-4x faster, forward and backward
# (bench/RESULTS.md, "Attention on a CPU"). Keys up to this many take the step-by-step path.
EXPLICIT_MAX_KEYS = 128


def use_fused_kernel(device: torch.device, num_keys: int, mask, return_attention: bool) -> bool:
    """Whether to call PyTorch's fused ``F.scaled_dot_product_attention`` instead of the step-by-step
    attention: only when nothing is masked (``causal`` is the kernel's own flag) and no weights are
    requested, on a GPU or for more than :data:`EXPLICIT_MAX_KEYS` keys on a CPU. Same function
    either way; with a mask the step-by-step path gives a query that may attend nothing a zero output."""
    if mask is not None or return_attention:
        return False
    return not (device.type == "cpu" and num_keys <= EXPLICIT_MAX_KEYS)


def allowed_keys(mask, causal: bool, scores_shape: torch.Size, device=None) -> torch.Tensor | None:
    """Which keys each query may attend to: ``None`` (all of them) or a boolean tensor broadcastable
    to ``scores_shape (B, h, T, S)``, True where query ``t`` may look at key ``s``.

    ``mask`` (1/True = allowed) may be ``(T, S)`` (shared), ``(B, T, S)`` (one per example, the
    same for every head) or anything broadcastable to ``(B, h, T, S)``; ``causal=True`` also
    blocks the keys after each query (``s > t``). A mask that does not fit raises a ValueError.
    """
    allowed = None
    if mask is not None:
        mask = torch.as_tensor(mask, device=device)
        if mask.dim() == 3:                                   # (B, T, S) -> (B, 1, T, S): shared by the heads
            mask = mask.unsqueeze(1)
        allowed = mask_as_bool(mask, scores_shape)
    if causal:
        T, S = scores_shape[-2:]
        if T != S:
            raise ValueError(f"a causal mask needs as many queries as keys, got T={T}, S={S}")
        earlier = causal_mask(T, device=device)               # (T, T): True where s <= t
        allowed = earlier if allowed is None else allowed & earlier
    return allowed


def attend(q, k, v, mask=None, causal: bool = False, dropout_p: float = 0.0, need_weights: bool = False):
    """Attention for all heads at once, as chapters 3 and 4 compute it: ``q (B, h, T, d)``,
    ``k, v (B, h, S, d)`` -> ``(out (B, h, T, d), weights (B, h, T, S) or None)``.

    The scores ``q k^T / sqrt(d)``, the keys each query may see (:func:`allowed_keys`), a softmax
    (chapter 3's :func:`~vitref.attention.softmax` when something is masked: a query that may
    attend nothing gets zero weights, not NaN), dropout on the weights (``dropout_p``), and the
    weighted sum of the values. Where :func:`use_fused_kernel` says so, PyTorch's fused kernel
    computes the same function instead (no weights then)."""
    if use_fused_kernel(q.device, k.shape[-2], mask, need_weights):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout_p), None
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)                   # (B, h, T, S)
    allowed = allowed_keys(mask, causal, scores.shape, q.device)               # None, or bool (.., T, S)
    if allowed is not None:
        weights = softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # blocked keys: weight 0
    else:
        weights = torch.softmax(scores, dim=-1)                                 # the same function, faster
    if dropout_p:
        weights = F.dropout(weights, dropout_p)
    return weights @ v, weights                                                 # (B, h, T, d), (B, h, T, S)


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
        dropout_p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, causal, dropout_p, return_attention)    # (B, h, N, d), (B, h, N, N)
        out = self.projection(rearrange(out, "b h n d -> b n (h d)"))          # (B, N, E)
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
                f"CrossAttention: batch sizes differ, "
                f"queries {shape_str(x.shape)} vs context {shape_str(context.shape)}"
            )
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)                       # (B, h, T, d)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)  # (B, h, S, d)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, False, dropout_p, return_attention)     # (B, h, T, d), (B, h, T, S)
        out = self.projection(rearrange(out, "b h t d -> b t (h d)"))          # (B, T, E)
        return (out, weights) if return_attention else out


__all__ = ["MultiHeadAttention", "MultiHeadAttentionLoop", "fused_from_loop", "CrossAttention", "attend"]
