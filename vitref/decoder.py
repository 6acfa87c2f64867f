"""The decoder side: masked self-attention, cross-attention, decoder blocks.

A pre-LN decoder block has three sub-layers, each with a residual connection::

    x = x + MaskedMSA(LN(x))              # tokens look only at earlier tokens (or all, for parallel decoding)
    x = x + CrossAttention(LN(x), memory) # queries from the decoder, keys/values from the encoder
    x = x + MLP(LN(x))
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import expect_dims, shape_str
from .blocks import FeedForwardBlock, TransformerEncoderBlock
from .multihead import CrossAttention, MultiHeadAttention
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding


class MaskedMultiHeadAttention(MultiHeadAttention):
    """Multi-head self-attention with the causal mask always on: token ``t`` sees tokens ``<= t``."""

    def forward(self, x, mask=None, causal: bool = True, return_attention: bool = False):
        return super().forward(x, mask=mask, causal=True, return_attention=return_attention)


class DecoderBlock(nn.Module):
    """Pre-LN decoder block: masked self-attention, cross-attention, feed-forward.

    ``forward(x (B, T, D), context (B, S, C), self_mask=None, context_mask=None, return_attention=False)``
    -> ``(B, T, D)`` [and ``(self_weights (B, h, T, T), cross_weights (B, h, T, S))``].
    ``self_mask`` is ``None`` (every token sees every token: parallel decoding), ``"causal"``,
    or a mask broadcastable to ``(B, h, T, T)``.
    """

    def __init__(self, dim: int, num_heads: int, mlp_dim: int | None = None, context_dim: int | None = None,
                 dropout: float = 0.0, norm_eps: float = 1e-5):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.self_attn = MultiHeadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.cross_attn = CrossAttention(dim, num_heads, context_dim=context_dim)
        self.norm3 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = FeedForwardBlock(dim, hidden_dim=mlp_dim or 4 * dim, drop_p=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, context, self_mask=None, context_mask=None, return_attention: bool = False):
        causal = isinstance(self_mask, str)
        if causal and self_mask != "causal":
            raise ValueError(f"self_mask must be None, 'causal' or a tensor, got {self_mask!r}")
        self_out, self_w = self._split(
            self.self_attn(self.norm1(x), mask=None if causal else self_mask, causal=causal,
                           return_attention=return_attention), return_attention)
        x = x + self.dropout(self_out)
        cross_out, cross_w = self._split(
            self.cross_attn(self.norm2(x), context, mask=context_mask, return_attention=return_attention),
            return_attention)
        x = x + self.dropout(cross_out)
        x = x + self.dropout(self.mlp(self.norm3(x)))
        return (x, (self_w, cross_w)) if return_attention else x

    @staticmethod
    def _split(result, return_attention):
        return result if return_attention else (result, None)


class ViTDecoder(nn.Module):
    """Reconstructs an image's patches from encoder features.

    Every output position starts as the same learned *mask token* plus its position
    embedding; decoder blocks cross-attend to the encoder output ``(B, S, context_dim)`` and
    a linear head turns each token into a patch: output ``(B, N, P*P*C)`` in
    :func:`~vitref.patches.image_to_patches` order. ``causal=True`` masks the decoder's
    self-attention so position ``t`` attends to positions ``<= t`` only; it still makes one
    parallel pass over mask tokens (it is not autoregressive generation: no patch is fed back,
    see chapter 8 and :mod:`vitref.generation`). ``False`` lets every position see every other.
    """

    def __init__(self, img_size: int = 32, patch_size: int = 4, dim: int = 128, num_heads: int = 4,
                 mlp_dim: int = 512, depth: int = 4, in_channels: int = 3, context_dim: int | None = None,
                 dropout: float = 0.0, causal: bool = False):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"image size {img_size} is not divisible by patch size {patch_size}")
        self.img_size, self.patch_size, self.in_channels, self.causal = img_size, patch_size, in_channels, causal
        self.num_patches = (img_size // patch_size) ** 2
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))                          # (1, 1, D)
        self.pos_embed = LearnedPositionalEmbedding(self.num_patches, dim)
        self.blocks = nn.ModuleList(
            DecoderBlock(dim, num_heads, mlp_dim, context_dim=context_dim, dropout=dropout) for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, patch_size * patch_size * in_channels)

    def forward(self, context: torch.Tensor, return_attention: bool = False):
        expect_dims(context, "B, S, C", "ViTDecoder context")
        queries = self.mask_token.expand(context.shape[0], self.num_patches, -1)       # (B, N, D)
        x = self.pos_embed(queries)
        attentions = []
        for block in self.blocks:
            x = block(x, context, self_mask="causal" if self.causal else None, return_attention=return_attention)
            if return_attention:
                x, weights = x
                attentions.append(weights)
        patches = self.head(self.norm(x))                                              # (B, N, P*P*C)
        return (patches, attentions) if return_attention else patches


class Seq2SeqTransformer(nn.Module):
    """A small encoder-decoder Transformer for token sequences (pre-LN, sinusoidal positions).

    ``forward(src (B, S), tgt (B, T)) -> logits (B, T, tgt_vocab)``: position ``t`` predicts
    token ``t + 1`` of the target, seeing ``tgt[:, :t+1]`` and the whole source.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, dim: int = 64, depth: int = 2, num_heads: int = 4,
                 mlp_dim: int | None = None, max_len: int = 64, dropout: float = 0.0):
        super().__init__()
        self.dim, self.max_len = dim, max_len
        self.src_embed = nn.Embedding(src_vocab, dim)
        self.tgt_embed = nn.Embedding(tgt_vocab, dim)
        self.positions = SinusoidalPositionalEncoding(max_len, dim)
        self.encoder = nn.ModuleList(
            TransformerEncoderBlock(dim, num_heads, drop_p=dropout, mlp_dim=mlp_dim or 4 * dim) for _ in range(depth)
        )
        self.encoder_norm = nn.LayerNorm(dim)
        self.decoder = nn.ModuleList(DecoderBlock(dim, num_heads, mlp_dim, dropout=dropout) for _ in range(depth))
        self.decoder_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, tgt_vocab)

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor, name: str) -> torch.Tensor:
        expect_dims(tokens, "B, L", f"Seq2SeqTransformer {name}")
        return self.positions(embedding(tokens) * math.sqrt(self.dim))               # (B, L, D)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Source tokens ``(B, S)`` -> memory ``(B, S, D)``."""
        x = self._embed(self.src_embed, src, "source")
        for block in self.encoder:
            x = block(x)
        return self.encoder_norm(x)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Target tokens ``(B, T)`` and memory ``(B, S, D)`` -> logits ``(B, T, V)``."""
        x = self._embed(self.tgt_embed, tgt, "target")
        for block in self.decoder:
            x = block(x, memory, self_mask="causal")
        return self.head(self.decoder_norm(x))

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"source {shape_str(src.shape)} and target {shape_str(tgt.shape)} batch sizes differ")
        return self.decode(tgt, self.encode(src))

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, bos_id: int, length: int) -> torch.Tensor:
        """Generate ``length`` tokens after ``bos_id``, each the most likely next token: ``(B, length)``."""
        if length + 1 > self.max_len:
            raise ValueError(f"sequence length {length + 1} exceeds the positional table ({self.max_len} positions)")
        memory = self.encode(src)
        out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)   # (B, 1)
        for _ in range(length):
            next_token = self.decode(out, memory)[:, -1].argmax(dim=-1, keepdim=True)     # (B, 1)
            out = torch.cat([out, next_token], dim=1)
        return out[:, 1:]


__all__ = ["MaskedMultiHeadAttention", "DecoderBlock", "ViTDecoder", "Seq2SeqTransformer"]
