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

import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import inputs as I
from ..core import Case, Mistake, Question, register
from ._common import build_flexible, call_with_mask, first_if_tuple, mistaken_mask_softmax, parts, vitref

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


def _mask_reference():
    def causal_mask(T):
        return vitref().causal_mask(T).double()
    return [causal_mask]


def _mask(fn):
    def build(parts):
        def causal_mask(T):
            return fn(T)
        return causal_mask
    return build


MASK_MISTAKES = [
    Mistake("upper_triangular", "upper triangle: queries see the future",
            "Query t (row) may attend keys s <= t (columns): the lower triangle, torch.tril.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).triu())),
    Mistake("diagonal_excluded", "the diagonal is excluded",
            "A token may attend itself: s <= t includes s = t (torch.tril with diagonal=0).",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1))),
    Mistake("inverted", "True where attention is blocked",
            "The mask is 1/True where a query MAY attend (s <= t), 0/False where it is blocked.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).triu(1))),
    Mistake("one_step_ahead", "tril(diagonal=1): each query also sees the next position",
            "Keys s <= t only: torch.tril(torch.ones(T, T)) with the default diagonal=0.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(1))),
    Mistake("additive", "an additive mask (0 allowed, -inf blocked)",
            "This question asks for 1/True where a query may attend and 0/False elsewhere.",
            _mask(lambda T: torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                          float("-inf")))),
]

register(Question(
    id="causal_mask", chapter="08_decoder", title="Causal mask", points=1, answer_name="causal_mask",
    kind="function", signature="causal_mask(T) -> (T, T), 1 where query t may attend key s <= t",
    cases=MASK_CASES, run_case=_run_mask, references=_mask_reference, catalogue=MASK_MISTAKES,
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


def _cross(queries="x", keys="context", scale="head", softmax_dim=-1, project=True, merge="b h t d -> b t (h d)",
           mask_mode="fill"):
    def build(parts):
        class CrossAttention(nn.Module):
            def __init__(self, emb_size, num_heads, context_dim=None):
                super().__init__()
                self.emb_size, self.num_heads = emb_size, num_heads
                context_dim = context_dim or emb_size
                self.query = nn.Linear(emb_size, emb_size)
                self.key_value = nn.Linear(context_dim, 2 * emb_size)
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, context, mask=None, return_attention=False):
                source_q = x if queries == "x" else context
                source_kv = context if keys == "context" else x
                q = rearrange(self.query(source_q), "b t (h d) -> b h t d", h=self.num_heads)
                k, v = rearrange(self.key_value(source_kv), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
                scores = q @ k.transpose(-2, -1)
                scaling = {"head": math.sqrt(self.emb_size // self.num_heads), "emb": math.sqrt(self.emb_size),
                           None: 1.0}[scale]
                weights = mistaken_mask_softmax(scores / scaling, mask, mask_mode, softmax_dim)
                out = rearrange(weights @ v, merge)
                out = self.projection(out) if project else out
                return (out, weights) if return_attention else out
        return CrossAttention
    return build


CROSS_MISTAKES = [
    Mistake("keys_from_decoder", "keys and values computed from the decoder tokens x",
            "In cross-attention the queries come from x (the decoder) and the keys and values from context "
            "(the encoder output): self.key_value(context).", _cross(keys="x")),
    Mistake("queries_from_context", "queries computed from the context",
            "Queries come from the decoder tokens x, so the output has one row per decoder token (B, T, E).",
            _cross(queries="context")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide the scores by sqrt(head_dim) before the softmax.", _cross(scale=None)),
    Mistake("scale_by_emb", "scaled by sqrt(emb_size) instead of sqrt(head_dim)",
            "Each head's dot products have head_dim = emb_size // num_heads terms.", _cross(scale="emb")),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the context positions: softmax(dim=-1).", _cross(softmax_dim=-2)),
    Mistake("no_projection", "the output projection is missing",
            "After merging the heads apply self.projection.", _cross(project=False)),
    Mistake("merge_d_h", "heads merged in the wrong order, (d h)",
            "Merge with 'b h t d -> b t (h d)'.", _cross(merge="b h t d -> b t (d h)")),
    Mistake("mask_ignored", "the mask is ignored",
            "Blocked context positions (mask 0/False) must get zero weight: scores.masked_fill(mask == 0, "
            "float('-inf')) before the softmax.", _cross(mask_mode="ignored")),
    Mistake("mask_inverted", "mask polarity inverted (True/1 treated as blocked)",
            "In the course's convention 1/True means 'may attend' and 0/False means blocked: fill where "
            "mask == 0.", _cross(mask_mode="inverted")),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Zeroing weights after the softmax leaves rows that no longer sum to 1: mask the scores with -inf "
            "before the softmax.", _cross(mask_mode="after")),
]

register(Question(
    id="cross_attention", chapter="08_decoder", title="Cross-attention", points=3, answer_name="CrossAttention",
    kind="class",
    signature="CrossAttention(emb_size, num_heads, context_dim=None); forward(x (B, T, E), context (B, S, C)) "
              "-> (B, T, E)",
    cases=CROSS_CASES, run_case=_run_cross, references=lambda: [vitref().CrossAttention], catalogue=CROSS_MISTAKES,
    forbidden=("attention",), outputs={"out": "(B, T, E)"},
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


def _decoder_reference():
    v = vitref()

    class Reference(v.DecoderBlock):
        def forward(self, x, context, self_mask=None):
            return super().forward(x, context, self_mask=self_mask)
    return [Reference]


def _decoder(mode):
    def build(parts):
        MHA, Cross = parts.MultiHeadAttention, parts.CrossAttention

        class DecoderBlock(nn.Module):
            def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
                super().__init__()
                self.norm1 = nn.LayerNorm(dim)
                self.self_attn = MHA(dim, num_heads)
                self.norm2 = nn.LayerNorm(dim)
                self.cross_attn = Cross(dim, num_heads, context_dim)
                self.norm3 = nn.LayerNorm(dim)
                self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_dim, dim))

            def forward(self, x, context, self_mask=None):
                T = x.shape[1]
                mask = None
                if self_mask == "causal" and mode != "no_causal_mask":
                    mask = torch.ones(T, T, dtype=torch.bool, device=x.device)
                    mask = mask.triu() if mode == "upper_mask" else mask.tril()

                def self_attention(h):
                    return first_if_tuple(self.self_attn(h, mask=mask)) if mask is not None else first_if_tuple(
                        self.self_attn(h))

                def cross_attention(h):
                    source = h if mode == "keys_from_decoder" else context
                    if mode == "context_normalised":
                        source = self.norm2(source)
                    return first_if_tuple(self.cross_attn(h, source))

                if mode == "post_ln":
                    x = self.norm1(x + self_attention(x))
                    x = self.norm2(x + cross_attention(x))
                    return self.norm3(x + self.mlp(x))
                if mode == "same_norm":
                    x = x + self_attention(self.norm1(x))
                    x = x + cross_attention(self.norm1(x))
                    return x + self.mlp(self.norm1(x))
                if mode == "cross_first":
                    x = x + cross_attention(self.norm1(x))
                    x = x + self_attention(self.norm2(x))
                    return x + self.mlp(self.norm3(x))
                x = x + self_attention(self.norm1(x))
                x = x + cross_attention(self.norm2(x))
                return x + self.mlp(self.norm3(x))
        return DecoderBlock
    return build


_DEC_PARTS = ("MultiHeadAttention", "CrossAttention")

DEC_MISTAKES = [
    Mistake("no_causal_mask", "self_mask='causal' is ignored",
            "With self_mask='causal', token t may only attend tokens <= t: pass a causal mask to the "
            "self-attention.", _decoder("no_causal_mask"), _DEC_PARTS),
    Mistake("upper_mask", "causal mask transposed (tokens see the future)",
            "The allowed positions are s <= t: the lower triangle (torch.tril).", _decoder("upper_mask"), _DEC_PARTS),
    Mistake("keys_from_decoder", "cross-attention over the decoder tokens instead of the context",
            "The second sub-layer attends to the encoder output: self.cross_attn(self.norm2(x), context).",
            _decoder("keys_from_decoder"), _DEC_PARTS),
    Mistake("post_ln", "post-LN: LayerNorm after the residual sums",
            "This block is pre-LN: x = x + sublayer(norm(x)) for each of the three sub-layers.",
            _decoder("post_ln"), _DEC_PARTS),
    Mistake("context_normalised", "the context normalised with the decoder's LayerNorm",
            "norm2 belongs to the decoder tokens: cross_attn(self.norm2(x), context), with the encoder output "
            "as it is.", _decoder("context_normalised"), _DEC_PARTS),
    Mistake("same_norm", "norm1 used before all three sub-layers",
            "Each sub-layer has its own LayerNorm: norm1, norm2 and norm3.", _decoder("same_norm"), _DEC_PARTS),
    Mistake("cross_first", "cross-attention before self-attention",
            "The order is masked self-attention, then cross-attention, then the MLP.", _decoder("cross_first"),
            _DEC_PARTS),
]

register(Question(
    id="decoder_block", chapter="08_decoder", title="Decoder block", points=3, answer_name="DecoderBlock",
    kind="class",
    signature="DecoderBlock(dim, num_heads, mlp_dim, context_dim=None); forward(x (B, T, D), context (B, S, C), "
              "self_mask=None|'causal') -> (B, T, D)",
    cases=DEC_CASES, run_case=_run_decoder, references=_decoder_reference, catalogue=DEC_MISTAKES,
    forbidden=("attention",), outputs={"out": "(B, T, dim)"},
    reference_parts=parts(MultiHeadAttention=lambda: vitref().MultiHeadAttention,
                          CrossAttention=lambda: vitref().CrossAttention),
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
