"""autograder: checks student answers against vitref.

    import autograder
    autograder.questions()                 # every Question: .id .chapter .title .points .answer_name
    autograder.questions("03_attention")   # one assignment's questions
    r = autograder.check("q1", getPositionEncoding)   # never raises for a wrong answer
    r.passed, r.score, r.max_score, r.feedback
    autograder.grade("q1", getPositionEncoding)       # AssertionError(feedback) unless passed

Command line: ``python -m autograder check PATH [--question QID ...] [--json]`` (see
:mod:`autograder.runner`); ``python -m autograder questions`` lists the questions.
As pytest tests: ``pytest autograder --answers PATH [--question QID ...]`` (one test per question).

How a check works (:mod:`autograder.core`): the *probe* runs the answer on fixed inputs in
the student's process and returns plain arrays; the *judge* recomputes the references with
vitref in the grader's process, compares, and names the mistake from the question's
catalogue (``Question.catalogue``) when the outputs match a known wrong answer. Each
question also carries its starter code (``Question.skeleton``). Nothing here imports vitref
until a check is judged, so the probes also run where vitref is absent.
"""
from __future__ import annotations

from .core import Mistake, Question, Result

__all__ = ["questions", "question", "check", "grade", "Question", "Result", "Mistake"]


def questions(chapter: str | None = None) -> list[Question]:
    """All questions in course order, or those of one assignment (e.g. ``"03_attention"``)."""
    from .core import registry

    found = list(registry().values())
    if chapter is not None:
        chapters = sorted({q.chapter for q in found})
        found = [q for q in found if q.chapter == chapter]
        if not found:
            raise ValueError(f"no questions for chapter {chapter!r}; chapters are {', '.join(chapters)}")
    return found


def question(qid: str) -> Question:
    from .core import registry

    table = registry()
    if qid not in table:
        raise ValueError(f"unknown question id {qid!r}; known ids: {', '.join(table)}")
    return table[qid]


def check(qid: str, answer) -> Result:
    """Check ``answer`` in this process: probe, scan for shortcuts, judge against vitref."""
    from .judge import judge
    from .probe import probe
    from .shortcuts import scan_object

    q = question(qid)
    try:
        hits = scan_object(answer, q.answer_name, q.forbidden)
    except Exception:  # noqa: BLE001 - a scan failure must not hide the check itself
        hits = []
    data = probe(q, answer)
    try:
        return judge(q, data, static_hits=hits)
    except Exception as error:  # noqa: BLE001 - check() never raises for an answer
        return Result(q.id, False, 0.0, float(q.points),
                      f"{q.title}: the checker itself failed ({type(error).__name__}: {error}); "
                      f"please report this.", None)


def grade(qid: str, answer) -> Result:
    """:func:`check`, then ``AssertionError(feedback)`` unless the answer passed (nbgrader tests)."""
    result = check(qid, answer)
    if not result.passed:
        raise AssertionError(result.feedback)
    return result
