"""Helpers shared by the chapter checks (no vitref import at module level)."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import torch


def vitref():
    """The reference package, imported on first use (grader side only)."""
    return importlib.import_module("vitref")


def first_if_tuple(value):
    """Modules may return ``out`` or ``(out, extras)``; the checks read ``out``."""
    if type(value) in (tuple, list) and len(value) >= 1:
        return value[0]
    return value


def parts(**names):
    """A ``reference_parts`` callable: name -> zero-argument factory evaluated on demand."""
    def build():
        return SimpleNamespace(**{name: factory() for name, factory in names.items()})
    return build


def call_with_mask(rec, fn, *args, mask=None, mask_name="mask"):
    """Call ``fn(*args, mask)`` with a bool mask; if the answer rejects bool masks, retry with
    a 0/1 float mask (the contract allows both: 0/False = blocked)."""
    if mask is None:
        return rec.call(fn, *args)
    first_error = None
    for variant in (mask, mask.float(), mask.long()):
        try:
            return rec.call(fn, *args, **{mask_name: variant}) if mask_name != "positional" else rec.call(
                fn, *args, variant)
        except Exception as error:  # noqa: BLE001 - the student's code may raise anything
            if type(error).__name__ == "ForbiddenCall":
                raise
            if first_error is None:
                first_error = error
    raise first_error


def build_flexible(rec, answer, args: tuple, kwargs: dict, **meta):
    """Build with keyword arguments (the exercise's parameter names); if the answer's
    constructor names them differently, retry with the same values positionally."""
    try:
        return rec.build(answer, **kwargs, **meta)
    except TypeError as error:
        if "unexpected keyword argument" not in str(error):
            raise
    return rec.build(answer, *args, **meta)


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
