"""Throughput of ``python -m autograder grade`` on a synthetic class.

    python -m bench.grading                      # 100 students x the 8 quick assignments, all cores
    python -m bench.grading --students 4 --assignment 09_training   # the training assignment
    python -m bench.grading --students 20 --jobs 2 --keep /tmp/class

The class is made from the course's own notebooks: per assignment, 60% of the students hand
in the solution, 20% the blank exercise, 20% the solution with one answer made wrong (a
realistic edit inside a solution block where one applies: the 1/sqrt(d_k) scaling
dropped, softmax over the wrong axis, sin and cos swapped, the mask inverted; otherwise
the answer's outputs scaled by 1.1, or inverted when boolean; a conceptual question's
number plus one). The grading command runs as
an instructor would run it (a fresh process, sandbox and start-up included) and the
benchmark checks the verdicts: every honest notebook full marks, every blank one zero,
every mistaken one below full marks.
Target: 100 students x 8 assignments in <= 15 minutes on 2 cores. The last line is
``grading_notebooks_per_min=... wall_seconds=... notebooks=... load_1min=...``.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = (800, 900.0)          # notebooks, seconds

TEXT_MISTAKES = [
    (r"d_k \*\* 0\.5", "1"),                       # scaling by sqrt(d_k) forgotten
    (r"\*\* -0\.5", "** 0"),
    (r"math\.sqrt\((\w+)\)", r"\1"),
    (r"dim=-1", "dim=-2"),                         # softmax / sum over the wrong axis
    (r"np\.sin\(", "np.COS("),                     # sin and cos swapped (two steps)
    (r"mask == 0", "mask != 0"),                   # mask inverted
]

PERTURB = """

def _bench_perturb(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_bench_perturb(v) for v in value)
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "is_floating_point", False) or getattr(dtype, "kind", "") == "f":
        return value * 1.1
    if str(dtype) in ("torch.bool", "bool"):
        return ~value
    if dtype is not None:
        return value + 1
    return value
"""


def _answer_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c.get("cell_type") == "code"
            and "### BEGIN SOLUTION" in "".join(c.get("source", ""))]


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _defined_name(source: str) -> tuple[str, str] | None:
    m = re.search(r"^(def|class)\s+(\w+)", source, flags=re.MULTILINE)
    return (m.group(1), m.group(2)) if m else None


def make_mistake(nb: dict, rng: random.Random) -> str:
    """Make one answer of a solution notebook wrong; returns what was done."""
    cell = rng.choice(_answer_cells(nb))
    source = _source(cell)
    begin, end = source.index("### BEGIN SOLUTION"), source.index("### END SOLUTION")
    block = source[begin:end]
    for pattern, repl in rng.sample(TEXT_MISTAKES, len(TEXT_MISTAKES)):
        if re.search(pattern, block):
            new = re.sub(pattern, repl, block, count=1)
            if "np.COS(" in new:
                new = new.replace("np.cos(", "np.sin(").replace("np.COS(", "np.cos(")
            cell["source"] = source[:begin] + new + source[end:]
            return f"edited: {pattern}"
    kind, name = _defined_name(source) or ("def", None)
    if name is None:
        # a conceptual question's cell (`name = <number>`): a different number
        match = re.search(r"^(\w+) = ([-+0-9.e]+)$", block, flags=re.MULTILINE)
        if match is None:
            raise ValueError(f"bench.grading cannot make this answer wrong:\n{source}")
        wrong = float(match.group(2)) + 1
        cell["source"] = source.replace(match.group(0), f"{match.group(1)} = {wrong!r}", 1)
        return f"value {match.group(1)} changed"
    if kind == "def":
        wrapper = (f"\n_bench_{name} = {name}\n\ndef {name}(*args, **kwargs):\n"
                   f"    return _bench_perturb(_bench_{name}(*args, **kwargs))\n")
    else:
        wrapper = (f"\nclass {name}({name}):\n    def forward(self, *args, **kwargs):\n"
                   f"        return _bench_perturb(super().forward(*args, **kwargs))\n")
    # appended at the end of the notebook, so that a later redefinition does not undo it
    nb["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {},
                        "outputs": [], "source": PERTURB + wrapper})
    return "outputs scaled by 1.1"


MISTAKES: dict[tuple[str, str], str] = {}     # (student, assignment) -> the mistake made


def build_class(root: Path, students: int, assignments: list[str], seed: int = 0) -> dict:
    """Write ROOT/submitted/...; returns {(student, assignment): kind}."""
    rng = random.Random(seed)
    kinds = {}
    sources = {a: json.loads((ROOT / "solutions" / a / f"{a}.ipynb").read_text()) for a in assignments}
    blanks = {a: (ROOT / "exercises" / a / f"{a}.ipynb").read_bytes() for a in assignments}
    for i in range(students):
        student = f"student{i:03d}"
        for j, a in enumerate(assignments):
            slot = (i + j) % 10
            kind = "honest" if slot < 6 else "blank" if slot < 8 else "mistaken"
            folder = root / "submitted" / student / a
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{a}.ipynb"
            if kind == "blank":
                path.write_bytes(blanks[a])
            else:
                nb = json.loads(json.dumps(sources[a]))
                if kind == "mistaken":
                    MISTAKES[(student, a)] = make_mistake(nb, rng)
                path.write_text(json.dumps(nb, indent=1))
            kinds[(student, a)] = kind
    return kinds


def expected(kind: str, got: float | None, full: float | None) -> bool:
    """The verdict a notebook of this kind must get: an honest one full marks, a blank one zero, a
    mistaken one less than full marks; a notebook missing from grades.csv (got None) never passes."""
    if got is None or full is None:
        return False
    return (kind == "honest" and got == full) or (kind == "blank" and got == 0) or (kind == "mistaken" and got < full)


def unexpected_verdicts(kinds: dict, rows: list[dict]) -> list[tuple]:
    """(key, kind, got, full) of every (student, assignment) whose total in grades.csv's rows (one per
    question: student, assignment, score, max_score) is not what its kind expects."""
    totals: dict = {}
    for row in rows:
        key = (row["student"], row["assignment"])
        got, full = totals.get(key, (0.0, 0.0))
        totals[key] = (got + float(row["score"]), full + float(row["max_score"]))
    wrong = []
    for key, kind in kinds.items():
        got, full = totals.get(key, (None, None))
        if not expected(kind, got, full):
            wrong.append((key, kind, got, full))
    return wrong


def default_assignments() -> list[str]:
    """Every solutions/<a>/ but the training assignments (a question with its own time budget,
    Question.seconds: a minute of training per notebook, timed apart with --assignment)."""
    import autograder

    names = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
    return [a for a in names if not any(q.seconds for q in autograder.questions(a))]


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def load_1min() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--assignment", action="append", default=[],
                        help="only these assignments (default: every solutions/<a>/ without a training "
                             "question)")
    parser.add_argument("--jobs", type=int, default=0, help="grading jobs (default: all cores)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-submission limit passed to the command (default: its own)")
    parser.add_argument("--keep", help="build the class in this folder and keep it")
    args = parser.parse_args(argv)

    assignments = args.assignment or default_assignments()
    tmp = None
    if args.keep:
        root = Path(args.keep)
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-grading-")
        root = Path(tmp.name)
    try:
        kinds = build_class(root, args.students, assignments)
        n = len(kinds)
        cores = _cores()
        print(f"class: {args.students} students x {len(assignments)} assignments = {n} notebooks "
              f"({sum(k == 'honest' for k in kinds.values())} honest, "
              f"{sum(k == 'blank' for k in kinds.values())} blank, "
              f"{sum(k == 'mistaken' for k in kinds.values())} mistaken); {cores} cores; "
              f"load before: {load_1min():.2f}", flush=True)
        cmd = [sys.executable, "-m", "autograder", "grade", str(root), "--no-progress"]
        cmd += ["--timeout", str(args.timeout)] if args.timeout else []
        cmd += ["--jobs", str(args.jobs)] if args.jobs else []
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        load_after = load_1min()
        print(proc.stdout[-4000:])
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            return 1
        with open(root / "grades.csv", newline="") as fh:
            wrong = unexpected_verdicts(kinds, list(csv.DictReader(fh)))
        rate = 60.0 * n / wall
        projected = TARGET[0] / (n / wall)
        print(f"graded {n} notebooks in {wall:.1f} s = {rate:.1f} notebooks/min "
              f"({wall / n:.2f} s each, {cores} cores); 800 notebooks would take ~{projected:.0f} s "
              f"(target {TARGET[1]:.0f} s); load (1 min) before/after: see above / {load_after:.2f}")
        if wrong:
            print(f"{len(wrong)} unexpected verdict(s), e.g.:")
            for key, kind, got, full in wrong[:10]:
                what = f" [{MISTAKES[key]}]" if key in MISTAKES else ""
                print(f"  {key[0]}/{key[1]} ({kind}{what}): {got}/{full}")
        print(f"grading_notebooks_per_min={rate:.1f} wall_seconds={wall:.1f} notebooks={n} "
              f"load_1min={load_after:.2f} unexpected={len(wrong)}")
        return 1 if wrong else 0
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
