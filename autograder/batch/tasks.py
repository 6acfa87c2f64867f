"""What there is to grade: one :class:`Task` per ``ROOT/submitted/<student>/<assignment>/``
folder (:func:`discover`), the grader's version that keys the saved results
(:func:`grader_version`), and the shard a submission belongs to (:func:`shard_of`)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Task:
    student: str
    assignment: str
    folder: str
    notebook: str | None          # the notebook that is graded (None: nothing to grade)
    digest: str                   # content hash of the notebook + grader version
    qids: list[str]
    note: str = ""                # e.g. "several notebooks; graded x.ipynb"


def _hash_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.parent.name + "/" + path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


# what decides a grade: a change in these folders (or in vitref's graded modules) regrades
# everything on the next run; the batch machinery itself (this folder) and instructor tools do not
VERSIONED_FOLDERS = ("questions", "student", "judging", "hosts")


def graded_vitref_files() -> list[Path]:
    """The vitref modules the references are built from (``vitref.graded_modules()``: not its
    training, data or plotting code, so a training change regrades nothing)."""
    try:
        import vitref
    except ImportError:
        return []
    return [Path(p) for p in vitref.graded_modules() if Path(p).is_file()]


def grader_version() -> str:
    """A hash of the code that decides a grade: questions, student side, judges, hosts and
    vitref's graded modules. ``AUTOGRADER_GRADER_VERSION`` pins it (e.g. to keep grades
    after a cosmetic change)."""
    pinned = os.environ.get("AUTOGRADER_GRADER_VERSION")
    if pinned:
        return pinned
    package = Path(__file__).resolve().parent.parent
    files = [p for folder in VERSIONED_FOLDERS for p in (package / folder).rglob("*.py")]
    return _hash_files(files + graded_vitref_files())[:16]


def questions_by_assignment() -> dict[str, list]:
    """The registered questions grouped by assignment (the question's chapter)."""
    import autograder
    out: dict[str, list] = {}
    for q in autograder.questions():
        out.setdefault(q.chapter, []).append(q)
    return out


def _pick_notebook(folder: Path, assignment: str, source_names: list[str]) -> tuple[Path | None, str]:
    notebooks = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    if not notebooks:
        return None, f"no notebook (.ipynb) in submitted/{folder.parent.name}/{folder.name}/"
    by_name = {p.name: p for p in notebooks}
    for name in [f"{assignment}.ipynb"] + [f"{n}.ipynb" for n in source_names]:
        if name in by_name:
            note = "" if len(notebooks) == 1 else f"several notebooks submitted; graded {name}"
            return by_name[name], note
    if len(notebooks) == 1:
        return notebooks[0], ""
    return notebooks[0], (f"several notebooks submitted and none named {assignment}.ipynb; "
                          f"graded {notebooks[0].name}")


def discover(root: Path, questions: dict[str, list], sources: dict, version: str) -> list[Task]:
    """One task per ROOT/submitted/<student>/<assignment>/ folder."""
    submitted = root / "submitted"
    if not submitted.is_dir():
        raise SystemExit(f"{submitted} does not exist: expected submitted/<student>/<assignment>/*.ipynb "
                         f"under the grading root {root}")
    tasks = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            assignment = folder.name
            qids = [q.id for q in questions.get(assignment, [])]
            src = sources.get(assignment)
            notebook, note = _pick_notebook(folder, assignment, [src.notebook] if src else [])
            h = hashlib.sha256(version.encode())
            h.update(",".join(qids).encode())
            if notebook is not None:
                h.update(notebook.read_bytes())
            tasks.append(Task(student_dir.name, assignment, str(folder),
                              str(notebook) if notebook else None, h.hexdigest()[:32], qids, note))
    return tasks


def shard_of(student: str, assignment: str, count: int) -> int:
    """The shard (1..count) of a submission: a stable hash of student and assignment, the
    same on every machine and Python (not ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{student}\0{assignment}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1
