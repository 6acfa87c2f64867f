"""Helpers of the probe recipes (``run_case``), shared by the chapters."""
from __future__ import annotations

import numpy as np

from . import inputs as I
from .errors import CaseFailure


def first_if_tuple(value):
    """``out`` of a forward whose contract returns ``(out, extras)`` (a KV cache's ``(out, cache)``)."""
    if type(value) in (tuple, list) and len(value) >= 1:
        return value[0]
    return value


def single_output(value, what: str, attention_flag: bool = False):
    """The output of a forward whose contract returns one tensor: a tuple or a list is refused
    (its first item is not taken: a forward that always returns ``(out, weights)`` breaks every
    caller that expects a tensor). ``attention_flag``: the forward takes ``return_attention``, and
    was called without it."""
    if type(value) not in (tuple, list):
        return value
    got = f"a {type(value).__name__} of {len(value)} items"
    if attention_flag:
        raise CaseFailure(f"{what} with return_attention=False should return the output tensor alone, got {got}")
    raise CaseFailure(f"{what} should return the output tensor alone, got {got}")


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


def case_mask(p):
    """The bool mask (True = allowed) a case's params describe, or None: ``causal`` (T),
    or ``mask`` (a shape) with optional ``full_rows`` (entirely blocked rows). Shared by
    the recipes and the grader's diagnoses, so both see the same mask."""
    if "causal" in p:
        return np.tril(np.ones((p["causal"], p["causal"]), dtype=bool))
    if "mask" in p:
        return I.bernoulli_mask(p["mask"], p["seed"], full_rows=p.get("full_rows", ()))
    return None


# The keys' bias adds q.b_k to every score of a query: the softmax cancels it, so its gradient is
# zero by design (a right answer); the gradient checks leave it out (``param_grads`` exclusions).
KEY_BIAS = ("!key.bias", "!keys.bias", "!k.bias", "!k_proj.bias", "!to_k.bias", "!w_k.bias", "!wk.bias",
            "!k_linear.bias")


def require_linear_biases(module, what: str):
    """The exercise's layers are ``nn.Linear`` with a bias; ``bias=False`` builds another model
    (raw ``nn.Parameter`` matrices are a different formulation and are left alone)."""
    from torch import nn

    missing = [name or "the module" for name, sub in module.named_modules()
               if isinstance(sub, nn.Linear) and sub.bias is None]
    if missing:
        raise CaseFailure(f"the linear layer{'s' if len(missing) > 1 else ''} {', '.join(missing)} of {what} "
                          f"{'have' if len(missing) > 1 else 'has'} no bias (nn.Linear(..., bias=False)); the "
                          f"exercise's layers are nn.Linear(in, out) with a bias: keep it")


def logits_and_targets(rec, p) -> tuple:
    """A loss question's inputs as tensors: logits (B, C) drawn with ``p["seed"]`` and scaled by ``p["scale"]``
    (in ``p["dtype"]``, requiring grad when ``p["grads"]``), and targets (B,), random classes unless
    ``p["unlikely_targets"]`` (each row's smallest logit: a probability far below float range) or
    ``p["likely_targets"]`` (each row's largest)."""
    logits = I.randn((p["B"], p["C"]), p["seed"], p["scale"])
    targets = I.randint((p["B"],), p["C"], p["seed"])
    if p.get("unlikely_targets"):
        targets = logits.argmin(axis=1).astype(np.int64)
    if p.get("likely_targets"):
        targets = logits.argmax(axis=1).astype(np.int64)
    return rec.tensor(logits, dtype=p.get("dtype"), requires_grad=bool(p.get("grads"))), rec.tensor(targets)


def record_loss(rec, value) -> None:
    """Record the answer's loss as the output ``loss``, a one-element array as a scalar."""
    loss = rec.output("loss", value)
    if loss.size == 1:
        rec.outputs["loss"] = loss.reshape(())
