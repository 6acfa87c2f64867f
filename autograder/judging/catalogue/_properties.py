"""Diagnoses shared by the catalogues (grader side): when no catalogued mistake matches, name
the property that failed from the cases that fail and from the student's own outputs.

A case may carry ``params["tests"]``: the one property it isolates ("mask", "dropout_eval",
"grads"...). When every failing case isolates the same property and every other case passes,
that property is what the answer gets wrong; :func:`by_tests` turns that into a sentence.
"""
from __future__ import annotations

import numpy as np


def case_verdicts(question, data) -> list[bool | None]:
    """Per case: True (matches a reference), False (differs or raised), None (not comparable)."""
    from ..judge import _compare_outputs, property_problem, reference_outputs

    verdicts: list[bool | None] = []
    for index, (case, student_case) in enumerate(zip(question.cases, data.get("cases") or [])):
        if student_case.get("error") or property_problem(question, case, student_case):
            verdicts.append(False)
            continue
        try:
            references, _ = reference_outputs(question, index, student_case, verify=False)
        except Exception:  # noqa: BLE001 - a diagnosis never fails the verdict
            verdicts.append(None)
            continue
        if not references:
            verdicts.append(None)
            continue
        verdicts.append(any(_compare_outputs(question, case, student_case.get("outputs") or {}, r) is None
                            for r in references))
    return verdicts


def failing_tests(question, data) -> set | None:
    """The ``tests`` tags of the failing cases when only tagged cases fail, else None."""
    verdicts = case_verdicts(question, data)
    failing = [case for case, ok in zip(question.cases, verdicts) if ok is False]
    if not failing or any(ok is False and not case.params.get("tests")
                          for case, ok in zip(question.cases, verdicts)):
        return None
    return {case.params["tests"] for case in failing}


def by_tests(sentences: dict, combos: dict | None = None):
    """A diagnosis from the tags of the failing cases: ``sentences[tag]`` when one tag fails,
    ``combos[frozenset(tags)]`` for a known combination."""
    def diagnose(question, data):
        tags = failing_tests(question, data)
        if not tags:
            return None
        if combos and frozenset(tags) in combos:
            return combos[frozenset(tags)]
        if len(tags) == 1:
            return sentences.get(next(iter(tags)))
        return None
    return diagnose


def first(*diagnoses):
    """The first diagnosis that names something."""
    def diagnose(question, data):
        for fn in diagnoses:
            try:
                found = fn(question, data)
            except Exception:  # noqa: BLE001 - try the next one
                found = None
            if found:
                return found
        return None
    return diagnose


def error_messages(data) -> list[str]:
    return [f"{c['error'].get('type', '')}: {c['error'].get('message', '')}" for c in data.get("cases") or []
            if c.get("error")]


def dtype_mix(data) -> str | None:
    """A float32/float64 clash in the student's code (raised on the float64 inputs only)."""
    for text in error_messages(data):
        low = text.lower()
        if ("dtype" in low or "scalar type" in low) and ("double" in low or "float64" in low):
            return ("your code mixes float32 and float64 tensors (it fails on the float64 inputs): create or cast "
                    "intermediate tensors with the input's dtype (e.g. .to(weight.dtype), dtype=x.dtype) instead "
                    "of .float() or a default-dtype torch.zeros/torch.eye")
    return None


# --------------------------------------------------------------------------- attention weights


def _rows(weights: np.ndarray) -> np.ndarray:
    return np.asarray(weights, dtype=np.float64)


def weights_problem(weights, mask=None, reference=None) -> str | None:
    """What is wrong with attention weights ``(..., T, S)`` whatever the scores: NaN rows, rows
    not summing to 1, weight on blocked keys, the wrong axis normalised."""
    w = _rows(weights)
    if w.ndim < 2:
        return None
    allowed = None if mask is None else np.broadcast_to(np.asarray(mask) != 0, w.shape)
    if np.isnan(w).any():
        if allowed is not None and np.isnan(w[~allowed.any(-1)]).any():
            return ("a query whose keys are all masked gets NaN weights (softmax of a row of -inf is 0/0): fill "
                    "blocked scores with a large negative number such as -1e9, or set those rows to zero")
        return "the attention weights contain NaN"
    if allowed is not None:
        leaked = np.abs(np.where(allowed, 0.0, w))
        live = allowed.any(-1)
        if (leaked.max(-1)[live] > 1e-6).any():
            if (np.abs(np.where(allowed, w, 0.0)).max(-1)[live] < 1e-6).any():
                return ("the attention weights are nonzero exactly where the mask blocks a key and zero where it "
                        "allows one: the mask polarity is inverted (block where mask == 0)")
            return ("the attention weights are not zero where the mask blocks a key: the mask is not applied "
                    "(or not passed on) before the softmax")
    sums = w.sum(-1)
    ok = np.isclose(sums, 1.0, atol=1e-4)
    if allowed is not None:
        ok |= ~allowed.any(-1) & (np.isclose(sums, 0.0, atol=1e-4) | np.isclose(sums, 1.0, atol=1e-4))
    if not ok.all():
        if np.allclose(w.sum(-2), 1.0, atol=1e-4):
            return "the attention weights sum to 1 over the queries (axis -2), not over the keys (the last axis)"
        if allowed is not None and (sums[allowed.any(-1)] < 1 - 1e-4).all():
            return ("the attention weights of a query do not sum to 1 over its allowed keys: the mask is applied "
                    "after the softmax (set blocked scores to -1e9 before it)")
        return "each row of attention weights (one query, over the keys) should sum to 1"
    return None
