"""autograder: checks student answers against vitref.

    import autograder
    autograder.questions()                 # every Question: .id .chapter .title .points .answer_name
    autograder.questions("03_attention")   # one assignment's questions
    r = autograder.check("q1", getPositionEncoding)   # never raises for a wrong answer
    r.passed, r.score, r.max_score, r.feedback
    autograder.grade("q1", getPositionEncoding)       # AssertionError(feedback) unless passed

Feedback in two steps: the first time a student's ``grade`` meets a mistake, it names the symptom
and asks a question that points at the cause; the fix in code words comes when the same mistake
is checked again (:func:`autograder.judging.model.staged`; ``check(..., seen=counter)`` does the
same with a counter of the caller's). ``check`` without ``seen``, and every report of the
grader, give the full text.

Command line: ``python -m autograder check PATH [--question QID ...] [--json]``,
``python -m autograder grade ROOT`` (a class, sandboxed), ``python -m autograder questions``.

The package is split along the trust boundary of grading (see CONTRIBUTING.md):

* :mod:`autograder.questions` and :mod:`autograder.student` run beside student code (they are
  what the grading sandbox holds): the question data, the cell runner, the probes, the wire
  format, the ban on forbidden functions, the sandbox's warm process. No reference code, no
  mistake catalogue, no secret;
* :mod:`autograder.judging` (references, catalogue of mistakes, judge, parameter matching,
  static scan, secret inputs), :mod:`autograder.hosts` (where student code runs: a child
  process, the bubblewrap sandbox), :mod:`autograder.batch` (a class: jobs, state,
  gradebook, feedback) and :mod:`autograder.instructor` (nbgrader tools) are the grader's.

``check()`` here is the student's fast self-check in their own process; the grade that
counts comes from ``python -m autograder grade``.
"""
from __future__ import annotations

import os as _os
from collections import Counter as _Counter
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from .judging.model import Mistake, Result, staged
from .questions import question as _find_question
from .questions import registry as _registry
from .questions.base import Question

try:
    __version__ = _version("vitref-course")   # pyproject.toml's, the one place it is written
except _PackageNotFoundError:                 # a copy of the folder (the grading sandbox's bundle)
    __version__ = "0+unknown"

__all__ = ["questions", "question", "check", "grade", "Question", "Result", "Mistake"]


def questions(chapter: str | None = None) -> list[Question]:
    """All questions in course order, or those of one assignment (e.g. ``"03_attention"``)."""
    found = list(_registry().values())
    if chapter is not None:
        chapters = sorted({q.chapter for q in found})
        found = [q for q in found if q.chapter == chapter]
        if not found:
            raise ValueError(f"no questions for chapter {chapter!r}; chapters are {', '.join(chapters)}")
    return found


def question(qid: str) -> Question:
    return _find_question(qid)


# (question id, mistake key) -> how many times this process's grade() named it: the student's kernel
# keeps it, so the second check of the same mistake shows the fix. It changes wording only.
_SEEN: _Counter = _Counter()


def check(qid: str, answer, seen: _Counter | None = None) -> Result:
    """Check ``answer`` in this process: scan its source, probe it (with the exercise's
    forbidden functions disabled for the duration), judge against vitref. With ``seen`` (a
    counter of the caller's, by (question, mistake)), the feedback comes in two steps
    (:func:`autograder.judging.model.staged`); without it, in full."""
    result = _check(qid, answer)
    return result if seen is None else staged(result, seen)


def _check(qid: str, answer) -> Result:
    # loaded by the first check, not by ``import autograder``: the judge brings torch, vitref and
    # the catalogue, which the grading sandbox's bundle (where this package is a stub) never holds
    from .judging.judge import judge
    from .judging.scan import scan_object
    from .student.ban import install
    from .student.probe import probe

    q = question(qid)
    try:
        hits = scan_object(answer, q.answer_name, q.forbidden)
    except Exception:  # noqa: BLE001 - a scan failure must not hide the check itself
        hits = []
    ban = install(q.forbidden, reversible=True)
    try:
        data = probe(q, answer)
    finally:
        ban.undo()
    try:
        return judge(q, data, static_hits=hits)
    except Exception as error:  # noqa: BLE001 - check() never raises for an answer
        return Result(q.id, False, 0.0, float(q.points),
                      f"{q.title}: the checker itself failed ({type(error).__name__}: {error}); "
                      f"please report this.", None)


def grade(qid: str, answer) -> Result:
    """:func:`check`, then ``AssertionError(feedback)`` unless the answer passed (nbgrader tests).
    In the student's kernel the feedback comes in two steps (this process counts the mistakes it
    named); in nbgrader's own runs (``NBGRADER_EXECUTION``: autograde, validate), in full."""
    result = check(qid, answer, seen=None if _os.environ.get("NBGRADER_EXECUTION") else _SEEN)
    if not result.passed:
        raise AssertionError(result.feedback)
    return result
