"""Which questions ``python -m autograder check`` checks without ``--question``: those of the
assignment the notebook's own marks name (nbgrader grade ids, else the check cells' lines), never
its file name nor the names its code defines (autograder/hosts/identify.py). The full checks of
the renamed notebooks run in tests/test_autograder_cli.py (slow)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbconvert import ScriptExporter

import autograder
from autograder.__main__ import main as cli
from autograder.hosts.child_process import default_questions
from autograder.hosts.identify import FROM_CHECK_CELLS, FROM_GRADE_IDS, Unidentified, identify
from autograder.instructor.nbtools import marks_problem
from autograder.student.cells import SubmissionError
from tests.answers.submission import write_submission

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = sorted({q.chapter for q in autograder.questions()})
NOTEBOOKS = [(which, a) for which in ("solutions", "exercises") for a in ASSIGNMENTS]


def source(which: str, assignment: str) -> Path:
    return ROOT / which / assignment / f"{assignment}.ipynb"


def own_questions(assignment: str) -> tuple[str, ...]:
    return tuple(q.id for q in autograder.questions(assignment))


def without_metadata(path: Path, out: Path) -> Path:
    """The notebook as an editor that keeps no cell metadata saves it."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        cell.metadata = {}
    nbformat.write(nb, out)
    return out


@pytest.mark.parametrize("which, assignment", NOTEBOOKS, ids=lambda x: x)
def test_a_colab_copy_in_another_folder_is_its_own_assignment(which, assignment, tmp_path):
    copy = tmp_path / "Drive" / "Colab Notebooks" / f"Copy of {assignment}.ipynb"
    copy.parent.mkdir(parents=True)
    shutil.copy(source(which, assignment), copy)
    identity = identify(copy)
    assert identity.assignments == (assignment,)
    assert identity.qids == own_questions(assignment) and identity.found_by == FROM_GRADE_IDS
    assert default_questions(copy) == list(own_questions(assignment))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_script_export_is_named_by_its_check_cells(assignment, tmp_path):
    """``jupyter nbconvert --to script`` drops every cell's metadata; the generated exercise's check
    cells (``print(autograder.grade("<id>", ...))``, which tests/test_conventions.py requires)
    come through, so the export of what students get still names its assignment."""
    body, _ = ScriptExporter().from_filename(str(source("exercises", assignment)))
    assert "grade_id" not in body                  # nothing of nbgrader's metadata survives the export
    script = tmp_path / "my export.py"
    script.write_text(body)
    identity = identify(script)
    assert identity.assignments == (assignment,) and identity.found_by == FROM_CHECK_CELLS
    assert identity.qids == own_questions(assignment)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_make_assignments_holds_every_exercise_to_both_marks(assignment, tmp_path):
    """``make assignments`` refuses an exercise notebook whose grade ids or check cells do not name
    every question of its assignment (nbtools.marks_problem, after nbgrader writes it)."""
    assert marks_problem(source("exercises", assignment), assignment) is None
    nb = nbformat.read(source("exercises", assignment), as_version=4)
    first = autograder.questions(assignment)[0].id
    nb.cells = [c for c in nb.cells if not c.source.startswith(f'print(autograder.grade("{first}"')]
    nbformat.write(nb, tmp_path / "x.ipynb")
    problem = marks_problem(tmp_path / "x.ipynb", assignment)
    assert problem and "its check cells name" in problem and first in problem


def percent_script(path: Path) -> str:
    """A notebook in jupytext's percent format: each cell after a ``# %%`` line that carries its
    metadata as ``key=<json>`` (jupytext keeps nbgrader's cell metadata there), markdown commented."""
    parts = []
    for cell in nbformat.read(path, as_version=4).cells:
        options = " ".join(f"{key}={json.dumps(value)}" for key, value in cell.metadata.items())
        if cell.cell_type == "markdown":
            body = "\n".join("# " + line if line else "#" for line in cell.source.splitlines())
            parts.append(f"# %% [markdown] {options}".rstrip() + "\n" + body)
        else:
            parts.append(f"# %% {options}".rstrip() + "\n" + cell.source)
    return "\n\n".join(parts) + "\n"


def test_a_percent_script_is_named_by_its_grade_ids_even_without_check_cells(tmp_path):
    text = percent_script(source("solutions", "05_blocks"))
    kept = "\n".join(line for line in text.splitlines() if not line.startswith("print(autograder.grade("))
    script = tmp_path / "blocks.py"
    script.write_text(kept)
    identity = identify(script)
    assert identity.assignments == ("05_blocks",) and identity.found_by == FROM_GRADE_IDS
    assert identity.qids == own_questions("05_blocks")


def test_names_say_nothing_the_marks_do(tmp_path):
    """Chapter 7's notebook named after chapter 4 (whose answer, MultiHeadAttention, chapter 7 gives
    in its code) is chapter 7's; chapter 4's questions are not among its questions."""
    misleading = tmp_path / "04_multihead_attention.ipynb"
    shutil.copy(source("solutions", "07_vit"), misleading)
    identity = identify(misleading)
    assert identity.assignments == ("07_vit",)
    assert "class MultiHeadAttention" in misleading.read_text()
    assert not set(identity.qids) & set(own_questions("04_multihead_attention"))
    renamed = tmp_path / "my work.ipynb"
    shutil.copy(source("exercises", "03_attention"), renamed)
    assert identify(renamed).assignments == ("03_attention",)


def test_without_metadata_the_check_cells_name_it_and_a_deleted_check_cell_keeps_its_question(tmp_path):
    stripped = without_metadata(source("solutions", "06_patch_embedding"), tmp_path / "x.ipynb")
    nb = nbformat.read(stripped, as_version=4)
    nb.cells = [c for c in nb.cells if not c.source.startswith('print(autograder.grade("q3"')]
    nbformat.write(nb, stripped)
    identity = identify(stripped)
    assert identity.found_by == FROM_CHECK_CELLS and "q3" in identity.qids
    assert identity.qids == own_questions("06_patch_embedding")


def test_a_check_added_for_another_chapter_does_not_pull_it_in(tmp_path):
    """Grade ids decide where there are any: a student's own check of chapter 4's answer in
    chapter 7's notebook leaves the questions chapter 7's."""
    nb = nbformat.read(source("solutions", "07_vit"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell('print(autograder.grade("q5", MultiHeadAttention))'))
    path = tmp_path / "Copy of 07_vit.ipynb"
    nbformat.write(nb, path)
    assert identify(path).qids == own_questions("07_vit")


def test_cells_of_two_assignments_name_both(tmp_path):
    first = nbformat.read(source("exercises", "02_positional_encoding"), as_version=4)
    second = nbformat.read(source("exercises", "03_attention"), as_version=4)
    for cell in second.cells:
        cell.id = "second-" + cell.id              # nbformat wants the ids unique
    first.cells += second.cells
    path = tmp_path / "both.ipynb"
    nbformat.write(first, path)
    identity = identify(path)
    assert identity.assignments == ("02_positional_encoding", "03_attention")
    assert identity.qids == own_questions("02_positional_encoding") + own_questions("03_attention")


def test_a_file_without_marks_is_refused_with_what_was_expected(tmp_path):
    """Every answer name of the course defined at top level, but no mark: nothing is guessed."""
    answers = tmp_path / "03_attention.py"                 # a chapter's name does not count either
    write_submission(answers)                              # every question's solution (from the answer banks)
    with pytest.raises(Unidentified) as raised:
        identify(answers)
    message = str(raised.value)
    assert "does not say which assignment" in message and "it has neither" in message
    assert "grade_id" in message and 'print(autograder.grade("<question id>"' in message
    assert "--question QID" in message
    empty = without_metadata(source("solutions", "03_attention"), tmp_path / "Copy of 03_attention.ipynb")
    nb = nbformat.read(empty, as_version=4)
    nb.cells = [c for c in nb.cells if "autograder.grade(" not in c.source]
    nbformat.write(nb, empty)
    with pytest.raises(Unidentified, match="it has neither"):
        identify(empty)


def test_marks_of_no_known_question_are_named_in_the_refusal(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"grade_id": "q99_answer"}}),
                nbformat.v4.new_code_cell("print(autograder.grade(\"old_question\", x))")]
    path = tmp_path / "old.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(Unidentified, match="q99, old_question") as raised:
        identify(path)
    assert "another version of the course" in str(raised.value)


def test_unreadable_files_say_why(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ not json")
    with pytest.raises(SubmissionError, match="not a valid notebook"):
        identify(broken)
    other = tmp_path / "answers.txt"
    other.write_text("x = 1")
    with pytest.raises(SubmissionError, match="expected a notebook"):
        identify(other)
    with pytest.raises(SubmissionError, match="cannot read"):
        identify(tmp_path / "missing.ipynb")


def test_the_command_line_refuses_an_unmarked_file_before_running_it(tmp_path, capsys):
    answers = tmp_path / "answers.py"
    answers.write_text("import sys\nsys.exit('ran')\n")
    assert cli(["check", str(answers)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "does not say which assignment" in err
