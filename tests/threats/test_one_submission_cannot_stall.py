"""Threat: one submission stalls the grading of the whole class.

A notebook under the 50 MB cap can still be built to make the grader's own work slow:
30,000 one-line cells without ids took the coordinator 175 s to copy into
ROOT/autograded/ (cell ids probed from 1 upwards for every cell: O(n^2)), during which no
other submission was dispatched; 400,000 cells were not done after 15 minutes, and SIGTERM
did not stop the grader. Now a preflight rejects such a notebook (a zero with the reason),
the per-submission files are written by the grading job (not the coordinator) in linear
time, and SIGTERM stops the grader, its jobs and their sandboxes within seconds; the next
run grades only what is missing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

import autograder
from autograder.batch import formgrader
from autograder.batch.sources import load_sources
from autograder.judging import preflight

import grading_students as S

A = "02_positional_encoding"
QIDS = [q.id for q in autograder.questions(A)]
FULL = sum(q.points for q in autograder.questions(A))


def _many_cells(count: int, source: str = "x = 1") -> bytes:
    """A notebook of ``count`` one-line code cells without ids (nbformat 4.4, as old
    Jupyter saved them): every copied cell needs a fresh id."""
    cells = [{"cell_type": "code", "source": source, "metadata": {}, "outputs": [],
              "execution_count": None} for _ in range(count)]
    return json.dumps({"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": cells}).encode()


# ------------------------------------------------------------------ preflight

def test_the_course_notebooks_are_far_inside_the_limits():
    for path in sorted(S.REPO.glob("solutions/*/*.ipynb")) + sorted(S.REPO.glob("exercises/*/*.ipynb")):
        assert preflight.problem(path.read_bytes()) == "", path


@pytest.mark.parametrize("raw, words", [
    (_many_cells(preflight.MAX_CELLS + 1), f"{preflight.MAX_CELLS + 1:,} cells"),
    (_many_cells(3, "#" * (preflight.MAX_CELL_SOURCE + 1)), "cell 1 of the notebook has"),
    (_many_cells(20, "#" * (preflight.MAX_TOTAL_SOURCE // 19)), "bytes of source in all"),
])
def test_a_notebook_over_a_limit_is_refused_with_its_reason(raw, words):
    reason = preflight.problem(raw)
    assert words in reason and "nothing was graded" in reason, reason


def test_a_notebook_at_the_limits_passes_and_outputs_do_not_count():
    assert preflight.problem(_many_cells(preflight.MAX_CELLS)) == ""
    assert preflight.problem(_many_cells(1, "#" * preflight.MAX_CELL_SOURCE)) == ""
    nb = json.loads(_many_cells(2))
    nb["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "y" * 5_000_000}]
    assert preflight.problem(json.dumps(nb).encode()) == ""
    assert preflight.problem(b"not json") == ""          # the reader reports that one


def test_the_autograded_copy_takes_linear_work_in_the_number_of_cells(monkeypatch):
    """n cells without ids: the id lookups of the copy grow like n, not n^2 (the old
    search tried ids 1, 2, ... for every cell: 12.5 million lookups for 5,000 cells)."""
    lookups = [0]

    class CountingSet(set):
        def __contains__(self, item):
            lookups[0] += 1
            return super().__contains__(item)

    monkeypatch.setattr(formgrader, "set", CountingSet, raising=False)
    source = load_sources(None, {A: autograder.questions(A)})[A]
    counts = {}
    for n in (500, 5000):
        lookups[0] = 0
        out = formgrader.build_notebook(_many_cells(n), source, {"questions": []})
        assert len(out.cells) == n + len(source.grade_cells)
        assert len({c.id for c in out.cells}) == len(out.cells)          # ids stay unique
        counts[n] = lookups[0]
    assert 500 <= counts[500] and counts[5000] <= 5 * 5000, counts
    assert counts[5000] <= 12 * counts[500], counts                        # x10 cells, about x10 work


def test_a_notebook_over_the_limits_is_copied_as_its_reason(tmp_path):
    """The autograded copy of a notebook the preflight refuses holds the reason, not 30,000
    cells, whoever asks for it (a result saved by an older grader, a job that died)."""
    raw = _many_cells(30_000)
    path = S.write(raw, tmp_path / "course", "huge", A)
    task = type("T", (), {"student": "huge", "assignment": A, "notebook": str(path),
                          "folder": str(path.parent)})()
    source = load_sources(None, {A: autograder.questions(A)})[A]
    start = time.monotonic()
    target = formgrader.write_autograded(tmp_path / "course", task, source, {"questions": [], "status": "ok"})
    assert time.monotonic() - start < 5
    nb = nbformat.read(target, as_version=4)
    assert "30,000 cells" in nb.cells[0].source
    assert len(nb.cells) == 1 + len(source.grade_cells)


# ------------------------------------------------------------------ the class

def _grade(root: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--no-progress",
           "--timeout", "20", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=S.REPO,
                          env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"))


@pytest.mark.slow
@pytest.mark.alone       # wall-clock limits: make test runs it on its own, after the rest
def test_a_30000_cell_notebook_gets_a_zero_at_once_and_the_class_is_graded(tmp_path):
    root = tmp_path / "course"
    S.write(S.load(A), root, "ann", A)
    S.write(_many_cells(30_000), root, "huge", A)
    S.write(S.load(A), root, "zoe", A)
    proc = _grade(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = S.read_csv(root)
    for qid in QIDS:                                       # every question has its row
        score, _, reason = rows[("huge", A, qid)]
        assert score == 0 and "30,000 cells" in reason and "2,000" in reason, reason
    for student in ("ann", "zoe"):
        assert sum(rows[(student, A, qid)][0] for qid in QIDS) == FULL, rows
    state = json.loads((root / ".autograder" / "results" / "huge" / f"{A}.json").read_text())
    assert state["status"] == "invalid" and state["seconds"] < 5, state
    copy = root / "autograded" / "huge" / A / f"{A}.ipynb"
    assert copy.stat().st_size < 100_000 and "30,000 cells" in copy.read_text()
    assert "30,000 cells" in (root / "autograder-feedback" / "huge" / A / "feedback.html").read_text()


def _descendants(pid: int) -> dict[int, int]:
    """{pid: uid} of every process below ``pid`` (read from /proc: no psutil)."""
    children: dict[int, list[int]] = {}
    uids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/status") as fh:
                uids[int(entry)] = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
        except (OSError, StopIteration, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out[child] = uids.get(child, -1)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.alone       # wall-clock limits: make test runs it on its own, after the rest
def test_sigterm_stops_the_grader_its_jobs_and_sandboxes_and_the_next_run_resumes(tmp_path):
    root = tmp_path / "course"
    for student in ("a1", "a2"):
        S.write(S.load(A), root, student, A)
    # z9's cell sleeps (ignoring SIGALRM is refused in the sandbox now): its cell's alarm or the 60 s
    # wall limit stops it, long after the SIGTERM
    S.write(S.insert_cell(S.load(A), "import time\ntime.sleep(600)"), root, "z9", A)
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "1", "--no-progress",
           "--timeout", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=S.REPO,
                            env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"))
    states = root / ".autograder" / "results"
    deadline = time.monotonic() + 300
    while not (states / "z9").exists() and not (states / "a2" / f"{A}.json").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    # z9 is graded last (students in order): wait until its sandboxed process is running
    while True:
        tree = _descendants(proc.pid)
        if any(uid not in (0, -1) for uid in tree.values()) and (states / "a2" / f"{A}.json").exists():
            break
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    tree = _descendants(proc.pid)
    assert any(uid not in (0, -1) for uid in tree.values()), tree       # the student runs, unprivileged
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - start
    print(f"SIGTERM -> the grader exited in {took:.1f} s")
    assert proc.returncode == 130, (out, err)
    assert took < 8, (took, out, err)
    time.sleep(0.5)
    left = [pid for pid in tree if _alive(pid)]
    assert left == [], {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left}
    assert not (states / "z9" / f"{A}.json").exists()
    assert {k[0] for k in S.read_csv(root)} == {"a1", "a2"}

    S.write(S.load(A), root, "z9", A)
    resumed = _grade(root)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "grading 1 submission(s)" in resumed.stdout and "2 unchanged" in resumed.stdout, resumed.stdout
    rows = S.read_csv(root)
    assert {s: sum(rows[(s, A, q)][0] for q in QIDS) for s in ("a1", "a2", "z9")} == \
        {"a1": FULL, "a2": FULL, "z9": FULL}
