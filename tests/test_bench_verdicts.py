"""The verdict of every benchmark in bench/, on small inputs (fast: no benchmark is run).

A benchmark's figure in bench/RESULTS.md is only as good as the logic that says "ok" or "FAIL";
that logic rots unseen when the course changes under it (the concept answers started as None
and their checks said "no answer yet", and bench.colab_like failed every blank exercise). So
each verdict is tested here on inputs made from the course as it is now:

* bench.colab_like: the blank exercise notebooks, their cells run in this process, errors
  recorded as a kernel records them, judged by ``exercise_verdict``;
* bench.grading: ``unexpected_verdicts`` on a fabricated grades.csv;
* bench.check_latency, bench.throughput, bench.train_to_accuracy, bench.book_build,
  bench.similarity: their target checks;
* bench.redteam.attacks: ``report`` on a fabricated grades.csv.

(bench.sweep and bench.seeded_checksum print tables and checksums, they have no verdict; the
other helpers of bench.colab_like are in tests/test_colab_like.py.)
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import traceback
from pathlib import Path

import pytest
import torch

import autograder
from autograder.instructor import nbtools
from bench import book_build, check_latency, grading, similarity, throughput, train_to_accuracy
from bench import colab_like as cl

ROOT = Path(__file__).resolve().parents[1]
QUICK = [name for name in nbtools.assignments(ROOT) if name != "09_training"]   # 09's given cells load data


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def execute_in_process(nb: dict) -> dict:
    """``nb`` with its code cells run in order in one namespace (``allow_errors``, as the benchmark
    runs an exercise), each error stored as a kernel stores it: ename, evalue, traceback."""
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__main__"}
    for count, cell in enumerate((c for c in nb["cells"] if c["cell_type"] == "code"), start=1):
        cell["outputs"], cell["execution_count"] = [], count
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                exec(compile(cl.source(cell), f"<cell {cell.get('id')}>", "exec"), namespace)  # noqa: S102 - the course's notebook
        except Exception as error:  # noqa: BLE001 - a blank raises, a check cell raises the checker's feedback
            cell["outputs"].append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                                    "traceback": traceback.format_exception(error)})
    return nb


@pytest.mark.parametrize("name", QUICK)
def test_colab_like_accepts_every_blank_exercise_with_the_real_checkers_feedback(name):
    """Every check cell of the blank exercise prints the checker's feedback, and that feedback
    says that the answer is still blank (the function or class 'still raises
    NotImplementedError', the concept answer 'no answer yet')."""
    nb = execute_in_process(json.loads((ROOT / "exercises" / name / f"{name}.ipynb").read_text(encoding="utf-8")))
    verdict = cl.exercise_verdict(nb)
    assert verdict.problems == [], verdict.problems
    questions = [q for q in autograder.questions() if q.chapter == name]
    assert verdict.feedback == len(questions) and verdict.blanks == len(questions), verdict.summary()
    assert any(q.kind == "value" for q in questions) and any(q.kind != "value" for q in questions)


def test_colab_like_rejects_a_feedback_that_does_not_say_the_answer_is_blank():
    nb = execute_in_process(json.loads((ROOT / "exercises" / "03_attention" / "03_attention.ipynb")
                                       .read_text(encoding="utf-8")))
    check = next(c for c in nb["cells"] if cl.nbgrader_role(c) == "check" and c["outputs"])
    for phrase in cl.BLANK_FEEDBACK:
        check["outputs"][0]["evalue"] = check["outputs"][0]["evalue"].replace(phrase, "something else")
    (problem,) = cl.exercise_verdict(nb).problems
    assert "does not say that the answer is still blank" in problem


def test_the_blank_feedback_phrases_are_what_the_checker_says():
    def softmax(x, dim=-1):
        raise NotImplementedError()

    function_blank = autograder.check("softmax", softmax).feedback
    value_blank = autograder.check("concept_masked_row", None).feedback
    assert cl.says_blank(function_blank) and "NotImplementedError" in function_blank
    assert cl.says_blank(value_blank) and "no answer yet" in value_blank
    assert not cl.says_blank(autograder.check("concept_masked_row", 0.5).feedback)


# ----------------------------------------------------------------------- bench.grading

def _rows(scores: dict) -> list[dict]:
    """grades.csv rows: {(student, assignment): [(score, max_score), ...]}, one row per question."""
    return [{"student": s, "assignment": a, "question": f"q{i}", "score": str(got), "max_score": str(full)}
            for (s, a), per_question in scores.items() for i, (got, full) in enumerate(per_question)]


def test_grading_verdicts_honest_full_blank_zero_mistaken_below_full():
    kinds = {("s1", "a"): "honest", ("s2", "a"): "blank", ("s3", "a"): "mistaken"}
    right = _rows({("s1", "a"): [(2, 2), (1, 1)], ("s2", "a"): [(0, 2), (0, 1)], ("s3", "a"): [(2, 2), (0, 1)]})
    assert grading.unexpected_verdicts(kinds, right) == []
    wrong = _rows({("s1", "a"): [(2, 2), (0.5, 1)], ("s2", "a"): [(0, 2), (1, 1)], ("s3", "a"): [(2, 2), (1, 1)]})
    assert [(key, kind) for key, kind, _, _ in grading.unexpected_verdicts(kinds, wrong)] == [
        (("s1", "a"), "honest"), (("s2", "a"), "blank"), (("s3", "a"), "mistaken")]
    missing = grading.unexpected_verdicts(kinds, right[:2])
    assert [(key, got) for key, _, got, _ in missing] == [(("s2", "a"), None), (("s3", "a"), None)]
    assert not grading.expected("honest", None, None) and not grading.expected("unknown kind", 1.0, 1.0)


# ----------------------------------------------------------------------- targets

def test_check_latency_verdict():
    assert check_latency.verdict([0.1, 0.2, 0.5], []) == (0.2, True, [])
    overall, met, problems = check_latency.verdict([0.4, 0.5], ["softmax"])
    assert (overall, met) == (0.45, False)
    assert problems == ["the solution of softmax does not pass its check: its time is not a check's"]


def test_similarity_verdict():
    good = {"precision_all": 0.95, "precision": 1.0}
    assert similarity.verdict(good, 10.0, 214.0) == (True, [])
    met, problems = similarity.verdict({"precision_all": 0.5, "precision": 1.0}, 11.0, 214.0)
    assert not met and len(problems) == 2 and "11.00 s" in problems[0] and "precision_all 0.500" in problems[1]


def test_throughput_ratio_verdict():
    assert throughput.ratio_verdict([0.9, 1.2, 1.1]) == (1.1, True)
    assert throughput.ratio_verdict([0.9, 0.95, 1.3]) == (0.95, False)


def test_train_to_accuracy_target():
    assert train_to_accuracy.target_met(0.92, 660, 10)
    assert not train_to_accuracy.target_met(0.9199, 600, 10)
    assert not train_to_accuracy.target_met(0.95, 661, 10)
    assert train_to_accuracy.target_met(0.92, 66, 1) and not train_to_accuracy.target_met(0.92, 67, 1)


def test_book_build_status():
    assert book_build.status(0, "warnings") == "ok"
    stderr = "x" * 600 + "\nError: no kernel"
    assert book_build.status(1, stderr + "\n") == "exit 1: " + stderr[-500:]


# ----------------------------------------------------------------------- bench.redteam

def test_redteam_report_names_holes_and_losses(tmp_path):
    from bench.redteam import attacks

    q = autograder.question("softmax")
    others = [x for x in autograder.questions("03_attention") if x.id != "softmax"]
    rows = [{"student": "hole", "assignment": "03_attention", "question": "softmax", "score": str(q.points),
             "reason": ""},
            {"student": "fair", "assignment": "03_attention", "question": "softmax", "score": "0", "reason": "x"}]
    rows += [{"student": s, "assignment": "03_attention", "question": x.id, "score": str(x.points), "reason": ""}
             for s in ("hole", "fair") for x in others[:-1]]
    rows += [{"student": "hole", "assignment": "03_attention", "question": others[-1].id, "score": "0",
              "reason": "lost"}]
    with open(tmp_path / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["student", "assignment", "question", "score", "reason"])
        writer.writeheader()
        writer.writerows(rows)
    chosen = {"hole": ("03_attention", None, {"softmax": 0.0}), "fair": ("03_attention", None, {"softmax": 0.0})}
    verdicts = {(name, qid): verdict for name, qid, _, _, verdict, _ in attacks.report(tmp_path, chosen)}
    assert verdicts[("hole", "softmax")] == "HOLE" and verdicts[("fair", "softmax")] == "ok"
    assert verdicts[("hole", others[-1].id)] == "LOST" and verdicts[("fair", others[-1].id)] == "missing row"
    assert all(verdicts[(s, x.id)] == "ok" for s in ("hole", "fair") for x in others[:-1])
