"""Chapter 4, multi-head attention: the slides' Q5 (fused, einsum) and a loop of heads.

Skeleton of Q5 (the slides' MultiHeadAttention, blanks in the last lines)::

    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size=768, num_heads=8, dropout=0.):
            super().__init__()
            self.emb_size, self.num_heads = emb_size, num_heads
            self.qkv = nn.Linear(emb_size, emb_size * 3)       # queries, keys, values of all heads
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None):
            qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]     # each (B, h, N, d)
            energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)
            if mask is not None:
                energy = energy.masked_fill(mask == 0, float("-inf"))
            scaling = (self.emb_size // self.num_heads) ** 0.5
            att = F.softmax(energy / scaling, dim=-1)
            att = self.att_drop(att)
            # Q5. sum up over the third axis, then rearrange the heads back and project
            out = torch.einsum('bhal, bhlv -> ...', att, values)
            out = rearrange(out, "...")
            out = self.projection(out)
            return out

Correct answers may also lay the fused projection out as ``(h d qkv)`` or use three
separate linear layers: the checker loads the same weights either way.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import inputs as I
from ..core import Case, Mistake, Question, register
from ._common import build_flexible, first_if_tuple, parts, vitref

MHA_CASES = [
    Case("MultiHeadAttention(emb_size=8, num_heads=2), x (3, 5, 8)", {"E": 8, "h": 2, "x": (3, 5, 8), "seed": 61},
         {3: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttention(emb_size=12, num_heads=3), x (1, 4, 12)",
         {"E": 12, "h": 3, "x": (1, 4, 12), "seed": 62}, {1: "B", 4: "N", 12: "E"}),
    Case("MultiHeadAttention(emb_size=16, num_heads=4), x (2, 3, 16)",
         {"E": 16, "h": 4, "x": (2, 3, 16), "seed": 63}, {2: "B", 3: "N", 16: "E"}),
]


def _run_mha(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]}, heads=p["h"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    out = first_if_tuple(rec.call(module, x))
    rec.check_new_params(module)
    rec.output("out", out)


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

register(Question(
    id="q5", chapter="04_multihead_attention", title="Q5 multi-head attention (einsum + rearrange)", points=3,
    answer_name="MultiHeadAttention", kind="class",
    signature="MultiHeadAttention(emb_size, num_heads, dropout=0.); forward(x (B, N, E)) -> (B, N, E)",
    cases=MHA_CASES, run_case=_run_mha, references=lambda: [vitref().MultiHeadAttention],
    catalogue=MHA_MISTAKES, forbidden=("attention",), outputs={"out": "(B, N, E)"},
    skeleton='''class MultiHeadAttention(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)   # queries, keys and values of all heads
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        qkv = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        queries, keys, values = qkv[0], qkv[1], qkv[2]             # each (B, h, N, d)
        energy = torch.einsum('bhqd, bhkd -> bhqk', queries, keys)  # (B, h, N, N)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-inf"))
        scaling = (self.emb_size // self.num_heads) ** 0.5
        att = F.softmax(energy / scaling, dim=-1)
        att = self.att_drop(att)
        # Q5. Fill in the blanks of einsum: sum up over the third axis,
        # then rearrange the heads back into one vector per token and apply the projection.
        out = torch.einsum('bhal, bhlv -> ...', att, values)
        out = rearrange(out, "...")
        out = self.projection(out)
        return out
''',
))

# --------------------------------------------------------------------------- loop of heads

LOOP_CASES = [
    Case("MultiHeadAttentionLoop(emb_size=8, num_heads=2), x (3, 5, 8)",
         {"E": 8, "h": 2, "x": (3, 5, 8), "seed": 71}, {3: "B", 5: "N", 8: "E"}),
    Case("MultiHeadAttentionLoop(emb_size=12, num_heads=3), x (1, 4, 12)",
         {"E": 12, "h": 3, "x": (1, 4, 12), "seed": 72}, {1: "B", 4: "N", 12: "E"}),
]


def _run_loop(answer, case, rec):
    p = case.params
    module = build_flexible(rec, answer, (p["E"], p["h"]), {"emb_size": p["E"], "num_heads": p["h"]},
                            heads=p["h"], head_width=p["E"])
    x = rec.tensor(I.randn(p["x"], p["seed"]))
    out = first_if_tuple(rec.call(module, x))
    rec.check_new_params(module)
    rec.output("out", out)


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

register(Question(
    id="mha_loop", chapter="04_multihead_attention", title="Multi-head attention as a loop of heads", points=2,
    answer_name="MultiHeadAttentionLoop", kind="class",
    signature="MultiHeadAttentionLoop(emb_size, num_heads); forward(x (B, N, E)) -> (B, N, E)",
    cases=LOOP_CASES, run_case=_run_loop, references=lambda: [vitref().MultiHeadAttentionLoop],
    catalogue=LOOP_MISTAKES, forbidden=("attention",), outputs={"out": "(B, N, E)"},
    reference_parts=parts(AttentionHead=lambda: vitref().AttentionHead),
    skeleton='''class MultiHeadAttentionLoop(nn.Module):
    def __init__(self, emb_size, num_heads):
        super().__init__()
        head_dim = emb_size // num_heads
        self.heads = nn.ModuleList([AttentionHead(emb_size, head_dim) for _ in range(num_heads)])
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        # x: (B, N, emb_size); each head gives (out (B, N, head_dim), weights (B, N, N))
        ...
        return (out, weights) if return_attention else out   # out (B, N, emb_size), weights (B, h, N, N)
''',
))
