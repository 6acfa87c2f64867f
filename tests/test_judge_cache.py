"""The judge keeps what it built for one submission to use for the next: reference modules by
structure (:class:`autograder.judging.variants.ModulePool`, only their parameter values reloaded),
parameter layouts and reference outputs. None of it may carry one answer into another's verdict:
answers of different students, checked interleaved in one process, get exactly the verdicts they
get when each is checked alone with every cache emptied first."""
from __future__ import annotations

import pytest
import torch
from torch import nn

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


class _Counter(nn.Module):
    """A module that keeps state across calls, as a cache does."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("calls", torch.zeros(()))
        self.seen: list = []

    def forward(self, x):
        self.seen.append(x.shape[0])
        return self.proj(x)


def test_the_pool_reuses_a_module_its_run_left_unchanged():
    pool = variants.ModulePool()
    first = pool.take(nn.Linear, (3, 4), {}, False)
    pool.give_back([first])
    assert pool.take(nn.Linear, (3, 4), {}, False) is first
    assert pool.take(nn.Linear, (3, 4), {}, False) is not first      # one build, one module
    assert pool.take(nn.Linear, (4, 3), {}, False) is not first      # another structure


@pytest.mark.parametrize("change", ["list", "buffer", "submodule", "frozen", "eval"])
def test_the_pool_never_reuses_a_module_its_run_changed(change):
    pool = variants.ModulePool()
    module = pool.take(_Counter, (3,), {}, False)
    if change == "list":
        module(torch.zeros(2, 3, dtype=torch.float64))
    elif change == "buffer":
        module.calls += 1
    elif change == "submodule":
        module.proj = nn.Identity()
    elif change == "frozen":
        module.proj.weight.requires_grad_(False)
    else:
        module.train(True)
    pool.give_back([module])
    assert pool.take(_Counter, (3,), {}, False) is not module


def test_a_module_built_from_another_object_is_never_reused():
    pool = variants.ModulePool()
    wrapped = nn.Linear(3, 3)
    module = pool.take(nn.Sequential, (wrapped,), {}, False)
    pool.give_back([module])
    assert pool.take(nn.Sequential, (wrapped,), {}, False) is not module
