"""nbgrader around the course, in scratch course folders.

(a) `make autograde`: the sandboxed grader into nbgrader's gradebook, then nbgrader's own
tools on what it wrote: `nbgrader export`, and `nbgrader generate_feedback` (the real
command) producing each student's HTML page.

(b) `make autograde-unsandboxed`: nbgrader's in-kernel autograde. The reference solutions
must get full marks, the blank exercises zero, and a correct answer that prints warnings
on stderr must not lose points.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output

import autograder
from autograder.instructor import nbtools

pytestmark = pytest.mark.slow   # runs nbgrader in scratch course folders (make test-fast skips it)

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = nbtools.assignments(ROOT)
NOISY = "02_positional_encoding"
NOISY_CELL = '''
import warnings

_quiet_answer = getPositionEncoding


def getPositionEncoding(seq_len, d, n=10000):
    warnings.warn("a correct answer that also prints a warning", UserWarning)
    return _quiet_answer(seq_len, d, n)
'''


def _submit(course: Path, student: str, name: str, nb) -> None:
    folder = course / "instructor" / "submitted" / student / name
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{name}.ipynb")


def _autograde(courses: list[Path]) -> None:
    """`python -m autograder.instructor.nbtools autograde-unsandboxed --course C` for each course, in parallel."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-m", "autograder.instructor.nbtools", "autograde-unsandboxed",
                               "--course", str(c)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in courses]
    outs = [(p, p.communicate(timeout=1200)[0]) for p in procs]
    for proc, out in outs:
        assert proc.returncode == 0, out[-6000:]


def _gradebook(course: Path) -> str:
    return f"sqlite:///{course / 'instructor' / 'gradebook.db'}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Two scratch courses graded side by side: (solutions + noisy answer) and blanks."""
    good, blank = tmp_path_factory.mktemp("course-good"), tmp_path_factory.mktemp("course-blank")
    for name in ASSIGNMENTS:
        _submit(good, "solution", name, nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4))
        _submit(blank, "blank", name, nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", 4))
    noisy = nbformat.read(ROOT / "solutions" / NOISY / f"{NOISY}.ipynb", 4)
    position = [c.id for c in noisy.cells].index("q1-answer") + 1
    noisy.cells.insert(position, new_code_cell(NOISY_CELL.strip(), id="student-extra"))
    _submit(good, "noisy", NOISY, noisy)
    _autograde([good, blank])
    scores = {**nbtools.scores(_gradebook(good)), **nbtools.scores(_gradebook(blank))}
    return good, blank, scores


def _auto_points(name: str) -> float:
    """The points of the assignment's autograded questions."""
    return float(sum(q.points for q in autograder.questions() if q.chapter == name))


def _written_points(name: str) -> float:
    """The points of its written questions (markdown answer cells graded by hand)."""
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4)
    return float(sum(c.metadata["nbgrader"]["points"] for c in nb.cells
                     if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")))


def _max_points(name: str) -> float:
    return _auto_points(name) + _written_points(name)


def test_solutions_get_full_marks(graded):
    """Every automatic point; the written question waits for the instructor (no score yet)."""
    _, _, scores = graded
    for name in ASSIGNMENTS:
        score, max_score = scores[("solution", name)]
        assert max_score == _max_points(name) > _auto_points(name), name
        assert score == _auto_points(name), f"{name}: the reference solution scored {score}/{max_score}"


def test_blank_exercises_get_zero(graded):
    _, _, scores = graded
    for name in ASSIGNMENTS:
        score, max_score = scores[("blank", name)]
        assert max_score == _max_points(name), name
        assert score == 0, f"{name}: the blank exercise scored {score}/{max_score}"


def test_warnings_on_stderr_cost_no_points(graded):
    _, _, scores = graded
    assert scores[("noisy", NOISY)] == scores[("solution", NOISY)] == (_auto_points(NOISY), _max_points(NOISY))


def _errors(cell) -> list[str]:
    return [o.ename for o in cell.get("outputs", []) if o.output_type == "error"]


def test_blank_exercises_fail_only_at_the_blanks(graded):
    """In the executed blank notebooks the answer cells fail with NotImplementedError (the
    stub nbgrader put in), every test cell fails, and nothing else fails."""
    _, blank, _ = graded
    for name in ASSIGNMENTS:
        nb = nbformat.read(blank / "instructor" / "autograded" / "blank" / name / f"{name}.ipynb", 4)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata.get("nbgrader", {})
            errors = _errors(cell)
            if meta.get("grade"):
                assert errors, f"{name}/{cell.id}: the test cell passed on a blank exercise"
            elif meta.get("solution"):
                assert set(errors) <= {"NotImplementedError"}, f"{name}/{cell.id}: {errors}"
            else:
                assert not errors, f"{name}/{cell.id}: {errors}"


def test_solutions_run_without_any_error_under_nbgrader(graded):
    good, _, _ = graded
    for name in ASSIGNMENTS:
        nb = nbformat.read(good / "instructor" / "autograded" / "solution" / name / f"{name}.ipynb", 4)
        failing = [(c.id, _errors(c)) for c in nb.cells if c.cell_type == "code" and _errors(c)]
        assert not failing, f"{name}: {failing}"


def test_export_writes_the_gradebook_scores(graded):
    """nbgrader export: one row per student and assignment (0 where nothing was submitted)."""
    good, _, scores = graded
    with open(good / "instructor" / nbtools.NBGRADER_CSV, newline="") as fh:
        rows = {(r["student_id"], r["assignment"]): (float(r["score"]), float(r["max_score"]))
                for r in csv.DictReader(fh)}
    assert len(rows) == 2 * len(ASSIGNMENTS)
    assert rows[("noisy", "01_tokens")] == (0.0, _max_points("01_tokens"))
    for key, value in scores.items():
        if key[0] != "blank":
            assert rows[key] == value, key


def test_a_new_gradebook_is_stamped_with_the_revision_nbgrader_stamps(tmp_path, monkeypatch):
    """The grader reads the alembic revision a new gradebook gets from nbgrader's migration scripts
    in its own process; nbgrader's ``get_alembic_version`` runs the ``alembic`` program for the
    same answer. A new gradebook written by the grader carries it, and nbgrader opens it as its own."""
    import sqlite3

    from nbgrader.api import Gradebook, get_alembic_version

    from autograder.batch import gradebook

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    url = f"sqlite:///{tmp_path}/gradebook.db"
    gradebook.write(url, "course", {}, [])
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        stamped = db.execute("SELECT version_num FROM alembic_version").fetchall()
    assert stamped == [(get_alembic_version(),)]
    with Gradebook(url, "course") as gb:
        assert gb.students == []


def test_stderr_warnings_are_dropped_but_other_stderr_is_kept():
    """The nbgrader_config.py setting behind test_warnings_on_stderr_cost_no_points."""
    from nbgrader.preprocessors import IgnorePattern

    config = nbtools.load_config(ROOT)
    ignore = IgnorePattern(config=config)
    assert ignore.enabled
    cell = new_code_cell("x", outputs=[
        new_output("stream", name="stderr",
                   text="/x/einops/_backends.py:12: UserWarning: something changed\n  warnings.warn(\n"),
        new_output("stream", name="stderr", text="Traceback (most recent call last): oops\n"),
        new_output("stream", name="stdout", text="/a.py:3: UserWarning: printed on stdout\n"),
    ])
    cell, _ = ignore.preprocess_cell(cell, {}, 0)
    assert [(o.name, o.text[:9]) for o in cell.outputs] == [("stderr", "Traceback"), ("stdout", "/a.py:3: ")]


@pytest.mark.parametrize("command", ["autograde", "autograde-unsandboxed"])
def test_autograde_with_nothing_submitted_says_where_to_put_submissions(tmp_path, command):
    out = subprocess.run([sys.executable, "-m", "autograder.instructor.nbtools", command, "--course", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "nothing to grade" in out.stdout and "instructor/submitted/<student>/<assignment>" in out.stdout
    assert not (tmp_path / "instructor" / "gradebook.db").exists()


# ------------------------------------------------- (a) the sandboxed grader + nbgrader's tools

SMALL = ["02_positional_encoding", "03_attention"]
WRITTEN = "03_attention"        # "writer" submits it with an answer to the written question
WRITER_ANSWER = ("The scores' standard deviation grows like $\\sqrt{d_k}$ (about **22.6** for 512), so the "
                 "softmax saturates <script>alert(1)</script>and its gradient vanishes.")


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    """`make autograde` on a small class: solutions, blank exercises, one unreadable notebook."""
    course = tmp_path_factory.mktemp("course-sandboxed")
    for name in SMALL:
        _submit(course, "solution", name, nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", 4))
        _submit(course, "blank", name, nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", 4))
    writer = nbformat.read(ROOT / "solutions" / WRITTEN / f"{WRITTEN}.ipynb", 4)
    next(c for c in writer.cells if c.id == "written-answer").source = WRITER_ANSWER
    _submit(course, "writer", WRITTEN, writer)
    broken = course / "instructor" / "submitted" / "broken" / SMALL[0]
    broken.mkdir(parents=True)
    (broken / f"{SMALL[0]}.ipynb").write_text("{ not a notebook")
    out = subprocess.run([sys.executable, "-m", "autograder.instructor.nbtools", "autograde", "--course",
                          str(course), "--", "--jobs", "2", "--no-progress", "--timeout", "30"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "sandbox:" in out.stdout
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    return course


def test_sandboxed_autograde_fills_nbgraders_gradebook_and_export(sandboxed):
    scores = nbtools.scores(_gradebook(sandboxed), "vit-from-scratch")
    for name in SMALL:
        assert scores[("solution", name)] == (_auto_points(name), _max_points(name))
        assert scores[("blank", name)] == (0.0, _max_points(name))
    assert scores[("broken", SMALL[0])] == (0.0, _max_points(SMALL[0]))
    assert scores[("writer", WRITTEN)] == (_auto_points(WRITTEN), _max_points(WRITTEN))
    with open(sandboxed / "instructor" / nbtools.NBGRADER_CSV, newline="") as fh:
        rows = {(r["student_id"], r["assignment"]): float(r["score"]) for r in csv.DictReader(fh)}
    assert rows == {key: value[0] for key, value in scores.items()} | {
        ("broken", SMALL[1]): 0.0, ("writer", SMALL[0]): 0.0}
    # the grader's own pages are not in nbgrader's feedback folder
    assert (sandboxed / "instructor" / "autograder-feedback" / "blank" / SMALL[0] / "feedback.html").is_file()
    assert (sandboxed / "instructor" / "report.html").is_file()


def test_nbgrader_generate_feedback_works_on_what_the_grader_wrote(sandboxed):
    """The real `nbgrader generate_feedback` command, from the course folder as an
    instructor runs it: one HTML page per student and assignment, with the gradebook's
    scores and the grader's messages, and no hidden test."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in SMALL:
        out = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "generate_feedback", name],
                             cwd=sandboxed, capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Skipping existing assignment" not in out.stdout + out.stderr
    feedback = sandboxed / "instructor" / "feedback"
    pages = sorted(str(p.relative_to(feedback)) for p in feedback.glob("*/*/*.html"))
    assert pages == sorted([f"{s}/{n}/{n}.html" for s in ("solution", "blank") for n in SMALL]
                           + [f"broken/{SMALL[0]}/{SMALL[0]}.html", f"writer/{WRITTEN}/{WRITTEN}.html"])

    def text(path: Path) -> str:
        import html
        import re
        page = re.sub(r"<(style|script)\b.*?</\1>", "", path.read_text(), flags=re.S)
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())

    full = text(feedback / "solution" / "03_attention" / "03_attention.html")
    assert f"Score: 7.0 / {_max_points('03_attention'):.1f}" in full
    assert "correct" in full and "HIDDEN TESTS" not in full
    blank = text(feedback / "blank" / "02_positional_encoding" / "02_positional_encoding.html")
    assert "Score: 0.0 / 2.0" in blank and "NotImplementedError" in blank
    broken = text(feedback / "broken" / SMALL[0] / f"{SMALL[0]}.html")
    assert "Score: 0.0 / 2.0" in broken and "could not be read" in broken
    # a second run skips what is up to date (nbgrader's own rule), `make feedback` too
    again = subprocess.run([sys.executable, "-m", "autograder.instructor.nbtools", "feedback", "--course",
                            str(sandboxed)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"{len(pages)} feedback page(s)" in again.stdout


def test_a_written_answer_waits_in_formgrader_for_the_instructor(sandboxed):
    """The written question (a markdown answer cell with nbgrader's grade + solution metadata)
    after `make autograde`: in nbgrader's gradebook a grade with no automatic score that needs a
    manual grade, counted in the maximum; in the autograded notebook (what formgrader shows) the
    student's answer, readable, in a cell that keeps its id and nbgrader metadata; not in the
    grader's grades.csv (one row per autograder question); and the instructor's score, once
    given in the gradebook, counts in the total."""
    from nbgrader.api import Gradebook

    url = _gradebook(sandboxed)
    with Gradebook(url, "vit-from-scratch") as gb:
        for student, name in [("writer", WRITTEN), ("solution", WRITTEN), ("blank", SMALL[0])]:
            grade = gb.find_grade("written", name, name, student)
            assert grade.max_score == 2 and grade.cell.cell_type == "markdown", (student, name)
            assert grade.auto_score is None and grade.manual_score is None, (student, name, grade.auto_score)
            assert grade.needs_manual_grade, (student, name)
        assert gb.find_grade("attention_test", WRITTEN, WRITTEN, "writer").auto_score == 3
        submission = gb.find_submission_notebook(WRITTEN, WRITTEN, "writer")
        assert submission.needs_manual_grade and submission.max_score == _max_points(WRITTEN)
        assert [g.name for g in submission.grades if g.needs_manual_grade] == ["written"]
        gb.find_grade("written", WRITTEN, WRITTEN, "writer").manual_score = 1.5     # formgrader's edit
        gb.db.commit()
    assert nbtools.scores(url, "vit-from-scratch")[("writer", WRITTEN)] == (_auto_points(WRITTEN) + 1.5,
                                                                           _max_points(WRITTEN))
    # a regrade (here: the writer's results written again) keeps the instructor's score
    from autograder.batch import gradebook
    from autograder.batch.sources import load_sources
    sources = load_sources(ROOT / "solutions", {WRITTEN: [q for q in autograder.questions()
                                                          if q.chapter == WRITTEN]})
    rows = [{"id": q.id, "score": float(q.points), "max_score": float(q.points)}
            for q in autograder.questions() if q.chapter == WRITTEN]
    gradebook.write(url, "vit-from-scratch", sources, [{"student": "writer", "assignment": WRITTEN,
                                                        "questions": rows}])
    with Gradebook(url, "vit-from-scratch") as gb:
        grade = gb.find_grade("written", WRITTEN, WRITTEN, "writer")
        assert (grade.auto_score, grade.manual_score, grade.needs_manual_grade) == (None, 1.5, True)
    autograded = nbformat.read(sandboxed / "instructor" / "autograded" / "writer" / WRITTEN / f"{WRITTEN}.ipynb", 4)
    cell = next(c for c in autograded.cells if c.id == "written-answer")
    assert cell.cell_type == "markdown"
    assert cell.metadata["nbgrader"] == {"grade": True, "grade_id": "written", "locked": False, "points": 2.0,
                                         "schema_version": 3, "solution": True, "task": False}
    assert "<strong>22.6</strong>" in cell.source and "softmax saturates" in cell.source
    assert "\\sqrt{d_k}" in cell.source and "<script" not in cell.source
    blank = nbformat.read(sandboxed / "instructor" / "autograded" / "blank" / SMALL[0] / f"{SMALL[0]}.ipynb", 4)
    assert "YOUR ANSWER HERE" in next(c for c in blank.cells if c.id == "written-answer").source
    with open(sandboxed / "instructor" / "grades.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["question"] for r in rows if r["student"] == "writer"} == {
        q.id for q in autograder.questions() if q.chapter == WRITTEN}
