"""Running one submission through a host and reading what came back (grader side).

A *host* runs :func:`autograder.student.payload.payload` on a notebook somewhere: the
grading sandbox (:class:`autograder.hosts.sandbox.Zygote`) or a plain child process
(:class:`autograder.hosts.child_process.LocalHost`, for ``python -m autograder check``). Both answer
``run(notebook, qids, limits, name=, options=, inputs=, timeout=) -> RunResult`` with the
stream of frames the payload wrote.

:func:`run_submission` gives the whole submission one wall-clock budget (``limits.timeout``):
when the student's process dies or hangs inside a cell (``os._exit``, a cell that ignores
the alarm), the notebook runs again without that cell, in what is left of the budget, at
most ``MAX_ATTEMPTS`` times. Answers that crash or hang cost only their own question (the
payload probes each in its own fork).
"""
from __future__ import annotations

import ast
import hmac
import secrets
import time
from dataclasses import dataclass, field

from ..judging.preflight import MAX_CELLS
from ..judging.scan import parsed_cell
from ..questions import question
from ..questions import inputs as recipes
from ..questions.forbidden import FORBIDDEN, expand
from ..student import wire
from ..student.cells import code_cells, code_only
from .training import stamp, timed


MAX_ATTEMPTS = 3
MIN_ATTEMPT = 2.0     # seconds: an attempt with less budget left is not started


@dataclass
class Outcome:
    status: str = "ok"                 # ok | invalid | timeout | crashed
    # qid -> {"data": probe data, "run": index, "source": the run's input source} | {"unavailable": why}
    probes: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)   # per run: {"qids": [...], "ban": [...], "source": ...}
    reason: str = ""                   # notes for the whole submission (cells skipped, errors)
    cell_errors: list = field(default_factory=list)
    seconds: float = 0.0
    attempts: int = 0
    failure: str = ""                  # the last hard failure, for questions never reached

    def missing_reason(self, question) -> str:
        why = self.failure or "the notebook's process stopped before this answer was checked"
        return f"{question.title}: not checked: {why}"


UNSIGNED = ("a result for this question came from the notebook's own code, not from the checker's probe "
            "(a notebook must not write the checker's frames)")


def signed_by_probe(header: dict, blob: bytes, key: bytes) -> bool:
    """Whether a result frame carries the run's MAC (:func:`autograder.student.guard.sign`)."""
    mac = header.get("mac")
    if not isinstance(mac, str):
        return False
    expected = hmac.new(key, wire.signed_bytes(header, blob), "sha256").hexdigest()
    return hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode())


def options_for(timeout: float) -> dict:
    """A cell gets at most a quarter of the budget and an answer a sixth (at least 5 s each)."""
    return {"cell_timeout": max(5.0, timeout / 4), "probe_timeout": max(5.0, timeout / 6)}


def ban_groups(qids: list[str], cells: list[str] | None = None) -> list[tuple[tuple[str, ...], list[str]]]:
    """The questions grouped by what their exercises forbid, in question order: the notebook
    runs once per group, with that group's forbidden functions removed from the start.

    A question that forbids nothing does not get a run of its own when another group exists:
    it rides along with a group (each run costs a fresh sandboxed process and every cell again).
    Its answer is probed there under a ban it does not have; :func:`run_submission` runs it again
    without any ban when that ban got in its way. So the host is a group whose forbidden names
    the notebook's ``cells`` do not use where they run at once (a demo line such as
    ``nn.LayerNorm(8)(x)`` beside the exercise: :func:`names_run_at_once`), then the group that
    forbids least."""
    groups: dict[tuple[str, ...], list[str]] = {}
    free: list[str] = []
    for qid in qids:
        forbidden = tuple(sorted(question(qid).forbidden))
        if forbidden:
            groups.setdefault(forbidden, []).append(qid)
        else:
            free.append(qid)
    if not groups:
        return [((), free)] if free else []
    if free:
        used = names_run_at_once(cells or [])

        def cost(ban):
            hit = any(FORBIDDEN[key].attrs & used for key in expand(ban))
            return hit, sum(len(FORBIDDEN[key].aten) + len(FORBIDDEN[key].python) for key in ban if key in FORBIDDEN)

        host = min(groups, key=cost)
        groups[host] = [qid for qid in qids if qid in groups[host] or qid in free]
    return list(groups.items())


def names_run_at_once(cells: list[str]) -> set[str]:
    """The names (``x.attr``'s attr too) a notebook's code uses as its cells run: at top level
    and in class bodies, and in the bodies of the functions and classes defined there that such
    code mentions (followed through the notebook's own definitions). A guess for choosing a
    host group (:func:`ban_groups`), never for a verdict: a cell that does meet a ban still
    sends its group's free questions to a run without it."""
    bodies: dict[str, set[str]] = {}
    used: set[str] = set()
    for source in cells:
        tree = parsed_cell(source)          # the static scan of the same cells finds it parsed
        for node in tree.body if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bodies.setdefault(node.name, set()).update(_names(node))
                if isinstance(node, ast.ClassDef):
                    used |= _names(node, skip_functions=True)
            else:
                used |= _names(node)
    todo = list(used & set(bodies))
    while todo:
        for name in bodies.pop(todo.pop(), set()) - used:
            used.add(name)
            if name in bodies:
                todo.append(name)
    return used


def _names(node, skip_functions: bool = False) -> set[str]:
    found: set[str] = set()
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, ast.Name):
            found.add(item.id)
        elif isinstance(item, ast.Attribute):
            found.add(item.attr)
        todo += [child for child in ast.iter_child_nodes(item)
                 if not (skip_functions and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    return found


def _hindered(outcome: Outcome, qid: str, cells_hit: bool) -> bool:
    """Whether a question that forbids nothing, probed in a run with a ban, may have been
    graded on that ban: a cell of the run or its own probe met a forbidden function, or its
    answer was not there to probe."""
    if cells_hit:
        return True
    probe = outcome.probes.get(qid)
    if probe is None or "unavailable" in probe:
        return True
    data = probe.get("data") or {}
    return "ForbiddenCall" in repr(data.get("fatal", "")) + repr(data.get("cases", ""))


def _inputs_per_run(inputs):
    """``inputs`` as a function ``(run, qids) -> (blob, source)``: a function stays one; bytes
    (the same blob for every run) come with the source in force now (the public inputs unless a
    caller chose another), from which the judge then rebuilds them."""
    if callable(inputs):
        return inputs
    source = recipes.current()
    return lambda run, qids: (bytes(inputs), source)


def run_submission(host, raw: bytes, qids: list[str], limits, name: str, inputs=b"",
                   blank: tuple[int, ...] = ()) -> Outcome:
    """Run a notebook on ``host`` once per group of :func:`ban_groups` (again without a
    culprit cell if its process dies), all within one budget of ``limits.timeout``; then,
    without any ban, the questions that forbid nothing and were hindered by their group's.
    ``blank``: code cells (0-based, among code cells) sent empty: the instructor's own test cells
    (:func:`autograder.batch.submission.instructor_test_cells`).

    ``inputs(run, qids) -> (blob, source)`` gives each run (0, 1, ... in order, the re-run
    without ban included) the packed inputs of its questions ``qids`` and the source they were
    drawn from; a crashed run's attempts reuse its inputs."""
    raw = code_only(raw, name, blank=tuple(blank))    # the student's process sees its code, nothing else of the file
    outcome = Outcome()
    state = {"skip": [], "notes": [], "started": time.monotonic(), "forbidden_in_cells": False}
    # a training question brings its own time (Question.seconds) on top of the submission's budget
    extra = sum(float(question(qid).seconds) for qid in dict.fromkeys(qids))
    state["end"] = state["started"] + float(limits.timeout) + extra
    again: list[str] = []
    draw = _inputs_per_run(inputs)
    # (raw is code_only's: its cells are already the plain Python the scan read)
    for ban, group in ban_groups(list(qids), code_cells(raw, name, honor_mark=True)[0]):
        state["forbidden_in_cells"] = False
        _run_group(host, raw, group, list(ban), limits, name, draw, outcome, state)
        if outcome.status == "invalid":
            break
        if ban:
            again += [qid for qid in group if not question(qid).forbidden
                      and _hindered(outcome, qid, state["forbidden_in_cells"])]
    if again and outcome.status != "invalid":
        for qid in again:
            outcome.probes.pop(qid, None)
        _run_group(host, raw, again, [], limits, name, draw, outcome, state)
    outcome.reason = "; ".join(dict.fromkeys(state["notes"]))
    outcome.seconds = time.monotonic() - state["started"]
    return outcome


@dataclass
class _Attempt:
    """One run of the notebook within a group: the questions still to probe, the run's MAC key,
    the questions the host timed (their first result counts), the run's index and input source."""
    run: object
    todo: list
    key: bytes
    clocked: set
    run_index: int
    source: object


def _run_group(host, raw, qids, ban, limits, name, draw, outcome, state) -> None:
    skip = state["skip"]
    clocked = set(timed(qids))     # the host timed these (their first result counts: hosts/training.py)
    todo = list(qids)
    run_index = len(outcome.runs)      # not `index`: the loops below name cells that way
    inputs, source = draw(run_index, list(qids))
    outcome.runs.append({"qids": list(qids), "ban": list(ban), "source": source})
    for attempt in range(MAX_ATTEMPTS):
        left = state["end"] - time.monotonic()
        if left < MIN_ATTEMPT and (attempt or outcome.attempts):
            _note_no_time_left(todo, limits, outcome, state)
            break
        outcome.attempts += 1
        # a secret of this run: the probe's result frames carry its MAC, which only the audit hook in the
        # student's process can compute, and only for data no frame of the student's code is making
        key = secrets.token_bytes(32)
        options = dict(options_for(float(limits.timeout)), timeout=left, skip_cells=list(skip), ban=ban,
                       frame_key=key.hex())
        run = host.run(raw, todo, limits, name=name, options=options, inputs=inputs, timeout=left)
        done, last = _read_frames(_Attempt(run, todo, key, clocked, run_index, source), outcome, state)
        if outcome.status == "invalid" or (done and run.status == "ok"):
            break
        if not _skip_what_failed(run, limits, last, todo, outcome, state):
            break
        todo = [q for q in todo if q not in outcome.probes]
        if not todo:
            break


def _note_no_time_left(todo, limits, outcome, state) -> None:
    """The questions ``todo`` not checked: the submission's budget is spent."""
    state["notes"].append("no time left in the submission's budget to run the notebook again")
    for qid in todo:
        outcome.probes.setdefault(qid, {"unavailable": "not checked: the notebook used up its time "
                                                       f"limit of {limits.timeout:g} s"})


def _read_frames(attempt: _Attempt, outcome, state) -> tuple[bool, dict | None]:
    """What one run's frames say, recorded in ``outcome`` and ``state``; whether the run said it
    was done, and its last cell or probe frame (where a crash happened)."""
    todo = attempt.todo
    done, last = False, None
    for header, blob in wire.frames(attempt.run.data):
        kind = header.get("event")
        if kind == "invalid":
            outcome.status = "invalid"
            for qid in todo:
                outcome.probes[qid] = {"unavailable": f"the notebook could not be read: "
                                                      f"{header.get('reason', '')}"}
        elif kind in ("cell", "probe"):
            last = header
        elif kind == "cells":
            _record_cells(header, outcome, state)
        elif kind == "result" and header.get("qid") in todo:
            _record_result(header, blob, attempt, outcome)
        elif kind == "unavailable" and header.get("qid") in todo and not (
                header["qid"] in attempt.clocked and header["qid"] in outcome.probes):
            outcome.probes[header["qid"]] = {"unavailable": str(header.get("reason", ""))[:300]}
        elif kind == "done":
            done = True
    return done, last


def _record_cells(header: dict, outcome, state) -> None:
    """The "cells" frame: the cells' errors (the first run's), the cells that hit their time limit."""
    skip, notes = state["skip"], state["notes"]
    if any("ForbiddenCall" in str(e) for e in header.get("errors", [])):
        state["forbidden_in_cells"] = True
    if not outcome.cell_errors:
        errors = [str(e) for e in header.get("errors", [])]
        outcome.cell_errors = errors[:50]
        if errors:
            notes.append("errors while running the notebook: " + "; ".join(errors[:3]))
    timed = header.get("timed_out")
    count = header.get("count")
    # the student's process writes this frame: only indices of real cells, each once, at most
    # as many as the preflight lets a notebook have (a long list must not cost the grader time)
    cells = count if isinstance(count, int) and 0 <= count <= MAX_CELLS else MAX_CELLS
    for index in sorted({i for i in (timed if isinstance(timed, list) else [])[:MAX_CELLS]
                         if type(i) is int and 0 <= i < cells} - set(skip)):
        if index not in skip:
            skip.append(index)     # a cell that hit its time limit is not run again
            notes.append(f"cell {index + 1} did not finish within its time limit; "
                         f"later runs of the notebook skip it")


def _record_result(header: dict, blob: bytes, attempt: _Attempt, outcome) -> None:
    """A "result" frame of a question still to probe: kept only when signed with the run's key."""
    if header["qid"] in attempt.clocked and header["qid"] in outcome.probes:
        return
    if not signed_by_probe(header, blob, attempt.key):
        if "data" not in outcome.probes.get(header["qid"], {}):
            outcome.probes[header["qid"]] = {"unavailable": UNSIGNED}
        return
    try:
        data = wire.read_result(header, blob)
        if header["qid"] in attempt.clocked:
            stamp(data, header["qid"], attempt.run)
        outcome.probes[header["qid"]] = {"data": data, "run": attempt.run_index, "source": attempt.source}
    except Exception as error:  # noqa: BLE001 - whatever the student's process sent
        outcome.probes[header["qid"]] = {"unavailable": f"its outputs could not be read ({error})"}


def _skip_what_failed(run, limits, last, todo, outcome, state) -> bool:
    """After a run that did not finish: record why, and skip the cell that stopped it (or give up
    the question whose probe it was in). Whether to run the notebook again."""
    skip, notes = state["skip"], state["notes"]
    why = run.describe(limits) if run.status != "ok" else \
        "the notebook's process ended before its answers could be checked (os._exit?)"
    if run.output.strip() and run.status in ("exit", "signal", "error"):
        tail = run.output.strip().splitlines()[-1][:160]
        why += f" (last output: {tail})"
    outcome.failure = why
    outcome.status = "timeout" if run.status == "timeout" else "crashed"
    if last is None:
        return False                   # it died before the first cell: nothing to skip
    if last.get("event") == "probe":
        qid = last.get("qid")
        if qid in todo and qid not in outcome.probes:
            outcome.probes[qid] = {"unavailable": why}
    else:
        index = int(last.get("index", -1))
        if index in skip:
            return False
        skip.append(index)
        notes.append(f"cell {index + 1} stopped the notebook's process ({why}); "
                     f"the notebook was run again without it")
    return True
