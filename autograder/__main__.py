"""Command line of the autograder.

    python -m autograder check PATH [--question QID ...] [--json] [--timeout SECONDS]
    python -m autograder questions [--chapter CHAPTER] [--json]
    python -m autograder grade ROOT ...        (batch grading, see autograder.batch.cli)
    python -m autograder export ROOT ...       (grades.csv, nbgrader CSV, report after grading)
    python -m autograder report ROOT           (ROOT/report.html from the saved results)

``check`` runs PATH (a notebook or a Python file) in a fresh process with a time limit,
probes the answers there and judges them here. Without ``--question`` it checks the questions
of PATH's own assignment, named by the marks the exercise notebook carries (its nbgrader grade
ids, else its check cells' ``print(autograder.grade("<id>", ...))`` lines:
:mod:`autograder.hosts.identify`), whatever the file is called; a file without them is refused
with status 2. It prints a table (or, with ``--json``, a list of objects with id, passed,
score, max_score, feedback, mistake). Exit status 0 whether or not the answers pass; 2 when
PATH cannot be read, says no assignment, or the command line is wrong.
"""
from __future__ import annotations

import argparse
import json
import sys

import autograder

from .batch import export
from .hosts.child_process import check_file, format_table
from .hosts.identify import identify
from .judging.catalogue import entry
from .student.cells import SubmissionError


def _check(args) -> int:
    try:
        for qid in args.question or ():
            autograder.question(qid)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        # the questions named, else those of the file's own assignment (its nbgrader marks)
        identity = None if args.question else identify(args.path)
        qids = args.question or list(identity.qids)
        results = check_file(args.path, qids, timeout=args.timeout)
    except SubmissionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        print(format_table(results))
        for note in (identity.note() if identity else "", written_note(args.path)):
            if note:
                print(note)
    return 0


def written_note(path) -> str:
    """What ``check`` says about the notebook's written questions (markdown answer cells with
    nbgrader's grade metadata): they are graded by the instructor, never by a check."""
    try:
        with open(path, encoding="utf-8") as fh:
            cells = json.load(fh).get("cells", [])
        points = [float(((c.get("metadata") or {}).get("nbgrader") or {}).get("points", 0)) for c in cells
                  if isinstance(c, dict) and c.get("cell_type") == "markdown"
                  and ((c.get("metadata") or {}).get("nbgrader") or {}).get("grade")]
    except (OSError, ValueError, AttributeError, TypeError):
        return ""
    if not points:
        return ""
    count = "1 written question" if len(points) == 1 else f"{len(points)} written questions"
    return (f"+ {count} ({sum(points):g} points), graded by your instructor: no check looks at "
            f"{'it' if len(points) == 1 else 'them'}.")


def _questions(args) -> int:
    try:
        found = autograder.questions(args.chapter)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{"id": q.id, "chapter": q.chapter, "title": q.title, "points": q.points,
                           "answer_name": q.answer_name, "mistakes": len(entry(q.id).catalogue)} for q in found],
                         indent=2))
    else:
        for q in found:
            print(f"{q.id:<22} {q.chapter:<24} {q.points:>3g}  {q.answer_name:<30} {q.title}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "grade":
        try:
            # inner import: batch grading needs the sandbox's tools; without them `check` still works
            from .batch.cli import main as grade_main
        except ImportError as error:
            print(f"error: batch grading is not available ({error})", file=sys.stderr)
            return 2
        return grade_main(argv[1:])
    if argv and argv[0] in ("export", "report"):
        return (export.main if argv[0] == "export" else export.report_main)(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check the answers in a notebook or Python file")
    check.add_argument("path", help="a notebook (.ipynb) or Python file (.py)")
    check.add_argument("--question", "-q", action="append", metavar="QID",
                       help="question id to check (repeatable); default: the questions of the assignment "
                            "the file's nbgrader grade ids (or check cells) name")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds for running the file (default 60)")
    listing = sub.add_parser("questions", help="list the questions")
    listing.add_argument("--chapter", default=None)
    listing.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "check":
        return _check(args)
    return _questions(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:                 # output piped into head & co.
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
