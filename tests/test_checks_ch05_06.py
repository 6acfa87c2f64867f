"""Chapters 5 and 6 (blocks, patch embedding): answers written the way students write them.

Every right answer (another formulation) passes; every realistic wrong answer fails and is
named: by the catalogue entry it should match (``result.mistake``), or by the property the
judge or the question's diagnosis names in the feedback. At least 90% are named per question
(here: all of them) and the dropout cases rely on seeded masks that correct variants reproduce.
"""
from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
import torch

import autograder
from answers import solutions as S
from answers.realistic_ch05_06 import RIGHT, WRONG
from autograder.judging.catalogue import entry

QIDS = ("q6", "q7", "q7b", "layernorm", "post_ln_block", "q2", "q3", "q4", "conv_patch_embedding")
PARTS = SimpleNamespace(**S.PARTS)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _ids(rows):
    seen = Counter()
    out = []
    for row in rows:
        qid, answer = row[0], row[1]
        seen[(qid, answer.__name__)] += 1
        out.append(f"{qid}-{answer.__name__}-{seen[(qid, answer.__name__)]}")
    return out


@pytest.mark.parametrize("qid, answer", RIGHT, ids=_ids(RIGHT))
def test_right_answer_passes(qid, answer):
    result = autograder.check(qid, answer)
    assert result.passed, result.feedback
    assert result.score == result.max_score


def _named(result, expected) -> bool:
    if isinstance(expected, tuple):
        return expected[1] in result.feedback
    return result.mistake == expected


@pytest.mark.parametrize("qid, answer, expected", WRONG, ids=_ids(WRONG))
def test_wrong_answer_is_rejected_and_named(qid, answer, expected):
    result = autograder.check(qid, answer)
    assert not result.passed, f"{qid}: a wrong answer ({expected}) passed: {result.feedback}"
    assert result.score == 0
    assert _named(result, expected), f"expected {expected}, got mistake={result.mistake}: {result.feedback}"
    assert "On input" in result.feedback or "Not accepted" in result.feedback


def test_enough_realistic_answers_and_naming_rate():
    by_question = defaultdict(list)
    for qid, answer, expected in WRONG:
        by_question[qid].append((answer, expected))
    rates = {}
    for qid in QIDS:
        rows = by_question[qid]
        assert len(rows) >= 6, f"{qid}: only {len(rows)} realistic wrong answers"
        results = [(autograder.check(qid, answer), expected) for answer, expected in rows]
        assert not any(r.passed for r, _ in results), qid
        rates[qid] = sum(_named(r, e) for r, e in results) / len(results)
    print("naming rate per question:", {q: f"{r:.0%}" for q, r in rates.items()})
    assert all(rate >= 0.9 for rate in rates.values()), rates


@pytest.mark.parametrize("qid", QIDS)
def test_new_catalogue_entries_name_themselves(qid):
    """Every entry (and its other forms), built from the course's solutions, is rejected and
    named: the catalogue's own consistency, for the entries this file added too."""
    for mistake in entry(qid).catalogue:
        for wrong in mistake.answers(PARTS):
            result = autograder.check(qid, wrong)
            assert not result.passed and result.mistake == mistake.key, (mistake.key, result.feedback)


def test_dropout_masks_are_reproduced_for_correct_variants():
    """The seeded p = 0.5 cases hold for nn.Dropout, F.dropout and one shared nn.Dropout alike."""
    q7b = autograder.question("q7b")
    seeded = [c for c in q7b.cases if c.params.get("train") and 0 < c.params.get("drop_p", 0) < 1]
    assert seeded and all(c.params["drop_p"] != c.params["forward_drop_p"] for c in seeded)
    for qid, answer in RIGHT:
        if qid in ("q7", "q7b"):
            assert autograder.check(qid, answer).passed, answer.__name__


def test_missing_bias_feedback_names_the_layer():
    wrong = next(a for q, a, e in WRONG if q == "conv_patch_embedding" and e == "no_bias")
    result = autograder.check("conv_patch_embedding", wrong)
    assert "proj (nn.Conv2d) has a weight but no bias" in result.feedback


def test_dropout_in_eval_mode_is_named_with_the_input():
    wrong = next(a for q, a, e in WRONG if q == "q7" and e == "dropout_always_on")
    result = autograder.check("q7", wrong)
    assert "eval mode" in result.feedback and "drop_p=0.5" in result.feedback


def test_the_feed_forward_block_takes_hidden_dim():
    """q7 builds FeedForwardBlock(E, hidden_dim=H) with H no multiple of E (vitref's signature, which
    chapters 7 and 8 call as FeedForwardBlock(dim, hidden_dim=mlp_dim)): the solution passes."""
    cases = [c for c in autograder.question("q7").cases if "hidden_dim" in c.params]
    assert cases and all(c.params["hidden_dim"] % c.params["E"] for c in cases)
    result = autograder.check("q7", S.FeedForwardBlock)
    assert result.passed, result.feedback
    assert S.FeedForwardBlock(6, hidden_dim=10)[0].out_features == 10


@pytest.mark.parametrize("name", ["FFNBeforeHiddenDim", "FFNHiddenDimUnused", "FFNKwargsSwallowHiddenDim"])
def test_an_answer_that_ignores_hidden_dim_is_rejected_and_named(name):
    """The answer written before the exercise took hidden_dim (right on every other input) and answers
    that take it without using it fail on the hidden_dim input only, named by the mistake."""
    answer = next(a for q, a, e in WRONG if q == "q7" and a.__name__ == name)
    result = autograder.check("q7", answer)
    assert not result.passed and result.score == 0
    assert result.mistake == "hidden_dim_ignored", result.feedback
    assert "hidden_dim ignored" in result.feedback
    assert "On input FeedForwardBlock(6, hidden_dim=10)" in result.feedback
    assert "input sets fail" not in result.feedback, "only the hidden_dim input fails"
