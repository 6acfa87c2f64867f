"""``python -m autograder export ROOT [--db-url URL]``: one class's files after grading,
whether it was graded by one machine or by N shards (``grade --shard I/N``).

* ``ROOT/grades.csv`` (one row per question and submission): the shards' ``grades-I-of-N.csv``
  merged (every shard must be there, no row may appear twice); without shard files, rebuilt
  from the saved results ``ROOT/.autograder/results/``;
* ``ROOT/nbgrader_grades.csv``: ``nbgrader export`` of the gradebook (one row per student
  and assignment), from ``--db-url`` (default ``sqlite:///ROOT/gradebook.db``);
* ``ROOT/report.html``: the class report (:mod:`autograder.batch.report`) from the saved
  results under ROOT (all shards, when they share ROOT), with the similar submissions of the
  whole class (and ``ROOT/similarity.csv``, :mod:`autograder.batch.similarity_report`).
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

from autograder.batch import gradebook, report, similarity_report
from autograder.batch.outputs import CSV_COLUMNS, write_csv, write_rows
from autograder.batch.sources import course_id, find_source_dir
from autograder.batch.state import STATE, load_results


SHARD_CSV = re.compile(r"^grades-(\d+)-of-(\d+)\.csv$")


def merge_shard_csvs(root: Path) -> tuple[list[list[str]], int] | None:
    """The rows of every ROOT/grades-I-of-N.csv (None when there is none)."""
    found: dict[int, dict[int, Path]] = {}
    for path in root.glob("grades-*-of-*.csv"):
        m = SHARD_CSV.match(path.name)
        if m:
            found.setdefault(int(m.group(2)), {})[int(m.group(1))] = path
    if not found:
        return None
    if len(found) > 1:
        raise SystemExit(f"error: shard files of different counts in {root}: "
                         f"{sorted(p.name for d in found.values() for p in d.values())}; "
                         f"remove those of the old split")
    (count, shards), = found.items()
    missing = sorted(set(range(1, count + 1)) - set(shards))
    if missing:
        raise SystemExit(f"error: missing {', '.join(f'grades-{i}-of-{count}.csv' for i in missing)} "
                         f"in {root}: run `python -m autograder grade ROOT --shard I/{count}` for "
                         f"those shards, or copy their CSV files here")
    rows, seen = [], {}
    for i in sorted(shards):
        with open(shards[i], newline="", encoding="utf-8", errors="replace") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header != CSV_COLUMNS:
                raise SystemExit(f"error: {shards[i]} does not start with the header {','.join(CSV_COLUMNS)}")
            for row in reader:
                key = tuple(row[:3])
                if key in seen:
                    raise SystemExit(f"error: {'/'.join(key)} is in both {seen[key].name} and "
                                     f"{shards[i].name}: were the shards run with different N?")
                seen[key] = shards[i]
                rows.append(row)
    return sorted(rows, key=lambda r: (r[0], r[1])), count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the grading root given to `python -m autograder grade`")
    parser.add_argument("--db-url", default=None,
                        help="the gradebook (default: sqlite:///ROOT/gradebook.db)")
    parser.add_argument("--course-id", default=None, help="nbgrader course_id (default: from nbgrader_config.py)")
    parser.add_argument("--to", default=None, help="nbgrader CSV (default ROOT/nbgrader_grades.csv)")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    if not root.is_dir():
        print(f"error: {root} is not a folder", file=sys.stderr)
        return 2
    db_url = args.db_url or gradebook.default_url(root)
    gradebook.require_nbgrader(db_url)
    cid = args.course_id or course_id(root, find_source_dir(root, None))
    results = load_results(root)
    merged = merge_shard_csvs(root)
    out = root / "grades.csv"
    if merged is not None:
        rows, count = merged
        write_rows(out, [CSV_COLUMNS] + rows)
        print(f"wrote {out}: {len(rows)} row(s) from {count} shard file(s)")
    elif results:
        write_csv(root, results)
        print(f"wrote {out}: from {len(results)} saved result(s)")
    else:
        print(f"note: no shard CSV and no saved result under {root}; grades.csv not written",
              file=sys.stderr)
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).exists():
        print(f"error: no gradebook at {db_url}: grade first, or give --db-url", file=sys.stderr)
        return 2
    to = Path(args.to) if args.to else root / "nbgrader_grades.csv"
    gradebook.export_csv(db_url, cid, to)
    print(f"wrote {to} (nbgrader export of {gradebook.redact(db_url)})")
    if results:
        source_dir = find_source_dir(root, None)
        section, note = similarity_report.write(root, source_dir, similarity_report.similarity.DEFAULT_THRESHOLD)
        path = report.write(root / "report.html", results, source_dir=source_dir, similarity_html=section)
        print(f"wrote {path}" + (f"; {note}" if note else ""))
    return 0


def report_main(argv: list[str] | None = None) -> int:
    """``python -m autograder report ROOT``: ROOT/report.html from the saved results."""
    parser = argparse.ArgumentParser(prog="python -m autograder report", description=report.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--out", default=None, help="default ROOT/report.html")
    similarity_report.add_arguments(parser)
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    results = load_results(root)
    if not results:
        print(f"error: no saved result under {root / STATE}: grade first",
              file=sys.stderr)
        return 2
    source_dir = find_source_dir(root, None)
    section, note = similarity_report.write(root, source_dir, None if args.no_similarity else args.similarity_threshold)
    path = report.write(Path(args.out) if args.out else root / "report.html", results,
                        source_dir=source_dir, similarity_html=section)
    print(f"wrote {path} ({len(results)} submission(s))" + (f"; {note}" if note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
