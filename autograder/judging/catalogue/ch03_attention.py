"""The references and the catalogue of known mistakes of ch03_attention (grader side)."""
from __future__ import annotations


import math

import numpy as np
import torch
from torch import nn

from ..model import Mistake
from . import add
from ._common import mistaken_mask_softmax, vitref
from ._properties import dtype_mix, weights_problem
from ...questions.ch03_attention import (  # noqa: F401
    ATTENTION_CASES,
    HEAD_CASES,
    SOFTMAX_CASES,
    _run_attention,
    _run_head,
    _run_softmax,
    _softmax_input,
    case_mask,
)


def _softmax_variant(fn):
    def build(parts):
        def softmax(x, dim=-1):
            return fn(x, dim)
        return softmax
    return build


def _no_keepdim(x, dim):
    e = torch.exp(x - x.max(dim)[0])
    return e / e.sum(dim)


SOFTMAX_MISTAKES = [
    Mistake("no_max_subtraction", "not numerically stable: exp of large values overflows",
            "exp(1000) is inf in float32 (and float64), so inf/inf = NaN. Subtract the maximum along dim "
            "first: softmax(x) = softmax(x - max(x)).",
            _softmax_variant(lambda x, dim: torch.exp(x) / torch.exp(x).sum(dim, keepdim=True))),
    Mistake("ignores_dim", "always normalises over the last axis",
            "Use the dim argument for the max, the exp-sum and the division.",
            _softmax_variant(lambda x, dim: torch.exp(x - x.amax(-1, keepdim=True))
                             / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True))),
    Mistake("global_sum", "normalised over all elements",
            "Each slice along dim must sum to 1: pass dim (and keepdim=True) to max and sum.",
            _softmax_variant(lambda x, dim: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum())),
    Mistake("no_exp", "no exponential",
            "softmax(x)_i = exp(x_i) / sum_j exp(x_j): exponentiate before normalising.",
            _softmax_variant(lambda x, dim: x / x.sum(dim, keepdim=True))),
    Mistake("no_keepdim", "max or sum without keepdim=True",
            "Without keepdim the reduced axis disappears and broadcasting lines the values up wrongly; "
            "use x.amax(dim, keepdim=True) and .sum(dim, keepdim=True).",
            _softmax_variant(_no_keepdim),
            also=(_softmax_variant(lambda x, dim: torch.exp(x - x.amax(dim, keepdim=True))     # the sum only
                                   / torch.exp(x - x.amax(dim, keepdim=True)).sum(dim)),)),
    Mistake("global_max", "subtracted the maximum of the whole tensor",
            "Subtract each slice's own maximum (x.amax(dim, keepdim=True)): a slice far below the global "
            "maximum underflows to exp(-2000) = 0 and gives 0/0 = NaN.",
            _softmax_variant(lambda x, dim: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(dim, keepdim=True))),
    Mistake("log_softmax", "returned log-probabilities",
            "Return the probabilities exp(x - max) / sum(exp(x - max)), not their logarithm.",
            _softmax_variant(lambda x, dim: (x - x.amax(dim, keepdim=True))
                             - torch.log(torch.exp(x - x.amax(dim, keepdim=True)).sum(dim, keepdim=True)))),
]

SOFTMAX_MISTAKES += [
    Mistake("max_namedtuple", "x.max(dim) used as a tensor",
            "With a dim, x.max(dim=..., keepdim=True) returns (values, indices); take .values (or use x.amax).",
            _softmax_variant(lambda x, dim: torch.exp(x - x.max(dim=dim, keepdim=True))
                             / torch.exp(x - x.max(dim=dim, keepdim=True)).sum(dim=dim, keepdim=True))),
]


def _softmax_diagnose(question, data):
    """Properties of the student's softmax outputs: NaN, slices not summing to 1 along dim."""
    for case, student_case in zip(question.cases, data.get("cases") or []):
        out = (student_case.get("outputs") or {}).get("softmax")
        if out is None:
            continue
        p = case.params
        dim = -1 if p["dim"] is None else p["dim"]
        y = np.asarray(out, dtype=np.float64)
        if y.shape != tuple(p["shape"]):
            continue
        if np.isnan(y).any():
            if p.get("large"):
                return ("exp overflows on large inputs (exp(1000) = inf, inf/inf = NaN): subtract each slice's "
                        "maximum along dim before the exp")
            if p.get("neg_inf"):
                return ("a -inf entry gives NaN: subtract each slice's maximum (then exp(-inf) = 0); subtracting "
                        "the minimum (-inf - -inf) or multiplying -inf by 0 gives NaN")
            return "the softmax contains NaN"
        if not np.allclose(y.sum(axis=dim), 1.0, atol=1e-4):
            return f"the slices along dim={dim} do not sum to 1 (on input {case.label})"
        if (y < -1e-7).any():
            return "the softmax has negative values: every probability exp(.)/sum is positive"
    return dtype_mix(data)


add('softmax', references=lambda: [vitref().softmax], catalogue=SOFTMAX_MISTAKES, diagnose=_softmax_diagnose)


def _finite_fill_attention(q, k, v, mask=None):
    """The same attention with -1e9 for blocked scores: fully masked rows become uniform."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = vitref().softmax(scores, dim=-1)
    return weights @ v, weights


def _attention_references():
    return [vitref().scaled_dot_product_attention, _finite_fill_attention]


def _attn(scale="sqrt_dk", softmax_dim=-1, mask_mode="fill", fill=float("-inf"), after=None, returns=None,
          transpose=(-2, -1)):
    """A wrong attention, parametrised by the mistake."""
    def build(parts):
        def scaled_dot_product_attention(q, k, v, mask=None):
            scores = q @ k.transpose(*transpose)
            if scale == "sqrt_dk":
                scores = scores / math.sqrt(q.shape[-1])
            elif scale == "dk":
                scores = scores / q.shape[-1]
            elif scale == "sqrt_dv":
                scores = scores / math.sqrt(v.shape[-1])
            elif scale == "half":
                scores = scores / (q.shape[-1] ** 1 / 2)          # scale = d_k ** 1/2; scores / scale
            elif scale == "half_inline":
                scores = scores / q.shape[-1] ** 1 / 2            # scores / d_k ** 1/2 written inline
            elif scale == "sqrt_s":
                scores = scores / math.sqrt(k.shape[-2])
            weights = mistaken_mask_softmax(scores, mask, mask_mode, softmax_dim, fill)
            if after == "scale_after":
                weights = weights / math.sqrt(q.shape[-1])
            out = weights @ v
            if returns == "scores":
                return out, scores
            if returns == "swapped":
                return weights, out
            return out, weights
        return scaled_dot_product_attention
    return build


def _both_fills(key, title, hint, alternatives=(), **kwargs):
    """A mistake that is not about masking, as written with -1e9 and with -inf (whose fully
    masked rows are NaN): students combine them. ``alternatives``: other spellings (kwargs)."""
    forms = [kwargs, *alternatives]
    builders = [_attn(fill=fill, **form) for form in forms for fill in (-1e9, float("-inf"))]
    return Mistake(key, title, hint, builders[0], also=tuple(builders[1:]))


ATTENTION_MISTAKES = [
    _both_fills("no_scaling", "missing the 1/sqrt(d_k) scaling",
            "Divide the scores q k^T by sqrt(d_k) before the softmax (d_k = q.shape[-1]).",
            scale=None),
    _both_fills("scale_by_dk", "scores divided by d_k instead of sqrt(d_k)",
            "The scaling is 1/sqrt(d_k): it keeps the variance of q.k near 1.",
            scale="dk"),
    _both_fills("scale_by_dv", "scores divided by sqrt(d_v) instead of sqrt(d_k)",
            "Scale by the size of the vectors in the dot product, d_k = q.shape[-1], not d_v.",
            scale="sqrt_dv"),
    _both_fills("scale_by_seq_len", "scores divided by sqrt(S), the number of keys",
            "Scale by sqrt(d_k), the length of the vectors in each dot product (q.shape[-1]).",
            scale="sqrt_s"),
    _both_fills("precedence_half", "d_k ** 1/2 is d_k / 2",
            "Operator precedence: d_k ** 1/2 means (d_k ** 1) / 2; write d_k ** 0.5 or math.sqrt(d_k).",
            scale="half", alternatives=({"scale": "half_inline"},)),
    _both_fills("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights must sum to 1 over the keys: softmax over the last axis (dim=-1).",
            softmax_dim=-2),
    Mistake("fill_zero", "blocked scores set to 0 instead of -inf",
            "A score of 0 still gets weight exp(0) after the softmax: fill blocked scores with -inf or -1e9.",
            _attn(fill=0.0)),
    Mistake("nan_fully_masked", "fully masked rows give NaN",
            "A query whose keys are all blocked gets softmax over all -inf = 0/0 = NaN. Use a large negative "
            "number such as -1e9 instead of -inf, or set those rows to zero.",
            _attn(fill=float("-inf"))),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Blocked scores must be set to -inf (or -1e9) before the softmax, so the allowed weights "
            "still sum to 1.",
            _attn(mask_mode="after")),
    Mistake("mask_inverted", "mask polarity inverted",
            "The mask is 1/True where a query MAY attend: block the positions where it is 0/False "
            "(masked_fill(mask == 0, ...)).",
            _attn(mask_mode="inverted", fill=-1e9), also=(_attn(mask_mode="inverted"),)),
    Mistake("mask_ignored", "the mask is ignored",
            "When mask is given, set the blocked scores to -inf (or -1e9) before the softmax.",
            _attn(mask_mode=None)),
    _both_fills("scale_after_softmax", "scaling applied after the softmax",
            "Divide the scores by sqrt(d_k) before the softmax; dividing the weights afterwards breaks "
            "their sum to 1.",
            scale=None, after="scale_after"),
    _both_fills("returns_scores", "returned the scores instead of the softmax weights",
            "The second result is the attention weights softmax(q k^T / sqrt(d_k)), each row summing to 1.",
             returns="scores"),
    _both_fills("swapped_returns", "returned (weights, out) instead of (out, weights)",
            "Return the output first: return out, weights.",
             returns="swapped"),
]

ATTENTION_MISTAKES += [
    _both_fills("transpose_1_2", "k.transpose(1, 2) instead of k.transpose(-2, -1)",
                "Swap the last two axes of k (S and d_k) whatever the number of leading axes: "
                "k.transpose(-2, -1); transpose(1, 2) swaps the heads and keys axes of a (B, h, S, d_k) tensor.",
                transpose=(1, 2)),
]


def attention_weights_diagnose(question, data, mask_of=case_mask):
    """Name what is wrong with the student's attention weights (NaN rows, blocked keys with
    weight, rows not summing to 1), case by case; then a float32/float64 clash."""
    for case, student_case in zip(question.cases, data.get("cases") or []):
        weights = (student_case.get("outputs") or {}).get("weights")
        if weights is None:
            continue
        mask = mask_of(case.params)
        try:
            found = weights_problem(weights, mask)
        except ValueError:            # shapes that do not broadcast: the comparison says it
            found = None
        if found:
            return f"{found} (on input {case.label})"
    return dtype_mix(data)


add('attention', references=_attention_references, catalogue=ATTENTION_MISTAKES,
    diagnose=attention_weights_diagnose)


def _head(scale="head_dim", softmax_dim=-1, qk_swapped=False, use_mask=True, values="value", keys="key",
          mask_mode="fill", fill=-1e9):
    def build(parts):
        class AttentionHead(nn.Module):
            def __init__(self, dim, head_dim):
                super().__init__()
                self.dim, self.head_dim = dim, head_dim
                self.query = nn.Linear(dim, head_dim)
                self.key = nn.Linear(dim, head_dim)
                self.value = nn.Linear(dim, head_dim)

            def forward(self, x, mask=None):
                q = self.query(x)
                k = self.key(x) if keys == "key" else self.query(x)
                v = self.value(x) if values == "value" else x
                scores = (k @ q.transpose(-2, -1)) if qk_swapped else (q @ k.transpose(-2, -1))
                if scale == "head_dim":
                    scores = scores / math.sqrt(self.head_dim)
                elif scale == "dim":
                    scores = scores / math.sqrt(self.dim)
                elif scale == "half":
                    scores = scores / (self.head_dim ** 1 / 2)
                weights = mistaken_mask_softmax(scores, mask if use_mask else None, mask_mode, softmax_dim, fill)
                return weights @ v, weights
        return AttentionHead
    return build


HEAD_MISTAKES = [
    Mistake("scale_by_dim", "scores scaled by sqrt(dim) instead of sqrt(head_dim)",
            "The dot products are between head_dim-sized vectors: divide by sqrt(head_dim).",
            _head(scale="dim")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide q k^T by sqrt(head_dim) before the softmax.", _head(scale=None)),
    Mistake("precedence_half", "head_dim ** 1/2 is head_dim / 2",
            "Operator precedence: head_dim ** 1/2 means head_dim / 2; write head_dim ** 0.5.", _head(scale="half")),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the keys: softmax(dim=-1).", _head(softmax_dim=-2)),
    Mistake("qk_swapped", "weights transposed: k q^T instead of q k^T",
            "Row t of the weights belongs to query t: scores = q @ k.transpose(-2, -1).", _head(qk_swapped=True)),
    Mistake("no_value_projection", "values taken from x without the value projection",
            "The output mixes the value vectors self.value(x), not the raw inputs.", _head(values="x")),
    Mistake("mask_ignored", "the mask is ignored",
            "Pass the mask on: blocked scores (mask == 0) get -inf or -1e9 before the softmax.",
            _head(use_mask=False)),
]

HEAD_MISTAKES += [
    Mistake("nan_fully_masked", "fully masked rows give NaN",
            "A query whose keys are all blocked gets softmax over all -inf = 0/0 = NaN. Fill blocked scores with "
            "-1e9 instead of -inf, or set those rows to zero.", _head(fill=float("-inf"))),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Set the blocked scores to -1e9 before the softmax, so the allowed weights still sum to 1.",
            _head(mask_mode="after")),
    Mistake("mask_inverted", "mask polarity inverted",
            "The mask is 1/True where a query MAY attend: block where it is 0/False (masked_fill(mask == 0, ...)).",
            _head(mask_mode="inverted"), also=(_head(mask_mode="inverted", fill=float("-inf")),)),
    Mistake("fill_zero", "blocked scores set to 0 instead of -1e9",
            "A score of 0 still gets weight exp(0) after the softmax: fill blocked scores with -1e9 (or -inf).",
            _head(fill=0.0)),
    Mistake("keys_from_query", "the keys computed with the query layer",
            "Each role has its own projection: k = self.key(x) (and q = self.query(x), v = self.value(x)).",
            _head(keys="query")),
]


class _FiniteFillHead(nn.Module):
    """The exercise's head with -1e9 fills: a fully masked query gets uniform weights."""

    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        return _finite_fill_attention(self.query(x), self.key(x), self.value(x), mask)


class _ZeroRowHead(nn.Module):
    """The same head with -inf fills and fully masked rows set to zero (vitref's convention)."""

    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is None:
            weights = torch.softmax(scores, dim=-1)
        else:
            scores = scores.masked_fill(mask == 0, float("-inf"))
            weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        return weights @ v, weights


def finite_fill_head():
    """The notebooks' head (-1e9 fills), for composite answers built from a head."""
    return _FiniteFillHead


def zero_row_head():
    """A head whose fully masked rows are zeros (-inf fills, NaN set to 0)."""
    return _ZeroRowHead


def _head_references():
    return [vitref().AttentionHead, _FiniteFillHead]


add('attention_head', references=_head_references, catalogue=HEAD_MISTAKES,
    diagnose=attention_weights_diagnose)
