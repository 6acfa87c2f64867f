"""The references and the catalogue of known mistakes of ch08_decoder (grader side)."""
from __future__ import annotations


import math

import torch
from einops import rearrange
from torch import nn

from ..model import Mistake
from . import add
from ._common import first_if_tuple, mistaken_mask_softmax, parts, vitref
from ...questions.ch08_decoder import (  # noqa: F401
    CROSS_CASES,
    DEC_CASES,
    MASK_CASES,
    _run_cross,
    _run_decoder,
    _run_mask,
)


def _mask_reference():
    def causal_mask(T):
        return vitref().causal_mask(T).double()
    return [causal_mask]


def _mask(fn):
    def build(parts):
        def causal_mask(T):
            return fn(T)
        return causal_mask
    return build


MASK_MISTAKES = [
    Mistake("upper_triangular", "upper triangle: queries see the future",
            "Query t (row) may attend keys s <= t (columns): the lower triangle, torch.tril.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).triu())),
    Mistake("diagonal_excluded", "the diagonal is excluded",
            "A token may attend itself: s <= t includes s = t (torch.tril with diagonal=0).",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1))),
    Mistake("inverted", "True where attention is blocked",
            "The mask is 1/True where a query MAY attend (s <= t), 0/False where it is blocked.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).triu(1))),
    Mistake("one_step_ahead", "tril(diagonal=1): each query also sees the next position",
            "Keys s <= t only: torch.tril(torch.ones(T, T)) with the default diagonal=0.",
            _mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(1))),
    Mistake("additive", "an additive mask (0 allowed, -inf blocked)",
            "This question asks for 1/True where a query may attend and 0/False elsewhere.",
            _mask(lambda T: torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                          float("-inf")))),
]

add('causal_mask', references=_mask_reference, catalogue=MASK_MISTAKES)


def _cross(queries="x", keys="context", scale="head", softmax_dim=-1, project=True, merge="b h t d -> b t (h d)",
           mask_mode="fill"):
    def build(parts):
        class CrossAttention(nn.Module):
            def __init__(self, emb_size, num_heads, context_dim=None):
                super().__init__()
                self.emb_size, self.num_heads = emb_size, num_heads
                context_dim = context_dim or emb_size
                self.query = nn.Linear(emb_size, emb_size)
                self.key_value = nn.Linear(context_dim, 2 * emb_size)
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, context, mask=None, return_attention=False):
                source_q = x if queries == "x" else context
                source_kv = context if keys == "context" else x
                q = rearrange(self.query(source_q), "b t (h d) -> b h t d", h=self.num_heads)
                k, v = rearrange(self.key_value(source_kv), "b s (kv h d) -> kv b h s d", kv=2, h=self.num_heads)
                scores = q @ k.transpose(-2, -1)
                scaling = {"head": math.sqrt(self.emb_size // self.num_heads), "emb": math.sqrt(self.emb_size),
                           None: 1.0}[scale]
                weights = mistaken_mask_softmax(scores / scaling, mask, mask_mode, softmax_dim)
                out = rearrange(weights @ v, merge)
                out = self.projection(out) if project else out
                return (out, weights) if return_attention else out
        return CrossAttention
    return build


CROSS_MISTAKES = [
    Mistake("keys_from_decoder", "keys and values computed from the decoder tokens x",
            "In cross-attention the queries come from x (the decoder) and the keys and values from context "
            "(the encoder output): self.key_value(context).", _cross(keys="x")),
    Mistake("queries_from_context", "queries computed from the context",
            "Queries come from the decoder tokens x, so the output has one row per decoder token (B, T, E).",
            _cross(queries="context")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide the scores by sqrt(head_dim) before the softmax.", _cross(scale=None)),
    Mistake("scale_by_emb", "scaled by sqrt(emb_size) instead of sqrt(head_dim)",
            "Each head's dot products have head_dim = emb_size // num_heads terms.", _cross(scale="emb")),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the context positions: softmax(dim=-1).", _cross(softmax_dim=-2)),
    Mistake("no_projection", "the output projection is missing",
            "After merging the heads apply self.projection.", _cross(project=False)),
    Mistake("merge_d_h", "heads merged in the wrong order, (d h)",
            "Merge with 'b h t d -> b t (h d)'.", _cross(merge="b h t d -> b t (d h)")),
    Mistake("mask_ignored", "the mask is ignored",
            "Blocked context positions (mask 0/False) must get zero weight: scores.masked_fill(mask == 0, "
            "float('-inf')) before the softmax.", _cross(mask_mode="ignored")),
    Mistake("mask_inverted", "mask polarity inverted (True/1 treated as blocked)",
            "In the course's convention 1/True means 'may attend' and 0/False means blocked: fill where "
            "mask == 0.", _cross(mask_mode="inverted")),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Zeroing weights after the softmax leaves rows that no longer sum to 1: mask the scores with -inf "
            "before the softmax.", _cross(mask_mode="after")),
]

add('cross_attention', references=lambda: [vitref().CrossAttention], catalogue=CROSS_MISTAKES)


def _decoder_reference():
    v = vitref()

    class Reference(v.DecoderBlock):
        def forward(self, x, context, self_mask=None):
            return super().forward(x, context, self_mask=self_mask)
    return [Reference]


def _decoder(mode):
    def build(parts):
        MHA, Cross = parts.MultiHeadAttention, parts.CrossAttention

        class DecoderBlock(nn.Module):
            def __init__(self, dim, num_heads, mlp_dim, context_dim=None):
                super().__init__()
                self.norm1 = nn.LayerNorm(dim)
                self.self_attn = MHA(dim, num_heads)
                self.norm2 = nn.LayerNorm(dim)
                self.cross_attn = Cross(dim, num_heads, context_dim)
                self.norm3 = nn.LayerNorm(dim)
                self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_dim, dim))

            def forward(self, x, context, self_mask=None):
                T = x.shape[1]
                mask = None
                if self_mask == "causal" and mode != "no_causal_mask":
                    mask = torch.ones(T, T, dtype=torch.bool, device=x.device)
                    mask = mask.triu() if mode == "upper_mask" else mask.tril()

                def self_attention(h):
                    return first_if_tuple(self.self_attn(h, mask=mask)) if mask is not None else first_if_tuple(
                        self.self_attn(h))

                def cross_attention(h):
                    source = h if mode == "keys_from_decoder" else context
                    if mode == "context_normalised":
                        source = self.norm2(source)
                    return first_if_tuple(self.cross_attn(h, source))

                if mode == "post_ln":
                    x = self.norm1(x + self_attention(x))
                    x = self.norm2(x + cross_attention(x))
                    return self.norm3(x + self.mlp(x))
                if mode == "same_norm":
                    x = x + self_attention(self.norm1(x))
                    x = x + cross_attention(self.norm1(x))
                    return x + self.mlp(self.norm1(x))
                if mode == "cross_first":
                    x = x + cross_attention(self.norm1(x))
                    x = x + self_attention(self.norm2(x))
                    return x + self.mlp(self.norm3(x))
                x = x + self_attention(self.norm1(x))
                x = x + cross_attention(self.norm2(x))
                return x + self.mlp(self.norm3(x))
        return DecoderBlock
    return build


_DEC_PARTS = ("MultiHeadAttention", "CrossAttention")

DEC_MISTAKES = [
    Mistake("no_causal_mask", "self_mask='causal' is ignored",
            "With self_mask='causal', token t may only attend tokens <= t: pass a causal mask to the "
            "self-attention.", _decoder("no_causal_mask"), _DEC_PARTS),
    Mistake("upper_mask", "causal mask transposed (tokens see the future)",
            "The allowed positions are s <= t: the lower triangle (torch.tril).", _decoder("upper_mask"), _DEC_PARTS),
    Mistake("keys_from_decoder", "cross-attention over the decoder tokens instead of the context",
            "The second sub-layer attends to the encoder output: self.cross_attn(self.norm2(x), context).",
            _decoder("keys_from_decoder"), _DEC_PARTS),
    Mistake("post_ln", "post-LN: LayerNorm after the residual sums",
            "This block is pre-LN: x = x + sublayer(norm(x)) for each of the three sub-layers.",
            _decoder("post_ln"), _DEC_PARTS),
    Mistake("context_normalised", "the context normalised with the decoder's LayerNorm",
            "norm2 belongs to the decoder tokens: cross_attn(self.norm2(x), context), with the encoder output "
            "as it is.", _decoder("context_normalised"), _DEC_PARTS),
    Mistake("same_norm", "norm1 used before all three sub-layers",
            "Each sub-layer has its own LayerNorm: norm1, norm2 and norm3.", _decoder("same_norm"), _DEC_PARTS),
    Mistake("cross_first", "cross-attention before self-attention",
            "The order is masked self-attention, then cross-attention, then the MLP.", _decoder("cross_first"),
            _DEC_PARTS),
]

add('decoder_block', references=_decoder_reference, catalogue=DEC_MISTAKES, reference_parts=parts(MultiHeadAttention=lambda: vitref().MultiHeadAttention,
                          CrossAttention=lambda: vitref().CrossAttention))
