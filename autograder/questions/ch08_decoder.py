"""Chapter 8, the decoder: causal mask, cross-attention, decoder block.

Skeletons::

    def causal_mask(T):
        # (T, T), 1/True where query t may attend key s: itself and earlier positions (s <= t)
        ...

    class CrossAttention(nn.Module):
        def __init__(self, emb_size, num_heads, context_dim=None):
            super().__init__()
            self.num_heads = num_heads
            context_dim = context_dim or emb_size
            self.query = nn.Linear(emb_size, emb_size)           # from the decoder tokens x
            self.key_value = nn.Linear(context_dim, 2 * emb_size)  # from the encoder output, (kv h d)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, context, mask=None, return_attention=False):
            # x (B, T, emb_size), context (B, S, context_dim) -> (B, T, emb_size)
            ...

    class DecoderBlock(nn.Module):
        def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.self_attn = MultiHeadAttention(dim, num_heads)
            self.norm2 = nn.LayerNorm(dim)
            self.cross_attn = CrossAttention(dim, num_heads, context_dim)
            self.norm3 = nn.LayerNorm(dim)
            self.mlp = FeedForwardBlock(dim, ...)                # dim -> mlp_dim -> dim

        def forward(self, x, context, self_mask=None):
            # pre-LN: masked self-attention, cross-attention (keys/values from context), MLP;
            # self_mask is None (all tokens see each other) or "causal"
            ...
"""
from __future__ import annotations


import numpy as np

from . import inputs as I
from .base import Case, Question, register
from .common import build_flexible, call_with_mask, first_if_tuple

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

register(Question(
    id="causal_mask",
    chapter="08_decoder",
    title="Causal mask",
    points=1,
    answer_name="causal_mask",
    kind="function",
    signature="causal_mask(T) -> (T, T), 1 where query t may attend key s <= t",
    cases=MASK_CASES,
    run_case=_run_mask,
    outputs={"mask": "(T, T)"},
    skeleton='''def causal_mask(T):
    """(T, T) bool, True where query t may attend key s (s <= t)."""
    ...
''',
))

# --------------------------------------------------------------------------- cross-attention

CROSS_CASES = [
    Case("CrossAttention(emb_size=8, num_heads=2, context_dim=6), x (3, 4, 8), context (3, 5, 6)",
         {"E": 8, "h": 2, "ctx": 6, "x": (3, 4, 8), "c": (3, 5, 6), "seed": 191},
         {3: "B", 4: "T", 5: "S", 8: "E", 6: "context_dim"}),
    Case("CrossAttention(emb_size=12, num_heads=3), x (1, 2, 12), context (1, 7, 12)",
         {"E": 12, "h": 3, "ctx": None, "x": (1, 2, 12), "c": (1, 7, 12), "seed": 192},
         {1: "B", 2: "T", 7: "S", 12: "E"}),
    Case("CrossAttention(emb_size=8, num_heads=4, context_dim=10), x (2, 5, 8), context (2, 3, 10)",
         {"E": 8, "h": 4, "ctx": 10, "x": (2, 5, 8), "c": (2, 3, 10), "seed": 193},
         {2: "B", 5: "T", 3: "S", 8: "E", 10: "context_dim"}),
    Case("CrossAttention(emb_size=8, num_heads=2, context_dim=6), x (2, 3, 8), context (2, 5, 6), "
         "context padding mask (2, 1, 1, 5)",
         {"E": 8, "h": 2, "ctx": 6, "x": (2, 3, 8), "c": (2, 5, 6), "mask": (2, 1, 1, 5), "seed": 194},
         {2: "B", 3: "T", 5: "S", 8: "E", 6: "context_dim"}),
]


def _run_cross(answer, case, rec):
    p = case.params
    kwargs = {"emb_size": p["E"], "num_heads": p["h"]}
    if p["ctx"] is not None:
        kwargs["context_dim"] = p["ctx"]
    args = (p["E"], p["h"]) if p["ctx"] is None else (p["E"], p["h"], p["ctx"])
    module = build_flexible(rec, answer, args, kwargs, heads=p["h"], head_width=p["E"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    context = rec.tensor(I.randn(p["c"], p["seed"] + 1))
    if "mask" in p:   # (B, 1, 1, S): hides padded context positions from every head and query
        mask = rec.tensor(I.bernoulli_mask(p["mask"], p["seed"] + 2))
        out = first_if_tuple(call_with_mask(rec, module, x, context, mask=mask, mask_name="mask"))
    else:
        out = first_if_tuple(rec.call(module, x, context))
    rec.check_new_params(module)
    rec.output("out", out)

register(Question(
    id="cross_attention",
    chapter="08_decoder",
    title="Cross-attention",
    points=3,
    answer_name="CrossAttention",
    kind="class",
    signature="CrossAttention(emb_size, num_heads, context_dim=None); forward(x (B, T, E), context (B, S, C)) "
              "-> (B, T, E)",
    cases=CROSS_CASES,
    run_case=_run_cross,
    forbidden=("attention",),
    outputs={"out": "(B, T, E)"},
    skeleton='''class CrossAttention(nn.Module):
    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        # x: (B, T, emb_size) decoder tokens; context: (B, S, context_dim) encoder output
        q = ...        # (B, h, T, d) from x
        k, v = ...     # (B, h, S, d) each, from context: 'b s (kv h d) -> kv b h s d'
        ...
        return (out, weights) if return_attention else out
''',
))

# --------------------------------------------------------------------------- decoder block

DEC_CASES = [
    Case("DecoderBlock(dim=8, num_heads=2, mlp_dim=16, context_dim=6), x (2, 4, 8), context (2, 5, 6), "
         "self_mask='causal'",
         {"D": 8, "h": 2, "mlp": 16, "ctx": 6, "x": (2, 4, 8), "c": (2, 5, 6), "causal": True, "seed": 201},
         {2: "B", 4: "T", 5: "S", 8: "dim", 6: "context_dim"}),
    Case("DecoderBlock(dim=12, num_heads=3, mlp_dim=24), x (1, 3, 12), context (1, 6, 12), no mask",
         {"D": 12, "h": 3, "mlp": 24, "ctx": None, "x": (1, 3, 12), "c": (1, 6, 12), "causal": False, "seed": 202},
         {1: "B", 3: "T", 6: "S", 12: "dim"}),
    Case("DecoderBlock(dim=8, num_heads=2, mlp_dim=16, context_dim=6), x (3, 5, 8), context (3, 2, 6), "
         "self_mask='causal'",
         {"D": 8, "h": 2, "mlp": 16, "ctx": 6, "x": (3, 5, 8), "c": (3, 2, 6), "causal": True, "seed": 203},
         {3: "B", 5: "T", 2: "S", 8: "dim", 6: "context_dim"}),
]


def _run_decoder(answer, case, rec):
    p = case.params
    args = (p["D"], p["h"], p["mlp"]) if p["ctx"] is None else (p["D"], p["h"], p["mlp"], p["ctx"])
    module = rec.build(answer, *args, heads=p["h"], head_width=p["D"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    context = rec.tensor(I.randn(p["c"], p["seed"] + 1))
    if p["causal"]:
        out = rec.call(module, x, context, self_mask="causal")
    else:
        out = rec.call(module, x, context)
    out = first_if_tuple(out)
    rec.check_new_params(module)
    rec.output("out", out)

register(Question(
    id="decoder_block",
    chapter="08_decoder",
    title="Decoder block",
    points=3,
    answer_name="DecoderBlock",
    kind="class",
    signature="DecoderBlock(dim, num_heads, mlp_dim, context_dim=None); forward(x (B, T, D), context (B, S, C), "
              "self_mask=None|'causal') -> (B, T, D)",
    cases=DEC_CASES,
    run_case=_run_decoder,
    forbidden=("attention",),
    outputs={"out": "(B, T, dim)"},
    skeleton='''class DecoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, ...)   # dim -> mlp_dim -> dim

    def forward(self, x, context, self_mask=None):
        # x: (B, T, dim), context: (B, S, context_dim); self_mask: None or "causal"
        ...
        return x
''',
))
