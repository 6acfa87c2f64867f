"""Other correct answers: every one must pass its question.

Loops instead of einops, numpy instead of torch, float64, -1e9 instead of -inf, torch.where
instead of masked_fill, separate q/k/v layers instead of a fused one, other parameter
names and layouts, raw parameters used as ``x @ W``...
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from . import solutions as S

VARIANTS = {}


def variant(qid):
    def register(obj):
        VARIANTS.setdefault(qid, []).append(obj)
        return obj
    return register


# ----------------------------------------------------------------- patches
@variant("patches")
def patches_loops(images, patch_size):
    b, c, h, w = images.shape
    out = []
    for i in range(h // patch_size):
        for j in range(w // patch_size):
            block = images[:, :, i * patch_size:(i + 1) * patch_size, j * patch_size:(j + 1) * patch_size]
            out.append(block.permute(0, 2, 3, 1).reshape(b, -1))        # (B, P*P*C), channels last
    return torch.stack(out, dim=1)


@variant("patches")
def patches_unfold(images, patch_size):
    b, c, h, w = images.shape
    grid = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)   # (B, C, h, w, P, P)
    return grid.permute(0, 2, 3, 4, 5, 1).reshape(b, (h // patch_size) * (w // patch_size), -1)


@variant("patches")
def patches_numpy(images, patch_size):
    x = images.numpy()
    b, c, h, w = x.shape
    p = patch_size
    return x.reshape(b, c, h // p, p, w // p, p).transpose(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), -1)


# ----------------------------------------------------------------- embedding
@variant("embedding_lookup")
def embed_index(token_ids, weight):
    return weight[token_ids]


@variant("embedding_lookup")
def embed_numpy(token_ids, weight):
    return np.eye(weight.shape[0])[token_ids.numpy()] @ weight.numpy().astype(np.float64)


@variant("embedding_lookup")
def embed_float64(token_ids, weight):
    return F.one_hot(token_ids, weight.shape[0]).double() @ weight.double()


# ----------------------------------------------------------------- q1
@variant("q1")
def pe_vectorised(seq_len, d, n=10000):
    k = np.arange(seq_len)[:, None]
    i = np.arange(d // 2)[None, :]
    angles = k / n ** (2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2] = np.sin(angles)
    P[:, 1::2] = np.cos(angles)
    return P


@variant("q1")
def pe_torch(seq_len, d, n=10000):
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(n) / d))
    pe = torch.zeros(seq_len, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@variant("q1")
def pe_math(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in range(d // 2):
            P[k, 2 * i] = math.sin(k / n ** (2 * i / d))
            P[k, 2 * i + 1] = math.cos(k / n ** (2 * i / d))
    return P


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
    weights = torch.nan_to_num(S.softmax(scores, dim=-1), nan=0.0)
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


# ----------------------------------------------------------------- q5
@variant("q5")
class MHASeparate(nn.Module):
    """Separate query/key/value layers (an earlier version of the slides' code)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.keys = nn.Linear(emb_size, emb_size)
        self.queries = nn.Linear(emb_size, emb_size)
        self.values = nn.Linear(emb_size, emb_size)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

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


@variant("q5")
class MHAHeadMajorLayout(nn.Module):
    """The fused projection laid out (h d qkv), as in the slides' source."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (h d qkv) -> (qkv) b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = torch.where(mask.bool(), energy, torch.tensor(-1e9, dtype=energy.dtype))
        att = self.att_drop(F.softmax(energy, dim=-1))
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        return self.projection(rearrange(out, "b h n d -> b n (h d)"))


@variant("q5")
class MHAPermute(nn.Module):
    """No einops: reshape/permute and matmul, head_dim scaling written as a multiplier."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.h, self.d, self.p = num_heads, emb_size // num_heads, dropout
        self.in_proj = nn.Linear(emb_size, 3 * emb_size)
        self.out_proj = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        b, n, e = x.shape
        q, k, v = self.in_proj(x).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * self.d ** -0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.p, training=self.training)
        out = (weights @ v).transpose(1, 2).reshape(b, n, e)
        return self.out_proj(out)


# ----------------------------------------------------------------- mha_loop
@variant("mha_loop")
class LoopStack(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(S.AttentionHead(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        results = [head(x, mask) for head in self.heads]
        outs = torch.stack([out for out, _ in results])                        # (h, B, N, d)
        out = self.projection(rearrange(outs, "h b n d -> b n (h d)"))
        return (out, torch.stack([w for _, w in results], dim=1)) if return_attention else out


@variant("mha_loop")
class LoopRawHeads(nn.Module):
    """Heads from the raw-parameter head class, projection named W_O."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.heads = nn.ModuleList(HeadRawParameters(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.W_O = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outs, weights = zip(*(head(x, mask) for head in self.heads))
        return self.W_O(torch.cat(outs, dim=-1)), (torch.stack(weights, 1) if return_attention else None)


# ----------------------------------------------------------------- q6
@variant("q6")
class ResidualFirst(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


@variant("q6")
class ResidualClone(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        out = x.clone()
        out += self.fn(x, **kwargs)
        return out


# ----------------------------------------------------------------- q7
@variant("q7")
class FFNModule(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = expansion * emb_size if hidden_dim is None else hidden_dim
        self.fc1 = nn.Linear(emb_size, hidden)
        self.fc2 = nn.Linear(hidden, emb_size)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        return self.fc2(self.drop(F.gelu(self.fc1(x))))


@variant("q7")
class FFNFunctionalDropout(nn.Module):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        super().__init__()
        hidden = hidden_dim if hidden_dim else emb_size * expansion
        self.up, self.down, self.drop_p = nn.Linear(emb_size, hidden), nn.Linear(hidden, emb_size), drop_p

    def forward(self, x):
        return self.down(F.dropout(F.gelu(self.up(x)), self.drop_p, training=self.training))


# ----------------------------------------------------------------- q7b
@variant("q7b")
class EncoderBlockModule(nn.Module):
    """Pre-LN with named sub-modules and separate q/k/v attention layers."""

    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, num_heads=8):
        super().__init__()
        self.ln1 = nn.LayerNorm(emb_size)
        self.attention = MHASeparate(emb_size, num_heads)
        self.ln2 = nn.LayerNorm(emb_size)
        self.ffn = FFNModule(emb_size, forward_expansion, forward_drop_p)
        self.drop = nn.Dropout(drop_p)

    def forward(self, x):
        x = x + self.drop(self.attention(self.ln1(x)))
        return x + self.drop(self.ffn(self.ln2(x)))


@variant("q7b")
class EncoderBlockHeadMajor(nn.Sequential):
    def __init__(self, emb_size=768, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0, **kwargs):
        super().__init__(
            S.ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size), MHAHeadMajorLayout(emb_size, **kwargs),
                                        nn.Dropout(drop_p))),
            S.ResidualAdd(nn.Sequential(nn.LayerNorm(emb_size),
                                        S.FeedForwardBlock(emb_size, forward_expansion, forward_drop_p),
                                        nn.Dropout(drop_p))),
        )


# ----------------------------------------------------------------- layernorm
@variant("layernorm")
class LayerNormGammaBeta(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(var + self.eps) + self.beta


@variant("layernorm")
class LayerNormFloat64(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        x = x.double()
        centred = x - x.mean(dim=-1, keepdim=True)
        std = torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return centred / std * self.weight.double() + self.bias.double()


# ----------------------------------------------------------------- post_ln_block
@variant("post_ln_block")
class PostLNOtherNames(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.mha = MHASeparate(emb_size, num_heads)
        self.ln1 = nn.LayerNorm(emb_size)
        self.ffn = FFNModule(emb_size, forward_expansion)
        self.ln2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        h = self.ln1(x + self.mha(x))
        return self.ln2(h + self.ffn(h))


# ----------------------------------------------------------------- q2, q3, q4
@variant("q2")
@variant("q3")
class PatchEmbeddingQ3(nn.Module):
    """The earlier notebook version: no img_size, no positions; expand instead of repeat."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


@variant("q2")
@variant("q3")
@variant("q4")
class PatchEmbeddingBuffer(nn.Module):
    """Positions as a registered buffer computed with torch, class token via einops.repeat."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.register_buffer("positions", pe_torch((img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=x.shape[0])
        return torch.cat([cls_tokens, x], dim=1) + self.positions


@variant("q3")
class PatchEmbeddingLearned(S.PatchEmbedding):
    """Q3 only checks the class token: learned positions are fine there."""

    def forward(self, x):
        x = self.projection(x)
        x = torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)
        return x + self.learnable_positions


# ----------------------------------------------------------------- conv
@variant("conv_patch_embedding")
class ConvFlatten(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, emb_size, patch_size, stride=patch_size)

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2)


# ----------------------------------------------------------------- vit
@variant("vit_forward")
class ViTOtherStyle(nn.Module):
    """Separate q/k/v blocks, class token via repeat, attention maps as a tuple."""

    def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10, dim=128, depth=6, num_heads=4,
                 mlp_dim=512):
        super().__init__()
        self.patch_embed = S.ConvPatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(_BlockSeparate(dim, num_heads, mlp_dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x, return_attention=False):
        x = self.patch_embed(x)
        x = torch.cat([repeat(self.cls_token, "() n d -> b n d", b=x.shape[0]), x], dim=1) + self.pos_embed
        maps = []
        for block in self.blocks:
            x, weights = block(x)
            maps.append(weights)
        logits = self.head(self.norm(x[:, 0]))
        return (logits, tuple(maps)) if return_attention else logits


class _BlockSeparate(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.h = num_heads
        self.norm1 = nn.LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_dim), nn.Linear(mlp_dim, dim)

    def forward(self, x):
        y = self.norm1(x)
        q, k, v = (rearrange(f(y), "b n (h d) -> b h n d", h=self.h) for f in (self.q, self.k, self.v))
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
        x = x + self.o(rearrange(weights @ v, "b h n d -> b n (h d)"))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)))), weights


# ----------------------------------------------------------------- cross_entropy
@variant("cross_entropy")
def ce_logsumexp(logits, targets):
    picked = logits.gather(1, targets[:, None]).squeeze(1)
    return (torch.logsumexp(logits, dim=1) - picked).mean()


@variant("cross_entropy")
def ce_one_hot(logits, targets):
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    return -(F.one_hot(targets, logits.shape[-1]) * log_probs).sum(-1).mean()


# (A numpy loss is not a correct answer any more: a loss must let loss.backward() train the
# model, and the check now compares the gradient; see tests/answers/realistic_ch07_08.py.)


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


# ----------------------------------------------------------------- other parameter names and shapes
@variant("layernorm")
class LayerNormOtherNames(nn.Module):
    def __init__(self, features, epsilon=1e-5):
        super().__init__()
        self.epsilon = epsilon
        self.scale = nn.Parameter(torch.ones(features))
        self.shift = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, correction=0)
        return self.scale * (x - mean) / (var + self.epsilon).sqrt() + self.shift


@variant("q3")
class PatchEmbeddingBatchedPositions(nn.Module):
    """Learned positions kept as (1, N+1, E) and a (1, 1, E) class token expanded."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, emb_size))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embedding
