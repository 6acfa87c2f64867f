"""Chapter 2, positional encoding: the slides' Q1, ``getPositionEncoding``; rotary position
embedding, ``apply_rope``.

Skeleton (the slides' Q1)::

    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(seq_len):
            for i in np.arange(int(d/2)):
                # Q1. Fill in the blanks to complete the positional encoding function.
                denominator = ...
                P[k, 2*i] = ...
                P[k, 2*i+1] = ...
        return P

The expected table: ``P[k, 2i] = sin(k / n^(2i/d))``, ``P[k, 2i+1] = cos(k / n^(2i/d))``.

``apply_rope(x)`` (RoPE, Su et al., 2021, arXiv:2104.09864): queries or keys ``x (..., T, D)``, D even;
the pair of features ``(2i, 2i+1)`` of token ``t`` rotated by the angle ``t * 10000^(-2i/D)``.
"""
from __future__ import annotations

import numpy as np

from . import inputs as I
from .base import Case, Question, register

Q1_CASES = [
    Case("seq_len=4, d=4, n=100 (the slides' table)", {"seq_len": 4, "d": 4, "n": 100}),
    Case("seq_len=10, d=6 (default n=10000)", {"seq_len": 10, "d": 6, "n": None}, {10: "seq_len", 6: "d"}),
    Case("seq_len=7, d=16, n=50", {"seq_len": 7, "d": 16, "n": 50}, {7: "seq_len", 16: "d"}),
    Case("seq_len=5, d=8, n=1000", {"seq_len": 5, "d": 8, "n": 1000}, {5: "seq_len", 8: "d"}),
]


def _run_q1(answer, case, rec):
    p = case.params
    if p["n"] is None:
        table = rec.call(answer, p["seq_len"], p["d"])
    else:
        table = rec.call(answer, p["seq_len"], p["d"], p["n"])
    rec.output("P", table)

register(Question(id="q1", chapter="02_positional_encoding", title="Q1 positional encoding (getPositionEncoding)",
                  points=2, answer_name="getPositionEncoding", kind="function", cases=Q1_CASES, run_case=_run_q1,
                  outputs={"P": "(seq_len, d)"}))


# --------------------------------------------------------------------------- rotary position embedding

ROPE_CASES = [
    Case("x (1, 1, 4, 2): one pair of features at 4 positions", {"shape": (1, 1, 4, 2), "seed": 21},
         {4: "T", 2: "D"}),
    Case("x (2, 3, 5, 8) = (B, H, T, D)", {"shape": (2, 3, 5, 8), "seed": 22}, {2: "B", 3: "H", 5: "T", 8: "D"}),
    Case("x (2, 6, 16) = (B, T, D), no head axis", {"shape": (2, 6, 16), "seed": 23}, {2: "B", 6: "T", 16: "D"}),
    Case("the same vector at all 7 positions, x (1, 2, 7, 6): the scores rope(x) @ rope(x)^T depend only on "
         "the offset between positions", {"shape": (1, 2, 7, 6), "seed": 24, "same_vector": True},
         {2: "H", 7: "T", 6: "D"}),
    Case("float64 x (2, 2, 9, 10) (the result must stay float64)",
         {"shape": (2, 2, 9, 10), "seed": 25, "dtype": "float64"}, {9: "T", 10: "D"}),
]


def _run_rope(answer, case, rec):
    p = case.params
    x = I.randn(p["shape"], p["seed"])
    if p.get("same_vector"):
        x = np.ascontiguousarray(np.broadcast_to(x[..., :1, :], x.shape))     # position 0's vector everywhere
    rotated = rec.output("rotated", rec.call(answer, rec.tensor(x, dtype=p.get("dtype"))))
    if p.get("same_vector"):
        rec.output("scores", rotated @ np.swapaxes(rotated, -1, -2))     # (B, H, T, T): constant along diagonals

register(Question(id="apply_rope", chapter="02_positional_encoding",
                  title="Rotary position embedding (apply_rope)", points=2, answer_name="apply_rope",
                  kind="function", cases=ROPE_CASES, run_case=_run_rope,
                  outputs={"rotated": "the shape of x, (..., T, D)", "scores": "(..., T, T)"}))
