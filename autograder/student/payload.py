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
from . import guard, wire
from .ban import install
from .ban import prepare as prepare_bans
from .cells import CellTimeout, SubmissionError, _on_alarm, read_cells, run_cells
from .probe import probe

GRACE = 1.0          # seconds kept back from the sandbox's hard limit for sending results
INPUTS_FILE = ".autograder-inputs.bin"
REAP_WAIT = 10.0     # seconds to wait for init's answer to a reap request
EXIT_GRACE = 0.5     # seconds a probe's process has, after its result, to end

# What the notebook's code sees of the checker, defined apart from this module: their globals are a
# namespace of their own, so nothing reached from them (a method's __globals__) leads to the payload.
# This module defines no class for the same reason (object.__subclasses__() lists every class).
_STUBS = '''
class BlockGrader:
    """Refuses vitref (answers must not use the reference) and every module of the checker."""

    def find_spec(self, name, path=None, target=None):
        if name == "vitref" or name.startswith("vitref."):
            raise ModuleNotFoundError(
                f"No module named {name!r} (vitref, the course's reference implementation, is not available "
                f"while answers are checked)", name=name)
        if name.startswith("autograder."):
            raise ModuleNotFoundError(f"No module named {name!r} (the checker's own code is not available "
                                      f"while answers are checked)", name=name)
        return None


def check(qid=None, answer=None, *args, **kwargs):
    """autograder.check/grade while a notebook is graded: the test cells do nothing."""
    return None


class Shell:
    """Stand-in for get_ipython(): magics and shell commands do nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def get_ipython():
    return Shell()


def display(*args, **kwargs):
    return None
'''


def _stubs() -> dict:
    namespace: dict = {"__name__": "autograder"}
    exec(compile(_STUBS, "<the checker's stand-ins>", "exec"), namespace)  # noqa: S102 - our own constant code
    return namespace


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


def _fetch_held(emit, fd: int, source_class=None) -> dict:
    """Ask the host for the inputs it held back (the training data: hosts/training.py) and
    read them from ``fd``, where they arrive length-prefixed. The host's clock of the training
    starts now."""
    emit(wire.frame({"event": "inputs"}))
    with os.fdopen(fd, "rb", closefd=False) as channel:    # a buffered read returns n bytes, or fewer at EOF
        head = channel.read(4)
        size = int.from_bytes(head, "big")
        blob = channel.read(size)
    if len(head) < 4 or len(blob) < size:
        raise EOFError("the grader closed the channel of the training data")
    return wire.read_inputs(blob, source_class).arrays if size else {}


_WARM: dict = {}     # what prepare() made in the sandbox's zygote, inherited by every run


def prepare() -> None:
    """Called once by the sandbox's zygote, after its imports and before it forks the first student
    process: what each run would otherwise make again (the folders of library code, and
    :func:`autograder.student.guard.prepare`: the grader's classes frozen, the seal's snapshot)."""
    _WARM["trusted"] = _trusted_dirs()
    prepare_bans()
    guard.prepare()


def _trusted_dirs() -> tuple[str, ...]:
    return guard.trusted_dirs([os.path.dirname(os.path.dirname(os.path.abspath(__file__)))])


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
        install(sorted(banned), warm=True)
    try:
        source = _load_inputs(path, options)
    except Exception as error:  # noqa: BLE001 - a broken inputs file is the host's bug: say so
        _invalid(emit, f"the inputs of this run could not be read: {error}")
        return
    if options.get("data_fd") is not None and hasattr(source, "fetch"):
        data_fd, provided = int(options["data_fd"]), inputs.ProvidedSource
        source.fetch = lambda: _fetch_held(emit, data_fd, provided)
    questions = {qid: question(qid) for qid in qids}
    try:
        cells = read_cells(path)
    except SubmissionError as error:
        _invalid(emit, str(error))
        return
    reap_fd = options.get("reap_fd")
    namespace = _lock(bytes.fromhex(str(options.pop("frame_key", "") or "")))
    changed = guard.seal()          # what the probes rely on, as it is before the first cell
    guard.hide()
    sign = guard.sign

    long_probes = sum(float(q.seconds) for q in questions.values())     # training questions: their own time
    reserve = long_probes + min(probe_cap * len(questions), max(deadline - long_probes - time.monotonic(), 0) / 2)
    timed_out: list[int] = []
    errors = run_cells(cells, namespace, skip=skip,
                       budget=lambda index: min(cell_cap, deadline - reserve - time.monotonic()),
                       on_cell=lambda index: emit(wire.frame({"event": "cell", "index": index})),
                       timed_out=timed_out)
    emit(wire.frame({"event": "cells", "count": len(cells), "errors": errors[:20], "timed_out": timed_out}))
    _await_reap(reap_fd)
    for qid, q in questions.items():
        emit(wire.frame({"event": "probe", "qid": qid}))
        _await_reap(reap_fd)
        budget = min(max(probe_cap, float(q.seconds)), deadline - time.monotonic())
        _probe_one(q, namespace, errors, budget, source, emit, registered=banned, changed=changed, sign=sign)
    emit(wire.frame({"event": "done"}))


def _invalid(emit, reason: str) -> None:
    emit(wire.frame({"event": "invalid", "reason": reason}))
    emit(wire.frame({"event": "done"}))


def _probe_one(q, namespace: dict, errors: list, budget: float, source, emit, **probe) -> None:
    """Probe question ``q``'s answer in ``namespace`` (:func:`_probe_in_fork`), or say why not."""
    if q.answer_name not in namespace:
        data = {"qid": q.id, "fatal": f"no object named {q.answer_name} in the notebook"
                + (f" (a cell raised an error: {errors[0]})" if errors else ""), "cases": []}
        emit(wire.result_frame(q.id, data, sign=probe["sign"]))
    elif budget <= 0.05:
        emit(wire.frame({"event": "unavailable", "qid": q.id,
                         "reason": "not checked: the notebook used up the time limit"}))
    else:
        _probe_in_fork(q, namespace[q.answer_name], source, budget, emit, **probe)


def _lock(key: bytes) -> dict:
    """Before the first cell: the audit hook and vaults (:func:`autograder.student.guard.lockdown`),
    the import blocker, the test cells' ``check``/``grade`` made no-ops, and the notebook's
    namespace as the module ``__main__`` (the process's own ``__main__`` is the sandbox's runner)."""
    import types

    # first, while the sandbox's runner is still __main__ (its classes are frozen and unlisted with ours)
    guard.lockdown(_WARM.get("trusted") or _trusted_dirs(), key)
    stubs = _stubs()
    sys.meta_path.insert(0, stubs["BlockGrader"]())
    package = sys.modules["autograder"]      # the bundle's package: test cells call its check()/grade()
    package.check = package.grade = stubs["check"]
    main = types.ModuleType("__main__")
    main.__dict__.update(get_ipython=stubs["get_ipython"], display=stubs["display"])
    sys.modules["__main__"] = main
    return main.__dict__


def _await_reap(fd) -> None:
    """Wait until init has ended the strays (zygote._supervise) it was asked to end when this
    process wrote its last "cells" or "probe" frame; nothing to wait for outside the sandbox."""
    if fd is None:
        return
    ready, _, _ = select.select([int(fd)], [], [], REAP_WAIT)
    if ready:
        os.read(int(fd), 1)
    _reap_children()            # strays that were this process's own children: no zombie holds a place
                                # under the process limit the probes' forks need


def _fork() -> int:
    """os.fork() (-1 where fork does not exist), retried for a second while the process limit is
    full of the notebook's strays that init has just killed and this process has not reaped yet."""
    if not hasattr(os, "fork"):
        return -1
    for attempt in range(50):
        try:
            return os.fork()
        except BlockingIOError:
            if attempt == 49:
                raise
            _reap_children()
            time.sleep(0.02)
    raise OSError("fork failed")


def _ended_by(pid: int, when: float) -> bool:
    """Whether child ``pid`` has ended (without reaping it) by the monotonic time ``when``."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):       # no pidfd (old kernel): ask every 5 ms
        while True:
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            if time.monotonic() >= when:
                return False
            time.sleep(0.005)
    try:
        ready, _, _ = select.select([fd], [], [], max(0.0, when - time.monotonic()))
        return bool(ready)
    finally:
        os.close(fd)


def _reap_children() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _probe_in_fork(q, answer, source, budget: float, emit, registered=frozenset(), changed=None,
                   sign=None) -> None:
    """Probe ``answer`` in a forked process with the exercise's forbidden functions removed
    (``registered``: the keys this run disabled at the dispatcher before its first cell).
    ``changed``: :func:`autograder.student.guard.seal`'s check, made when the fork starts and before
    it sends its result; ``sign``: the signer of the result (guard.sign)."""
    try:
        ready_r, ready_w = os.pipe()
        pid = _fork()
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
            tampered = changed() if changed is not None else []
            if tampered:
                emit(_tampered(q, tampered))
            else:
                install(q.forbidden, registered=registered)
                emit(_probe_frame(q, answer, source, budget, changed, sign))
            os.write(ready_w, b"1")
        except BaseException:  # noqa: BLE001 - whatever happened, this process ends here
            code = 1
        os._exit(code)
    os.close(ready_w)
    finished = hung = False
    deadline = time.monotonic() + budget + GRACE
    try:
        ready, _, _ = select.select([ready_r], [], [], budget + GRACE)
        if ready:
            finished = os.read(ready_r, 1) == b"1"
        else:
            hung = True
        # the byte is only the fork's word (the answer runs there and may write it early): the deadline
        # holds until the process itself has ended
        if finished and not _ended_by(pid, deadline + EXIT_GRACE):
            finished, hung = False, True
    finally:
        os.close(ready_r)
        if not finished:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
    _report_end(q, budget, emit, finished, hung, os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)


def _report_end(q, budget: float, emit, finished: bool, hung: bool, killed: bool) -> None:
    """Why a probe's fork sent no result, when it did not."""
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


def _tampered(q, names) -> bytes:
    """The result of a question whose probe finds the checker's code or what it relies on changed."""
    shown = ", ".join(sorted(set(names))[:3]) + (" ..." if len(set(names)) > 3 else "")
    return wire.frame({"event": "unavailable", "qid": q.id,
                       "reason": f"not checked: the notebook changed {shown}, which the checker relies on "
                                 f"(a notebook must not modify the checker, builtins or the library's functions)"})


def _probe_frame(q, answer, source, budget: float, changed=None, sign=None) -> bytes:
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
    tampered = changed() if changed is not None else []
    if tampered:
        return _tampered(q, tampered)
    try:
        return wire.result_frame(q.id, data, sign=sign)
    except Exception as error:  # noqa: BLE001 - outputs that cannot be encoded are reported unavailable
        return wire.frame({"event": "unavailable", "qid": q.id,
                           "reason": f"the outputs of {q.answer_name} could not be recorded: {error}"})
