"""Gradescope: the autograder zip of one assignment, and what runs inside Gradescope.

    python -m autograder.instructor.gradescope build --assignment 03_attention [--out ZIP]
    make gradescope ASSIGNMENT=03_attention          # dist/gradescope-03_attention.zip

The zip (Gradescope's "Autograder Specifications": ``setup.sh`` and ``run_autograder`` at
the root of the archive; Gradescope extracts it to ``/autograder/source`` and copies
``run_autograder`` to ``/autograder/run_autograder``) holds:

* ``setup.sh``: run once, as root, when Gradescope builds the image: installs Python,
  bubblewrap and, in a virtual environment ``/opt/vitref-venv``, the libraries the checks
  need (torch for the CPU, numpy, einops, tqdm). Not the course's packages: ``vitref`` and
  ``autograder`` stay in ``/autograder/source`` (made readable by root only when grading), so
  a student's code, which runs as another user, can import neither;
* ``run_autograder``: grades ``/autograder/submission/*.ipynb`` and writes
  ``/autograder/results/results.json``;
* ``config.json``: the assignment (one zip per assignment), the limits, the visibility;
* ``autograder/`` and ``vitref/``: the course's packages (the same checks as
  ``python -m autograder grade``).

What runs per submission (:func:`run`): the same as one task of ``python -m autograder
grade``: the notebook runs in the grading sandbox, a fresh process that sends back plain
arrays, and the grader judges them against ``vitref`` on inputs drawn for this run. The
sandbox is the strongest this container allows, tried in order and checked by running a
trivial notebook: bubblewrap, then the grader's own namespaces (both need user or mount
namespaces, which Docker's default seccomp profile and capabilities usually refuse), then
mode ``limits`` (what Gradescope's containers normally give): resource limits, a private
working directory, and, since Gradescope runs the autograder as root, **an unprivileged
uid** for the student's process. That uid cannot read ``/autograder/source`` (mode 0700:
no reference code, no grader), cannot write ``/autograder/results``, cannot signal the
grader. It does have the network, and can read world-readable system files. The mode
used is in the results' ``extra_data`` and in the autograder's stdout (instructors only).

``results.json`` (Gradescope's format): ``score``, ``execution_time`` (s), ``output`` (the
total, a table of the questions and the submission's notes), ``stdout_visibility`` (``hidden``:
the log is for instructors), ``visibility``, ``extra_data`` (assignment, status, sandbox mode,
instructor flags) and ``tests``: one per question with ``name``, ``number``, ``score``,
``max_score``, ``status``, ``output`` (the feedback message a student sees in the notebook's
check; for a training question, a table of what the grader measured) and ``visibility``. The
outputs are markdown (``output_format: "md"``, at the top and per test): paragraphs that wrap,
tables, lists; everything a student's code can put in a message (an exception's text) is escaped
(:func:`md_text`), so it shows as the characters it is, never as a link, an image or HTML. With a
training question (09_training), ``leaderboard`` ranks the held-out accuracy (higher first) and
the training seconds (lower first): the accuracy of the grader's own predictions and the seconds
its host measured (``Result.measures``), never a number the student's process reported; none for
a run past its time or held for review. A grader failure still writes a results.json (score 0,
the reason, as text).

The notebook graded is the only one submitted; among several, the one whose nbgrader grade ids
(or check cells) name the assignment (:mod:`autograder.hosts.identify`: Colab's "Copy of ..."
is found whatever it is called), preferring ``<assignment>.ipynb``.
A question held for review (a flag in the notebook, :func:`autograder.judging.scan.flags`)
scores 0, with the flags and the automatic score in its output, until the instructor
overrides it (Gradescope has no "needs review" state); ``extra_data.held`` has the
automatic scores.

The paths are configurable, for testing outside Gradescope: ``AUTOGRADER_ROOT`` (default
``/autograder``) for the whole tree, ``AUTOGRADER_PYTHON`` for the interpreter that
``run_autograder`` uses (default ``/opt/vitref-venv/bin/python``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
import sys
import time
import traceback
import zipfile
from pathlib import Path

import autograder
from autograder.batch.pool import preload_modules
from autograder.batch.submission import RunInputs, grade_task
from autograder.batch.tasks import Task
from autograder.hosts.identify import identify
from autograder.hosts.sandbox import Limits, Zygote
from autograder.hosts.sandbox import mode as sandbox_mode
from autograder.student.cells import SubmissionError

VENV = "/opt/vitref-venv"
DEFAULT_TIMEOUT = 120.0      # seconds for the one notebook (Gradescope machines are slow)
DEFAULT_MEMORY_MB = 2048
REQUIREMENTS = ["torch>=2.0", "numpy", "einops>=0.6", "tqdm>=4.60"]
MODES = ("bwrap", "namespaces", "limits")

SETUP_SH = f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip bubblewrap >/dev/null
python3 -m venv {VENV}
{VENV}/bin/python -m pip install -q --upgrade pip
# CPU-only torch (no CUDA libraries: a much smaller image)
{VENV}/bin/python -m pip install -q --extra-index-url https://download.pytorch.org/whl/cpu \\
    -r /autograder/source/requirements-gradescope.txt
chmod -R a+rX {VENV}
# the course's own packages are NOT installed: they stay in /autograder/source (root only)
{VENV}/bin/python -c "import torch, numpy, einops; print('torch', torch.__version__)"
"""

# For an assignment with a training question: the grader draws its images from Fashion-MNIST,
# fetched once here into root's cache (hidden from the student's sandbox like every dataset folder).
DATA_SETUP = f"""
PYTHONPATH=/autograder/source {VENV}/bin/python -c \\
    "from vitref.data import load_tensors; [load_tensors('fashion-mnist', t) for t in (True, False)]"
"""

RUN_AUTOGRADER = f"""#!/usr/bin/env bash
# Gradescope runs this for each submission. AUTOGRADER_ROOT / AUTOGRADER_PYTHON: to run it
# on a copy of the /autograder tree elsewhere (the tests do).
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PY="${{AUTOGRADER_PYTHON:-{VENV}/bin/python}}"
export PYTHONPATH="$ROOT/source"
cd "$ROOT" || exit 1
exec "$PY" -m autograder.instructor.gradescope run --root "$ROOT"
"""


# ------------------------------------------------------------------------- build

def _package_files(repo: Path, package: str) -> list[Path]:
    folder = repo / package
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def build(assignment: str, out: Path | None = None, repo: Path | None = None,
          timeout: float = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB,
          visibility: str = "visible") -> Path:
    """Write the Gradescope autograder zip of ``assignment``; returns its path."""
    repo = Path(repo) if repo else Path(__file__).resolve().parents[2]
    questions = autograder.questions(assignment)         # ValueError: unknown assignment
    if visibility not in ("visible", "hidden", "after_due_date", "after_published"):
        raise SystemExit(f"error: visibility must be visible, hidden, after_due_date or "
                         f"after_published, got {visibility!r}")
    out = Path(out) if out else repo / "dist" / f"gradescope-{assignment}.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {"assignment": assignment, "timeout": timeout, "memory_mb": memory_mb,
              "visibility": visibility, "questions": [q.id for q in questions],
              "points": sum(float(q.points) for q in questions)}
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")

    def add(zf: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))   # reproducible zip
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
        zf.writestr(info, data)

    with zipfile.ZipFile(tmp, "w") as zf:
        trains = any(q.seconds for q in questions)          # a training question: the data, torchvision
        add(zf, "setup.sh", (SETUP_SH + (DATA_SETUP if trains else "")).encode(), executable=True)
        add(zf, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        add(zf, "config.json", (json.dumps(config, indent=1) + "\n").encode())
        requirements = REQUIREMENTS + (["torchvision"] if trains else [])
        add(zf, "requirements-gradescope.txt", ("\n".join(requirements) + "\n").encode())
        for package in ("autograder", "vitref"):
            for path in _package_files(repo, package):
                add(zf, str(path.relative_to(repo)), path.read_bytes())
    os.replace(tmp, out)
    return out


# --------------------------------------------------------------------------- run

def _notebooks(submission: Path) -> list[Path]:
    return sorted(p for p in submission.rglob("*.ipynb")
                  if p.is_file() and ".ipynb_checkpoints" not in p.parts
                  and not any(part.startswith(("__MACOSX", ".")) for part in p.relative_to(submission).parts))


def _assignments_of(path: Path) -> tuple[str, ...]:
    """The assignments the notebook's own marks name (:mod:`autograder.hosts.identify`), () if none."""
    try:
        return identify(path).assignments
    except SubmissionError:
        return ()


def _find_notebook(submission: Path, assignment: str | None) -> tuple[Path | None, str]:
    """The notebook to grade: the only one; among several, one whose grade ids name ``assignment``
    (whatever it is called: Colab's "Copy of ..."), preferring ``<assignment>.ipynb``."""
    notebooks = _notebooks(submission)
    if not notebooks:
        return None, "no notebook (.ipynb) was submitted"
    if len(notebooks) == 1:
        return notebooks[0], ""
    if assignment:
        marked = [p for p in notebooks if assignment in _assignments_of(p)]
        named = [p for p in marked or notebooks if p.name == f"{assignment}.ipynb"]
        chosen = (named or marked or [None])[0]
        if chosen is not None:
            return chosen, f"several notebooks submitted; graded {chosen.name}"
    return notebooks[0], (f"several notebooks submitted and none is the notebook of {assignment}; "
                          f"graded {notebooks[0].name}")


def detect_assignment(submission: Path) -> str | None:
    """The assignment of a submission (when the zip names none): the one its notebooks' own
    marks name (nbgrader grade ids, else check cells), never a file name; None when no notebook
    names exactly one."""
    found = {a for path in _notebooks(submission) for a in _assignments_of(path)}
    return found.pop() if len(found) == 1 else None


def _lock_down(root: Path) -> None:
    """Only root may read the grader and the references; results are root's to write."""
    if os.geteuid() != 0:
        return
    for name, mode in (("source", 0o700), ("results", 0o755)):
        path = root / name
        if path.is_dir():
            os.chown(path, 0, 0)
            os.chmod(path, mode)


def pick_mode(hide: tuple[str, ...], log) -> str:
    """The strongest sandbox mode that really works here (a trivial notebook runs in it);
    RuntimeError when none does (the submission is then not graded, and says so: student
    code never runs unsandboxed)."""
    forced = os.environ.get("AUTOGRADER_SANDBOX")
    first = sandbox_mode()
    candidates = [first] if forced else [m for m in MODES[MODES.index(first):]]
    nb = json.dumps({"cells": [{"cell_type": "code", "source": "x = 1", "metadata": {},
                                "outputs": [], "execution_count": None}],
                     "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    for candidate in candidates:
        try:
            with Zygote(slot=0, hide=hide, sandbox_mode=candidate, memory_mb=None) as z:
                run = z.run(nb, [], Limits(timeout=30), name="probe.ipynb")
            if run.status == "ok":
                return candidate
            log(f"sandbox mode {candidate!r} does not work here: {run.status} {run.reason} {run.output[-300:]}")
        except Exception as error:  # noqa: BLE001 - try the next mode
            log(f"sandbox mode {candidate!r} does not work here: {type(error).__name__}: {error}")
    raise RuntimeError(f"no grading sandbox works in this container (tried {', '.join(candidates)}; "
                       f"see the autograder's log)")


def grade_one(root: Path, config: dict, log) -> dict:
    """Grade the submission under ROOT/submission; returns Gradescope's results dict."""
    import secrets

    submission = root / "submission"
    assignment = config.get("assignment") or detect_assignment(submission)
    if not assignment:
        raise ValueError("the autograder's config.json names no assignment and the submitted notebooks "
                         "do not name exactly one (their nbgrader grade ids or check cells)")
    qs = autograder.questions(assignment)
    notebook, note = _find_notebook(submission, assignment)
    limits = Limits(timeout=float(config.get("timeout", DEFAULT_TIMEOUT)),
                    memory_mb=int(config.get("memory_mb", DEFAULT_MEMORY_MB)))
    hide = (str(root / "source"), str(root / "results"), str(Path(autograder.__file__).parent.parent))
    sandbox_mode = pick_mode(hide, log)
    log(f"assignment {assignment}; notebook {notebook}; sandbox: {sandbox_mode}; "
        f"limits {limits.timeout:g} s, {limits.memory_mb} MB; grader {autograder.__file__}")
    task = Task("submission", assignment, str(submission), str(notebook) if notebook else None,
                "", [q.id for q in qs], note)
    inputs = RunInputs(secrets.token_bytes(32))      # each run of the notebook draws its own inputs from it
    zygote = Zygote(slot=0, preload=tuple(preload_modules(None, [assignment])), hide=hide,
                    sandbox_mode=sandbox_mode, memory_mb=None)
    try:
        zygote.start()
        result = grade_task(task, zygote, limits, inputs)
    finally:
        zygote.close()
    result["sandbox"] = sandbox_mode
    return result


# ---------------------------------------------------------------- results.json

#: What a leaderboard shows of a question's :attr:`autograder.judging.model.Result.measures` (numbers
#: the grader measured itself): (measure, column name, order, decimals).
LEADERBOARD = (("accuracy", "Held-out accuracy", "desc", 4), ("seconds", "Training seconds", "asc", 1))
MEASURE_ROWS = {"accuracy": ("held-out accuracy (the grader's prediction)", "{:.4f}"),
                "seconds": ("training time (the grader's clock)", "{:.1f} s")}

# ASCII punctuation markdown may read as syntax (CommonMark escapes any of it with a backslash)
_MD_SYNTAX = re.compile(r"([\\`*_{}\[\]()#+\-.!|~=:^\"'$])")
# what a markdown renderer with GFM's autolinks would turn into a link: shown as code instead
_LINK_LIKE = re.compile(r"(?i)\b(?:[a-z][a-z0-9+.-]*:/*|www\.)[^\s<>]+|[^\s<>@]+@[^\s<>@]+\.[a-z]{2,}")


def md_code(text) -> str:
    """``text`` as a markdown code span: shown literally, never a link, an image or HTML."""
    text = str(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text) -> str:
    """``text`` (a feedback message, which holds what a student's code raised) as markdown that
    shows it as it is: ``&``, ``<`` and ``>`` as entities (no HTML), the punctuation markdown reads
    backslash-escaped (no emphasis, link, image, heading, list, table), anything a renderer would
    auto-link as a code span, leading blanks kept as non-breaking spaces (no code block), every
    line break a hard break."""
    def escape(part: str) -> str:
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return _MD_SYNTAX.sub(r"\\\1", part)

    lines = []
    for line in str(text).split("\n"):
        body = line.lstrip(" \t")
        pieces, last = ["&nbsp;" * (len(line) - len(body))], 0
        for link in _LINK_LIKE.finditer(body):
            pieces += [escape(body[last:link.start()]), md_code(link.group())]
            last = link.end()
        lines.append("".join(pieces) + escape(body[last:]))
    return "  \n".join(lines)


def leaderboard(result: dict) -> list[dict]:
    """Gradescope's leaderboard entries ({"name", "value", "order"}) from the questions' measures:
    numbers the grader measured itself (:func:`autograder.judging.judge.judge`'s ``measures``);
    none for a question held for review."""
    measured = [q for q in result.get("questions", []) if q.get("measures") and not q.get("held")]
    entries = []
    for q in measured:
        prefix = f"{q['id']}: " if len(measured) > 1 else ""
        for key, name, order, digits in LEADERBOARD:
            value = q["measures"].get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                entries.append({"name": prefix + name, "value": round(float(value), digits), "order": order})
    return entries


def _test_output(q: dict) -> str:
    """A question's output in markdown: the checker's message, then what the grader measured."""
    text = md_text(q.get("feedback") or q.get("reason") or "")
    rows = [(MEASURE_ROWS[k][0], MEASURE_ROWS[k][1].format(v)) for k, v in (q.get("measures") or {}).items()
            if k in MEASURE_ROWS and isinstance(v, (int, float))]
    if rows:
        text += "\n\n| measured by the grader | |\n|---|---:|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    if not q.get("held"):
        return text
    # Gradescope has no "needs review": the score is held at 0 until the instructor overrides it;
    # the automatic score and the flags are in the output
    flagged = "\n".join(f"- {md_text(h.get('what') or h.get('flag'))} ({md_text(h.get('line'))}): "
                         f"{md_code(h.get('snippet'))}" for h in q["held"])
    return (f"**Held for review by your instructor** (automatic score {float(q['score']):g}/"
            f"{float(q['max_score']):g}, not counted until they look at it): the notebook has constructs with "
            f"no place in an answer:\n\n{flagged}\n\n{text}")


def _summary(result: dict, tests: list[dict]) -> str:
    """The submission's output in markdown: the total, a table of the questions, the notes."""
    score, total = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    lines = [f"**{md_text(result.get('assignment'))}: {score:g} / {total:g}**"]
    if tests:
        lines += ["", "| question | score | |", "|---|---:|---|"]
        lines += [f"| {md_text(t['name'])} | {t['score']:g} / {t['max_score']:g} | {t['status']} |" for t in tests]
    if result.get("reason"):
        lines += ["", f"Note: {md_text(result['reason'])}"]
    if any(q.get("held") for q in result.get("questions", [])):
        lines += ["", "Held for review: your instructor will look at this notebook before its score counts."]
    return "\n".join(lines)


def to_gradescope(result: dict, config: dict, seconds: float) -> dict:
    """Gradescope's results.json from a grading result: outputs in markdown (``output_format``
    "md": what the student's code raised is escaped, :func:`md_text`), a leaderboard of what the
    grader measured (:func:`leaderboard`), when there is one."""
    visibility = config.get("visibility", "visible")
    tests = []
    for i, q in enumerate(result.get("questions", []), 1):
        held = bool(q.get("held"))
        tests.append({"name": f"{q['id']}: {q.get('title', q['id'])}", "number": str(i),
                      "score": 0.0 if held else float(q["score"]), "max_score": float(q["max_score"]),
                      "status": "passed" if q.get("passed") and not held else "failed",
                      "output": _test_output(q), "output_format": "md", "visibility": visibility})
    data = {"score": sum(t["score"] for t in tests), "execution_time": int(round(seconds)),
            "output": _summary(result, tests), "output_format": "md",
            "visibility": visibility, "stdout_visibility": "hidden",
            "extra_data": {"assignment": result.get("assignment"), "status": result.get("status"),
                           "sandbox": result.get("sandbox"), "flags": result.get("flags", []),
                           "held": {q["id"]: float(q["score"]) for q in result.get("questions", [])
                                    if q.get("held")},
                           "notebook": result.get("notebook")},
            "tests": tests}
    board = leaderboard(result)
    if board:
        data["leaderboard"] = board
    return data


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(root: Path) -> int:
    started = time.monotonic()
    root = Path(root)
    results = root / "results" / "results.json"

    def log(message: str) -> None:
        print(message, flush=True)          # /autograder/results/stdout: instructors only

    config: dict = {}
    try:
        config_path = root / "source" / "config.json"
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        (root / "results").mkdir(parents=True, exist_ok=True)
        _lock_down(root)
        result = grade_one(root, config, log)
        data = to_gradescope(result, config, time.monotonic() - started)
        if result.get("flags"):
            log("instructor flags: " + "; ".join(map(str, result["flags"])))
        log(f"score {data['score']:g}: " + ", ".join(f"{t['name'].split(':')[0]} {t['score']:g}/{t['max_score']:g}"
                                                  for t in data["tests"]))
    except Exception as error:  # noqa: BLE001 - Gradescope must get a results.json whatever happens
        log(traceback.format_exc())
        data = {"score": 0.0, "execution_time": int(round(time.monotonic() - started)),
                "output": f"The autograder could not grade this submission ({type(error).__name__}: "
                          f"{error}). Please tell your instructor.",
                "visibility": config.get("visibility", "visible"), "stdout_visibility": "hidden",
                "tests": []}
    _write_json(results, data)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.instructor.gradescope",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the autograder zip of one assignment")
    b.add_argument("--assignment", required=True, help="e.g. 03_attention")
    b.add_argument("--out", help="default: dist/gradescope-<assignment>.zip")
    Limits.add_arguments(b, DEFAULT_TIMEOUT, DEFAULT_MEMORY_MB, per="notebook")
    b.add_argument("--visibility", default="visible",
                   help="visible (default), hidden, after_due_date or after_published")
    r = sub.add_parser("run", help="grade ROOT/submission into ROOT/results/results.json (in Gradescope)")
    r.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            path = build(args.assignment, Path(args.out) if args.out else None,
                         timeout=args.timeout, memory_mb=args.memory, visibility=args.visibility)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
        print(f"wrote {path} ({len(names)} files, {path.stat().st_size >> 10} KiB): upload it in "
              f"Gradescope's \"Configure Autograder\" page (Ubuntu base image, at least 2 GB of memory)")
        return 0
    return run(Path(args.root))


if __name__ == "__main__":
    sys.exit(main())
