"""Answer banks of Chapter 3 (attention): softmax, attention, attention_head.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .bank import right, says, solution, solution_value, variant, wrong, wrong_list


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("softmax")
def softmax(x, dim=-1):
    """Softmax of tensor x along dim, safe for large values."""
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)
    ### END SOLUTION


@solution("attention")
def scaled_dot_product_attention(q, k, v, mask=None):
    """q (..., T, d_k), k (..., S, d_k), v (..., S, d_v) -> (out (..., T, d_v), weights (..., T, S))."""
    d_k = q.shape[-1]
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / d_k ** 0.5                 # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores, dim=-1)                              # (..., T, S)
    out = weights @ v                                              # (..., T, d_v)
    ### END SOLUTION
    return out, weights


@solution("attention_head")
class AttentionHead(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        # x: (B, T, dim)
        ### BEGIN SOLUTION
        q, k, v = self.query(x), self.key(x), self.value(x)     # each (B, T, head_dim)
        return scaled_dot_product_attention(q, k, v, mask)
        ### END SOLUTION


masked_row_weight = solution_value("concept_masked_row", 0.2)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- softmax
@variant("softmax")
def softmax_numpy(x, dim=-1):
    a = x.numpy().astype(np.float64)
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


@variant("softmax")
def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


@variant("softmax")
def softmax_float64_max(x, dim=-1):
    x = x.double()
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / torch.sum(e, dim=dim, keepdim=True)


# ----------------------------------------------------------------- attention
@variant("attention")
def attention_where_nan_to_num(q, k, v, mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask.bool(), scores, torch.tensor(float("-inf")))
    weights = torch.nan_to_num(softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("...ts,...sd->...td", weights, v), weights


@variant("attention")
def attention_float_mask(q, k, v, mask=None):
    """Julia-style: scores * mask + (1 - mask) * -1e9 (needs a 0/1 float mask)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores * mask + (1 - mask) * -1e9
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


@variant("attention")
def attention_numpy_float64(q, k, v, mask=None):
    q, k, v = (t.numpy().astype(np.float64) for t in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(np.asarray(mask) != 0, scores, -1e9)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    return weights @ v, weights


@variant("attention")
def attention_zero_rows(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is None:
        weights = scores.softmax(-1)
    else:
        allowed = mask != 0
        scores = scores.masked_fill(~allowed, float("-inf"))
        any_allowed = allowed.any(dim=-1, keepdim=True)
        weights = torch.where(any_allowed, scores.softmax(-1), torch.zeros_like(scores))
    return weights @ v, weights


# ----------------------------------------------------------------- attention head
@variant("attention_head")
class HeadRawParameters(nn.Module):
    """The Julia notebook's head: raw matrices used as x @ W, registered K, Q, V, no biases."""

    def __init__(self, dim, n_hidden):
        super().__init__()
        self.W_K = nn.Parameter(torch.randn(dim, n_hidden))
        self.W_Q = nn.Parameter(torch.randn(dim, n_hidden))
        self.W_V = nn.Parameter(torch.randn(dim, n_hidden))
        self.n_hidden = n_hidden

    def forward(self, x, attn_mask=None):
        Q, K, V = x @ self.W_Q, x @ self.W_K, x @ self.W_V
        scores = Q @ K.transpose(-2, -1) / self.n_hidden ** 0.5
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask == 0, -1e9)
        alpha = F.softmax(scores, dim=-1)
        return alpha @ V, alpha


@variant("attention_head")
class HeadFusedChunk(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.to_qkv = nn.Linear(dim, 3 * head_dim)
        self.scale = head_dim ** -0.5

    def forward(self, x, mask=None):
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        scores = torch.einsum("btd,bsd->bts", q, k) * self.scale
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        return torch.einsum("bts,bsd->btd", weights, v), weights


# ####################################################################################################
# realistic answers (first set)
# =============================================================================== softmax
@right("softmax")
def softmax_max_values(x, dim=-1):
    e = (x - x.max(dim=dim, keepdim=True).values).exp()
    return e / e.sum(dim=dim, keepdim=True)


@right("softmax")
def softmax_max_index0(x, dim=-1):
    m = torch.max(x, dim, keepdim=True)[0]
    num = torch.exp(x - m)
    return num / torch.sum(num, dim, keepdim=True)


@right("softmax")
def softmax_movedim(x, dim=-1):
    y = x.movedim(dim, -1)
    e = torch.exp(y - y.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)


@wrong("softmax", "no_max_subtraction")
def softmax_naive(x, dim=-1):
    return torch.exp(x) / torch.sum(torch.exp(x), dim=dim, keepdim=True)


@wrong("softmax", "global_max")
def softmax_global_max(x, dim=-1):
    e = torch.exp(x - torch.max(x))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "mean_subtraction")
def softmax_mean(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "max_namedtuple")
def softmax_max_tuple(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "ignores_dim")
def softmax_last_axis(x, dim=-1):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@wrong("softmax", "sum_over_last_axis")
def softmax_sum_last(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@wrong("softmax", says("float32's precision only"))
def softmax_float(x, dim=-1):
    x = x.float()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "unshifted_denominator")
def softmax_mixed(x, dim=-1):
    return torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x).sum(dim, keepdim=True)


@wrong("softmax", "no_keepdim")
def softmax_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.max(dim)[0])
    return e / e.sum(dim)


# =============================================================================== attention
@right("attention")
def attention_einsum(q, k, v, mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -1e9)
    weights = softmax(scores, dim=-1)
    return torch.einsum("...ts,...sd->...td", weights, v), weights


@right("attention")
def attention_where_fill(q, k, v, mask=None):
    scores = torch.matmul(q, k.mT) / torch.sqrt(torch.tensor(q.shape[-1], dtype=q.dtype))
    if mask is not None:
        scores = torch.where(mask == 1, scores, torch.full_like(scores, -1e9))
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v, weights


@right("attention")
def attention_inf_then_zero_rows(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(torch.isnan(weights), 0.0)
    return weights @ v, weights


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


@wrong("attention", "no_scaling")
def attention_unscaled(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores)
    return weights @ v, weights


@wrong("attention", "scale_by_dk")
def attention_by_dk(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores)
    return weights @ v, weights


@wrong("attention", "softmax_over_queries")
def attention_softmax_dim2(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores, dim=-2)
    return weights @ v, weights


@wrong("attention", "mask_ignored")
def attention_no_mask(q, k, v, mask=None):
    weights = softmax(_scores(q, k))
    return weights @ v, weights


@wrong("attention", "mask_inverted")
def attention_masked_where_true(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask.bool(), -1e9)
    weights = softmax(scores)
    return weights @ v, weights


@wrong("attention", "mask_after_softmax")
def attention_mask_multiplied(q, k, v, mask=None):
    weights = softmax(_scores(q, k))
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


@wrong("attention", "nan_fully_masked")
def attention_minus_inf(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


@wrong("attention", "fill_zero")
def attention_scores_times_mask(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores * mask
    weights = softmax(scores)
    return weights @ v, weights


@wrong("attention", says("float32's precision only"))
def attention_float32(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1)).float() / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores)
    return weights @ v.float(), weights


@wrong("attention", "mask_inverted")
def attention_additive_wrong_sign(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores + mask * -1e9
    weights = softmax(scores)
    return weights @ v, weights


@wrong("attention", "swapped_returns")
def attention_weights_first(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores)
    return weights, weights @ v


@wrong("attention", "precedence_half")
def attention_half_power(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / d_k ** 1 / 2
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores)
    return weights @ v, weights


# =============================================================================== attention_head
class _Head(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)
        self.head_dim = head_dim


@right("attention_head")
class HeadEinsum(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = torch.einsum("bqd,bkd->bqk", q, k) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.softmax(scores, dim=-1)
        return torch.einsum("bqk,bkd->bqd", weights, v), weights


@right("attention_head")
class HeadZeroRows(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
        return weights @ v, weights


@right("attention_head")
class HeadOtherNames(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.W_q = nn.Linear(dim, head_dim)
        self.W_k = nn.Linear(dim, head_dim)
        self.W_v = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)


@wrong("attention_head", "scale_by_dim")
class HeadScaleDim(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.softmax(scores, dim=-1)
        return weights @ v, weights


@wrong("attention_head", "no_value_projection")
class HeadNoValue(_Head):
    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.query(x), self.key(x), x, mask)


@wrong("attention_head", "qk_swapped")
class HeadKQ(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return scaled_dot_product_attention(k, q, v, mask)


@wrong("attention_head", "mask_ignored")
class HeadForgetsMask(_Head):
    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.query(x), self.key(x), self.value(x))


@wrong("attention_head", ("no_bias", says("have no bias")))
class HeadNoBias(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim, bias=False)
        self.key = nn.Linear(dim, head_dim, bias=False)
        self.value = nn.Linear(dim, head_dim, bias=False)

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), mask)


@wrong("attention_head", says("the gradient of the parameter key.weight"))
class HeadDetachedKeys(_Head):
    def forward(self, x, mask=None):
        k = self.key(x).detach()
        return scaled_dot_product_attention(self.query(x), k, self.value(x), mask)


@wrong("attention_head", "nan_fully_masked")
class HeadMinusInf(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return weights @ v, weights


@wrong("attention_head", says("works with float32 inputs but raises"))
class HeadBatchLoop(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        B, T, _ = x.shape
        out = torch.zeros(B, T, self.head_dim)
        weights = torch.zeros(B, T, T)
        for b in range(B):
            scores = q[b] @ k[b].T / self.head_dim ** 0.5
            if mask is not None:
                scores = scores.masked_fill((mask if mask.dim() == 2 else mask[b]) == 0, -1e9)
            weights[b] = F.softmax(scores, dim=-1)
            out[b] = weights[b] @ v[b]
        return out, weights


@wrong("attention_head", "softmax_over_queries")
class HeadSoftmaxDim1(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.softmax(scores, dim=1)
        return weights @ v, weights


@wrong("attention_head", "precedence_half")
class HeadHalfPower(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 1 / 2
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.softmax(scores, dim=-1)
        return weights @ v, weights


@wrong("attention_head", says("must sum to 1 over the keys"))
class HeadScaleAfterSoftmax(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.nan_to_num(F.softmax(scores, dim=-1)) / self.head_dim ** 0.5
        return weights @ v, weights


@wrong("attention", "transpose_1_2")
def attention_transpose_1_2(q, k, v, mask=None):
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


@wrong("attention_head", "keys_from_query")
class HeadKeysFromQuery(_Head):
    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.query(x), self.query(x), self.value(x), mask)


@wrong("softmax", "min_subtraction")
def softmax_min_shift(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", says("do not sum to 1"))
def softmax_sum_axis0(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


# ####################################################################################################
# realistic answers, second set: first written for a parallel implementation of these checks
#
# =============================================================================== 03 softmax
@right("softmax")
def softmax_max_values_2(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


@right("softmax")
def softmax_inplace_div(x, dim=-1):
    e = (x - torch.amax(x, dim, keepdim=True)).exp()
    e /= torch.sum(e, dim, keepdim=True)
    return e


@wrong("softmax", "no_max_subtraction")
def softmax_naive_2(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


@wrong("softmax", "ignores_dim")
def softmax_last_axis_2(x, dim=-1):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


@wrong("softmax", "no_keepdim")
def softmax_sum_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


# =============================================================================== 03 attention
@right("attention")
def attention_matmul_sqrt_tensor(q, k, v, mask=None):
    d_k = torch.tensor(q.shape[-1], dtype=q.dtype)
    scores = torch.matmul(q, k.mT) / torch.sqrt(d_k)
    if mask is not None:
        scores = torch.where(mask == 0, torch.full_like(scores, -1e9), scores)
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def _attention(scale=True, mask_mode="fill", fill=-1e9, dim=-1, transpose=(-2, -1), dtype_fixed=False):
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = q @ k.transpose(*transpose)
        if scale:
            scores = scores / math.sqrt(q.shape[-1])
        if mask is not None and mask_mode == "fill":
            scores = scores.masked_fill(mask == 0, fill)
        elif mask is not None and mask_mode == "bool_direct":
            scores = scores.masked_fill(mask.bool(), fill)
        elif mask is not None and mask_mode == "multiply":
            scores = scores * mask
        weights = torch.softmax(scores, dim=dim)
        if mask is not None and mask_mode == "after":
            weights = weights * mask
        if dtype_fixed:
            weights = weights.to(torch.float32)
            v = v.to(torch.float32)
        return weights @ v, weights
    return scaled_dot_product_attention


wrong_list("attention", [
    (_attention(scale=False), "no_scaling"),
    (_attention(fill=float("-inf")), "nan_fully_masked"),
    (_attention(mask_mode="bool_direct"), "mask_inverted"),
    (_attention(mask_mode="multiply"), "fill_zero"),
    (_attention(mask_mode="after"), "mask_after_softmax"),
    (_attention(mask_mode=None), "mask_ignored"),
    (_attention(dim=-2), "softmax_over_queries"),
    (_attention(transpose=(1, 2)), "transpose_1_2"),
    (_attention(dtype_fixed=True), says("float32's precision only")),
])


@wrong("attention", "scale_by_dk")
def attention_divided_by_dk(q, k, v, mask=None):
    d_k = k.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / d_k
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, v), p_attn


@wrong("attention", says("not zero where the mask blocks"))
def attention_small_fill(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1.0)
    weights = scores.softmax(-1)
    return weights @ v, weights


# =============================================================================== 03 attention head
@right("attention_head")
class HeadNoHelper(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)
        self.scale = head_dim ** -0.5

    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = torch.nan_to_num(weights, nan=0.0)                  # fully masked rows: zeros
        return torch.bmm(weights, v), weights


@right("attention_head")
class HeadFunctionalLinear(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        q = F.linear(x, self.query.weight, self.query.bias)
        k = F.linear(x, self.key.weight, self.key.bias)
        v = F.linear(x, self.value.weight, self.value.bias)
        return scaled_dot_product_attention(q, k, v, mask)


def _head_class(forward):
    class AttentionHead(nn.Module):
        def __init__(self, dim, head_dim):
            super().__init__()
            self.query = nn.Linear(dim, head_dim)
            self.key = nn.Linear(dim, head_dim)
            self.value = nn.Linear(dim, head_dim)
            self.dim = dim

        def forward(self, x, mask=None):
            return forward(self, x, mask)
    AttentionHead.__name__ = forward.__name__
    return AttentionHead


def _att(q, k, v, mask, scale, fill=-1e9, dim=-1, use_mask=True):
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None and use_mask:
        scores = scores.masked_fill(mask == 0, fill)
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def head_scaled_by_dim(self, x, mask=None):
    return _att(self.query(x), self.key(x), self.value(x), mask, math.sqrt(self.dim))


def head_mask_dropped(self, x, mask=None):
    return _att(self.query(x), self.key(x), self.value(x), None, math.sqrt(self.query.out_features))


def head_minus_inf(self, x, mask=None):
    return _att(self.query(x), self.key(x), self.value(x), mask, math.sqrt(self.query.out_features),
                fill=float("-inf"))


def head_keys_from_query(self, x, mask=None):
    return _att(self.query(x), self.query(x), self.value(x), mask, math.sqrt(self.query.out_features))


def head_raw_values(self, x, mask=None):
    return _att(self.query(x), self.key(x), x, mask, math.sqrt(self.query.out_features))


def head_kq(self, x, mask=None):
    q, k, v = self.query(x), self.key(x), self.value(x)
    scores = k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ v, weights


def head_detached_value(self, x, mask=None):
    v = F.linear(x, self.value.weight.detach(), self.value.bias)
    return _att(self.query(x), self.key(x), v, mask, math.sqrt(self.query.out_features))


def head_float32_zeros(self, x, mask=None):
    q, k, v = self.query(x), self.key(x), self.value(x)
    scores = torch.zeros(x.shape[0], x.shape[1], x.shape[1])
    scores[:] = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(-1)
    return weights @ v.float(), weights


wrong_list("attention_head", [
    (_head_class(head_scaled_by_dim), "scale_by_dim"),
    (_head_class(head_mask_dropped), "mask_ignored"),
    (_head_class(head_minus_inf), "nan_fully_masked"),
    (_head_class(head_keys_from_query), "keys_from_query"),
    (_head_class(head_raw_values), "no_value_projection"),
    (_head_class(head_kq), "qk_swapped"),
    (_head_class(head_detached_value), says("the gradient of the parameter value.weight")),
    (_head_class(head_float32_zeros), says("float32's precision only")),
])


@wrong("attention_head", says("would never be trained"))
class HeadFrozenKey(AttentionHead):
    def __init__(self, dim, head_dim):
        super().__init__(dim, head_dim)
        self.key.weight.requires_grad_(False)


# ####################################################################################################
# keys used as values (a class of the instructor's hidden collection): named by the counterfactual
# "values_from_keys" (the reference run with its keys where its values go)
@wrong("attention", "values_from_keys")
def attention_mixes_the_keys(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores, dim=-1)
    return weights @ k, weights


@wrong("attention_head", "values_from_keys")
class HeadValuesFromKeyLayer(_Head):
    def forward(self, x, mask=None):
        q, k = self.query(x), self.key(x)
        v = self.key(x)                                   # copy-paste of the line above
        return scaled_dot_product_attention(q, k, v, mask)
