"""The student's side of ``python -m autograder check``: runs in a fresh child process.

1. ``vitref`` is made unimportable (as in the grading sandbox);
2. ``autograder.check`` / ``autograder.grade`` become no-ops, so test cells do not abort;
3. the submission's cells run in order, each in its own try/except (errors are recorded,
   later cells still run), within the time limit;
4. for each requested question the object named ``answer_name`` is probed, and the plain
   result is written to ``OUT/<qid>.npz`` + ``OUT/<qid>.json``.

Nothing is judged here: the parent process compares the outputs with vitref, so whatever
the submission patches in this process (torch, numpy, the checker) cannot change a verdict.
"""
from __future__ import annotations

import builtins
import json
import linecache
import os
import signal
import sys
import time
import traceback


class _BlockVitref:
    """Meta-path finder that refuses ``vitref``: answers must not use the reference."""

    def find_spec(self, name, path=None, target=None):
        if name == "vitref" or name.startswith("vitref."):
            raise ModuleNotFoundError(
                f"No module named {name!r} (vitref, the course's reference implementation, is not available "
                f"while answers are checked)", name=name)
        return None


class CellTimeout(BaseException):
    """Raised by the alarm when the time limit is reached (BaseException: harder to swallow)."""


def _alarm(signum, frame):
    raise CellTimeout()


class _Shell:
    """Stand-in for ``get_ipython()``: magics and shell commands do nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _noop_result(qid=None, answer=None, *args, **kwargs):
    from .core import Result
    return Result(str(qid), False, 0.0, 0.0, "not checked inside the grading process")


def _describe(error: BaseException, cell_index: int) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = ""
    for frame in reversed(frames):
        if frame.filename.startswith("<cell"):
            where = f" at line {frame.lineno}"
            break
    message = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"cell {cell_index + 1}{where}: {type(error).__name__}" + (f": {message}" if message else "")


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    sys.meta_path.insert(0, _BlockVitref())
    deadline = time.monotonic() + float(spec.get("timeout", 60))
    out_dir = spec["out"]

    import autograder
    from autograder import transport
    from autograder.probe import probe
    from autograder.source import read_cells

    questions = {qid: autograder.question(qid) for qid in spec["qids"]}
    autograder.check = _noop_result
    autograder.grade = _noop_result

    log = {"cell_errors": [], "timed_out": False, "cells": 0}

    def save_log():
        with open(os.path.join(out_dir, "_log.json.tmp"), "w", encoding="utf-8") as handle:
            json.dump(log, handle)
        os.replace(os.path.join(out_dir, "_log.json.tmp"), os.path.join(out_dir, "_log.json"))

    cells = read_cells(spec["path"])
    log["cells"] = len(cells)
    namespace = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": lambda: _Shell(),
                 "display": lambda *args, **kwargs: None}
    signal.signal(signal.SIGALRM, _alarm)
    for index, cell in enumerate(cells):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            log["timed_out"] = True
            break
        filename = f"<cell {index + 1}>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
        signal.setitimer(signal.ITIMER_REAL, remaining)
        try:
            code = compile(cell, filename, "exec")
            exec(code, namespace)  # noqa: S102 - running the submission is the point
        except CellTimeout:
            log["timed_out"] = True
            log["cell_errors"].append(f"cell {index + 1}: did not finish within the time limit")
            break
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... all recorded
            log["cell_errors"].append(_describe(error, index))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    save_log()

    for qid, question in questions.items():
        name = question.answer_name
        if name not in namespace:
            data = {"qid": qid, "fatal": _missing(name, log, spec["path"]), "cases": [], "hits": []}
        else:
            remaining = max(deadline - time.monotonic(), 1.0)
            signal.setitimer(signal.ITIMER_REAL, remaining)
            try:
                data = probe(question, namespace[name])
            except CellTimeout:
                data = {"qid": qid, "fatal": f"checking {name} did not finish within the time limit",
                        "cases": [], "hits": []}
            except BaseException as error:  # noqa: BLE001
                data = {"qid": qid, "fatal": f"checking {name} failed: {type(error).__name__}: {error}",
                        "cases": [], "hits": []}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            transport.write(out_dir, qid, data)
        except Exception as error:  # noqa: BLE001
            transport.write(out_dir, qid, {"qid": qid, "fatal": f"the result of {name} could not be recorded: "
                                                                f"{error}", "cases": [], "hits": []})
    return 0


def _missing(name: str, log: dict, path: str) -> str:
    text = f"no object named {name} in the {'notebook' if path.endswith('.ipynb') else 'file'}"
    if log["timed_out"]:
        text += " (the notebook did not finish within the time limit)"
    elif log["cell_errors"]:
        text += f" (a cell raised an error: {log['cell_errors'][0]})"
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
