"""The checks of chapters 1-4 (patches, embedding_lookup, q1, softmax, attention,
attention_head, q5, mha_loop) against answers written the way students write them
(tests/answers/realistic_ch01_04.py and realistic_ch01_04_b.py): every right answer passes, every wrong answer fails,
and at least 90% of the wrong answers are named (the catalogue's key, or the property the
feedback names)."""
import functools
import statistics
import time

import pytest
import torch

import autograder
from answers import solutions as S          # tests/answers (tests/ is on sys.path under pytest)
from answers import realistic_ch01_04_b as B
from answers.realistic_ch01_04 import RIGHT as RIGHT_A, WRONG as WRONG_A

# two independently written sets: realistic_ch01_04 (WRONG: (qid, answer, expected), "~words") and
# realistic_ch01_04_b (WRONG: qid -> [(answer, expected)], "words: ..."), merged here
RIGHT = {qid: list(RIGHT_A.get(qid, [])) + list(B.RIGHT.get(qid, [])) for qid in sorted(set(RIGHT_A) | set(B.RIGHT))}
WRONG = list(WRONG_A) + [(qid, answer, "~" + expected[len("words: "):] if expected.startswith("words: ") else expected)
                         for qid, pairs in B.WRONG.items() for answer, expected in pairs]

QIDS = ("patches", "embedding_lookup", "q1", "softmax", "attention", "attention_head", "q5", "mha_loop")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.lru_cache(maxsize=None)
def verdict(qid, index):
    """The result for WRONG[index] (cached: the naming-rate test reuses it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return autograder.check(qid, WRONG[index][1])
    finally:
        torch.set_num_threads(threads)


def named(result, expected) -> bool:
    if expected.startswith("~"):
        return expected[1:].lower() in result.feedback.lower()
    return result.mistake == expected


def _name(answer) -> str:
    return getattr(answer, "__name__", type(answer).__name__)


RIGHT_CASES = [(qid, a) for qid, answers in RIGHT.items() for a in answers]
WRONG_IDS = [f"{qid}-{i}-{_name(a)}" for i, (qid, a, _) in enumerate(WRONG)]


def test_every_question_has_right_and_at_least_six_wrong_answers():
    assert set(RIGHT) == set(QIDS)
    for qid in QIDS:
        assert sum(1 for q, _, _ in WRONG if q == qid) >= 6, qid


@pytest.mark.parametrize("qid, answer", RIGHT_CASES, ids=[f"{q}-{_name(a)}" for q, a in RIGHT_CASES])
def test_right_answer_passes(qid, answer):
    result = autograder.check(qid, answer)
    assert result.passed, result.feedback


@pytest.mark.parametrize("index", range(len(WRONG)), ids=WRONG_IDS)
def test_wrong_answer_is_rejected(index):
    qid, answer, expected = WRONG[index]
    result = verdict(qid, index)
    assert not result.passed, f"{qid}: {_name(answer)} (a {expected} mistake) was accepted"
    assert result.score == 0
    assert "On input" in result.feedback or "Not accepted" in result.feedback


@pytest.mark.parametrize("index", range(len(WRONG)), ids=WRONG_IDS)
def test_wrong_answer_is_named(index):
    qid, answer, expected = WRONG[index]
    result = verdict(qid, index)
    assert named(result, expected), (f"{_name(answer)}: expected {expected}, got mistake={result.mistake}: "
                                     f"{result.feedback}")


def test_naming_rate_is_at_least_90_percent(capsys):
    rates = {}
    for qid in QIDS:
        indices = [i for i, (q, _, _) in enumerate(WRONG) if q == qid]
        hits = sum(named(verdict(qid, i), WRONG[i][2]) and not verdict(qid, i).passed for i in indices)
        rates[qid] = (hits, len(indices))
    total = sum(h for h, _ in rates.values()), sum(n for _, n in rates.values())
    with capsys.disabled():
        print("\nnaming rate: " + ", ".join(f"{q} {h}/{n}" for q, (h, n) in rates.items())
              + f"; all {total[0]}/{total[1]} = {total[0] / total[1]:.0%}")
    assert total[0] >= 0.9 * total[1]
    for qid, (hits, count) in rates.items():
        assert hits >= 0.9 * count, (qid, hits, count)


# --------------------------------------------------------------------------- what the cases exercise


def _params(qid):
    return [case.params for case in autograder.question(qid).cases]


def test_module_questions_use_several_heads_masks_float64_and_gradients():
    for qid in ("q5", "mha_loop"):
        params = _params(qid)
        assert all(p["h"] >= 2 for p in params), qid
        assert any(p.get("full_rows") for p in params), qid                      # a fully masked row
        assert any(p.get("dtype") == "float64" and p.get("grads") and p.get("param_grads") for p in params), qid
    for qid in ("attention", "attention_head"):
        assert any(p.get("full_rows") for p in _params(qid)), qid
        assert any(p.get("dtype") == "float64" for p in _params(qid)), qid
    assert any(p.get("grads") and p.get("param_grads") for p in _params("attention_head"))
    assert any(p.get("attention") and p.get("mask") for p in _params("mha_loop"))   # return_attention=True
    for qid in ("patches", "embedding_lookup", "softmax"):
        assert any(p.get("dtype") == "float64" for p in _params(qid)), qid


def test_q5_dropout_cases_eval_train_and_seeded():
    params = [p for p in _params("q5") if "dropout" in p]
    assert any(not p["train"] and p["dropout"] > 0 for p in params)                 # eval: no dropout
    assert any(p["train"] and p["dropout"] == 1.0 for p in params)                  # deterministic
    assert any(p["train"] and p["dropout"] == 0.5 and p.get("dtype") == "float64" and "reseed" in p
               for p in params)


def test_seeded_dropout_reproduces_for_other_formulations():
    """Train mode with p = 0.5 relies on the dropout drawing the same mask as the reference:
    true for nn.Dropout and F.dropout(training=...) on the weights, in any parameter layout."""
    for answer in (S.MultiHeadAttention, *RIGHT["q5"]):
        result = autograder.check("q5", answer)
        assert result.passed, (answer.__name__, result.feedback)


def test_fully_masked_rows_accept_zeros_and_uniform_weights():
    names = {qid: {a.__name__ for a in RIGHT[qid]} for qid in RIGHT}
    assert "attention_inf_then_zero_rows" in names["attention"]      # -inf then zeros
    assert "HeadZeroRows" in names["attention_head"] and "MHAInfZeroRows" in names["q5"]
    for qid in ("attention", "attention_head", "q5", "mha_loop"):    # -1e9: uniform rows
        assert autograder.check(qid, S.ANSWERS[qid]).passed


def test_feedback_names_the_input_and_shapes_for_the_weights():
    from answers.realistic_ch01_04 import LoopStackDim0

    result = autograder.check("mha_loop", LoopStackDim0)
    assert not result.passed and result.mistake == "weights_stacked_dim0"
    assert "expected weights of shape (3, 2, 5, 5)" in result.feedback
    assert "return_attention=True" in result.feedback


def test_bias_false_is_rejected_with_a_message():
    from answers.realistic_ch01_04 import HeadNoBias

    result = autograder.check("attention_head", HeadNoBias)
    assert not result.passed and result.mistake == "no_bias"
    assert "has no bias" in result.feedback or "have no bias" in result.feedback


# --------------------------------------------------------------------------- latency


def test_check_latency_median_below_0_3_s():
    timings = {}
    for qid in QIDS:
        autograder.check(qid, S.ANSWERS[qid])                          # warm the reference cache
        runs = []
        for _ in range(5):
            start = time.process_time()
            autograder.check(qid, S.ANSWERS[qid])
            runs.append(time.process_time() - start)
        timings[qid] = statistics.median(runs)
    assert max(timings.values()) < 0.3, timings


def test_zero_gradient_of_the_key_bias_is_not_a_detached_parameter():
    """The keys' bias gets a zero gradient by design (the softmax cancels q.b_k): a right
    answer whose key bias gets exactly zero must pass; a detached query layer must not."""
    from answers.realistic_ch01_04 import _Head

    class ExactZeroKeyBias(_Head):
        def forward(self, x, mask=None):
            k = self.key(x)
            k = k - self.key.bias + self.key.bias.detach() * 1 + 0 * self.key.bias   # bias reached, gradient 0
            return S.scaled_dot_product_attention(self.query(x), k, self.value(x), mask)

    class DetachedQuery(_Head):
        def forward(self, x, mask=None):
            return S.scaled_dot_product_attention(self.query(x).detach(), self.key(x), self.value(x), mask)

    assert autograder.check("attention_head", ExactZeroKeyBias).passed
    result = autograder.check("attention_head", DetachedQuery)
    assert not result.passed and "the gradient of the parameter query.weight" in result.feedback
