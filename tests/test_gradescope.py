"""`make gradescope`: the autograder zip, run as Gradescope runs it, on a fake /autograder
tree in a temporary folder (AUTOGRADER_ROOT): an honest, a blank and a hostile submission.

The zip is extracted to ROOT/source, run_autograder is copied to ROOT/run_autograder and
started with the course's interpreter (AUTOGRADER_PYTHON); its PYTHONPATH is the zip's
copy of the course, so what is graded here is what the zip holds."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import grading_students as S

pytestmark = pytest.mark.slow   # builds and runs the Gradescope zip (make test-fast skips it)

A = "03_attention"
POINTS = {"softmax": 1.0, "attention": 3.0, "attention_head": 2.0, "concept_masked_row": 1.0}


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist") / f"gradescope-{A}.zip"
    proc = subprocess.run([sys.executable, "-m", "autograder.instructor.gradescope", "build",
                           "--assignment", A, "--out", str(out)],
                          cwd=S.REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def test_zip_has_what_gradescope_expects(zip_path):
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
        config = json.loads(zf.read("config.json"))
        setup = zf.read("setup.sh").decode()
    # setup.sh and run_autograder at the root of the archive, executable
    assert {"setup.sh", "run_autograder", "config.json"} <= names
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    # the course's packages, but no solutions, tests or notebooks
    assert "autograder/judging/judge.py" in names and "vitref/attention.py" in names
    assert not any(n.startswith(("solutions/", "tests/", "exercises/")) or n.endswith(".ipynb")
                   for n in names)
    assert config["assignment"] == A and config["questions"] == list(POINTS)
    assert config["points"] == sum(POINTS.values())
    # the course's packages are not installed where a student's process could import them
    assert "pip install" in setup and "-e ." not in setup and "vitref-course" not in setup


def _tree(tmp_path: Path, zip_path: Path, notebook) -> Path:
    root = tmp_path / "autograder"
    for name in ("source", "submission", "results"):
        (root / name).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    os.chmod(root / "run_autograder", 0o755)
    path = root / "submission" / f"{A}.ipynb"
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    else:
        S.nbformat.write(notebook, path)
    return root


def _run(root: Path, **env) -> dict:
    """run_autograder as Gradescope starts it (cwd /autograder), here on the fake tree."""
    environ = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=sys.executable, **env)
    environ.pop("PYTHONPATH", None)
    proc = subprocess.run([str(root / "run_autograder")], cwd=root, env=environ,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    data["_stdout"] = proc.stdout
    return data


def _check_format(data: dict) -> None:
    """Gradescope's results.json format: the keys and types its specification names."""
    assert isinstance(data["score"], float)
    assert isinstance(data["execution_time"], int) and data["execution_time"] >= 0
    assert isinstance(data["output"], str) and data["stdout_visibility"] == "hidden"
    assert data["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert [t["name"].split(":")[0] for t in data["tests"]] == list(POINTS)
    for t in data["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility", "status"}
        assert t["max_score"] == POINTS[t["name"].split(":")[0]]
        assert 0 <= t["score"] <= t["max_score"] and t["status"] in ("passed", "failed")
    assert data["score"] == sum(t["score"] for t in data["tests"])


def test_honest_submission_full_marks_from_the_zips_copy(tmp_path, zip_path):
    root = _tree(tmp_path, zip_path, S.load(A))
    data = _run(root)
    _check_format(data)
    assert data["score"] == 7.0, data
    assert all(t["status"] == "passed" and "correct" in t["output"] for t in data["tests"])
    # graded by the zip's own copy of the grader, in a sandbox that was checked to work
    assert f"grader {root / 'source' / 'autograder' / '__init__.py'}" in data["_stdout"]
    assert data["extra_data"]["sandbox"] in ("bwrap", "namespaces", "limits")
    # only root may read the grader and the references now
    assert stat.S_IMODE((root / "source").stat().st_mode) == 0o700 or os.geteuid() != 0


def test_blank_submission_zero_with_the_reason(tmp_path, zip_path):
    data = _run(_tree(tmp_path, zip_path, S.load(A, "exercises")))
    _check_format(data)
    assert data["score"] == 0.0
    for t in data["tests"]:
        # a concept answer starts as None above its blank: "no answer yet"; the others raise at the blank
        concept = t["name"].startswith("concept_")
        assert t["status"] == "failed" and ("no answer yet" if concept else "NotImplementedError") in t["output"], t


def test_hostile_submission_gets_no_points_and_changes_nothing(tmp_path, zip_path):
    """Wrong answers with torch.allclose and Tensor.__eq__ patched to say yes, the reference
    imported from the zip, results.json overwritten now and by a process left behind."""
    root = tmp_path / "autograder"
    hostile = f'''
import os, sys, subprocess, torch
torch.allclose = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: True
for p in [{str(root / "source")!r}, {str(root / "source" / "vitref")!r}]:
    sys.path.insert(0, p)
try:
    import vitref
    softmax_ref = vitref.softmax
except Exception:
    softmax_ref = None
for path in [{str(root / "results" / "results.json")!r}, {str(root / "source" / "config.json")!r}]:
    try:
        with open(path, "w") as fh:
            fh.write('{{"score": 100, "tests": []}}')
    except OSError:
        pass
try:
    subprocess.Popen(["sh", "-c", "sleep 3; echo '{{\\"score\\": 100}}' > {root / "results" / "results.json"}"],
                     start_new_session=True)
except Exception:
    pass
'''
    nb = S.insert_cell(S.load(A), hostile)
    nb = S.replace_definition(nb, "softmax", "def softmax(x, dim=-1):\n"
                              "    if softmax_ref is not None:\n        return softmax_ref(x, dim)\n"
                              "    return torch.zeros_like(x) + 0.5\n")
    # attention uses its own (correct) softmax: only the softmax question is wrong
    nb = S.replace_definition(nb, "scaled_dot_product_attention", S.ATTENTION_WITH_PRIVATE_SOFTMAX)
    root = _tree(tmp_path, zip_path, nb)
    config = (root / "source" / "config.json").read_bytes()
    data = _run(root)
    _check_format(data)
    scores = {t["name"].split(":")[0]: t["score"] for t in data["tests"]}
    # torch.Tensor.__eq__ replaced: the probes find the class the checker relies on changed
    # (autograder/student/guard.py's seal), so no question of this notebook is checked
    assert scores == {"softmax": 0.0, "attention": 0.0, "attention_head": 0.0, "concept_masked_row": 0.0}, data
    time.sleep(5)                       # the process left behind had its chance
    again = json.loads((root / "results" / "results.json").read_text())
    assert again["score"] == 0.0 and again["tests"] == data["tests"]   # unchanged by the process left behind
    assert (root / "source" / "config.json").read_bytes() == config


def test_a_broken_grader_still_writes_results(tmp_path, zip_path):
    """A zip whose config names an unknown assignment: Gradescope still gets a results.json
    (score 0, the reason) instead of an autograder error."""
    root = _tree(tmp_path, zip_path, S.load(A))
    cfg = json.loads((root / "source" / "config.json").read_text())
    cfg["assignment"] = "99_nothing"
    (root / "source" / "config.json").write_text(json.dumps(cfg))
    data = _run(root)
    assert data["score"] == 0.0 and data["tests"] == []
    assert "could not grade" in data["output"] and "99_nothing" in data["output"]


def test_assignment_detected_from_the_notebook_name(tmp_path, zip_path):
    from autograder.instructor import gradescope
    (tmp_path / "sub").mkdir()
    S.nbformat.write(S.load("05_blocks"), tmp_path / "sub" / "05_blocks.ipynb")
    assert gradescope.detect_assignment(tmp_path / "sub") == "05_blocks"
    (tmp_path / "none").mkdir()
    assert gradescope.detect_assignment(tmp_path / "none") is None


def test_a_training_assignments_zip_fetches_its_data_at_setup(tmp_path, zip_path):
    """09_training's grader draws Fashion-MNIST images: its image gets torchvision and the data
    when Gradescope builds it; an assignment without a training question gets neither."""
    import zipfile

    from autograder.instructor.gradescope import build

    training = zipfile.ZipFile(build("09_training", out=tmp_path / "09.zip"))
    plain = zipfile.ZipFile(zip_path)
    assert "torchvision" in training.read("requirements-gradescope.txt").decode().split()
    assert "load_tensors('fashion-mnist'" in training.read("setup.sh").decode()
    assert "torchvision" not in plain.read("requirements-gradescope.txt").decode()
    assert "fashion-mnist" not in plain.read("setup.sh").decode()


def test_a_flagged_submission_is_held_at_zero_with_the_flag_in_each_output(tmp_path, zip_path):
    """A right notebook with a construct that has no place in an answer (native code through
    ctypes) in a cell of its own: Gradescope has no "needs review", so every question is held
    at 0 until the instructor overrides it; each test's output names the flag, its line and
    the automatic score, which extra_data keeps."""
    nb = S.insert_cell(S.load(A), "import ctypes\nlibc = ctypes.CDLL(None)")
    data = _run(_tree(tmp_path, zip_path, nb))
    _check_format(data)
    assert data["score"] == 0.0
    for t in data["tests"]:
        assert t["status"] == "failed" and t["output"].startswith("Held for review"), t
        assert "(ctypes/cffi)" in t["output"] and "import ctypes" in t["output"], t
        assert f"automatic score {t['max_score']:g}/{t['max_score']:g}" in t["output"], t
    assert data["extra_data"]["held"] == POINTS
    assert "Held for review" in data["output"]
