"""Chapter 8, the decoder: causal mask, cross-attention, decoder block.

The skeletons are the answer cells of ``solutions/08_decoder/08_decoder.ipynb`` (``causal_mask-answer``,
``cross_attention-answer``, ``decoder_block-answer``): ``causal_mask(T)`` -> (T, T), True where query t may
attend key s (s <= t); ``CrossAttention(emb_size, num_heads, context_dim=None)``, forward(x (B, T, emb_size),
context (B, S, context_dim), mask=None, return_attention=False) -> (B, T, emb_size); ``DecoderBlock(dim,
num_heads, mlp_dim, context_dim=None)``, forward(x, context, self_mask=None), self_mask None or "causal".
"""
from __future__ import annotations

import numpy as np

from . import inputs as I
from .base import Case, Question, register
from .common import build_flexible, single_output

# Key projections' biases get a zero gradient by design (softmax ignores a constant shift of a
# query's scores): excluded from the parameter-gradient checks.
NO_KEY_BIAS = ("!key.bias", "!keys.bias", "!k.bias", "!k_proj.bias")

# --------------------------------------------------------------------------- causal mask

MASK_CASES = [
    Case("T=1", {"T": 1}),
    Case("T=4", {"T": 4}),
    Case("T=7", {"T": 7}),
]


def _run_mask(answer, case, rec):
    mask = rec.output("mask", rec.call(answer, case.params["T"]))
    if mask.dtype == bool:
        rec.outputs["mask"] = mask.astype(np.float64)

register(Question(id="causal_mask", chapter="08_decoder", title="Causal mask", points=1, answer_name="causal_mask",
                  kind="function", cases=MASK_CASES, run_case=_run_mask, outputs={"mask": "(T, T)"}))

# --------------------------------------------------------------------------- cross-attention

def _cross_case(label, E, h, ctx, x, c, seed, dims, **extra):
    # the exercise fixes key_value's layout, (kv h d): only that layout of the student's weights is tried
    return Case(label, {"E": E, "h": h, "ctx": ctx, "x": x, "c": c, "seed": seed, "fused_layouts": 1, **extra},
                dims)


CROSS_CASES = [
    _cross_case("CrossAttention(emb_size=8, num_heads=2, context_dim=6), x (3, 4, 8), context (3, 5, 6)",
                8, 2, 6, (3, 4, 8), (3, 5, 6), 191, {3: "B", 4: "T", 5: "S", 8: "E", 6: "context_dim"}),
    _cross_case("CrossAttention(emb_size=12, num_heads=3), x (1, 2, 12), context (1, 7, 12)",
                12, 3, None, (1, 2, 12), (1, 7, 12), 192, {1: "B", 2: "T", 7: "S", 12: "E"}),
    _cross_case("CrossAttention(emb_size=8, num_heads=4, context_dim=10), x (2, 5, 8), context (2, 3, 10)",
                8, 4, 10, (2, 5, 8), (2, 3, 10), 193, {2: "B", 5: "T", 3: "S", 8: "E", 10: "context_dim"}),
    _cross_case("CrossAttention(emb_size=8, num_heads=2, context_dim=6), x (2, 3, 8), context (2, 5, 6), "
                "context padding mask (2, 1, 1, 5)",
                8, 2, 6, (2, 3, 8), (2, 5, 6), 194, {2: "B", 3: "T", 5: "S", 8: "E", 6: "context_dim"},
                mask=(2, 1, 1, 5), tests="mask"),
    _cross_case("CrossAttention(emb_size=8, num_heads=2, context_dim=6), x (3, 4, 8), context (3, 5, 6), "
                "return_attention=True",
                8, 2, 6, (3, 4, 8), (3, 5, 6), 195, {3: "B", 2: "heads", 4: "T", 5: "S", 8: "E", 6: "context_dim"},
                return_attention=True, tests="weights"),
    _cross_case("CrossAttention(emb_size=12, num_heads=3, context_dim=8) in float64, x (2, 3, 12), context "
                "(2, 4, 8), mask (2, 1, 3, 4) in which query 2 of example 1 may see no context position, "
                "return_attention=True",
                12, 3, 8, (2, 3, 12), (2, 4, 8), 196, {2: "B", 3: "T", 4: "S", 12: "E", 8: "context_dim"},
                mask=(2, 1, 3, 4), full_rows=[(1, 0, 2)], dtype="float64", return_attention=True,
                tests="mask_full"),
    _cross_case("CrossAttention(emb_size=8, num_heads=2, context_dim=6) in float64, x (2, 3, 8), context "
                "(2, 5, 6), context padding mask (2, 1, 1, 5), gradients of x, context and every parameter",
                8, 2, 6, (2, 3, 8), (2, 5, 6), 197, {2: "B", 3: "T", 5: "S", 8: "E", 6: "context_dim"},
                mask=(2, 1, 1, 5), dtype="float64", grads=True, param_grads=NO_KEY_BIAS, tests="grads"),
]


def _call_masked(rec, fn, *args, mask=None, **kwargs):
    """``fn(*args, mask=mask, **kwargs)`` with a bool mask; if the answer rejects bool masks,
    retry with a 0/1 float mask (the contract allows both: 0/False = blocked)."""
    if mask is None:
        return rec.call(fn, *args, **kwargs)
    first_error = None
    for variant in (mask, mask.float(), mask.long()):
        try:
            return rec.call(fn, *args, mask=variant, **kwargs)
        except Exception as error:
            if type(error).__name__ == "ForbiddenCall":
                raise
            if first_error is None:
                first_error = error
    raise first_error


def cross_mask(p):
    """The case's mask as a bool array (None without one)."""
    if "mask" not in p:
        return None
    return I.bernoulli_mask(p["mask"], p["seed"] + 2, full_rows=tuple(tuple(r) for r in p.get("full_rows", ())))


def _x_and_context(rec, p) -> tuple:
    """The decoder's tokens x ``p["x"]`` (B, T, E) and the encoder's output ``p["c"]`` (B, S, context_dim), as
    tensors in ``p["dtype"]`` that require grad when the case asks for gradients."""
    grads = bool(p.get("grads"))
    x = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=grads)
    context = rec.tensor(I.randn(p["c"], p["seed"] + 1), dtype=p.get("dtype"), requires_grad=grads)
    return x, context


def _grads_of_x_and_context(rec, p, out, x, context, module) -> None:
    """When the case asks for gradients (``p["grads"]``), record those of x and context (and of the parameters
    when ``p["param_grads"]``) for a random upstream gradient shaped like the output (B, T, E)."""
    if not p.get("grads"):
        return
    upstream = rec.tensor(I.randn(p["x"], p["seed"] + 7))
    rec.grads(out, upstream, {"x": x, "context": context}, module, params=bool(p.get("param_grads")))


def _run_cross(answer, case, rec):
    p = case.params
    kwargs = {"emb_size": p["E"], "num_heads": p["h"]}
    if p["ctx"] is not None:
        kwargs["context_dim"] = p["ctx"]
    args = (p["E"], p["h"]) if p["ctx"] is None else (p["E"], p["h"], p["ctx"])
    module = build_flexible(rec, answer, args, kwargs, heads=p["h"], head_width=p["E"], dtype=p.get("dtype"))
    x, context = _x_and_context(rec, p)
    mask = cross_mask(p)       # (B, 1, 1, S) hides padded context positions; (B, 1, T, S) per query
    mask = None if mask is None else rec.tensor(mask)
    if p.get("return_attention"):
        result = _call_masked(rec, module, x, context, mask=mask, return_attention=True)
        out, weights = rec.unpack(result, ("out", "weights"), "CrossAttention.forward(x, context, mask, "
                                                              "return_attention=True)")
    else:
        out = single_output(_call_masked(rec, module, x, context, mask=mask), "CrossAttention(x, context, mask)",
                            attention_flag=True)
        weights = None
    rec.check_new_params(module)
    rec.output("out", out)
    if weights is not None:
        rec.output("weights", weights)
    _grads_of_x_and_context(rec, p, out, x, context, module)

register(Question(id="cross_attention", chapter="08_decoder", title="Cross-attention", points=3,
                  answer_name="CrossAttention", kind="class", cases=CROSS_CASES, run_case=_run_cross,
                  forbidden=("attention",),
                  outputs={"out": "(B, T, E)", "weights": "(B, heads, T, S)", "grad_x": "(B, T, E)",
                           "grad_context": "(B, S, context_dim)"}))

# --------------------------------------------------------------------------- decoder block

DEC_CASES = [
    Case("DecoderBlock(dim=8, num_heads=2, mlp_dim=16, context_dim=6), x (2, 4, 8), context (2, 5, 6), "
         "self_mask='causal'",
         {"D": 8, "h": 2, "mlp": 16, "ctx": 6, "x": (2, 4, 8), "c": (2, 5, 6), "causal": True, "seed": 201,
          "fused_layouts": 1},
         {2: "B", 4: "T", 5: "S", 8: "dim", 6: "context_dim"}),
    Case("DecoderBlock(dim=12, num_heads=3, mlp_dim=24), x (1, 3, 12), context (1, 6, 12), no mask",
         {"D": 12, "h": 3, "mlp": 24, "ctx": None, "x": (1, 3, 12), "c": (1, 6, 12), "causal": False, "seed": 202,
          "fused_layouts": 1},
         {1: "B", 3: "T", 6: "S", 12: "dim"}),
    Case("DecoderBlock(dim=8, num_heads=2, mlp_dim=16, context_dim=6), x (3, 5, 8), context (3, 2, 6), "
         "self_mask='causal'",
         {"D": 8, "h": 2, "mlp": 16, "ctx": 6, "x": (3, 5, 8), "c": (3, 2, 6), "causal": True, "seed": 203,
          "fused_layouts": 1},
         {3: "B", 5: "T", 2: "S", 8: "dim", 6: "context_dim"}),
    Case("DecoderBlock(dim=12, num_heads=3, mlp_dim=24), x (2, 6, 12), context (2, 3, 12), self_mask='causal', "
         "then the same x with its last token changed (earlier outputs must not change)",
         {"D": 12, "h": 3, "mlp": 24, "ctx": None, "x": (2, 6, 12), "c": (2, 3, 12), "causal": True, "seed": 204,
          "fused_layouts": 1, "future": True, "tests": "causal"},
         {2: "B", 6: "T", 3: "S", 12: "dim"}),
    Case("DecoderBlock(dim=8, num_heads=2, mlp_dim=16, context_dim=6) in float64, x (2, 4, 8), context (2, 3, 6), "
         "self_mask='causal', gradients of x, context and every parameter",
         {"D": 8, "h": 2, "mlp": 16, "ctx": 6, "x": (2, 4, 8), "c": (2, 3, 6), "causal": True, "seed": 205,
          "fused_layouts": 1, "dtype": "float64", "grads": True, "param_grads": NO_KEY_BIAS, "tests": "grads"},
         {2: "B", 4: "T", 3: "S", 8: "dim", 6: "context_dim"}),
]


def _run_decoder(answer, case, rec):
    p = case.params
    args = (p["D"], p["h"], p["mlp"]) if p["ctx"] is None else (p["D"], p["h"], p["mlp"], p["ctx"])
    module = rec.build(answer, *args, heads=p["h"], head_width=p["D"], dtype=p.get("dtype"))
    x, context = _x_and_context(rec, p)

    def run(tokens):
        if p["causal"]:
            return single_output(rec.call(module, tokens, context, self_mask="causal"),
                                 "DecoderBlock(x, context, self_mask='causal')")
        return single_output(rec.call(module, tokens, context), "DecoderBlock(x, context)")

    out = run(x)
    rec.check_new_params(module)
    rec.output("out", out)
    if p.get("future"):
        changed = I.randn(p["x"], p["seed"]).copy()
        changed[:, -1] = I.randn((p["x"][0], p["x"][2]), p["seed"] + 3)
        rec.output("out (last token changed)", run(rec.tensor(changed, dtype=p.get("dtype"))))
    _grads_of_x_and_context(rec, p, out, x, context, module)

register(Question(id="decoder_block", chapter="08_decoder", title="Decoder block", points=3,
                  answer_name="DecoderBlock", kind="class", cases=DEC_CASES, run_case=_run_decoder,
                  forbidden=("attention",),
                  outputs={"out": "(B, T, dim)", "out (last token changed)": "(B, T, dim)", "grad_x": "(B, T, dim)",
                           "grad_context": "(B, S, context_dim)"}))
