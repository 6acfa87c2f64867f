"""Checking a submission file in a child process (``python -m autograder check PATH``).

    results = check_file("submission.ipynb", ["q1", "softmax"], timeout=60)   # list of Result

The submission runs in a fresh child process that holds only the student-side code (the
same bundle the grading sandbox holds, so ``vitref`` and the judges are not importable
there) and the same runner (:func:`autograder.student.payload.payload`); what comes back are
plain arrays, judged here against vitref, together with a static scan of the file's source.
So a submission that patches torch, numpy or the checker, or returns objects whose
comparisons lie, cannot change its verdict. This host applies a time limit but no sandbox:
it is the student's and the instructor's quick check, not the batch grader's isolation.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import autograder
from ..judging.judge import judge_outcome
from ..judging.model import Result
from ..judging.secret import public_inputs
from ..questions.inputs import PublicSource
from ..student.cells import read_cells
from ..student.zygote import Feed, frame_events
from .driver import run_submission
from .identify import identify
from .sandbox import RunResult, make_bundle
from .training import held_back


DEFAULT_TIMEOUT = 60.0
GRACE = 5.0                       # seconds the parent waits beyond the child's own time limit
MAX_LOG = 4000                    # characters of the child's stdout/stderr kept

_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from autograder.student.local import main; "
         "sys.exit(main(sys.argv[2]))")


def child_env() -> dict:
    """The child's environment: ours without Python path settings, a non-GUI matplotlib."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["MPLBACKEND"] = "Agg"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@dataclass
class Limits:
    timeout: float = DEFAULT_TIMEOUT


class LocalHost:
    """Runs the payload in a fresh child process per attempt (see :mod:`autograder.hosts.driver`)."""

    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="autograder-"))
        self.bundle = make_bundle(self.tmp / "bundle")

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, notebook: bytes, qids, limits, name="submission.ipynb", options=None, inputs=b"",
            timeout=None) -> RunResult:
        timeout = limits.timeout if timeout is None else timeout
        work = Path(tempfile.mkdtemp(prefix="run-", dir=self.tmp))
        inputs, held = held_back(inputs, qids)     # the training data wait for the probe that asks (Feed)
        feed = Feed(held.data, float(held.request["held_limit"]), held.request["held_qids"])
        data_r, data_w = os.pipe()
        try:
            path = work / name
            path.write_bytes(notebook)
            options = dict(options or {}, timeout=timeout, data_fd=data_r)
            if inputs:
                (work / ".autograder-inputs.bin").write_bytes(inputs)
            out = work / "frames.bin"
            out.touch()
            spec = work / "spec.json"
            spec.write_text(json.dumps({"path": str(path), "qids": list(qids), "options": options,
                                        "out": str(out)}), encoding="utf-8")
            argv = [sys.executable, "-I", "-c", _BOOT, str(self.bundle), str(spec)]
            started = time.monotonic()
            with open(work / "output.txt", "wb") as output:
                process = subprocess.Popen(argv, cwd=work, env=child_env(), stdin=subprocess.DEVNULL,
                                           stdout=output, stderr=output, start_new_session=True,
                                           pass_fds=(data_r,))
                os.close(data_r)
                data_r = -1
                os.set_blocking(data_w, False)
                status, code, sig = "ok", None, None
                try:
                    code = _watch(process, out, feed, data_w, started + timeout + GRACE)
                    if code is None:
                        status = "timeout"
                finally:
                    _kill_group(process)
                    process.wait()
            if status == "ok" and process.returncode < 0:
                status, sig = "signal", -process.returncode
            elif status == "ok" and code != 0:
                status = "exit"
            text = (work / "output.txt").read_bytes()[-MAX_LOG:].decode("utf-8", "replace")
            data = out.read_bytes() if out.exists() else b""
            return held.finish(RunResult(status, data, code, sig, time.monotonic() - started, text), feed.report())
        finally:
            for fd in (data_r, data_w):
                if fd >= 0:
                    os.close(fd)
            shutil.rmtree(work, ignore_errors=True)


def _watch(process, out: Path, feed, data_w: int, deadline: float) -> int | None:
    """Wait for the child, reading its frames as they come to hand it the training data when it
    asks and to time the training (:class:`autograder.student.zygote.Feed`); its exit code, or
    None when it ran past ``deadline`` or past the training's limit (``feed.overdue``)."""
    stream = bytearray()

    def read_frames(frames) -> None:
        chunk = frames.read()
        if chunk:
            stream.extend(chunk)
            parsed, events = frame_events(stream, 0)
            for event, qid in events:
                feed.on_event(event, qid, time.monotonic())
            del stream[:parsed]

    with open(out, "rb") as frames:
        while True:
            read_frames(frames)
            if feed.pending:
                feed.write(data_w)
            code = process.poll()
            if code is not None:
                read_frames(frames)            # what it wrote just before it exited
                return code
            now = time.monotonic()
            training = feed.deadline()
            if training is not None and now > training:
                feed.overdue = True
                return None
            if now > deadline:
                return None
            time.sleep(0.002 if feed.pending else 0.02)


def _kill_group(process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def default_questions(path) -> list[str]:
    """Which questions to check when none are named: those of the file's own assignment, read
    from the marks the exercise notebook carries (:func:`autograder.hosts.identify.identify`),
    never from the file's name nor from the names its code defines.
    :class:`autograder.hosts.identify.Unidentified` (a SubmissionError) when it carries none."""
    return list(identify(path).qids)


def check_file(path, qids=None, timeout: float = DEFAULT_TIMEOUT) -> list[Result]:
    """Probe ``path`` in a child process, then judge here. Raises SubmissionError if unreadable."""
    return check_submission(path, qids, timeout)[0]


def check_submission(path, qids=None, timeout: float = DEFAULT_TIMEOUT):
    """:func:`check_file`, and the run's :class:`autograder.hosts.driver.Outcome` (cell errors, notes)."""
    path = Path(path)
    cells = read_cells(path, honor_mark=False)     # the student's own file: a mark in it means nothing
    qids = list(dict.fromkeys(qids)) if qids else default_questions(path)
    questions = [autograder.question(qid) for qid in qids]

    def inputs(run, run_qids):               # drawn here: the child cannot load datasets
        return public_inputs(run_qids), PublicSource()

    host = LocalHost()
    try:
        outcome = run_submission(host, path.read_bytes(), qids, Limits(timeout), name="submission" + path.suffix,
                                 inputs=inputs)
    finally:
        host.close()
    return [judge_outcome(q, outcome, cells) for q in questions], outcome


def format_table(results: list[Result], width: int = 100) -> str:
    import textwrap

    lines = [f"{'question':<22} {'result':<7} {'score':>9}  feedback", "-" * width]
    for r in results:
        verdict = "pass" if r.passed else "FAIL"
        score = f"{r.score:g}/{r.max_score:g}"
        wrapped = textwrap.wrap(r.feedback, width=max(30, width - 42)) or [""]
        lines.append(f"{r.id:<22} {verdict:<7} {score:>9}  {wrapped[0]}")
        lines.extend(" " * 42 + more for more in wrapped[1:])
    total = sum(r.score for r in results)
    maximum = sum(r.max_score for r in results)
    lines.append("-" * width)
    lines.append(f"{'total':<22} {sum(r.passed for r in results)}/{len(results):<5} {total:>5g}/{maximum:g}")
    return "\n".join(lines)
