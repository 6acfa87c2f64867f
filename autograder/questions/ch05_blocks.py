"""Chapter 5, blocks: the slides' Q6 (ResidualAdd), Q7 (FeedForwardBlock and
TransformerEncoderBlock), LayerNorm from scratch, and the post-LN encoder block.

Skeletons (the slides' Q6 and Q7)::

    class ResidualAdd(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x, **kwargs):
            # Q6. the residual sum of x and self.fn(x) (pass **kwargs on to fn)
            return x

    class FeedForwardBlock(nn.Sequential):
        def __init__(self, emb_size, expansion=4, drop_p=0., hidden_dim=None):
            hidden = hidden_dim or expansion * emb_size   # given: hidden_dim overrides expansion * emb_size
            super().__init__(
                nn.Linear(...),          # Q7. emb_size -> hidden
                nn.GELU(),
                nn.Dropout(drop_p),
                nn.Linear(...),          # Q7. hidden -> emb_size
            )

    class TransformerEncoderBlock(nn.Sequential):
        def __init__(self, emb_size=768, drop_p=0., forward_expansion=4, forward_drop_p=0., **kwargs):
            super().__init__(
                ResidualAdd(nn.Sequential(...)),   # Q7. LayerNorm, MultiHeadAttention(emb_size, **kwargs), Dropout
                ResidualAdd(nn.Sequential(...)),   # Q7. LayerNorm, FeedForwardBlock, Dropout
            )

The checker builds ``TransformerEncoderBlock(emb_size=E, num_heads=h, forward_expansion=x)``:
with the slides' ``**kwargs`` signature ``num_heads`` reaches the attention. It builds
``FeedForwardBlock(E, hidden_dim=H)`` too (the signature of ``vitref.FeedForwardBlock``, which
chapters 7 and 8 call as ``FeedForwardBlock(dim, hidden_dim=mlp_dim)``).
"""
from __future__ import annotations

import torch
from torch import nn

from . import inputs as I
from .base import Case, Question, register
from .common import build_flexible, single_output
from .errors import CaseFailure

# --------------------------------------------------------------------------- Q6 residual


class Sublayer(nn.Module):
    """The ``fn`` the checker wraps: ``scale * tanh(Linear(x))``, rows zeroed where ``mask``
    (B, N) is False; takes keyword arguments."""

    def __init__(self, dim):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x, scale=1.0, mask=None):
        out = scale * torch.tanh(self.linear(x))
        if mask is not None:
            out = out * mask.unsqueeze(-1).to(out.dtype)
        return out


Q6_CASES = [
    Case("ResidualAdd(fn) with fn a (6 -> 6) layer, x (2, 4, 6)", {"D": 6, "x": (2, 4, 6), "seed": 81},
         {2: "B", 4: "N", 6: "D"}),
    Case("ResidualAdd(fn), x (1, 3, 5), called with the keyword argument scale=2.0",
         {"D": 5, "x": (1, 3, 5), "seed": 82, "kwargs": {"scale": 2.0}}, {1: "B", 3: "N", 5: "D"}),
    Case("ResidualAdd(fn), float64 x (2, 3, 4) called with scale=0.5 and mask=(2, 3) (image 1 fully masked): "
         "the output and the gradients of x and of fn's parameters",
         {"D": 4, "x": (2, 3, 4), "seed": 83, "kwargs": {"scale": 0.5}, "mask": (2, 3), "dtype": "float64",
          "grads": True, "param_grads": True}, {2: "B", 3: "N", 4: "D"}),
]


def _run_q6(answer, case, rec):
    p = case.params
    fn = Sublayer(p["D"])
    module = rec.build(answer, fn, dtype=p.get("dtype"))
    x = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    kwargs = dict(p.get("kwargs", {}))
    if p.get("mask"):
        kwargs["mask"] = rec.tensor(I.bernoulli_mask(p["mask"], p["seed"], full_rows=((1,),)))   # (B, N)
    x_before = x.detach().clone()
    out = rec.call(module, x, **kwargs)
    if not torch.equal(x.detach(), x_before):
        raise CaseFailure("ResidualAdd changed its input x in place: the caller's tensor changes and autograd "
                          "cannot backpropagate through the sub-layer")
    rec.output("out", out)
    if p.get("grads"):
        upstream = rec.tensor(I.randn(p["x"], p["seed"] + 7))
        rec.grads(out, upstream, {"x": x}, module, params=bool(p.get("param_grads")))

register(Question(id="q6", chapter="05_blocks", title="Q6 residual connection (ResidualAdd)", points=1,
                  answer_name="ResidualAdd", kind="class", cases=Q6_CASES, run_case=_run_q6,
                  outputs={"out": "the shape of x"}))

# --------------------------------------------------------------------------- Q7 feed-forward

def _dropout_cases(title, base: dict, dims: dict, drops: list[dict]):
    """Cases on one float64 input (same seed, so the same x and weights): the module without
    dropout (output, gradients of x and of every parameter), then each of ``drops`` (the
    dropout probabilities and the mode): in eval mode p > 0 must change nothing; in training
    mode p = 1 is deterministic, and p = 0.5 with a seeded generator gives nn.Dropout's
    masks when the dropout sits where the exercise puts it. ``base`` names the case that the
    diagnosis compares them with."""
    cases = [Case(f"{title}, float64 x {base['x']}, eval mode: the output and the gradients of x and of every "
                  f"parameter", {**base, "dtype": "float64", "grads": True, "param_grads": True}, dims)]
    for drop in drops:
        probs = ", ".join(f"{k}={v}" for k, v in drop.items() if k != "train")
        mode = "training mode (module.train(), seeded)" if drop.get("train") else "eval mode (module.eval())"
        cases.append(Case(f"{title} with {probs}, float64 x {base['x']}, {mode}",
                          {**base, **drop, "dtype": "float64", "base_label": cases[0].label}, dims))
    return cases


def _seeded_call(rec, p, module, x):
    """Seed torch's generator right before the forward (dropout masks), after the build."""
    rec.seed(p["seed"])
    return rec.call(module, x)


def _backward(rec, p, module, x, out):
    if p.get("grads"):
        upstream = rec.tensor(I.randn(p["x"], p["seed"] + 7))
        rec.grads(out, upstream, {"x": x}, module, params=bool(p.get("param_grads")))


Q7_CASES = [
    Case("FeedForwardBlock(8) (expansion 4), x (2, 3, 8)", {"E": 8, "expansion": None, "x": (2, 3, 8), "seed": 91,
                                                           "biases": True},
         {2: "B", 3: "N", 8: "emb_size", 32: "expansion*emb_size"}),
    Case("FeedForwardBlock(6, expansion=2), x (1, 5, 6)", {"E": 6, "expansion": 2, "x": (1, 5, 6), "seed": 92,
                                                          "biases": True},
         {1: "B", 5: "N", 6: "emb_size", 12: "expansion*emb_size"}),
    Case("FeedForwardBlock(4, expansion=3), x (3, 2, 4)", {"E": 4, "expansion": 3, "x": (3, 2, 4), "seed": 93,
                                                          "biases": True},
         {3: "B", 2: "N", 4: "emb_size", 12: "expansion*emb_size"}),
    *_dropout_cases("FeedForwardBlock(6, expansion=2)",
                    {"E": 6, "expansion": 2, "x": (2, 3, 6), "seed": 94, "biases": True},
                    {2: "B", 3: "N", 6: "emb_size", 12: "expansion*emb_size"},
                    [{"drop_p": 0.5, "train": False}, {"drop_p": 1.0, "train": True},
                     {"drop_p": 0.5, "train": True}]),
    # hidden_dim overrides expansion * emb_size; 10 is no multiple of 6, so no expansion gives it
    Case("FeedForwardBlock(6, hidden_dim=10), x (2, 3, 6)", {"E": 6, "expansion": None, "hidden_dim": 10,
                                                             "x": (2, 3, 6), "seed": 95, "biases": True},
         {2: "B", 3: "N", 6: "emb_size", 10: "hidden_dim"}),
]

NO_HIDDEN_DIM = ("your FeedForwardBlock does not take the argument hidden_dim (TypeError: unexpected keyword "
                 "argument 'hidden_dim'): its signature is FeedForwardBlock(emb_size, expansion=4, drop_p=0.0, "
                 "hidden_dim=None), and hidden_dim, when given, is the hidden width")


def _run_q7(answer, case, rec):
    p = case.params
    meta = {"train": bool(p.get("train")), "dtype": p.get("dtype")}
    if "hidden_dim" in p:
        try:
            module = rec.build(answer, p["E"], hidden_dim=p["hidden_dim"], **meta)
        except TypeError as error:
            if "unexpected keyword argument 'hidden_dim'" not in str(error):
                raise
            raise CaseFailure(NO_HIDDEN_DIM) from None
    elif p["expansion"] is None:
        module = rec.build(answer, p["E"], **meta)
    else:
        args, kwargs = (p["E"], p["expansion"]), {"emb_size": p["E"], "expansion": p["expansion"]}
        if "drop_p" in p:
            args, kwargs = args + (p["drop_p"],), {**kwargs, "drop_p": p["drop_p"]}
        module = build_flexible(rec, answer, args, kwargs, **meta)
    x = rec.tensor(I.randn(p["x"], p["seed"], scale=2.0), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    out = _seeded_call(rec, p, module, x)
    rec.check_new_params(module)
    rec.output("out", out)
    _backward(rec, p, module, x, out)

register(Question(id="q7", chapter="05_blocks", title="Q7 feed-forward block (FeedForwardBlock)", points=1,
                  answer_name="FeedForwardBlock", kind="class", cases=Q7_CASES, run_case=_run_q7,
                  outputs={"out": "(B, N, emb_size)"}))

# --------------------------------------------------------------------------- LayerNorm

LN_CASES = [
    Case("LayerNorm(8), x (2, 5, 8) with mean 3", {"dim": 8, "eps": None, "x": (2, 5, 8), "seed": 111,
                                                   "scale": 2.0, "offset": 3.0}, {2: "B", 5: "N", 8: "dim"}),
    Case("LayerNorm(6, eps=1e-3), x (3, 6) with tiny variance", {"dim": 6, "eps": 1e-3, "x": (3, 6), "seed": 112,
                                                                 "scale": 0.03, "offset": 0.0}, {3: "B", 6: "dim"}),
    Case("LayerNorm(5), x (1, 4, 5) with a constant row", {"dim": 5, "eps": None, "x": (1, 4, 5), "seed": 113,
                                                          "scale": 1.0, "offset": 0.0, "constant_row": True},
         {1: "B", 4: "N", 5: "dim"}),
    Case("LayerNorm(6, eps=0.1), float64 x (2, 3, 6) with mean -1: the output and the gradients of x, weight "
         "and bias", {"dim": 6, "eps": 0.1, "x": (2, 3, 6), "seed": 114, "scale": 1.5, "offset": -1.0,
                      "dtype": "float64", "grads": True, "param_grads": True}, {2: "B", 3: "N", 6: "dim"}),
]


def _run_ln(answer, case, rec):
    p = case.params
    meta = {"dtype": p.get("dtype")}
    if p["eps"] is None:
        module = rec.build(answer, p["dim"], **meta)
    else:
        module = build_flexible(rec, answer, (p["dim"], p["eps"]), {"dim": p["dim"], "eps": p["eps"]}, **meta)
    x = I.randn(p["x"], p["seed"], p["scale"], p["offset"])
    if p.get("constant_row"):
        x[0, 2, :] = 7.0
    x = rec.tensor(x, dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    out = rec.call(module, x)
    rec.output("out", out)
    _backward(rec, p, module, x, out)

register(Question(id="layernorm", chapter="05_blocks", title="LayerNorm from scratch", points=2,
                  answer_name="LayerNorm", kind="class", cases=LN_CASES, run_case=_run_ln,
                  forbidden=("layer_norm",), outputs={"out": "the shape of x"}))

# --------------------------------------------------------------------------- Q7b encoder block

BLOCK_CASES = [
    Case("TransformerEncoderBlock(emb_size=8, num_heads=2), x (3, 5, 8)",
         {"E": 8, "h": 2, "expansion": None, "x": (3, 5, 8), "seed": 101, "biases": True}, {3: "B", 5: "N", 8: "E"}),
    Case("TransformerEncoderBlock(emb_size=12, num_heads=3, forward_expansion=2), x (1, 4, 12)",
         {"E": 12, "h": 3, "expansion": 2, "x": (1, 4, 12), "seed": 102, "biases": True}, {1: "B", 4: "N", 12: "E"}),
    *_dropout_cases("TransformerEncoderBlock(emb_size=8, num_heads=2, forward_expansion=2)",
                    {"E": 8, "h": 2, "expansion": 2, "x": (2, 3, 8), "seed": 103, "biases": True},
                    {2: "B", 3: "N", 8: "E"},
                    [{"drop_p": 0.5, "forward_drop_p": 0.25, "train": False},
                     {"drop_p": 1.0, "forward_drop_p": 0.0, "train": True},
                     {"drop_p": 0.0, "forward_drop_p": 1.0, "train": True},
                     {"drop_p": 0.5, "forward_drop_p": 0.25, "train": True}]),
]


def _run_block(answer, case, rec, norm_first=True):
    p = case.params
    kwargs = {"emb_size": p["E"], "num_heads": p["h"]}
    if p["expansion"] is not None:
        kwargs["forward_expansion"] = p["expansion"]
    for name in ("drop_p", "forward_drop_p"):
        if name in p:
            kwargs[name] = p[name]
    args = (p["E"], p["h"]) if p["expansion"] is None else (p["E"], p["h"], p["expansion"])
    module = build_flexible(rec, answer, args, kwargs, heads=p["h"], head_width=p["E"], train=bool(p.get("train")),
                            dtype=p.get("dtype"))
    x = rec.tensor(I.randn(p["x"], p["seed"]), dtype=p.get("dtype"), requires_grad=bool(p.get("grads")))
    out = single_output(_seeded_call(rec, p, module, x), "the block's forward(x)")
    rec.check_new_params(module)
    rec.output("out", out)
    _backward(rec, p, module, x, out)

register(Question(id="q7b", chapter="05_blocks", title="Q7b transformer encoder block (TransformerEncoderBlock)",
                  points=2, answer_name="TransformerEncoderBlock", kind="class", cases=BLOCK_CASES,
                  run_case=_run_block, forbidden=("attention",), outputs={"out": "(B, N, E)"}))

# --------------------------------------------------------------------------- post-LN block

POST_CASES = [
    Case("PostLNEncoderBlock(emb_size=8, num_heads=2), x (3, 5, 8)",
         {"E": 8, "h": 2, "expansion": None, "x": (3, 5, 8), "seed": 121, "biases": True}, {3: "B", 5: "N", 8: "E"}),
    Case("PostLNEncoderBlock(emb_size=12, num_heads=3, forward_expansion=2), x (1, 4, 12)",
         {"E": 12, "h": 3, "expansion": 2, "x": (1, 4, 12), "seed": 122, "biases": True}, {1: "B", 4: "N", 12: "E"}),
    Case("PostLNEncoderBlock(emb_size=8, num_heads=2, forward_expansion=2), float64 x (2, 3, 8): the output and "
         "the gradients of x and of every parameter",
         {"E": 8, "h": 2, "expansion": 2, "x": (2, 3, 8), "seed": 123, "biases": True, "dtype": "float64",
          "grads": True, "param_grads": True}, {2: "B", 3: "N", 8: "E"}),
]

register(Question(id="post_ln_block", chapter="05_blocks", title="Post-LN encoder block", points=2,
                  answer_name="PostLNEncoderBlock", kind="class", cases=POST_CASES, run_case=_run_block,
                  forbidden=("attention",), outputs={"out": "(B, N, E)"}))
