"""Threat (to grading itself): a checkout in a private folder cannot grade.

A course cloned into ``mktemp -d`` (mode 0700) or a private home directory puts the virtual
environment under a folder the unprivileged student uid cannot enter. In mode 'namespaces'
every student process then failed to start ("the sandbox could not start the student
process": the folders that hide the runtime were staged on /tmp, which held the checkout, and
two of them, /root's Python and the checkout, collided). The sandbox must re-expose exactly
the runtime, the virtual environment and its own bundle, and nothing else of that folder.

Reproduced without a fresh install: the environment's own virtualenv is copied with hard
links (seconds, no space) into a 0700 folder next to a private file; the class is graded by
that copy's interpreter in both sandbox modes.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import autograder
from autograder.hosts import sandbox

import grading_students as S

pytestmark = pytest.mark.slow   # copies the virtualenv (hard links) and grades a class twice

A = "02_positional_encoding"
QIDS = [q.id for q in autograder.questions(A)]
FULL = sum(q.points for q in autograder.questions(A))


@pytest.fixture(scope="module")
def private_venv(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("private-home")
    os.chmod(home, 0o700)
    (home / "secret.txt").write_text("the instructor's private notes")
    venv = home / "checkout" / ".venv"
    venv.parent.mkdir()
    prefix = Path(sys.prefix).resolve()
    copy = subprocess.run(["cp", "-al", str(prefix), str(venv)], capture_output=True, text=True)
    assert copy.returncode == 0, ("this test copies the virtualenv with hard links: the temporary "
                                  f"folder must be on the virtualenv's file system ({copy.stderr})")
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True,
                           text=True, check=True)
    assert probe.stdout.strip() == str(venv)
    return venv


def test_the_copy_lies_under_a_folder_the_student_cannot_enter(private_venv):
    groups = sandbox.blocked_ancestors([str(private_venv)])
    assert groups and all(not os.stat(folder).st_mode & stat.S_IXOTH for folder, _ in groups)
    assert any(str(private_venv).startswith(folder + os.sep) for folder, _ in groups)


@pytest.mark.parametrize("mode", ["namespaces", "bwrap"])
def test_a_class_is_graded_from_a_private_checkout(private_venv, mode, tmp_path):
    home = private_venv.parent.parent
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    S.write(S.load(A, "exercises"), root, "ben", A)
    # peek answers correctly only if nothing else of the private folder is visible
    peek = S.load(A)
    peek.cells.append(nbformat.v4.new_code_cell(
        "import os\n"
        f"_seen = os.path.exists({str(home / 'secret.txt')!r}) or "
        f"os.path.exists({str(private_venv.parent / 'nothing-else')!r})\n"
        f"try:\n    _seen = _seen or len(os.listdir({str(home)!r})) > 1\nexcept OSError:\n    pass\n"
        "if _seen:\n    def getPositionEncoding(seq_len, d, n=10000):\n        return None\n"))
    S.write(peek, root, "peek", A)
    (private_venv.parent / "nothing-else").write_text("x")
    proc = subprocess.run([str(private_venv / "bin" / "python"), "-m", "autograder", "grade", str(root),
                           "--jobs", "1", "--no-progress", "--timeout", "30"], cwd=S.REPO,
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, AUTOGRADER_SANDBOX=mode, AUTOGRADER_GRADER_VERSION="v1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"sandbox: {mode}" in proc.stdout, proc.stdout
    rows = S.read_csv(root)
    totals = {s: sum(rows[(s, A, q)][0] for q in QIDS) for s in ("ann", "ben", "peek")}
    assert totals["ann"] == FULL and totals["peek"] == FULL, rows
    assert rows[("ben", A, "q1")][0] == 0, rows
