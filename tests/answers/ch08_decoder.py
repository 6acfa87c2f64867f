"""Answer banks of Chapter 8 (decoder): causal_mask, cross_attention, decoder_block, kv_cache.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .bank import bank, right, says, solution, solution_value, variant, wrong
from .ch04_multihead_attention import MHASeparate
from .ch05_blocks import FFNModule
from .given import FeedForwardBlock, MultiHeadAttention


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("causal_mask")
def causal_mask(T):
    """(T, T) bool, True where query t may attend key s (s <= t)."""
    ### BEGIN SOLUTION
    return torch.ones(T, T, dtype=torch.bool).tril()
    ### END SOLUTION


@solution("cross_attention")
class CrossAttention(nn.Module):
    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        # x: (B, T, emb_size), context: (B, S, context_dim)
        ### BEGIN SOLUTION
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)          # (B, h, T, d)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d",
                         kv=2, h=self.num_heads)                                     # (B, h, S, d)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5                         # (B, h, T, S)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = rearrange(weights @ v, "b h t d -> b t (h d)")                           # (B, T, emb_size)
        out = self.projection(out)
        ### END SOLUTION
        return (out, weights) if return_attention else out


@solution("decoder_block")
class DecoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)

    def forward(self, x, context, self_mask=None):
        # x: (B, T, dim), context: (B, S, context_dim); self_mask: None or "causal"
        causal = isinstance(self_mask, str) and self_mask == "causal"
        ### BEGIN SOLUTION
        x = x + self.self_attn(self.norm1(x), causal=causal)
        x = x + self.cross_attn(self.norm2(x), context)
        x = x + self.mlp(self.norm3(x))
        return x
        ### END SOLUTION


@solution("kv_cache")
class CachedSelfAttention(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)          # laid out (qkv h d), as in MultiHeadAttention
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, cache=None):
        # x: (B, T, emb_size), the T newest tokens; cache: None or (keys, values), each (B, h, S, d)
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)  # (B, h, T, d)
        ### BEGIN SOLUTION
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)                                # (B, h, S + T, d)
            v = torch.cat([cache[1], v], dim=2)
        T, total = q.shape[2], k.shape[2]
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5                  # (B, h, T, S + T)
        allowed = torch.ones(T, total, dtype=torch.bool, device=x.device).tril(total - T)
        scores = scores.masked_fill(~allowed, -1e9)
        merged = rearrange(scores.softmax(dim=-1) @ v, "b h t d -> b t (h d)")  # (B, T, emb_size)
        ### END SOLUTION
        return self.projection(merged), (k, v)


keys_without_cache = solution_value("concept_decoding_work", 55)


# ####################################################################################################
# variants: other correct formulations
# (A numpy loss is not a correct answer any more: a loss must let loss.backward() train the
# model, and the check now compares the gradient; see ``ce_numpy`` in ch07_vit.py.)


# ----------------------------------------------------------------- causal mask
@variant("causal_mask")
def mask_float(T):
    return torch.tril(torch.ones(T, T))


@variant("causal_mask")
def mask_numpy(T):
    return np.tril(np.ones((T, T), dtype=bool))


@variant("causal_mask")
def mask_loops(T):
    mask = torch.zeros(T, T, dtype=torch.long)
    for t in range(T):
        for s in range(t + 1):
            mask[t, s] = 1
    return mask


# ----------------------------------------------------------------- cross attention
@variant("cross_attention")
class CrossSeparate(nn.Module):
    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        context_dim = context_dim or emb_size
        self.h = num_heads
        self.to_q = nn.Linear(emb_size, emb_size)
        self.to_k = nn.Linear(context_dim, emb_size)
        self.to_v = nn.Linear(context_dim, emb_size)
        self.to_out = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.to_q(x), "b t (h d) -> b h t d", h=self.h)
        k = rearrange(self.to_k(context), "b s (h d) -> b h s d", h=self.h)
        v = rearrange(self.to_v(context), "b s (h d) -> b h s d", h=self.h)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k).mul(q.shape[-1] ** -0.5)
        if mask is not None:   # the most negative number, not -inf: a fully masked query must not give NaN
            scores = torch.where(mask.bool(), scores, torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype))
        weights = scores.softmax(-1)
        out = self.to_out(rearrange(torch.einsum("bhts,bhsd->bhtd", weights, v), "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@variant("cross_attention")
class CrossHeadMajor(nn.Module):
    """key_value split with chunk before the heads (the exercise's (kv h d) layout), additive mask."""

    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.h = num_heads
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim or emb_size, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.h)
        k, v = (rearrange(part, "b s (h d) -> b h s d", h=self.h) for part in self.key_value(context).chunk(2, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores + (mask.to(scores.dtype) - 1) * 1e9   # additive mask: 0 allowed, -1e9 blocked
        weights = torch.softmax(scores, dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


# ----------------------------------------------------------------- decoder block
class _MaskedMHA(MHASeparate):
    def forward(self, x, causal=False):
        b, n, _ = x.shape
        q, k, v = (rearrange(f(x), "b n (h d) -> b h n d", h=self.num_heads)
                   for f in (self.queries, self.keys, self.values))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = torch.where(torch.ones(n, n, dtype=torch.bool).tril(), scores, torch.tensor(-1e9))
        out = rearrange(scores.softmax(-1) @ v, "b h n d -> b n (h d)")
        return self.projection(out)


@variant("decoder_block")
class DecoderOther(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = _MaskedMHA(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossSeparate(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = FFNModule(dim, expansion=mlp_dim // dim)

    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=self_mask == "causal")
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


# ####################################################################################################
# realistic answers
# ----------------------------------------------------------------- 08: causal mask
@right("causal_mask")
def mask_tril_bool(T):
    return torch.tril(torch.ones(T, T)).bool()


@right("causal_mask")
def mask_not_triu(T):
    return ~torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


@right("causal_mask")
def mask_arange(T):
    positions = torch.arange(T)
    return positions[:, None] >= positions[None, :]


@right("causal_mask")
def mask_np_tri(T):
    return np.tri(T, dtype=bool)


@right("causal_mask")
def mask_triu_transposed(T):
    return torch.triu(torch.ones(T, T)).T


@wrong("causal_mask", "upper_triangular")
def mask_triu(T):
    return torch.triu(torch.ones(T, T)).bool()


@wrong("causal_mask", "upper_triangular")
def mask_arange_transposed(T):
    positions = torch.arange(T)
    return positions[None, :] >= positions[:, None]


@wrong("causal_mask", "diagonal_excluded")
def mask_strict_lower(T):
    return torch.tril(torch.ones(T, T), diagonal=-1).bool()


@wrong("causal_mask", "diagonal_excluded")
def mask_strict_arange(T):
    positions = torch.arange(T)
    return positions[:, None] > positions[None, :]


@wrong("causal_mask", "inverted")
def mask_blocked_true(T):
    return torch.triu(torch.ones(T, T), diagonal=1).bool()


@wrong("causal_mask", "inverted")
def mask_tril_eq_zero(T):
    return torch.tril(torch.ones(T, T)) == 0


@wrong("causal_mask", "one_step_ahead")
def mask_tril_plus_one(T):
    return torch.tril(torch.ones(T, T), diagonal=1).bool()


@wrong("causal_mask", "additive")
def mask_additive(T):
    return torch.triu(torch.full((T, T), float("-inf")), diagonal=1)


@wrong("causal_mask", "extra_axes")
def mask_batched(T):
    return torch.tril(torch.ones(T, T)).unsqueeze(0).bool()


# ----------------------------------------------------------------- 08: cross-attention
class _CrossBase(nn.Module):
    """The notebook's given __init__."""

    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)


@right("cross_attention")
class CrossEinsumChunk(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        h = self.num_heads
        k, v = self.key_value(context).chunk(2, dim=-1)              # (B, S, E) each: (kv h d)
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=h)
        k = rearrange(k, "b s (h d) -> b h s d", h=h)
        v = rearrange(v, "b s (h d) -> b h s d", h=h)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        out = torch.einsum("bhts,bhsd->bhtd", attn, v)
        out = self.projection(rearrange(out, "b h t d -> b t (h d)"))
        if return_attention:
            return out, attn
        return out


@right("cross_attention")
class CrossHeadLoop(_CrossBase):
    """One head at a time, slicing the (kv h d) layout by hand."""

    def forward(self, x, context, mask=None, return_attention=False):
        E = self.query.out_features
        d = E // self.num_heads
        q_all = self.query(x)
        kv = self.key_value(context)
        keys, values = kv[..., :E], kv[..., E:]
        outs, weights = [], []
        for i in range(self.num_heads):
            q = q_all[..., i * d:(i + 1) * d]
            k = keys[..., i * d:(i + 1) * d]
            v = values[..., i * d:(i + 1) * d]
            scores = q @ k.transpose(1, 2) / d ** 0.5                 # (B, T, S)
            if mask is not None:
                m = mask[:, i] if mask.shape[1] > 1 else mask[:, 0]
                scores = scores.masked_fill(m == 0, -1e9)
            w = scores.softmax(dim=-1)
            outs.append(w @ v)
            weights.append(w)
        out = self.projection(torch.cat(outs, dim=-1))
        return (out, torch.stack(weights, dim=1)) if return_attention else out


@right("cross_attention")
class CrossViewPermuteNanToNum(_CrossBase):
    """view/permute; -inf fills, then the NaN rows of fully masked queries set to zero."""

    def forward(self, x, context, mask=None, return_attention=False):
        B, T, E = x.shape
        S = context.shape[1]
        h = self.num_heads
        d = E // h
        q = self.query(x).view(B, T, h, d).permute(0, 2, 1, 3)
        kv = self.key_value(context).view(B, S, 2, h, d).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        scores = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(~mask.bool(), float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
        out = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(B, T, E)
        out = self.projection(out)
        return (out, weights) if return_attention else out


@right("cross_attention")
class CrossAdditive(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores + (1.0 - mask.to(scores.dtype)) * -1e9
        weights = scores.softmax(-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


def _cross_forward(self, x, context, mask=None, return_attention=False, *, kv="kv h d", queries="x", keys="context",
                   scale="head", fill=-1e9, mask_mode="fill", softmax_dim=-1, merge="b h t d -> b t (h d)",
                   project=True, returned="weights", heads=True):
    """Shared body of the wrong cross-attentions below (each class names its one mistake)."""
    h = self.num_heads if heads else 1
    E = self.query.out_features
    q = rearrange(self.query(x if queries == "x" else context), "b t (h d) -> b h t d", h=h)
    k, v = rearrange(self.key_value(context if keys == "context" else x), f"b s ({kv}) -> kv b h s d", kv=2, h=h)
    scores = q @ k.transpose(-2, -1)
    if scale == "head":
        scores = scores / math.sqrt(E // self.num_heads)
    elif scale == "emb":
        scores = scores / math.sqrt(E)
    if mask is not None and mask_mode == "fill":
        scores = scores.masked_fill(mask == 0, fill)
    elif mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask == 1, fill)
    weights = F.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_mode == "after":
        weights = weights * mask
    out = weights @ v
    if merge == "reshape":
        out = out.reshape(x.shape[0], -1, E)
    else:
        out = rearrange(out, merge)
    if project:
        out = self.projection(out)
    shown = {"weights": weights, "scores": scores, "mean": weights.mean(1)}[returned]
    return (out, shown) if return_attention else out


def _wrong_cross(name, expected, **mistake):
    cls = type(name, (_CrossBase,), {"forward": lambda self, x, context, mask=None, return_attention=False:
                                     _cross_forward(self, x, context, mask, return_attention, **mistake)})
    wrong("cross_attention", expected)(cls)
    return cls


@wrong("cross_attention", "kv_layout")
class CrossKVPerHead(_CrossBase):
    """Heads split first, then keys and values: the (h kv d) layout."""

    def forward(self, x, context, mask=None, return_attention=False):
        B, S, _ = context.shape
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        kv = self.key_value(context).reshape(B, S, self.num_heads, -1).transpose(1, 2)   # (B, h, S, 2d)
        k, v = kv.chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


_wrong_cross("CrossKVInterleaved", "kv_layout", kv="h d kv")
_wrong_cross("CrossQueriesFromContext", "queries_from_context", queries="context")
_wrong_cross("CrossKeysFromX", "keys_from_decoder", keys="x")
_wrong_cross("CrossNoScaling", "no_scaling", scale=None)
_wrong_cross("CrossScaledByE", "scale_by_emb", scale="emb")
_wrong_cross("CrossMinusInf", "nan_fully_masked", fill=float("-inf"))
_wrong_cross("CrossMaskAfterSoftmax", "mask_after_softmax", mask_mode="after")
_wrong_cross("CrossMaskIgnored", "mask_ignored", mask_mode=None)
_wrong_cross("CrossMaskInverted", "mask_inverted", mask_mode="inverted")
_wrong_cross("CrossMergeDH", "merge_d_h", merge="b h t d -> b t (d h)")
_wrong_cross("CrossReshape", "reshape_without_permute", merge="reshape")
_wrong_cross("CrossNoProjection", "no_projection", project=False)
_wrong_cross("CrossSoftmaxQueries", "softmax_over_queries", softmax_dim=-2)
_wrong_cross("CrossReturnsScores", "weights_before_softmax", returned="scores")
_wrong_cross("CrossSingleHead", "single_head", heads=False)


@wrong("cross_attention", says("gradient of the parameter key_value.weight"))
class CrossDetachedKV(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        kv = F.linear(context, self.key_value.weight.detach(), self.key_value.bias)
        k, v = rearrange(kv, "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@wrong("cross_attention", says("gradients are not"))
class CrossDetachedContext(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        context = context.detach()              # "the encoder is frozen anyway"
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@wrong("cross_attention", says("mixes float32 and float64"))
class CrossFloatMask(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = (q @ k.transpose(-2, -1)).float() / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


# ----------------------------------------------------------------- 08: decoder block
class _DecoderBase(nn.Module):
    """The notebook's given __init__, with the student's (correct) cross-attention."""

    cross = CrossEinsumChunk

    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = self.cross(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)


@right("decoder_block")
class DecoderCausalFlag(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=(self_mask == "causal"))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@right("decoder_block")
class DecoderExplicitMask(_DecoderBase):
    cross = CrossHeadLoop

    def forward(self, x, context, self_mask=None):
        mask = None
        if self_mask == "causal":
            T = x.size(1)
            mask = torch.tril(torch.ones(T, T, device=x.device))
        h = self.norm1(x)
        x = x + self.self_attn(h, mask=mask)
        h = self.norm2(x)
        x = x + self.cross_attn(h, context)
        h = self.norm3(x)
        x = x + self.mlp(h)
        return x


@right("decoder_block")
class DecoderResidualNames(_DecoderBase):
    cross = CrossViewPermuteNanToNum

    def forward(self, x, context, self_mask=None):
        causal = isinstance(self_mask, str) and self_mask == "causal"
        residual = x
        x = self.self_attn(self.norm1(x), causal=causal) + residual
        residual = x
        x = self.cross_attn(self.norm2(x), context) + residual
        residual = x
        x = self.mlp(self.norm3(x)) + residual
        return x


def _decoder_forward(self, x, context, self_mask=None, *, mode):
    causal = self_mask == "causal" and mode != "no_causal"
    T = x.shape[1]
    if mode == "triu":
        sa = lambda h: self.self_attn(h, mask=torch.triu(torch.ones(T, T)) if self_mask == "causal" else None)  # noqa: E731 - a one-line lambda, as students write it
    elif mode == "triu1":
        sa = lambda h: self.self_attn(h, mask=torch.triu(torch.ones(T, T), 1) if self_mask == "causal" else None)  # noqa: E731 - a one-line lambda, as students write it
    else:
        sa = lambda h: self.self_attn(h, causal=causal)  # noqa: E731 - a one-line lambda, as students write it
    if mode == "post_ln":
        x = self.norm1(x + sa(x))
        x = self.norm2(x + self.cross_attn(x, context))
        return self.norm3(x + self.mlp(x))
    if mode == "cross_first":
        x = x + self.cross_attn(self.norm1(x), context)
        x = x + sa(self.norm2(x))
        return x + self.mlp(self.norm3(x))
    if mode == "norm_in_residual":
        x = self.norm1(x)
        x = x + sa(x)
        x = self.norm2(x)
        x = x + self.cross_attn(x, context)
        x = self.norm3(x)
        return x + self.mlp(x)
    if mode == "same_norm":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm1(x), context)
        return x + self.mlp(self.norm1(x))
    if mode == "norms_swapped":
        x = x + sa(self.norm2(x))
        x = x + self.cross_attn(self.norm1(x), context)
        return x + self.mlp(self.norm3(x))
    if mode == "keys_from_x":
        x = x + sa(self.norm1(x))
        h = self.norm2(x)
        x = x + self.cross_attn(h, h)
        return x + self.mlp(self.norm3(x))
    if mode == "context_normalised":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), self.norm2(context))
        return x + self.mlp(self.norm3(x))
    if mode == "mlp_before_cross":
        x = x + sa(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x + self.cross_attn(self.norm3(x), context)
    if mode == "no_norm_mlp":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(x)
    if mode == "causal_in_cross":
        x = x + sa(self.norm1(x))
        mask = torch.tril(torch.ones(T, context.shape[1])) if causal else None
        x = x + self.cross_attn(self.norm2(x), context, mask=mask)
        return x + self.mlp(self.norm3(x))
    if mode == "detached_mlp":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x).detach())
    if mode == "float32":
        x = x + sa(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context.float())
        return x + self.mlp(self.norm3(x))
    a = sa(self.norm1(x))
    x = a if mode == "no_res_self" else x + a
    c = self.cross_attn(self.norm2(x), context)
    x = c if mode == "no_res_cross" else x + c
    m = self.mlp(self.norm3(x))
    return m if mode == "no_res_mlp" else x + m


def _wrong_decoder(name, expected, mode, cross=None):
    body = {"forward": lambda self, x, context, self_mask=None: _decoder_forward(self, x, context, self_mask,
                                                                                  mode=mode)}
    if cross is not None:
        body["cross"] = cross
    cls = type(name, (_DecoderBase,), body)
    wrong("decoder_block", expected)(cls)
    return cls


@wrong("decoder_block", "no_causal_mask")
class DecoderForgotCausal(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "always_causal")
class DecoderAlwaysCausal(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=True)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "self_mask_as_mask")
class DecoderSelfMaskAsMask(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), mask=self_mask)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", "no_norm_self")
class DecoderNoNorm1(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(x, causal=self_mask == "causal")
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


_wrong_decoder("DecoderUpperMask", "upper_mask", "triu")
_wrong_decoder("DecoderInvertedMask", "inverted_mask", "triu1")
_wrong_decoder("DecoderPostLN", "post_ln", "post_ln")
_wrong_decoder("DecoderCrossFirst", "cross_first", "cross_first")
_wrong_decoder("DecoderNormInResidual", "norm_in_residual", "norm_in_residual")
_wrong_decoder("DecoderSameNorm", "same_norm", "same_norm")
_wrong_decoder("DecoderNormsSwapped", "norms_swapped", "norms_swapped")
_wrong_decoder("DecoderKeysFromX", "keys_from_decoder", "keys_from_x")
_wrong_decoder("DecoderContextNormalised", "context_normalised", "context_normalised")
_wrong_decoder("DecoderMlpBeforeCross", "mlp_before_cross", "mlp_before_cross")
_wrong_decoder("DecoderNoNormMlp", "no_norm_mlp", "no_norm_mlp")
_wrong_decoder("DecoderCausalInCross", "causal_in_cross", "causal_in_cross")
_wrong_decoder("DecoderNoResidualSelf", "no_residual_self", "no_res_self")
_wrong_decoder("DecoderNoResidualCross", "no_residual_cross", "no_res_cross")
_wrong_decoder("DecoderNoResidualMlp", "no_residual_mlp", "no_res_mlp")
_wrong_decoder("DecoderDetachedMlpInput", says("gradient of the parameter norm3"), "detached_mlp")
_wrong_decoder("DecoderFloat32Context", says("mixes float32 and float64"), "float32")
_wrong_decoder("DecoderWithKVPerHead", "cross_kv_layout", "right", cross=CrossKVPerHead)
_wrong_decoder("DecoderWithUnscaledCross", "cross_no_scaling", "right",
               cross=next(c for c, e in bank("cross_attention").wrong if e == "no_scaling"))


# ####################################################################################################
# kv_cache: realistic answers (new with the banks; written by hand, not with the catalogue's builders)
class _KV(nn.Module):
    """The exercise's __init__ (qkv, projection); subclasses write forward as students do."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def heads(self, x):
        return rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)

    def attend(self, q, k, v, allowed, scale=None):
        scores = q @ k.transpose(-2, -1) / (scale or q.shape[-1] ** 0.5)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, -1e9)
        return self.projection(rearrange(scores.softmax(dim=-1) @ v, "b h t d -> b t (h d)"))


@right("kv_cache")
class KVPositionsMask(_KV):
    """The mask from the tokens' absolute positions, the cache as a dict."""

    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        past = k.shape[2] - q.shape[2]
        query_pos = torch.arange(q.shape[2])[:, None] + past
        allowed = torch.arange(k.shape[2])[None, :] <= query_pos
        return self.attend(q, k, v, allowed), (k, v)


@right("kv_cache")
class KVSeparateLists(_KV):
    """Keys and values kept as tensors grown with torch.cat, one head loop."""

    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            past_k, past_v = cache
            k, v = torch.cat((past_k, k), 2), torch.cat((past_v, v), 2)
        T, S = q.shape[2], k.shape[2]
        allowed = torch.tril(torch.ones(T, S, dtype=torch.bool), diagonal=S - T)
        outs = [q[:, h] @ k[:, h].transpose(1, 2) / math.sqrt(q.shape[-1]) for h in range(self.num_heads)]
        scores = torch.stack(outs, dim=1).masked_fill(~allowed, float("-inf"))
        out = rearrange(torch.softmax(scores, dim=-1) @ v, "b h t d -> b t (h d)")
        return self.projection(out), (k, v)


@wrong("kv_cache", "cache_not_attended")
class KVOnlyNewTokens(_KV):
    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        T = q.shape[2]
        out = self.attend(q, k, v, torch.ones(T, T, dtype=torch.bool).tril())
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        return out, (k, v)


@wrong("kv_cache", "cache_replaced")
class KVReturnsNewOnly(_KV):
    def forward(self, x, cache=None):
        q, k_new, v_new = self.heads(x)
        k, v = k_new, v_new
        if cache is not None:
            k, v = torch.cat([cache[0], k_new], dim=2), torch.cat([cache[1], v_new], dim=2)
        T, S = q.shape[2], k.shape[2]
        return self.attend(q, k, v, torch.ones(T, S, dtype=torch.bool).tril(S - T)), (k_new, v_new)


@wrong("kv_cache", "new_before_old")
class KVNewFirst(_KV):
    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([k, cache[0]], dim=2), torch.cat([v, cache[1]], dim=2)
        T, S = q.shape[2], k.shape[2]
        return self.attend(q, k, v, torch.ones(T, S, dtype=torch.bool).tril(S - T)), (k, v)


@wrong("kv_cache", "no_causal_mask")
class KVNoMask(_KV):
    """One token at a time needs no mask: forgets that a prompt arrives as one chunk."""

    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        return self.attend(q, k, v, None), (k, v)


@wrong("kv_cache", "mask_without_offset")
class KVTrilNoOffset(_KV):
    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        return self.attend(q, k, v, allowed), (k, v)


@wrong("kv_cache", "scale_by_emb_size")
class KVScaledByEmb(_KV):
    def forward(self, x, cache=None):
        q, k, v = self.heads(x)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        T, S = q.shape[2], k.shape[2]
        E = q.shape[-1] * self.num_heads
        return self.attend(q, k, v, torch.ones(T, S, dtype=torch.bool).tril(S - T), scale=E ** 0.5), (k, v)


# ####################################################################################################
# classes of the instructor's hidden collection: keys used as values ("values_from_keys"), ReLU for GELU
# in the decoder's MLP ("relu_for_gelu"), and forwards that return a tuple where one tensor is expected
@wrong("cross_attention", "values_from_keys")
class CrossKeysAsValues(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, _ = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ k, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


@wrong("cross_attention", ("returns_a_tuple", says("return_attention=False should return the output tensor alone")))
class CrossAlwaysReturnsWeights(_CrossBase):
    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        return self.projection(rearrange(weights @ v, "b h t d -> b t (h d)")), weights


@wrong("kv_cache", "values_from_keys")
class KVValuesAreKeys(_KV):
    def forward(self, x, cache=None):
        q, k, _ = self.heads(x)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
        T, S = q.shape[2], k.shape[2]
        allowed = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        return self.attend(q, k, k, allowed), (k, k)


class _DecoderReluMlp(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossEinsumChunk(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.ReLU(), nn.Linear(mlp_dim, dim))


@wrong("decoder_block", "relu_for_gelu")
class DecoderReluMlp(_DecoderReluMlp):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=self_mask == "causal")
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


@wrong("decoder_block", ("returns_a_tuple", says("should return the output tensor alone")))
class DecoderReturnsCrossWeights(_DecoderBase):
    def forward(self, x, context, self_mask=None):
        x = x + self.self_attn(self.norm1(x), causal=(self_mask == "causal"))
        cross, weights = self.cross_attn(self.norm2(x), context, return_attention=True)
        x = x + cross
        return x + self.mlp(self.norm3(x)), weights
