"""Naming the mistake of a failed answer (grader side): the one framework every question uses.

A question's catalogue (:mod:`autograder.judging.catalogue`) is its list of mistakes, each a
:class:`autograder.judging.model.Mistake` recognised in one of three ways:

* ``build``: a wrong answer written as a student writes it, run in the grader on the student's
  inputs with the student's parameter values;
* ``change``: a :class:`Change`, the question's own references run with one part changed (a
  residual dropped, two LayerNorms swapped, ReLU for GELU, the keys used as values...): a
  counterfactual, so one entry covers a mistake in every question where the changed part appears;
* ``detect``: a symptom read off the cases the answer failed, through a :class:`View` (every case
  judged once, the judge's way): "the weights of a row do not sum to 1", "only the gradients
  differ"...

:func:`name_mistake` walks the catalogue in its order: the answers of ``build`` and ``change``
entries first (the one whose outputs are the student's on every case, preferring one that raised
exactly where and as the student's code raised), then the symptoms. It runs only after an answer
failed: a passing answer costs nothing here.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..questions.base import Question
from .compare import CaseRow, case_rows, compare_outputs, param_grads_equal, values_close
from .messages import outputs_equal
from .model import Mistake
from .params import AlignmentError
from .variants import MAX_CANDIDATES, NoMoreCandidates, NotApplicable, run_variant


# --------------------------------------------------------------------------- counterfactuals


@dataclass(frozen=True)
class Alteration:
    """One way of changing a reference. ``surgery(module) -> bool`` changes a built reference
    module in place (hooks, a submodule or a buffer replaced; never its parameters, so the
    student's values load as into the reference) and says whether it found the part to change;
    ``call(reference, *args, **kwargs)`` calls a reference function differently (other
    arguments, a changed result). ``detail`` says which form matched ("around the
    feed-forward block"), added to the mistake's title."""

    detail: str = ""
    surgery: Callable[[Any], bool] | None = None
    call: Callable[..., Any] | None = None


@dataclass(frozen=True)
class Change:
    """A counterfactual mistake: the question's references with one part changed, in one or
    more forms (each form tried with each reference)."""

    forms: tuple[Alteration, ...]

    def answers(self, references: list) -> list[tuple[Any, str]]:
        """(altered reference, detail) for every form and reference it applies to."""
        found = []
        for form in self.forms:
            for reference in references:
                answer = altered(reference, form)
                if answer is not None:
                    found.append((answer, form.detail))
        return found


def change(*forms: Alteration) -> Change:
    return Change(tuple(forms))


def altered(reference, form: Alteration):
    """``reference`` with ``form`` applied: for a class, a subclass whose instances are changed by
    ``form.surgery`` once built (NotApplicable when it finds nothing to change); for a function,
    a function calling it through ``form.call``. None when the form cannot apply to it."""
    if inspect.isclass(reference):
        if form.surgery is None:
            return None
        surgery = form.surgery

        class Altered(reference):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                if not surgery(self):
                    raise NotApplicable(form.detail)

        Altered.__name__ = Altered.__qualname__ = reference.__name__
        return Altered
    if form.call is None:
        return None
    call = form.call

    @functools.wraps(reference)
    def altered_function(*args, **kwargs):
        return call(reference, *args, **kwargs)
    return altered_function


# --------------------------------------------------------------------------- symptoms


class View:
    """The cases of one failed answer as the symptoms read them: every case judged once, the
    judge's way (:func:`autograder.judging.compare.case_rows`, references cached), and what a
    symptom needs around it. ``references``: the question's catalogue entry's."""

    def __init__(self, question: Question, data: dict, references: Callable[[], list]):
        self.question, self.data, self.references = question, data, references
        self._rows: list[CaseRow] | None = None
        self.memo: dict = {}        # readings shared by several symptoms (catalogue._symptoms.keyed)

    @property
    def cases(self) -> list:
        return list(zip(self.question.cases, self.data.get("cases") or []))

    def outputs(self, name: str) -> list[tuple]:
        """(case, the answer's output ``name``) for each case whose answer returned that output."""
        return [(case, got) for case, student_case in self.cases
                if (got := (student_case.get("outputs") or {}).get(name)) is not None]

    @property
    def rows(self) -> list[CaseRow]:
        if self._rows is None:
            self._rows = case_rows(self.question, self.data, self.references)
        return self._rows

    @property
    def failing(self) -> list[CaseRow]:
        return [row for row in self.rows if row.status != "ok"]

    def errors(self) -> list[str]:
        """The messages of the exceptions the answer raised (``type: message``), case by case."""
        return [f"{c['error'].get('type', '')}: {c['error'].get('message', '')}" for c in self.data.get("cases") or []
                if c.get("error")]

    def kind(self, row: CaseRow) -> str:
        """A row's status, with "differs" split: "grad" when only the gradients (``grad_*``) differ
        from some reference, else "output"."""
        if row.status != "differs":
            return row.status
        return "grad" if self._matching_but_gradients(row) is not None else "output"

    def closest(self, row: CaseRow) -> dict | None:
        """The reference whose outputs other than gradients the student's match, else the first."""
        found = self._matching_but_gradients(row)
        return found if found is not None else (row.references[0] if row.references else None)

    def _matching_but_gradients(self, row: CaseRow) -> dict | None:
        """The first reference whose outputs other than the gradients (``grad_*``) the student's match."""
        got = {k: v for k, v in (row.student.get("outputs") or {}).items() if not k.startswith("grad_")}
        for reference in row.references:
            plain = {k: v for k, v in reference.items() if not k.startswith("grad_")}
            if compare_outputs(self.question, row.case, got, plain) is None:
                return reference
        return None


# --------------------------------------------------------------------------- naming


@dataclass
class Named:
    """The mistake found, and the detail its recogniser gave (a symptom's sentence, a change's form)."""

    mistake: Mistake
    detail: str = ""
    extra: dict = field(default_factory=dict)


def name_mistake(question: Question, data: dict, catalogue, verify: bool = True) -> Named | None:
    """The mistake of ``catalogue`` (the question's entry) the failed answer ``data`` made, or None."""
    if question.kind == "value":
        return _match_value(question, data, catalogue)
    if catalogue.match is not None:
        key = catalogue.match(question, data)
        found = next((m for m in catalogue.catalogue if m.key == key), None)
        return Named(found) if found is not None else None
    best, best_rank = None, 0
    for mistake, answer, detail in _runnable(question, catalogue):
        try:
            rank = _matches(question, answer, data, verify)
        except NotApplicable:
            continue
        if rank == 3:
            return Named(mistake, detail)
        if rank > best_rank:
            best, best_rank = Named(mistake, detail), rank
    if best is not None:
        return best
    view = View(question, data, catalogue.references)
    for mistake in catalogue.catalogue:
        if mistake.detect is None:
            continue
        try:
            sentence = mistake.detect(view)
        except Exception:  # noqa: BLE001 - a symptom that cannot read these outputs names nothing
            sentence = None
        if sentence:
            return Named(mistake, sentence)
    return None


def _runnable(question: Question, catalogue):
    """(mistake, answer, detail) for every ``build`` and ``change`` entry, in catalogue order."""
    parts = catalogue.reference_parts() if catalogue.reference_parts is not None else None
    references = None
    for mistake in catalogue.catalogue:
        if mistake.build is not None:
            for answer in mistake.answers(parts):
                yield mistake, answer, ""
        elif mistake.change is not None:
            references = catalogue.references() if references is None else references
            for answer, detail in mistake.change.answers(references):
                yield mistake, answer, detail


def _match_value(question: Question, data: dict, catalogue) -> Named | None:
    """A value question's catalogued wrong value equal to the student's answer (under the
    question's tolerance), or None."""
    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error"):
        return None
    got = (cases[0].get("outputs") or {}).get("answer")
    if got is None:
        return None
    got = float(np.asarray(got).reshape(-1)[0])
    for mistake in catalogue.catalogue:
        for answer in mistake.answers(None):
            if values_close(got, answer, question.cases[0].params):
                return Named(mistake)
    return None


def _same_error(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a.get("type") == b.get("type") and a.get("message") == b.get("message"))


def _matches(question, answer, data, verify) -> int:
    """A wrong answer matches when, on every case, it returns the student's outputs or raises
    where the student's code raised; and either some outputs agreed or every exception is
    identical in type and message (so "raises everywhere" alone names nothing). 3: a match
    whose exceptions (if any) are the student's, type and message; 2: of the student's types;
    1: another match; 0: none."""
    outputs_agreed, messages_identical, types_identical = 0, True, True
    for index, student_case in enumerate(data["cases"]):
        agreed, same_message, same_type = _agrees_on_case(question, answer, index, student_case, verify)
        if not agreed:
            return 0
        outputs_agreed += not student_case.get("error")
        messages_identical &= same_message
        types_identical &= same_type
    if not (outputs_agreed > 0 or messages_identical):
        return 0
    return 3 if messages_identical else 2 if types_identical else 1


def _agrees_on_case(question, answer, index, student_case, verify) -> tuple[bool, bool, bool]:
    """(agreed, same exception message, same exception type) of ``answer`` with the student on one
    case, over the parameter candidates."""
    candidate = 0
    while candidate < MAX_CANDIDATES:
        try:
            outputs, error, count = run_variant(question, answer, index, student_case, candidate, verify)
        except (NoMoreCandidates, AlignmentError):
            return False, False, False
        student_error = student_case.get("error")
        if student_error:
            # both raised: validators may word the same shape error differently
            if error:
                return True, _same_error(student_error, error), student_error.get("type") == error.get("type")
        elif (outputs is not None and outputs_equal(student_case["outputs"], outputs)
              and param_grads_equal(student_case, outputs)):
            return True, True, True
        candidate += 1
        if count <= candidate:
            break
    return False, False, False
