"""`python -m autograder grade` as an instructor uses it: re-runs skip what is graded,
changes are regraded, an interrupted batch resumes, odd folders still get rows, the
gradebook follows, feedback is escaped. Uses 02_positional_encoding (one question, q1)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import autograder

import grading_students as S

pytestmark = pytest.mark.slow   # grades classes with `python -m autograder grade` (make test-fast skips it)

A = "02_positional_encoding"


def grade(root: Path, *extra: str, version: str = "v1", timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the command; the grader version is pinned so that edits to the autograder made
    while the tests run do not count as "the grader changed"."""
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--no-progress",
           "--timeout", "20", *extra]
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION=version)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=S.REPO, env=env)


def scores(root: Path) -> dict:
    return {k: v[0] for k, v in S.read_csv(root).items()}


def q1_scores(root: Path) -> dict:
    """The scores of q1 only (the assignment also has a conceptual question)."""
    return {k: v for k, v in scores(root).items() if k[2] == "q1"}


QUESTIONS_A = [q.id for q in autograder.questions(A)]            # q1 and the chapter's conceptual question
FULL_A = sum(q.points for q in autograder.questions(A))


def _odd_students(root: Path) -> None:
    (root / "submitted" / "empty" / A).mkdir(parents=True)                  # no notebook
    S.write(S.load(A), root, "renamed", A, name="my work.ipynb")             # another name
    S.write(S.load(A, "exercises"), root, "two", A)                          # two notebooks:
    S.write(S.load(A), root, "two", A, name="scratch.ipynb")                 # the named one counts
    S.write(S.load(A), root, "other", "99_not_an_assignment")
    # an error message that tries to inject HTML into the feedback page
    S.write(S.replace_definition(S.load(A), "getPositionEncoding",
                                 "def getPositionEncoding(seq_len, d, n=10000):\n"
                                 "    raise ValueError('<script>alert(1)</script>')"), root, "xss", A)


def test_batch_odd_folders_rerun_changes_and_force(tmp_path):
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    S.write(S.load(A, "exercises"), root, "ben", A)
    _odd_students(root)
    first = grade(root)
    assert first.returncode == 0, first.stderr
    assert "grading 7 submission(s)" in first.stdout, first.stdout
    rows = S.read_csv(root)
    assert rows[("ann", A, "q1")][:2] == (2.0, 2.0) and rows[("ben", A, "q1")][:2] == (0.0, 2.0)
    # odd folders: every one still has its row, with a reason when it is a zero
    assert rows[("renamed", A, "q1")][0] == 2.0
    assert rows[("two", A, "q1")][0] == 0.0
    assert rows[("empty", A, "q1")][:2] == (0.0, 2.0) and "no notebook" in rows[("empty", A, "q1")][2]
    assert rows[("other", "99_not_an_assignment", "")][1] == 0.0
    assert "no questions" in rows[("other", "99_not_an_assignment", "")][2]
    assert len(rows) == 6 * len(QUESTIONS_A) + 1
    header = (root / "grades.csv").read_text().splitlines()[0]
    assert header == "student,assignment,question,score,max_score,reason"
    two = json.loads((root / ".autograder" / "results" / "two" / f"{A}.json").read_text())
    assert two["notebook"] == f"{A}.ipynb" and "several notebooks" in two["reason"]
    page = (root / "autograder-feedback" / "xss" / A / "feedback.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert not (root / "feedback").exists()           # nbgrader's generate_feedback writes there
    # formgrader finds the graded notebook under the source notebook's name: the submitted
    # cells, no output of the student's, the grader's verdict as the test cell's output
    import nbformat
    graded = nbformat.read(root / "autograded" / "renamed" / A / f"{A}.ipynb", 4)
    submitted = nbformat.read(root / "submitted" / "renamed" / A / "my work.ipynb", 4)
    from autograder.batch.sources import HIDDEN_TESTS
    # (the submitted solution notebook still has the hidden tests: never shown in feedback)
    from autograder.batch.sanitize import markdown_cell_source
    # markdown is stored rendered and cleaned (tests/threats/test_sanitised_markdown.py)
    assert [c.source for c in graded.cells] == [markdown_cell_source(c.source) if c.cell_type == "markdown"
                                                else HIDDEN_TESTS.sub("", c.source) for c in submitted.cells]
    assert "HIDDEN TESTS" in "".join(c.source for c in submitted.cells)
    test_cells = [c for c in graded.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    assert len(test_cells) == len(QUESTIONS_A)                      # one test cell per question
    written = [c for c in graded.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
    assert len(written) == 1 and written[0].metadata["nbgrader"]["grade_id"] == "written"   # left for formgrader
    assert [o.text for o in test_cells[0].outputs] == [
        "[q1] Q1 positional encoding (getPositionEncoding): 2/2 - correct\n"]
    assert all(c.outputs for c in test_cells)                       # each shows the grader's verdict
    assert all(not c.get("outputs") for c in graded.cells if c not in test_cells)
    assert (root / "autograded" / "renamed" / A / "timestamp.txt").read_text().strip()
    xss = nbformat.read(root / "autograded" / "xss" / A / f"{A}.ipynb", 4)
    xss_test = next(c for c in xss.cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert xss_test.outputs[0].name == "stderr" and "0/2" in xss_test.outputs[0].text
    assert (root / "report.html").is_file()

    state = root / ".autograder" / "results" / "ann" / f"{A}.json"
    stamp = state.stat().st_mtime_ns
    again = grade(root)
    assert again.returncode == 0, again.stderr
    assert "grading 0 submission(s)" in again.stdout and "7 unchanged" in again.stdout
    assert state.stat().st_mtime_ns == stamp
    assert S.read_csv(root) == rows

    # ben hands in the solution: only ben is graded again, and the gradebook follows
    S.write(S.load(A), root, "ben", A)
    changed = grade(root)
    assert "grading 1 submission(s)" in changed.stdout, changed.stdout
    assert state.stat().st_mtime_ns == stamp
    assert scores(root)[("ben", A, "q1")] == 2.0
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert gb.find_submission(A, "ben").score == FULL_A
        assert len(gb.find_assignment(A).submissions) == 6

    # --force grades again what it is asked to (here one student); the others keep their rows
    forced = grade(root, "--force", "--student", "ann")
    assert "grading 1 submission(s)" in forced.stdout, forced.stdout
    assert state.stat().st_mtime_ns != stamp
    assert len(S.read_csv(root)) == 6 * len(QUESTIONS_A) + 1


def test_new_grader_version_invalidates_saved_results(tmp_path):
    """A change to the checks or to vitref (another grader version) regrades everything."""
    from autograder.batch.sources import load_sources
    from autograder.batch.state import load_state, save_state
    from autograder.batch.tasks import discover, grader_version, questions_by_assignment
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    questions = questions_by_assignment()
    sources = load_sources(S.REPO / "solutions", questions)
    (task,) = discover(root, questions, sources, "v1")
    save_state(root, {"student": "ann", "assignment": A, "digest": task.digest,
                      "questions": [], "score": 0, "max_score": 0})
    assert load_state(root, task) is not None
    (task_v2,) = discover(root, questions, sources, "v2")
    assert load_state(root, task_v2) is None
    assert load_state(root, task_v2, any_version=True) is not None
    S.write(S.load(A, "exercises"), root, "ann", A)
    (changed,) = discover(root, questions, sources, "v1")
    assert load_state(root, changed) is None
    assert grader_version() != "v1"     # the real version is a hash of the grading code


def test_interrupted_batch_resumes(tmp_path):
    """Ctrl-C in the middle: finished submissions are kept; the next run grades the rest."""
    root = tmp_path / "course"
    for student in ("a1", "a2"):
        S.write(S.load(A), root, student, A)
    # z9 sleeps in a cell (ignoring SIGALRM is refused in the sandbox now: only its cell's alarm or the
    # 20 s wall limit stops it, well after the interrupt)
    S.write(S.insert_cell(S.load(A), "import time\ntime.sleep(600)"), root, "z9", A)
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "1", "--no-progress",
           "--timeout", "20"]
    # A foreground grader gets Ctrl-C; a test run started in the background (``cmd &``, nohup) would
    # otherwise hand the grader an ignored SIGINT, so put back the default that a terminal gives.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=S.REPO, env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    states = root / ".autograder" / "results"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if (states / "a2" / f"{A}.json").exists():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)       # z9 is running now
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert not (states / "z9" / f"{A}.json").exists()
    assert q1_scores(root) == {("a1", A, "q1"): 2.0, ("a2", A, "q1"): 2.0}
    # no grading process is left behind
    assert subprocess.run(["pgrep", "-f", f"autograder grade {root}"], capture_output=True).stdout == b""

    S.write(S.load(A), root, "z9", A)
    resumed = grade(root)
    assert "grading 1 submission(s)" in resumed.stdout and "2 unchanged" in resumed.stdout
    assert q1_scores(root) == {("a1", A, "q1"): 2.0, ("a2", A, "q1"): 2.0, ("z9", A, "q1"): 2.0}


def test_missing_root_is_a_clear_error(tmp_path):
    result = grade(tmp_path / "nowhere")
    assert result.returncode != 0
    assert "submitted" in result.stderr


@pytest.mark.parametrize("missing", ["nbgrader", "rapidfuzz"])
def test_a_missing_grading_package_is_a_clear_error_before_grading(missing, tmp_path):
    """Without nbgrader or rapidfuzz (the grading extra), the command says what to install and grades nothing."""
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            "from autograder.batch.cli import main\n"
            f"sys.exit(main([{str(root)!r}, '--no-progress']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=S.REPO)
    assert proc.returncode != 0
    assert "pip install 'vitref-course[grading]'" in proc.stderr + proc.stdout, proc.stderr
    assert missing in proc.stderr + proc.stdout, proc.stderr
    assert "grading 1 submission" not in proc.stdout
    assert not (root / ".autograder").exists() and not (root / "grades.csv").exists()


def test_the_students_command_imports_no_grading_package():
    """Colab installs the course without the grading extra: ``python -m autograder`` (``check``,
    ``questions``) imports none of it, though it reaches the similarity module through ``export``."""
    code = ("import sys\nfor name in ('nbgrader', 'rapidfuzz', 'nh3', 'psycopg'): sys.modules[name] = None\n"
            "from autograder.__main__ import main\n"
            "sys.exit(main(['questions', '--chapter', '01_tokens']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=S.REPO)
    assert proc.returncode == 0, proc.stderr
    assert "embedding_lookup" in proc.stdout


def test_a_virtual_environment_reached_through_a_symlink(tmp_path):
    """The class graded by a .venv whose path passes through a symlink (a home folder that
    is a link, a venv moved and linked back): honest students still get full marks."""
    link = tmp_path / "linked-venv"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = link / "bin" / "python"
    assert python.exists()
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    S.write(S.load(A, "exercises"), root, "ben", A)
    proc = subprocess.run([str(python), "-m", "autograder", "grade", str(root), "--jobs", "1",
                           "--no-progress", "--timeout", "20"], cwd=S.REPO, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert q1_scores(root) == {("ann", A, "q1"): 2.0, ("ben", A, "q1"): 0.0}, S.read_csv(root)


def test_every_assignment_solution_full_marks_exercise_zero(tmp_path):
    """The whole course through the batch path (inputs drawn by the grader with a secret salt,
    sandbox): each solution notebook scores every question in full, each blank exercise zero.
    The local `check` path draws no inputs, so only this test sees a question whose draw fails
    (q2's float64 case once failed for every 06 submission here and nowhere else)."""
    from autograder.instructor.nbtools import assignments

    root = tmp_path / "course"
    names = assignments(S.REPO)
    for name in names:
        S.write(S.load(name), root, "solver", name)
        S.write(S.load(name, "exercises"), root, "blank", name)
    proc = grade(root, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = S.read_csv(root)
    expected = {(student, q.chapter, q.id) for student in ("solver", "blank") for name in names
                for q in autograder.questions(name)}
    assert set(rows) == expected
    for (student, assignment, qid), (score, max_score, reason) in rows.items():
        wanted = max_score if student == "solver" else 0.0
        assert score == wanted, (student, assignment, qid, reason)
