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

from autograder.batch import feedback, formgrader
from autograder.batch.submission import short_reason
from autograder.batch.tasks import Task
from autograder.batch.text import clean, csv_field


CSV_COLUMNS = ["student", "assignment", "question", "score", "max_score", "reason"]


def write_csv(root: Path, results: list[dict], name: str = "grades.csv") -> Path:
    """``ROOT/<name>``, written atomically: one row per question and submission (a submission
    without questions: one row with its reason), sorted by student and assignment. A field a
    spreadsheet would run as a formula (a student folder named ``=SUM(1,1)``) is neutralised
    (:func:`write_rows`)."""
    rows = []
    for r in sorted(results, key=lambda r: (r["student"], r["assignment"])):
        if not r["questions"]:
            rows.append([r["student"], r["assignment"], "", 0, 0, short_reason(r.get("reason", ""))])
        for q in r["questions"]:
            rows.append([r["student"], r["assignment"], q["id"], f"{q['score']:g}",
                         f"{q['max_score']:g}", short_reason(q.get("reason", ""))])
    path = root / name
    write_rows(path, [CSV_COLUMNS] + rows)
    return path


def write_rows(path: Path, rows) -> None:
    """A CSV file written atomically, every field neutralised (:func:`autograder.batch.text.csv_field`)
    and any character a UTF-8 file cannot hold escaped: writing it cannot fail on its text."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
        writer = csv.writer(fh)
        for row in rows:
            writer.writerow([csv_field(value) for value in row])
    os.replace(tmp, path)


def csv_name(shard: tuple[int, int] | None) -> str:
    """``grades.csv``, or ``grades-I-of-N.csv`` for shard ``(I, N)``."""
    return "grades.csv" if shard is None else f"grades-{shard[0]}-of-{shard[1]}.csv"


def write_pages(options: dict, task: Task, result: dict) -> None:
    """The per-submission files (``timestamp``, the feedback pages, the autograded
    notebook), written by the job that graded the submission, not by the coordinator: a
    notebook that is costly to copy delays only its own job. ``result["pages"]`` says they
    were written (the coordinator writes them for results it makes itself)."""
    root = options.get("root")
    if root is None:
        return
    root = Path(root)
    try:
        result["timestamp"] = formgrader.submission_timestamp(task)
        feedback.write(root, result)
        formgrader.write_autograded(root, task, (options.get("sources") or {}).get(task.assignment), result)
    except Exception as error:  # noqa: BLE001 - the grade is saved; the copy is a convenience
        print(clean(f"warning: could not write the feedback or autograded notebook of "
                    f"{task.student}/{task.assignment}: {type(error).__name__}: {error}", 1000, newlines=False),
              file=sys.stderr)
    result["pages"] = True


def write_missing_autograded(root: Path, results: list[dict], tasks: dict, sources: dict) -> None:
    """The autograded notebook of every result that has none yet (results saved before
    autograded notebooks existed). ``tasks``: by (student, assignment)."""
    for r in results:
        task = tasks.get((r["student"], r["assignment"]))
        src = sources.get(r["assignment"])
        if task is not None and src is not None and \
                not (root / "autograded" / r["student"] / r["assignment"] / f"{src.notebook}.ipynb").exists():
            try:
                formgrader.write_autograded(root, task, src, r)
            except Exception:  # noqa: BLE001 - the grade is saved; the copy is a convenience
                pass
