"""Grade a whole class: ``python -m autograder grade ROOT``.

    python -m autograder grade ROOT [--jobs N] [--timeout S] [--memory MB] [--force]
                                    [--db-url URL] [--shard I/N] [--course-id ID]
    python -m autograder export ROOT [--db-url URL]     (autograder.batch.export)
    python -m autograder report ROOT                    (autograder.batch.report)

Grades every ``ROOT/submitted/<student>/<assignment>/*.ipynb`` on the questions of that
assignment (:func:`autograder.questions`), never on the notebook's own test cells: a
deleted or edited test cell changes nothing. Each submission runs in the grading sandbox
(:mod:`autograder.hosts.sandbox`: its own process, no network, no view of the course, the
gradebook or other students, time and memory limits); what comes back are plain arrays,
which the grader judges against ``vitref`` in its own processes.

Results:

* ``ROOT/grades.csv`` (``grades-I-of-N.csv`` for ``--shard I/N``):
  ``student,assignment,question,score,max_score,reason``, one row per question and
  submission, whatever happened (a notebook that is not JSON, an answer that raises, hangs,
  exits or exhausts memory: zero and the reason);
* nbgrader's gradebook, ``ROOT/gradebook.db`` or ``--db-url`` (e.g. one PostgreSQL database
  for N shards), written with nbgrader's own API (:mod:`autograder.batch.gradebook`: locked
  and retried for concurrent writers), so formgrader, ``nbgrader export`` and
  ``nbgrader generate_feedback`` work on it;
* ``ROOT/autograded/<student>/<assignment>/<notebook>.ipynb`` and ``timestamp.txt``
  (:mod:`autograder.batch.formgrader`): what formgrader and ``generate_feedback`` read;
* ``ROOT/autograder-feedback/<student>/<assignment>/feedback.html`` (and ``.md``): the
  grader's own page (``ROOT/feedback/`` is nbgrader's);
* ``ROOT/report.html`` (:mod:`autograder.batch.report`): the class report;
* ``ROOT/.autograder/results/<student>/<assignment>.json``: one file per graded
  submission, written atomically as soon as it is graded. A second run skips submissions
  whose notebook (and the autograder) did not change, so an interrupted batch (or a killed
  shard) resumes where it stopped; ``--force`` grades everything again.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import multiprocessing
import os
import re
import secrets
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait as wait_any
from pathlib import Path

DEFAULT_TIMEOUT = 30.0
DEFAULT_MEMORY_MB = 2048
STATE = Path(".autograder") / "results"
CSV_COLUMNS = ["student", "assignment", "question", "score", "max_score", "reason"]
REASON_CHARS = 300
MAX_NOTEBOOK_MB = 50        # a submitted notebook larger than this is not run
JUDGE_MEMORY_MB = 4096      # memory a grading job may allocate beyond its imports


# ------------------------------------------------------------------------ tasks

@dataclass
class Task:
    student: str
    assignment: str
    folder: str
    notebook: str | None          # the notebook that is graded (None: nothing to grade)
    digest: str                   # content hash of the notebook + grader version
    qids: list[str]
    note: str = ""                # e.g. "several notebooks; graded x.ipynb"


def _hash_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.parent.name + "/" + path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


# what decides a grade: a change in these folders (or in vitref's graded modules) regrades
# everything on the next run; the batch machinery itself (this folder) and instructor tools do not
VERSIONED_FOLDERS = ("questions", "student", "judging", "hosts")


def graded_vitref_files() -> list[Path]:
    """The vitref modules the references are built from (``vitref.graded_modules()``: not its
    training, data or plotting code, so a training change regrades nothing)."""
    try:
        import vitref
    except ImportError:
        return []
    return [Path(p) for p in vitref.graded_modules() if Path(p).is_file()]


def grader_version() -> str:
    """A hash of the code that decides a grade: questions, student side, judges, hosts and
    vitref's graded modules. ``AUTOGRADER_GRADER_VERSION`` pins it (e.g. to keep grades
    after a cosmetic change)."""
    pinned = os.environ.get("AUTOGRADER_GRADER_VERSION")
    if pinned:
        return pinned
    package = Path(__file__).resolve().parent.parent
    files = [p for folder in VERSIONED_FOLDERS for p in (package / folder).rglob("*.py")]
    return _hash_files(files + graded_vitref_files())[:16]


def _questions_by_assignment() -> dict[str, list]:
    import autograder
    out: dict[str, list] = {}
    for q in autograder.questions():
        out.setdefault(q.chapter, []).append(q)
    return out


def _pick_notebook(folder: Path, assignment: str, source_names: list[str]) -> tuple[Path | None, str]:
    notebooks = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    if not notebooks:
        return None, f"no notebook (.ipynb) in submitted/{folder.parent.name}/{folder.name}/"
    by_name = {p.name: p for p in notebooks}
    for name in [f"{assignment}.ipynb"] + [f"{n}.ipynb" for n in source_names]:
        if name in by_name:
            note = "" if len(notebooks) == 1 else f"several notebooks submitted; graded {name}"
            return by_name[name], note
    if len(notebooks) == 1:
        return notebooks[0], ""
    return notebooks[0], (f"several notebooks submitted and none named {assignment}.ipynb; "
                          f"graded {notebooks[0].name}")


def discover(root: Path, questions: dict[str, list], sources: dict, version: str) -> list[Task]:
    """One task per ROOT/submitted/<student>/<assignment>/ folder."""
    submitted = root / "submitted"
    if not submitted.is_dir():
        raise SystemExit(f"{submitted} does not exist: expected submitted/<student>/<assignment>/*.ipynb "
                         f"under the grading root {root}")
    tasks = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            assignment = folder.name
            qids = [q.id for q in questions.get(assignment, [])]
            src = sources.get(assignment)
            notebook, note = _pick_notebook(folder, assignment, [src.notebook] if src else [])
            h = hashlib.sha256(version.encode())
            h.update(",".join(qids).encode())
            if notebook is not None:
                h.update(notebook.read_bytes())
            tasks.append(Task(student_dir.name, assignment, str(folder),
                              str(notebook) if notebook else None, h.hexdigest()[:32], qids, note))
    return tasks


# -------------------------------------------------------------- source notebooks

_GRADE_CALL = re.compile(r"""\b(?:grade|check)\s*\(\s*(?:qid\s*=\s*)?["']([A-Za-z0-9_]+)["']""")


@dataclass
class GradeCell:
    name: str
    points: float
    qids: list[str]
    cell_type: str = "code"


@dataclass
class Source:
    assignment: str
    notebook: str                                  # gradebook notebook name (file stem)
    grade_cells: list[GradeCell] = field(default_factory=list)
    solution_cells: list[str] = field(default_factory=list)
    source_cells: list[dict] = field(default_factory=list)
    synthetic: bool = False                        # no source notebook: one cell per question


def find_source_dir(root: Path, explicit: str | None) -> Path | None:
    """--source, else ROOT/source (nbgrader's layout), else the course's solutions/."""
    if explicit:
        return Path(explicit).resolve()
    if (root / "source").is_dir():
        return root / "source"
    candidates = [Path.cwd(), Path(__file__).resolve().parent.parent]
    for start in candidates:
        for folder in (start, *start.parents):
            if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
                return folder / "solutions"
    return None


def load_sources(source_dir: Path | None, questions: dict[str, list]) -> dict[str, Source]:
    """The gradebook structure of every assignment: from its source notebook's nbgrader
    metadata when there is one, else one synthetic grade cell per question."""
    out = {}
    for assignment, qs in questions.items():
        path = None
        if source_dir is not None and (source_dir / assignment).is_dir():
            found = sorted((source_dir / assignment).glob("*.ipynb"))
            preferred = source_dir / assignment / f"{assignment}.ipynb"
            path = preferred if preferred in found else (found[0] if found else None)
        if path is None:
            out[assignment] = Source(assignment, assignment, [
                GradeCell(f"{q.id}_test", float(q.points), [q.id]) for q in qs], synthetic=True)
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        src = Source(assignment, path.stem)
        for cell in nb.get("cells", []):
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            name = meta.get("grade_id")
            if not name:
                continue
            text = cell.get("source", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            kind = cell.get("cell_type", "code")
            if meta.get("grade"):
                qids = [qid for qid in _GRADE_CALL.findall(text) if qid in {q.id for q in qs}]
                src.grade_cells.append(GradeCell(name, float(meta.get("points", 0)),
                                                 list(dict.fromkeys(qids)), kind))
            if meta.get("solution"):
                src.solution_cells.append(name)
            if meta.get("locked") or meta.get("grade") or meta.get("solution"):
                src.source_cells.append({"name": name, "cell_type": kind,
                                         "locked": bool(meta.get("locked")), "source": text})
        out[assignment] = src
    return out


# ---------------------------------------------------------------------- grading

def _zero(q, reason: str) -> dict:
    return {"id": q.id, "title": q.title, "passed": False, "score": 0.0,
            "max_score": float(q.points), "feedback": reason, "reason": reason, "mistake": None}


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


class RunInputs:
    """The secret inputs of a grading job: each run of each submission draws its own
    (:func:`autograder.judging.secret.run_salt`, keyed by a secret of this job), with the
    arrays of that run's questions only; ``key=None``: the public inputs everywhere
    (``--public-inputs``)."""

    def __init__(self, key: bytes | None):
        if key is not None and len(key) < 16:
            raise ValueError("the secret key of a grading job must have at least 16 bytes")
        self.key = key

    def for_submission(self, student: str, assignment: str):
        """``(run, qids) -> (blob, source)`` for :func:`autograder.hosts.driver.run_submission`."""
        from autograder.judging.secret import SaltedSource, run_inputs, run_salt
        from autograder.questions.inputs import PublicSource

        def draw(run: int, qids) -> tuple[bytes, object]:
            source = PublicSource() if self.key is None else \
                SaltedSource(run_salt(self.key, student, assignment, run, qids))
            return run_inputs(qids, source), source

        return draw


def grade_task(task: Task, zygote, limits, inputs: RunInputs | None = None) -> dict:
    """Grade one submission (in a worker process): sandboxed run, then judge every question.
    ``inputs``: the job's secret inputs (None: the public ones); each run of the notebook gets
    its own, and each question is judged on those of the run that probed it."""
    import autograder
    from autograder.hosts.driver import run_submission
    from autograder.judging import preflight
    from autograder.judging.judge import judge_outcome
    from autograder.judging.scan import flags as scan_flags
    from autograder.judging.scan import held_reason
    from autograder.student.cells import code_cells

    start = time.monotonic()
    qs = [autograder.question(qid) for qid in task.qids]
    result = {"student": task.student, "assignment": task.assignment, "digest": task.digest,
              "notebook": os.path.basename(task.notebook) if task.notebook else None,
              "reason": task.note, "status": "ok", "questions": []}

    def finish(rows, reason=""):
        if reason:
            result["reason"] = "; ".join(r for r in (task.note, reason) if r)
        result["questions"] = rows
        result["score"] = sum(r["score"] for r in rows)
        result["max_score"] = sum(r["max_score"] for r in rows)
        result["seconds"] = round(time.monotonic() - start, 3)
        return result

    if not qs:
        result["status"] = "unknown-assignment"
        return finish([], f"no questions are defined for assignment {task.assignment!r}")
    if task.notebook is None:
        result["status"] = "missing"
        return finish([_zero(q, task.note) for q in qs], task.note)
    size = os.path.getsize(task.notebook)
    if size > MAX_NOTEBOOK_MB << 20:
        result["status"] = "invalid"
        reason = f"the notebook is {size >> 20} MB, more than the {MAX_NOTEBOOK_MB} MB accepted"
        return finish([_zero(q, reason) for q in qs], reason)
    raw = Path(task.notebook).read_bytes()
    too_big = preflight.problem(raw)
    if too_big:
        result["status"] = "invalid"
        return finish([_zero(q, too_big) for q in qs], too_big)
    cells, problem = code_cells(raw)
    if problem:
        result["status"] = "invalid"
        reason = f"the notebook could not be read: {problem}; nothing could be graded"
        return finish([_zero(q, reason) for q in qs], reason)

    if inputs is None:
        inputs = RunInputs(None)
    outcome = run_submission(zygote, raw, task.qids, limits, name=os.path.basename(task.notebook),
                             inputs=inputs.for_submission(task.student, task.assignment))
    result["status"] = outcome.status
    result["run_seconds"] = round(outcome.seconds, 3)
    try:
        flags = scan_flags(cells)
    except Exception:  # noqa: BLE001 - a scan that fails holds nothing; the scores are still computed
        flags = []
    result["flags"] = [f.text() for f in flags]
    rows = []
    for q in qs:
        verdict = judge_outcome(q, outcome, cells, flags=flags)
        row = verdict.to_dict()
        row.pop("flags", None)
        row["title"] = q.title
        # a flag holds the score for review: the automatic score stays, the reason says why
        row["reason"] = "; ".join(r for r in (held_reason(verdict.held),
                                              "" if verdict.passed else _short(verdict.feedback)) if r)
        rows.append(row)
    return finish(rows, outcome.reason)


def _error_result(task: Task, reason: str) -> dict:
    import autograder
    rows = [_zero(autograder.question(qid), reason) for qid in task.qids]
    return {"student": task.student, "assignment": task.assignment, "digest": task.digest,
            "notebook": os.path.basename(task.notebook) if task.notebook else None,
            "reason": reason, "status": "error", "questions": rows,
            "score": 0.0, "max_score": sum(r["max_score"] for r in rows), "seconds": 0.0}


# ---------------------------------------------------------------------- workers

def _worker(slot: int, conn, options: dict) -> None:
    """A grading job: owns one sandbox zygote, grades the tasks it is sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the coordinator handles Ctrl-C
    from autograder.hosts.sandbox import Limits, Zygote
    limits = Limits(**options["limits"])
    zygote = Zygote(slot=slot, preload=tuple(options["preload"]), hide=tuple(options["hide"]),
                    memory_mb=limits.memory_mb)
    _stop_with(zygote)
    try:
        zygote.launch()                # the sandbox boots while this job imports the judges
        import autograder.judging.judge  # noqa: F401
        import vitref  # noqa: F401
        zygote.wait_ready()
    except Exception:  # noqa: BLE001 - run() restarts it on the first task and reports there
        zygote.close_process()
    _cap_memory(JUDGE_MEMORY_MB)
    # this job's secret: every run of every submission draws its inputs from a salt derived from it
    inputs = RunInputs(None if options.get("public_inputs") else secrets.token_bytes(32))
    try:
        conn.send(("ready", slot, None))
        while True:
            try:
                item = conn.recv()
            except EOFError:
                break
            if item is None:
                break
            task = Task(**item)
            try:
                result = grade_task(task, zygote, limits, inputs)
            except Exception as error:  # noqa: BLE001
                import traceback
                traceback.print_exc()
                result = _error_result(task, f"the grader failed on this submission "
                                             f"({type(error).__name__}: {_short(error)}); "
                                             f"please report this")
            write_pages(options, task, result)
            conn.send(("done", slot, result))
    finally:
        zygote.close()


def _stop_with(zygote) -> None:
    """SIGTERM (the coordinator stopping, or an instructor's kill) ends a grading job at once
    and takes its sandbox with it: the zygote's process group is killed (a student process
    in its pid namespace dies with it) and its cgroup removed."""
    def stop(signum, frame):
        try:
            zygote.close()
        finally:
            os._exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)


def write_pages(options: dict, task: Task, result: dict) -> None:
    """The per-submission files (``timestamp``, the feedback pages, the autograded
    notebook), written by the job that graded the submission, not by the coordinator: a
    notebook that is costly to copy delays only its own job. ``result["pages"]`` says they
    were written (the coordinator writes them for results it makes itself)."""
    from autograder.batch import feedback, formgrader
    root = options.get("root")
    if root is None:
        return
    root = Path(root)
    try:
        result["timestamp"] = formgrader.submission_timestamp(task)
        feedback.write(root, result)
        formgrader.write_autograded(root, task, (options.get("sources") or {}).get(task.assignment), result)
    except Exception as error:  # noqa: BLE001 - the grade is saved; the copy is a convenience
        print(f"warning: could not write the feedback or autograded notebook of "
              f"{task.student}/{task.assignment}: {error}", file=sys.stderr)
    result["pages"] = True


def _cap_memory(mb: int) -> None:
    """Soft data limit for a grading job: judging forged or huge outputs fails with
    MemoryError (a zero for that answer) instead of exhausting the machine."""
    import resource
    try:
        with open("/proc/self/status") as fh:
            data = next(int(line.split()[1]) << 10 for line in fh if line.startswith("VmData"))
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        limit = data + (mb << 20)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (OSError, ValueError, StopIteration):
        pass


class Pool:
    """Worker processes, each with its own sandbox; tasks go to whichever job is free."""

    def __init__(self, jobs: int, options: dict):
        self.ctx = multiprocessing.get_context("fork")
        self.options = options
        self.workers: dict[int, tuple] = {}
        for slot in range(jobs):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(slot, child, self.options), daemon=True)
        proc.start()
        child.close()
        self.workers[slot] = (proc, parent)

    def run(self, tasks: list[Task], on_result) -> None:
        todo = list(reversed(tasks))
        busy: dict[int, Task] = {}
        ready: set[int] = set()
        while todo or busy:
            for slot in sorted(ready):
                if not todo:
                    break
                task = todo.pop()
                self.workers[slot][1].send(asdict(task))
                busy[slot] = task
                ready.discard(slot)
            waitables = {}
            for slot, (proc, conn) in self.workers.items():
                waitables[conn] = slot
                waitables[proc.sentinel] = slot
            for obj in wait_any(list(waitables)):
                slot = waitables[obj]
                proc, conn = self.workers[slot]
                if obj is conn:
                    try:
                        kind, _, result = conn.recv()
                    except (EOFError, OSError):
                        continue
                    if kind == "ready":
                        ready.add(slot)
                    else:
                        busy.pop(slot, None)
                        ready.add(slot)
                        on_result(result)
                elif not proc.is_alive():
                    # the job died (not the student: the grader itself); its task is an error
                    task = busy.pop(slot, None)
                    ready.discard(slot)
                    conn.close()
                    if task is not None:
                        on_result(_error_result(task, f"the grading job died (exit code "
                                                      f"{proc.exitcode}) on this submission"))
                    self._spawn(slot)

    def close(self, now: bool = False) -> None:
        """Stop the jobs: after their current task, or (now=True, on Ctrl-C) at once; a
        job's sandbox dies with it (bubblewrap's --die-with-parent)."""
        for proc, conn in self.workers.values():
            if now:
                proc.terminate()
                continue
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for proc, conn in self.workers.values():
            proc.join(timeout=5 if now else 60)
            if proc.is_alive():
                proc.kill()
                proc.join()


# ------------------------------------------------------------------ persistence

def _state_path(root: Path, student: str, assignment: str) -> Path:
    return root / STATE / student / f"{assignment}.json"


def save_state(root: Path, result: dict) -> None:
    path = _state_path(root, result["student"], result["assignment"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_state(root: Path, task: Task, any_version: bool = False) -> dict | None:
    """The saved result of a submission if it is still valid (same notebook and grader)."""
    path = _state_path(root, task.student, task.assignment)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        return None
    return data if any_version or data.get("digest") == task.digest else None


def write_csv(root: Path, results: list[dict], name: str = "grades.csv") -> Path:
    path = root / name
    tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for r in sorted(results, key=lambda r: (r["student"], r["assignment"])):
            if not r["questions"]:
                writer.writerow([r["student"], r["assignment"], "", 0, 0, _short(r.get("reason", ""))])
            for q in r["questions"]:
                writer.writerow([r["student"], r["assignment"], q["id"], f"{q['score']:g}",
                                 f"{q['max_score']:g}", _short(q.get("reason", ""))])
    os.replace(tmp, path)
    return path


def course_id(root: Path, source_dir: Path | None) -> str:
    """course_id of ROOT/nbgrader_config.py, else of the course's, else nbgrader's default."""
    for folder in (root, source_dir.parent if source_dir else None):
        if folder is None or not (folder / "nbgrader_config.py").is_file():
            continue
        text = (folder / "nbgrader_config.py").read_text(encoding="utf-8", errors="replace")
        m = re.search(r"course_id\s*=\s*[\"']([^\"']+)[\"']", text)
        if m:
            return m.group(1)
    return "default_course"


def write_gradebook(root: Path, cid: str, sources: dict[str, Source], results: list[dict],
                   db_url: str | None = None) -> str:
    """Record every result in nbgrader's gradebook (ROOT/gradebook.db unless ``db_url``)
    with nbgrader's API (see :mod:`autograder.batch.gradebook`); returns the URL written."""
    from autograder.batch import gradebook
    url = db_url or gradebook.default_url(root)
    gradebook.write(url, cid, sources, results)
    return url


# ---------------------------------------------------------------------- command

def _preload(sources_dir: Path | None, assignments: list[str]) -> list[str]:
    """Modules the zygote imports once: the numerical stack and whatever the source
    notebooks import at top level (except the course's own packages)."""
    import ast
    from autograder.hosts.sandbox import EXTRA_PRELOAD
    mods = list(dict.fromkeys([*EXTRA_PRELOAD, "torch.nn", "torch.nn.functional", "einops.layers.torch"]))
    if sources_dir is None:
        return mods
    for assignment in assignments:
        for path in sorted((sources_dir / assignment).glob("*.ipynb")) if (sources_dir / assignment).is_dir() else []:
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for cell in nb.get("cells", []):
                if cell.get("cell_type") != "code":
                    continue
                src = "".join(cell.get("source", ""))
                try:
                    tree = ast.parse(src)
                except SyntaxError:
                    continue
                for node in tree.body:
                    names = []
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                        names = [node.module]
                    for name in names:
                        if name.split(".")[0] in ("vitref", "autograder", "google"):
                            continue
                        if name not in mods:
                            mods.append(name)
    return mods


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="grading root: holds submitted/<student>/<assignment>/*.ipynb")
    parser.add_argument("--jobs", type=int, default=0,
                        help="parallel jobs (default: all cores)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"wall-clock seconds per submission (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MB,
                        help=f"memory per submission in MB (default {DEFAULT_MEMORY_MB})")
    parser.add_argument("--force", action="store_true",
                        help="grade again submissions already graded and unchanged")
    parser.add_argument("--source", help="folder with the source notebooks <assignment>/*.ipynb "
                        "(default: ROOT/source, else the course's solutions/)")
    parser.add_argument("--assignment", action="append", default=[],
                        help="grade only this assignment (repeatable)")
    parser.add_argument("--student", action="append", default=[],
                        help="grade only this student (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--public-inputs", action="store_true",
                        help="probe with the checks' public inputs (as check() does) instead of "
                             "inputs drawn for this run")
    parser.add_argument("--db-url", default=None,
                        help="nbgrader gradebook to write (any nbgrader db_url, e.g. "
                             "postgresql://user@host/course; default: sqlite:///ROOT/gradebook.db)")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="grade only the I-th of N deterministic slices of the submissions "
                             "(1 <= I <= N; by a hash of student/assignment), for N machines "
                             "grading one class into one --db-url; writes grades-I-of-N.csv")
    parser.add_argument("--course-id", default=None,
                        help="nbgrader course_id (default: from nbgrader_config.py)")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` -> (I, N), 1 <= I <= N; None for no sharding."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SystemExit(f"error: --shard expects I/N with 1 <= I <= N (e.g. 2/4), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def shard_of(student: str, assignment: str, count: int) -> int:
    """The shard (1..count) of a submission: a stable hash of student and assignment, the
    same on every machine and Python (not ``hash()``, which is salted per process)."""
    digest = hashlib.sha256(f"{student}\0{assignment}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def csv_name(shard: tuple[int, int] | None) -> str:
    return "grades.csv" if shard is None else f"grades-{shard[0]}-of-{shard[1]}.csv"


def run(args: argparse.Namespace) -> int:
    from autograder.batch import feedback, formgrader, gradebook, report
    from autograder.hosts.sandbox import Limits, mode

    started = time.monotonic()
    root = Path(args.root).resolve()
    shard = parse_shard(getattr(args, "shard", None))
    db_url = getattr(args, "db_url", None) or gradebook.default_url(root)
    gradebook.require_nbgrader(db_url)        # before any grading: fail fast, say what to install
    questions = _questions_by_assignment()
    source_dir = find_source_dir(root, args.source)
    sources = load_sources(source_dir, questions)
    version = grader_version()
    tasks = discover(root, questions, sources, version)
    if shard is not None:
        tasks = [t for t in tasks if shard_of(t.student, t.assignment, shard[1]) == shard[0]]
    cid = getattr(args, "course_id", None) or course_id(root, source_dir)

    def selected(t: Task) -> bool:
        return ((not args.assignment or t.assignment in args.assignment)
                and (not args.student or t.student in args.student))

    results: dict[tuple, dict] = {}
    todo = []
    for task in tasks:
        if not selected(task):
            # not to be graded now: its last grade (if any) stays in the CSV and gradebook
            old = load_state(root, task, any_version=True)
        else:
            old = None if args.force else load_state(root, task)
        if old is not None:
            results[(task.student, task.assignment)] = old
        elif selected(task):
            todo.append(task)
    tasks_shown = [t for t in tasks if selected(t)]
    jobs = args.jobs or _cores()
    jobs = max(1, min(jobs, len(todo) or 1))
    limits = Limits(timeout=args.timeout, memory_mb=args.memory)
    sandbox_mode = mode()
    course_root = source_dir.parent if source_dir else None
    hide = [str(root)] + ([str(course_root)] if course_root else []) + \
        ([str(source_dir)] if source_dir else [])
    options = {"limits": asdict(limits), "preload": _preload(source_dir, sorted(questions)),
               "hide": hide, "public_inputs": bool(args.public_inputs),
               "root": str(root), "sources": sources}
    where = f" (shard {shard[0]} of {shard[1]})" if shard else ""
    print(f"grading {len(todo)} submission(s) of {len({t.student for t in tasks_shown})} student(s){where} "
          f"({len(tasks_shown) - len(todo)} unchanged, skipped) with {jobs} job(s); "
          f"sandbox: {sandbox_mode}; limits: {limits.timeout:g} s, {limits.memory_mb} MB",
          flush=True)
    if sandbox_mode != "bwrap":
        print("warning: bubblewrap is not usable here; the sandbox is weaker "
              f"(mode {sandbox_mode!r}, see the README's Grading section)", file=sys.stderr)

    bar = None
    if todo and not args.no_progress:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), unit="nb", dynamic_ncols=True, file=sys.stderr)

    by_key = {(t.student, t.assignment): t for t in tasks}

    def on_result(result: dict) -> None:
        task = by_key.get((result["student"], result["assignment"]))
        if not result.pop("pages", False) and task is not None:
            write_pages(options, task, result)        # a result the coordinator made (a job died)
            result.pop("pages", None)
        results[(result["student"], result["assignment"])] = result
        save_state(root, result)
        if bar is not None:
            bar.set_postfix_str(f"{result['student']}/{result['assignment']} "
                                f"{result.get('score', 0):g}/{result.get('max_score', 0):g}")
            bar.update(1)

    interrupted = False
    if todo:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        pool = Pool(jobs, options)
        try:
            pool.run(todo, on_result)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            pool.close(now=interrupted)
            signal.signal(signal.SIGTERM, previous)
            if bar is not None:
                bar.close()
    final = [results[(t.student, t.assignment)] for t in tasks if (t.student, t.assignment) in results]
    for r in [] if interrupted else final:   # results saved before autograded notebooks existed
        task = by_key.get((r["student"], r["assignment"]))
        src = sources.get(r["assignment"])
        if task is not None and src is not None and \
                not (root / "autograded" / r["student"] / r["assignment"] / f"{src.notebook}.ipynb").exists():
            try:
                formgrader.write_autograded(root, task, src, r)
            except Exception:  # noqa: BLE001
                pass
    csv_path = write_csv(root, final, csv_name(shard))
    if interrupted:      # stop within seconds: the next run writes the report and the gradebook
        print(f"interrupted: wrote {csv_path} ({len(final)} submission(s) graded so far); run the same "
              f"command again to grade the rest and write the report and the gradebook", file=sys.stderr)
        return 130
    report_path = report.write(root / ("report.html" if shard is None else
                                       f"report-{shard[0]}-of-{shard[1]}.html"), final,
                               source_dir=source_dir)
    write_gradebook(root, cid, sources, final, db_url)
    graded_now = len([t for t in todo if (t.student, t.assignment) in results])
    elapsed = time.monotonic() - started
    print(summary(final, graded_now, len(tasks_shown) - len(todo), elapsed))
    print(f"wrote {csv_path}, {report_path}, the gradebook {gradebook.redact(db_url)}, "
          f"{root / 'autograded'}/ and {root / feedback.FOLDER}/")
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def summary(results: list[dict], graded: int, skipped: int, elapsed: float) -> str:
    lines = [f"graded {graded} submission(s) in {elapsed:.1f} s"
             + (f" ({60 * graded / elapsed:.1f} notebooks/min)" if graded and elapsed > 0 else "")
             + (f"; {skipped} unchanged, not regraded" if skipped else "")]
    by_assignment: dict[str, list] = {}
    for r in results:
        by_assignment.setdefault(r["assignment"], []).append(r)
    width = max([len(a) for a in by_assignment] + [10])
    lines.append(f"{'assignment':<{width}}  students  mean score  full marks  not graded normally")
    for assignment in sorted(by_assignment):
        rs = by_assignment[assignment]
        max_score = max((r.get("max_score", 0) for r in rs), default=0)
        mean = sum(r.get("score", 0) for r in rs) / len(rs)
        full = sum(1 for r in rs if r.get("max_score") and r.get("score") == r.get("max_score"))
        odd = sum(1 for r in rs if r.get("status") not in ("ok",))
        lines.append(f"{assignment:<{width}}  {len(rs):>8}  {mean:>5.2f}/{max_score:<4g}  {full:>10}  {odd:>19}")
    problems = [r for r in results if r.get("status") not in ("ok",)]
    for r in problems[:20]:
        lines.append(f"  {r['student']}/{r['assignment']}: {r.get('status')}: {_short(r.get('reason', ''))}")
    if len(problems) > 20:
        lines.append(f"  ... and {len(problems) - 20} more (see grades.csv)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
