"""The references and the catalogue of known mistakes of ch03_attention (grader side)."""
from __future__ import annotations


import math

import torch
import vitref

from ..model import Mistake
from ._entry import add
from ._attention import attend, finite_fill_attention, finite_fill_head, head_class, masking_mistakes
from ._common import mistaken_mask_softmax
from ._changes import values_from_keys
from ._symptoms import (
    FLOAT64_RAISES, HEADS, INTEGER_TIMES_FLOAT, MASKS, OUTPUT_RIGHT_GRADIENT_WRONG, PROPERTIES,
    RECIPE_SAYS, SLICES_DO_NOT_SUM_TO_ONE, WEIGHTS,
)

# the symptoms of an attention (masks, weights), in the order they are tried
# (the generic "right without a mask, wrong with one" after the ones that say what the mask does wrong)
ATTENTION_SYMPTOMS = (INTEGER_TIMES_FLOAT, FLOAT64_RAISES, *MASKS[:-1], OUTPUT_RIGHT_GRADIENT_WRONG, *HEADS, *WEIGHTS,
                      MASKS[-1], *PROPERTIES, *RECIPE_SAYS)


def _softmax_variant(fn):
    def build(parts):
        def softmax(x, dim=-1):
            return fn(x, dim)
        return softmax
    return build


def _no_keepdim(x, dim):
    e = torch.exp(x - x.max(dim)[0])
    return e / e.sum(dim)


def _mean_shift(x, dim):
    e = torch.exp(x - x.mean(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _max_namedtuple(x, dim):
    e = torch.exp(x - x.max(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _sum_last_axis(x, dim):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def _unshifted_denominator(x, dim):
    return torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x).sum(dim, keepdim=True)


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
            _softmax_variant(_no_keepdim)),
    Mistake("global_max", "subtracted the maximum of the whole tensor",
            "Subtract each slice's own maximum (x.amax(dim, keepdim=True)): a slice far below the global "
            "maximum underflows to exp(-2000) = 0 and gives 0/0 = NaN.",
            _softmax_variant(lambda x, dim: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(dim, keepdim=True))),
    Mistake("log_softmax", "returned log-probabilities",
            "Return the probabilities exp(x - max) / sum(exp(x - max)), not their logarithm.",
            _softmax_variant(lambda x, dim: (x - x.amax(dim, keepdim=True))
                             - torch.log(torch.exp(x - x.amax(dim, keepdim=True)).sum(dim, keepdim=True)))),
    Mistake("min_subtraction", "subtracted the minimum instead of the maximum",
            "x - min(x) makes every exponent >= 0, so exp overflows to inf for a wide slice, and a -inf entry "
            "gives -inf - (-inf) = NaN. Subtract the maximum along dim (x.amax(dim, keepdim=True)).",
            _softmax_variant(lambda x, dim: torch.exp(x - x.amin(dim, keepdim=True))
                             / torch.exp(x - x.amin(dim, keepdim=True)).sum(dim, keepdim=True))),
    Mistake("mean_subtraction", "subtracted the mean instead of the maximum",
            "Subtracting the mean does not bound the exponents: with one value far above the others, "
            "exp(x - mean) still overflows to inf. Subtract the maximum along dim (x.amax(dim, keepdim=True)).",
            _softmax_variant(_mean_shift)),
    Mistake("max_namedtuple", "x.max(dim) used as a tensor",
            "x.max(dim, keepdim=True) returns a (values, indices) pair: use x.max(dim, keepdim=True).values "
            "or x.amax(dim, keepdim=True).",
            _softmax_variant(_max_namedtuple)),
    Mistake("sum_over_last_axis", "maximum along dim but the sum over the last axis",
            "Normalise along the same axis: exps.sum(dim=dim, keepdim=True), not sum(-1).",
            _softmax_variant(_sum_last_axis)),
    Mistake("unshifted_denominator", "shifted numerator, unshifted denominator",
            "Use the same shifted exponentials above and below: exps = exp(x - max); exps / exps.sum(dim).",
            _softmax_variant(_unshifted_denominator)),
]

add('softmax', references=lambda: [vitref.softmax],
    catalogue=[*SOFTMAX_MISTAKES, SLICES_DO_NOT_SUM_TO_ONE, INTEGER_TIMES_FLOAT, FLOAT64_RAISES, *PROPERTIES,
               *RECIPE_SAYS])


def _attention_references():
    return [vitref.scaled_dot_product_attention, finite_fill_attention]


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


def _attend_fn(**kwargs):
    """A wrong attention function from the shared :func:`attend` (fill -1e9 unless given)."""
    def build(parts):
        def scaled_dot_product_attention(q, k, v, mask=None):
            return attend(q, k, v, mask, **kwargs)
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
    *masking_mistakes(_attn, inverted_also=(_attend_fn(mask_mode="additive_inverted"),)),
    _both_fills("scale_after_softmax", "scaling applied after the softmax",
            "Divide the scores by sqrt(d_k) before the softmax; dividing the weights afterwards breaks "
            "their sum to 1.",
            scale=None, after="scale_after"),
    _both_fills("transpose_1_2", "k.transpose(1, 2): the wrong axes once there is a heads axis",
            "Transpose the last two axes of k, whatever the leading ones: k.transpose(-2, -1) (or k.mT); on "
            "(B, h, S, d_k) inputs transpose(1, 2) swaps the heads and the keys.",
            transpose=(1, 2)),
    _both_fills("returns_scores", "returned the scores instead of the softmax weights",
            "The second result is the attention weights softmax(q k^T / sqrt(d_k)), each row summing to 1.",
             returns="scores"),
    _both_fills("swapped_returns", "returned (weights, out) instead of (out, weights)",
            "Return the output first: return out, weights.",
             returns="swapped"),
]

add('attention', references=_attention_references,
    catalogue=[*ATTENTION_MISTAKES, values_from_keys(), *ATTENTION_SYMPTOMS])


def _head(**kwargs):
    def build(parts):
        return head_class(**kwargs)
    return build


HEAD_MISTAKES = [
    Mistake("scale_by_dim", "scores scaled by sqrt(dim) instead of sqrt(head_dim)",
            "The dot products are between head_dim-sized vectors: divide by sqrt(head_dim).",
            _head(scale="dim")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide q k^T by sqrt(head_dim) before the softmax.", _head(scale=None)),
    Mistake("precedence_half", "head_dim ** 1/2 is head_dim / 2",
            "Operator precedence: head_dim ** 1/2 means head_dim / 2; write head_dim ** 0.5.", _head(scale="half"),
            also=(_head(scale="half_inline"),)),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the keys: softmax(dim=-1).", _head(softmax_dim=-2)),
    Mistake("qk_swapped", "weights transposed: k q^T instead of q k^T",
            "Row t of the weights belongs to query t: scores = q @ k.transpose(-2, -1).", _head(qk_swapped=True)),
    Mistake("no_value_projection", "values taken from x without the value projection",
            "The output mixes the value vectors self.value(x), not the raw inputs.", _head(values="x")),
    *masking_mistakes(_head),
    Mistake("no_bias", "the linear layers built without a bias (bias=False)",
            "Keep the exercise's layers: nn.Linear(dim, head_dim) has a bias.", _head(bias=False)),
    Mistake("keys_from_query", "the keys computed with the query layer",
            "Each role has its own layer: q = self.query(x), k = self.key(x), v = self.value(x).",
            _head(keys="query")),
]

add('attention_head', references=lambda: [vitref.AttentionHead, finite_fill_head()],
    catalogue=[*HEAD_MISTAKES, values_from_keys(), *ATTENTION_SYMPTOMS])
