"""Chapter 4, multi-head attention: the slides' Q5 (fused, einsum) and a loop of heads.

Q5's skeleton (the slides' MultiHeadAttention, blanks in its last lines) is the ``q5-answer`` cell of
``solutions/04_multihead_attention/04_multihead_attention.ipynb``; the chapter's answer bank
(``tests/answers/ch04_multihead_attention.py``) holds the solved cell, kept equal to the notebook's by
``tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer``.

Correct answers may also lay the fused projection out as ``(h d qkv)`` or use three
separate linear layers: the checker loads the same weights either way.
"""
from __future__ import annotations

import functools

from . import inputs as I
from .base import Case, Question, register
from .common import KEY_BIAS, build_flexible, call_with_mask, case_mask, require_linear_biases, single_output


def _mha_case(label, **p):
    """A case of q5 / mha_loop: E, h, x (B, N, E), seed; optional mask spec (``mask``, ``full_rows``,
    ``causal``), ``dropout`` (p, with ``train`` and ``reseed``), ``dtype``, ``grads``/``param_grads``,
    ``attention`` (return_attention=True)."""
    b, n, e = p["x"]
    dims = {b: "B", n: "N", e: "E"}
    if p["h"] not in dims:
        dims[p["h"]] = "h"
    return Case(label, p, dims)


MHA_CASES = [
    _mha_case("MultiHeadAttention(emb_size=8, num_heads=2), x (3, 5, 8)", E=8, h=2, x=(3, 5, 8), seed=61),
    _mha_case("MultiHeadAttention(emb_size=12, num_heads=3), x (1, 4, 12)", E=12, h=3, x=(1, 4, 12), seed=62),
    _mha_case("MultiHeadAttention(emb_size=16, num_heads=4), x (2, 3, 16)", E=16, h=4, x=(2, 3, 16), seed=63),
    _mha_case("MultiHeadAttention(emb_size=8, num_heads=2), x (3, 5, 8), mask (5, 5) with a fully masked row",
              E=8, h=2, x=(3, 5, 8), mask=(5, 5), full_rows=[(3,)], seed=64),
    _mha_case("MultiHeadAttention(emb_size=12, num_heads=3), x (2, 4, 12), mask (2, 1, 4, 4) (one per example) "
              "with a fully masked row", E=12, h=3, x=(2, 4, 12), mask=(2, 1, 4, 4), full_rows=[(1, 0, 0)],
              seed=65),
    _mha_case("MultiHeadAttention(emb_size=8, num_heads=2), float64 x (3, 4, 8), gradients of x and of every "
              "parameter", E=8, h=2, x=(3, 4, 8), seed=66, dtype="float64", grads=True, param_grads=True),
    _mha_case("MultiHeadAttention(emb_size=8, num_heads=2, dropout=0.5) in eval mode (model.eval(): no dropout), "
              "x (3, 5, 8)", E=8, h=2, x=(3, 5, 8), seed=67, dropout=0.5, train=False, reseed=11),
    _mha_case("MultiHeadAttention(emb_size=12, num_heads=3, dropout=1.0) in train mode (every attention weight "
              "dropped), x (2, 4, 12)", E=12, h=3, x=(2, 4, 12), seed=68, dropout=1.0, train=True, reseed=5),
    _mha_case("MultiHeadAttention(emb_size=8, num_heads=2, dropout=0.5) in train mode after "
              "torch.manual_seed(1234), float64 x (3, 5, 8)", E=8, h=2, x=(3, 5, 8), seed=69, dropout=0.5,
              train=True, reseed=1234, dtype="float64"),
]


def _build_mha(rec, answer, p, **meta):
    """MultiHeadAttention(emb_size, num_heads[, dropout]) with the exercise's names, else positionally."""
    if "dropout" in p:
        module = build_flexible(rec, answer, (p["E"], p["h"], p["dropout"]),
                                {"emb_size": p["E"], "num_heads": p["h"], "dropout": p["dropout"]},
                                train=bool(p.get("train")), dtype=p.get("dtype"), **meta)
    else:
        module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]},
                                dtype=p.get("dtype"), **meta)
    require_linear_biases(module, "the module")
    return module


def _forward_mha(rec, module, p, return_attention=False, with_flag=False):
    """Run the module on the case's x and mask; record out (and weights), gradients."""
    x = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    mask = case_mask(p)
    mask = None if mask is None else rec.tensor(mask)
    if "reseed" in p:
        rec.seed(p["reseed"])
    fn = functools.partial(module, return_attention=True) if return_attention else module
    result = call_with_mask(rec, fn, x, mask=mask, mask_name="positional")
    rec.check_new_params(module)
    if return_attention:
        out, weights = rec.unpack(result, ("out", "weights"),
                                  f"{type(module).__name__}(x, mask, return_attention=True)")
        rec.output("out", out)
        rec.output("weights", weights)
    else:
        # the loop's forward takes return_attention; the slides' MultiHeadAttention returns out
        out = single_output(result, "forward(x, mask)", attention_flag=with_flag)
        rec.output("out", out)
    if p.get("grads"):
        upstream = rec.tensor(I.randn(p["x"], p["seed"] + 7))                       # (B, N, E)
        rec.grads(out, upstream, {"x": x}, module, params=bool(p.get("param_grads")))


def _run_mha(answer, case, rec):
    p = case.params
    module = _build_mha(rec, answer, p, heads=p["h"])
    _forward_mha(rec, module, p)


# --------------------------------------------------------------------------- loop of heads

LOOP_CASES = [
    _mha_case("MultiHeadAttentionLoop(emb_size=8, num_heads=2), x (3, 5, 8)", E=8, h=2, x=(3, 5, 8), seed=71),
    _mha_case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), x (1, 4, 12)", E=12, h=3, x=(1, 4, 12), seed=72),
    _mha_case("MultiHeadAttentionLoop(emb_size=8, num_heads=2), x (3, 5, 8), mask (5, 5) with a fully masked row, "
              "return_attention=True", E=8, h=2, x=(3, 5, 8), mask=(5, 5), full_rows=[(2,)], seed=73,
              attention=True),
    _mha_case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), float64 x (2, 4, 12), mask (2, 4, 4) (one per "
              "example) with a fully masked row, return_attention=True (out and weights must stay float64)",
              E=12, h=3, x=(2, 4, 12), mask=(2, 4, 4), full_rows=[(1, 3)], seed=74, attention=True, dtype="float64"),
    _mha_case("MultiHeadAttentionLoop(emb_size=16, num_heads=4), x (3, 2, 16), return_attention=True",
              E=16, h=4, x=(3, 2, 16), seed=75, attention=True),
    _mha_case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), float64 x (2, 5, 12), causal mask (5, 5), "
              "gradients of x and of every parameter", E=12, h=3, x=(2, 5, 12), causal=5, seed=76,
              dtype="float64", grads=True, param_grads=KEY_BIAS),
]


def _run_loop(answer, case, rec):
    p = case.params
    module = _build_mha(rec, answer, p, heads=p["h"], head_width=p["E"])
    _forward_mha(rec, module, p, return_attention=bool(p.get("attention")), with_flag=True)

register(Question(id="mha_loop", chapter="04_multihead_attention", title="Multi-head attention as a loop of heads",
                  points=2, answer_name="MultiHeadAttentionLoop", kind="class", cases=LOOP_CASES,
                  run_case=_run_loop, forbidden=("attention",),
                  outputs={"out": "(B, N, E)", "weights": "(B, h, N, N)"}))

# the notebook builds the loop of heads first, then the einsum version (Q5)
register(Question(id="q5", chapter="04_multihead_attention", title="Q5 multi-head attention (einsum + rearrange)",
                  points=3, answer_name="MultiHeadAttention", kind="class", cases=MHA_CASES, run_case=_run_mha,
                  forbidden=("attention",), outputs={"out": "(B, N, E)"}))
