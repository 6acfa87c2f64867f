"""Causal self-attention with a key/value cache, for decoding one chunk of tokens at a time.

Generating a sequence token by token with a causal decoder recomputes, at every step, the
keys and values of the whole prefix, although they never change (token ``s`` only sees tokens
``<= s``). A *KV cache* keeps them: each step computes the queries, keys and values of the
new tokens only, appends the keys and values to the cache, and lets the new queries attend to
everything cached so far. The outputs are exactly those of recomputing the whole prefix.

    attn = CachedSelfAttention(emb_size=64, num_heads=4)
    out, cache = attn(prompt)                 # prompt (B, T0, E): causal attention over the prompt
    out, cache = attn(next_token, cache)      # (B, 1, E), attends to the T0 cached tokens and itself

``cache`` is ``(keys, values)``, each ``(B, heads, S, head_dim)`` with ``S`` the number of
tokens seen so far, oldest first. The layers are those of :class:`vitref.MultiHeadAttention`
(one fused ``qkv`` layer laid out ``(qkv h d)``, and ``projection``), so its weights load as
they are.

This one class is the chapter 8 exercise (``forward(x, cache)``, graded as ``kv_cache``) and the
attention of :class:`vitref.generation.DecoderOnlyLM`, which also passes a ``key_mask`` for
padded batches and trains with ``dropout``; :class:`vitref.generation.KVCache` holds one
``(keys, values)`` pair per layer, as each layer returns it.
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from ._checks import check_divisible, expect_dims, expect_last_dim, shape_str
from .attention import scaled_dot_product_attention


class CachedSelfAttention(nn.Module):
    """``forward(x (B, T, E), cache=None, key_mask=None) -> (out (B, T, E), (keys, values))``.

    The ``T`` new tokens sit at positions ``S .. S+T-1`` after the ``S`` cached ones: new token
    ``t`` attends to every cached token and to the new tokens ``<= t`` (causal). The returned
    ``keys`` and ``values`` are the cached ones followed by the new ones, ``(B, h, S+T, d)`` each:
    the ``cache`` of the next call.

    * ``key_mask (B, S+T)``, optional: 1/True for a real token, 0/False for padding, over the
      cached and the new tokens. Padded keys are hidden; a query that can see no key at all (a
      padding position at the start of a left-padded row) gets a zero output, never NaN
      (:func:`~vitref.attention.softmax`).
    * ``dropout``: applied to the output, after ``projection`` (0.0, the default, changes nothing).

    Without a cache and a key mask (a plain causal pass, as in training) no query row is ever
    fully blocked, and the softmax is PyTorch's fused one; otherwise it is
    :func:`~vitref.attention.scaled_dot_product_attention`, from scratch.
    """

    def __init__(self, emb_size: int = 768, num_heads: int = 8, dropout: float = 0.0):
        super().__init__()
        self.head_dim = check_divisible(emb_size, num_heads)
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cache=None, key_mask=None):
        expect_dims(x, "B, T, E", "CachedSelfAttention input")
        expect_last_dim(x, self.emb_size, "E", "CachedSelfAttention input")
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)  # (B, h, T, d)
        past = 0
        if cache is not None:
            past_k, past_v = self._check_cache(cache, k)                      # (B, h, S, d) each
            past = past_k.shape[2]
            k = torch.cat([past_k, k], dim=2)                                 # (B, h, S+T, d)
            v = torch.cat([past_v, v], dim=2)
        T, total = q.shape[2], k.shape[2]
        # query t sits at position past + t: it may see keys s <= past + t (always itself, at least)
        allowed = torch.ones(T, total, dtype=torch.bool, device=x.device).tril(diagonal=past)   # (T, S+T)
        if key_mask is not None:
            allowed = allowed & self._check_key_mask(key_mask, x.shape[0], past, T)[:, None, None, :]  # (B, 1, T, S+T)
        if cache is None and key_mask is None:
            # a plain causal pass (training): no row is ever fully blocked, PyTorch's fused softmax is safe
            scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5                 # (B, h, T, T)
            out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v   # (B, h, T, d)
        else:
            out, _ = scaled_dot_product_attention(q, k, v, mask=allowed)               # (B, h, T, d)
        out = self.dropout(self.projection(rearrange(out, "b h t d -> b t (h d)")))   # (B, T, E)
        return out, (k, v)

    @staticmethod
    def _check_cache(cache, new_k: torch.Tensor):
        """``cache`` as ``(keys, values)``, each ``(B, h, S, d)`` and fitting the new keys ``(B, h, T, d)``."""
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            raise TypeError(f"cache must be None or a pair (keys, values), each (B, h, S, d); "
                            f"got {type(cache).__name__}")
        past_k, past_v = cache
        B, h, _, d = new_k.shape
        for name, t in (("keys", past_k), ("values", past_v)):
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.shape[0] != B or t.shape[1] != h \
                    or t.shape[3] != d:
                got = shape_str(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"cached {name} {got} do not fit the new keys (B, h, T, d) = "
                                 f"{shape_str(new_k.shape)}: expected (B, h, S, d) = ({B}, {h}, S, {d})")
        if past_k.shape != past_v.shape:
            raise ValueError(f"cached keys {shape_str(past_k.shape)} and values {shape_str(past_v.shape)} "
                             "must have the same shape (B, h, S, d)")
        return past_k, past_v

    @staticmethod
    def _check_key_mask(key_mask, batch: int, past: int, new: int) -> torch.Tensor:
        """``key_mask`` as a boolean ``(B, S+T)`` tensor, one entry per cached and new token."""
        if not isinstance(key_mask, torch.Tensor):
            key_mask = torch.as_tensor(key_mask)
        if key_mask.shape != (batch, past + new):
            raise ValueError(f"key_mask must have shape (B, S+T) = ({batch}, {past + new}): one entry per "
                             f"token, {past} cached + {new} new; got {shape_str(key_mask.shape)}")
        return key_mask if key_mask.dtype == torch.bool else key_mask != 0


__all__ = ["CachedSelfAttention"]
