"""The conventions of the notebooks, each held by one test whose failure message is the fix.

A question (``autograder.questions()``: id, chapter, answer name, points) appears in four
places that must agree: its solutions notebook ``solutions/<chapter>/<chapter>.ipynb``, the
exercise notebook that ``make assignments`` generates from it, the list of questions that ends
the notebook's intro cell (written by ``make assignments``), and the "## Exercises" section of
its book chapter. Fast: reads JSON, runs no notebook. CONTRIBUTING.md ("Add a question") names
these tests.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

import autograder
from autograder.instructor import nbtools

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = nbtools.assignments(ROOT)
QUESTIONS = autograder.questions()
SUFFIXES = ("intro", "hints", "answer", "test")        # the four cells of a question, in this order
# The cells that belong to no question: the two header cells (make assignments), the notebook's
# introduction and imports, the given code and its text, the written question.
OTHER_IDS = (*nbtools.HEADER_IDS, "intro", "imports", "given-intro", "given", "written-intro", "written-answer")
GRADE_CALL = re.compile(r'print\(autograder\.grade\("(\w+)", (\w+)\)\)')
SCHEME = ("cell ids are <question id>-intro (markdown: the question), -hints (markdown: two <details>), "
          "-answer (code: ### BEGIN/END SOLUTION) and -test (code: the check), one after the other")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def solution(name: str) -> Path:
    return ROOT / "solutions" / name / f"{name}.ipynb"


def exercise(name: str) -> Path:
    return ROOT / "exercises" / name / f"{name}.ipynb"


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def meta(cell) -> dict:
    return dict(cell.metadata.get("nbgrader", {}))


def check_cells(nb) -> list[tuple[int, str]]:
    """(index, question id) of every code cell that calls autograder.grade on its first line."""
    found = []
    for index, cell in enumerate(nb.cells):
        m = GRADE_CALL.match(cell.source) if cell.cell_type == "code" else None
        if m:
            found.append((index, m.group(1)))
    return found


def questions_of(name: str) -> dict:
    return {q.id: q for q in QUESTIONS if q.chapter == name}


def question_cells(name: str) -> dict[str, dict[str, nbformat.NotebookNode]]:
    """{question id: {"intro": cell, "hints": ..., "answer": ..., "test": ...}} by cell id."""
    cells = {c.get("id"): c for c in read(solution(name)).cells}
    return {qid: {s: cells[f"{qid}-{s}"] for s in SUFFIXES if f"{qid}-{s}" in cells} for qid in questions_of(name)}


# ------------------------------------------------------------------ the notebooks and the registry

def test_each_chapter_of_the_registry_has_its_notebooks():
    chapters = sorted({q.chapter for q in QUESTIONS})
    for name in chapters:
        assert solution(name).is_file(), (
            f"questions are registered with chapter={name!r} but {rel(solution(name))} does not exist: write it "
            f"(CONTRIBUTING.md, 'Add a chapter'), then run `make assignments`")
        assert exercise(name).is_file(), f"{rel(exercise(name))} is missing: run `make assignments`"
    extra = sorted(set(ASSIGNMENTS) - set(chapters))
    assert not extra, (f"solutions/ has notebooks {extra} of which autograder.questions() registers no question: "
                       f"register its questions (Question(chapter=...)) or remove the folder")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_question_has_one_check_cell_and_every_check_cell_a_question(name):
    path, expected = rel(solution(name)), questions_of(name)
    found = [qid for _, qid in check_cells(read(solution(name)))]
    for qid in sorted(set(found) - set(expected)):
        owner = next((q.chapter for q in QUESTIONS if q.id == qid), None)
        where = f"it is registered for chapter {owner!r}" if owner else "no question has this id"
        pytest.fail(f"{path}: a check cell grades {qid!r}, but {where} (autograder/questions/)")
    for qid in sorted(set(expected) - set(found)):
        q = expected[qid]
        pytest.fail(f"{path}: question {qid!r} has no check cell: add a code cell {qid}-test whose first line is "
                    f'print(autograder.grade("{qid}", {q.answer_name})), after its answer cell {qid}-answer')
    doubles = sorted({qid for qid in found if found.count(qid) > 1})
    assert not doubles, f"{path}: more than one check cell grades {doubles}: keep one per question"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_registry_lists_a_chapters_questions_in_the_notebooks_order(name):
    """``check`` prints, and the intro cell lists, the questions in the registry's order: the
    notebook's, so that a student reads the results top to bottom as the notebook goes."""
    in_notebook = [qid for _, qid in check_cells(read(solution(name)))]
    registered = list(questions_of(name))
    assert registered == in_notebook, (
        f"autograder.questions({name!r}) gives {registered}, but {rel(solution(name))} asks {in_notebook}: register "
        f"the questions (autograder/questions/) in the notebook's order")


# ------------------------------------------------------------------ cell ids and grade ids

@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_cell_ids_follow_the_question_ids(name):
    nb, path = read(solution(name)), rel(solution(name))
    wanted: dict[int, str] = {}
    for index, qid in check_cells(nb):
        for offset, suffix in enumerate(reversed(SUFFIXES)):
            wanted[index - offset] = f"{qid}-{suffix}"
    for index, cell in enumerate(nb.cells):
        want = wanted.get(index)
        if want is not None:
            assert cell.get("id") == want, (
                f"{path}: cell {index} {cell.get('id')!r} should be named {want!r} ({SCHEME}): change its \"id\" "
                f"in the notebook's JSON, then run `make assignments`")
            kind = "code" if want.endswith(("-answer", "-test")) else "markdown"
            assert cell.cell_type == kind, f"{path}: cell {want!r} should be a {kind} cell ({SCHEME})"
        else:
            assert cell.get("id") in OTHER_IDS, (
                f"{path}: cell {index} {cell.get('id')!r} belongs to no question: name it one of {list(OTHER_IDS)}, "
                f"or, if it is part of a question, make it that question's <id>-intro/-hints/-answer/-test "
                f"(one cell each: merge the text into <id>-intro)")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_grade_ids_and_points_follow_the_question(name):
    path = rel(solution(name))
    for qid, cells in question_cells(name).items():
        q = questions_of(name)[qid]
        expected = {
            "answer": {"grade": False, "grade_id": f"{qid}_answer", "locked": False, "schema_version": 3,
                       "solution": True, "task": False},
            "test": {"grade": True, "grade_id": f"{qid}_test", "locked": True, "points": q.points,
                     "schema_version": 3, "solution": False, "task": False},
        }
        for suffix, want in expected.items():
            if suffix not in cells:
                continue                     # test_cell_ids_follow_the_question_ids says so
            got = meta(cells[suffix])
            assert got == want, (
                f"{path}: cell '{qid}-{suffix}' should have the nbgrader metadata {json.dumps(want)} "
                f"(grade ids are <id>_answer/<id>_test; the points are the question's, autograder/questions/), "
                f"not {json.dumps(got, sort_keys=True)}")
        for suffix in ("intro", "hints"):
            if suffix in cells:
                assert not meta(cells[suffix]), f"{path}: cell '{qid}-{suffix}' should have no nbgrader metadata"
        if "answer" in cells:
            src = cells["answer"].source
            assert "### BEGIN SOLUTION" in src and "### END SOLUTION" in src, (
                f"{path}: cell '{qid}-answer' should hold its answer between the lines ### BEGIN SOLUTION and "
                f"### END SOLUTION (nbgrader replaces them with the blank)")
        if "test" in cells:
            first = cells["test"].source.splitlines()[0]
            call = f'print(autograder.grade("{qid}", {q.answer_name}))'
            assert first == call, (f"{path}: cell '{qid}-test' should start with the line {call} "
                                   f"(the question's answer name is {q.answer_name!r})")


# ------------------------------------------------------------------ what a question's text says

HINTS_TEMPLATE = ("<details><summary>Hint 1</summary>\\n\\nthe idea\\n</details>\\n\\n"
                  "<details><summary>Hint 2</summary>\\n\\na scaffold\\n</details>")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_every_question_has_two_hints_after_its_text(name):
    path = rel(solution(name))
    for qid, cells in question_cells(name).items():
        if "hints" not in cells:
            continue                         # test_cell_ids_follow_the_question_ids says so
        hint = cells["hints"].source
        fix = f"{path}: cell '{qid}-hints' should hold two collapsed hints, Hint 1 then Hint 2: {HINTS_TEMPLATE}"
        assert hint.count("<details>") == 2 and hint.count("</details>") == 2, fix
        assert "<summary>Hint 1</summary>" in hint and "<summary>Hint 2</summary>" in hint, fix
        assert hint.index("<summary>Hint 1</summary>") < hint.index("<summary>Hint 2</summary>"), fix
        for part in hint.split("</summary>")[1:]:
            assert part.startswith("\n\n"), f"{fix} (a blank line after each </summary> lets Markdown render inside)"


def _assigned(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:       # x = ..., a, b = ...; not self.x = ... nor P[k] = ...
            for sub in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(sub, ast.Name):
                    names.add(sub.id)
    return names


def required_names(qid: str, answer_source: str) -> set[str]:
    """The names the answer must define that the given code after it reads (or, for a value
    question, the answer's name)."""
    begin, end = answer_source.index("### BEGIN SOLUTION"), answer_source.index("### END SOLUTION")
    region = "\n".join(line.strip() for line in answer_source[begin:end].splitlines()[1:])
    try:
        names = _assigned(region)
    except SyntaxError:       # a region that is the body of an if/for: dedent failed, parse lines
        names = set(re.findall(r"^\s*(\w+)\s*(?:,\s*\w+\s*)*=", answer_source[begin:end], flags=re.MULTILINE))
    after = answer_source[end:].split("\n\n\n")[0]
    needed = {n for n in names if re.search(rf"\b{n}\b", after)}
    q = autograder.question(qid)
    if q.kind == "value":
        needed.add(q.answer_name)
    return needed


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_names_the_given_code_reads_are_in_the_question_text(name):
    path = rel(solution(name))
    for qid, cells in question_cells(name).items():
        if "answer" not in cells or "intro" not in cells:
            continue
        text = cells["intro"].source
        for needed in sorted(required_names(qid, cells["answer"].source)):
            assert f"`{needed}`" in text or f"`{needed} " in text, (
                f"{path}: cell '{qid}-intro' should name `{needed}` in backticks: the code after the answer in "
                f"'{qid}-answer' reads it (or it is the value the question asks for), so the question's text, not "
                f"only a hint, says that the answer defines it")


def test_every_chapter_has_a_value_question():
    for name in ASSIGNMENTS:
        kinds = {q.kind for q in questions_of(name).values()}
        assert "value" in kinds, (
            f"chapter {name} has no conceptual question: add one with kind=\"value\" (a prediction answered with "
            f"a number) to autograder/questions/concepts.py, its value and mistakes to "
            f"autograder/judging/catalogue/concepts.py, and its cells to {rel(solution(name))}")


# ------------------------------------------------------------------ the lists of questions

def test_the_intro_cell_lists_the_questions_of_the_registry():
    stale = nbtools.refresh_question_lists(ROOT, check=True)
    assert not stale, (
        f"the list of questions that ends the intro cell of {stale} disagrees with autograder.questions() "
        f"(answer names, titles, points): run `make assignments`, which writes it, and commit solutions/ and "
        f"exercises/")
    for name in ASSIGNMENTS:            # ... and the generated list is what the registry says
        intro = next(c for c in read(solution(name)).cells if c.get("id") == nbtools.INTRO_ID)
        for q in questions_of(name).values():
            assert f"* `{q.answer_name}`: {q.title} (" in intro.source, (name, q.id)


def _exercises_section(book: Path) -> tuple[str, str]:
    """(cell id, text) of the book chapter's "## Exercises" section."""
    for cell in json.loads(book.read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and re.search(r"^## Exercises\s*$", text, flags=re.MULTILINE):
            return cell.get("id", "?"), text.split("## Exercises", 1)[1].split("\n## ", 1)[0]
    raise AssertionError(f"{rel(book)} has no markdown cell with the heading '## Exercises' (the list of the "
                         f"chapter's exercises and the link to its notebook): add one")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_books_exercises_section_names_every_question(name):
    book = ROOT / "book" / f"{nbtools.chapter_of(name)}.ipynb"
    cell_id, text = _exercises_section(book)
    missing = [q for q in questions_of(name).values()
               if not re.search(rf"`[^`\n]*\b{re.escape(q.answer_name)}\b[^`\n]*`", text)]
    assert not missing, (
        f"{rel(book)}, cell {cell_id!r} ('## Exercises'): the list of exercises of {rel(exercise(name))} does not "
        f"name " + ", ".join(f"`{q.answer_name}` (question {q.id!r}, {q.title!r})" for q in missing)
        + ": add a line '* `<answer name>`: <what it asks>' for each (only that cell of the chapter changes)")
    assert f"exercises/{name}/{name}.ipynb" in text, (
        f"{rel(book)}, cell {cell_id!r} ('## Exercises'): link the notebook exercises/{name}/{name}.ipynb")


# ------------------------------------------------------------------ exercises/ follows solutions/

@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_exercise_notebook_follows_its_solutions_notebook(name):
    """What `make assignments` copies unchanged (cell ids, kinds, the text and code around the
    answers, the nbgrader metadata) is the same in exercises/ as in solutions/. (The slow
    test_notebooks.py::test_exercises_are_exactly_what_nbgrader_generates compares everything.)"""
    fix = f"exercises/{name}/{name}.ipynb is out of date with {rel(solution(name))}: run `make assignments`, " \
          f"then commit exercises/"
    ours, theirs = read(solution(name)), read(exercise(name))
    ids = [(c.get("id"), c.cell_type) for c in ours.cells]
    released = [(c.get("id"), c.cell_type) for c in theirs.cells]
    if released != ids:
        only_here = [i for i in ids if i not in released]
        only_there = [i for i in released if i not in ids]
        pytest.fail(f"{fix} (cells only in solutions/: {only_here}; only in exercises/: {only_there}"
                    + ("; the same cells in another order or of another kind" if not only_here + only_there else "")
                    + ")")
    differ = []
    for mine, copy in zip(ours.cells, theirs.cells):
        m = meta(mine)
        same_meta = {k: v for k, v in meta(copy).items() if k not in ("checksum", "cell_type")} == m
        if not same_meta or (not m.get("solution") and not m.get("grade") and copy.source != mine.source):
            differ.append(mine.get("id"))
        elif m.get("grade") and not m.get("solution"):
            visible = mine.source.split("### BEGIN HIDDEN TESTS")[0].rstrip()
            if not copy.source.startswith(visible):
                differ.append(mine.get("id"))
    assert not differ, f"{fix} (cells {differ} differ)"


def test_a_question_cannot_forbid_an_undeclared_key():
    """``expand`` skips unknown keys, so a typo in ``forbidden`` would forbid nothing: ``register``
    refuses it and says where the key is declared."""
    from autograder.questions.base import Question, register, registry

    typo = Question("rmsnorm_typo", "05_blocks", "RMSNorm", 2, "RMSNorm", "class", cases=(),
                    run_case=lambda answer, case, recorder: None, forbidden=("rms_nrom",))
    with pytest.raises(ValueError, match=r"forbid\(key, what, why"):
        register(typo)
    assert "rmsnorm_typo" not in registry()


def test_a_forbidden_key_is_declared_once_with_its_own_message():
    """Redeclaring a key would replace the message every other question's students read."""
    from autograder.questions.forbidden import FORBIDDEN, forbid

    before = FORBIDDEN["layer_norm"]
    with pytest.raises(ValueError, match="declared twice"):
        forbid("layer_norm", "F.rms_norm", "compute the root mean square", attrs=frozenset({"rms_norm"}))
    assert FORBIDDEN["layer_norm"] is before
