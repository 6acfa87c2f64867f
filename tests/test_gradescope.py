"""`make gradescope`: the autograder zip, run as Gradescope runs it, on a fake /autograder
tree in a temporary folder (AUTOGRADER_ROOT): an honest, a blank and a hostile submission.

The zip is extracted to ROOT/source, run_autograder is copied to ROOT/run_autograder and
started with the course's interpreter (AUTOGRADER_PYTHON); its PYTHONPATH is the zip's
copy of the course, so what is graded here is what the zip holds."""
from __future__ import annotations

import json
import os
import re
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


OUTPUT_FORMATS = ("text", "html", "simple_format", "md", "ansi")


def _check_format(data: dict, points: dict = POINTS) -> None:
    """Gradescope's results.json format: the keys and types its specification names."""
    assert isinstance(data["score"], float)
    assert isinstance(data["execution_time"], int) and data["execution_time"] >= 0
    assert isinstance(data["output"], str) and data["stdout_visibility"] == "hidden"
    assert data["visibility"] in ("visible", "hidden", "after_due_date", "after_published")
    assert data["output_format"] == "md"                 # the summary's table and notes
    assert [t["name"].split(":")[0] for t in data["tests"]] == list(points)
    for t in data["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output", "visibility", "status"}
        assert t["max_score"] == points[t["name"].split(":")[0]]
        assert 0 <= t["score"] <= t["max_score"] and t["status"] in ("passed", "failed")
        assert t["output_format"] in OUTPUT_FORMATS
    assert data["score"] == sum(t["score"] for t in data["tests"])
    for entry in data.get("leaderboard", []):
        assert set(entry) == {"name", "value", "order"} and entry["order"] in ("asc", "desc")
        assert isinstance(entry["name"], str) and isinstance(entry["value"], (int, float))


def _shown(markdown: str) -> str:
    """What a reader sees of a markdown output (CommonMark with GFM's tables and autolinks), and
    that it holds no link, image or HTML of a student's."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("gfm-like").render(markdown)
    assert not re.search(r"<(a|img|script|iframe)\b", html), html
    return " ".join(re.sub(r"<[^>]+>", "", html).replace("&quot;", '"').replace("&amp;", "&")
                    .replace("&lt;", "<").replace("&gt;", ">").replace("&#39;", "'").split())


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


def test_assignment_detected_from_the_notebooks_grade_ids_not_its_name(tmp_path, zip_path):
    from autograder.instructor import gradescope
    for name, assignment, expected in (("Copy of 05_blocks.ipynb", "05_blocks", "05_blocks"),
                                       ("05_blocks.ipynb", "03_attention", "03_attention"),
                                       ("my work.ipynb", "07_vit", "07_vit")):
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        S.nbformat.write(S.load(assignment), folder / name)
        assert gradescope.detect_assignment(folder) == expected, name
    (tmp_path / "none").mkdir()
    assert gradescope.detect_assignment(tmp_path / "none") is None
    unmarked = S.load("05_blocks")
    for cell in unmarked.cells:
        cell.metadata = {}
    unmarked.cells = [c for c in unmarked.cells if "autograder.grade(" not in c.source]
    (tmp_path / "unmarked").mkdir()
    S.nbformat.write(unmarked, tmp_path / "unmarked" / "05_blocks.ipynb")
    assert gradescope.detect_assignment(tmp_path / "unmarked") is None       # its name alone says nothing


def test_among_several_notebooks_the_one_whose_grade_ids_name_the_assignment_is_graded(tmp_path, zip_path):
    # another assignment's notebook under this one's name, and Colab's copy of this one's
    root = _tree(tmp_path, zip_path, S.load("02_positional_encoding"))
    S.nbformat.write(S.load(A), root / "submission" / f"Copy of {A}.ipynb")
    data = _run(root)
    _check_format(data)
    assert data["score"] == 7.0 and data["extra_data"]["notebook"] == f"Copy of {A}.ipynb", data
    assert f"graded Copy of {A}.ipynb" in _shown(data["output"])


def test_a_students_text_in_the_feedback_shows_as_text(tmp_path, zip_path):
    """The markdown outputs escape what the student's code raised: a message with an image, a link
    and HTML shows as the characters it is, in Gradescope's markdown."""
    message = "![pixel](https://evil.example/p.png) <img src=x onerror=alert(1)> [x](javascript:alert(1))"
    nb = S.replace_definition(S.load(A), "softmax", f"def softmax(x, dim=-1):\n    raise ValueError({message!r})\n")
    data = _run(_tree(tmp_path, zip_path, nb))
    _check_format(data)
    softmax = next(t for t in data["tests"] if t["name"].startswith("softmax:"))
    assert softmax["status"] == "failed" and softmax["output_format"] == "md"
    assert message in _shown(softmax["output"]), softmax["output"]


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
        shown = _shown(t["output"])
        assert t["status"] == "failed" and shown.startswith("Held for review"), t
        assert "(ctypes/cffi)" in shown and "import ctypes" in shown, t
        assert f"automatic score {t['max_score']:g}/{t['max_score']:g}" in shown, t
    assert data["extra_data"]["held"] == POINTS
    assert "Held for review" in _shown(data["output"]) and "leaderboard" not in data


TRAINING_POINTS = {"train_to_accuracy": 4.0, "concept_augmentation": 1.0}
SHORT_TRAINING = 15           # seconds the submission below trains, of the 60 it is given


@pytest.mark.alone            # the leaderboard's seconds are the host's wall clock
def test_the_training_leaderboard_is_what_the_grader_measured(tmp_path):
    """09_training in the fake tree: the leaderboard has the held-out accuracy the grader computed
    and the seconds its host measured. The notebook trains for 15 s and then stops its own clock, so
    the probe's train_seconds says it took no time: the leaderboard's seconds are the host's."""
    from autograder.instructor.gradescope import build

    zip_09 = build("09_training", out=tmp_path / "dist" / "09.zip")
    nb = S.load("09_training")
    answer = next(c for c in nb.cells if c.cell_type == "code" and "def train_vit(" in c.source)
    answer.source = (answer.source.replace("def train_vit(", "def _train_vit_for(", 1) + f"""


def train_vit(images, labels, seconds=60):
    started = time.monotonic()
    model = _train_vit_for(images, labels, {SHORT_TRAINING})
    time.monotonic = lambda: started           # the notebook's own clock: no time went by
    return model
""")
    root = tmp_path / "gs"
    root.mkdir()
    data = _run(_tree(root, zip_09, nb))
    _check_format(data, TRAINING_POINTS)
    assert [(e["name"], e["order"]) for e in data["leaderboard"]] == [("Held-out accuracy", "desc"),
                                                                      ("Training seconds", "asc")], data
    accuracy, seconds = (e["value"] for e in data["leaderboard"])
    assert 0.9 * SHORT_TRAINING <= seconds < 60, data["leaderboard"]  # the host's clock, not the notebook's
    assert 0.0 < accuracy <= 1.0
    train = next(t for t in data["tests"] if t["name"].startswith("train_to_accuracy:"))
    assert f"held-out accuracy (the grader's prediction) {accuracy:.4f}" in _shown(train["output"]), train
    assert f"training time (the grader's clock) {seconds:.1f} s" in _shown(train["output"]), train
