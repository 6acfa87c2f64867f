"""Correct answers to every autograder question, written as a student would (torch, einops, numpy).

This file is also a valid submission for ``python -m autograder check`` (every answer name is
defined at top level), and the notebooks' solutions follow the same code.
"""
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn


# ----------------------------------------------------------------- 01_tokens
def image_to_patches(images, patch_size):
    return rearrange(images, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size)


def embed(token_ids, weight):
    one_hot = F.one_hot(token_ids, num_classes=weight.shape[0]).to(weight.dtype)  # (..., V)
    return one_hot @ weight                                                       # (..., D)


# ----------------------------------------------------------------- 02_positional_encoding
def getPositionEncoding(seq_len, d, n=10000):
    P = np.zeros((seq_len, d))
    for k in range(seq_len):
        for i in np.arange(int(d / 2)):
            denominator = np.power(n, 2 * i / d)
            P[k, 2 * i] = np.sin(k / denominator)
            P[k, 2 * i + 1] = np.cos(k / denominator)
    return P


# ----------------------------------------------------------------- 03_attention
def softmax(x, dim=-1):
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / d_k ** 0.5                 # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = softmax(scores, dim=-1)                              # (..., T, S)
    return weights @ v, weights


class AttentionHead(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)     # each (B, T, head_dim)
        return scaled_dot_product_attention(q, k, v, mask)


# ----------------------------------------------------------------- 04_multihead_attention
class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]
        energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        att = self.att_drop(att)
        out = torch.einsum("bhal, bhlv -> bhav", att, values)
        out = rearrange(out, "b h n d -> b n (h d)")
        out = self.projection(out)
        return (out, att) if return_attention else out


class MultiHeadAttentionLoop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outputs, weights = zip(*(head(x, mask) for head in self.heads))
        out = self.projection(torch.cat(outputs, dim=-1))
        return (out, torch.stack(weights, dim=1)) if return_attention else out


# ----------------------------------------------------------------- 05_blocks
class ResidualAdd(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        res = x
        x = self.fn(x, **kwargs)
        x += res
        return x


class FeedForwardBlock(nn.Sequential):
    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(
            nn.Linear(emb_size, hidden),
            nn.GELU(),
            nn.Dropout(drop_p),
            nn.Linear(hidden, emb_size),
        )


class TransformerEncoderBlock(nn.Sequential):
    def __init__(self, emb_size=768, num_heads=8, drop_p=0.0, forward_expansion=4, forward_drop_p=0.0,
                 mlp_dim=None):
        super().__init__(
            ResidualAdd(nn.Sequential(
                nn.LayerNorm(emb_size),
                MultiHeadAttention(emb_size, num_heads),
                nn.Dropout(drop_p),
            )),
            ResidualAdd(nn.Sequential(
                nn.LayerNorm(emb_size),
                FeedForwardBlock(emb_size, forward_expansion, forward_drop_p, hidden_dim=mlp_dim),
                nn.Dropout(drop_p),
            )),
        )


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class PostLNEncoderBlock(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, forward_expansion=4):
        super().__init__()
        self.attn = MultiHeadAttention(emb_size, num_heads)
        self.norm1 = nn.LayerNorm(emb_size)
        self.mlp = FeedForwardBlock(emb_size, expansion=forward_expansion)
        self.norm2 = nn.LayerNorm(emb_size)

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


# ----------------------------------------------------------------- 06_patch_embedding
class PatchEmbedding(nn.Module):
    """The slides' final version: projection (Q2), class token (Q3), sinusoidal positions (Q4)."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        self.patch_size = patch_size
        super().__init__()
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.learnable_positions = nn.Parameter(torch.randn((img_size // patch_size) ** 2 + 1, emb_size))
        self.sinusoids_positions = torch.from_numpy(
            getPositionEncoding((img_size // patch_size) ** 2 + 1, emb_size)).float()

    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
        x = torch.cat([cls_tokens, x], dim=1)
        x += self.sinusoids_positions
        return x


class ConvPatchEmbedding(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)

    def forward(self, images):
        return rearrange(self.proj(images), "b e h w -> b (h w) e")


# ----------------------------------------------------------------- 07_vit
class EncoderBlock(nn.Module):
    """The pre-LN block the ViT notebook provides (attention weights on request)."""

    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_dim, dim))

    def forward(self, x, return_attention=False):
        out, weights = self.attn(self.norm1(x), return_attention=True)
        x = x + out
        x = x + self.mlp(self.norm2(x))
        return (x, weights) if return_attention else x


class ViT(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_channels=3, num_classes=10, dim=128, depth=6,
                 num_heads=4, mlp_dim=512):
        super().__init__()
        num_patches = (img_size // patch_size) ** 2
        self.patch_embed = ConvPatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.ModuleList([EncoderBlock(dim, num_heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x, return_attention=False):
        tokens = self.patch_embed(x)                                   # (B, N, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)                # (B, 1, dim)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed      # (B, N + 1, dim)
        attentions = []
        for block in self.blocks:
            tokens, weights = block(tokens, return_attention=True)
            attentions.append(weights)
        logits = self.head(self.norm(tokens)[:, 0])
        return (logits, attentions) if return_attention else logits


def cross_entropy(logits, targets):
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    return -log_probs[torch.arange(logits.shape[0]), targets].mean()


# ----------------------------------------------------------------- 08_decoder
def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


class CrossAttention(nn.Module):
    def __init__(self, emb_size, num_heads, context_dim=None):
        super().__init__()
        self.num_heads = num_heads
        context_dim = context_dim or emb_size
        self.query = nn.Linear(emb_size, emb_size)
        self.key_value = nn.Linear(context_dim, 2 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, context, mask=None, return_attention=False):
        q = rearrange(self.query(x), "b t (h d) -> b h t d", h=self.num_heads)
        k, v = rearrange(self.key_value(context), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = scores.softmax(dim=-1)
        out = self.projection(rearrange(weights @ v, "b h t d -> b t (h d)"))
        return (out, weights) if return_attention else out


class DecoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, num_heads, context_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_dim, dim))

    def forward(self, x, context, self_mask=None):
        mask = causal_mask(x.shape[1]) if self_mask == "causal" else None
        x = x + self.self_attn(self.norm1(x), mask=mask)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


def smoothed_cross_entropy(logits, targets, smoothing=0.1):
    B, C = logits.shape
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))   # (B, C)
    q = torch.full_like(log_probs, smoothing / C)
    q[torch.arange(B), targets] += 1 - smoothing
    return -(q * log_probs).sum(dim=-1).mean()


class CachedSelfAttention(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, cache=None):
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        T, total = q.shape[2], k.shape[2]
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        allowed = torch.ones(T, total, dtype=torch.bool, device=x.device).tril(total - T)
        out = rearrange(scores.masked_fill(~allowed, -1e9).softmax(dim=-1) @ v, "b h t d -> b t (h d)")
        return self.projection(out), (k, v)


# ----------------------------------------------------------------- 09_training

FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530


class FashionViT(nn.Module):
    """A small ViT for Fashion-MNIST: uint8 images (B, 1, 28, 28) -> logits (B, 10).

    Patch 7 (16 patches + the class token), pre-LN encoder blocks (PyTorch's own
    nn.TransformerEncoderLayer: the block of chapter 5), a final LayerNorm and a linear head
    on the class token. The images are standardised inside forward, so the model takes them
    as they are stored."""

    def __init__(self, patch_size=7, dim=64, depth=3, num_heads=4, mlp_dim=128, dropout=0.0):
        super().__init__()
        num_patches = (28 // patch_size) ** 2
        self.patch_embed = nn.Sequential(                                       # (B, 1, 28, 28) -> (B, N, dim)
            Rearrange("b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)", p1=patch_size, p2=patch_size),
            nn.Linear(patch_size * patch_size, dim),
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, num_heads, mlp_dim, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, images):
        x = (images.float() / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD    # (B, 1, 28, 28)
        tokens = self.patch_embed(x)                                              # (B, N, dim)
        cls = self.cls_token.expand(len(tokens), -1, -1)                          # (B, 1, dim)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed                 # (B, N + 1, dim)
        return self.head(self.norm(self.blocks(tokens))[:, 0])                   # (B, 10)


def train_vit(images, labels, seconds=60):
    """Train a FashionViT on images uint8 (N, 1, 28, 28) and labels int64 (N,) for at most
    `seconds` of wall-clock time; return the trained model."""
    start = time.monotonic()
    budget = 0.9 * seconds                       # keep some time for returning
    torch.manual_seed(0)
    model = FashionViT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    batch_size, peak_lr, warmup = 128, 2e-3, 0.05
    while True:
        order = torch.randperm(len(labels))                      # one shuffle per epoch, images and labels alike
        for first in range(0, len(labels) - batch_size + 1, batch_size):
            progress = (time.monotonic() - start) / budget       # 0 -> 1 over the time budget
            if progress >= 1:
                return model.eval()
            if progress < warmup:                                 # linear warm-up, then cosine to 0 (as lr_at)
                lr = peak_lr * progress / warmup
            else:
                lr = peak_lr * 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            index = order[first:first + batch_size]
            loss = F.cross_entropy(model(images[index]), labels[index], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


# ----------------------------------------------------------------- conceptual questions (plain numbers)
numbers_per_token = 192
table_entry = 0.48
masked_row_weight = 0.2
heads_param_factor = 1
mlp_to_attention = 2.0
warmup_option = 2
position_rows = 197
initial_loss = 2.30
keys_without_cache = 55
data_option = 2


ANSWERS = {
    "patches": image_to_patches, "embedding_lookup": embed, "q1": getPositionEncoding, "softmax": softmax,
    "attention": scaled_dot_product_attention, "attention_head": AttentionHead, "q5": MultiHeadAttention,
    "mha_loop": MultiHeadAttentionLoop, "q6": ResidualAdd, "q7": FeedForwardBlock, "q7b": TransformerEncoderBlock,
    "layernorm": LayerNorm, "post_ln_block": PostLNEncoderBlock, "q2": PatchEmbedding, "q3": PatchEmbedding,
    "q4": PatchEmbedding, "conv_patch_embedding": ConvPatchEmbedding, "vit_forward": ViT,
    "cross_entropy": cross_entropy, "causal_mask": causal_mask, "cross_attention": CrossAttention,
    "decoder_block": DecoderBlock, "label_smoothing": smoothed_cross_entropy, "kv_cache": CachedSelfAttention,
    "concept_patch_numbers": numbers_per_token, "concept_sinusoid_value": table_entry,
    "concept_masked_row": masked_row_weight, "concept_heads_params": heads_param_factor,
    "concept_mlp_share": mlp_to_attention, "concept_warmup": warmup_option, "concept_position_rows": position_rows,
    "concept_initial_loss": initial_loss, "concept_decoding_work": keys_without_cache,
    "train_to_accuracy": train_vit, "concept_augmentation": data_option,
}

# Building blocks the catalogue's composite wrong answers need (see autograder.judging.model.Mistake).
PARTS = {
    "MultiHeadAttention": MultiHeadAttention, "ResidualAdd": ResidualAdd, "FeedForwardBlock": FeedForwardBlock,
    "AttentionHead": AttentionHead, "CrossAttention": CrossAttention, "getPositionEncoding": getPositionEncoding,
    "TransformerEncoderBlock": EncoderBlock,
}
