"""The references and the catalogue of known mistakes of ch04_multihead_attention (grader side)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..model import Mistake
from . import add
from ._common import first_if_tuple, mistaken_mask_softmax, parts, vitref
from ._properties import by_tests, dtype_mix, first, weights_problem
from .ch03_attention import finite_fill_head, zero_row_head
from ...questions.ch03_attention import case_mask
from ...questions.ch04_multihead_attention import (  # noqa: F401
    LOOP_CASES,
    MHA_CASES,
    _run_loop,
    _run_mha,
)


def _mha(merge="b h n d -> b n (h d)", reshape=False, einsum="bhal, bhlv -> bhav", scale="head",
         scale_after=False, project=True, softmax_dim=-1, mask_mode="fill", fill=-1e9, dropout="att"):
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
                scaling = {"head": (self.emb_size // self.num_heads) ** 0.5, "emb": self.emb_size ** 0.5,
                           None: 1.0}[scale]
                if dropout == "energy":
                    energy = self.att_drop(energy)
                if scale_after:
                    att = mistaken_mask_softmax(energy, mask, mask_mode, softmax_dim, fill) / scaling
                else:
                    att = mistaken_mask_softmax(energy / scaling, mask, mask_mode, softmax_dim, fill)
                if dropout == "att":
                    att = self.att_drop(att)
                elif dropout == "always":
                    att = F.dropout(att, self.att_drop.p)
                out = torch.einsum(einsum, att, values)
                if reshape:
                    b, h, n, d = out.shape
                    out = out.reshape(b, n, h * d)
                else:
                    out = rearrange(out, merge)
                out = self.projection(out) if project else out
                return self.att_drop(out) if dropout == "out" else out
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

MHA_MISTAKES += [
    Mistake("mask_ignored", "the mask is ignored",
            "When mask is given, fill the blocked energies (mask == 0) with -1e9 before the softmax.",
            _mha(mask_mode=None)),
    Mistake("mask_inverted", "mask polarity inverted",
            "The mask is 1/True where a query MAY attend: block where it is 0/False (masked_fill(mask == 0, ...)).",
            _mha(mask_mode="inverted"), also=(_mha(mask_mode="inverted", fill=float("-inf")),)),
    Mistake("mask_after_softmax", "mask applied after the softmax",
            "Fill the blocked energies with -1e9 before the softmax, so the allowed weights still sum to 1.",
            _mha(mask_mode="after")),
    Mistake("nan_fully_masked", "fully masked rows give NaN",
            "A query whose keys are all blocked gets softmax over all -inf = 0/0 = NaN: fill with -1e9, as the "
            "exercise's code does.", _mha(fill=float("-inf"))),
    Mistake("dropout_always_on", "dropout applied in eval mode too",
            "F.dropout(att, p) drops weights even in eval mode (its training argument defaults to True): use "
            "self.att_drop(att), or F.dropout(att, p, training=self.training).", _mha(dropout="always")),
    Mistake("dropout_missing", "the attention dropout is missing",
            "Apply self.att_drop to the attention weights, after the softmax and before multiplying by the values.",
            _mha(dropout=None)),
    Mistake("dropout_before_softmax", "dropout applied to the energy before the softmax",
            "Dropout acts on the attention weights: att = self.att_drop(F.softmax(...)), after the softmax.",
            _mha(dropout="energy")),
    Mistake("dropout_on_output", "dropout applied to the output instead of the attention weights",
            "self.att_drop belongs on the attention weights (after the softmax, before the einsum with the values), "
            "not on the output.", _mha(dropout="out")),
]


class _FiniteFillMHA(nn.Module):
    """The exercise's MultiHeadAttention (-1e9 fills: a fully masked query gets uniform weights)."""

    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.emb_size, self.num_heads = emb_size, num_heads
        self.qkv = nn.Linear(emb_size, emb_size * 3)
        self.att_drop = nn.Dropout(dropout)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None):
        q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
        energy = q @ k.transpose(-2, -1) / (self.emb_size // self.num_heads) ** 0.5
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e9)
        att = self.att_drop(vitref().softmax(energy, dim=-1))
        return self.projection(rearrange(att @ v, "b h n d -> b n (h d)"))


_MHA_TESTS = {
    "mask": "the output with a mask is wrong although every case without one is right: check how the mask "
            "reaches the energies (blocked where mask == 0, filled with -1e9 before the softmax)",
    "dropout_eval": "in eval mode dropout must do nothing: use self.att_drop (an nn.Dropout follows "
                    "model.eval()) or F.dropout(att, p, training=self.training)",
    "dropout_all": "with dropout=1.0 in train mode every attention weight is dropped, so the output is the "
                   "projection's bias: the dropout is missing or not on the attention weights",
    "dropout_seeded": "in train mode the dropout masks differ from dropout applied once to the attention weights "
                      "(after the softmax, before the einsum with the values), as self.att_drop(att)",
    "grads": "the gradients differ although the outputs are right: does the output reach x and every "
             "parameter through autograd (no .detach(), .data or numpy)?",
}
_MHA_COMBOS = {
    frozenset({"dropout_all", "dropout_seeded"}): _MHA_TESTS["dropout_all"],
    frozenset({"dropout_eval", "dropout_seeded"}): "dropout is applied even in eval mode, or elsewhere than on "
                                                   "the attention weights: use self.att_drop(att) after the softmax",
    frozenset({"dropout_eval", "dropout_all", "dropout_seeded"}):
        "dropout is wrong in both modes: in eval mode dropout must do nothing, and in train mode it drops the "
        "attention weights with probability p (use self.att_drop(att), after the softmax)",
}


def _mha_weights_free(question, data):
    return dtype_mix(data)


add('q5', references=lambda: [vitref().MultiHeadAttention, _FiniteFillMHA], catalogue=MHA_MISTAKES,
    diagnose=first(by_tests(_MHA_TESTS, _MHA_COMBOS), _mha_weights_free))


def _loop(combine="cat", project=True, head_width="split", same_head=False, pass_mask=True, stack="dim1",
          head=None, **_):
    def build(parts):
        AttentionHead = parts.AttentionHead if head is None else head(parts)

        class MultiHeadAttentionLoop(nn.Module):
            def __init__(self, emb_size, num_heads):
                super().__init__()
                width = emb_size // num_heads if head_width == "split" else emb_size
                self.heads = nn.ModuleList([AttentionHead(emb_size, width) for _ in range(num_heads)])
                out_in = width * num_heads if combine in ("cat", "interleave") else width
                self.projection = nn.Linear(out_in, emb_size)

            def forward(self, x, mask=None, return_attention=False):
                heads = [self.heads[0]] * len(self.heads) if same_head else self.heads
                results = [head(x, mask) if pass_mask else head(x) for head in heads]
                outputs = [first_if_tuple(r) for r in results]
                weights = [r[1] for r in results]
                if combine == "cat":
                    out = torch.cat(outputs, dim=-1)
                elif combine == "cat_tokens":
                    out = torch.cat(outputs, dim=1)
                elif combine == "interleave":
                    out = torch.stack(outputs, dim=-1).flatten(-2)          # (B, N, d, h) -> (d h)
                else:
                    out = torch.stack(outputs).mean(0)
                out = self.projection(out) if project else out
                if not return_attention:
                    return out
                if stack == "dim1":
                    w = torch.stack(weights, dim=1)
                elif stack == "dim0":
                    w = torch.stack(weights)
                elif stack == "mean":
                    w = torch.stack(weights, dim=1).mean(1)
                elif stack == "cat":
                    w = torch.cat(weights, dim=-1)
                else:
                    w = weights[-1]
                return out, w
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

_NEEDS = ("AttentionHead",)
LOOP_MISTAKES += [
    Mistake("mask_ignored", "the mask is not passed to the heads",
            "Call every head with the mask: head(x, mask).", _loop(pass_mask=False), _NEEDS),
    Mistake("merge_d_h", "heads merged in the wrong order, (d h)",
            "Put the heads side by side, head after head: torch.cat(outputs, dim=-1); stacking on a new last axis "
            "and flattening interleaves the features of different heads.", _loop(combine="interleave"), _NEEDS),
    Mistake("weights_stacked_dim0", "attention weights stacked on the first axis, (h, B, N, N)",
            "Stack the heads' weights on axis 1: torch.stack(weights, dim=1) gives (B, h, N, N).",
            _loop(stack="dim0"), _NEEDS),
    Mistake("weights_averaged", "attention weights averaged over the heads",
            "Return every head's weights, stacked as (B, h, N, N): torch.stack(weights, dim=1), no mean.",
            _loop(stack="mean"), _NEEDS),
    Mistake("weights_concatenated", "attention weights concatenated along the keys axis, (B, N, h*N)",
            "Stack the heads' weights on a new axis 1: torch.stack(weights, dim=1) gives (B, h, N, N).",
            _loop(stack="cat"), _NEEDS),
    Mistake("weights_last_head", "only the last head's weights returned",
            "Collect the weights of every head in the loop and stack them: (B, h, N, N).",
            _loop(stack="last"), _NEEDS),
]


def _with_zero_row_heads(mistake: Mistake) -> Mistake:
    """The loop mistake also built from heads whose fully masked rows are zeros (students'
    heads differ there; the exercise accepts both)."""
    def build(parts, _build=mistake.build):
        return _build(SimpleNamespace(AttentionHead=zero_row_head()))
    return dataclasses.replace(mistake, also=mistake.also + (build,))


LOOP_MISTAKES = [_with_zero_row_heads(m) for m in LOOP_MISTAKES]


class _FiniteFillLoop(nn.Module):
    """The exercise's loop over the notebook's heads (-1e9 fills: fully masked queries are uniform)."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        head = finite_fill_head()
        self.heads = nn.ModuleList(head(emb_size, emb_size // num_heads) for _ in range(num_heads))
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, mask=None, return_attention=False):
        outputs, weights = zip(*(head(x, mask) for head in self.heads))
        out = self.projection(torch.cat(outputs, dim=-1))
        return (out, torch.stack(weights, dim=1)) if return_attention else out


_LOOP_TESTS = {
    "mask": "the output with a mask is wrong although the cases without one are right: pass the mask to every "
            "head, head(x, mask)",
    "weights": "the attention weights returned with return_attention=True are wrong although the output is right: "
               "stack every head's weights, in head order, as (B, num_heads, N, N)",
    "grads": "the gradients differ although the outputs are right: does the output reach x and every parameter "
             "through autograd (no .detach(), .data or numpy)?",
}


def _loop_heads_diagnose(question, data):
    """With return_attention=True, compare each head's weights with the reference's: name the
    first head whose weights are wrong (e.g. a head that reads another head's parameters)."""
    from ..judge import reference_outputs

    for index, (case, student_case) in enumerate(zip(question.cases, data.get("cases") or [])):
        got = (student_case.get("outputs") or {}).get("weights")
        if got is None or not case.params.get("return_attention"):
            continue
        got = np.asarray(got)
        refs, _ = reference_outputs(question, index, student_case, verify=False)
        wants = [np.asarray(ref["weights"]) for ref in refs if np.shape(ref["weights"]) == got.shape]
        if not wants:
            continue

        def wrong_heads(want):
            return [h for h in range(want.shape[1]) if not np.allclose(got[:, h], want[:, h], atol=1e-4)]

        want = min(wants, key=lambda w: len(wrong_heads(w)))
        bad = wrong_heads(want)
        if not bad:
            continue
        h = bad[0]
        for other in range(want.shape[1]):
            if other != h and np.allclose(got[:, h], want[:, other], atol=1e-4):
                return (f"the weights of head {h} are those of head {other} (on input {case.label}): keep the "
                        f"heads in order, each with its own parameters")
        found = weights_problem(got[:, h], case_mask(case.params))
        return (found or f"the attention weights of head {h} differ from what its own query and key layers "
                         f"give") + f" (on input {case.label})"
    return None


add('mha_loop', references=lambda: [vitref().MultiHeadAttentionLoop, _FiniteFillLoop], catalogue=LOOP_MISTAKES,
    reference_parts=parts(AttentionHead=finite_fill_head),
    diagnose=first(by_tests(_LOOP_TESTS), _loop_heads_diagnose, lambda q, d: dtype_mix(d)))
