"""The checks of chapters 1-4 (patches, embedding_lookup, q1, softmax, attention, attention_head,
q5, mha_loop) beyond their answer banks (tests/answers/ch01_tokens.py ... ch04_multihead_attention.py,
run by tests/test_answer_banks.py): what the cases exercise, latency, and gradients."""
import statistics
import time

import pytest

import autograder
from answers import solutions as S          # tests/answers (tests/ is on sys.path under pytest)
from answers.bank import load, solution_of

pytestmark = pytest.mark.usefixtures("one_thread")

QIDS = [q.id for q in autograder.questions() if q.chapter[:2] in ("01", "02", "03", "04") and q.kind != "value"]
BANKS = load()


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
    true for nn.Dropout and F.dropout(training=...) on the weights, in any parameter layout. The
    q5 bank holds such answers (test_answer_banks checks that they pass)."""
    names = {a.__name__ for a in BANKS["q5"].right}
    assert {"MHAFusedChunkFunctionalDropout", "MHAPermuteMaskedDropout"} <= names


def test_fully_masked_rows_accept_zeros_and_uniform_weights():
    """-inf then zeros (these right answers) and -1e9, uniform rows (the solutions) both pass:
    test_answer_banks checks each of them once."""
    names = {qid: {a.__name__ for a in BANKS[qid].right} for qid in QIDS}
    assert "attention_inf_then_zero_rows" in names["attention"]      # -inf then zeros
    assert "HeadZeroRows" in names["attention_head"] and "MHAInfZeroRows" in names["q5"]


# --------------------------------------------------------------------------- latency


def test_check_latency_median_below_0_3_s():
    timings = {}
    for qid in QIDS:
        autograder.check(qid, solution_of(qid))                          # warm the reference cache
        runs = []
        for _ in range(5):
            start = time.process_time()
            autograder.check(qid, solution_of(qid))
            runs.append(time.process_time() - start)
        timings[qid] = statistics.median(runs)
    assert max(timings.values()) < 0.3, timings


def test_zero_gradient_of_the_key_bias_is_not_a_detached_parameter():
    """The keys' bias gets a zero gradient by design (the softmax cancels q.b_k): a right
    answer whose key bias gets exactly zero must pass; a detached query layer must not."""
    from answers.ch03_attention import _Head

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
