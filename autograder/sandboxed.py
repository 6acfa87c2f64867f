"""One submission through the grading sandbox: the payload that runs inside it, and the
grader-side driver that reads what came out.

Inside the sandbox (:func:`payload`, called by :mod:`autograder.zygote` in the student's
process) the notebook's code cells run in order, each under its own alarm (a cell that
raises, exits or hangs is recorded and the next cell runs), with ``autograder.check`` /
``grade`` as no-ops and ``vitref`` unimportable. Then each question's answer is probed
(:func:`autograder.probe.probe`) under its own alarm. Progress is *streamed* as frames
(``cell i starts``, ``probing q``, ``result of q``), so when the process dies or hangs in a
way no alarm can catch (``os._exit``, a signal handler swallowed, memory), the grader knows
which cell or which answer did it.

On the grader's side (:func:`run_submission`) a submission whose process died is run again
without the culprit (the cell is skipped, or that question scores zero), at most
``MAX_ATTEMPTS`` times, so one broken answer does not cost the other questions.
"""
from __future__ import annotations

import builtins
import json
import linecache
import signal
import struct
import sys
import time
from dataclasses import dataclass, field

MAX_ATTEMPTS = 3
MAX_HEADER = 4 << 20  # bytes of JSON in one frame
GRACE = 1.0          # seconds kept back from the sandbox's hard limit for sending results


# ---------------------------------------------------------------- frame format
# frame = 4-byte length + JSON header, 4-byte length + blob (npz bytes or empty)

def frame(header: dict, blob: bytes = b"") -> bytes:
    head = json.dumps(header, allow_nan=True).encode()
    return struct.pack(">I", len(head)) + head + struct.pack(">I", len(blob)) + blob


def frames(data: bytes) -> list[tuple[dict, bytes]]:
    """Decode a stream of frames; a truncated or malformed tail is dropped."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if n > MAX_HEADER or pos + 4 + n + 4 > len(data):
            break
        try:
            header = json.loads(data[pos + 4:pos + 4 + n])
        except ValueError:
            break
        if not isinstance(header, dict):
            break
        pos += 4 + n
        (m,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + m > len(data):
            break
        out.append((header, data[pos + 4:pos + 4 + m]))
        pos += 4 + m
    return out


# ------------------------------------------------------------- input salt

def set_input_salt(salt: int) -> None:
    """Mix a secret number into every input the probes and judges build
    (:mod:`autograder.inputs`): the batch grader draws one per run and uses it on both
    sides, so the test inputs of a grading run cannot be known in advance (answers that
    look up precomputed outputs for the public inputs fail). 0 restores the public inputs."""
    from autograder import inputs
    base = getattr(inputs, "_unsalted_rng", None) or getattr(inputs, "_rng", None)
    if base is None:
        raise RuntimeError("autograder.inputs has no _rng(): the input salt cannot be applied")
    inputs._unsalted_rng = base
    if salt:
        inputs._rng = lambda *seed: base(int(salt), *seed)
    else:
        inputs._rng = base


# ------------------------------------------------------- inside the sandbox

class _Timeout(BaseException):
    """Raised by the alarm (a BaseException: ``except Exception`` in student code does not stop it)."""


def _on_alarm(signum, frame_):
    raise _Timeout()


def _npz(arrays: dict) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def payload(path: str, qids: list[str], emit, options: dict) -> None:
    """Run the notebook at ``path`` and stream the probe results of ``qids`` through ``emit``."""
    import autograder
    from autograder import _child, transport
    from autograder.probe import probe
    from autograder.source import SubmissionError, read_cells

    start = time.monotonic()
    deadline = start + float(options.get("timeout", 60)) - GRACE
    cell_cap = float(options.get("cell_timeout", 20))
    probe_cap = float(options.get("probe_timeout", 15))
    skip = set(options.get("skip_cells", ()))
    sys.meta_path.insert(0, _child._BlockVitref())
    questions = {qid: autograder.question(qid) for qid in qids}
    autograder.check = _child._noop_result
    autograder.grade = _child._noop_result

    try:
        cells = read_cells(path)
    except SubmissionError as error:
        emit(frame({"event": "invalid", "reason": str(error)}))
        emit(frame({"event": "done"}))
        return
    namespace = {"__name__": "__main__", "__builtins__": builtins,
                 "get_ipython": lambda: _child._Shell(), "display": lambda *a, **k: None}
    errors: list[str] = []
    signal.signal(signal.SIGALRM, _on_alarm)
    reserve = min(probe_cap * len(questions), max(deadline - time.monotonic(), 0) / 2)
    for index, cell in enumerate(cells):
        if index in skip:
            errors.append(f"cell {index + 1}: skipped (it stopped the notebook's process "
                          f"in an earlier attempt)")
            continue
        budget = min(cell_cap, deadline - reserve - time.monotonic())
        if budget <= 0.05:
            errors.append(f"cell {index + 1} and later: not run (the time limit was reached)")
            break
        emit(frame({"event": "cell", "index": index}))
        filename = f"<cell {index + 1}>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            exec(compile(cell, filename, "exec"), namespace)  # noqa: S102 - the point
        except _Timeout:
            errors.append(f"cell {index + 1}: did not finish within {budget:.0f} s")
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... recorded
            errors.append(_child._describe(error, index))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _on_alarm)   # in case a cell replaced the handler
    emit(frame({"event": "cells", "count": len(cells), "errors": errors[:20]}))
    set_input_salt(int(options.get("salt", 0)))

    for qid, question in questions.items():
        name = question.answer_name
        emit(frame({"event": "probe", "qid": qid}))
        if name not in namespace:
            data = {"qid": qid, "fatal": f"no object named {name} in the notebook"
                    + (f" (a cell raised an error: {errors[0]})" if errors else ""),
                    "cases": [], "hits": []}
        else:
            budget = min(probe_cap, deadline - time.monotonic())
            if budget <= 0.05:
                emit(frame({"event": "unavailable", "qid": qid,
                            "reason": "not checked: the notebook used up the time limit"}))
                continue
            signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                data = probe(question, namespace[name])
            except _Timeout:
                data = {"qid": qid, "fatal": f"checking {name} did not finish within {budget:.0f} s",
                        "cases": [], "hits": []}
            except BaseException as error:  # noqa: BLE001
                data = {"qid": qid, "fatal": f"checking {name} failed: {type(error).__name__}: "
                        f"{str(error)[:300]}", "cases": [], "hits": []}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, _on_alarm)
        try:
            arrays, tree = transport.pack(data)
            emit(frame({"event": "result", "qid": qid, "tree": tree}, _npz(arrays)))
        except Exception as error:  # noqa: BLE001
            emit(frame({"event": "unavailable", "qid": qid,
                        "reason": f"the outputs of {name} could not be recorded: {error}"}))
    emit(frame({"event": "done"}))


# --------------------------------------------------------- the grader's side

def code_cells(raw: bytes) -> tuple[list[str], str]:
    """(code cells as plain Python, problem) of a notebook's bytes; problem is "" when it
    is a readable notebook, else why not (not UTF-8, invalid JSON, no cells...)."""
    from autograder.source import _notebook_cells, SubmissionError
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], "it is not UTF-8 text"
    try:
        return _notebook_cells(text, "the notebook"), ""
    except SubmissionError as error:
        return [], str(error).replace("the notebook is not", "it is not")


@dataclass
class Outcome:
    status: str = "ok"                 # ok | retried | timeout | crashed | error
    probes: dict = field(default_factory=dict)   # qid -> {"data": probe data} | {"unavailable": why}
    reason: str = ""                   # notes for the whole submission (cells skipped, errors)
    seconds: float = 0.0
    attempts: int = 0
    failure: str = ""                  # the last hard failure, for questions never reached

    def missing_reason(self, question) -> str:
        why = self.failure or "the notebook's process stopped before this answer was checked"
        return f"{question.title}: not checked: {why}"


def _read_result(header: dict, blob: bytes):
    import io

    import numpy as np

    import zipfile

    from autograder import transport
    if len(blob) > transport.MAX_BYTES:
        raise ValueError(f"the outputs are larger than {transport.MAX_BYTES >> 20} MiB")
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        # numpy.savez stores arrays uncompressed: anything else could be a zip bomb
        if any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist()):
            raise ValueError("compressed outputs are not accepted")
    with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
        arrays = {key: np.array(npz[key]) for key in npz.files}
    for key, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(f"array {key} has dtype {value.dtype}")
    data = transport.unpack(arrays, header.get("tree"))
    if not isinstance(data, dict) or not isinstance(data.get("cases", []), list):
        raise ValueError("malformed probe result")
    return data


def run_submission(zygote, raw: bytes, qids: list[str], limits, name: str, salt: int = 0) -> Outcome:
    """Run a notebook in the sandbox (again without the culprit if its process dies)."""
    outcome = Outcome()
    skip: list[int] = []
    todo = list(qids)
    started = time.monotonic()
    notes: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        outcome.attempts = attempt + 1
        options = {"timeout": limits.timeout, "skip_cells": skip, "salt": salt,
                   "cell_timeout": max(5.0, limits.timeout / 4),
                   "probe_timeout": max(5.0, limits.timeout / 6)}
        run = zygote.run(raw, todo, limits, name=name, options=options)
        events = frames(run.data)
        done = False
        last = None
        for header, blob in events:
            kind = header.get("event")
            if kind == "invalid":
                outcome.status = "invalid"
                for qid in todo:
                    outcome.probes[qid] = {"unavailable": f"the notebook could not be read: "
                                                          f"{header.get('reason', '')}"}
            elif kind in ("cell", "probe"):
                last = header
            elif kind == "cells" and attempt == 0:
                errs = [str(e) for e in header.get("errors", [])][:3]
                if errs:
                    notes.append("errors while running the notebook: " + "; ".join(errs))
            elif kind == "result" and header.get("qid") in todo:
                try:
                    outcome.probes[header["qid"]] = {"data": _read_result(header, blob)}
                except Exception as error:  # noqa: BLE001
                    outcome.probes[header["qid"]] = {"unavailable": f"its outputs could not be read ({error})"}
            elif kind == "unavailable" and header.get("qid") in todo:
                outcome.probes[header["qid"]] = {"unavailable": str(header.get("reason", ""))[:300]}
            elif kind == "done":
                done = True
        if done and run.status == "ok":
            break
        why = run.describe(limits) if run.status != "ok" else \
            "the notebook's process ended before its answers could be checked (os._exit?)"
        if run.output.strip() and run.status in ("exit", "signal", "error"):
            tail = run.output.strip().splitlines()[-1][:160]
            why += f" (last output: {tail})"
        outcome.failure = why
        outcome.status = "timeout" if run.status == "timeout" else "crashed"
        if last is None:
            # it died before the first cell: nothing to skip, nothing more to learn
            break
        if last.get("event") == "probe":
            qid = last.get("qid")
            if qid in todo and qid not in outcome.probes:
                outcome.probes[qid] = {"unavailable": why}
        else:
            index = int(last.get("index", -1))
            if index in skip:
                break
            skip.append(index)
            notes.append(f"cell {index + 1} stopped the notebook's process ({why}); "
                         f"the notebook was run again without it")
        todo = [q for q in todo if q not in outcome.probes]
        if not todo:
            break
    outcome.reason = "; ".join(notes)
    outcome.seconds = time.monotonic() - started
    return outcome
