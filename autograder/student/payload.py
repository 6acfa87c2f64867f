"""What runs in the student's process: the notebook's cells, then the probes.

:func:`payload` is the one runner of submissions, used by the grading sandbox (called by
:mod:`autograder.student.zygote`) and by ``python -m autograder check`` (a child process,
:mod:`autograder.student.local`). In order:

1. the inputs of this run are loaded (arrays the grader drew; no secret here), ``vitref``
   is made unimportable and ``autograder.check``/``grade`` become no-ops;
2. the code cells run in order, each under its own alarm (a cell that raises, exits or
   hangs is recorded and the next cell runs);
3. each question is probed in a *fork* of that process: the fork removes what the exercise
   forbids (:func:`autograder.student.ban.install`, which student code cannot undo; the
   grader runs the notebook once per set of forbidden functions and passes that set as
   ``options["ban"]``, installed before the first cell, so no cell can precompute with a
   forbidden function either), then calls the answer on the inputs under an alarm, sends
   the plain result and exits. The parent waits with a hard deadline and kills a fork that outlives it, so an
   answer that ignores the alarm, exits or crashes costs only its own question, and no
   question's probe changes the state another one sees.

A question that trains a model gets its training data only when its probe asks: the host held
them back from the run's inputs (:mod:`autograder.hosts.training`); :func:`_fetch_held` sends
the request frame ``{"event": "inputs"}`` and reads them from ``options["data_fd"]``, and the
host's clock of the training starts then.

Progress is streamed as frames (``cell i``, ``probe q``, ``result``/``unavailable``) so the
grader knows, when the process dies in a cell (``os._exit``...), which cell to skip when it
runs the notebook again.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time

from ..questions import inputs, question
from . import wire
from .ban import install
from .cells import CellTimeout, Shell, SubmissionError, _on_alarm, read_cells, run_cells
from .probe import probe

GRACE = 1.0          # seconds kept back from the sandbox's hard limit for sending results
INPUTS_FILE = ".autograder-inputs.npz"


class _BlockGrader:
    """Meta-path finder that refuses ``vitref`` (answers must not use the reference) and the
    grader's side of the autograder (in the sandbox they are absent anyway)."""

    ALLOWED = ("autograder.student", "autograder.questions")

    def find_spec(self, name, path=None, target=None):
        if name == "vitref" or name.startswith("vitref."):
            raise ModuleNotFoundError(
                f"No module named {name!r} (vitref, the course's reference implementation, is not available "
                f"while answers are checked)", name=name)
        if name.startswith("autograder.") and not name.startswith(self.ALLOWED):
            raise ModuleNotFoundError(f"No module named {name!r} (the checker's own code is not available "
                                      f"while answers are checked)", name=name)
        return None


def _noop_check(qid=None, answer=None, *args, **kwargs):
    """``autograder.check``/``grade`` while a notebook is graded: the test cells do nothing."""
    return None


def _load_inputs(path: str, options: dict):
    """The run's inputs: the file the host left next to the notebook (then deleted), or the
    public inputs when there is none."""
    file = os.path.join(os.path.dirname(path), options.get("inputs_file", INPUTS_FILE))
    if not os.path.exists(file):
        return inputs.PublicSource()
    with open(file, "rb") as handle:
        blob = handle.read()
    os.unlink(file)
    return wire.read_inputs(blob)


def _fetch_held(emit, fd: int) -> dict:
    """Ask the host for the inputs it held back (the training data: hosts/training.py) and
    read them from ``fd``, where they arrive length-prefixed. The host's clock of the training
    starts now."""
    emit(wire.frame({"event": "inputs"}))

    def read(n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("the grader closed the channel of the training data")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    size = int.from_bytes(read(4), "big")
    return wire.read_inputs(read(size)).arrays if size else {}


def payload(path: str, qids: list[str], emit, options: dict) -> None:
    """Run the submission at ``path`` and stream the probe results of ``qids`` through ``emit``."""

    start = time.monotonic()
    deadline = start + float(options.get("timeout", 60)) - GRACE
    cell_cap = float(options.get("cell_timeout", 20))
    probe_cap = float(options.get("probe_timeout", 15))
    skip = set(options.get("skip_cells", ()))
    banned = frozenset(options.get("ban") or ())    # read before any student code runs
    if banned:
        # what the questions of this run forbid is gone before any student code runs, so no
        # cell can compute (or precompute) with it, whatever it patches afterwards
        install(sorted(banned))
    try:
        source = _load_inputs(path, options)
    except Exception as error:  # noqa: BLE001 - a broken inputs file is the host's bug: say so
        emit(wire.frame({"event": "invalid", "reason": f"the inputs of this run could not be read: {error}"}))
        emit(wire.frame({"event": "done"}))
        return
    if options.get("data_fd") is not None and hasattr(source, "fetch"):
        source.fetch = lambda: _fetch_held(emit, int(options["data_fd"]))
    sys.meta_path.insert(0, _BlockGrader())
    stub = sys.modules["autograder"]       # the bundle's package: test cells call its check()/grade()
    stub.check = stub.grade = _noop_check
    questions = {qid: question(qid) for qid in qids}
    try:
        cells = read_cells(path)
    except SubmissionError as error:
        emit(wire.frame({"event": "invalid", "reason": str(error)}))
        emit(wire.frame({"event": "done"}))
        return

    long_probes = sum(float(q.seconds) for q in questions.values())     # training questions: their own time
    reserve = long_probes + min(probe_cap * len(questions), max(deadline - long_probes - time.monotonic(), 0) / 2)
    namespace = {"__name__": "__main__", "get_ipython": lambda: Shell(), "display": lambda *a, **k: None}
    timed_out: list[int] = []
    errors = run_cells(cells, namespace, skip=skip,
                       budget=lambda index: min(cell_cap, deadline - reserve - time.monotonic()),
                       on_cell=lambda index: emit(wire.frame({"event": "cell", "index": index})),
                       timed_out=timed_out)
    emit(wire.frame({"event": "cells", "count": len(cells), "errors": errors[:20], "timed_out": timed_out}))
    if options.get("own_pid_namespace"):
        _stop_strays()

    for qid, q in questions.items():
        emit(wire.frame({"event": "probe", "qid": qid}))
        if q.answer_name not in namespace:
            data = {"qid": qid, "fatal": f"no object named {q.answer_name} in the notebook"
                    + (f" (a cell raised an error: {errors[0]})" if errors else ""), "cases": []}
            emit(wire.result_frame(qid, data))
            continue
        budget = min(max(probe_cap, float(q.seconds)), deadline - time.monotonic())
        if budget <= 0.05:
            emit(wire.frame({"event": "unavailable", "qid": qid,
                             "reason": "not checked: the notebook used up the time limit"}))
            continue
        _probe_in_fork(q, namespace[q.answer_name], source, budget, emit,
                       strays=bool(options.get("own_pid_namespace")), registered=banned)
    emit(wire.frame({"event": "done"}))


def _stop_strays() -> None:
    """In the sandbox's own pid namespace, every process but its init (1) and this one was
    started by the notebook's cells (background workers, a fork bomb): stop them before the
    answers are probed. ``kill(-1)`` reaches all of them at once (never the caller or init)."""
    for _ in range(20):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:                 # ESRCH: nobody left to signal
            pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
        me = os.getpid()
        if not [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]:
            return
        time.sleep(0.02)


def _fork(strays: bool) -> int:
    """os.fork(), retried after stopping the notebook's stray processes when the process
    limit is reached (-1 where fork does not exist)."""
    if not hasattr(os, "fork"):
        return -1
    for attempt in range(5):
        try:
            return os.fork()
        except BlockingIOError:
            if not strays or attempt == 4:
                raise
            _stop_strays()
    raise OSError("fork failed")


def _probe_in_fork(q, answer, source, budget: float, emit, strays: bool = False,
                   registered=frozenset()) -> None:
    """Probe ``answer`` in a forked process with the exercise's forbidden functions removed
    (``registered``: the keys this run disabled at the dispatcher before its first cell)."""
    try:
        ready_r, ready_w = os.pipe()
        pid = _fork(strays)
    except OSError as error:            # no process left (the notebook started too many)
        emit(wire.frame({"event": "unavailable", "qid": q.id,
                         "reason": f"checking {q.answer_name} needs a process and none could be started "
                                   f"({error.strerror or error}): did the notebook start background processes?"}))
        return
    if pid < 0:                         # not POSIX: probe here (the ban is undone afterwards)
        ban = install(q.forbidden, reversible=True)
        try:
            emit(_probe_frame(q, answer, source, budget))
        finally:
            ban.undo()
        return
    if pid == 0:
        code = 0
        try:
            os.close(ready_r)
            install(q.forbidden, registered=registered)
            emit(_probe_frame(q, answer, source, budget))
            os.write(ready_w, b"1")
        except BaseException:  # noqa: BLE001 - whatever happened, this process ends here
            code = 1
        os._exit(code)
    os.close(ready_w)
    finished = hung = False
    try:
        ready, _, _ = select.select([ready_r], [], [], budget + GRACE)
        if ready:
            finished = os.read(ready_r, 1) == b"1"
        else:
            hung = True
    finally:
        os.close(ready_r)
        if not finished:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if hung:
        emit(wire.frame({"event": "unavailable", "qid": q.id,
                         "reason": f"checking {q.answer_name} did not finish within the time limit of "
                                   f"{budget:.0f} s (the answer hung and was stopped)"}))
    elif not finished and killed:
        emit(wire.frame({"event": "unavailable", "qid": q.id,
                         "reason": f"checking {q.answer_name} stopped its process: it was killed, most likely "
                                   f"for using more memory than the limit (MemoryError or the out-of-memory "
                                   f"killer)"}))
    elif not finished:
        emit(wire.frame({"event": "unavailable", "qid": q.id,
                         "reason": f"checking {q.answer_name} stopped its process (the answer exited or "
                                   f"crashed it) before a result was sent"}))


def _probe_frame(q, answer, source, budget: float) -> bytes:
    """The result frame of one question (probed in this process, under an alarm)."""

    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(budget, 0.1))
    try:
        with inputs.using(source):
            data = probe(q, answer)
    except CellTimeout:
        data = {"qid": q.id, "fatal": f"checking {q.answer_name} did not finish within {budget:.0f} s", "cases": []}
    except BaseException as error:  # noqa: BLE001 - student code may raise anything (SystemExit too)
        data = {"qid": q.id, "fatal": f"checking {q.answer_name} failed: {type(error).__name__}: "
                f"{str(error)[:300]}", "cases": []}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        return wire.result_frame(q.id, data)
    except Exception as error:  # noqa: BLE001 - outputs that cannot be encoded are reported unavailable
        return wire.frame({"event": "unavailable", "qid": q.id,
                           "reason": f"the outputs of {q.answer_name} could not be recorded: {error}"})
