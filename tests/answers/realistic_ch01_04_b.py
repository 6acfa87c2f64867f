"""Answers to chapters 1-4 written the way students write them (not built from the catalogue):
the set first written with the parallel implementation of these checks (checks-a at 402507f); its
expected names are translated to this catalogue's keys and diagnoses.

``RIGHT[qid]``: other correct formulations, every one must pass.
``WRONG[qid]``: (answer, expected) pairs; every one must fail, and ``expected`` names it: a
catalogue key (``result.mistake``), or ``"words: ..."``, words the feedback must contain.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from . import solutions as S

RIGHT: dict = {}
WRONG: dict = {}


def right(qid):
    def register(obj):
        RIGHT.setdefault(qid, []).append(obj)
        return obj
    return register


def wrong(qid, expected):
    def register(obj):
        WRONG.setdefault(qid, []).append((obj, expected))
        return obj
    return register


# =============================================================================== 01 patches
@right("patches")
def patches_view_permute(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)   # (B, h, w, s1, s2, C)
    return x.reshape(B, -1, p * p * C)


@right("patches")
def patches_unfold_functional(images, patch_size):
    B, C, H, W = images.shape
    cols = F.unfold(images, kernel_size=patch_size, stride=patch_size)      # (B, C*P*P, N), (c s1 s2)
    cols = cols.view(B, C, patch_size * patch_size, -1)
    return cols.permute(0, 3, 2, 1).reshape(B, cols.shape[-1], -1)


@wrong("patches", "channels_first")
def patches_f_unfold(images, patch_size):
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


@wrong("patches", "channels_first")
def patches_permute_channels_first(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    return images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)


@wrong("patches", "column_order")
def patches_h_w_swapped(images, patch_size):
    return rearrange(images, "b c (w s1) (h s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)


@wrong("patches", "interleaved")
def patches_strided(images, patch_size):
    return rearrange(images, "b c (p1 h) (p2 w) -> b (h w) (p1 p2 c)", p1=patch_size, p2=patch_size)


@wrong("patches", "transposed_patch")
def patches_columns_inside(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    return images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 5, 3, 1).reshape(B, -1, C * p * p)


@wrong("patches", "reshape_only")
def patches_plain_view(images, patch_size):
    B, C, H, W = images.shape
    return images.reshape(B, -1, patch_size * patch_size * C)


@wrong("patches", "channels_last_reshape")
def patches_channels_last_then_reshape(images, patch_size):
    B, C, H, W = images.shape
    return images.permute(0, 2, 3, 1).reshape(B, -1, patch_size * patch_size * C)


@wrong("patches", "words: is float32 although the inputs")
def patches_forced_float32(images, patch_size):
    B, C, H, W = images.shape
    out = torch.zeros(B, (H // patch_size) * (W // patch_size), patch_size * patch_size * C)
    out[:] = rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)
    return out


# =============================================================================== 01 embedding
@right("embedding_lookup")
def embed_eye(token_ids, weight):
    return torch.eye(weight.shape[0], dtype=weight.dtype)[token_ids] @ weight


@right("embedding_lookup")
def embed_scatter(token_ids, weight):
    one_hot = torch.zeros(*token_ids.shape, weight.shape[0], dtype=weight.dtype)
    one_hot.scatter_(-1, token_ids.unsqueeze(-1), 1.0)
    return one_hot @ weight


@right("embedding_lookup")
def embed_einsum(token_ids, weight):
    return torch.einsum("...v,vd->...d", F.one_hot(token_ids, weight.shape[0]).type_as(weight), weight)


@wrong("embedding_lookup", "one_hot_classes")
def embed_no_num_classes(token_ids, weight):
    return F.one_hot(token_ids).to(weight.dtype) @ weight


@wrong("embedding_lookup", "words: works with float32 inputs but raises")
def embed_float_one_hot(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight


@wrong("embedding_lookup", "words: works with float32 inputs but raises")
def embed_eye_default_dtype(token_ids, weight):
    return torch.eye(weight.shape[0])[token_ids] @ weight


@wrong("embedding_lookup", "words: is float32 although the inputs")
def embed_cast_everything(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).float() @ weight.float()


@wrong("embedding_lookup", "off_by_one")
def embed_ids_from_one(token_ids, weight):
    return F.one_hot(token_ids - 1, weight.shape[0]).to(weight.dtype) @ weight


@wrong("embedding_lookup", "transposed_weight")
def embed_weight_t(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).to(weight.dtype) @ weight.T


@wrong("embedding_lookup", "words: integer tensor")
def embed_long_one_hot(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]) @ weight


# =============================================================================== 02 q1
@right("q1")
def pe_cos_as_shifted_sin(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            angle = k / n ** (2 * i / d)
            P[k, 2 * i] = np.sin(angle)
            P[k, 2 * i + 1] = np.sin(angle + np.pi / 2)
    return P


@right("q1")
def pe_exp_log(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.exp(2 * i / d * np.log(n))
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
    return P


def _pe(angle, first=np.sin, second=np.cos, start=0):
    def getPositionEncoding(seq_len, d, n=10000):
        P = np.zeros((seq_len, d))
        for k in range(seq_len):
            for i in np.arange(int(d / 2)):
                a = angle(k + start, i, d, n)
                P[k, 2 * i] = first(a)
                P[k, 2 * i + 1] = second(a)
        return P
    return getPositionEncoding


WRONG["q1"] = [
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.cos, np.sin), "sin_cos_swapped"),
    (_pe(lambda k, i, d, n: k / n ** (i / d)), "exponent_i_over_d"),
    (_pe(lambda k, i, d, n: k / 10000 ** (2 * i / d)), "n_hardcoded"),
    (_pe(lambda k, i, d, n: k / n ** 2 * i / d), "precedence_position"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), start=1), "positions_from_one"),
    (_pe(lambda k, i, d, n: k * n ** (2 * i / d)), "multiplied"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i // d)), "integer_division"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.sin, np.sin), "sin_only"),
    # not catalogued: the property is named by the diagnosis
    (_pe(lambda k, i, d, n: k / n ** (2 * (i + 1) / d)), "words: the first pair"),
    (_pe(lambda k, i, d, n: k / 100 ** (2 * i / d)), "n_hardcoded_100"),
    (_pe(lambda k, i, d, n: k / n ** (2 * i / d), np.sin, lambda a: np.cos(a) ** 2),
     "words: the sine and the cosine of one angle"),
]


@wrong("q1", "words: positions start at 0")
def pe_shifted_rows(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(1, seq_len + 1):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k - 1, 2 * i] = np.sin((k + 1) / denominator)
            P[k - 1, 2 * i + 1] = np.cos((k + 1) / denominator)
    return P


# =============================================================================== 03 softmax
@right("softmax")
def softmax_max_values(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


@right("softmax")
def softmax_inplace_div(x, dim=-1):
    e = (x - torch.amax(x, dim, keepdim=True)).exp()
    e /= torch.sum(e, dim, keepdim=True)
    return e


@wrong("softmax", "no_max_subtraction")
def softmax_naive(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


@wrong("softmax", "ignores_dim")
def softmax_last_axis(x, dim=-1):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


@wrong("softmax", "global_max")
def softmax_global_max(x, dim=-1):
    e = torch.exp(x - torch.max(x))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "no_keepdim")
def softmax_sum_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


@wrong("softmax", "max_namedtuple")
def softmax_max_tuple(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "words: is float32 although the inputs")
def softmax_float(x, dim=-1):
    x = x.float()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@wrong("softmax", "words: do not sum to 1")
def softmax_sum_wrong_axis(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=0, keepdim=True)


@wrong("softmax", "min_subtraction")
def softmax_min_shift(x, dim=-1):
    e = torch.exp(x - x.amin(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


# =============================================================================== 03 attention
@right("attention")
def attention_mT_einsum(q, k, v, mask=None):
    scores = torch.einsum("...td,...sd->...ts", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), -1e9)
    weights = S.softmax(scores, dim=-1)
    return torch.einsum("...ts,...sd->...td", weights, v), weights


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


WRONG["attention"] = [
    (_attention(scale=False), "no_scaling"),
    (_attention(fill=float("-inf")), "nan_fully_masked"),
    (_attention(mask_mode="bool_direct"), "mask_inverted"),
    (_attention(mask_mode="multiply"), "fill_zero"),
    (_attention(mask_mode="after"), "mask_after_softmax"),
    (_attention(mask_mode=None), "mask_ignored"),
    (_attention(dim=-2), "softmax_over_queries"),
    (_attention(transpose=(1, 2)), "transpose_1_2"),
    (_attention(dtype_fixed=True), "words: is float32 although the inputs"),
]


@wrong("attention", "scale_by_dk")
def attention_divided_by_dk(q, k, v, mask=None):
    d_k = k.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / d_k
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, v), p_attn


@wrong("attention", "words: not zero where the mask blocks")
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
        return S.scaled_dot_product_attention(q, k, v, mask)


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


WRONG["attention_head"] = [
    (_head_class(head_scaled_by_dim), "scale_by_dim"),
    (_head_class(head_mask_dropped), "mask_ignored"),
    (_head_class(head_minus_inf), "nan_fully_masked"),
    (_head_class(head_keys_from_query), "keys_from_query"),
    (_head_class(head_raw_values), "no_value_projection"),
    (_head_class(head_kq), "qk_swapped"),
    (_head_class(head_detached_value), "words: the gradient of the parameter value.weight"),
    (_head_class(head_float32_zeros), "words: is float32 although the inputs"),
]


@wrong("attention_head", "words: frozen")
class HeadFrozenKey(S.AttentionHead):
    def __init__(self, dim, head_dim):
        super().__init__(dim, head_dim)
        self.key.weight.requires_grad_(False)


# =============================================================================== 04 q5
def _q5(merge="b h n d -> b n (h d)", einsum="bhal, bhlv -> bhav", fill=-1e9, mask_mode="fill",
        dropout="module", split="b n (qkv h d) -> qkv b h n d", detach=None, float32=False):
    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
            super().__init__()
            self.emb_size, self.num_heads = emb_size, num_heads
            self.qkv = nn.Linear(emb_size, emb_size * 3)
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None):
            w = self.qkv.weight.detach() if detach == "qkv" else self.qkv.weight
            qkv = rearrange(F.linear(x, w, self.qkv.bias), split, h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]
            energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
            if mask is not None and mask_mode == "fill":
                energy = energy.masked_fill(mask == 0, fill)
            elif mask is not None and mask_mode == "bool":
                energy = energy.masked_fill(mask.bool(), fill)
            scaling = (self.emb_size // self.num_heads) ** 0.5
            att = F.softmax(energy / scaling, dim=-1)
            if mask is not None and mask_mode == "after":
                att = att * mask
            if dropout == "module":
                att = self.att_drop(att)
            elif dropout == "functional":
                att = F.dropout(att, self.att_drop.p)
            out = torch.einsum(einsum, att, values)
            out = rearrange(out, merge)
            if float32:
                out = out.float()
                return F.linear(out, self.projection.weight.float(), self.projection.bias.float())
            out = self.projection(out)
            if dropout == "output":
                out = self.att_drop(out)
            return out
    return MultiHeadAttention


@right("q5")
class MHAFusedChunkFunctionalDropout(nn.Module):
    """qkv split with chunk after a head-major view, dropout as F.dropout(training=self.training)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h, self.p = num_heads, dropout
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.h) for t in (q, k, v))
        att = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            att = att.masked_fill(mask == 0, -1e9)
        att = F.dropout(att.softmax(dim=-1), p=self.p, training=self.training)
        return self.projection(rearrange(att @ v, "b h n d -> b n (h d)"))


@right("q5")
class MHAZeroRows(nn.Module):
    """-inf masking with fully masked rows set to zero; dropout as an nn.Dropout of another name."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = q @ k.transpose(-1, -2) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        att = torch.nan_to_num(F.softmax(energy, dim=-1), nan=0.0)
        att = self.dropout(att)
        return self.projection(rearrange(att @ v, "b h n d -> b n (h d)"))


WRONG["q5"] = [
    (_q5(merge="b h n d -> b n (d h)"), "merge_d_h"),
    (_q5(einsum="bhal, bhlv -> bhlv"), "einsum_keeps_keys"),
    (_q5(mask_mode=None), "mask_ignored"),
    (_q5(mask_mode="bool"), "mask_inverted"),
    (_q5(mask_mode="after"), "mask_after_softmax"),
    (_q5(fill=float("-inf")), "nan_fully_masked"),
    (_q5(dropout="functional"), "dropout_in_eval"),
    (_q5(dropout=None), "dropout_missing"),
    (_q5(dropout="output"), "dropout_on_output"),
    (_q5(detach="qkv"), "words: the gradient of the parameter qkv.weight"),
    (_q5(float32=True), "words: is float32 although the inputs"),
]


@wrong("q5", "reshape_without_permute")
class MHAReshape(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        B, N, E = x.shape
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(out.reshape(B, N, E))


@wrong("q5", "words: in eval mode (model.eval()) the output must equal the output without dropout")
class MHADropoutTrainingFlag(MHAReshape):
    """F.dropout with training=True hard-coded, and on the energy's scale (not in the catalogue)."""

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = torch.einsum("bhqd, bhkd -> bhqk", qkv[0], qkv[1])
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = F.softmax(energy / (self.emb_size // self.num_heads) ** 0.5, dim=-1)
        att = F.dropout(att, self.att_drop.p / 2, training=True)
        out = torch.einsum("bhal, bhlv -> bhav", att, qkv[2])
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


# =============================================================================== 04 mha_loop
@right("mha_loop")
class LoopExplicit(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([S.AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outs, ws = [], []
        for i in range(len(self.heads)):
            o, w = self.heads[i](x, mask=mask)
            outs.append(o)
            ws.append(w.unsqueeze(1))
        out = self.projection(torch.cat(outs, dim=2))
        if return_attention:
            return out, torch.cat(ws, dim=1)
        return out


@right("mha_loop")
class LoopZeroRowHeads(nn.Module):
    """Its own heads (-inf, fully masked rows zero), a Sequential-free W_O called out_proj."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(HeadNoHelper(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.out_proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [h(x, mask) for h in self.heads]
        out = self.out_proj(torch.cat([r[0] for r in results], -1))
        return (out, torch.stack([r[1] for r in results], 1)) if return_attention else out


def _loop(combine="cat", stack=1, pass_mask=True, project=True, detach=False, reverse=False):
    class MultiHeadAttentionLoop(nn.Module):
        def __init__(self, emb_size, num_heads):
            super().__init__()
            head_dim = emb_size // num_heads
            self.heads = nn.ModuleList([S.AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None, return_attention=False):
            outputs, weights = [], []
            heads = list(self.heads)[::-1] if reverse else self.heads
            for head in heads:
                out, w = head(x, mask) if pass_mask else head(x)
                outputs.append(out)
                weights.append(w)
            if combine == "cat":
                out = torch.cat(outputs, dim=-1)
            elif combine == "stack_flatten":
                out = torch.stack(outputs, dim=-1).reshape(x.shape[0], x.shape[1], -1)
            elif combine == "sum":
                out = torch.stack(outputs).sum(0)
            if project:
                w_o = self.projection.weight.detach() if detach else self.projection.weight
                out = F.linear(out, w_o, self.projection.bias)
            if stack == 1:
                weights = torch.stack(weights, dim=1)
            elif stack == 0:
                weights = torch.stack(weights)
            elif stack == "mean":
                weights = torch.stack(weights, dim=1).mean(dim=1)
            elif stack == "cat":
                weights = torch.cat(weights, dim=-1)
            return (out, weights) if return_attention else out
    return MultiHeadAttentionLoop


WRONG["mha_loop"] = [
    (_loop(pass_mask=False), "mask_ignored"),
    (_loop(stack=0), "weights_stacked_dim0"),
    (_loop(stack="mean"), "weights_averaged"),
    (_loop(stack="cat"), "weights_concatenated"),
    (_loop(combine="stack_flatten"), "words: hold the right numbers in the wrong places"),
    (_loop(project=False), "no_projection"),
    (_loop(detach=True), "words: the gradient of the parameter projection.weight"),
    (_loop(reverse=True), "words: hold head 1's output"),
]


@wrong("mha_loop", "heads_averaged")
class LoopMean(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList([S.AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size // num_heads, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        out = self.projection(sum(r[0] for r in results) / len(results))
        return (out, torch.stack([r[1] for r in results], 1)) if return_attention else out


@wrong("mha_loop", "words: is float32 although the inputs")
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
