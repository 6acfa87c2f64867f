"""The reference and the catalogue of mistakes of the KV-cache exercise (grader side).

The reference is :class:`vitref.CachedSelfAttention` (vitref/kvcache.py); a second reference
fills blocked scores with -1e9 instead of -inf (the notebooks' convention): in a causal
decoder every query sees at least itself, so both give the same weights.
"""
from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

import vitref

from ..model import Mistake
from ._entry import add
from ._changes import values_from_keys
from ._symptoms import FLOAT_MIX, PROPERTIES, RECIPE_SAYS


def _cached(cache_mode="append", causal="offset", scale="head", fill=float("-inf")):
    """A (possibly wrong) cached self-attention, parametrised by the mistake.

    cache_mode: "append" (right), "ignore" (attend only to the new chunk, cache returned
    grown), "replace" (the cache holds only the last chunk), "prepend" (new keys before the
    old ones). causal: "offset" (right), "none" (no mask), "tril" (tril of (T, S+T) without
    the offset of the cached tokens), "new_only" (no mask on the new tokens but the cache
    is visible)."""
    def build(parts):
        class CachedSelfAttention(nn.Module):
            def __init__(self, emb_size, num_heads):
                super().__init__()
                self.num_heads = num_heads
                self.emb_size = emb_size
                self.qkv = nn.Linear(emb_size, 3 * emb_size)
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, cache=None):
                q, k_new, v_new = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)
                if cache is None:
                    k, v = k_new, v_new
                elif cache_mode == "prepend":
                    k, v = torch.cat([k_new, cache[0]], dim=2), torch.cat([v_new, cache[1]], dim=2)
                else:
                    k, v = torch.cat([cache[0], k_new], dim=2), torch.cat([cache[1], v_new], dim=2)
                att_k, att_v = (k_new, v_new) if cache_mode == "ignore" else (k, v)
                T, total = q.shape[2], att_k.shape[2]
                d = q.shape[-1] if scale == "head" else self.emb_size
                scores = q @ att_k.transpose(-2, -1) / d ** 0.5
                if causal == "offset":
                    allowed = torch.ones(T, total, dtype=torch.bool).tril(total - T)
                elif causal == "tril":
                    allowed = torch.ones(T, total, dtype=torch.bool).tril()
                else:
                    allowed = torch.ones(T, total, dtype=torch.bool)
                scores = scores.masked_fill(~allowed, fill)
                weights = torch.softmax(scores, dim=-1)
                out = self.projection(rearrange(weights @ att_v, "b h t d -> b t (h d)"))
                returned = (k_new, v_new) if cache_mode == "replace" else (k, v)
                return out, returned
        return CachedSelfAttention
    return build


KV_MISTAKES = [
    Mistake("cache_not_attended", "the new tokens attend only to themselves, not to the cache",
            "Concatenate the cached keys and values with the new ones (along the tokens axis, dim 2) and let the "
            "new queries attend to all of them.", _cached(cache_mode="ignore"),
            also=(_cached(cache_mode="ignore", fill=-1e9),)),
    Mistake("cache_replaced", "the cache returned holds only the newest tokens",
            "Return the grown cache (old keys and values followed by the new ones), so the next step sees every "
            "earlier token.", _cached(cache_mode="replace"), also=(_cached(cache_mode="replace", fill=-1e9),)),
    Mistake("new_before_old", "the new keys placed before the cached ones",
            "Keep the cache in token order, oldest first: torch.cat([past_k, k], dim=2).",
            _cached(cache_mode="prepend"), also=(_cached(cache_mode="prepend", fill=-1e9),)),
    Mistake("no_causal_mask", "no causal mask within a chunk of new tokens",
            "When several tokens arrive at once (a prompt), token t must not see the new tokens after it: block "
            "key positions greater than the query's position S + t.", _cached(causal="none")),
    Mistake("mask_without_offset", "the causal mask ignores the cached tokens' positions",
            "A new token t sits at position S + t (S cached tokens before it): allow keys s <= S + t, e.g. "
            "torch.ones(T, S + T).tril(S) (the diagonal offset), not .tril().",
            _cached(causal="tril", fill=-1e9)),
    Mistake("scale_by_emb_size", "scores scaled by sqrt(emb_size) instead of sqrt(head_dim)",
            "Each head's dot products are between d = emb_size / num_heads numbers: divide by sqrt(d).",
            _cached(scale="emb"), also=(_cached(scale="emb", fill=-1e9),)),
]


def _references():
    return [vitref.CachedSelfAttention, _cached(fill=-1e9)(None)]


add("kv_cache", references=_references,
    catalogue=[*KV_MISTAKES, values_from_keys(), *PROPERTIES, FLOAT_MIX, *RECIPE_SAYS])
