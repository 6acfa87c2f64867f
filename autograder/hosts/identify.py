"""Which assignment a submission file is, from the marks the exercise notebook carries.

    identity = identify("Copy of 07_vit.ipynb")   # Identity(assignments=("07_vit",), qids=(...), ...)

``python -m autograder check`` without ``--question`` checks the questions of the notebook's own
assignment. Neither the file's name (Colab saves a copy as ``Copy of 07_vit.ipynb``, a student
renames it) nor the names its code defines (chapter 7 gives a ``MultiHeadAttention``, which is
chapter 4's answer name) say which one it is. The marks that do, in the order they are read:

1. **nbgrader's grade ids**: every answer cell of an exercise notebook has
   ``metadata.nbgrader.grade_id`` ``"<question id>_answer"`` and every check cell
   ``"<question id>_test"`` (the solutions notebook's, kept by ``make assignments``). Read in a
   notebook (``.ipynb``) and in a jupytext percent script (``.py``), which writes each cell's
   metadata on its ``# %%`` line.
2. **the check cells' lines**, where no metadata came through (``jupyter nbconvert --to script``
   drops it; an editor may too): every check cell starts with
   ``print(autograder.grade("<question id>", <answer name>))``
   (``tests/test_conventions.py`` holds every notebook to it), a line that survives any export
   of the code. Read only when no grade id names a question, so a check a student added to try
   another chapter's answer does not pull that chapter in.

The questions checked are every question of the assignments those marks name (a check cell the
student deleted does not drop its question), in course order. A file with no mark is refused
(:class:`Unidentified`) with what was expected: nothing is guessed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..questions import registry
from ..student.cells import SubmissionError

ANSWER_SUFFIX, TEST_SUFFIX = "_answer", "_test"
#: a check cell's first line (anywhere in a file: a script export puts cells one after the other)
CHECK_LINE = re.compile(r"""^print\(autograder\.grade\(\s*["'](\w+)["']\s*,""", re.MULTILINE)
#: a grade id in a jupytext percent cell header: ``# %% ... nbgrader={..., "grade_id": "q5_test", ...}``
PERCENT_GRADE_ID = re.compile(r"""^# %%[^\n]*?["']grade_id["']\s*:\s*["']([^"'\n]+)["']""", re.MULTILINE)

FROM_GRADE_IDS = "its cells' nbgrader grade ids"
FROM_CHECK_CELLS = "its check cells (print(autograder.grade(...)) lines)"

EXPECTED = ("expected an exercise notebook of this course (or a .py export of one): its cells' nbgrader "
            "grade ids (metadata.nbgrader.grade_id, such as \"q5_answer\" and \"q5_test\") or its check "
            "cells' lines print(autograder.grade(\"<question id>\", <answer>))")


class Unidentified(SubmissionError):
    """No mark of the file names a question of this course: which questions to check is unknown."""


@dataclass(frozen=True)
class Identity:
    """The assignments a file's marks name, every question of them (course order), and which
    marks were read (:data:`FROM_GRADE_IDS` or :data:`FROM_CHECK_CELLS`)."""
    assignments: tuple[str, ...]
    qids: tuple[str, ...]
    found_by: str

    def note(self) -> str:
        """One line for the check's table: what was checked and how it was chosen."""
        return (f"Checked the questions of {', '.join(self.assignments)}, the assignment named by "
                f"{self.found_by} (--question QID checks others).")


def _question_of(grade_id: str) -> str | None:
    for suffix in (ANSWER_SUFFIX, TEST_SUFFIX):
        if grade_id.endswith(suffix) and len(grade_id) > len(suffix):
            return grade_id[:-len(suffix)]
    return None


def _notebook_marks(text: str, path: Path) -> tuple[list[str], str]:
    """(grade ids of the cells' nbgrader metadata, the code cells' text) of a notebook."""
    try:
        notebook = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise SubmissionError(f"{path} is not a valid notebook (invalid JSON)") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise SubmissionError(f"{path} is not a Jupyter notebook (no list of cells)")
    grade_ids, code = [], []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        metadata = cell.get("metadata")
        nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        if isinstance(nbgrader, dict) and isinstance(nbgrader.get("grade_id"), str):
            grade_ids.append(nbgrader["grade_id"])
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            code.append("".join(map(str, source)) if isinstance(source, list) else str(source))
    return grade_ids, "\n".join(code)


def marks(path) -> tuple[list[str], list[str]]:
    """(question ids named by grade ids, question ids named by check-cell lines) of the file,
    as written (unknown ids included), in file order; :class:`SubmissionError` if unreadable."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise SubmissionError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise SubmissionError(f"{path} is not UTF-8 text") from None
    if path.suffix == ".ipynb":
        grade_ids, code = _notebook_marks(text, path)
    elif path.suffix == ".py":
        grade_ids, code = PERCENT_GRADE_ID.findall(text), text
    else:
        raise SubmissionError(f"{path}: expected a notebook (.ipynb) or a Python file (.py)")
    by_grade_id = [qid for qid in map(_question_of, grade_ids) if qid]
    return list(dict.fromkeys(by_grade_id)), list(dict.fromkeys(CHECK_LINE.findall(code)))


def identify(path) -> Identity:
    """The assignments whose marks ``path`` carries and their questions (see the module's
    docstring); :class:`Unidentified` when it carries none, :class:`SubmissionError` when it
    cannot be read."""
    table = registry()
    by_grade_id, by_check_line = marks(path)
    for named, found_by in ((by_grade_id, FROM_GRADE_IDS), (by_check_line, FROM_CHECK_CELLS)):
        known = [qid for qid in named if qid in table]
        if known:
            chapters = {table[qid].chapter for qid in known}
            ordered = tuple(dict.fromkeys(q.chapter for q in table.values() if q.chapter in chapters))
            qids = tuple(q.id for chapter in ordered for q in table.values() if q.chapter == chapter)
            return Identity(ordered, qids, found_by)
    unknown = list(dict.fromkeys(by_grade_id + by_check_line))
    found = (f"; the question ids it names ({', '.join(unknown[:5])}) are none of this course's: a notebook "
             f"of another version of the course?" if unknown else "; it has neither")
    raise Unidentified(f"{path} does not say which assignment it is: {EXPECTED}{found}. Name the questions "
                       f"to check with --question QID (python -m autograder questions lists them); the "
                       f"file's name and the names its code defines are not used to guess.")
