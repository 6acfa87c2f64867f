"""Code the notebooks give students (their ``given`` cells), which the solutions and the other
answers of chapters 4, 5, 7, 8 and 9 build on: not an answer, and not written independently of the notebooks.

``attend`` and ``AttentionHead`` (chapter 4), ``MultiHeadAttention`` and ``FeedForwardBlock``
(chapters 5, 7, 8) and ``FashionViT`` (chapter 9) are the notebooks' given code, copied (comments
left out, one-line docstrings). ``TransformerEncoderBlock`` is a reduced form of chapter 7's given
pre-LN block (no dropout, signature ``(dim, num_heads, mlp_dim)``) that the ViT answers stack.
A bank module imports from here what its notebook gives, so that its ``@solution`` runs as it
does in the notebook (``tests/answers/submission.py`` copies the same code into the whole submission).
"""
import torch
from einops import rearrange
from einops.layers.torch import Rearrange
from torch import nn


def attend(q, k, v, mask=None):
    """Scaled dot-product attention (chapter 4's given): (out (..., T, d_v), weights (..., T, S))."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


class AttentionHead(nn.Module):
    """One head (chapter 4's given): forward(x (B, T, dim)) -> (out (B, T, head_dim), weights (B, T, T))."""

    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
        return attend(self.query(x), self.key(x), self.value(x), mask)


class MultiHeadAttention(nn.Module):
    """The notebooks' given fused multi-head self-attention (chapters 7 and 8)."""

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


class FeedForwardBlock(nn.Sequential):
    """The notebooks' given feed-forward block (chapters 7 and 8): vitref.FeedForwardBlock's signature."""

    def __init__(self, emb_size, expansion=4, drop_p=0.0, hidden_dim=None):
        hidden = hidden_dim or expansion * emb_size
        super().__init__(nn.Linear(emb_size, hidden), nn.GELU(), nn.Dropout(drop_p), nn.Linear(hidden, emb_size))


class TransformerEncoderBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim)

    def forward(self, x, return_attention=False):
        attn_out, weights = self.attn(self.norm1(x), return_attention=True)
        x = x + attn_out
        x = x + self.mlp(self.norm2(x))
        return (x, weights) if return_attention else x


FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530


class FashionViT(nn.Module):
    """Chapter 9's given small ViT for Fashion-MNIST: uint8 images (B, 1, 28, 28) -> logits (B, 10)."""

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
