"""Chapter 2, positional encoding: the slides' Q1, ``getPositionEncoding``.

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
"""
from __future__ import annotations


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

register(Question(
    id="q1",
    chapter="02_positional_encoding",
    title="Q1 positional encoding (getPositionEncoding)",
    points=2,
    answer_name="getPositionEncoding",
    kind="function",
    cases=Q1_CASES,
    run_case=_run_q1,
    outputs={"P": "(seq_len, d)"},
))
