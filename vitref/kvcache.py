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
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from ._checks import check_divisible
from .attention import softmax


class CachedSelfAttention(nn.Module):
    """``forward(x (B, T, E), cache=None) -> (out (B, T, E), (keys, values))``.

    The ``T`` new tokens sit at positions ``S .. S+T-1`` after the ``S`` cached ones: new token
    ``t`` attends to every cached token and to the new tokens ``<= t`` (causal).
    """

    def __init__(self, emb_size: int = 768, num_heads: int = 8):
        super().__init__()
        self.head_dim = check_divisible(emb_size, num_heads)
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, cache=None):
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)  # (B, h, T, d)
        if cache is not None:
            past_k, past_v = cache
            k = torch.cat([past_k, k], dim=2)                                   # (B, h, S+T, d)
            v = torch.cat([past_v, v], dim=2)
        T, total = q.shape[2], k.shape[2]
        past = total - T
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5               # (B, h, T, S+T)
        query_pos = torch.arange(past, total, device=x.device)[:, None]        # absolute positions of the queries
        key_pos = torch.arange(total, device=x.device)[None, :]
        scores = scores.masked_fill(key_pos > query_pos, float("-inf"))       # each query sees itself at least
        weights = softmax(scores, dim=-1)
        out = rearrange(weights @ v, "b h t d -> b t (h d)")
        return self.projection(out), (k, v)
