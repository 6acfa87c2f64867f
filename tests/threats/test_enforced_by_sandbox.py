"""Enforced by the sandbox, not by the student's process (`python -m autograder grade`).

One class is graded once; each attacker is the 03_attention solution with one change aimed at
``attention_head`` (2 points):

* **no second program**: ``subprocess``, ``os.system``, ``multiprocessing``'s spawn and ``os.exec*`` in
  a fork fail (seccomp makes ``execve`` fail in the kernel; the audit hook says why) and the answer that
  needed them scores 0; an honest ``os.fork`` still works; a process a cell left running is gone when
  the answers are probed (init ended it, not the student's process);
* **nothing that decides a value is reachable**: the grader's modules are out of ``sys.modules`` (any
  alias), its classes are immutable (``object.__subclasses__()`` finds them, ``ProbeCase.build = ...``
  fails), a change to its modules' namespaces is seen by the seal (every question of that notebook: not
  checked), frames, ``gc.get_objects``, ``ctypes`` and signal handlers are refused to the student's code.
  Each attacker's head is wrong (no value projection), so an attack that worked would show as points.

The result frames' MAC (a result written by the notebook itself is refused) is tested without the
sandbox at the end of this file.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import grading_students as S
from autograder.hosts import driver
from autograder.student import wire

A = "03_attention"
POINTS = {"softmax": 1.0, "attention": 3.0, "attention_head": 2.0, "concept_masked_row": 1.0}
FULL = dict(POINTS)
HEAD_ZERO = {**FULL, "attention_head": 0.0}
ZERO = {q: 0.0 for q in POINTS}

WRONG_HEAD = '''
class AttentionHead(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.query = nn.Linear(dim, head_dim)
        self.key = nn.Linear(dim, head_dim)
        self.value = nn.Linear(dim, head_dim)

    def forward(self, x, mask=None):
{body}
        q, k = self.query(x), self.key(x)
        return scaled_dot_product_attention(q, k, k, mask)      # keys used as values: wrong
'''

# student -> (the change to the solution, the expected score of each question, a word the reason must hold)
CLASS: dict[str, tuple] = {}


def right_head(student, body, expect, reason=""):
    CLASS[student] = ("head", body, expect, reason)


def wrong_head(student, body, expect=HEAD_ZERO, reason="", cell=None):
    CLASS[student] = ("wrong", body, expect, reason, cell)


# ---- no second program (each answer is right if the program could start)
right_head("subprocess_python", "        import subprocess, sys\n"
           "        subprocess.run([sys.executable, '-c', 'pass'], check=True)", HEAD_ZERO, "another program")
right_head("os_system", "        import os\n        assert os.system('true') == 0", HEAD_ZERO, "another program")
right_head("multiprocessing_spawn", "        import multiprocessing as mp\n"
           "        p = mp.get_context('spawn').Process(target=print)\n        p.start(); p.join()\n"
           "        assert p.exitcode == 0", HEAD_ZERO, "")
right_head("exec_in_fork", "        import os, sys\n        pid = os.fork()\n        if pid == 0:\n"
           "            try:\n                os.execv('/bin/true', ['/bin/true'])\n            finally:\n"
           "                os._exit(7)\n        _, status = os.waitpid(pid, 0)\n"
           "        assert os.WEXITSTATUS(status) == 0, 'the program did not start'", HEAD_ZERO, "")
CLASS["stray_worker"] = ("head-cell", "        import os\n        try:\n            os.kill(_WORKER, 0)\n"
                         "        except ProcessLookupError:\n            pass\n        else:\n"
                         "            raise AssertionError('the worker started in a cell is still running')",
                         FULL, "", "import os, time\n_WORKER = os.fork()\nif _WORKER == 0:\n"
                         "    while True:\n        time.sleep(0.05)")
right_head("honest_fork", "        import os\n        pid = os.fork()\n        if pid == 0:\n            os._exit(0)\n"
           "        os.waitpid(pid, 0)", FULL)

# ---- nothing that decides a value is reachable (each head is wrong: an attack that worked would pass it)
PROBE_PATCH = ("    def _always(self, *a, **k):\n        raise SystemExit\n")
wrong_head("honest_wrong", "        pass")
wrong_head("sys_modules_alias", "        pass", cell=(
    "import sys\nprobe = getattr([sys][0], 'mod' + 'ules')['autograder.student.probe']\n"
    "probe.ProbeRecorder.run = lambda self, answer: {'qid': 'attention_head', 'fatal': None, 'cases': []}"))
wrong_head("subclasses_setattr", "        pass", cell=(
    "found = [c for c in object.__subclasses__() if c.__name__ == 'ProbeCase']\n"
    "type.__setattr__(found[0], 'output', lambda self, name, value: None)"))
wrong_head("subclasses_globals", "        pass", cell=(
    "found = [c for c in object.__subclasses__() if c.__name__ == 'ProbeRecorder']\n"
    "if found:\n    found[0].run.__globals__['describe_exception'] = lambda error: {}"))
right_head("subclasses_walk",                # a right head that fails if any base lists a grader class
           "        seen, todo = set(), [object]\n"
           "        while todo:\n"
           "            cls = todo.pop()\n"
           "            for sub in type.__subclasses__(cls):\n"
           "                if sub not in seen:\n"
           "                    seen.add(sub)\n"
           "                    todo.append(sub)\n"
           "        ours = [c.__name__ for c in seen if c.__name__ in ('ProbeCase', 'ProbeRecorder', 'Feed',\n"
           "                                                          'Question', 'ProvidedSource', 'PublicSource')]\n"
           "        assert not ours, ours", FULL)
wrong_head("frame_walk", "        import sys\n        f = sys._getframe(1)", reason="_getframe")
wrong_head("traceback_frame", "        try:\n            1 / 0\n        except ZeroDivisionError as e:\n"
           "            e.__traceback__.tb_frame.f_back", reason="tb_frame")
wrong_head("gc_objects", "        pass", cell="import gc\ngc.collect()\nobjects = gc.get_objects()")
wrong_head("ctypes_memory", "        import ctypes\n        ctypes.c_long.from_address(id(x)).value", reason="ctypes")
wrong_head("signal_handler", "        import signal\n        signal.signal(signal.SIGPROF, lambda s, f: None)",
           reason="signal handler")


def write_class(root: Path) -> None:
    for student, spec in CLASS.items():
        nb = S.load(A)
        if spec[0] in ("head", "head-cell"):
            nb = S.replace_definition(nb, "AttentionHead", S.head_with_forward(spec[1]))
            if spec[0] == "head-cell":      # a cell that leaves a process running: init ends it before the probes
                nb = S.insert_cell(nb, spec[4])
        else:
            nb = S.replace_definition(nb, "AttentionHead", WRONG_HEAD.format(body=spec[1]))
            if spec[4]:
                nb = S.insert_cell(nb, spec[4])
        S.write(nb, root, student, A)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("enforced") / "course"
    root.mkdir()
    write_class(root)
    cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2", "--timeout", "20",
           "--memory", "768", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=S.REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return S.read_csv(root), proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("student", list(CLASS))
def test_attack_scores_nothing_and_honest_code_keeps_its_points(graded, student):
    rows, log = graded
    expect, reason = CLASS[student][2], CLASS[student][3]
    got = {qid: rows[(student, A, qid)][0] for qid in POINTS}
    reasons = {qid: rows[(student, A, qid)][2] for qid in POINTS}
    assert got == expect, (reasons, log[-2000:])
    if reason:
        assert reason in reasons["attention_head"], reasons


# ---- a result frame the notebook writes itself is not the probe's

class _Host:
    """Stands for the sandbox: its run returns the frames ``make(options)`` builds."""

    def __init__(self, make):
        self.make = make

    def run(self, raw, qids, limits, name="", options=None, inputs=b"", timeout=None):
        from autograder.hosts.sandbox import RunResult
        return RunResult("ok", self.make(options))


def _result(qid, key_hex, mac=True, value=1.0):
    import hmac
    import numpy as np

    data = {"qid": qid, "fatal": None, "cases": [{"outputs": {"out": np.array([value])}, "modules": [],
                                                   "error": None}]}
    sign = (lambda b: hmac.new(bytes.fromhex(key_hex), b, "sha256").hexdigest()) if mac else (lambda b: "0" * 64)
    return wire.result_frame(qid, data, sign=sign)


@pytest.mark.parametrize("forged_after, signed, kept", [(False, True, True), (True, True, True),
                                                      (False, False, False)])
def test_only_the_probes_signed_results_count(forged_after, signed, kept):
    from autograder.hosts.sandbox import Limits

    def make(options):
        key = options["frame_key"]
        frames = [wire.frame({"event": "cells", "count": 1, "errors": [], "timed_out": []}),
                  wire.frame({"event": "probe", "qid": "softmax"})]
        frames.append(_result("softmax", key, mac=signed, value=1.0))
        if forged_after:
            frames.append(_result("softmax", key, mac=False, value=2.0))      # a thread's forgery, after
        frames.append(wire.frame({"event": "done"}))
        return b"".join(frames)

    outcome = driver.run_submission(_Host(make), b"{}", ["softmax"], Limits(timeout=5), name="s.ipynb")
    probe = outcome.probes["softmax"]
    if kept:
        assert float(probe["data"]["cases"][0]["outputs"]["out"][0]) == 1.0
    else:
        assert "data" not in probe and "checker's probe" in probe["unavailable"]


# ---- what the student's stream asks of the zygote and the driver costs them, not the grader

def test_the_training_data_go_out_once_however_often_they_are_asked_for():
    """Red team, round 3: 200 'inputs' frames made the zygote queue a copy of the training data each."""
    from autograder.student.zygote import Feed

    feed = Feed(b"x" * 1000, 10.0, ["train_to_accuracy"])
    for when in range(200):
        feed.on_event("inputs", None, float(when))
    assert len(feed.pending) == 4 + 1000 + 199 * 4          # the data once, then empty answers
    assert feed.started == 0.0


def test_a_long_list_of_timed_out_cells_costs_the_driver_nothing():
    """Red team, round 3: one forged 'cells' frame with 80,000 indices took the driver 21 s (a list
    searched for each); only indices of real cells count, once each."""
    import time

    from autograder.hosts.sandbox import Limits

    def make(options):
        timed = list(range(80_000)) + ["x", -1, 2 ** 40]
        return b"".join([wire.frame({"event": "cells", "count": 3, "errors": [], "timed_out": timed}),
                         wire.frame({"event": "done"})])

    start = time.monotonic()
    outcome = driver.run_submission(_Host(make), b"{}", ["softmax"], Limits(timeout=5), name="s.ipynb")
    assert time.monotonic() - start < 2.0
    assert sum("did not finish within its time limit" in n for n in outcome.reason.split("; ")) == 3
