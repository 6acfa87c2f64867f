"""Helpers of the probe recipes (``run_case``), shared by the chapters."""
from __future__ import annotations


def first_if_tuple(value):
    """Modules may return ``out`` or ``(out, extras)``; the checks read ``out``."""
    if type(value) in (tuple, list) and len(value) >= 1:
        return value[0]
    return value


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
        except Exception as error:  # the student's code may raise anything (ForbiddenCall re-raised)
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
