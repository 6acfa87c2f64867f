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

def _shapes(p: dict, heads: bool = False) -> tuple[str, dict]:
    """The part of a case's label after the module (its dtype, x and context) and the names of its
    sizes for messages: x (B, T, ...), context (B, S, ...), the width, the context's width."""
    kind = " in float64" if p.get("dtype") == "float64" else ""
    dims = {p["x"][0]: "B", **({p["h"]: "heads"} if heads else {}), p["x"][1]: "T", p["c"][1]: "S"}
    return f"{kind}, x {p['x']}, context {p['c']}", dims


def _cross_case(E, h, ctx, x, c, seed, note="", **extra):
    """A CrossAttention case, labelled from its parameters; ``note``: what else it checks."""
    # the exercise fixes key_value's layout, (kv h d): only that layout of the student's weights is tried
    params = {"E": E, "h": h, "ctx": ctx, "x": x, "c": c, "seed": seed, "fused_layouts": 1, **extra}
    shapes, dims = _shapes(params, heads=bool(extra.get("return_attention")))
    width = f", context_dim={ctx}" if ctx else ""
    return Case(f"CrossAttention(emb_size={E}, num_heads={h}{width}){shapes}{note}", params,
                {**dims, E: "E", **({ctx: "context_dim"} if ctx else {})})


CROSS_CASES = [
    _cross_case(8, 2, 6, (3, 4, 8), (3, 5, 6), 191),
    _cross_case(12, 3, None, (1, 2, 12), (1, 7, 12), 192),
    _cross_case(8, 4, 10, (2, 5, 8), (2, 3, 10), 193),
    _cross_case(8, 2, 6, (2, 3, 8), (2, 5, 6), 194, ", context padding mask (2, 1, 1, 5)",
                mask=(2, 1, 1, 5), tests="mask"),
    _cross_case(8, 2, 6, (3, 4, 8), (3, 5, 6), 195, ", return_attention=True", return_attention=True, tests="weights"),
    _cross_case(12, 3, 8, (2, 3, 12), (2, 4, 8), 196, ", mask (2, 1, 3, 4) in which query 2 of example 1 may see no "
                "context position, return_attention=True",
                mask=(2, 1, 3, 4), full_rows=[(1, 0, 2)], dtype="float64", return_attention=True,
                tests="mask_full"),
    _cross_case(8, 2, 6, (2, 3, 8), (2, 5, 6), 197, ", context padding mask (2, 1, 1, 5), gradients of x, context and "
                "every parameter", mask=(2, 1, 1, 5), dtype="float64", grads=True, param_grads=NO_KEY_BIAS,
                tests="grads"),
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

def _attention_module(**fields) -> Question:
    """One of the chapter's two 3-point modules built on attention, which they write themselves."""
    return Question(chapter="08_decoder", points=3, kind="class", forbidden=("attention",), **fields)


register(_attention_module(id="cross_attention", title="Cross-attention", answer_name="CrossAttention",
                           cases=CROSS_CASES, run_case=_run_cross,
                           outputs={"out": "(B, T, E)", "weights": "(B, heads, T, S)", "grad_x": "(B, T, E)",
                                    "grad_context": "(B, S, context_dim)"}))

# --------------------------------------------------------------------------- decoder block

def _decoder_case(D, h, mlp, ctx, x, c, seed, causal=True, note="", **extra):
    """A DecoderBlock case, labelled from its parameters; ``note``: what else it checks."""
    params = {"D": D, "h": h, "mlp": mlp, "ctx": ctx, "x": x, "c": c, "causal": causal, "seed": seed,
              "fused_layouts": 1, **extra}
    shapes, dims = _shapes(params)
    width = f", context_dim={ctx}" if ctx else ""
    mask = ", self_mask='causal'" if causal else ", no mask"
    return Case(f"DecoderBlock(dim={D}, num_heads={h}, mlp_dim={mlp}{width}){shapes}{mask}{note}", params,
                {**dims, D: "dim", **({ctx: "context_dim"} if ctx else {})})


DEC_CASES = [
    _decoder_case(8, 2, 16, 6, (2, 4, 8), (2, 5, 6), 201),
    _decoder_case(12, 3, 24, None, (1, 3, 12), (1, 6, 12), 202, causal=False),
    _decoder_case(8, 2, 16, 6, (3, 5, 8), (3, 2, 6), 203),
    _decoder_case(12, 3, 24, None, (2, 6, 12), (2, 3, 12), 204,
                  note=", then the same x with its last token changed (earlier outputs must not change)",
                  future=True, tests="causal"),
    _decoder_case(8, 2, 16, 6, (2, 4, 8), (2, 3, 6), 205, note=", gradients of x, context and every parameter",
                  dtype="float64", grads=True, param_grads=NO_KEY_BIAS, tests="grads"),
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

register(_attention_module(id="decoder_block", title="Decoder block", answer_name="DecoderBlock",
                           cases=DEC_CASES, run_case=_run_decoder,
                           outputs={"out": "(B, T, dim)", "out (last token changed)": "(B, T, dim)",
                                    "grad_x": "(B, T, dim)", "grad_context": "(B, S, context_dim)"}))
