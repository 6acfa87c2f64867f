"""Attention as the catalogues' wrong answers compute it, shared by every question where the
operation appears (the attention function, one head, the fused and the loop multi-head
attention; later chapters may reuse it): one mistake is recognised wherever it can be made.

Also the references that block a fully masked query with a large negative number (-1e9)
instead of -inf: its weights are uniform instead of zero, and the exercises accept both.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

import vitref

from ..model import Mistake


FINITE = -1e9


def attend(q, k, v, mask=None, *, scale="sqrt_dk", softmax_dim=-1, mask_mode="fill", fill=FINITE,
           scale_after=False, qk_swapped=False, dropout=None, dropout_at="weights"):
    """``(out, weights)`` of attention over the last two axes, with one mistake switched on.

    ``scale``: "sqrt_dk" (right), "dk", "sqrt_dv", "sqrt_s", "half" (d_k ** 1/2), "emb" (a
    number: divide by sqrt of it), "half_inline" (scores / d_k ** 1 / 2 = scores / (2 d_k)),
    None (no scaling). ``mask_mode``: "fill" (right),
    "inverted", "after" (weights zeroed after the softmax), "additive_inverted" (scores +
    mask * fill), None (ignored). ``dropout``: a callable applied at ``dropout_at``
    ("weights", right; "scores": before the softmax; "values").
    """
    d_k = q.shape[-1]
    scores = (k @ q.transpose(-2, -1)) if qk_swapped else (q @ k.transpose(-2, -1))
    divisor = {"sqrt_dk": math.sqrt(d_k), "dk": d_k, "sqrt_dv": math.sqrt(v.shape[-1]),
               "sqrt_s": math.sqrt(k.shape[-2]), "half": d_k ** 1 / 2, "half_inline": 2 * d_k,
               None: 1.0}.get(scale)
    if divisor is None:
        divisor = math.sqrt(scale)
    if not scale_after:
        scores = scores / divisor
    if mask is not None:
        if mask_mode == "fill":
            scores = scores.masked_fill(mask == 0, fill)
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask != 0, fill)
        elif mask_mode == "additive_inverted":
            scores = scores + (mask != 0).to(scores.dtype) * fill
    if dropout is not None and dropout_at == "scores":
        scores = dropout(scores)
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_mode == "after":
        weights = weights * (mask != 0)
    if scale_after:
        weights = weights / divisor
    if dropout is not None and dropout_at == "weights":
        weights = dropout(weights)
    if dropout is not None and dropout_at == "values":
        v = dropout(v)
    return weights @ v, weights


# --------------------------------------------------------------------------- -1e9 references


def finite_fill_attention(q, k, v, mask=None):
    """The reference attention with -1e9 for blocked scores: fully masked rows are uniform."""
    return attend(q, k, v, mask)


def finite_fill_head():
    """vitref's AttentionHead computing attention with -1e9."""
    base = vitref.AttentionHead

    class AttentionHead(base):
        def forward(self, x, mask=None):
            return finite_fill_attention(self.query(x), self.key(x), self.value(x), mask)
    return AttentionHead


def _per_example(mask):
    """vitref's multi-head convention: a (B, T, S) mask is one per example, shared by the heads."""
    if mask is not None and torch.as_tensor(mask).dim() == 3:
        return torch.as_tensor(mask).unsqueeze(1)
    return mask


def finite_fill_mha():
    """vitref's MultiHeadAttention with -1e9 for blocked scores, dropout on the weights."""
    base = vitref.MultiHeadAttention

    class MultiHeadAttention(base):
        def forward(self, x, mask=None, causal=False, return_attention=False):
            q, k, v = rearrange(self.qkv(x), "b n (qkv h d) -> qkv b h n d", qkv=3, h=self.num_heads)
            drop = (lambda w: F.dropout(w, self.dropout)) if (self.dropout and self.training) else None
            out, weights = attend(q, k, v, _per_example(mask), dropout=drop)
            out = self.projection(rearrange(out, "b h n d -> b n (h d)"))
            return (out, weights) if return_attention else out
    return MultiHeadAttention


def finite_fill_loop():
    """vitref's MultiHeadAttentionLoop whose heads compute attention with -1e9."""
    base = vitref.MultiHeadAttentionLoop
    head = finite_fill_head()

    class MultiHeadAttentionLoop(base):
        def __init__(self, emb_size=768, num_heads=8):
            super().__init__(emb_size, num_heads)
            self.heads = nn.ModuleList(head(emb_size, self.head_dim) for _ in range(num_heads))
    return MultiHeadAttentionLoop


# --------------------------------------------------------------------------- wrong modules


def head_class(values="value", bias=True, detach=None, loop_float32=False, keys="key", **attend_kwargs):
    """A wrong AttentionHead: ``attend`` mistakes, ``values="x"`` (no value projection),
    ``bias=False``, ``detach`` ("key": the keys detached from the graph), ``loop_float32``
    (output gathered batch by batch into a float32 tensor)."""
    class AttentionHead(nn.Module):
        def __init__(self, dim, head_dim):
            super().__init__()
            self.dim, self.head_dim = dim, head_dim
            self.query = nn.Linear(dim, head_dim, bias=bias)
            self.key = nn.Linear(dim, head_dim, bias=bias)
            self.value = nn.Linear(dim, head_dim, bias=bias)

        def forward(self, x, mask=None):
            q, k = self.query(x), (self.key(x) if keys == "key" else self.query(x))
            if detach == "key":
                k = k.detach()
            v = self.value(x) if values == "value" else x
            kwargs = dict(attend_kwargs)
            if kwargs.get("scale") == "dim":
                kwargs["scale"] = self.dim
            out, weights = attend(q, k, v, mask, **kwargs)
            if loop_float32:
                gathered = torch.zeros(out.shape)
                for b in range(out.shape[0]):
                    gathered[b] = out[b]
                out = gathered
            return out, weights
    return AttentionHead


def mha_class(merge="b h n d -> b n (h d)", merge_fn=None, einsum="bhal, bhlv -> bhav", project=True,
              bias=True, dropout_mode="module", dropout_at="weights", detach=None, **attend_kwargs):
    """A wrong fused MultiHeadAttention (the slides' Q5 layout).

    ``merge_fn(out (B, h, N, d)) -> (B, N, E)`` replaces the rearrange; ``dropout_mode``:
    "module" (right), "functional" (F.dropout without training=, so also in eval mode),
    "missing", "output" (after the projection); ``dropout_at``: where "module" applies it
    ("weights", "scores", "values"); ``detach``: "qkv" (the qkv output detached).
    ``scale="emb"`` divides by sqrt(emb_size).
    """
    class MultiHeadAttention(nn.Module):
        def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
            super().__init__()
            self.emb_size, self.num_heads, self.p = emb_size, num_heads, dropout
            self.qkv = nn.Linear(emb_size, emb_size * 3, bias=bias)
            self.att_drop = nn.Dropout(dropout)
            self.projection = nn.Linear(emb_size, emb_size)

        def forward(self, x, mask=None):
            mixed = self.qkv(x)
            if detach == "qkv":
                mixed = mixed.detach()
            qkv = rearrange(mixed, "b n (qkv h d) -> qkv b h n d", h=self.num_heads, qkv=3)
            queries, keys, values = qkv[0], qkv[1], qkv[2]
            kwargs = dict(attend_kwargs)
            if kwargs.get("scale") == "emb":
                kwargs["scale"] = self.emb_size
            drop = None
            if dropout_mode == "module":
                drop = self.att_drop
            elif dropout_mode == "functional":
                drop = (lambda w: F.dropout(w, self.p))  # noqa: E731 - one-line stand-in, as students write it
            if mask is not None and torch.as_tensor(mask).dim() == 3:
                mask = mask.unsqueeze(1)
            _, att = attend(queries, keys, values, mask, dropout=drop if dropout_at != "values" else None,
                            dropout_at=dropout_at, **kwargs)
            if drop is not None and dropout_at == "values":
                values = drop(values)
            out = torch.einsum(einsum, att, values)
            out = merge_fn(out) if merge_fn is not None else rearrange(out, merge)
            out = self.projection(out) if project else out
            if dropout_mode == "output":
                out = self.att_drop(out)
            return out
    return MultiHeadAttention


def loop_class(head, combine="cat", project=True, head_width="split", same_head=False, pass_mask=True,
               weights="stack1", detach_heads=False, honours_return_attention=True, exercise_projection=False,
               always_pair=False):
    """A wrong MultiHeadAttentionLoop over ``head`` (a head class). ``combine``: "cat" (right),
    "cat_tokens", "mean", "reversed"; ``weights``: "stack1" (right), "stack0", "stack_last",
    "mean", "last"; ``pass_mask=False`` calls the heads without the mask; ``detach_heads``:
    head outputs detached; ``honours_return_attention=False`` always returns ``out`` alone,
    ``always_pair=True`` always ``(out, weights)``;
    ``exercise_projection``: the projection stays Linear(emb_size, emb_size) whatever the width."""
    class MultiHeadAttentionLoop(nn.Module):
        def __init__(self, emb_size, num_heads):
            super().__init__()
            width = emb_size // num_heads if head_width == "split" else emb_size
            self.heads = nn.ModuleList([head(emb_size, width) for _ in range(num_heads)])
            out_in = width * num_heads if combine in ("cat", "reversed") else width
            if exercise_projection:
                out_in = emb_size
            self.projection = nn.Linear(out_in, emb_size)

        def forward(self, x, mask=None, return_attention=False):
            heads = [self.heads[0]] * len(self.heads) if same_head else self.heads
            results = [h(x, mask) if pass_mask else h(x) for h in heads]
            outputs = [r[0].detach() if detach_heads else r[0] for r in results]
            maps = [r[1] for r in results]
            if combine == "cat":
                out = torch.cat(outputs, dim=-1)
            elif combine == "reversed":
                out = torch.cat(outputs[::-1], dim=-1)
            elif combine == "cat_tokens":
                out = torch.cat(outputs, dim=1)
            else:
                out = torch.stack(outputs).mean(0)
            out = self.projection(out) if project else out
            if not (return_attention and honours_return_attention) and not always_pair:
                return out
            stacked = {"stack1": lambda: torch.stack(maps, dim=1), "stack0": lambda: torch.stack(maps, dim=0),
                       "cat": lambda: torch.cat(maps, dim=-1),
                       "stack_last": lambda: torch.stack(maps, dim=-1),
                       "mean": lambda: torch.stack(maps, dim=1).mean(1), "last": lambda: maps[-1]}[weights]()
            return out, stacked
    return MultiHeadAttentionLoop


def masking_mistakes(variant, *, fill_zero: bool = True, inverted_also: tuple = ()) -> list[Mistake]:
    """The masking mistakes of every question that masks attention scores, in one wording:
    ``variant(**switches)`` builds the question's answer with :func:`attend`'s switches changed
    (``mask_mode``, ``fill``). ``fill_zero``: also the mistake of filling with 0 (the questions whose
    given code does not fix the fill); ``inverted_also``: more ways to invert the mask."""
    mistakes = [
        Mistake("mask_ignored", "the mask is ignored",
                "When a mask is given, set the blocked scores (mask == 0) to -1e9 (or -inf) before the softmax.",
                variant(mask_mode=None)),
        Mistake("mask_inverted", "mask polarity inverted",
                "The mask is 1/True where a query MAY attend: block the positions where it is 0/False "
                "(masked_fill(mask == 0, ...)).", variant(mask_mode="inverted", fill=FINITE),
                also=(variant(mask_mode="inverted", fill=float("-inf")), *inverted_also)),
        Mistake("mask_after_softmax", "mask applied after the softmax",
                "Blocked scores must be set to -1e9 (or -inf) before the softmax, so the allowed weights "
                "still sum to 1.", variant(mask_mode="after")),
    ]
    if fill_zero:
        mistakes.append(Mistake("fill_zero", "blocked scores set to 0 instead of a large negative number",
                                "A score of 0 still gets weight exp(0) after the softmax: fill blocked scores "
                                "with -1e9 (or -inf).", variant(fill=0.0)))
    mistakes.append(Mistake("nan_fully_masked", "fully masked rows give NaN",
                            "A query whose keys are all blocked gets softmax over all -inf = 0/0 = NaN. Use a "
                            "large negative number such as -1e9 instead of -inf, or set those rows to zero.",
                            variant(fill=float("-inf"))))
    return mistakes
