"""Code the notebooks give students (chapters 5, 7 and 8), which the chapter 7 and 8 answers build
on: not an answer, and not written independently of the notebooks.

``MultiHeadAttention`` and ``FeedForwardBlock`` are the notebooks' given classes, copied (their
comments left out, a one-line docstring added). ``TransformerEncoderBlock`` is a reduced form of the given
pre-LN block (no dropout, signature ``(dim, num_heads, mlp_dim)``) that the ViT answers stack.
(Chapter 5's answers use ``solutions.MultiHeadAttention``, chapter 4's solution, instead.)
"""
import torch
from einops import rearrange
from torch import nn


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
