"""The references and the catalogue of known mistakes of ch08_decoder (grader side)."""
from __future__ import annotations


import dataclasses
import math

import numpy as np
import torch
from einops import rearrange
from torch import nn

import vitref

from ..model import Mistake
from ._entry import add
from ...questions.common import first_if_tuple
from ._common import mistaken_mask_softmax, parts
from ..diagnosis import View
from ._changes import norms_swapped, relu_for_gelu, values_from_keys
from ._symptoms import FLOAT_MIX, PROPERTIES, RECIPE_SAYS, RETURNS_TUPLE, by_tag, gradient_differs, keyed, symptom
from ...questions.ch08_decoder import (
    cross_mask,
)

# --------------------------------------------------------------------------- causal mask


def _mask_reference():
    def causal_mask(T):
        return vitref.causal_mask(T).double()
    return [causal_mask]


def _mask(fn):
    def build(parts):
        def causal_mask(T):
            return fn(T)
        return causal_mask
    return build


def _ones(T):
    return torch.ones(T, T, dtype=torch.bool)


MASK_MISTAKES = [
    Mistake("upper_triangular", "upper triangle: queries see the future",
            "Query t (row) may attend keys s <= t (columns): the lower triangle, torch.tril.",
            _mask(lambda T: _ones(T).triu())),
    Mistake("diagonal_excluded", "the diagonal is excluded",
            "A token may attend itself: s <= t includes s = t (torch.tril with diagonal=0).",
            _mask(lambda T: _ones(T).tril(-1))),
    Mistake("inverted", "True where attention is blocked",
            "The mask is 1/True where a query MAY attend (s <= t), 0/False where it is blocked.",
            _mask(lambda T: _ones(T).triu(1))),
    Mistake("one_step_ahead", "tril(diagonal=1): each query also sees the next position",
            "Keys s <= t only: torch.tril(torch.ones(T, T)) with the default diagonal=0.",
            _mask(lambda T: _ones(T).tril(1))),
    Mistake("additive", "an additive mask (0 allowed, -inf blocked)",
            "This question asks for 1/True where a query may attend and 0/False elsewhere.",
            _mask(lambda T: torch.zeros(T, T).masked_fill(_ones(T).triu(1), float("-inf"))),
            also=(_mask(lambda T: torch.zeros(T, T).masked_fill(_ones(T).triu(1), -1e9)),
                  _mask(lambda T: torch.ones(T, T).tril().masked_fill(_ones(T).triu(1), float("-inf"))))),
    Mistake("extra_axes", "the mask has extra leading axes",
            "Return the (T, T) matrix itself; the attention broadcasts it over batches and heads.",
            _mask(lambda T: _ones(T).tril()[None]), also=(_mask(lambda T: _ones(T).tril()[None, None]),)),
]


def _mask_problem(view: View) -> tuple[str, str] | None:
    """(which, sentence), read off the student's (T, T) mask directly."""
    for case, mask in view.outputs("mask"):
        T = case.params["T"]
        if T < 2:
            continue
        mask = np.asarray(mask, dtype=np.float64)
        if mask.shape != (T, T):
            if mask.size == T * T:
                return "shape", f"the mask should have shape (T, T) = ({T}, {T}), got {mask.shape}"
            return None
        if not np.isin(mask, (0.0, 1.0)).all():
            return "values", "the mask should hold only 1/True (may attend) and 0/False (blocked)"
        rows, cols = np.indices((T, T))
        allowed = mask != 0
        if (allowed & (cols > rows)).any():
            t, s = np.argwhere(allowed & (cols > rows))[0]
            return "future", (f"the mask lets query {t} attend the later key {s}: "
                              "keys s > t (the future) must be blocked")
        if (~allowed & (cols <= rows)).any():
            t, s = np.argwhere(~allowed & (cols <= rows))[0]
            return "past", (f"the mask blocks query {t} from key {s} <= {t}: every key s <= t (itself included) is "
                            f"allowed")
    return None


MASK_SYMPTOMS = (
    symptom("mask_shape", "the mask is not (T, T)", "Return the (T, T) matrix itself.",
            "How many rows and columns does a mask of T queries and T keys have?", keyed(_mask_problem, "shape")),
    symptom("mask_values", "the mask holds values other than 0 and 1",
            "1/True where a query may attend, 0/False where it is blocked.",
            "Which two values should a mask hold, and what does each mean?", keyed(_mask_problem, "values")),
    symptom("mask_sees_future", "a query may attend a later key",
            "Keys s > t (the future) are blocked: the lower triangle, diagonal included.",
            "Find a query in your mask that may look at a later position: should it?", keyed(_mask_problem, "future")),
    symptom("mask_blocks_past", "a query is blocked from an earlier key (or itself)",
            "Every key s <= t, the query itself included, is allowed.",
            "Find a query in your mask that may not see an earlier position, or itself: should it be blocked?",
            keyed(_mask_problem, "past")),
)


add('causal_mask', references=_mask_reference, catalogue=[*MASK_MISTAKES, *MASK_SYMPTOMS, *RECIPE_SAYS])

# --------------------------------------------------------------------------- cross-attention


class _FiniteFillCross(nn.Module):
    """The exercise's cross-attention: blocked scores filled with -1e9, so a query whose context
    positions are all blocked gets uniform weights. vitref's gives it zero weights and an
    additive mask (scores - 1e9 where blocked) its unmasked weights: all three are accepted
    for such a query, NaN is not."""

    additive = False

    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim or emb_size, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None and self.additive:
            scores = scores + ((mask != 0).to(scores.dtype) - 1) * 1e9
        elif mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = torch.softmax(scores, dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


class _AdditiveCross(_FiniteFillCross):
    additive = True


def _cross(queries="x", keys="context", scale="head", softmax_dim=-1, project=True, merge="b h t d -> b t (h d)",
           mask_mode="fill", fill=-1e9, kv_layout="kv h d", heads=True, returned="weights"):
    """A cross-attention as a student may write it. ``merge`` "reshape": (B, h, T, d) reshaped
    to (B, T, E) without moving the heads axis; ``heads=False``: one head over all E features;
    ``returned``: what return_attention=True returns ("weights", "scores", "mean_heads")."""
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
                h = self.num_heads if heads else 1
                q = rearrange(self.query(source_q), "b t (h d) -> b h t d", h=h)
                k, v = rearrange(self.key_value(source_kv), f"b s ({kv_layout}) -> kv b h s d", kv=2, h=h)
                scores = q @ k.transpose(-2, -1)
                scaling = {"head": math.sqrt(self.emb_size // self.num_heads), "emb": math.sqrt(self.emb_size),
                           None: 1.0}[scale]
                weights = mistaken_mask_softmax(scores / scaling, mask, mask_mode, softmax_dim, fill)
                if merge == "reshape":
                    b, _, t, _ = weights.shape
                    out = (weights @ v).reshape(b, t, self.emb_size)
                else:
                    out = rearrange(weights @ v, merge)
                out = self.projection(out) if project else out
                if not return_attention:
                    return out
                if returned == "scores":            # the scaled (and masked) scores, before the softmax
                    return out, mistaken_mask_softmax_input(scores / scaling, mask, mask_mode, fill)
                if returned == "raw_scores":
                    return out, scores / scaling
                if returned == "mean_heads":
                    return out, weights.mean(dim=1)
                return out, weights
        return CrossAttention
    return build


def mistaken_mask_softmax_input(scores, mask, mask_mode, fill):
    """The scores as ``mistaken_mask_softmax`` feeds them to the softmax."""
    if mask is not None and mask_mode == "fill":
        return scores.masked_fill(mask == 0, fill)
    if mask is not None and mask_mode == "inverted":
        return scores.masked_fill(mask != 0, fill)
    return scores


def _cross_mistake(key, title, hint, **options):
    """A cross-attention mistake, also in the form with -inf fills (NaN for a query whose
    context positions are all blocked): students write both."""
    return Mistake(key, title, hint, _cross(**options), also=(_cross(**options, fill=float("-inf")),))


CROSS_MISTAKES = [
    _cross_mistake("keys_from_decoder", "keys and values computed from the decoder tokens x",
                   "In cross-attention the queries come from x (the decoder) and the keys and values from context "
                   "(the encoder output): self.key_value(context).", keys="x"),
    _cross_mistake("queries_from_context", "queries computed from the context",
                   "Queries come from the decoder tokens x, so the output has one row per decoder token (B, T, E).",
                   queries="context"),
    _cross_mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
                   "Divide the scores by sqrt(head_dim) before the softmax.", scale=None),
    _cross_mistake("scale_by_emb", "scaled by sqrt(emb_size) instead of sqrt(head_dim)",
                   "Each head's dot products have head_dim = emb_size // num_heads terms.", scale="emb"),
    _cross_mistake("softmax_over_queries", "softmax over the queries axis",
                   "Each query's weights sum to 1 over the context positions: softmax(dim=-1).", softmax_dim=-2),
    _cross_mistake("no_projection", "the output projection is missing",
                   "After merging the heads apply self.projection.", project=False),
    _cross_mistake("merge_d_h", "heads merged in the wrong order, (d h)",
                   "Merge with 'b h t d -> b t (h d)'.", merge="b h t d -> b t (d h)"),
    _cross_mistake("reshape_without_permute", "(B, h, T, d) reshaped to (B, T, E) without moving the heads axis",
                   "out.reshape(B, T, E) on a (B, h, T, d) tensor mixes tokens and heads; move the axes first: "
                   "rearrange(out, 'b h t d -> b t (h d)') or out.transpose(1, 2).reshape(B, T, E).",
                   merge="reshape"),
    Mistake("kv_layout", "keys and values split from key_value in another layout than (kv h d)",
            "The exercise lays key_value out as (kv h d): all keys (head by head), then all values, so "
            "rearrange(self.key_value(context), 'b s (kv h d) -> kv b h s d', kv=2, h=h), or k, v = "
            "self.key_value(context).chunk(2, dim=-1) before splitting the heads.",
            _cross(kv_layout="h kv d"),
            also=(_cross(kv_layout="h d kv"), _cross(kv_layout="h kv d", fill=float("-inf")),
                  _cross(kv_layout="h d kv", fill=float("-inf")))),
    _cross_mistake("single_head", "one head over all emb_size features",
                   "Split q, k and v into num_heads heads of emb_size // num_heads features each: "
                   "'b t (h d) -> b h t d'.", heads=False),
    Mistake("single_head_emb_scale", "one head over all emb_size features",
            "Split q, k and v into num_heads heads of emb_size // num_heads features each: "
            "'b t (h d) -> b h t d'.", _cross(heads=False, scale="emb"),
            also=(_cross(heads=False, scale="emb", fill=float("-inf")),)),
    Mistake("mask_ignored", "the mask is ignored",
            "Blocked context positions (mask 0/False) must get zero weight: scores.masked_fill(mask == 0, -1e9) "
            "before the softmax.", _cross(mask_mode="ignored")),
    _cross_mistake("mask_inverted", "mask polarity inverted (True/1 treated as blocked)",
                   "In the course's convention 1/True means 'may attend' and 0/False means blocked: fill where "
                   "mask == 0.", mask_mode="inverted"),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Zeroing weights after the softmax leaves rows that no longer sum to 1: mask the scores with -1e9 "
            "before the softmax.", _cross(mask_mode="after")),
    Mistake("nan_fully_masked", "a query whose context positions are all blocked gets NaN",
            "With -inf fills, a query that may see no context position gets softmax of a row of -inf = 0/0 = NaN "
            "(and NaN spreads through training): fill the blocked scores with -1e9 instead.",
            _cross(fill=float("-inf"))),
    Mistake("weights_before_softmax", "return_attention returns the scores, not the softmax weights",
            "Return the attention weights after the softmax (each row sums to 1), shape (B, heads, T, S).",
            _cross(returned="scores"),
            also=(_cross(returned="raw_scores"), _cross(returned="scores", fill=float("-inf")))),
    _cross_mistake("weights_averaged", "attention weights averaged over the heads",
                   "Return every head's weights: (B, heads, T, S).", returned="mean_heads"),
]


def weights_problem(weights, mask=None) -> tuple[str, str] | None:
    """(which, sentence): what is wrong with attention weights ``(..., T, S)`` whatever the scores:
    NaN rows, weight on blocked keys, rows not summing to 1 over the keys."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim < 2:
        return None
    allowed = None
    if mask is not None:
        try:
            allowed = np.broadcast_to(np.asarray(mask) != 0, w.shape)
        except ValueError:
            allowed = None
    if np.isnan(w).any():
        if allowed is not None and np.isnan(w[~allowed.any(-1)]).any():
            return "nan", ("a query whose keys are all blocked gets NaN weights "
                           "(softmax of a row of -inf is 0/0): fill "
                           "blocked scores with a large negative number such as -1e9 instead of -inf")
        return "nan", "the attention weights contain NaN"
    if allowed is not None:
        live = allowed.any(-1)
        if (np.abs(np.where(allowed, 0.0, w)).max(-1)[live] > 1e-6).any():
            if (np.abs(np.where(allowed, w, 0.0)).max(-1)[live] < 1e-6).any():
                return "mask", ("the attention weights are nonzero exactly where the mask blocks a key and zero where "
                                "it allows one: the mask polarity is inverted (block where mask == 0)")
            return "mask", ("the attention weights are not zero where the mask blocks a key: the mask is not applied "
                            "(or not passed on) before the softmax")
    return _sums_problem(w, allowed)


def _sums_problem(w, allowed) -> tuple[str, str] | None:
    sums = w.sum(-1)
    ok = np.isclose(sums, 1.0, atol=1e-4)
    if allowed is not None:
        ok |= ~allowed.any(-1) & (np.isclose(sums, 0.0, atol=1e-4) | np.isclose(sums, 1.0, atol=1e-4))
    if ok.all():
        return None
    if np.allclose(w.sum(-2), 1.0, atol=1e-4):
        return "sum", "the attention weights sum to 1 over the queries (axis -2), not over the keys (the last axis)"
    if allowed is not None and (sums[allowed.any(-1)] < 1 - 1e-4).all():
        return "mask", ("the attention weights of a query do not sum to 1 over its allowed keys: the mask is applied "
                        "after the softmax (set blocked scores to -1e9 before it)")
    return "sum", "each row of attention weights (one query, over the keys) should sum to 1"


def _cross_weights(which: str):
    """Properties of the returned attention weights, whatever the scores."""
    def detect(view: View) -> str | None:
        for case, got in view.outputs("weights"):
            p = case.params
            found = weights_problem(got, cross_mask(p))
            B, T, S = p["x"][0], p["x"][1], p["c"][1]
            if found is None and np.shape(got) != (B, p["h"], T, S):
                found = "shape", (f"the attention weights should have shape (B, heads, T, S) = ({B}, {p['h']}, {T}, "
                                  f"{S}), got {np.shape(got)}")
            if found is not None:
                return f"{found[1]} (on input {case.label})" if found[0] == which else None
        return None
    return detect


def _cross_outputs(which: str):
    def detect(view: View) -> str | None:
        for case, out in view.outputs("out"):
            if np.isnan(np.asarray(out, dtype=np.float64)).any() and case.params.get("full_rows"):
                return ("a query that may see no context position gets NaN: with -inf fills its softmax is 0/0; fill "
                        "the blocked scores with -1e9 instead") if which == "nan" else None
            p = case.params
            B, T, S, E = p["x"][0], p["x"][1], p["c"][1], p["E"]
            if np.shape(out) == (B, S, E) and S != T:
                return ("the output has one row per context position (B, S, E): the queries must come from x, "
                        "(B, T, E)") if which == "rows" else None
        return None
    return detect


CROSS_SYMPTOMS = (
    *PROPERTIES, FLOAT_MIX, RETURNS_TUPLE,
    by_tag("context_mask_wrong", "mask", "right without a mask, wrong with a context padding mask",
           "the output with a context padding mask is wrong although the cases without a mask are right: block the "
           "context positions where mask == 0 (fill their scores with -1e9 before the softmax), for every head and "
           "query",
           "Your output is right without a mask: which scores does your mask block, and for which heads and queries?"),
    by_tag("fully_blocked_query", "mask_full", "a query that may see no context position fails",
           "the case with a query that may see no context position fails although the others pass: fill the blocked "
           "scores with -1e9 (not -inf, which gives 0/0 = NaN for such a query)",
           "Only the query that may see nothing fails: what does the softmax of a row of -inf give?"),
    by_tag("returned_weights_wrong", "weights", "right output, wrong returned weights",
           "the output is right but the weights returned with return_attention=True are not: return the softmax "
           "weights (B, heads, T, S), after masking",
           "Your output is right: which tensor do you return as the weights, and is it taken after the softmax?"),
    gradient_differs("x, context and every parameter"),
    symptom("weights_nan", "NaN attention weights", "Fill blocked scores with -1e9 instead of -inf.",
            "Where do your weights become NaN, and what does the softmax of a row of -inf give?",
            _cross_weights("nan")),
    symptom("weights_ignore_mask", "weight where the mask blocks a context position",
            "Block where mask == 0: masked_fill(mask == 0, -1e9) before the softmax.",
            "Look at a blocked context position (mask == 0) in your weights: is its weight zero?",
            _cross_weights("mask")),
    symptom("weights_rows_not_normalised", "rows of attention weights that do not sum to 1",
            "The softmax is over the context positions (the last axis).",
            "Add up one row of your weights (one query): is it 1? Over which axis is your softmax?",
            _cross_weights("sum")),
    symptom("weights_shape", "the weights are not (B, heads, T, S)", "Return every head's weights: (B, heads, T, S).",
            "What shape should the weights of every head, query and context position have together?",
            _cross_weights("shape")),
    symptom("output_nan", "NaN for a query that may see no context position",
            "Fill blocked scores with -1e9 instead of -inf.",
            "Which query gets NaN, and what does the softmax of a row of -inf give?", _cross_outputs("nan")),
    symptom("queries_from_context_rows", "one output row per context position",
            "The queries come from x: the output is (B, T, E).",
            "How many rows should the output have: one per decoder token, or one per context position?",
            _cross_outputs("rows")),
    *RECIPE_SAYS,
)

add('cross_attention', references=lambda: [vitref.CrossAttention, _FiniteFillCross, _AdditiveCross],
    catalogue=[*CROSS_MISTAKES, values_from_keys(), *CROSS_SYMPTOMS])


# --------------------------------------------------------------------------- decoder block


def _decoder_reference():

    class Reference(vitref.DecoderBlock):
        def forward(self, x, context, self_mask=None):
            return super().forward(x, context, self_mask=self_mask)
    return [Reference]


class _GivenMHA(nn.Module):
    """The notebook's given MultiHeadAttention (blocked scores filled with -1e9)."""

    def __init__(self, emb_size=768, num_heads=8):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, causal=False, return_attention=False):
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", qkv=3, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if causal:
            allowed = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
            mask = allowed if mask is None else (mask != 0) & allowed
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h n d -> b n (h d)"))
        return (out, weights) if return_attention else out


_SELF_MASKS = {
    "causal": lambda T: torch.ones(T, T, dtype=torch.bool).tril(),
    "upper_mask": lambda T: torch.ones(T, T, dtype=torch.bool).triu(),
    "inverted_mask": lambda T: torch.ones(T, T, dtype=torch.bool).triu(1),
    "strict_mask": lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1),
}


def _decoder_self_mask(x, self_mask, mode):
    """The mask ``(T, T)`` (or what a mistaken answer passes) of the decoder's self-attention."""
    mask = None
    if (self_mask == "causal" and mode != "no_causal_mask") or mode == "always_causal":
        mask = _SELF_MASKS.get(mode, _SELF_MASKS["causal"])(x.shape[1]).to(x.device)
    if mode == "self_mask_as_mask":
        mask = self_mask                      # the string "causal": the attention raises
    return mask


def _decoder_cross(block, h, context, mask, mode):
    """The cross-attention of a decoder block as the answer ``mode`` computes it."""
    source = h if mode == "keys_from_decoder" else context
    if mode == "context_normalised":
        source = block.norm2(source)
    if mode == "causal_in_cross" and mask is not None:
        return first_if_tuple(block.cross_attn(h, source, mask=mask))
    if mode == "causal_in_cross_ts" and mask is not None:      # a (T, S) lower triangle
        wide = torch.ones(h.shape[1], source.shape[1], dtype=torch.bool, device=h.device).tril()
        return first_if_tuple(block.cross_attn(h, source, mask=wide))
    return first_if_tuple(block.cross_attn(h, source))


def _decoder_layout(block, x, self_attention, cross_attention, mode):
    """The block's three sublayers, their norms and residuals, in the order the answer ``mode`` has them."""
    if mode == "post_ln":
        x = block.norm1(x + self_attention(x))
        x = block.norm2(x + cross_attention(x))
        return block.norm3(x + block.mlp(x))
    if mode == "same_norm":
        x = x + self_attention(block.norm1(x))
        x = x + cross_attention(block.norm1(x))
        return x + block.mlp(block.norm1(x))
    if mode == "cross_first":
        x = x + cross_attention(block.norm1(x))
        x = x + self_attention(block.norm2(x))
        return x + block.mlp(block.norm3(x))
    if mode == "mlp_before_cross":
        x = x + self_attention(block.norm1(x))
        x = x + block.mlp(block.norm2(x))
        return x + cross_attention(block.norm3(x))
    if mode == "norm_in_residual":
        x = block.norm1(x)
        x = x + self_attention(x)
        x = block.norm2(x)
        x = x + cross_attention(x)
        x = block.norm3(x)
        return x + block.mlp(x)
    if mode == "no_norm_self":
        x = x + self_attention(x)
        x = x + cross_attention(block.norm2(x))
        return x + block.mlp(block.norm3(x))
    if mode == "no_norm_cross":
        x = x + self_attention(block.norm1(x))
        x = x + cross_attention(x)
        return x + block.mlp(block.norm3(x))
    if mode == "no_norm_mlp":
        x = x + self_attention(block.norm1(x))
        x = x + cross_attention(block.norm2(x))
        return x + block.mlp(x)
    a = self_attention(block.norm1(x))
    x = a if mode == "no_residual_self" else x + a
    c = cross_attention(block.norm2(x))
    x = c if mode == "no_residual_cross" else x + c
    m = block.mlp(block.norm3(x))
    return m if mode == "no_residual_mlp" else x + m


def _decoder(mode="right", cross=None):
    """A decoder block as a student may write it; ``cross``: the builder of a (wrong)
    cross-attention to use instead of the given parts' one."""
    def build(parts):
        MHA = parts.MultiHeadAttention
        Cross = parts.CrossAttention if cross is None else cross(parts)

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
                mask = _decoder_self_mask(x, self_mask, mode)

                def self_attention(h):
                    return first_if_tuple(self.self_attn(h, mask=mask)) if mask is not None else first_if_tuple(
                        self.self_attn(h))

                def cross_attention(h):
                    return _decoder_cross(self, h, context, mask, mode)

                return _decoder_layout(self, x, self_attention, cross_attention, mode)
        return DecoderBlock
    return build


_DEC_PARTS = ("MultiHeadAttention", "CrossAttention")


def _dec(key, title, hint, mode):
    return Mistake(key, title, hint, _decoder(mode), _DEC_PARTS)


DEC_MISTAKES = [
    _dec("no_causal_mask", "self_mask='causal' is ignored",
         "With self_mask='causal', token t may only attend tokens <= t: call self.self_attn(self.norm1(x), "
         "causal=True).", "no_causal_mask"),
    _dec("upper_mask", "causal mask transposed (tokens see the future)",
         "The allowed positions are s <= t: the lower triangle (torch.tril).", "upper_mask"),
    _dec("inverted_mask", "causal mask inverted: True where attention is blocked",
         "The mask is True where a token MAY attend (s <= t): torch.tril(torch.ones(T, T)), not torch.triu(..., 1).",
         "inverted_mask"),
    _dec("strict_mask", "causal mask without its diagonal: a token cannot see itself",
         "Token t may attend keys s <= t, itself included: torch.tril with diagonal=0.", "strict_mask"),
    _dec("keys_from_decoder", "cross-attention over the decoder tokens instead of the context",
         "The second sub-layer attends to the encoder output: self.cross_attn(self.norm2(x), context).",
         "keys_from_decoder"),
    Mistake("causal_in_cross", "a causal mask also passed to the cross-attention",
            "Causality is about the decoder's own tokens: the cross-attention sees the whole context (no mask).",
            _decoder("causal_in_cross"), _DEC_PARTS, also=(_decoder("causal_in_cross_ts"),)),
    _dec("post_ln", "post-LN: LayerNorm after the residual sums",
         "This block is pre-LN: x = x + sublayer(norm(x)) for each of the three sub-layers.", "post_ln"),
    _dec("context_normalised", "the context normalised with the decoder's LayerNorm",
         "norm2 belongs to the decoder tokens: cross_attn(self.norm2(x), context), with the encoder output as it is.",
         "context_normalised"),
    _dec("same_norm", "norm1 used before all three sub-layers",
         "Each sub-layer has its own LayerNorm: norm1, norm2 and norm3.", "same_norm"),
    _dec("norm_in_residual", "the normalised x kept as the residual stream",
         "Pre-LN normalises only the sub-layer's input: x = x + sublayer(norm(x)); x = norm(x) followed by "
         "x = x + sublayer(x) normalises the skip path too.", "norm_in_residual"),
    _dec("no_norm_mlp", "no LayerNorm before the MLP",
         "Each of the three sub-layers reads a normalised input: x + self.mlp(self.norm3(x)).", "no_norm_mlp"),
    _dec("no_norm_self", "no LayerNorm before the self-attention",
         "Each of the three sub-layers reads a normalised input: x + self.self_attn(self.norm1(x), causal=causal).",
         "no_norm_self"),
    _dec("no_norm_cross", "no LayerNorm before the cross-attention",
         "Each of the three sub-layers reads a normalised input: x + self.cross_attn(self.norm2(x), context).",
         "no_norm_cross"),
    _dec("always_causal", "the self-attention is always causal, even with self_mask=None",
         "Pass causal=True only when self_mask == 'causal'; with self_mask=None every token sees every token.",
         "always_causal"),
    _dec("self_mask_as_mask", "self_mask passed on as the attention mask",
         "self_mask is the string 'causal' (or None), not a tensor: call self.self_attn(h, causal=(self_mask == "
         "'causal')).", "self_mask_as_mask"),
    _dec("cross_first", "cross-attention before self-attention",
         "The order is masked self-attention, then cross-attention, then the MLP.", "cross_first"),
    _dec("mlp_before_cross", "the MLP before the cross-attention",
         "The order is masked self-attention, then cross-attention, then the MLP.", "mlp_before_cross"),
    _dec("no_residual_self", "no residual connection around the self-attention",
         "Add the sub-layer's output to its input: x = x + self.self_attn(self.norm1(x), causal=causal).",
         "no_residual_self"),
    _dec("no_residual_cross", "no residual connection around the cross-attention",
         "Add the sub-layer's output to its input: x = x + self.cross_attn(self.norm2(x), context).",
         "no_residual_cross"),
    _dec("no_residual_mlp", "no residual connection around the MLP",
         "Add the sub-layer's output to its input: x = x + self.mlp(self.norm3(x)).", "no_residual_mlp"),
]

# The block built from a wrong cross-attention of the previous question (the notebook's
# DecoderBlock uses the student's own CrossAttention): the cross-attention's mistake, named.
_CROSS_IN_BLOCK = ("queries_from_context", "no_scaling", "scale_by_emb", "softmax_over_queries", "no_projection",
                   "merge_d_h", "reshape_without_permute", "kv_layout", "single_head")
DEC_MISTAKES += [
    dataclasses.replace(m, key=f"cross_{m.key}", title=f"your CrossAttention: {m.title}",
                        build=_decoder(cross=m.build), needs=_DEC_PARTS,
                        also=tuple(_decoder(cross=b) for b in m.also[:1] if m.key == "kv_layout"))
    for m in CROSS_MISTAKES if m.key in _CROSS_IN_BLOCK
]


def _future(view: View) -> str | None:
    """The student's own outputs: does an earlier position change when the last token changes?"""
    for case, student_case in view.cases:
        outputs = student_case.get("outputs") or {}
        a, b = outputs.get("out"), outputs.get("out (last token changed)")
        if a is None or b is None or np.shape(a) != np.shape(b) or np.ndim(a) != 3:
            continue
        if not np.allclose(np.asarray(a)[:, :-1], np.asarray(b)[:, :-1], atol=1e-6):
            return (f"the output depends on future positions: changing the last token of x changes the outputs at "
                    f"earlier positions (on input {case.label}); with self_mask='causal' pass causal=True to "
                    f"self.self_attn")
    return None


def _causal_cases_only(view: View) -> str | None:
    """Cases with self_mask='causal' fail, those without pass: the causal mask is wrong."""
    causal = [row.status for row in view.rows if row.case.params["causal"]]
    plain = [row.status for row in view.rows if not row.case.params["causal"]]
    if plain and all(s == "ok" for s in plain) and any(s not in ("ok", "structure") for s in causal):
        return ("the block is right without a mask but wrong with self_mask='causal': pass causal=True to "
                "self.self_attn (token t attends tokens s <= t)")
    return None


DEC_SYMPTOMS = (
    symptom("sees_the_future", "earlier outputs depend on later tokens",
            "With self_mask='causal', pass causal=True to self.self_attn: token t attends tokens s <= t.",
            "Change the last token: do the outputs of earlier positions change? Should they, with a causal mask?",
            _future),
    *PROPERTIES, FLOAT_MIX, RETURNS_TUPLE,
    by_tag("causal_case_wrong", "causal", "the causal case fails",
           "with self_mask='causal' the outputs at earlier positions must not depend on later tokens",
           "With self_mask='causal', what may token t see?"),
    gradient_differs("x, context and every parameter"),
    symptom("causal_mask_wrong", "right without a mask, wrong with self_mask='causal'",
            "Pass causal=True to self.self_attn when self_mask == 'causal' (token t attends tokens s <= t).",
            "Your block is right without a mask: what does self_mask='causal' change in the self-attention?",
            _causal_cases_only),
    *RECIPE_SAYS,
)


_NORM_PAIRS = (("norm1", "norm2"), ("norm2", "norm3"), ("norm1", "norm3"))

add('decoder_block', references=_decoder_reference,
    catalogue=[*DEC_MISTAKES, norms_swapped(_NORM_PAIRS), relu_for_gelu(), *DEC_SYMPTOMS],
    reference_parts=parts(MultiHeadAttention=lambda: _GivenMHA, CrossAttention=lambda: _FiniteFillCross))
