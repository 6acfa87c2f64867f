"""Chapters 1-4: realistic right answers pass, realistic wrong answers fail and are named
(by a catalogue key or by the property the feedback names). See tests/answers/realistic_ch01_04.py."""
import time

import pytest
import torch

import autograder
from answers import solutions as S
from answers.realistic_ch01_04 import RIGHT, WRONG

QIDS = ["patches", "embedding_lookup", "q1", "softmax", "attention", "attention_head", "q5", "mha_loop"]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _name(obj):
    return getattr(obj, "__name__", type(obj).__name__)


RIGHT_CASES = [(qid, a) for qid in QIDS for a in RIGHT.get(qid, [])]
WRONG_CASES = [(qid, a, e) for qid in QIDS for a, e in WRONG.get(qid, [])]


def test_every_question_has_enough_realistic_answers():
    for qid in QIDS:
        assert len(WRONG.get(qid, [])) >= 6, qid
        assert len(RIGHT.get(qid, [])) >= 2, qid


@pytest.mark.parametrize("qid, answer", RIGHT_CASES, ids=[f"{q}-{_name(a)}" for q, a in RIGHT_CASES])
def test_right_answer_passes(qid, answer):
    result = autograder.check(qid, answer)
    assert result.passed, result.feedback


def _named(result, expected) -> bool:
    if expected.startswith("words: "):
        return expected[len("words: "):].lower() in result.feedback.lower()
    return result.mistake == expected


@pytest.mark.parametrize("qid, answer, expected", WRONG_CASES,
                         ids=[f"{q}-{i}-{e.replace(' ', '_')[:40]}" for i, (q, _, e) in enumerate(WRONG_CASES)])
def test_wrong_answer_fails_and_is_named(qid, answer, expected):
    result = autograder.check(qid, answer)
    assert not result.passed and result.score == 0, f"a wrong answer ({expected}) passed"
    assert _named(result, expected), f"expected {expected!r}, got mistake={result.mistake!r}: {result.feedback}"


def test_naming_rate():
    named = 0
    for qid, answer, expected in WRONG_CASES:
        result = autograder.check(qid, answer)
        assert not result.passed
        named += _named(result, expected)
    rate = named / len(WRONG_CASES)
    print(f"\nchapters 1-4: {len(RIGHT_CASES)} right answers, {len(WRONG_CASES)} wrong answers, "
          f"{named} named ({rate:.0%})")
    assert rate >= 0.9


@pytest.mark.parametrize("qid", QIDS)
def test_check_latency(qid):
    autograder.check(qid, S.ANSWERS[qid])
    times = []
    for _ in range(5):
        start = time.perf_counter()
        assert autograder.check(qid, S.ANSWERS[qid]).passed
        times.append(time.perf_counter() - start)
    times.sort()
    assert times[2] < 0.3, f"{qid}: median {times[2]:.3f} s"
