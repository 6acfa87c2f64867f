"""Comparing an answer's outputs with the references' (grader side): the properties decided
before or beside the numbers (a missing bias, float64 kept, every trained parameter reached by the
gradient), the outputs themselves, and :func:`case_rows`, every case of a probe judged the
judge's way (shared by the judge's diagnoses in the catalogue).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..questions.base import Case, Question
from .messages import compare, loosely_equal, outputs_equal, precision_problem
from .variants import reference_outputs

# a reference gradient this large is not a rounding error of a zero one (the keys' bias: ~1e-17)
CLEARLY_NONZERO = 1e-6


def property_problem(question: Question, case: Case, student_case: dict) -> str | None:
    """A property decided before any reference runs: where the exercise's layers all have a
    bias (``biases=True``), a parameter named as a layer's weight with no bias beside it.
    Read from the reported names, it can only fail an answer; the guarantee is the
    candidates' (a reference bias is never filled with zeros in those cases). Precision
    (float64 in, float64 out) and parameter gradients are decided from values, in
    :func:`compare_case`."""
    if case.params.get("biases"):
        missing = _missing_bias(student_case)
        if missing:
            return f"the layer {missing} has a weight but no bias, where the exercise's layer has one"
    return None


def _missing_bias(student_case: dict) -> str | None:
    """The first nn.Linear / conv / LayerNorm of the student's modules that has a weight and
    no bias (cases with ``biases=True``: the exercise's layers all have one), or None."""
    for record in student_case.get("modules") or []:
        params = record.get("params") or []
        names = {p[0] for p in params}
        for name, _shape, owner in params:
            prefix, _, leaf = name.rpartition(".")
            if leaf == "weight" and (owner in ("linear", "conv") or "norm" in str(owner).lower()):
                if (f"{prefix}.bias" if prefix else "bias") not in names:
                    kind = {"linear": "nn.Linear", "conv": "nn.Conv2d"}.get(owner, owner)
                    return f"{prefix or record.get('class', 'of your module')} ({kind})"
    return None


def _wanted(name: str, fragments) -> bool:
    """Whether the gradient check covers parameter ``name``: it contains one of the fragments
    (all parameters when there are only exclusions), and none of the ``"!fragment"`` ones (e.g.
    ``"!key.bias"``: the keys' bias adds the same amount to every score of a query, which the
    softmax cancels, so its gradient is zero by design)."""
    name = name.lower()
    include = [f for f in fragments if not f.startswith("!")]
    if any(f[1:] in name for f in fragments if f.startswith("!")):
        return False
    return not include or any(f in name for f in include)


def outputs_matching(question: Question, case: Case, got: dict, expected: dict) -> int:
    """How many of ``expected``'s outputs ``got`` matches (to float32's precision: an answer
    that lost float64's is closest to the reference it would otherwise match)."""
    return sum(name in got and loosely_equal(name, got[name], value, case) for name, value in expected.items())


def compare_outputs(question: Question, case: Case, got: dict, expected: dict) -> str | None:
    for name, value in expected.items():
        if name not in got:
            return f"no {name} was returned"
        message = compare(name, got[name], value, case, question.outputs.get(name, ""))
        if message:
            return message
    return None


def compare_case(question: Question, case: Case, student_case: dict, expected: dict) -> str | None:
    """In order: a parameter the reference trains and the answer does not (cases with
    ``param_grads``); an output right only to float32's precision in a float64 case; the
    outputs; the parameters' gradients."""
    checked = case.params.get("param_grads")
    got = student_case.get("outputs") or {}
    message = _compare_param_grads(case, student_case, expected, presence=True) if checked else None
    message = message or next((m for name, value in expected.items() if name in got
                               for m in [precision_problem(name, got[name], value, case)] if m), None)
    message = message or compare_outputs(question, case, got, expected)
    if message is None and checked:
        message = _compare_param_grads(case, student_case, expected)
    return message


def _compare_param_grads(case: Case, student_case: dict, expected: dict, presence: bool = False) -> str | None:
    """Each of the student's parameters that the reference's output reaches (and that the
    case checks: ``param_grads`` True or name fragments) must come with a gradient array equal
    to the reference's float64 gradient, carried onto the student's layout by the same
    candidate that loaded the values. No array: the parameter is frozen or detached; an
    array of zeros where the reference's is not: detached or unused. ``presence``: only those
    two. Nothing the student's process says about a parameter decides this, only the arrays
    it sent."""
    wanted = case.params.get("param_grads")
    records = student_case.get("modules") or []
    for (m, i), value in sorted(getattr(expected, "param_grads", {}).items()):
        if value is None or m >= len(records) or i >= len(records[m].get("params") or []):
            continue
        name = str(records[m]["params"][i][0])
        if wanted is not True and not _wanted(name, wanted):
            continue            # a parameter this exercise does not use yet (e.g. positions before Q4)
        got = (records[m].get("grads") or {}).get(str(i))
        trained = float(np.max(np.abs(value), initial=0.0)) > CLEARLY_NONZERO
        if got is None and not trained:
            continue            # the reference's gradient is zero too (the keys' bias): nothing to train
        if got is None:
            return (f"the gradient of the parameter {name} is missing: no gradient reaches it, so it would never "
                    f"be trained")
        got = np.asarray(got)
        if got.shape == value.shape and trained and not np.any(got):
            return (f"the gradient of the parameter {name} is zero: the output does not depend on it through "
                    f"autograd")
        message = None if presence else compare(f"the gradient of the parameter {name}", got, value, case,
                                                key="param_grads")
        if message:
            return message
    return None


def param_grads_equal(student_case: dict, expected: dict) -> bool:
    """For naming mistakes: the variant's parameter gradients are the student's (loose
    tolerance; a parameter the variant does not reach is not compared)."""
    records = student_case.get("modules") or []
    for (m, i), value in getattr(expected, "param_grads", {}).items():
        if m >= len(records):
            return False
        got = (records[m].get("grads") or {}).get(str(i))
        if value is None:
            continue
        if got is None or not outputs_equal({"g": got}, {"g": value}):
            return False
    return True


def value_property(question: Question, case: Case, student_case: dict, references: list) -> str | None:
    """The properties decided from values, when every acceptable reference finds one: a
    parameter the reference trains whose gradient is missing or zero (cases with
    ``param_grads``), an output right only to float32's precision in a float64 case."""
    found = []
    for reference in references:
        message = (_compare_param_grads(case, student_case, reference, presence=True)
                   if case.params.get("param_grads") else None)
        if message is None:
            got = student_case.get("outputs") or {}
            message = next((m for name, value in reference.items() if name in got
                            for m in [precision_problem(name, got[name], value, case)] if m), None)
        if message is None:
            return None
        found.append(message)
    return found[0] if found else None


@dataclass
class CaseRow:
    """One case of a probe, judged the judge's way (for the catalogues' diagnoses).

    ``status``: "ok" (a reference matches), "error" (the answer raised: ``detail`` is the error),
    "property" (a property failed: ``detail`` is the sentence), "structure" (the parameters fit
    no reference) or "differs"; ``references``: the acceptable reference outputs (cached)."""

    index: int
    case: Case
    student: dict
    status: str
    detail: Any = None
    references: list = field(default_factory=list)


def case_rows(question: Question, data: dict, references: Callable[[], list]) -> list[CaseRow]:
    """Every case of ``data`` as a :class:`CaseRow`: the one loop the diagnoses share.
    ``references``: the question's catalogue entry's ``references``."""
    rows = []
    for index, (case, student) in enumerate(zip(question.cases, data.get("cases") or [])):
        if student.get("error"):
            rows.append(CaseRow(index, case, student, "error", student["error"]))
            continue
        prop = property_problem(question, case, student)
        if prop:
            rows.append(CaseRow(index, case, student, "property", prop))
            continue
        outputs, _ = reference_outputs(question, references, index, student, verify=False)
        if not outputs:
            rows.append(CaseRow(index, case, student, "structure"))
            continue
        prop = value_property(question, case, student, outputs)
        if prop:
            rows.append(CaseRow(index, case, student, "property", prop, outputs))
            continue
        matched = any(compare_case(question, case, student, r) is None for r in outputs)
        rows.append(CaseRow(index, case, student, "ok" if matched else "differs", None, outputs))
    return rows


def values_close(got, expected, params) -> bool:
    """Whether the answer ``got`` counts as ``expected`` under the case's comparison."""
    got, expected = float(got), float(expected)
    if math.isnan(got) and math.isnan(expected):
        return True                                  # a catalogued "NaN" answer
    if not (math.isfinite(got) and math.isfinite(expected)):
        return False
    if "options" in params:
        return got == expected
    atol, rtol = float(params.get("atol", 0.0)), float(params.get("rtol", 0.0))
    if atol == 0 and rtol == 0:
        return got == expected
    return abs(got - expected) <= atol + rtol * abs(expected)
