"""Diagnoses of chapters 7 and 8 (grader side): when no catalogued mistake matches, name the
property that failed, from the cases that fail and from the student's own outputs.

A case may carry ``params["tests"]``: the one property it isolates ("mask", "grads",
"causal"...). When every failing case isolates the same property and every other case
passes, that property is what the answer gets wrong (:func:`by_tests`). Other diagnoses
compare single outputs with the reference's (which of a ViT's outputs is first wrong) or
read the student's outputs directly (attention weights with NaN rows, a mask that lets a
query see the future).
"""
from __future__ import annotations

import numpy as np

from ..compare import case_rows, property_problem
from ..messages import compare
from ..variants import reference_outputs
from ._entry import registered


def case_verdicts(question, data) -> list[bool | None]:
    """Per case: True (matches a reference), False (differs or raised), None (not comparable)."""
    try:
        rows = case_rows(question, data, registered(question.id).references)
    except Exception:  # noqa: BLE001 - a diagnosis never fails the verdict
        return [None] * len(data.get("cases") or [])
    return [None if row.status == "structure" else row.status == "ok" for row in rows]


def by_tests(sentences: dict, combos: dict | None = None):
    """A diagnosis from the ``tests`` tags of the failing cases, when only tagged cases fail:
    ``sentences[tag]`` for one tag, ``combos[frozenset(tags)]`` for a known combination."""
    def diagnose(question, data):
        verdicts = case_verdicts(question, data)
        failing = [(case, student_case) for case, student_case, ok
                   in zip(question.cases, data.get("cases") or [], verdicts) if ok is False]
        if not failing or any(not case.params.get("tests") or student_case.get("error")
                              for case, student_case in failing):
            return None                 # an exception speaks for itself
        failing = [case for case, _ in failing]
        tags = frozenset(case.params["tests"] for case in failing)
        if combos and tags in combos:
            return combos[tags]
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


def property_anywhere(question, data) -> str | None:
    """The first property a case checks whatever the numbers (float64 kept, every parameter
    reached by the gradient) that fails, with the case: more precise than the numbers of
    another case that fail because of it."""
    verdicts = case_verdicts(question, data)
    first_failing = next((i for i, ok in enumerate(verdicts) if ok is False), None)
    for index, (case, student_case) in enumerate(zip(question.cases, data.get("cases") or [])):
        if student_case.get("error"):
            continue
        found = property_problem(question, case, student_case)
        if found:
            # the feedback already starts with the first failing case's problem: not said twice
            return None if index == first_failing else f"{found} (on input {case.label})"
    return None


def standard(tests: dict, *more, combos: dict | None = None):
    """The diagnoses every question of these chapters starts with: a failed property, a
    float32/float64 clash, the one tagged property whose cases alone fail; then ``more``."""
    return first(property_anywhere, dtype_mix, by_tests(tests, combos), *more)


def error_messages(data) -> list[str]:
    return [f"{c['error'].get('type', '')}: {c['error'].get('message', '')}" for c in data.get("cases") or []
            if c.get("error")]


def dtype_mix(question, data) -> str | None:
    """A float32/float64 clash in the student's code (raised on the float64 inputs only)."""
    for text in error_messages(data):
        low = text.lower()
        if ("dtype" in low or "scalar type" in low or "should be the same" in low) and (
                "double" in low or "float64" in low):
            return ("your code mixes float32 and float64 tensors (it fails on the float64 inputs): create or cast "
                    "intermediate tensors with the input's dtype (e.g. dtype=x.dtype, .to(x.dtype)) instead of "
                    ".float() or a default-dtype torch.zeros/torch.tensor")
    return None


def first_wrong_output(question, data):
    """(case, output name) of the first output that differs from every reference, in the
    order the recipe recorded them; None when the outputs of every case are right."""
    references_of = registered(question.id).references
    for index, (case, student_case) in enumerate(zip(question.cases, data.get("cases") or [])):
        if student_case.get("error") or property_problem(question, case, student_case):
            continue
        got = student_case.get("outputs") or {}
        references, _ = reference_outputs(question, references_of, index, student_case, verify=False)
        if not references:
            continue
        best = None
        for reference in references:
            wrong = [name for name, value in reference.items()
                     if name not in got or compare(name, got[name], value, case) is not None]
            if best is None or len(wrong) < len(best):
                best = wrong
        if best:
            return case, best
    return None


# --------------------------------------------------------------------------- attention weights


def weights_problem(weights, mask=None) -> str | None:
    """What is wrong with attention weights ``(..., T, S)`` whatever the scores: NaN rows, rows
    not summing to 1, weight on blocked keys, the wrong axis normalised."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim < 2:
        return None
    allowed = None
    if mask is not None:
        try:
            allowed = np.broadcast_to(np.asarray(mask) != 0, w.shape)
        except ValueError:
            allowed = None
    if np.isnan(w).any():
        if allowed is not None and np.isnan(w[~allowed.any(-1)]).any():
            return ("a query whose keys are all blocked gets NaN weights (softmax of a row of -inf is 0/0): fill "
                    "blocked scores with a large negative number such as -1e9 instead of -inf")
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
