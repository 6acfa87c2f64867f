"""What a graded class leaves in ROOT: ``grades.csv`` (:func:`write_csv`; ``grades-I-of-N.csv``
for a shard, :func:`csv_name`) and, per submission, the feedback pages and the autograded
notebook (:func:`write_pages`: :mod:`autograder.batch.feedback`, :mod:`autograder.batch.formgrader`).
The gradebook is :mod:`autograder.batch.gradebook`'s, the class report
:mod:`autograder.batch.report`'s."""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from autograder.batch.submission import short_reason
from autograder.batch.tasks import Task

CSV_COLUMNS = ["student", "assignment", "question", "score", "max_score", "reason"]


def write_csv(root: Path, results: list[dict], name: str = "grades.csv") -> Path:
    """``ROOT/<name>``, written atomically: one row per question and submission (a submission
    without questions: one row with its reason), sorted by student and assignment."""
    path = root / name
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for r in sorted(results, key=lambda r: (r["student"], r["assignment"])):
            if not r["questions"]:
                writer.writerow([r["student"], r["assignment"], "", 0, 0, short_reason(r.get("reason", ""))])
            for q in r["questions"]:
                writer.writerow([r["student"], r["assignment"], q["id"], f"{q['score']:g}",
                                 f"{q['max_score']:g}", short_reason(q.get("reason", ""))])
    os.replace(tmp, path)
    return path


def csv_name(shard: tuple[int, int] | None) -> str:
    """``grades.csv``, or ``grades-I-of-N.csv`` for shard ``(I, N)``."""
    return "grades.csv" if shard is None else f"grades-{shard[0]}-of-{shard[1]}.csv"


def write_pages(options: dict, task: Task, result: dict) -> None:
    """The per-submission files (``timestamp``, the feedback pages, the autograded
    notebook), written by the job that graded the submission, not by the coordinator: a
    notebook that is costly to copy delays only its own job. ``result["pages"]`` says they
    were written (the coordinator writes them for results it makes itself)."""
    from autograder.batch import feedback, formgrader
    root = options.get("root")
    if root is None:
        return
    root = Path(root)
    try:
        result["timestamp"] = formgrader.submission_timestamp(task)
        feedback.write(root, result)
        formgrader.write_autograded(root, task, (options.get("sources") or {}).get(task.assignment), result)
    except Exception as error:  # noqa: BLE001 - the grade is saved; the copy is a convenience
        print(f"warning: could not write the feedback or autograded notebook of "
              f"{task.student}/{task.assignment}: {error}", file=sys.stderr)
    result["pages"] = True


def write_missing_autograded(root: Path, results: list[dict], tasks: dict, sources: dict) -> None:
    """The autograded notebook of every result that has none yet (results saved before
    autograded notebooks existed). ``tasks``: by (student, assignment)."""
    from autograder.batch import formgrader
    for r in results:
        task = tasks.get((r["student"], r["assignment"]))
        src = sources.get(r["assignment"])
        if task is not None and src is not None and \
                not (root / "autograded" / r["student"] / r["assignment"] / f"{src.notebook}.ipynb").exists():
            try:
                formgrader.write_autograded(root, task, src, r)
            except Exception:  # noqa: BLE001 - the grade is saved; the copy is a convenience
                pass
