"""Threat: one submission, whatever it holds, costs the class more than its own row.

The submitted tree and everything in it is the students' (a zip, ``nbgrader collect``):

* **the tree was trusted**: ``submitted/<s>/<a>/<a>.ipynb`` as a relative symbolic link to
  ``../../../source/<a>/<a>.ipynb`` was graded as the instructor's solutions (full marks), and
  its autograded copy carried the written question's model answer and marking guide to
  ``generate_feedback``; a link to ``/proc/self/mem`` ended the discovery (EIO): nobody graded.
  Now the tree is read, not followed (``autograder.batch.tasks.read_notebook``: every part below
  ``submitted/`` opened with ``O_NOFOLLOW``, regular files only, read through the descriptor that
  was checked); a link, a pipe, a read error is that submission's zero with the reason.
* **one student's text took the class down**: a lone surrogate in an exception message (and a
  student folder named in latin-1 by a zip made on Windows) made ``grade`` exit 1 with
  ``UnicodeEncodeError`` before grades.csv, the report or the gradebook were written, and the
  saved result failed every later run; ANSI escape sequences reached the instructor's
  terminal; a student id ``=SUM(1,1)`` was a formula in grades.csv. Now every result is cleaned
  where it enters the batch (``autograder.batch.text``), and every CSV field neutralised.
* **the preflight counted other text than its readers**: a markdown cell whose source list held
  a non-string part carried 3 MB past the 100 KB / 1 MB limits (only string parts were counted)
  and its autograded copy took 39-56 s. Now the notebook must follow nbformat's schema first.
* **markdown made the instructor's browser fetch URLs** on the Jupyter server
  (``<img src="/logout">``, ``<a href="/api/contents">``) or elsewhere (``https://``): no image
  and no URL but a ``#fragment`` link is left.

The class test grades every such input beside honest students: rc 0, every output written,
one row per question for everybody, the honest students full marks, nothing of the solutions in
any output, nothing but printable text on the terminal.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import autograder
from autograder.batch import sanitize, text
from autograder.batch.sources import load_sources
from autograder.batch.tasks import MAX_NOTEBOOK_MB, Refused, discover, questions_by_assignment, read_notebook
from autograder.judging import preflight

import grading_students as S

A = "02_positional_encoding"
QIDS = [q.id for q in autograder.questions(A)]
FULL = float(sum(q.points for q in autograder.questions(A)))
LATIN1 = b"jos\xe9"                      # "josé" as a zip made on Windows names it: not UTF-8
LATIN1_ID = "jos\\xe9"
FORMULA = "=SUM(1,1)"
ANSI = "\x1b[31mred\x1b[0m\x1b]0;owned\x07\x1b[2J\r\x9b6n\u202edesrever"
GUIDE = "MARKING-GUIDE-7f3a1c"           # only in ROOT/source's notebook: a plain markdown cell
MODEL = "MODEL-ANSWER-5be2d9"            # only in ROOT/source's written answer cell
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
MARKDOWN_URLS = {                        # markdown: the text that must stay
    '<img src="/logout">': "",
    "![x](https://evil.example/x.png)": "",
    '<a href="/api/contents">api</a>': "api",
    '<a href="//evil.example">proto</a>': "proto",
    "[js](javascript:alert(1))": "js",
    "[rel](../other.ipynb)": "rel",
    '<blockquote cite="https://evil.example/c">quoted</blockquote>': "quoted",
    "[inside](#q1)": "inside",
}


def _subfolder(root: Path, student: bytes | str, assignment: str = A) -> Path:
    folder = os.path.join(os.fsencode(root / "submitted"), os.fsencode(student), assignment.encode())
    os.makedirs(folder, exist_ok=True)
    return Path(os.fsdecode(folder))


def _solution_bytes() -> bytes:
    return (S.REPO / "solutions" / A / f"{A}.ipynb").read_bytes()


def _raising(message_expr: str) -> nbformat.NotebookNode:
    return S.replace_definition(S.load(A), "getPositionEncoding",
                                f"def getPositionEncoding(seq_len, d, n=10000):\n    raise ValueError({message_expr})")


# ------------------------------------------------------------------ text at the boundary

def test_clean_escapes_surrogates_controls_and_bidi_and_is_idempotent():
    dirty = "bad value " + chr(0xD800) + " " + ANSI + "\nnext\tline"
    out = text.clean(dirty)
    out.encode("utf-8")                                   # encodable: no lone surrogate
    assert "\\ud800" in out and "\\x1b[31m" in out and "\\x07" in out and "\\x9b" in out and "\\u202e" in out
    assert not CONTROL.search(out.replace("\n", "").replace("\t", ""))
    assert "\nnext\tline" in out                          # lines kept where asked...
    assert "\n" not in text.clean(dirty, newlines=False)  # ...not in a one-line field
    assert text.clean(out) == out
    assert len(text.clean("x" * 100_000, 300)) == 300
    assert text.clean("Café: ok, 注意 ✓") == "Café: ok, 注意 ✓"       # honest text is untouched


def test_a_latin1_name_gets_a_stable_printable_id():
    listed = os.fsdecode(LATIN1)                          # what os.listdir returns: surrogateescape
    assert listed != "josé" and text.name(listed) == LATIN1_ID == text.name(listed)
    assert text.name("josé") == "josé" and text.name("ann") == "ann"
    assert text.name("a\x1b[2Jb") == "a\\x1b[2Jb"


@pytest.mark.parametrize("value", ["=SUM(1,1)", "+1", "-2+3", "@cmd", "\t=1", "\r=1"])
def test_a_csv_field_that_starts_a_formula_is_neutralised(value):
    assert text.csv_field(value) == "'" + value
    assert text.csv_field("ann") == "ann" and text.csv_field(2.0) == 2.0


def test_an_old_saved_result_with_bad_text_loads_clean_and_every_page_of_it_is_written(tmp_path):
    """A result saved by an older grader (a surrogate and escape sequences in its reasons, a
    latin-1 student name) no longer fails the run that loads it."""
    from autograder.batch import feedback, report
    from autograder.batch.outputs import write_csv
    from autograder.batch.state import load_results, load_state, state_path
    from autograder.batch.tasks import Task
    root = tmp_path / "course"
    task = Task(FORMULA, A, "", None, "d1", QIDS)
    bad = "bad value " + chr(0xD800) + ANSI
    saved = {"student": FORMULA, "assignment": A, "digest": "d1", "status": "ok", "reason": bad,
             "score": 0.0, "max_score": FULL,
             "questions": [{"id": q, "title": bad, "passed": False, "score": 0.0, "max_score": 1.0,
                            "feedback": bad, "reason": bad, "mistake": None} for q in QIDS]}
    path = state_path(root, FORMULA, A)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(saved))                    # json escapes the surrogate: it loads back
    loaded = load_state(root, task)
    assert loaded is not None and load_results(root) == [loaded]
    dumped = json.dumps(loaded, ensure_ascii=False)
    dumped.encode("utf-8")
    assert "\x1b" not in dumped and "\\\\ud800" in dumped
    csv_text = write_csv(root, [loaded]).read_text(encoding="utf-8")
    assert f"'{FORMULA}" in csv_text and "\x1b" not in csv_text
    assert f"\n{FORMULA}" not in csv_text
    feedback.write(root, loaded)
    report.write(root / "report.html", [loaded])
    for page in [root / "report.html", *feedback.page_folder(root, FORMULA, A).iterdir()]:
        assert "\x1b" not in page.read_text(encoding="utf-8"), page


def test_the_autograded_copy_of_a_cell_with_a_lone_surrogate_is_written(tmp_path):
    from autograder.batch import formgrader
    nb = S.insert_cell(S.load(A), "note = '\\ud800'")
    raw = json.dumps(nb).replace("note = '\\\\ud800'", "note = '\\ud800'").encode()   # a real surrogate
    assert "\ud800" in json.loads(raw)["cells"][4]["source"]
    source = load_sources(None, {A: autograder.questions(A)})[A]
    out = formgrader.build_notebook(raw, source, {"questions": []})
    nbformat.write(out, str(tmp_path / "copy.ipynb"))
    copy = nbformat.read(tmp_path / "copy.ipynb", as_version=4)
    assert any(c.source == "note = '\\ud800'" for c in copy.cells)       # the escape, shown as text


# ------------------------------------------------------------------ the tree, read not followed

def test_read_notebook_refuses_links_pipes_devices_and_reads_through_the_checked_descriptor(tmp_path):
    submitted = tmp_path / "course" / "submitted"
    (tmp_path / "course" / "source").mkdir(parents=True)
    secret = tmp_path / "course" / "source" / "solutions.ipynb"
    secret.write_bytes(b'{"secret": 1}')
    honest = _subfolder(tmp_path / "course", "ann") / f"{A}.ipynb"
    honest.write_bytes(b'{"cells": []}')
    assert read_notebook(honest, submitted) == b'{"cells": []}'
    cases = {}
    for student, make in [("linker", lambda p: os.symlink("../../../source/solutions.ipynb", p)),
                          ("mem", lambda p: os.symlink("/proc/self/mem", p)),
                          ("fifo", os.mkfifo),
                          ("null", lambda p: os.symlink("/dev/null", p))]:
        path = _subfolder(tmp_path / "course", student) / f"{A}.ipynb"
        make(path)
        with pytest.raises(Refused) as refused:
            read_notebook(path, submitted)           # a FIFO is opened non-blocking: no hang
        cases[student] = str(refused.value)
    assert cases["linker"] == f"submitted/linker/{A}/{A}.ipynb is a symbolic link: submit the notebook file itself"
    assert "symbolic link" in cases["mem"] and "symbolic link" in cases["null"]
    assert "named pipe (FIFO)" in cases["fifo"]
    # the folders above the file are not followed either
    (submitted / "dirlink").symlink_to(honest.parent.parent, target_is_directory=True)
    with pytest.raises(Refused, match="submitted/dirlink is a symbolic link: submit the folder itself"):
        read_notebook(submitted / "dirlink" / A / f"{A}.ipynb", submitted)
    # a sparse file over the cap is refused on its size, never read
    big = _subfolder(tmp_path / "course", "big") / f"{A}.ipynb"
    with open(big, "wb") as fh:
        fh.truncate((MAX_NOTEBOOK_MB << 20) + 1)
    with pytest.raises(Refused, match=f"more than the {MAX_NOTEBOOK_MB} MB accepted"):
        read_notebook(big, submitted)


def test_grade_task_reads_without_following_below_the_task_folder(tmp_path):
    """Gradescope's layout (a Task without ``base``: the submission folder is the trusted one): a
    notebook in a linked subfolder, or a linked notebook, is refused before anything runs."""
    from autograder.batch.submission import grade_task
    from autograder.batch.tasks import Task
    submission = tmp_path / "submission"
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / f"{A}.ipynb").write_bytes(_solution_bytes())
    submission.mkdir()
    (submission / "sub").symlink_to(tmp_path / "source", target_is_directory=True)
    (submission / "direct.ipynb").symlink_to(tmp_path / "source" / f"{A}.ipynb")
    for notebook, words in [(submission / "sub" / f"{A}.ipynb", "submission/sub is a symbolic link"),
                            (submission / "direct.ipynb", "submission/direct.ipynb is a symbolic link")]:
        task = Task("submission", A, str(submission), str(notebook), "", QIDS)
        result = grade_task(task, None, None)           # no sandbox: nothing may run
        assert result["status"] == "invalid" and result["score"] == 0, result
        assert [q["id"] for q in result["questions"]] == QIDS
        assert all(words in q["reason"] for q in result["questions"]), result


def test_discover_gives_every_odd_entry_its_task_and_never_stops(tmp_path):
    root = tmp_path / "course"
    (root / "source" / A).mkdir(parents=True)
    (root / "source" / A / f"{A}.ipynb").write_bytes(_solution_bytes())
    (_subfolder(root, "ann") / f"{A}.ipynb").write_bytes(_solution_bytes())
    os.symlink(f"../../../source/{A}/{A}.ipynb", _subfolder(root, "linker") / f"{A}.ipynb")
    os.symlink("/proc/self/mem", _subfolder(root, "mem") / f"{A}.ipynb")
    os.mkfifo(_subfolder(root, "fifo") / f"{A}.ipynb")
    (_subfolder(root, LATIN1) / f"{A}.ipynb").write_bytes(_solution_bytes())
    (_subfolder(root, LATIN1 + b"x") / f"{A}.ipynb").write_bytes(_solution_bytes())
    (_subfolder(root, "jos\\xe9") / f"{A}.ipynb").write_bytes(_solution_bytes())   # the same id, spelt out
    (root / "submitted" / "adl").mkdir()
    os.symlink(f"../../source/{A}", root / "submitted" / "adl" / A)
    os.symlink("../source", root / "submitted" / "dirlink")
    os.link(root / "source" / A / f"{A}.ipynb", _subfolder(root, "hardlink") / f"{A}.ipynb")
    questions = questions_by_assignment()
    tasks = discover(root, questions, load_sources(root / "source", questions), "v1", root / "source")
    by_student = {t.student: t for t in tasks}
    assert len(by_student) == len(tasks) == 10
    assert "is the instructor's source notebook (a hard link to it)" in by_student["hardlink"].problem
    assert {s for s, t in by_student.items() if not t.problem} == {"ann", "jos\\xe9", "jos\\xe9x",
                                                                   next(s for s in by_student if "~" in s)}
    for student in ("linker", "mem", "adl", "dirlink"):
        assert "is a symbolic link: submit the" in by_student[student].problem, by_student[student]
    assert "named pipe" in by_student["fifo"].problem
    assert by_student["adl"].qids == QIDS and by_student["linker"].qids == QIDS
    assert by_student["dirlink"].assignment == "" and by_student["dirlink"].qids == []
    ids = {t.student for t in tasks}
    assert all(s.encode("utf-8") and not CONTROL.search(s) for s in ids)
    again = discover(root, questions, load_sources(root / "source", questions), "v1", root / "source")
    assert [(t.student, t.digest) for t in again] == [(t.student, t.digest) for t in tasks]   # stable ids


# ------------------------------------------------------------------ preflight and the sanitiser

def test_a_non_string_source_part_is_refused_by_the_schema_and_counted_as_the_readers_join_it():
    nb = json.loads(_solution_bytes())
    nb["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "id": "big",
                           "source": ["intro", ["y" * 3_000_000]]})
    reason = preflight.problem(json.dumps(nb).encode())
    assert "cell 2 (markdown): its source is not a string or a list of strings" in reason, reason
    assert "nothing was graded" in reason and len(reason) < 400
    # without the schema check, the part counts as str(part): the readers' "".join(str(p) ...)
    assert "bytes of source" in preflight.problem_of(nb)
    assert preflight._size(["ab", 5, ["c"]]) == len("ab5['c']")


def test_the_schema_check_keeps_honest_notebooks_and_says_where_a_malformed_one_fails():
    for path in sorted(S.REPO.glob("solutions/*/*.ipynb")) + sorted(S.REPO.glob("exercises/*/*.ipynb")):
        assert preflight.problem(path.read_bytes()) == "", path
    nb = json.loads(_solution_bytes())
    old = dict(nb, nbformat_minor=4, cells=[dict(c, id="same") for c in nb["cells"]])   # ids in 4.4, twice
    assert preflight.problem(json.dumps(old).encode()) == ""
    no_ids = dict(nb, cells=[{k: v for k, v in c.items() if k != "id"} for c in nb["cells"]])
    assert preflight.problem(json.dumps(no_ids).encode()) == ""
    evil = dict(nb, cells=nb["cells"][:2] + [dict(nb["cells"][2], cell_type="evil")])
    assert "cell 3 has the cell_type 'evil'" in preflight.problem(json.dumps(evil).encode())
    assert "not in nbformat 4" in preflight.problem(json.dumps(dict(nb, nbformat=3)).encode())


@pytest.mark.parametrize("markdown, kept", MARKDOWN_URLS.items())
def test_student_markdown_keeps_no_image_and_no_url_but_fragment_links(markdown, kept):
    stored = sanitize.markdown_cell_source(markdown)
    assert "<img" not in stored and "src=" not in stored and "cite=" not in stored, stored
    assert "evil.example" not in stored and "/logout" not in stored and "/api" not in stored, stored
    assert re.findall(r'href="([^"]*)"', stored) == (["#q1"] if kept == "inside" else []), stored
    assert kept in stored                                      # a link's text stays


# ------------------------------------------------------------------ the class

def _hostile_class(root: Path) -> None:
    source = json.loads(_solution_bytes())
    for cell in source["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "written":
            cell["source"] = "".join(cell["source"]) + f"\n{MODEL}\n"
    source["cells"].append({"cell_type": "markdown", "metadata": {}, "id": "guide",
                            "source": f"Marking guide: {GUIDE}"})
    (root / "source" / A).mkdir(parents=True)
    (root / "source" / A / f"{A}.ipynb").write_text(json.dumps(source))
    (_subfolder(root, "ann") / f"{A}.ipynb").write_bytes(_solution_bytes())
    (_subfolder(root, LATIN1) / f"{A}.ipynb").write_bytes(_solution_bytes())
    (_subfolder(root, FORMULA) / f"{A}.ipynb").write_bytes(_solution_bytes())
    os.mkfifo(_subfolder(root, FORMULA) / "timestamp.txt")                    # must not block
    os.symlink(f"../../../source/{A}/{A}.ipynb", _subfolder(root, "linker") / f"{A}.ipynb")
    os.symlink("/proc/self/mem", _subfolder(root, "mem") / f"{A}.ipynb")
    os.mkfifo(_subfolder(root, "fifo") / f"{A}.ipynb")
    os.link(root / "source" / A / f"{A}.ipynb", _subfolder(root, "hardlink") / f"{A}.ipynb")
    (root / "submitted" / "adl").mkdir()
    os.symlink(f"../../source/{A}", root / "submitted" / "adl" / A)
    os.symlink("../source", root / "submitted" / "dirlink")
    S.write(_raising("'bad value ' + chr(0xD800)"), root, "surrogate", A)
    ansi = _raising(repr(ANSI))
    S.insert_cell(ansi, f"print({ANSI!r})\nimport sys\nprint({ANSI!r}, file=sys.stderr)")
    S.write(ansi, root, "ansi", A)
    big = json.loads(_solution_bytes())
    big["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "id": "big",
                            "source": ["intro", ["y" * 3_000_000]]})
    S.write(json.dumps(big).encode(), root, "bigpart", A)
    malformed = json.loads(_solution_bytes())
    malformed["cells"][3]["cell_type"] = "evil"
    S.write(json.dumps(malformed).encode(), root, "malformed", A)
    images = S.load(A)
    images.cells[1:1] = [nbformat.v4.new_markdown_cell(m) for m in MARKDOWN_URLS]
    S.write(images, root, "images", A)
    os.symlink(f"../../../source/{A}/{A}.ipynb", root / "submitted" / "images" / A / "timestamp.txt")


def _grade(root: Path, *command: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autograder", *command, str(root)]
    if command == ("grade",):
        cmd += ["--jobs", "2", "--no-progress", "--timeout", "20"]
    return subprocess.run(cmd, capture_output=True, timeout=900, cwd=S.REPO,
                          env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"))


def _text_of(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.decode("utf-8") + proc.stderr.decode("utf-8")     # must be UTF-8 too


HONEST = ("ann", LATIN1_ID, FORMULA, "images")
REFUSED = {"linker": "symbolic link", "mem": "symbolic link", "fifo": "named pipe", "adl": "symbolic link",
           "hardlink": "hard link",
           "bigpart": "its source is not a string or a list of strings", "malformed": "cell_type 'evil'"}


@pytest.mark.slow      # grades a class with `python -m autograder grade`
def test_a_hostile_class_is_graded_and_each_submission_costs_only_its_own_row(tmp_path):
    root = tmp_path / "course"
    _hostile_class(root)
    proc = _grade(root, "grade")
    out = _text_of(proc)
    assert proc.returncode == 0, out
    assert not CONTROL.search(out.replace("\n", "").replace("\t", "")), [m for m in CONTROL.findall(out)]

    rows = S.read_csv(root)
    students = HONEST + ("surrogate", "ansi") + tuple(REFUSED)
    csv_students = {(f"'{s}" if s == FORMULA else s) for s in students}
    assert {k for k in rows if k[0] != "dirlink"} == {(s, A, q) for s in csv_students for q in QIDS}, sorted(rows)
    assert rows[("dirlink", "", "")][:2] == (0.0, 0.0) and "symbolic link" in rows[("dirlink", "", "")][2]
    for student in HONEST:
        key = f"'{student}" if student == FORMULA else student
        assert sum(rows[(key, A, q)][0] for q in QIDS) == FULL, (student, rows)
    for student, words in REFUSED.items():
        assert all(rows[(student, A, q)][0] == 0 and words in rows[(student, A, q)][2] for q in QIDS), \
            (student, rows[(student, A, QIDS[0])])
    for student in ("surrogate", "ansi"):      # the answer that raised loses its points, nothing else
        assert rows[(student, A, "q1")][0] == 0 and sum(rows[(student, A, q)][0] for q in QIDS) == FULL - 2
    assert "\\ud800" in rows[("surrogate", A, "q1")][2] and "\\x1b[31mred" in rows[("ansi", A, "q1")][2]
    grades = (root / "grades.csv").read_text(encoding="utf-8")
    assert not re.search(r"(^|,)[=+\-@]", grades, flags=re.MULTILINE), grades

    # every output, written and without a control character or a surrogate
    assert (root / "report.html").is_file() and (root / "gradebook.db").is_file()
    for student in HONEST + ("surrogate", "ansi", *REFUSED):
        assert (root / "autograded" / student / A / f"{A}.ipynb").is_file(), student
        assert (root / "autograder-feedback" / student / A / "feedback.html").is_file(), student
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert {s.id for s in gb.students} == set(students)
        for student in HONEST:
            assert gb.find_submission(A, student).score == FULL, student
        assert gb.find_submission(A, "linker").score == 0
    export = _grade(root, "export")
    assert export.returncode == 0, _text_of(export)
    exported = (root / "nbgrader_grades.csv").read_text(encoding="utf-8")
    assert f"'{FORMULA}" in exported and not re.search(r"(^|,)[=+@]", exported, flags=re.MULTILINE)

    # nothing of the solutions: the marking guide nowhere, the model answer nowhere but in the
    # gradebook's copy of the source cells (nbgrader's own generate_assignment keeps them there)
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink() or path.is_fifo() or \
                path.relative_to(root).parts[0] in ("source", "submitted"):
            continue
        data = path.read_bytes()
        assert GUIDE.encode() not in data, path
        assert path.name == "gradebook.db" or MODEL.encode() not in data, path
        if path.suffix in (".csv", ".html", ".md", ".json", ".ipynb", ".txt"):
            decoded = data.decode("utf-8")
            assert "\x1b" not in decoded and "\x9b" not in decoded, path
    assert "Model answer" not in (root / "autograded" / "linker" / A / f"{A}.ipynb").read_text()
    stamp = (root / "autograded" / "images" / A / "timestamp.txt").read_text()
    assert len(stamp) < 40 and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp), stamp

    # the markdown keeps no image and no URL but a fragment
    copy = nbformat.read(root / "autograded" / "images" / A / f"{A}.ipynb", as_version=4)
    stored = "".join(c.source for c in copy.cells if c.cell_type == "markdown")
    assert "<img" not in stored and "src=" not in stored and "evil.example" not in stored
    hrefs = set(re.findall(r'href="([^"]*)"', stored))
    assert "#q1" in hrefs and all(h.startswith("#") for h in hrefs), hrefs     # (and the headings' anchors)

    # a second run loads every saved result (the bad text included) and writes everything again
    again = _grade(root, "grade")
    assert again.returncode == 0, _text_of(again)
    assert "grading 0 submission(s)" in again.stdout.decode() and S.read_csv(root) == rows
