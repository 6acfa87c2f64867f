"""The helpers of bench/colab_like.py (the Colab-like run of every notebook): how the kernel is
made to look like Colab's (git URL rewrite, fake google.colab, environment), which notebooks are
run, and the verdicts on executed notebooks. Fast: no virtual environment, no kernel."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.instructor import nbtools
from bench import colab_like as cl

ROOT = Path(__file__).resolve().parents[1]
URL = "https://github.com/vitref-course/transformers-from-scratch"

# What autograder.grade's AssertionError looks like in a notebook's error output (IPython's ANSI colours).
GRADE_TRACEBACK = [
    "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
    "\x1b[31mAssertionError\x1b[39m                            Traceback (most recent call last)",
    "\x1b[32m----> \x1b[39m\x1b[32m1\x1b[39m print(autograder.grade(\x1b[33m\"softmax\"\x1b[39m, softmax))",
    "\x1b[36mFile \x1b[39m\x1b[32m/venv/lib/python3.11/site-packages/autograder/__init__.py:92\x1b[39m, in "
    "\x1b[36mgrade\x1b[39m\x1b[34m(qid, answer)\x1b[39m",
    "\x1b[32m---> \x1b[39m\x1b[32m92\x1b[39m     \x1b[38;5;28;01mraise\x1b[39;00m "
    "\x1b[38;5;167;01mAssertionError\x1b[39;00m(result.feedback)",
    "\x1b[31mAssertionError\x1b[39m: Numerically stable softmax: not yet.",
]


def error(ename, evalue="", traceback=()):
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": list(traceback)}


FEEDBACK = error("AssertionError", "Numerically stable softmax: not yet. This answer is not written yet: it still "
                 "raises NotImplementedError.", GRADE_TRACEBACK)


def cell(role="given", *outputs, source="x = 1", run=True, cell_id=None):
    meta = {"answer": {"nbgrader": {"solution": True, "grade": False}},
            "check": {"nbgrader": {"solution": False, "grade": True, "points": 1}},
            "given": {}}[role]
    return {"cell_type": "code", "id": cell_id or f"c{id(outputs)}", "metadata": meta, "source": source,
            "execution_count": 1 if run else None, "outputs": list(outputs)}


def notebook(*cells):
    return {"cells": [{"cell_type": "markdown", "source": "# title", "metadata": {}}, *cells]}


def blank_exercise(*extra):
    """Set-up, a function blank and its check (feedback), a concept blank and its check (NameError)."""
    return notebook(
        cell("given", source="import sys\nif 'google.colab' in sys.modules: pass", cell_id="colab-setup"),
        cell("given", source="import autograder", cell_id="imports"),
        cell("answer", error("NotImplementedError"), source="def softmax(x):\n    raise NotImplementedError()"),
        cell("check", FEEDBACK, source='print(autograder.grade("softmax", softmax))'),
        cell("answer", error("NotImplementedError"), source="raise NotImplementedError()\nprint(masked_row_weight)"),
        cell("check", error("NameError", "name 'masked_row_weight' is not defined"),
             source='print(autograder.grade("concept_masked_row", masked_row_weight))'),
        *extra)


# ----------------------------------------------------------------------- the Colab-like kernel

def test_pins_reads_exact_versions_and_ignores_the_rest():
    text = "# a comment\ntorch==2.14.1   # CI\ntorch-extra==9\ntorchvision == 0.29.1\neinops==0.8.2\n"
    assert cl.pins(text) == ["torch==2.14.1", "torchvision==0.29.1"]
    with pytest.raises(ValueError, match="torchvision"):
        cl.pins("torch==2.14.1\ntorchvision>=0.15\n")
    real = cl.pins((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    assert [p.split("==")[0] for p in real] == ["torch", "torchvision"]


def _git(*args, cwd, env=None):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_set_up_cells_url_resolves_to_a_bare_clone_of_head(tmp_path):
    """The kernel's .gitconfig sends the repository URL (and only it) to a bare clone whose `main`
    is the repository's HEAD, even when HEAD is another branch: what `pip install git+URL@main` fetches."""
    repo = tmp_path / "repo"
    repo.mkdir()
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    _git("init", "-q", "-b", "feature", cwd=repo)
    (repo / "a.txt").write_text("a")
    _git("add", "a.txt", cwd=repo)
    _git(*ident, "commit", "-q", "-m", "first", cwd=repo)
    head = _git("rev-parse", "HEAD", cwd=repo)

    bare = tmp_path / "clone.git"
    assert cl.make_bare_clone(repo, bare, "main") == head
    home = tmp_path / "home"
    cl.prepare_home(home, URL, bare)
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"}
    assert _git("ls-remote", "--get-url", URL, cwd=tmp_path, env=env) == bare.resolve().as_uri()
    other = "https://github.com/someone/else"
    assert _git("ls-remote", "--get-url", other, cwd=tmp_path, env=env) == other
    refs = _git("ls-remote", URL, "main", cwd=tmp_path, env=env)
    assert refs == f"{head}\trefs/heads/main"
    startup = home / ".ipython" / "profile_default" / "startup" / "00-google-colab.py"
    assert "import google.colab" in startup.read_text()


def test_fake_colab_is_imported_at_start_and_leaves_other_google_packages_importable(tmp_path):
    shim = cl.make_fake_colab(tmp_path / "shim")
    assert not (shim / "google" / "__init__.py").exists()
    other = tmp_path / "other" / "google" / "protobuf_like"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    code = (f"exec({cl.STARTUP!r})\n"
            "import sys, google.protobuf_like\n"
            "print('google.colab' in sys.modules)")
    env = {"PYTHONPATH": os.pathsep.join([str(shim), str(tmp_path / "other")]), "PATH": os.environ["PATH"]}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_kernel_env_keeps_nothing_of_this_machines_python_set_up(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/root", "PYTHONPATH": "/work/repo", "VIRTUAL_ENV": "/work/repo/.venv",
            "VITREF_FAST": "1", "GIT_CONFIG_GLOBAL": "/root/.gitconfig", "XDG_CONFIG_HOME": "/root/.config",
            "IPYTHONDIR": "/root/.ipython", "PIP_FIND_LINKS": "/opt/wheels", "VITREF_DATA": "/data", "LANG": "C.UTF-8"}
    env = cl.kernel_env(base, tmp_path / "home", tmp_path / "shim", tmp_path / "venv")
    assert env["HOME"] == str(tmp_path / "home")
    assert env["PYTHONPATH"] == str(tmp_path / "shim")
    assert env["PATH"].split(os.pathsep) == [str(tmp_path / "venv" / "bin"), "/usr/bin"]
    for gone in ("VIRTUAL_ENV", "VITREF_FAST", "GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME", "IPYTHONDIR"):
        assert gone not in env
    assert env["PIP_FIND_LINKS"] == "/opt/wheels" and env["VITREF_DATA"] == "/data" and env["LANG"] == "C.UTF-8"
    assert base["PYTHONPATH"] == "/work/repo"   # not modified in place


def test_reset_uninstalls_only_what_notebooks_added():
    assert cl.normalise("Vitref_Course") == cl.normalise("vitref.course") == "vitref-course"
    assert cl.extra_packages({"torch", "numpy"}, {"torch", "numpy", "einops", "vitref-course"}) == [
        "einops", "vitref-course"]
    assert cl.extra_packages({"torch", "numpy"}, {"torch"}) == []


# ----------------------------------------------------------------------- which notebooks

PATHS = ["book/intro.md", "book/01_tokens.ipynb", "book/images/x.ipynb", "exercises/03_attention/03_attention.ipynb",
         "exercises/03_attention/other.ipynb", "solutions/03_attention/03_attention.ipynb", "tests/t.ipynb",
         "solutions/01_tokens/01_tokens.ipynb"]


def test_notebooks_are_the_chapters_exercises_and_solutions_in_that_order():
    found = [n.label for n in cl.notebooks(PATHS)]
    assert found == ["book/01_tokens", "exercises/03_attention", "solutions/01_tokens", "solutions/03_attention"]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    course = cl.notebooks(tracked.splitlines())
    chapters = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    assert [n.name for n in course if n.kind == "book"] == chapters
    assignments = nbtools.assignments(ROOT)
    assert [n.name for n in course if n.kind == "exercises"] == assignments
    assert [n.name for n in course if n.kind == "solutions"] == assignments
    assert len(course) == len(chapters) + 2 * len(assignments)


def test_only_selects_by_label_name_number_or_kind():
    all_nb = cl.notebooks(PATHS)

    def labels(names):
        return [n.label for n in cl.select(all_nb, names)]

    assert labels(None) == [n.label for n in all_nb]
    assert labels(["03"]) == ["exercises/03_attention", "solutions/03_attention"]
    assert labels(["01_tokens"]) == ["book/01_tokens", "solutions/01_tokens"]
    assert labels(["solutions/03_attention/03_attention.ipynb", "book"]) == ["book/01_tokens", "solutions/03_attention"]
    assert labels(["exercises/03_attention", "03"]) == ["exercises/03_attention", "solutions/03_attention"]
    with pytest.raises(ValueError, match="nope"):
        cl.select(all_nb, ["book", "nope"])


# ----------------------------------------------------------------------- verdicts

def test_a_blank_exercise_whose_blanks_raise_and_checks_give_feedback_is_ok():
    verdict = cl.exercise_verdict(blank_exercise())
    assert verdict.problems == []
    assert (verdict.blanks, verdict.feedback, verdict.undefined, verdict.passed) == (2, 1, 1, 0)
    assert verdict.summary() == "2 blanks; 2 checks: 1 feedback, 1 answer left undefined by its blank"
    two = cl.exercise_verdict(blank_exercise(*blank_exercise()["cells"][5:7]))
    assert two.problems == [] and two.summary().endswith("2 answers left undefined by their blanks")


@pytest.mark.parametrize("extra, expected", [
    (cell("given", error("ModuleNotFoundError", "No module named 'einops'"), cell_id="setup"),
     "cell 7 (setup): ModuleNotFoundError: No module named 'einops' (set-up or given code)"),
    (cell("answer", error("TypeError", "bad operand"), cell_id="a"), "cell 7 (a): TypeError: bad operand (answer"),
    (cell("answer", error("NameError", "name 'helper' is not defined"), cell_id="a"), "(answer cell: not its blank)"),
    (cell("check", error("ModuleNotFoundError", "No module named 'autograder'"), cell_id="t"), "(check cell crashed)"),
    (cell("check", error("AssertionError", "Softmax: the checker itself failed (KeyError: 'x'); please report this.",
                         GRADE_TRACEBACK), cell_id="t"), "the checker itself failed"),
    (cell("check", error("AssertionError", "shapes differ", ["assert out.shape == (2, 3)"]), cell_id="t"),
     "cell 7 (t): AssertionError: shapes differ (check cell crashed)"),
    (cell("check", error("NameError", "name 'undefined_elsewhere' is not defined"), cell_id="t"),
     "(check cell crashed)"),
    (cell("check", run=False, cell_id="t"), "cell 7 (t) (check) did not run"),
])
def test_an_exercise_error_that_no_blank_explains_fails(extra, expected):
    problems = cl.exercise_verdict(blank_exercise(extra)).problems
    assert len(problems) == 1 and expected in problems[0], problems


def test_checker_feedback_on_a_blank_must_say_that_it_still_raises():
    vague = error("AssertionError", "Numerically stable softmax: not yet. Wrong shape.", GRADE_TRACEBACK)
    nb = blank_exercise()
    nb["cells"][4]["outputs"] = [vague]
    (problem,) = cl.exercise_verdict(nb).problems
    assert problem.startswith("cell 4 (") and "does not say that the answer is still blank" in problem
    # A blank that raises only when called (not when its cell runs) is a blank all the same.
    lazy = notebook(cell("answer", source="def train(x):\n    raise NotImplementedError()"), cell("check", vague))
    assert "does not say" in cl.exercise_verdict(lazy).problems[0]
    assert cl.exercise_verdict(notebook(cell("answer", source="def train(x):\n    raise NotImplementedError()"),
                                        cell("check", FEEDBACK))).summary() == "1 blank; 1 check: 1 feedback"
    # After an answer that ran (no blank), feedback about a wrong answer is what the checker should say.
    written = notebook(cell("answer", source="def softmax(x):\n    return x"), cell("check", vague))
    assert cl.exercise_verdict(written).problems == []


def test_strict_checks_fail_a_check_stopped_by_the_undefined_answer():
    verdict = cl.exercise_verdict(blank_exercise(), strict=True)
    assert verdict.undefined == 0
    assert len(verdict.problems) == 1 and "NameError: name 'masked_row_weight'" in verdict.problems[0]


def test_exercise_verdict_other_failures():
    assert cl.exercise_verdict(blank_exercise(), "CellTimeoutError: cell timed out").problems == [
        "CellTimeoutError: cell timed out"]
    assert cl.exercise_verdict(notebook(cell("given"))).problems == ["no check cell (nbgrader grade cell) found"]
    # A NameError is a blank's doing only for a name that a blank (an answer cell that raised) should have set.
    nb = notebook(cell("answer", source="raise NotImplementedError()\nweights = 1"),   # ran without error
                  cell("check", error("NameError", "name 'weights' is not defined"), source="grade(weights)"))
    assert cl.exercise_verdict(nb).problems[0].endswith("(check cell crashed)")
    passed = notebook(cell("check", source="print(autograder.grade('q', f))"))
    assert cl.exercise_verdict(passed).passed == 1


def test_clean_run_reports_the_first_error_then_what_did_not_run():
    nb = notebook(cell(), cell("given", error("ValueError", "bad\n  value"), cell_id="train"),
                  cell("given", error("NameError", "name 'model' is not defined")), cell(run=False))
    assert cl.clean_run_problems(nb) == ["cell 2 (train): ValueError: bad value"]
    assert cl.clean_run_problems(notebook(cell(), cell(run=False, cell_id="fit")), "CellTimeoutError: 900 s") == [
        "CellTimeoutError: 900 s", "1 cell(s) not run, from cell 2 (fit)"]
    assert cl.clean_run_problems(notebook(cell(), cell(run=False, source="  \n"))) == []


def test_install_problem_wants_git_at_the_branch_and_head():
    sha = "a" * 40
    good = {"url": URL, "vcs_info": {"vcs": "git", "requested_revision": "main", "commit_id": sha}}
    assert cl.install_problem(good, URL, "main", sha) is None
    assert cl.install_problem(None, URL, "main", sha) == (
        "the course (vitref-course) was not installed by the set-up cell")
    stale = dict(good, vcs_info=dict(good["vcs_info"], commit_id="b" * 40))
    assert "not main=HEAD=aaaaaaaaaaaa" in cl.install_problem(stale, URL, "main", sha)
    editable = {"url": "file:///work/repo", "dir_info": {"editable": True}}
    assert "not from git+" in cl.install_problem(editable, URL, "main", sha)
