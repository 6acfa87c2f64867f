"""nbgrader's gradebook, as ``python -m autograder grade`` writes it.

The gradebook is written with nbgrader's own API and models, so that ``nbgrader
formgrader``, ``nbgrader export``, ``nbgrader generate_feedback`` and ``release_feedback``
work on it as on a gradebook nbgrader's own autograde wrote. It is either an SQLite file
(``ROOT/gradebook.db``, the default) or any database nbgrader accepts as ``db_url``, e.g. one
PostgreSQL database that several grading machines (``--shard I/N``) write to together.

Concurrent writers. nbgrader's API is not safe for two processes creating the same rows
at once: ``Gradebook()`` on an empty database creates the tables and the ``alembic_version``
table and inserts the course row (two processes race: "relation already exists",
duplicate keys), and two shards grading the same student or assignment both insert its
``Student``/``Assignment``/``Notebook``/``GradeCell`` rows (unique constraints:
``IntegrityError``). So every write here

* holds a lock for the whole write: a PostgreSQL session-level advisory lock
  (``pg_advisory_lock``) taken on its own connection before nbgrader opens the database;
  for SQLite an exclusive ``fcntl`` lock on ``<gradebook>.lock`` next to the file;
* is one transaction per batch of submissions (nbgrader's ``add_submission`` commits per
  call), and
* is retried from scratch (up to ``RETRIES`` times, with a growing pause) when the database
  still reports a conflict (``IntegrityError``, ``OperationalError``, nbgrader's
  ``InvalidEntry``), e.g. with a writer that does not take the lock (formgrader).
"""
from __future__ import annotations

import contextlib
import re
import sys
import time
import warnings
import zlib
from pathlib import Path

from autograder.batch.outputs import write_rows

RETRIES = 5
INSTALL_HINT = "pip install 'vitref-course[grading]'"


class GradebookUnavailable(SystemExit):
    pass


def require_nbgrader(db_url: str | None = None) -> None:
    """Fail before any grading when nbgrader (which brings rapidfuzz, the similarity report's) or the
    database's driver is missing."""
    try:
        import nbgrader.api  # noqa: F401 - imported only to fail here when nbgrader is missing
    except ImportError as error:
        raise GradebookUnavailable(
            f"error: nbgrader is not installed ({error}); the grader writes nbgrader's gradebook. "
            f"Install the grading extra: {INSTALL_HINT}")
    if db_url and not db_url.startswith("sqlite"):
        try:                                  # the driver SQLAlchemy picks for this URL
            from sqlalchemy.engine import make_url
            make_url(db_url).get_dialect().import_dbapi()
        except ImportError as error:
            raise GradebookUnavailable(
                f"error: the database driver for --db-url {redact(db_url)} is not installed "
                f"({error}). Install the grading extra: {INSTALL_HINT}")
        except Exception as error:  # noqa: BLE001 - a malformed URL
            raise GradebookUnavailable(f"error: --db-url {redact(db_url)} is not a database URL "
                                       f"nbgrader can use ({type(error).__name__}: {error})")


def redact(db_url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", db_url)


def default_url(root: Path) -> str:
    return f"sqlite:///{Path(root).resolve() / 'gradebook.db'}"


def alembic_head() -> str:
    """The revision nbgrader stamps a new gradebook with, read from its migration scripts here.
    nbgrader's own ``get_alembic_version`` runs the ``alembic`` program for it, a second Python that
    imports nbgrader again: 3 s at the end of every first grading of a class."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite://") as ini:
        return ScriptDirectory.from_config(Config(ini)).get_current_head()


@contextlib.contextmanager
def lock(db_url: str, course: str = ""):
    """Exclusive access to the gradebook for one write, across processes and machines."""
    if db_url.startswith("sqlite:///"):
        import fcntl
        path = Path(db_url[len("sqlite:///"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(f".{path.name}.lock"), "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        return
    if db_url.startswith(("postgresql", "postgres")):
        from sqlalchemy import create_engine, text
        key = zlib.crc32(f"autograder-gradebook:{course}".encode()) - (1 << 31)   # a signed int4
        engine = create_engine(db_url, future=True)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
        finally:
            engine.dispose()
        return
    yield                                   # another database: rely on the retries


def _retryable() -> tuple:
    from nbgrader.api import InvalidEntry
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
    # ProgrammingError: "relation already exists" when two writers create the tables at once
    return (IntegrityError, OperationalError, ProgrammingError, InvalidEntry)


def write(db_url: str, course_id: str, sources: dict, results: list[dict]) -> int:
    """Record ``results`` in the gradebook at ``db_url``; returns the number of attempts."""
    retryable = _retryable()
    for attempt in range(1, RETRIES + 1):
        try:
            with lock(db_url, course_id):
                _write_once(db_url, course_id, sources, results)
            return attempt
        except retryable as error:
            if attempt == RETRIES:
                raise
            print(f"gradebook write conflict ({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
                  f"retrying ({attempt}/{RETRIES - 1})", file=sys.stderr, flush=True)
            time.sleep(0.2 * 2 ** attempt)
    return RETRIES


def _gradebook(db_url: str, course_id: str):
    """nbgrader's ``Gradebook`` at ``db_url``; a new database is stamped with :func:`alembic_head`."""
    from unittest import mock

    import nbgrader.api

    with mock.patch.object(nbgrader.api, "get_alembic_version", alembic_head):
        return nbgrader.api.Gradebook(db_url, course_id)


def _write_once(db_url: str, course_id: str, sources: dict, results: list[dict]) -> None:
    used = sorted({r["assignment"] for r in results if r["assignment"] in sources})
    with warnings.catch_warnings(), _gradebook(db_url, course_id) as gb:
        # nbgrader's own add_submission triggers SQLAlchemy "not in session" warnings
        warnings.simplefilter("ignore")
        try:
            for assignment in used:
                _write_structure(gb, assignment, sources[assignment])
            _write_submissions(gb, sources, results)
            gb.db.commit()
        except BaseException:
            gb.db.rollback()
            raise


def _write_structure(gb, assignment: str, src) -> None:
    """The assignment's notebook and its grade, solution and source cells, from its source."""
    gb.update_or_create_assignment(assignment)
    gb.update_or_create_notebook(src.notebook, assignment)
    for cell in src.grade_cells:
        gb.update_or_create_grade_cell(cell.name, src.notebook, assignment,
                                       max_score=cell.points, cell_type=cell.cell_type)
    for name in src.solution_cells:
        gb.update_or_create_solution_cell(name, src.notebook, assignment)
    for cell in src.source_cells:
        gb.update_or_create_source_cell(cell["name"], src.notebook, assignment,
                                        cell_type=cell["cell_type"], locked=cell["locked"],
                                        source=cell["source"])


def _write_submissions(gb, sources: dict, results: list[dict]) -> None:
    """The submissions: nbgrader's own models, built as Gradebook.add_submission builds them (a
    SubmittedNotebook per notebook, a Grade per grade cell, a Comment per solution cell), in the
    caller's one transaction: add_submission commits once per call, which takes about a minute
    for 800 submissions."""
    from nbgrader.api import Student, SubmittedAssignment

    known_students = {st.id for st in gb.students}
    for student in sorted({r["student"] for r in results if r["assignment"] in sources}):
        if student not in known_students:
            gb.db.add(Student(id=student))
    gb.db.flush()
    students = {st.id: st for st in gb.students}
    assignments = {a.name: a for a in gb.assignments}
    existing = {(sub.assignment.name, sub.student.id): sub
                for sub in gb.db.query(SubmittedAssignment).all()}
    for r in results:
        if r["assignment"] not in sources:
            continue
        src = sources[r["assignment"]]
        sub = existing.get((r["assignment"], r["student"]))
        if sub is None:
            sub = _new_submission(assignments[r["assignment"]], students[r["student"]])
            gb.db.add(sub)
            existing[(r["assignment"], r["student"])] = sub
        stamp = r.get("timestamp")
        if stamp:
            try:
                from nbgrader.utils import parse_utc
                sub.timestamp = parse_utc(stamp)
            except Exception:  # noqa: BLE001 - a timestamp is informative only
                pass
        _scores(sub, src, r)


def _new_submission(assignment, student):
    """A SubmittedAssignment with its notebooks, grades and comments, as add_submission makes it."""
    from nbgrader.api import Comment, Grade, SubmittedAssignment, SubmittedNotebook

    sub = SubmittedAssignment(assignment=assignment, student=student)
    for notebook in sub.assignment.notebooks:
        nb = SubmittedNotebook(notebook=notebook, assignment=sub)
        for grade_cell in notebook.grade_cells:
            Grade(cell_id=grade_cell.id, notebook=nb)
        for solution_cell in notebook.solution_cells:
            Comment(cell_id=solution_cell.id, notebook=nb)
        for task_cell in notebook.task_cells:
            Comment(cell_id=task_cell.id, notebook=nb)
            Grade(cell_id=task_cell.id, notebook=nb)
    return sub


def _scores(sub, src, result: dict) -> None:
    """Set the auto score of every grade cell of one submission from its questions."""
    scores = {q["id"]: q for q in result["questions"]}
    cells = {cell.name: cell for cell in src.grade_cells}
    for nb in sub.notebooks:
        if nb.notebook.name != src.notebook:
            continue
        names = {gc.id: gc.name for gc in nb.notebook.grade_cells}
        for grade in nb.grades:
            cell = cells.get(names.get(grade.cell_id))
            if cell is None:
                continue
            if cell.cell_type == "markdown" and not cell.qids:
                # a written answer (nbgrader's manually graded answer cell): no automatic score and
                # "needs manual grade" in formgrader, as nbgrader's own autograde leaves it; an
                # instructor's manual score from an earlier run is kept
                grade.auto_score = None
                grade.needs_manual_grade = True
                continue
            qs = [scores[qid] for qid in cell.qids if qid in scores]
            if qs:
                total = sum(q["max_score"] for q in qs)
                earned = sum(q["score"] for q in qs)
                grade.auto_score = cell.points * earned / total if total else 0.0
                # a question held for review (a flag in the source) keeps its automatic score
                # and waits for the instructor in formgrader's "needs manual grade"
                grade.needs_manual_grade = any(q.get("held") for q in qs)
            elif result["questions"]:
                grade.auto_score = 0.0           # a test cell no question covers
                grade.needs_manual_grade = True


def export_csv(db_url: str, course_id: str, path: Path) -> Path:
    """``nbgrader export`` (its CSV plugin) of the gradebook: one row per student and assignment."""
    from nbgrader.plugins import CsvExportPlugin

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    exporter = CsvExportPlugin()
    exporter.to = str(path)
    with warnings.catch_warnings(), _gradebook(db_url, course_id) as gb:
        warnings.simplefilter("ignore")
        exporter.export(gb)
    _neutralise_csv(path)
    return path


def _neutralise_csv(path: Path) -> None:
    """nbgrader's CSV rewritten with every field neutralised (a student id ``=SUM(1,1)`` would
    be a formula in a spreadsheet: :func:`autograder.batch.text.csv_field`)."""
    import csv
    import locale

    # nbgrader's plugin writes with the locale's encoding (open() without one)
    with open(path, newline="", encoding=locale.getpreferredencoding(False), errors="replace") as fh:
        rows = list(csv.reader(fh))
    write_rows(path, rows)
