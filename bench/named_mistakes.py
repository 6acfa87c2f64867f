"""How many wrong answers the checks reject and name: every wrong answer of every answer bank
(``tests/answers/ch*.py``), checked in this process.

    python -m bench.named_mistakes                  # every question
    python -m bench.named_mistakes --question q7b post_ln_block

Per question: the wrong answers, how many were accepted (the worst bug), rejected, named (a
catalogue key in ``result.mistake``: a wrong answer, a changed reference or a symptom of the
question's catalogue) and named as the bank expects; and the right answers (solution, variants,
realistic right answers) accepted. Counts, not timings. The last line is
``named_mistakes: wrong=W accepted=A rejected=R named=N (P%) as_expected=E right=K/T``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _banks():
    """The answer banks and the solutions (tests/answers, put on the path as pytest does)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from answers.bank import load, named, solutions

    return load(), solutions(), named


def count(qids: list[str] | None = None) -> list[dict]:
    """One row per question with a bank: {qid, wrong, accepted, rejected, named, as_expected, right, right_total}."""
    import autograder

    banks, solutions, named = _banks()
    rows = []
    for question in autograder.questions():
        bank = banks.get(question.id)
        if bank is None or (qids and question.id not in qids):
            continue
        row = {"qid": question.id, "wrong": 0, "accepted": 0, "rejected": 0, "named": 0, "as_expected": 0,
               "right": 0, "right_total": 0}
        for answer, expected in bank.wrong:
            result = autograder.check(question.id, answer)
            row["wrong"] += 1
            row["accepted" if result.passed else "rejected"] += 1
            row["named"] += int(not result.passed and result.mistake is not None)
            row["as_expected"] += int(not result.passed and named(result, expected))
        for answer in [solutions[question.id], *bank.variants, *bank.right]:
            row["right_total"] += 1
            row["right"] += int(autograder.check(question.id, answer).passed)
        rows.append(row)
    return rows


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def report(rows: list[dict]) -> str:
    lines = [f"{'question':<22} {'wrong':>5} {'accepted':>8} {'rejected':>8} {'named':>6} {'named %':>8} "
             f"{'as bank':>7} {'right':>7}"]
    for r in rows:
        lines.append(f"{r['qid']:<22} {r['wrong']:>5} {r['accepted']:>8} {r['rejected']:>8} {r['named']:>6} "
                     f"{_percent(r['named'], r['wrong']):>8} {r['as_expected']:>7} "
                     f"{r['right']:>3}/{r['right_total']:<3}")
    total = {key: sum(r[key] for r in rows) for key in ("wrong", "accepted", "rejected", "named", "as_expected",
                                                        "right", "right_total")}
    lines.append(f"named_mistakes: wrong={total['wrong']} accepted={total['accepted']} rejected={total['rejected']} "
                 f"named={total['named']} ({_percent(total['named'], total['wrong'])}) "
                 f"as_expected={total['as_expected']} right={total['right']}/{total['right_total']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.named_mistakes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--question", nargs="*", metavar="QID", help="only these questions")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = count(args.question)
    print(report(rows), flush=True)
    bad = sum(r["accepted"] for r in rows) + sum(r["right_total"] - r["right"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
