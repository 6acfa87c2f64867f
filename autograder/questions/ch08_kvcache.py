"""Chapter 8, decoding with a key/value cache.

Skeleton::

    class CachedSelfAttention(nn.Module):
        def __init__(self, emb_size, num_heads):
            super().__init__()
            self.num_heads = num_heads
            self.qkv = nn.Linear(emb_size, 3 * emb_size)        # laid out (qkv h d)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, cache=None):
            # x (B, T, E): the T newest tokens; cache None or (keys, values), each (B, h, S, d):
            # the S earlier tokens, oldest first. Causal: new token t (at position S + t) sees
            # every cached token and the new tokens up to itself.
            # returns (out (B, T, E), (keys, values) each (B, h, S + T, d))
            ...

The probe decodes a sequence in chunks (a prompt, then one or more tokens per step), passing
the cache returned by each step to the next; it records every step's output, the final
cache, and the output of one call on the whole sequence without a cache. The reference
(:class:`vitref.CachedSelfAttention`) gives, at every step, exactly the rows of that
whole-sequence output: incremental decoding equals recomputing the prefix.
"""
from __future__ import annotations

from . import inputs as I
from .base import Case, Question, register
from .common import build_flexible, first_if_tuple
from .errors import CaseFailure

KV_CASES = [
    Case("CachedSelfAttention(emb_size=8, num_heads=2), B=2: a prompt of 3 tokens, then 3 steps of 1 token",
         {"E": 8, "h": 2, "B": 2, "steps": [3, 1, 1, 1], "seed": 211}, {2: "B", 8: "E"}),
    Case("CachedSelfAttention(emb_size=12, num_heads=3), B=1: chunks of 1, 2, 1 and 3 tokens",
         {"E": 12, "h": 3, "B": 1, "steps": [1, 2, 1, 3], "seed": 212}, {1: "B", 12: "E", 3: "h"}),
    Case("CachedSelfAttention(emb_size=8, num_heads=4), B=3: a prompt of 2 tokens, then 4 steps of 1 token",
         {"E": 8, "h": 4, "B": 3, "steps": [2, 1, 1, 1, 1], "seed": 213}, {3: "B", 8: "E", 4: "h"}),
]


def _run_kv(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]},
                            heads=p["h"], head_width=p["E"])
    total = sum(p["steps"])
    x = rec.tensor(I.randn((p["B"], total, p["E"]), p["seed"]))
    cache, start = None, 0
    for step, length in enumerate(p["steps"]):
        chunk = x[:, start:start + length]
        result = rec.call(module, chunk) if cache is None else rec.call(module, chunk, cache)
        out, cache = rec.unpack(result, ("out", "cache"), "CachedSelfAttention.forward")
        rec.check_new_params(module)
        rec.output(f"out of step {step + 1} (tokens {start}..{start + length - 1})", out)
        start += length
    if type(cache) not in (tuple, list) or len(cache) != 2:
        got = f"a {type(cache).__name__}" + (f" of {len(cache)} items" if type(cache) in (tuple, list) else "")
        raise CaseFailure(f"the cache returned by forward should be a tuple (keys, values), each (B, h, S, d); "
                          f"got {got}")
    keys, values = cache
    rec.output("cached keys", keys)
    rec.output("cached values", values)
    full = rec.call(module, x)
    if type(full) not in (tuple, list):
        raise CaseFailure("CachedSelfAttention.forward(x) without a cache should return (out, cache) as well")
    rec.output("out of the whole sequence without a cache", first_if_tuple(full))


register(Question(id="kv_cache", chapter="08_decoder", title="Decoding with a key/value cache", points=3,
                  answer_name="CachedSelfAttention", kind="class", cases=KV_CASES, run_case=_run_kv,
                  forbidden=("attention",),
                  outputs={"cached keys": "(B, h, S, d)", "cached values": "(B, h, S, d)"}))
