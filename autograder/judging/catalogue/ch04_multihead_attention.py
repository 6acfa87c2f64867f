"""The references and the catalogue of known mistakes of ch04_multihead_attention (grader side)."""
from __future__ import annotations



import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..model import Mistake
from . import add
from ._common import first_if_tuple, parts, vitref
from ...questions.ch04_multihead_attention import (  # noqa: F401
    LOOP_CASES,
    MHA_CASES,
    _run_loop,
    _run_mha,
)


def _mha(merge="b h n d -> b n (h d)", reshape=False, einsum="bhal, bhlv -> bhav", scale="head",
         scale_after=False, project=True, softmax_dim=-1):
    def build(parts):
        class MultiHeadAttention(nn.Module):
            def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
                super().__init__()
                self.emb_size, self.num_heads = emb_size, num_heads
                self.qkv = nn.Linear(emb_size, emb_size * 3)
                self.att_drop = nn.Dropout(dropout)
                self.projection = nn.Linear(emb_size, emb_size)

            def forward(self, x, mask=None):
                qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
                queries, keys, values = qkv[0], qkv[1], qkv[2]
                energy = torch.einsum("bhqd, bhkd -> bhqk", queries, keys)
                if mask is not None:
                    energy = energy.masked_fill(mask == 0, -1e9)
                scaling = {"head": (self.emb_size // self.num_heads) ** 0.5, "emb": self.emb_size ** 0.5,
                           None: 1.0}[scale]
                if scale_after:
                    att = F.softmax(energy, dim=softmax_dim) / scaling
                else:
                    att = F.softmax(energy / scaling, dim=softmax_dim)
                att = self.att_drop(att)
                out = torch.einsum(einsum, att, values)
                if reshape:
                    b, h, n, d = out.shape
                    out = out.reshape(b, n, h * d)
                else:
                    out = rearrange(out, merge)
                return self.projection(out) if project else out
        return MultiHeadAttention
    return build


MHA_MISTAKES = [
    Mistake("merge_d_h", "heads merged in the wrong order, (d h)",
            "Put the heads back side by side: rearrange(out, 'b h n d -> b n (h d)'); '(d h)' interleaves "
            "the features of different heads.", _mha(merge="b h n d -> b n (d h)")),
    Mistake("reshape_without_permute", "reshape of (B, h, N, d) to (B, N, h*d) without moving the heads axis",
            "out.reshape(B, N, h*d) on a (B, h, N, d) tensor mixes tokens and heads; move the axes first "
            "(rearrange 'b h n d -> b n (h d)', or permute(0, 2, 1, 3) then reshape).", _mha(reshape=True)),
    Mistake("einsum_wrong_axis", "einsum sums over the queries axis",
            "In 'bhal, bhlv -> bhav' the weights att[b, h, a, l] of query a are summed over the keys l; "
            "the result keeps the query axis a.", _mha(einsum="bhla, bhlv -> bhav")),
    Mistake("einsum_keeps_keys", "einsum output keeps the keys axis, 'bhal, bhlv -> bhlv'",
            "Sum over the keys l and keep the queries a: 'bhal, bhlv -> bhav'.",
            _mha(einsum="bhal, bhlv -> bhlv")),
    Mistake("scale_after_softmax", "scaling applied after the softmax",
            "Divide the energy by sqrt(head_dim) before F.softmax; dividing the weights afterwards means they "
            "no longer sum to 1.", _mha(scale_after=True, scale="emb")),
    Mistake("scale_after_softmax_head", "scaling applied after the softmax",
            "Divide the energy by sqrt(head_dim) before F.softmax; dividing the weights afterwards means they "
            "no longer sum to 1.", _mha(scale_after=True, scale="head")),
    Mistake("scale_by_emb", "scaled by sqrt(emb_size) instead of sqrt(head_dim)",
            "Each head's dot products have head_dim = emb_size // num_heads terms: divide by sqrt(head_dim).",
            _mha(scale="emb")),
    Mistake("no_scaling", "missing the 1/sqrt(head_dim) scaling",
            "Divide the energy by sqrt(head_dim) before the softmax.", _mha(scale=None)),
    Mistake("no_projection", "the output projection is missing",
            "After merging the heads, apply self.projection (W^O).", _mha(project=False)),
    Mistake("softmax_over_queries", "softmax over the queries axis",
            "Each query's weights sum to 1 over the keys: softmax(dim=-1).", _mha(softmax_dim=-2)),
]

add('q5', references=lambda: [vitref().MultiHeadAttention], catalogue=MHA_MISTAKES)


def _loop(combine="cat", project=True, head_width="split", same_head=False):
    def build(parts):
        AttentionHead = parts.AttentionHead

        class MultiHeadAttentionLoop(nn.Module):
            def __init__(self, emb_size, num_heads):
                super().__init__()
                width = emb_size // num_heads if head_width == "split" else emb_size
                self.heads = nn.ModuleList([AttentionHead(emb_size, width) for _ in range(num_heads)])
                out_in = width * num_heads if combine == "cat" else width
                self.projection = nn.Linear(out_in, emb_size)

            def forward(self, x, mask=None, return_attention=False):
                heads = [self.heads[0]] * len(self.heads) if same_head else self.heads
                outputs = [first_if_tuple(head(x, mask)) for head in heads]
                if combine == "cat":
                    out = torch.cat(outputs, dim=-1)
                elif combine == "cat_tokens":
                    out = torch.cat(outputs, dim=1)
                else:
                    out = torch.stack(outputs).mean(0)
                return self.projection(out) if project else out
        return MultiHeadAttentionLoop
    return build


LOOP_MISTAKES = [
    Mistake("no_projection", "the output projection is missing",
            "After concatenating the heads, apply self.projection (W^O).", _loop(project=False), ("AttentionHead",)),
    Mistake("concat_tokens", "heads concatenated along the tokens axis",
            "Concatenate the head outputs feature-wise: torch.cat(outputs, dim=-1) gives (B, N, h*d).",
            _loop(combine="cat_tokens"), ("AttentionHead",)),
    Mistake("heads_averaged", "heads averaged instead of concatenated",
            "Each head contributes its own d = emb_size // num_heads features: concatenate, then project.",
            _loop(combine="mean"), ("AttentionHead",)),
    Mistake("full_width_heads", "every head has emb_size features",
            "Split the width: each head maps emb_size -> emb_size // num_heads, so the concatenation has "
            "emb_size features.", _loop(head_width="full"), ("AttentionHead",)),
    Mistake("same_head_repeated", "the first head used for every head",
            "Loop over self.heads: each head has its own query/key/value weights.",
            _loop(same_head=True), ("AttentionHead",)),
]

add('mha_loop', references=lambda: [vitref().MultiHeadAttentionLoop], catalogue=LOOP_MISTAKES, reference_parts=parts(AttentionHead=lambda: vitref().AttentionHead))
