"""Helpers shared by the catalogues (grader side)."""
from __future__ import annotations

from types import SimpleNamespace

import torch


def parts(**names):
    """A ``reference_parts`` callable: name -> zero-argument factory evaluated on demand."""
    def build():
        return SimpleNamespace(**{name: factory() for name, factory in names.items()})
    return build


def function_answer(name: str, fn):
    """A ``build`` for a function question whose answer is called with positional arguments: a function named
    ``name`` (the question's answer name) returning ``fn`` of them, whatever the parts."""
    def build(parts):
        def answer(*args):
            return fn(*args)
        answer.__name__ = answer.__qualname__ = name
        return answer
    return build


def mistaken_mask_softmax(scores, mask, mask_mode="fill", softmax_dim=-1, fill=float("-inf")):
    """Attention weights from ``scores`` as a catalogue mistake computes them. ``mask_mode``:
    ``"fill"`` (right: blocked = mask 0 gets ``fill``), ``"inverted"`` (fills where mask != 0),
    ``"after"`` (zeroes weights after the softmax), anything else ignores the mask."""
    if mask is not None and mask_mode == "fill":
        scores = scores.masked_fill(mask == 0, fill)
    elif mask is not None and mask_mode == "inverted":
        scores = scores.masked_fill(mask != 0, fill)
    weights = torch.softmax(scores, dim=softmax_dim)
    if mask is not None and mask_mode == "after":
        weights = weights * (mask != 0)
    return weights
