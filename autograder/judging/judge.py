"""The judge: compares probed outputs with ``vitref`` and names known mistakes (grader side).

One judging walk looks the question's catalogue entry up once (:func:`_judge`) and hands it on:
the references to :func:`autograder.judging.variants.reference_outputs`, the catalogue of
mistakes to :func:`autograder.judging.diagnosis.name_mistake` (only once the answer failed), and
the entry's own ``verdict``/``summary``. The catalogue imports nothing of this module; both build
on :mod:`autograder.judging.variants` (running an answer here), :mod:`autograder.judging.compare`
(comparing its outputs) and :mod:`autograder.judging.diagnosis` (naming a mistake).

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


from ..questions import inputs as recipes
from ..questions.base import Question
from ..student.probe import single_thread
from .catalogue import entry
from .catalogue._entry import Entry
from .compare import compare_case, compare_outputs, outputs_matching, property_problem
from .diagnosis import Named, name_mistake
from .model import Result
from .params import TamperError, student_params
from .scan import describe as describe_shortcut
from .scan import flags_or_hold, scan_failure
from .scan import holds, scan_source
from .variants import reference_outputs


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

    refused = _refusal(question, data, static_hits)
    if refused is not None:
        return fail(*refused)
    cases = data.get("cases") or []
    if verify:
        try:
            verify_parameters(question, cases)
        except TamperError as error:
            return fail(f"Not accepted: {error}.", mistake="tamper")
        verify = False                          # checked once here; the caches below rely on it
    catalogued = entry(question.id)             # the one lookup of this walk: handed on from here
    try:
        problems = _case_problems(question, cases, catalogued, verify)
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
    try:
        named = name_mistake(question, data, catalogued, verify)
    except TamperError:
        named = None
    if named is None:
        return dataclasses.replace(fail(text), measures=measured)
    full, first = _feedback(named, text)
    return dataclasses.replace(fail(full, named.mistake.key), first_step=f"{question.title}: not yet. {first}",
                               measures=measured)


def _refusal(question: Question, data: dict, static_hits) -> tuple[str, str | None] | None:
    """(the failure text, the mistake key) when the answer is refused before any case is compared:
    the probe's fatal error, a shortcut the static scan found, a forbidden call, cases missing."""
    if data.get("fatal"):
        return data["fatal"], None
    hits = list(dict.fromkeys(getattr(h, "key", h) for h in static_hits))
    if hits:
        details = [h.where for h in static_hits if getattr(h, "where", None)]
        text = "; ".join(f"your {question.answer_name} {describe_shortcut(key)}" for key in hits)
        if details:
            text += f" (found: {details[0]})"
        return "Not accepted: " + text + ".", "shortcut"
    cases = data.get("cases") or []
    forbidden = [c["error"] for c in cases
                 if isinstance(c, dict) and (c.get("error") or {}).get("type") == "ForbiddenCall"]
    if forbidden:
        return (f"Not accepted: your {question.answer_name} called a function this exercise forbids "
                f"({forbidden[0].get('message', '')})."), "shortcut"
    if len(cases) != len(question.cases):
        return "the checker could not run your answer on all inputs.", None
    return None


def _case_problems(question: Question, cases: list, catalogued: Entry, verify: bool) -> list:
    """[(case, message)] for every case the answer fails (TamperError: parameters not as written)."""
    problems = []
    for index, (case, student_case) in enumerate(zip(question.cases, cases)):
        message = _case_problem(question, index, case, student_case, catalogued, verify)
        if message is not None:
            problems.append((case, message))
    return problems


def _case_problem(question: Question, index: int, case, student_case: dict, catalogued: Entry,
                  verify: bool) -> str | None:
    """Why the answer fails case ``index`` (None: it passes): its error, a property, the entry's
    verdict, or the comparison with the closest reference."""
    if student_case.get("error"):
        return _error_text(student_case["error"], question)
    prop = property_problem(question, case, student_case)
    if prop:
        return prop
    if catalogued.verdict is not None:
        return catalogued.verdict(question, case, student_case) or None
    references, structural = reference_outputs(
        question, catalogued.references, index, student_case, verify,
        accept=lambda outputs: compare_outputs(question, case, student_case["outputs"], outputs) is None)
    if not references:
        return f"your module's parameters do not fit the exercise: {structural}"
    messages = []
    for reference in references:
        message = compare_case(question, case, student_case, reference)
        if message is None:
            return None
        messages.append((outputs_matching(question, case, student_case["outputs"], reference), message))
    # the message of the reference the answer comes closest to (most outputs equal): with two
    # accepted conventions (fully masked rows zero or uniform) the other one's differences mislead
    return max(messages, key=lambda m: m[0])[1]


def _feedback(named: Named, text: str) -> tuple[str, str]:
    """(the full feedback, the first step) of a failure ``text`` whose mistake was named: the
    full one names the mistake and its fix (a symptom: the sentence it found); the first step
    keeps the failure and asks the mistake's question."""
    mistake, detail = named.mistake, named.detail.rstrip(".")
    if mistake.detect is not None:
        lead = detail[:1].upper() + detail[1:]
        full = text if detail and detail.lower() in text.lower() else f"{lead}. {text}"
    else:
        title = f"{mistake.title} {detail}" if detail else mistake.title
        full = f"Looks like a known mistake: {title}. {mistake.hint} {text}"
    return full, f"{text} {mistake.question()}"


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
