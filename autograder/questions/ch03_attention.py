"""Chapter 3, attention: softmax, scaled dot-product attention, one attention head.

Skeletons::

    def softmax(x, dim=-1):
        # numerically stable: subtract the maximum along dim before exp
        ...

    def scaled_dot_product_attention(q, k, v, mask=None):
        # q (..., T, d_k), k (..., S, d_k), v (..., S, d_v); mask broadcastable to (..., T, S),
        # 1/True where query t may attend key s, 0/False where blocked.
        # returns (out (..., T, d_v), weights (..., T, S))
        ...

    class AttentionHead(nn.Module):
        def __init__(self, dim, head_dim):
            super().__init__()
            self.query = nn.Linear(dim, head_dim)
            self.key = nn.Linear(dim, head_dim)
            self.value = nn.Linear(dim, head_dim)

        def forward(self, x, mask=None):
            # x (B, T, dim) -> (out (B, T, head_dim), weights (B, T, T))
            ...

A query whose keys are all masked must not produce NaN: its weights may be all zeros (as
in vitref) or uniform (what a large negative fill such as -1e9 gives); both are accepted.
"""
from __future__ import annotations


import numpy as np

from . import inputs as I
from .base import Case, Question, register
from .common import KEY_BIAS, call_with_mask, case_mask, require_linear_biases

# --------------------------------------------------------------------------- softmax

SOFTMAX_CASES = [
    Case("x (2, 5), default dim", {"shape": (2, 5), "dim": None, "seed": 31, "scale": 3.0}, {2: "B", 5: "n"}),
    Case("x (3, 4, 6), dim=1", {"shape": (3, 4, 6), "dim": 1, "seed": 32, "scale": 2.0}),
    Case("x (2, 4) with values near +-1000 (overflow test)",
         {"shape": (2, 4), "dim": -1, "seed": 33, "scale": 3.0, "large": True}),
    Case("x (4, 3), dim=0", {"shape": (4, 3), "dim": 0, "seed": 34, "scale": 2.0}),
    Case("x (2, 5) with some -inf entries (masked logits)",
         {"shape": (2, 5), "dim": -1, "seed": 35, "scale": 2.0, "neg_inf": True}),
    Case("x (3, 6) with a wide spread along dim (one value near 2000 per row)",
         {"shape": (3, 6), "dim": -1, "seed": 36, "scale": 2.0, "spread": True}),
    Case("float64 x (2, 3, 4) with values near +-800, dim=1 (the result must stay float64)",
         {"shape": (2, 3, 4), "dim": 1, "seed": 37, "scale": 3.0, "large64": True, "dtype": "float64"}),
]


def _softmax_input(p):
    x = I.randn(p["shape"], p["seed"], p["scale"])
    if p.get("large"):
        x = x + np.array([[1000.0], [-1000.0]], dtype=np.float32)
    if p.get("spread"):
        x[:, 2] += 2000.0                 # exp(x - mean(x)) overflows; exp(x - max(x)) does not
    if p.get("large64"):
        x = x + np.array([800.0, -800.0], dtype=np.float32).reshape(2, 1, 1)   # exp(800) is inf in float64
        x[0, 0, 0] += 750.0          # x - min(x) reaches 750 there (inf); x - mean(x) only about 500
    if p.get("neg_inf"):
        x[0, 1] = -np.inf
        x[1, 3] = -np.inf
        x[1, 0] = -np.inf
    return x


def _run_softmax(answer, case, rec):
    p = case.params
    x = rec.tensor(_softmax_input(p), dtype=p.get("dtype"))
    out = rec.call(answer, x) if p["dim"] is None else rec.call(answer, x, p["dim"])
    rec.output("softmax", out)

register(Question(id="softmax", chapter="03_attention", title="Numerically stable softmax", points=1,
                  answer_name="softmax", kind="function", cases=SOFTMAX_CASES, run_case=_run_softmax,
                  forbidden=("softmax",), outputs={"softmax": "the shape of x"}))

# --------------------------------------------------------------------------- attention

ATTENTION_CASES = [
    Case("q, k, v (1, 3, 4), no mask", {"q": (1, 3, 4), "k": (1, 3, 4), "v": (1, 3, 4), "seed": 41},
         {1: "B", 3: "T=S", 4: "d_k=d_v"}),
    Case("q (2, 5, 8), k (2, 7, 8), v (2, 7, 6), no mask",
         {"q": (2, 5, 8), "k": (2, 7, 8), "v": (2, 7, 6), "seed": 42},
         {2: "B", 5: "T", 7: "S", 8: "d_k", 6: "d_v"}),
    Case("q (2, 3, 5, 8), k (2, 3, 7, 8), v (2, 3, 7, 6) (heads), mask (5, 7)",
         {"q": (2, 3, 5, 8), "k": (2, 3, 7, 8), "v": (2, 3, 7, 6), "mask": (5, 7), "seed": 43},
         {2: "B", 3: "h", 5: "T", 7: "S", 8: "d_k", 6: "d_v"}),
    Case("q (2, 4, 8), k (2, 6, 8), v (2, 6, 3), mask (2, 4, 6) with fully masked rows",
         {"q": (2, 4, 8), "k": (2, 6, 8), "v": (2, 6, 3), "mask": (2, 4, 6), "full_rows": [(0, 1), (1, 3)],
          "seed": 44},
         {2: "B", 4: "T", 6: "S", 8: "d_k", 3: "d_v"}),
    Case("float64 q (2, 3, 4, 6), k (2, 3, 5, 6), v (2, 3, 5, 7) (heads), mask (2, 1, 4, 5) with a fully masked "
         "row (the results must stay float64)",
         {"q": (2, 3, 4, 6), "k": (2, 3, 5, 6), "v": (2, 3, 5, 7), "mask": (2, 1, 4, 5), "full_rows": [(1, 0, 2)],
          "seed": 45, "dtype": "float64"},
         {2: "B", 3: "h", 4: "T", 5: "S", 6: "d_k", 7: "d_v"}),
]


def _run_attention(answer, case, rec):
    p = case.params
    q = rec.tensor(I.randn(p["q"], p["seed"]), dtype=p.get("dtype"))
    k = rec.tensor(I.randn(p["k"], p["seed"] + 100), dtype=p.get("dtype"))
    v = rec.tensor(I.randn(p["v"], p["seed"] + 200), dtype=p.get("dtype"))
    mask = case_mask(p)
    mask = None if mask is None else rec.tensor(mask)
    result = call_with_mask(rec, answer, q, k, v, mask=mask, mask_name="positional")
    out, weights = rec.unpack(result, ("out", "weights"), "scaled_dot_product_attention")
    rec.output("out", out)
    rec.output("weights", weights)

register(Question(id="attention", chapter="03_attention", title="Scaled dot-product attention", points=3,
                  answer_name="scaled_dot_product_attention", kind="function", cases=ATTENTION_CASES,
                  run_case=_run_attention, forbidden=("attention",),
                  outputs={"out": "(..., T, d_v)", "weights": "(..., T, S)"}))

# --------------------------------------------------------------------------- attention head

HEAD_CASES = [
    Case("AttentionHead(dim=8, head_dim=4), x (1, 5, 8), no mask",
         {"dim": 8, "head_dim": 4, "x": (1, 5, 8), "seed": 51}, {1: "B", 5: "T", 8: "dim", 4: "head_dim"}),
    Case("AttentionHead(dim=6, head_dim=3), x (2, 4, 6), causal mask (4, 4)",
         {"dim": 6, "head_dim": 3, "x": (2, 4, 6), "causal": 4, "seed": 52}, {2: "B", 4: "T", 6: "dim", 3: "head_dim"}),
    Case("AttentionHead(dim=4, head_dim=8), x (3, 2, 4), mask (3, 2, 2)",
         {"dim": 4, "head_dim": 8, "x": (3, 2, 4), "mask": (3, 2, 2), "seed": 53},
         {3: "B", 2: "T", 4: "dim", 8: "head_dim"}),
    Case("AttentionHead(dim=8, head_dim=3), x (2, 5, 8), mask (2, 5, 5) with fully masked rows",
         {"dim": 8, "head_dim": 3, "x": (2, 5, 8), "mask": (2, 5, 5), "full_rows": [(0, 1), (1, 4)], "seed": 54},
         {2: "B", 5: "T", 8: "dim", 3: "head_dim"}),
    Case("AttentionHead(dim=6, head_dim=4), float64 x (3, 5, 6), causal mask (5, 5), gradients of x and of "
         "every parameter",
         {"dim": 6, "head_dim": 4, "x": (3, 5, 6), "causal": 5, "seed": 55, "dtype": "float64", "grads": True,
          "param_grads": KEY_BIAS},
         {3: "B", 5: "T", 6: "dim", 4: "head_dim"}),
]


def _run_head(answer, case, rec):
    p = case.params
    head = rec.build(answer, p["dim"], p["head_dim"], heads=1, dtype=p.get("dtype"))
    require_linear_biases(head, "your AttentionHead")
    x = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    mask = case_mask(p)
    mask = None if mask is None else rec.tensor(mask)
    result = call_with_mask(rec, head, x, mask=mask, mask_name="positional")
    out, weights = rec.unpack(result, ("out", "weights"), "AttentionHead.forward")
    rec.output("out", out)
    rec.output("weights", weights)
    if p.get("grads"):
        upstream = rec.tensor(I.randn((*p["x"][:2], p["head_dim"]), p["seed"] + 7))     # (B, T, head_dim)
        rec.grads(out, upstream, {"x": x}, head, params=bool(p.get("param_grads")))

register(Question(id="attention_head", chapter="03_attention", title="One attention head", points=2,
                  answer_name="AttentionHead", kind="class", cases=HEAD_CASES, run_case=_run_head,
                  forbidden=("attention",), outputs={"out": "(B, T, head_dim)", "weights": "(B, T, T)"}))
