"""The judge: compares probed outputs with ``vitref`` and names known mistakes (grader side).

One judging walk looks the question's catalogue entry up once (:func:`_judge`) and hands it on:
the references to :func:`autograder.judging.variants.reference_outputs`, the catalogued mistakes
to :func:`match_mistake`, and the entry's own ``verdict``/``diagnose``/``summary``. The
catalogue imports nothing of this module; both build on :mod:`autograder.judging.variants`
(running an answer here) and :mod:`autograder.judging.compare` (comparing its outputs).

It trusts nothing from the student's process but plain arrays: inputs are rebuilt here, the
parameter values are regenerated here (:func:`autograder.judging.params.student_params`), and every
reference and every catalogue variant is computed here, in float64. Properties are decided from
values too: a float64 case must agree with the float64 reference to float64 precision
(:data:`autograder.judging.messages.RTOL64`), every parameter gradient the reference has must
arrive as an array equal to the reference's (:func:`autograder.judging.compare.compare_case`), and where the
exercise's layers have biases, a candidate that would fill a missing bias with zeros is refused.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..questions import inputs as recipes
from ..questions.base import Question
from ..student.probe import single_thread
from .catalogue import Entry, entry
from .catalogue.concepts import values_close
from .compare import compare_case, compare_outputs, outputs_matching, param_grads_equal, property_problem
from .messages import outputs_equal
from .model import Result
from .params import AlignmentError, TamperError, student_params
from .scan import describe as describe_shortcut
from .scan import flags_or_hold, scan_failure
from .scan import holds, scan_source
from .variants import MAX_CANDIDATES, NoMoreCandidates, reference_outputs, run_variant


# --------------------------------------------------------------------------- mistakes


def mistake_answers(question: Question, catalogue: Entry, parts=None):
    """(mistake, wrong answer) for every mistake of the question's catalogue entry (and its
    ``also`` forms), built with the grader's parts."""
    if parts is None and catalogue.reference_parts is not None:
        parts = catalogue.reference_parts()
    for mistake in catalogue.catalogue:
        for answer in mistake.answers(parts):
            yield mistake, answer


def _same_error(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a.get("type") == b.get("type") and a.get("message") == b.get("message"))


def match_mistake(question: Question, data: dict, catalogued: Entry, verify: bool = True):
    """The first catalogue entry whose outputs equal the student's on every case, or None.

    Where the student's code raised, an entry that raised the same exception there (type and
    message) is preferred to one that raised the same type, and that to one that raised
    another (two mistakes may fail on the same inputs: a class token not repeated over the
    batch and attention maps stacked the wrong way)."""
    if question.kind == "value":
        return _match_value(question, data, catalogued)
    if catalogued.match is not None:
        key = catalogued.match(question, data)
        return next((m for m in catalogued.catalogue if m.key == key), None)
    best, best_rank = None, 0
    for mistake, answer in mistake_answers(question, catalogued):
        rank = _matches(question, answer, data, verify)
        if rank == 3:
            return mistake
        if rank > best_rank:
            best, best_rank = mistake, rank
    return best


def _match_value(question: Question, data: dict, catalogued: Entry):
    """A value question's catalogued wrong value equal to the student's answer (under the
    question's tolerance), or None."""
    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error"):
        return None
    got = (cases[0].get("outputs") or {}).get("answer")
    if got is None:
        return None
    got = float(np.asarray(got).reshape(-1)[0])
    for mistake, answer in mistake_answers(question, catalogued):
        if values_close(got, answer, question.cases[0].params):
            return mistake
    return None


def _matches(question, answer, data, verify) -> int:
    """A catalogue answer matches when, on every case, it returns the student's outputs or
    raises where the student's code raised; and either some outputs agreed or every
    exception is identical in type and message (so "raises everywhere" alone names nothing).
    3: a match whose exceptions (if any) are the student's, type and message; 2: of the
    student's types; 1: another match; 0: none."""
    outputs_agreed, messages_identical, types_identical = 0, True, True
    for index, student_case in enumerate(data["cases"]):
        agreed = False
        candidate = 0
        while candidate < MAX_CANDIDATES:
            try:
                outputs, error, count = run_variant(question, answer, index, student_case, candidate, verify)
            except (NoMoreCandidates, AlignmentError):
                break
            student_error = student_case.get("error")
            if student_error:
                # both raised: validators may word the same shape error differently
                agreed = bool(error)
                if agreed and not _same_error(student_error, error):
                    messages_identical = False
                if agreed and error is not None and student_error.get("type") != error.get("type"):
                    types_identical = False
            else:
                agreed = (outputs is not None and outputs_equal(student_case["outputs"], outputs)
                          and param_grads_equal(student_case, outputs))
                if agreed:
                    outputs_agreed += 1
            if agreed:
                break
            candidate += 1
            if count <= candidate:
                break
        if not agreed:
            return 0
    if not (outputs_agreed > 0 or messages_identical):
        return 0
    return 3 if messages_identical else 2 if types_identical else 1


# --------------------------------------------------------------------------- the verdict


def _error_text(error: dict, question: Question) -> str:
    kind = error.get("type")
    if kind in ("BadOutput", "CaseFailure"):
        return error["message"]
    if kind == "ForbiddenCall":
        return f"your code called a forbidden function: {error['message']}"
    where = f" ({error['where']})" if error.get("where") else ""
    message = error.get("message", "")
    if kind == "NotImplementedError" and not message:
        return f"this answer is not written yet: it still raises NotImplementedError{where}"
    return f"your code raised {kind}" + (f": {message}" if message else "") + where


def judge(question: Question, data: dict, static_hits=(), verify: bool = True) -> Result:
    """Verdict on probe output ``data`` (from :func:`autograder.student.probe.probe`)."""
    with single_thread():
        return _judge(question, data, static_hits, verify)


def _judge(question: Question, data: dict, static_hits, verify: bool) -> Result:
    qid, points = question.id, float(question.points)

    def fail(text, mistake=None):
        return Result(qid, False, 0.0, points, f"{question.title}: not yet. {text}", mistake)

    if data.get("fatal"):
        return fail(data["fatal"])
    hits = list(dict.fromkeys(getattr(h, "key", h) for h in static_hits))
    if hits:
        details = [h.where for h in static_hits if getattr(h, "where", None)]
        text = "; ".join(f"your {question.answer_name} {describe_shortcut(key)}" for key in hits)
        if details:
            text += f" (found: {details[0]})"
        return fail("Not accepted: " + text + ".", mistake="shortcut")
    cases = data.get("cases") or []
    forbidden = [c["error"] for c in cases
                 if isinstance(c, dict) and (c.get("error") or {}).get("type") == "ForbiddenCall"]
    if forbidden:
        return fail(f"Not accepted: your {question.answer_name} called a function this exercise forbids "
                    f"({forbidden[0].get('message', '')}).", mistake="shortcut")
    if len(cases) != len(question.cases):
        return fail("the checker could not run your answer on all inputs.")
    if verify:
        try:
            verify_parameters(question, cases)
        except TamperError as error:
            return fail(f"Not accepted: {error}.", mistake="tamper")
        verify = False                          # checked once here; the caches below rely on it
    problems = []
    catalogued = entry(question.id)             # the one lookup of this walk: handed on from here
    verdict = catalogued.verdict
    try:
        for index, (case, student_case) in enumerate(zip(question.cases, cases)):
            if student_case.get("error"):
                problems.append((case, _error_text(student_case["error"], question)))
                continue
            prop = property_problem(question, case, student_case)
            if prop:
                problems.append((case, prop))
                continue
            if verdict is not None:
                message = verdict(question, case, student_case)
                if message:
                    problems.append((case, message))
                continue
            references, structural = reference_outputs(
                question, catalogued.references, index, student_case, verify,
                accept=lambda outputs: compare_outputs(question, case, student_case["outputs"], outputs) is None)
            if not references:
                problems.append((case, f"your module's parameters do not fit the exercise: {structural}"))
                continue
            messages = []
            for reference in references:
                message = compare_case(question, case, student_case, reference)
                if message is None:
                    break
                messages.append((outputs_matching(question, case, student_case["outputs"], reference), message))
            else:
                # the message of the reference the answer comes closest to (most outputs equal): with two
                # accepted conventions (fully masked rows zero or uniform) the other one's differences mislead
                problems.append((case, max(messages, key=lambda m: m[0])[1]))
    except TamperError as error:
        return fail(f"Not accepted: {error}.", mistake="tamper")
    measured = _measured(catalogued, question, data)
    if not problems:
        checked = "" if question.kind == "value" else f" ({len(question.cases)} input sets checked)"
        summary = catalogued.summary
        if summary is not None:
            reached = summary(question, data)
            checked = f": {reached}" if reached else checked
        return Result(qid, True, points, points, f"{question.title}: correct{checked}.", measures=measured)
    case, message = problems[0]
    text = f"{message}." if question.kind == "value" else f"On input {case.label}: {message}."
    if len(problems) > 1:
        text += f" ({len(problems)} of {len(question.cases)} input sets fail.)"
    mistake = None
    try:
        mistake = match_mistake(question, data, catalogued, verify)
    except TamperError:
        mistake = None
    if mistake is not None:
        text = f"Looks like a known mistake: {mistake.title}. {mistake.hint} " + text
    else:
        diagnose = catalogued.diagnose
        try:
            found = diagnose(question, data) if diagnose is not None else None
        except Exception:  # noqa: BLE001 - a diagnosis is a bonus, never a reason to fail the verdict
            found = None
        if found:
            text = f"{found.rstrip('.')}. " + text
    return dataclasses.replace(fail(text, mistake=mistake.key if mistake else None), measures=measured)


def _measured(catalogued: Entry, question: Question, data: dict) -> tuple:
    """(name, number) pairs of the entry's ``measures``: numbers of the grader's own evaluation."""
    if catalogued.measures is None:
        return ()
    try:
        found = catalogued.measures(question, data) or {}
        return tuple((str(name), float(value)) for name, value in found.items())
    except Exception:  # noqa: BLE001 - a leaderboard's numbers never change a verdict
        return ()


def verify_parameters(question: Question, cases: list) -> None:
    """Every parameter the probe reports must hold the value the checker wrote into it
    (regenerated here). Done before any cached reference is used."""
    for case, student_case in zip(question.cases, cases):
        seed = int(case.params.get("seed", 0))
        for index, record in enumerate(student_case.get("modules") or []):
            student_params(record, seed, index, verify=True)


def judge_outcome(question: Question, outcome, cells: list[str], flags=None) -> Result:
    """The verdict on one question of a submission run by a host (:mod:`autograder.hosts.driver`):
    what the student's process sent for it, the static scan of the notebook's ``cells``,
    and the flags of the notebook (:func:`autograder.judging.scan.flags`; ``flags`` passes them
    when the caller has them already). A flag holds the score for review: the automatic score
    stays in the result, with ``held`` naming the flags (see :func:`autograder.judging.scan.holds`)."""
    points = float(question.points)
    if flags is None:
        flags = flags_or_hold(cells)         # a scan that fails holds the grade for review
    got = outcome.probes.get(question.id)
    if got is None:
        result = Result(question.id, False, 0.0, points, outcome.missing_reason(question))
    elif "unavailable" in got:
        result = Result(question.id, False, 0.0, points, f"{question.title}: {got['unavailable']}")
    else:
        try:
            hits = scan_source(cells, question.answer_name, question.forbidden)
        except Exception as error:  # noqa: BLE001 - the score is still computed, the grade held for review
            hits = []
            flags = [*flags, scan_failure(error)]
        try:
            # the inputs of the run that produced this result (each run draws its own)
            source = got.get("source") or recipes.current()
            with recipes.using(source):
                result = judge(question, got["data"], static_hits=hits)
        except Exception as error:  # noqa: BLE001 - a malformed probe result is a zero, not a crash
            result = Result(question.id, False, 0.0, points,
                            f"{question.title}: the answer's outputs could not be read "
                            f"({type(error).__name__}: {str(error)[:200]})")
    texts = tuple(f.text() if hasattr(f, "text") else str(f) for f in flags)
    return dataclasses.replace(result, flags=texts, held=holds(question, flags))
