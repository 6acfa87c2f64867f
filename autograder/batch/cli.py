"""Grade a whole class: ``python -m autograder grade ROOT``.

    python -m autograder grade ROOT [--jobs N] [--timeout S] [--memory MB] [--force]
                                    [--db-url URL] [--shard I/N] [--course-id ID]
                                    [--similarity-threshold T | --no-similarity]
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
* ``ROOT/report.html`` (:mod:`autograder.batch.report`): the class report, with its "Similar
  submissions" section, and ``ROOT/similarity.csv`` (:mod:`autograder.batch.similarity_report`:
  pairs of one assignment whose answers are alike once names, comments and formatting are set
  aside; ``--similarity-threshold``, ``--no-similarity``; not for a shard: ``report`` does it
  for the whole class);
* ``ROOT/.autograder/results/<student>/<assignment>.json``: one file per graded
  submission, written atomically as soon as it is graded. A second run skips submissions
  whose notebook (and the autograder) did not change, so an interrupted batch (or a killed
  shard) resumes where it stopped; ``--force`` grades everything again.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from autograder.batch import feedback, gradebook, report, similarity_report
from autograder.batch.outputs import csv_name, write_csv, write_missing_autograded, write_pages
from autograder.batch.pool import Pool, preload_modules
from autograder.batch.sources import course_id, find_source_dir, load_sources
from autograder.batch.state import load_state, save_state
from autograder.batch.submission import short_reason
from autograder.batch.tasks import Task, discover, grader_version, questions_by_assignment, shard_of
from autograder.batch.text import clean
from autograder.hosts.sandbox import Limits, mode

DEFAULT_TIMEOUT = 30.0
DEFAULT_MEMORY_MB = 2048


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="grading root: holds submitted/<student>/<assignment>/*.ipynb")
    parser.add_argument("--jobs", type=int, default=0,
                        help="parallel jobs (default: all cores)")
    Limits.add_arguments(parser, DEFAULT_TIMEOUT, DEFAULT_MEMORY_MB, per="submission")
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
    similarity_report.add_arguments(parser)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"I/N"`` -> (I, N), 1 <= I <= N; None for no sharding."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SystemExit(f"error: --shard expects I/N with 1 <= I <= N (e.g. 2/4), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def run(args: argparse.Namespace) -> int:
    """The ``grade`` command: what to grade, the jobs that grade it, the class's files."""
    started = time.monotonic()
    _safe_streams()
    root = Path(args.root).resolve()
    shard = parse_shard(getattr(args, "shard", None))
    db_url = getattr(args, "db_url", None) or gradebook.default_url(root)
    gradebook.require_nbgrader(db_url)        # before any grading: fail fast, say what to install
    questions = questions_by_assignment()
    source_dir = find_source_dir(root, args.source)
    sources = load_sources(source_dir, questions)
    tasks = discover(root, questions, sources, grader_version(), source_dir)
    if shard is not None:
        tasks = [t for t in tasks if shard_of(t.student, t.assignment, shard[1]) == shard[0]]
    cid = getattr(args, "course_id", None) or course_id(root, source_dir)
    shown = [t for t in tasks if _selected(args, t)]
    results, todo = _saved_and_todo(args, root, tasks)
    options = _job_options(args, root, source_dir, sources, sorted(questions))
    jobs = max(1, min(args.jobs or _cores(), len(todo) or 1))
    _print_plan(todo, shown, jobs, shard, options["limits"])

    by_key = {(t.student, t.assignment): t for t in tasks}
    interrupted = _grade(todo, jobs, options, by_key, results, root, progress=not args.no_progress)
    final = [results[(t.student, t.assignment)] for t in tasks if (t.student, t.assignment) in results]
    if not interrupted:
        write_missing_autograded(root, final, by_key, sources)
    csv_path = write_csv(root, final, csv_name(shard))
    if interrupted:      # stop within seconds: the next run writes the report and the gradebook
        print(f"interrupted: wrote {csv_path} ({len(final)} submission(s) graded so far); run the same "
              f"command again to grade the rest and write the report and the gradebook", file=sys.stderr)
        return 130
    similar_html, similar_note = _similarity(args, root, tasks, source_dir, questions, shard)
    report_path = report.write(root / ("report.html" if shard is None else
                                       f"report-{shard[0]}-of-{shard[1]}.html"), final,
                               source_dir=source_dir, similarity_html=similar_html)
    gradebook.write(db_url, cid, sources, final)
    graded_now = len([t for t in todo if (t.student, t.assignment) in results])
    elapsed = time.monotonic() - started
    print(summary(final, graded_now, len(shown) - len(todo), elapsed))
    if similar_note:
        print(similar_note)
    print(f"wrote {csv_path}, {report_path}, the gradebook {gradebook.redact(db_url)}, "
          f"{root / 'autograded'}/ and {root / feedback.FOLDER}/")
    return 0


def _similarity(args: argparse.Namespace, root: Path, tasks: list[Task], source_dir: Path | None,
                questions: dict, shard: tuple[int, int] | None) -> tuple[str, str]:
    """The report's "Similar submissions" section and a line for the terminal; writes
    ROOT/similarity.csv (removes an old one when the check is turned off)."""
    if shard is not None:
        return similarity_report.html_section(None, "a shard sees part of the class; run "
                                              "`python -m autograder report ROOT` once every shard is "
                                              "graded"), ""
    if getattr(args, "no_similarity", False):
        (root / similarity_report.CSV_NAME).unlink(missing_ok=True)
        return similarity_report.html_section(None, "--no-similarity"), ""
    threshold = getattr(args, "similarity_threshold", similarity_report.similarity.DEFAULT_THRESHOLD)
    found = similarity_report.check_class(tasks, source_dir, questions, threshold)
    path = similarity_report.write_csv(root, found)
    return similarity_report.html_section(found), (
        f"similar submissions: {len(found.pairs)} pair(s) with a score >= {threshold:g} "
        f"({found.seconds:.1f} s); see {path} and the report")


def _safe_streams() -> None:
    """The terminal takes any text (a name no UTF-8 can encode is escaped, never an error that
    ends the run); what is printed is cleaned of control characters (``text.clean``) besides."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def _selected(args: argparse.Namespace, task: Task) -> bool:
    """Whether ``--assignment`` and ``--student`` (none given: everything) select ``task``."""
    return ((not args.assignment or task.assignment in args.assignment)
            and (not args.student or task.student in args.student))


def _saved_and_todo(args: argparse.Namespace, root: Path, tasks: list[Task]) -> tuple[dict[tuple, dict], list[Task]]:
    """``(results, todo)``: the saved results that stand, by (student, assignment), and the
    tasks to grade now (selected, and changed since their saved result or ``--force``)."""
    results: dict[tuple, dict] = {}
    todo = []
    for task in tasks:
        if not _selected(args, task):
            # not to be graded now: its last grade (if any) stays in the CSV and gradebook
            old = load_state(root, task, any_version=True)
        else:
            old = None if args.force else load_state(root, task)
        if old is not None:
            results[(task.student, task.assignment)] = old
        elif _selected(args, task):
            todo.append(task)
    return results, todo


def _job_options(args: argparse.Namespace, root: Path, source_dir: Path | None, sources: dict,
                 assignments: list[str]) -> dict:
    """What every grading job is started with: its limits, the zygote's preloaded modules,
    the folders the sandbox hides, whether inputs are public, where to write the pages."""
    limits = Limits(timeout=args.timeout, memory_mb=args.memory)
    course_root = source_dir.parent if source_dir else None
    hide = [str(root)] + ([str(course_root)] if course_root else []) + \
        ([str(source_dir)] if source_dir else [])
    return {"limits": asdict(limits), "preload": preload_modules(source_dir, assignments),
            "hide": hide, "public_inputs": bool(args.public_inputs),
            "root": str(root), "sources": sources}


def _print_plan(todo: list[Task], shown: list[Task], jobs: int, shard: tuple[int, int] | None,
                limits: dict) -> None:
    """The first line of the command's output (and a warning when bubblewrap is unusable)."""
    sandbox_mode = mode()
    where = f" (shard {shard[0]} of {shard[1]})" if shard else ""
    print(f"grading {len(todo)} submission(s) of {len({t.student for t in shown})} student(s){where} "
          f"({len(shown) - len(todo)} unchanged, skipped) with {jobs} job(s); "
          f"sandbox: {sandbox_mode}; limits: {limits['timeout']:g} s, {limits['memory_mb']} MB",
          flush=True)
    if sandbox_mode != "bwrap":
        print("warning: bubblewrap is not usable here; the sandbox is weaker "
              f"(mode {sandbox_mode!r}, see 'Grading a class' in the book's page For instructors)", file=sys.stderr)


def _grade(todo: list[Task], jobs: int, options: dict, by_key: dict, results: dict, root: Path,
           progress: bool) -> bool:
    """Grade ``todo`` on ``jobs`` grading jobs, saving each result as it comes (into ``results``
    and ``ROOT/.autograder/results/``); returns whether Ctrl-C or SIGTERM interrupted it."""
    if not todo:
        return False
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), unit="nb", dynamic_ncols=True, file=sys.stderr)

    def on_result(result: dict) -> None:
        task = by_key.get((result["student"], result["assignment"]))
        if not result.pop("pages", False) and task is not None:
            write_pages(options, task, result)        # a result the coordinator made (a job died)
            result.pop("pages", None)
        results[(result["student"], result["assignment"])] = result
        save_state(root, result)
        if bar is not None:
            bar.set_postfix_str(clean(f"{result['student']}/{result['assignment']} "
                                      f"{result.get('score', 0):g}/{result.get('max_score', 0):g}", 80,
                                      newlines=False))
            bar.update(1)

    interrupted = False
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
    return interrupted


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
        name = assignment or "(none)"
        lines.append(f"{name:<{width}}  {len(rs):>8}  {mean:>5.2f}/{max_score:<4g}  {full:>10}  {odd:>19}")
    problems = [r for r in results if r.get("status") not in ("ok",)]
    for r in problems[:20]:
        lines.append(f"  {r['student']}/{r['assignment']}: {r.get('status')}: {short_reason(r.get('reason', ''))}")
    lines = [clean(line, newlines=False) for line in lines]         # a student's name or text: shown as text
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
