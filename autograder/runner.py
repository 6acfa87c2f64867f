"""Checking a submission file in a separate process (``python -m autograder check PATH``).

    results = check_file("submission.ipynb", ["q1", "softmax"], timeout=60)   # list of Result

The submission runs in a fresh child process (:mod:`autograder._child`) with a time limit;
the child only *probes* the answers and writes plain arrays to files. Judging against
vitref happens here, in the caller's process, together with a static scan of the file's
source for forbidden shortcuts. So a submission that patches torch, numpy or the checker,
or returns objects whose comparisons lie, cannot change its verdict.

Hooks for batch grading (sandboxes, resource limits):

* :func:`child_command` builds the child's argv; wrap it (e.g. in ``bwrap``) with the
  ``wrap`` argument of :func:`run_probes`;
* :func:`run_probes` returns ``{qid: probe data}`` (a failure is probe data with ``"fatal"``
  set, so :func:`autograder.judge.judge` turns it into a failed Result with that reason);
* ``preexec_fn`` and ``env`` are passed to :class:`subprocess.Popen`.
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
from dataclasses import dataclass, field
from pathlib import Path

from . import transport
from .core import Result
from .source import SubmissionError, defined_names, read_cells

PACKAGE_DIR = Path(__file__).resolve().parent
DEFAULT_TIMEOUT = 60.0
GRACE = 10.0                      # seconds the parent waits beyond the child's own time limit
MAX_LOG = 4000                    # characters of the child's stdout/stderr kept

_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from autograder._child import main; "
         "sys.exit(main(sys.argv[2]))")


def child_command(spec_path: str | os.PathLike, lib_dir: str | os.PathLike, python: str | None = None) -> list[str]:
    """argv of the child process. ``lib_dir`` holds (a link to) the ``autograder`` package only."""
    return [python or sys.executable, "-I", "-c", _BOOT, str(lib_dir), str(spec_path)]


def child_env(extra: dict | None = None) -> dict:
    """The child's environment: ours without Python path settings, a non-GUI matplotlib."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["MPLBACKEND"] = "Agg"
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


@dataclass
class RunLog:
    """What happened in the child: cell errors, exit status, the tail of its output."""

    returncode: int | None = None
    timed_out: bool = False
    cell_errors: list = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0


def _fatal(qid: str, message: str) -> dict:
    return {"qid": qid, "fatal": message, "cases": [], "hits": []}


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - MAX_LOG))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_probes(path, qids, timeout: float = DEFAULT_TIMEOUT, *, wrap=None, env: dict | None = None,
               preexec_fn=None, workdir: str | os.PathLike | None = None, log: RunLog | None = None) -> dict:
    """Run the submission at ``path`` in a child process and probe ``qids``.

    Returns ``{qid: probe data}``; every qid is present. ``wrap(argv, tmp_dir) -> argv`` may
    wrap the child command (sandbox). Raises :class:`SubmissionError` if ``path`` cannot be
    read. ``log`` (a :class:`RunLog`) is filled in when given.
    """
    import autograder

    path = Path(path)
    read_cells(path)                                   # unreadable -> SubmissionError, before any process
    qids = list(dict.fromkeys(qids))
    for qid in qids:
        autograder.question(qid)                       # unknown id -> ValueError
    log = log if log is not None else RunLog()
    tmp = Path(tempfile.mkdtemp(prefix="autograder-", dir=workdir))
    try:
        lib, work, out = tmp / "lib", tmp / "work", tmp / "out"
        for folder in (lib, work, out):
            folder.mkdir()
        try:
            (lib / "autograder").symlink_to(PACKAGE_DIR, target_is_directory=True)
        except OSError:
            shutil.copytree(PACKAGE_DIR, lib / "autograder", ignore=shutil.ignore_patterns("__pycache__"))
        submission = work / ("submission" + path.suffix)
        shutil.copyfile(path, submission)
        spec = {"path": str(submission), "qids": qids, "out": str(out), "timeout": float(timeout)}
        spec_path = tmp / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        argv = child_command(spec_path, lib)
        if wrap is not None:
            argv = wrap(argv, tmp)
        started = time.monotonic()
        with open(tmp / "stdout.txt", "wb") as stdout, open(tmp / "stderr.txt", "wb") as stderr:
            process = subprocess.Popen(argv, cwd=work, env=env if env is not None else child_env(),
                                       stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                       start_new_session=True, preexec_fn=preexec_fn)
            try:
                log.returncode = process.wait(timeout=timeout + GRACE)
            except subprocess.TimeoutExpired:
                log.timed_out = True
                _kill_group(process)
                log.returncode = process.wait()
            finally:
                _kill_group(process)
        log.seconds = time.monotonic() - started
        log.stdout, log.stderr = _tail(tmp / "stdout.txt"), _tail(tmp / "stderr.txt")
        try:
            child_log = json.loads((out / "_log.json").read_text(encoding="utf-8"))
            log.cell_errors = [str(e) for e in child_log.get("cell_errors", [])][:50]
            log.timed_out = log.timed_out or bool(child_log.get("timed_out"))
        except (OSError, ValueError):
            pass
        results = {}
        for qid in qids:
            try:
                data = transport.read(out, qid)
            except Exception as error:  # noqa: BLE001 - whatever the child left behind
                data = _fatal(qid, f"the checker could not read the result ({error})")
            if data is None:
                data = _fatal(qid, _why_missing(qid, log))
            elif not isinstance(data, dict) or data.get("qid") != qid:
                data = _fatal(qid, "the result file was not written by the checker")
            results[qid] = data
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _why_missing(qid: str, log: RunLog) -> str:
    import autograder

    name = autograder.question(qid).answer_name
    if log.timed_out:
        return f"{name} was not checked: the notebook did not finish within the time limit"
    if log.returncode not in (0, None):
        return (f"{name} was not checked: the notebook ended the checking process "
                f"(exit status {log.returncode}) before its answers were probed")
    return f"{name} was not checked (the checking process stopped early)"


def default_questions(path, cells=None) -> list[str]:
    """Which questions to check when none are named: the assignment's, when the file is
    named after one (``03_attention.ipynb``), else those whose answer name the file defines."""
    import autograder

    path = Path(path)
    all_questions = autograder.questions()
    chapters = {q.chapter for q in all_questions}
    stem = path.stem
    for chapter in chapters:
        if stem == chapter or stem.startswith(chapter):
            return [q.id for q in all_questions if q.chapter == chapter]
    names = defined_names(cells if cells is not None else read_cells(path))
    found = [q.id for q in all_questions if q.answer_name in names]
    return found or [q.id for q in all_questions]


def check_file(path, qids=None, timeout: float = DEFAULT_TIMEOUT, log: RunLog | None = None, **kwargs) -> list[Result]:
    """Probe ``path`` in a child process, then judge here. Raises SubmissionError if unreadable."""
    import autograder
    from .judge import judge
    from .shortcuts import scan_source

    cells = read_cells(path)
    qids = list(qids) if qids else default_questions(path, cells)
    data = run_probes(path, qids, timeout=timeout, log=log, **kwargs)
    results = []
    for qid in qids:
        question = autograder.question(qid)
        hits = scan_source(cells, question.answer_name, question.forbidden)
        try:
            results.append(judge(question, data[qid], static_hits=hits))
        except Exception as error:  # noqa: BLE001 - one broken verdict must not lose the others
            results.append(Result(qid, False, 0.0, float(question.points),
                                  f"{question.title}: the checker failed ({type(error).__name__}: {error})"))
    return results


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
