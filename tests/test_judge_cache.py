"""A grading job keeps what its judge worked out for one submission to use for the next: parameter
layouts (by structure) and reference outputs (by structure and inputs). None of it may carry one
answer into another's verdict: answers of different students, each on their own inputs, checked
interleaved in one process, get exactly the verdicts they get when each is checked alone with every
cache emptied first.

(Keeping the reference modules themselves by structure, with only their parameter values reloaded,
was tried and measured slower: checking that a run left a module unchanged cost more than building
it, 9.0 s against 8.1 s for 90 checks.)"""
from __future__ import annotations

import pytest

import autograder
from autograder.judging import variants
from autograder.judging.secret import SaltedSource
from autograder.questions import inputs
from answers.bank import load, solutions

BANKS = load()
# every question the judge builds modules for, and the functions beside them
CLASS_QUESTIONS = [q.id for q in autograder.questions() if q.kind == "class" and q.id in BANKS]
# (the training question is judged from a training run, not from reference modules: tests/test_training_question.py)
FUNCTION_QUESTIONS = [q.id for q in autograder.questions() if q.kind == "function" and q.id in BANKS
                      and not q.seconds]
# the fast loop: the stateful and the multi-module questions (a cache per step, stacked blocks, a whole ViT)
FAST = ("kv_cache", "decoder_block", "vit_forward", "q7b", "mha_loop")


def _answers(qid: str) -> list:
    """A class of four students: the solution, two different wrong answers and another right one."""
    bank = BANKS[qid]
    wrong = [answer for answer, _ in bank.wrong[:2]]
    right = [*bank.variants, *bank.right][:1]
    return [solutions()[qid], *wrong, *right]


def _verdict(qid: str, answer, student: int) -> tuple:
    """The check of one student's answer on that student's own inputs and parameter values, as
    the batch grader draws them (a salt per run): a module or output kept from another student
    holds other values."""
    with inputs.using(SaltedSource(1000 + student)):
        result = autograder.check(qid, answer)
    return result.passed, result.score, result.mistake, result.feedback


def _alone(pairs) -> list[tuple]:
    out = []
    for student, (qid, answer) in enumerate(pairs):
        variants.clear_caches()
        out.append(_verdict(qid, answer, student))
    return out


def _interleaved(pairs, rounds: int = 2) -> list[list[tuple]]:
    variants.clear_caches()
    return [[_verdict(qid, answer, student) for student, (qid, answer) in enumerate(pairs)]
            for _ in range(rounds)]


@pytest.mark.parametrize("qid", [pytest.param(q, marks=() if q in FAST else pytest.mark.slow)
                                 for q in CLASS_QUESTIONS + FUNCTION_QUESTIONS])
def test_interleaved_students_get_the_verdicts_they_get_alone(qid):
    pairs = [(qid, answer) for answer in _answers(qid)]
    alone = _alone(pairs)
    assert alone[0][0] and not alone[1][0], "the class must hold a right and a wrong answer"
    for round_verdicts in _interleaved(pairs):
        assert round_verdicts == alone


@pytest.mark.slow
def test_a_class_across_questions_interleaved_in_one_process():
    """One job grades many notebooks in turn: every question's students, mixed."""
    pairs = [(qid, answer) for qid in CLASS_QUESTIONS for answer in _answers(qid)[:2]]
    alone = _alone(pairs)
    variants.clear_caches()
    mixed = [_verdict(qid, answer, student) for student, (qid, answer) in reversed(list(enumerate(pairs)))]
    assert mixed == alone[::-1]
