"""Every question's answer bank, run once: discovered from ``autograder.questions()``.

A bank (tests/answers/chNN_<chapter>.py; the schema in tests/answers/bank.py) holds a question's
variants, realistic right answers and realistic wrong answers, each wrong one with how the
check must name it. Here: the solution (its ``@solution``) passes with full marks and
``autograder.grade`` accepts it; every variant and right answer passes with full marks; every
wrong answer scores 0 and is named as its bank says (each one, no rate); every question has a
bank with at least MIN_WRONG wrong answers, in its chapter's file, except the questions NO_BANK
names with the reason. Each answer is checked by exactly one test. The solution is written once:
the bank's ``@solution`` is the solutions notebook's answer (held equal here), and the whole
submission other tests hand to the CLI is written from the banks (tests/answers/submission.py).
"""
from __future__ import annotations

import ast
import inspect
import runpy
import sys
import textwrap
from collections import Counter

import pytest

import autograder
from autograder.judging.catalogue import entry
from answers.bank import (HERE, MIN_WRONG, Says, answer_name, chapter_file, fast_sample, load, named, solution_of,
                          solutions)
from answers.given import notebook_cell
from answers.submission import submission_source, write_submission

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = autograder.questions()
BANKS = load()


def _no_bank_reason(q) -> str | None:
    if q.seconds:
        return ("graded by a training run (about a minute per check): tests/test_training_question.py tests "
                "its solution, its verdicts and its mistakes")
    if q.kind == "value":
        return ("answered with a number: its realistic wrong numbers are its catalogue's entries, each checked to "
                "be named with its hint by tests/test_exercises_new.py::test_catalogued_values_are_named_with_a_hint")
    return None


NO_BANK = {q.id: reason for q in QUESTIONS if (reason := _no_bank_reason(q))}
BANKED = [q for q in QUESTIONS if q.id not in NO_BANK]
CHAPTER = {q.id: q.chapter for q in QUESTIONS}


def _ids(rows) -> list[str]:
    seen: Counter = Counter()
    out = []
    for row in rows:
        base = f"{row[0]}-{answer_name(row[1])}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


# every (qid, answer[, expected]) of the banks of known questions; unknown ids fail below
CORRECT = [(qid, a) for qid, b in BANKS.items() if qid in CHAPTER for a in [*b.variants, *b.right]]
WRONG = [(qid, a, e) for qid, b in BANKS.items() if qid in CHAPTER for a, e in b.wrong]


# --------------------------------------------------------------------------- every question has a bank

@pytest.mark.parametrize("qid", [q.id for q in BANKED])
def test_every_question_has_a_bank_in_its_chapter_file(qid):
    where = chapter_file(CHAPTER[qid])
    bank = BANKS.get(qid)
    assert bank is not None, (f"{qid} has no answer bank: add its other correct formulations (@variant({qid!r})) "
                              f"and >= {MIN_WRONG} realistic wrong answers (@wrong({qid!r}, <catalogue key or "
                              f"says('words')>)) to {where} (the schema: tests/answers/bank.py)")
    assert len(bank.wrong) >= MIN_WRONG, (f"{qid} has {len(bank.wrong)} realistic wrong answers: add "
                                          f">= {MIN_WRONG - len(bank.wrong)} more to {where} with "
                                          f"@wrong({qid!r}, <catalogue key or says('words')>)")
    assert bank.variants or bank.right, f"add another correct formulation of {qid} to {where} with @variant({qid!r})"
    module = "answers." + where.rsplit("/", 1)[1].removesuffix(".py")
    elsewhere = sorted(m for m in bank.modules if m.split(".")[-1] != module.split(".")[-1])
    assert not elsewhere, f"{qid}'s answers are registered in {elsewhere}: move them to {where}"


def test_every_chapter_file_is_loaded():
    files = sorted(p.stem for p in HERE.glob("ch[0-9][0-9]_*.py"))
    loaded = {name.rsplit(".", 1)[-1] for name in sys.modules if name.rsplit(".", 1)[0].endswith("answers")}
    missing = [f for f in files if f not in loaded]
    assert not missing, (f"tests/answers/{missing[0]}.py is not imported: load() in tests/answers/bank.py imports "
                         f"the files named ch<NN>_<chapter>.py")


def test_banks_are_for_known_questions_only():
    unknown = sorted(set(BANKS) - set(CHAPTER))
    assert not unknown, f"answer banks for questions that do not exist: {unknown}"
    banked_anyway = sorted(qid for qid in set(BANKS) & set(NO_BANK)
                           if BANKS[qid].variants or BANKS[qid].right or BANKS[qid].wrong)
    assert not banked_anyway, f"{banked_anyway} are in NO_BANK but have banks: take them out of NO_BANK"


def test_every_question_has_a_solution():
    missing = sorted(set(CHAPTER) - set(solutions()))
    assert not missing, (f"no solution for {missing}: add it to the question's chapter file in tests/answers/ "
                         f"with @solution(\"<id>\"), written as the solutions notebook writes it")
    unknown = sorted(set(solutions()) - set(CHAPTER))
    assert not unknown, f"solutions for questions that do not exist: {unknown}"


# --------------------------------------------------------------------------- the answers

@pytest.mark.parametrize("qid", [q.id for q in QUESTIONS if not q.seconds])
def test_solution_passes(qid):
    result = autograder.check(qid, solutions()[qid])
    assert result.passed, result.feedback
    assert result.score == result.max_score == autograder.question(qid).points
    assert autograder.grade(qid, solutions()[qid]).passed


@pytest.mark.parametrize("qid, answer", CORRECT, ids=_ids(CORRECT))
def test_correct_answer_passes(qid, answer):
    result = autograder.check(qid, answer)
    assert result.passed, f"{qid}: the correct answer {answer_name(answer)} failed: {result.feedback}"
    assert result.score == result.max_score


@pytest.mark.parametrize("qid, answer, expected", fast_sample(WRONG), ids=_ids(WRONG))
def test_wrong_answer_is_rejected_and_named(qid, answer, expected):
    result = autograder.check(qid, answer)
    assert not result.passed, f"{qid}: a wrong answer ({expected}) passed: {result.feedback}"
    assert result.score == 0
    assert named(result, expected), f"expected {expected}, got mistake={result.mistake!r}: {result.feedback}"
    assert "On input" in result.feedback or "Not accepted" in result.feedback, result.feedback
    if result.mistake not in (None, "shortcut", "tamper"):
        # the first step of the feedback (a student's first check): the failure and a question, not the fix
        mistake = next(m for m in entry(qid).catalogue if m.key == result.mistake)
        assert "On input" in result.first_step and mistake.question() in result.first_step, result.first_step
        assert mistake.hint not in result.first_step, result.first_step


def test_named_reads_keys_words_and_both():
    """The matcher the wrong-answer test relies on: a key must equal result.mistake, words must be
    in the feedback (case ignored), and a tuple needs every part."""
    class Result:
        mistake, feedback = "no_bias", "On input x: the layer has No Bias."

    assert named(Result, "no_bias") and not named(Result, "relu")
    assert named(Result, Says("no bias")) and not named(Result, Says("has a bias"))
    assert named(Result, ("no_bias", Says("On input"))) and not named(Result, ("no_bias", Says("eval mode")))


def test_a_solution_lives_in_one_place(monkeypatch):
    """A question's solution is ``@solution`` in its bank, once; a question without one is refused
    with the file to add it to, by the tests and by the whole submission."""
    from answers import bank as B

    def toy_answer(x):
        return x

    monkeypatch.setitem(B.BANKS, "toy", B.Bank("toy"))
    B.solution("toy")(toy_answer)
    assert solutions()["toy"] is toy_answer
    with pytest.raises(AssertionError, match="two @solution"):
        B.solution("toy")(toy_answer)
    monkeypatch.setitem(B.BANKS, "q1", B.Bank("q1"))          # q1 as a new question without its solution yet
    with pytest.raises(LookupError, match=r"tests/answers/ch02_positional_encoding.py with @solution\('q1'\)"):
        solution_of("q1")
    with pytest.raises(AssertionError, match=r"no solution for \['q1'\]: add @solution"):
        submission_source([autograder.question("q1")])


# --------------------------------------------------------------------------- written once

def _without_decorators(node: ast.AST) -> str:
    node.decorator_list = []
    return ast.dump(node)


@pytest.mark.parametrize("qid", [q.id for q in QUESTIONS])
def test_each_solution_is_the_notebooks_answer(qid):
    """The bank's ``@solution`` is the definition of the answer name in the solutions notebook's answer
    cell (grade id ``<id>_answer``), compared as parsed code (comments, blank lines and layout aside;
    docstrings and every statement count), so the answer is written once and copied, never rewritten; a value
    question's ``solution_value`` is the number the cell's solution region assigns."""
    q = autograder.question(qid)
    notebook = f"solutions/{q.chapter}/{q.chapter}.ipynb"
    where = (f"make {chapter_file(q.chapter)}'s @solution({qid!r}) the definition of {q.answer_name} in the cell "
             f"{qid}_answer of {notebook} (copy it from the notebook, which students see)")
    cell = ast.parse(notebook_cell(q.chapter, f"{q.id}_answer"))
    if q.kind == "value":
        numbers = [ast.literal_eval(n.value) for n in cell.body if isinstance(n, ast.Assign)
                   and [getattr(t, "id", None) for t in n.targets] == [q.answer_name]
                   and isinstance(n.value, ast.Constant) and n.value.value is not None]
        assert numbers and numbers[-1] == solution_of(qid), f"{numbers[-1:]} != {solution_of(qid)!r}: {where}"
        return
    defined = [n for n in cell.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == q.answer_name]
    assert defined, f"the cell {qid}_answer of {notebook} defines no {q.answer_name}"
    source = textwrap.dedent(inspect.getsource(solution_of(qid))) if not inspect.isclass(solution_of(qid)) else None
    bank_node = (ast.parse(source).body[0] if source is not None
                 else _class_node(solution_of(qid)))
    assert _without_decorators(bank_node) == _without_decorators(defined[-1]), (
        f"{where}\n--- bank\n{ast.unparse(bank_node)}\n--- notebook\n{ast.unparse(defined[-1])}")


def _class_node(cls) -> ast.ClassDef:
    """A class's definition in its module, found by its methods' lines (chapter 6's bank defines
    PatchEmbedding three times, as its notebook does; inspect.getsource would give the first)."""
    module = sys.modules[cls.__module__]
    lines = {f.__code__.co_firstlineno for f in vars(cls).values() if hasattr(f, "__code__")}
    return next(n for n in ast.parse(inspect.getsource(module)).body if isinstance(n, ast.ClassDef)
                and n.name == cls.__name__ and any(n.lineno <= line <= n.end_lineno for line in lines))


def test_the_whole_submission_binds_every_answer_name_to_its_solution(tmp_path):
    """The file the CLI tests check (tests/answers/submission.py writes it from the banks) defines every
    question's answer name: a function or class of the solution's name, a value question's number."""
    found = runpy.run_path(str(write_submission(tmp_path / "answers.py")))
    for q in QUESTIONS:
        answer = found.get(q.answer_name)
        if q.kind == "value":
            assert answer == solution_of(q.id), q.id
        else:
            assert getattr(answer, "__name__", None) == q.answer_name and answer is not solution_of(q.id), q.id
    patch = next(q for q in QUESTIONS if q.answer_name == "PatchEmbedding" and q.id == "q4")
    assert set(inspect.signature(found["PatchEmbedding"]).parameters) == set(
        inspect.signature(solution_of(patch.id)).parameters)     # the last PatchEmbedding is q4's, as in the notebook


def test_the_named_mistakes_bench_counts_each_wrong_answer_once():
    """``python -m bench.named_mistakes``: one row per banked question with its wrong answers
    rejected and named (here q6's, all named), and the totals line."""
    from bench.named_mistakes import count, report

    rows = count(["q6"])
    assert [r["qid"] for r in rows] == ["q6"]
    row = rows[0]
    assert row["wrong"] == len(BANKS["q6"].wrong) and row["accepted"] == 0 and row["rejected"] == row["wrong"]
    assert row["named"] == row["as_expected"] == row["wrong"] and row["right"] == row["right_total"] > 1
    assert f"named_mistakes: wrong={row['wrong']} accepted=0" in report(rows)


def _written_code(answer) -> str | None:
    """The code of an answer written as its own top-level definition in a chapter file (decorators,
    name and docstring aside), or None for one built by a helper or from text."""
    module = sys.modules.get(getattr(answer, "__module__", ""))
    if module is None or getattr(module, getattr(answer, "__name__", ""), None) is not answer:
        return None
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(answer))).body[0]
    except (TypeError, OSError, SyntaxError, IndexError):
        return None
    if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name != getattr(answer, "__name__", None):
        return None
    node.name, node.decorator_list = "_", []
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(node)


@pytest.mark.slow      # 8 s: every pair of every bank's answers, parsed and compared
def test_no_two_bank_answers_of_a_question_have_the_same_code():
    """An answer in a bank twice (under two names) is checked twice and counted twice."""
    seen: dict = {}
    twice = []
    for qid, b in load().items():
        for answer in [b.solution, *b.variants, *b.right, *(a for a, _ in b.wrong)]:
            code = _written_code(answer)
            if code is None:
                continue
            other = seen.setdefault((qid, code), answer)
            if other is not answer:
                twice.append(f"{qid}: {answer_name(other)} and {answer_name(answer)}")
    assert not twice, f"the same code twice in a bank (keep one): {twice}"
