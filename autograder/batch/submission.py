"""Grading one submission (:func:`grade_task`, in a grading job of :mod:`autograder.batch.pool`):
the notebook runs in the job's sandbox (:func:`autograder.hosts.driver.run_submission`) on inputs
drawn for that run (:class:`RunInputs`), and every question of its assignment is judged on what
came back. Whatever happens (a notebook that is not JSON, too big, an answer that raises, hangs,
exits or exhausts memory) the result has one row per question: zero and the reason."""
from __future__ import annotations

import os
import time

import autograder
from autograder.batch.sources import HIDDEN_TESTS
from autograder.batch.tasks import MAX_NOTEBOOK_MB, Refused, Task, read_notebook
from autograder.batch.text import clean, clean_result
from autograder.hosts.driver import run_submission
from autograder.judging import preflight
from autograder.judging.scan import flags_or_hold, held_reason
from autograder.questions.inputs import PublicSource
from autograder.student.cells import code_cells, nbgrader_code_cells


REASON_CHARS = 300
__all__ = ["MAX_NOTEBOOK_MB", "RunInputs", "error_result", "grade_task", "short_reason"]


def _zero(q, reason: str) -> dict:
    """Question ``q``'s row when it could not be judged: no points, ``reason`` as the feedback."""
    return {"id": q.id, "title": q.title, "passed": False, "score": 0.0,
            "max_score": float(q.points), "feedback": reason, "reason": reason, "mistake": None}


def short_reason(text: str) -> str:
    """``text`` on one line, at most ``REASON_CHARS`` characters (for grades.csv and the
    summary), with no control character or lone surrogate (:func:`autograder.batch.text.clean`)."""
    return clean(" ".join(str(text).split()), REASON_CHARS, newlines=False)


class RunInputs:
    """The secret inputs of a grading job: each run of each submission draws its own
    (:func:`autograder.judging.secret.run_salt`, keyed by a secret of this job), with the
    arrays of that run's questions only; ``key=None``: the public inputs everywhere
    (``--public-inputs``)."""

    def __init__(self, key: bytes | None):
        if key is not None and len(key) < 16:
            raise ValueError("the secret key of a grading job must have at least 16 bytes")
        self.key = key

    def for_submission(self, student: str, assignment: str):
        """``(run, qids) -> (blob, source)`` for :func:`autograder.hosts.driver.run_submission`."""
        # inner import: judging.secret loads the catalogue and vitref (~250 ms): in the jobs, not the coordinator
        from autograder.judging.secret import SaltedSource, run_inputs, run_salt

        def draw(run: int, qids) -> tuple[bytes, object]:
            source = PublicSource() if self.key is None else \
                SaltedSource(run_salt(self.key, student, assignment, run, qids))
            return run_inputs(qids, source), source

        return draw


def grade_task(task: Task, zygote, limits, inputs: RunInputs | None = None, source=None) -> dict:
    """Grade one submission (in a worker process): sandboxed run, then judge every question.
    ``inputs``: the job's secret inputs (None: the public ones); each run of the notebook gets
    its own, and each question is judged on those of the run that probed it. ``source``: the
    assignment's :class:`autograder.batch.sources.Source`, whose test cells, where the
    submission holds them unchanged, are not run (:func:`instructor_test_cells`)."""
    start = time.monotonic()
    qs = [autograder.question(qid) for qid in task.qids]
    result = {"student": task.student, "assignment": task.assignment, "digest": task.digest,
              "notebook": os.path.basename(task.notebook) if task.notebook else None,
              "reason": task.note, "status": "ok", "questions": []}

    def finish(rows, reason=""):
        if reason:
            result["reason"] = "; ".join(r for r in (task.note, reason) if r)
        result["questions"] = rows
        result["score"] = sum(r["score"] for r in rows)
        result["max_score"] = sum(r["max_score"] for r in rows)
        result["seconds"] = round(time.monotonic() - start, 3)
        return clean_result(result)         # the student's text made safe once, here

    def refuse(reason: str, status: str = "invalid"):
        result["status"] = status
        return finish([_zero(q, reason) for q in qs], reason)

    if task.problem:                        # a link, a pipe, a read error: found by discover
        return refuse(task.problem)
    if not qs:
        result["status"] = "unknown-assignment"
        return finish([], f"no questions are defined for assignment {task.assignment!r}")
    if task.notebook is None:
        return refuse(task.note, "missing")
    raw, cells, problem = _read_submission(task)
    if problem is not None:
        return refuse(problem)

    if inputs is None:
        inputs = RunInputs(None)
    outcome = run_submission(zygote, raw, task.qids, limits, name=os.path.basename(task.notebook),
                             inputs=inputs.for_submission(task.student, task.assignment),
                             blank=instructor_test_cells(raw, source))
    result["status"] = outcome.status
    result["run_seconds"] = round(outcome.seconds, 3)
    flags = flags_or_hold(cells)       # a scan that fails holds every question for review
    result["flags"] = [f.text() for f in flags]
    return finish([_question_row(q, outcome, cells, flags) for q in qs], outcome.reason)


def instructor_test_cells(raw: bytes, source) -> tuple[int, ...]:
    """The code cells of a submission (0-based among its code cells, as the runner numbers them)
    that are its assignment's test cells exactly as the instructor wrote them: nbgrader
    "autograder tests" cells (``grade`` without ``solution``) whose text is the source's, with
    or without its hidden tests (trailing white space aside). They only call ``grade()``, which
    does nothing in the sandbox, and nbgrader's own autograde replaces them anyway: not running
    them changes nothing the student wrote. A test cell the student edited runs, as every other
    cell; a notebook without nbgrader's metadata (a .py export) runs whole."""
    tests = _source_tests(source)
    if not tests:
        return ()
    return tuple(index for index, (text, meta) in enumerate(nbgrader_code_cells(raw))
                 if meta.get("grade") is True and not meta.get("solution") and isinstance(meta.get("grade_id"), str)
                 and text.rstrip() in tests.get(meta["grade_id"], ()))


def _source_tests(source) -> dict[str, set[str]]:
    """{grade id: the texts of that test cell the instructor wrote (with and without hidden tests)}."""
    if source is None:
        return {}
    graded = {cell.name for cell in source.grade_cells} - set(source.solution_cells)
    return {cell["name"]: {cell["source"].rstrip(), HIDDEN_TESTS.sub("", cell["source"]).rstrip()}
            for cell in source.source_cells if cell["name"] in graded and cell["cell_type"] == "code"}


def _read_submission(task: Task) -> tuple[bytes, list[str], str | None]:
    """The submitted notebook's bytes and code cells, or why it is not graded (None: it is)."""
    try:
        raw = read_notebook(task.notebook, task.base or task.folder or None)  # nothing below followed
    except Refused as why:
        return b"", [], str(why)
    problem = preflight.problem(raw)        # the schema, then the sizes the readers see
    if problem:
        return raw, [], problem
    cells, problem = code_cells(raw)
    if problem:
        return raw, [], f"the notebook could not be read: {problem}; nothing could be graded"
    return raw, cells, None


def _question_row(q, outcome, cells: list[str], flags: list) -> dict:
    """Question ``q``'s row: the judge's verdict on what the run sent, held when a flag holds it."""
    # inner import: the judges (~250 ms: catalogue, vitref) load in the jobs while their sandboxes boot (pool._worker)
    from autograder.judging.judge import judge_outcome

    verdict = judge_outcome(q, outcome, cells, flags=flags)
    row = verdict.to_dict()
    row.pop("flags", None)
    row["title"] = q.title
    # a flag holds the score for review: the automatic score stays, the reason says why
    row["reason"] = "; ".join(r for r in (held_reason(verdict.held),
                                          "" if verdict.passed else short_reason(verdict.feedback)) if r)
    return row


def error_result(task: Task, reason: str) -> dict:
    """The result of a submission the grader itself failed on (an exception, a job that died)."""
    rows = [_zero(autograder.question(qid), reason) for qid in task.qids]
    return clean_result({"student": task.student, "assignment": task.assignment, "digest": task.digest,
            "notebook": os.path.basename(task.notebook) if task.notebook else None,
            "reason": reason, "status": "error", "questions": rows,
            "score": 0.0, "max_score": sum(r["max_score"] for r in rows), "seconds": 0.0})
