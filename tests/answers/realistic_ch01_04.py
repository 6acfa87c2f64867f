"""Answers to the questions of chapters 1-4 written the way students write them, right and wrong.

``RIGHT[qid]``: other correct formulations (must pass). ``WRONG``: ``(qid, answer, expected)``
where ``expected`` names the mistake: a catalogue key (``result.mistake``), or ``"~words"``:
words the feedback must contain (a property the checker names without a catalogue entry).
These are written by hand, independently of the catalogue's builders.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from . import solutions as S
from .variants import LoopRawHeads, LoopStack, MHAHeadMajorLayout, MHAPermute, MHASeparate

RIGHT = {}
WRONG = []


def right(qid):
    def register(obj):
        RIGHT.setdefault(qid, []).append(obj)
        return obj
    return register


def wrong(qid, expected):
    def register(obj):
        WRONG.append((qid, obj, expected))
        return obj
    return register


# =============================================================================== patches
@right("patches")
def patches_view_permute(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    x = images.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)     # b, h, w, s1, s2, c
    return x.reshape(b, -1, p * p * c)


@right("patches")
def patches_f_unfold(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    cols = F.unfold(images, kernel_size=p, stride=p)                          # (B, C*P*P, N), (c s1 s2)
    n = cols.shape[-1]
    return cols.transpose(1, 2).reshape(b, n, c, p, p).permute(0, 1, 3, 4, 2).reshape(b, n, -1)


@right("patches")
def patches_named_sizes(images, patch_size):
    B, C, H, W = images.shape
    return rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", h=H // patch_size, w=W // patch_size,
                     p1=patch_size, p2=patch_size)


@right("patches")
def patches_list_of_blocks(images, patch_size):
    p = patch_size
    blocks = [images[:, :, i:i + p, j:j + p].permute(0, 2, 3, 1).flatten(1)
              for i in range(0, images.shape[2], p) for j in range(0, images.shape[3], p)]
    return torch.stack(blocks, dim=1)


@wrong("patches", "channels_first")
def patches_c_first(images, patch_size):
    return rearrange(images, "b c (h p1) (w p2) -> b (h w) (c p1 p2)", p1=patch_size, p2=patch_size)


@wrong("patches", "channels_first")
def patches_unfold_raw(images, patch_size):
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


@wrong("patches", "column_order")
def patches_w_before_h(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (w h) (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "transposed_patch")
def patches_s2_s1(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    return images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 5, 3, 1).reshape(b, -1, p * p * c)


@wrong("patches", "reshape_only")
def patches_just_reshape(images, patch_size):
    b = images.shape[0]
    return images.reshape(b, -1, patch_size * patch_size * images.shape[1])


@wrong("patches", "channels_last_reshape")
def patches_permute_then_reshape(images, patch_size):
    b, c, h, w = images.shape
    return images.permute(0, 2, 3, 1).reshape(b, -1, patch_size * patch_size * c)


@wrong("patches", "grid_not_flattened")
def patches_grid_kept(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b h w (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "grid_as_patch_size")
def patches_h_is_p(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", h=patch_size, w=patch_size)


@wrong("patches", "~although the inputs")
def patches_into_zeros(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    out = torch.zeros(b, (h // p) * (w // p), p * p * c)
    n = 0
    for i in range(h // p):
        for j in range(w // p):
            out[:, n] = images[:, :, i * p:(i + 1) * p, j * p:(j + 1) * p].permute(0, 2, 3, 1).reshape(b, -1)
            n += 1
    return out


@wrong("patches", "interleaved")
def patches_strided(images, patch_size):
    return rearrange(images, "b c (p1 h) (p2 w) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size)


# =============================================================================== embedding_lookup
@right("embedding_lookup")
def embed_eye(token_ids, weight):
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids] @ weight


@right("embedding_lookup")
def embed_compare_arange(token_ids, weight):
    one_hot = (token_ids.unsqueeze(-1) == torch.arange(weight.shape[0])).to(weight.dtype)
    return one_hot @ weight


@right("embedding_lookup")
def embed_scatter(token_ids, weight):
    one_hot = torch.zeros(*token_ids.shape, weight.shape[0], dtype=weight.dtype)
    one_hot.scatter_(-1, token_ids.unsqueeze(-1), 1.0)
    return torch.einsum("...v,vd->...d", one_hot, weight)


@right("embedding_lookup")
def embed_index_select(token_ids, weight):
    return weight.index_select(0, token_ids.reshape(-1)).reshape(*token_ids.shape, weight.shape[1])


@wrong("embedding_lookup", "one_hot_classes")
def embed_no_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


@wrong("embedding_lookup", "off_by_one")
def embed_minus_one(token_ids, weight):
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids - 1] @ weight


@wrong("embedding_lookup", "~works with float32 inputs but raises")
def embed_float_one_hot(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


@wrong("embedding_lookup", "~an integer tensor")
def embed_long_one_hot(token_ids, weight):
    return torch.matmul(F.one_hot(token_ids, num_classes=weight.shape[0]), weight)


@wrong("embedding_lookup", "returns_one_hot")
def embed_only_one_hot(token_ids, weight):
    return F.one_hot(token_ids, num_classes=weight.shape[0]).to(weight.dtype)


@wrong("embedding_lookup", "num_classes_d")
def embed_d_classes(token_ids, weight):
    return F.one_hot(token_ids, num_classes=weight.shape[1]).to(weight.dtype) @ weight


@wrong("embedding_lookup", "transposed_weight")
def embed_weight_t(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight.t()


@wrong("embedding_lookup", "~although the inputs")
def embed_result_float(token_ids, weight):
    return (F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight).float()


# =============================================================================== q1
@right("q1")
def pe_exp_log(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.exp(2 * i / d * np.log(n))
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
    return P


@right("q1")
def pe_outer(seq_len, d, n=10000):
    angles = np.outer(np.arange(seq_len), 1.0 / n ** (np.arange(0, d, 2) / d))
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(seq_len, d)


@right("q1")
def pe_torch_float64(seq_len, d, n=10000):
    k = torch.arange(seq_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    P = torch.zeros(seq_len, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(k / n ** (two_i / d))
    P[:, 1::2] = torch.cos(k / n ** (two_i / d))
    return P


def _pe_loops(angle, sin_col=lambda i: 2 * i, cos_col=lambda i: 2 * i + 1, first=np.sin, second=np.cos,
              start=0):
    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(start, seq_len + start):
            for i in range(d // 2):
                P[k - start, sin_col(i)] = first(angle(k, i, d, n, seq_len))
                P[k - start, cos_col(i)] = second(angle(k, i, d, n, seq_len))
        return P
    return getPositionEncoding


WRONG += [
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), first=np.cos, second=np.sin), "sin_cos_swapped"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), start=1), "positions_from_one"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / 100 ** (2 * i / d)), "n_hardcoded_100"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / 10000 ** (2 * i / d)), "n_hardcoded"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (i / d)), "exponent_i_over_d"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / d), cos_col=lambda i: i + 1, sin_col=lambda i: i),
     "index_i"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** 2 * i / d), "precedence_position"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i / L)), "exponent_seq_len"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k / n ** (2 * i // d)), "integer_division"),
    ("q1", _pe_loops(lambda k, i, d, n, L: k * n ** (2 * i / d)), "multiplied"),
]


@wrong("q1", "halves")
def pe_halves(seq_len, d, n=10000):
    angles = np.arange(seq_len)[:, None] / n ** (2 * np.arange(d // 2) / d)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


@wrong("q1", "exponent_doubled_twice")
def pe_arange_step_two(seq_len, d, n=10000):
    i = np.arange(0, d, 2)                    # already 2i
    angles = np.arange(seq_len)[:, None] / n ** (2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


@wrong("q1", "sin_before_division")
def pe_sin_k(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k, 2 * i] = np.sin(k) / denominator
            P[k, 2 * i + 1] = np.cos(k) / denominator
    return P


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


@wrong("softmax", "~although the inputs")
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
    weights = S.softmax(scores, dim=-1)
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
    weights = S.softmax(scores)
    return weights @ v, weights


@wrong("attention", "scale_by_dk")
def attention_by_dk(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = S.softmax(scores)
    return weights @ v, weights


@wrong("attention", "softmax_over_queries")
def attention_softmax_dim2(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = S.softmax(scores, dim=-2)
    return weights @ v, weights


@wrong("attention", "mask_ignored")
def attention_no_mask(q, k, v, mask=None):
    weights = S.softmax(_scores(q, k))
    return weights @ v, weights


@wrong("attention", "mask_inverted")
def attention_masked_where_true(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask.bool(), -1e9)
    weights = S.softmax(scores)
    return weights @ v, weights


@wrong("attention", "mask_after_softmax")
def attention_mask_multiplied(q, k, v, mask=None):
    weights = S.softmax(_scores(q, k))
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
    weights = S.softmax(scores)
    return weights @ v, weights


@wrong("attention", "~although the inputs")
def attention_float32(q, k, v, mask=None):
    scores = (q @ k.transpose(-2, -1)).float() / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = S.softmax(scores)
    return weights @ v.float(), weights


@wrong("attention", "mask_inverted")
def attention_additive_wrong_sign(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores + mask * -1e9
    weights = S.softmax(scores)
    return weights @ v, weights


@wrong("attention", "swapped_returns")
def attention_weights_first(q, k, v, mask=None):
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = S.softmax(scores)
    return weights, weights @ v


@wrong("attention", "precedence_half")
def attention_half_power(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / d_k ** 1 / 2
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = S.softmax(scores)
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
        return S.scaled_dot_product_attention(self.W_q(x), self.W_k(x), self.W_v(x), mask)


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
        return S.scaled_dot_product_attention(self.query(x), self.key(x), x, mask)


@wrong("attention_head", "qk_swapped")
class HeadKQ(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return S.scaled_dot_product_attention(k, q, v, mask)


@wrong("attention_head", "mask_ignored")
class HeadForgetsMask(_Head):
    def forward(self, x, mask=None):
        return S.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x))


@wrong("attention_head", "no_bias")
class HeadNoBias(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim, bias=False)
        self.key = nn.Linear(dim, head_dim, bias=False)
        self.value = nn.Linear(dim, head_dim, bias=False)

    def forward(self, x, mask=None):
        return S.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), mask)


@wrong("attention_head", "~the gradient of the parameter key.weight")
class HeadDetachedKeys(_Head):
    def forward(self, x, mask=None):
        k = self.key(x).detach()
        return S.scaled_dot_product_attention(self.query(x), k, self.value(x), mask)


@wrong("attention_head", "nan_fully_masked")
class HeadMinusInf(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return weights @ v, weights


@wrong("attention_head", "~works with float32 inputs but raises")
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


# =============================================================================== q5
class _MHA(nn.Module):
    """The exercise's __init__ (qkv, att_drop, projection)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def attention(self, x, mask=None, fill=-1e9):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, fill)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        return att, values


@right("q5")
class MHATransposeReshape(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        b, h, n, d = out.shape
        return self.projection(out.transpose(1, 2).contiguous().view(b, n, h * d))


@right("q5")
class MHAChunk(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        att = self.drop(scores.softmax(dim=-1))
        return self.proj(rearrange(att @ v, "b h n d -> b n (h d)"))


@right("q5")
class MHAInfZeroRows(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        att = self.att_drop(torch.nan_to_num(att, nan=0.0))
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@right("q5")
class MHASeparateMasked(MHASeparate):
    """variants.MHASeparate with the mask applied."""

    def forward(self, x, mask=None):
        queries = rearrange(self.queries(x), "b n (h d) -> b h n d", h=self.num_heads)
        keys = rearrange(self.keys(x), "b n (h d) -> b h n d", h=self.num_heads)
        values = rearrange(self.values(x), "b n (h d) -> b h n d", h=self.num_heads)
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@right("q5")
class MHAHeadMajorMasked(MHAHeadMajorLayout):
    """variants.MHAHeadMajorLayout ((h d qkv) layout) with the mask applied."""

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (h d qkv) -> (qkv) b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1]) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy, dim=-1))
        return self.projection(rearrange(torch.einsum("bhal, bhlv -> bhav", att, qkv[2]), "b h n d -> b n (h d)"))


@right("q5")
class MHAPermuteMaskedDropout(MHAPermute):
    """variants.MHAPermute with the mask and the dropout (F.dropout with training=self.training)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        b, n, e = x.shape
        q, k, v = self.in_proj(x).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * self.d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.p, training=self.training)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(b, n, e))


class _MHAWrong(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "merge_d_h")
class MHAMergeDH(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (d h)"))


@wrong("q5", "reshape_without_permute")
class MHAReshape(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.reshape(x.shape[0], x.shape[1], self.emb_size))


@wrong("q5", "transpose_wrong_axes")
class MHATransposeWrong(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.transpose(-1, -2).reshape(x.shape[0], x.shape[1], -1))


@wrong("q5", "einsum_keeps_keys")
class MHAEinsumKeys(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhlv", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "einsum_wrong_axis")
class MHAEinsumQueries(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhla, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_in_eval")
class MHAFunctionalDropout(_MHA):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        att = F.dropout(att, self.p)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_missing")
class MHANoDropout(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "dropout_on_output")
class MHADropoutAtEnd(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.att_drop(self.projection(rearrange(out, "b h n d -> b n (h d)")))


@wrong("q5", "scale_by_emb")
class MHAScaleEmb(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / self.emb_size ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "nan_fully_masked")
class MHAMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "mask_ignored")
class MHAIgnoresMask(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x)
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "~the gradient of the parameter qkv.weight")
class MHADetachedQKV(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x).detach(), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "no_bias")
class MHANoBias(_MHAWrong):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__(emb_size, num_heads, dropout)
        self.qkv = nn.Linear(emb_size, emb_size * 3, bias=False)


@wrong("q5", "dropout_before_softmax")
class MHADropEnergy(_MHA):
    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        energy = self.att_drop(energy / (self.emb_size // self.num_heads) ** 0.5)
        out = torch.einsum("bhal, bhlv -> bhav", F.softmax(energy, dim=-1), qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@wrong("q5", "mask_inverted")
class MHAMaskWhereTrue(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, None if mask is None else (mask == 0))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))




# =============================================================================== mha_loop
class _Loop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([S.AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)


@right("mha_loop")
class LoopZip(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        outs, maps = zip(*[head(x, mask) for head in self.heads])
        out = self.projection(torch.cat(outs, dim=2))
        if return_attention:
            return out, torch.stack(maps, 1)
        return out


@right("mha_loop")
class LoopEinops(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask=mask) for head in self.heads]
        out = rearrange(torch.stack([r[0] for r in results]), "h b n d -> b n (h d)")
        weights = rearrange(torch.stack([r[1] for r in results]), "h b n m -> b h n m")
        return (self.projection(out), weights) if return_attention else self.projection(out)


@right("mha_loop")
class LoopStackFixed(LoopStack):
    """variants.LoopStack honouring return_attention."""

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(rearrange(torch.stack([r[0] for r in results]), "h b n d -> b n (h d)"))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@right("mha_loop")
class LoopRawHeadsFixed(LoopRawHeads):
    """variants.LoopRawHeads (raw-parameter heads, W_O) passing the mask and returning the weights."""

    def forward(self, x, mask=None, return_attention=False):
        pairs = [head(x, mask) for head in self.heads]
        out = self.W_O(torch.cat([o for o, _ in pairs], dim=-1))
        return (out, torch.stack([w for _, w in pairs], dim=1)) if return_attention else out


class _LoopWrong(_Loop):
    combine = staticmethod(lambda outs: torch.cat(outs, dim=-1))
    stack = staticmethod(lambda maps: torch.stack(maps, dim=1))
    use_mask = True
    project = True

    def forward(self, x, mask=None, return_attention=False):
        outs, maps = [], []
        for head in self.heads:
            out, w = head(x, mask) if self.use_mask else head(x)
            outs.append(out)
            maps.append(w)
        out = self.combine(outs)
        if self.project:
            out = self.projection(out)
        return (out, self.stack(maps)) if return_attention else out


@wrong("mha_loop", "no_projection")
class LoopNoProjection(_LoopWrong):
    project = False


@wrong("mha_loop", "concat_tokens")
class LoopCatDim1(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs, dim=1))


@wrong("mha_loop", "heads_averaged")
class LoopMean(_LoopWrong):
    def __init__(self, emb_size, num_heads):
        super().__init__(emb_size, num_heads)
        self.projection = nn.Linear(emb_size // num_heads, emb_size)
    combine = staticmethod(lambda outs: sum(outs) / len(outs))


@wrong("mha_loop", "weights_stacked_dim0")
class LoopStackDim0(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps))


@wrong("mha_loop", "weights_stacked_last")
class LoopStackLast(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps, dim=-1))


@wrong("mha_loop", "weights_averaged")
class LoopWeightsMean(_LoopWrong):
    stack = staticmethod(lambda maps: torch.stack(maps, dim=1).mean(dim=1))


@wrong("mha_loop", "weights_of_last_head")
class LoopLastWeights(_LoopWrong):
    stack = staticmethod(lambda maps: maps[-1])


@wrong("mha_loop", "mask_ignored")
class LoopNoMask(_LoopWrong):
    use_mask = False


@wrong("mha_loop", "same_head_repeated")
class LoopFirstHead(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [self.heads[0](x, mask) for _ in range(len(self.heads))]
        out = self.projection(torch.cat([r[0] for r in results], dim=-1))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@wrong("mha_loop", "return_attention_ignored")
class LoopNoWeights(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        return self.projection(torch.cat([head(x, mask)[0] for head in self.heads], dim=-1))


@wrong("mha_loop", "~the gradient of the parameter heads.0")
class LoopDetached(_Loop):
    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(torch.cat([r[0].detach() for r in results], dim=-1))
        return (out, torch.stack([r[1] for r in results], dim=1)) if return_attention else out


@wrong("mha_loop", "heads_reversed")
class LoopReversed(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs[::-1], dim=-1))




# =============================================================================== two mistakes at once
# No catalogue entry matches a combination: the diagnosis names the property that fails.
@wrong("q5", "~merge as (h d), not (d h)")
class MHAMergeDHMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (d h)"))


@wrong("q5", "~mix the tokens")
class MHAReshapeMinusInf(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x, mask, fill=float("-inf"))
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(out.reshape(x.shape[0], x.shape[1], -1))


@wrong("mha_loop", "~hold head 1's output")
class LoopReversedNoMask(_LoopWrong):
    combine = staticmethod(lambda outs: torch.cat(outs[::-1], dim=-1))
    use_mask = False


@wrong("attention_head", "~must sum to 1 over the keys")
class HeadScaleAfterSoftmax(_Head):
    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        weights = torch.nan_to_num(F.softmax(scores, dim=-1)) / self.head_dim ** 0.5
        return weights @ v, weights


# =============================================================================== from the parallel set
# Wrong answers first written for the parallel implementation of these checks (checks-a at 402507f,
# tests/answers/realistic_ch01_04.py there), rewritten here: mine accepted or misnamed them.
@wrong("mha_loop", "~is float32 although the inputs")
class LoopFloat32(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList([S.AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        B, N, E = x.shape
        out = torch.zeros(B, N, E)
        ws = torch.zeros(B, len(self.heads), N, N)
        d = E // len(self.heads)
        for i, head in enumerate(self.heads):
            o, w = head(x, mask)
            out[..., i * d:(i + 1) * d] = o
            ws[:, i] = w
        out = self.projection(out.to(x.dtype))
        return (out, ws) if return_attention else out


@wrong("q5", "mask_after_softmax")
class MHAMaskAfterSoftmax(_MHA):
    def forward(self, x, mask=None):
        att, values = self.attention(x)
        if mask is not None:
            att = att * mask
        out = torch.einsum("bhal, bhlv -> bhav", self.att_drop(att), values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


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
        return S.scaled_dot_product_attention(self.query(x), self.query(x), self.value(x), mask)


@wrong("mha_loop", "weights_concatenated")
class LoopWeightsCat(_LoopWrong):
    stack = staticmethod(lambda maps: torch.cat(maps, dim=-1))


@wrong("embedding_lookup", "off_by_one")
def embed_one_hot_minus_one(token_ids, weight):
    return F.one_hot(token_ids - 1, weight.shape[0]).to(weight.dtype) @ weight


@wrong("softmax", "min_subtraction")
def softmax_min_shift(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "~do not sum to 1")
def softmax_sum_axis0(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


@wrong("q1", "~the first pair (columns 0 and 1)")
def pe_pairs_from_one(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = np.sin(k / n ** (2 * (i + 1) / d))
            P[k, 2 * i + 1] = np.cos(k / n ** (2 * (i + 1) / d))
    return P


@wrong("q1", "~the sine and the cosine of one angle")
def pe_cos_squared(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = np.sin(k / n ** (2 * i / d))
            P[k, 2 * i + 1] = np.cos(k / n ** (2 * i / d)) ** 2
    return P


@wrong("q1", "~row 0 should be 0 in the even columns")
def pe_positions_from_two(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(1, seq_len + 1):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k - 1, 2 * i] = np.sin((k + 1) / denominator)
            P[k - 1, 2 * i + 1] = np.cos((k + 1) / denominator)
    return P
