"""Latency of one ``autograder.check()`` call in a warm kernel, with the solutions' answers.

    python -m bench.check_latency             # every question, median of 5 calls each
    python -m bench.check_latency --question q1 attention

The answers are the ones a student who solved the exercises would have: each
``solutions/<a>/<a>.ipynb`` is executed cell by cell (cells that call the checker or shell
magics skipped) and the object named by the question's ``answer_name`` is checked. One call per
question warms up (imports, first kernels); the next ``--repeats`` are timed. Target: median
<= 0.3 s. The last line is ``check_latency_median_s=...``.
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.3


def solution_namespace(assignment: str) -> dict:
    """Execute the code cells of ``solutions/<assignment>/<assignment>.ipynb``; the resulting globals."""
    notebook = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    namespace: dict = {"__name__": f"solution_{assignment}"}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if any(marker in source for marker in ("autograder.grade", "check(", "grade(")):
            continue
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            with redirect_stdout(io.StringIO()):
                exec(compile(source, f"{assignment}.ipynb", "exec"), namespace)  # noqa: S102 - the notebook's own cells
        except Exception as error:  # noqa: BLE001 - a demo cell may need what the benchmark lacks
            print(f"  note: a cell of {assignment} failed ({type(error).__name__}: {error}); continuing",
                  file=sys.stderr)
    return namespace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.check_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--question", nargs="*", default=None, help="question ids (default: all)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import autograder

    questions = [q for q in autograder.questions() if not args.question or q.id in args.question]
    namespaces: dict[str, dict] = {}
    medians: list[float] = []
    failed: list[str] = []
    for q in questions:
        if q.chapter not in namespaces:
            namespaces[q.chapter] = solution_namespace(q.chapter)
        answer = namespaces[q.chapter].get(q.answer_name)
        if answer is None:
            print(f"{q.id:<18} no {q.answer_name!r} in solutions/{q.chapter}: not timed")
            continue
        first = autograder.check(q.id, answer)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            autograder.check(q.id, answer)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        medians.append(median)
        print(f"{q.id:<18} {q.chapter:<24} passed={first.passed!s:<5} median={median * 1000:7.1f} ms "
              f"max={max(times) * 1000:7.1f} ms")
        if not first.passed:
            failed.append(q.id)
    if not medians:
        print("no question could be timed", file=sys.stderr)
        return 1
    overall, met, problems = verdict(medians, failed)
    print(f"check_latency: {len(medians)} questions, median of medians {overall:.3f} s, "
          f"slowest {max(medians):.3f} s (target median <= {TARGET_SECONDS} s: {'met' if met else 'NOT met'})")
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"check_latency_median_s={overall:.3f}")
    return 1 if problems else 0


def verdict(medians: list[float], failed: list[str]) -> tuple[float, bool, list[str]]:
    """(median of the medians, whether it meets the target, problems). A question whose solution
    does not pass its own check is timed on the failing path: that makes the figure meaningless."""
    overall = statistics.median(medians)
    problems = [f"the solution of {qid} does not pass its check: its time is not a check's" for qid in failed]
    return overall, overall <= TARGET_SECONDS, problems


if __name__ == "__main__":
    sys.exit(main())
