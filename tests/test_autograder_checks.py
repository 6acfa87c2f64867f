"""The in-process checks: the question list follows the contract; every question rejects, and
names, every mistake of its catalogue; shortcuts, lying tensors and crashing answers are handled.
(The solutions, variants and realistic answers: tests/test_answer_banks.py.)"""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autograder
from autograder.judging.catalogue import entry
from autograder.judging.judge import judge
from autograder.student.probe import probe
from answers import solutions as S          # tests/answers (tests/ is on sys.path under pytest)
from answers.bank import fast_sample, solution_of, solutions

QUESTIONS = autograder.questions()
PARTS = SimpleNamespace(**S.PARTS)

CONTRACT = {  # id -> answer name: what the notebooks define and their test cells grade (CONTRIBUTING.md, "Contracts")
    "q1": "getPositionEncoding", "q2": "PatchEmbedding", "q3": "PatchEmbedding", "q4": "PatchEmbedding",
    "q5": "MultiHeadAttention", "q6": "ResidualAdd", "q7": "FeedForwardBlock", "q7b": "TransformerEncoderBlock",
    "softmax": "softmax", "attention": "scaled_dot_product_attention", "causal_mask": "causal_mask",
    "cross_attention": "CrossAttention",
}


pytestmark = pytest.mark.usefixtures("one_thread")


def test_question_list_follows_the_contract():
    ids = [q.id for q in QUESTIONS]
    assert len(ids) == len(set(ids)) >= 20
    for qid, name in CONTRACT.items():
        assert autograder.question(qid).answer_name == name
    chapters = {q.chapter for q in QUESTIONS}
    assert chapters == {"01_tokens", "02_positional_encoding", "03_attention", "04_multihead_attention",
                        "05_blocks", "06_patch_embedding", "07_vit", "08_decoder", "09_training"}
    assert [q.id for q in autograder.questions("03_attention")] == ["softmax", "attention", "attention_head",
                                                                    "concept_masked_row"]
    for q in QUESTIONS:
        assert q.points > 0 and q.title
        assert len(entry(q.id).catalogue) >= 3, q.id
        assert len({m.key for m in entry(q.id).catalogue}) == len(entry(q.id).catalogue), q.id
    with pytest.raises(ValueError, match="unknown question id"):
        autograder.check("q99", S.softmax)
    with pytest.raises(ValueError, match="no questions for chapter"):
        autograder.questions("99_nothing")


# A training question takes a minute per check (its "overtime" mistake longer): its solution, its
# verdict and its mistakes are tested in tests/test_training_question.py (and its notebook by nbval,
# nbgrader and the sandboxed batch), not again here. A symptom (``detect``) has no answer of its own:
# the banks' realistic answers name it (tests/test_answer_banks.py).
TRAINING = {q.id for q in QUESTIONS if q.seconds}
CATALOGUE = [(q.id, m) for q in QUESTIONS if q.id not in TRAINING for m in entry(q.id).catalogue if m.build is not None]
CHANGES = [(q.id, m) for q in QUESTIONS if q.id not in TRAINING for m in entry(q.id).catalogue if m.change is not None]


@pytest.mark.parametrize("qid, mistake", fast_sample(CATALOGUE), ids=[f"{qid}-{m.key}" for qid, m in CATALOGUE])
def test_catalogue_mistake_is_rejected_and_named(qid, mistake):
    for wrong in mistake.answers(PARTS):          # the entry's answer and its other forms
        result = autograder.check(qid, wrong)
        assert not result.passed
        assert result.score == 0
        assert result.mistake == mistake.key, result.feedback
        assert mistake.title in result.feedback


@pytest.mark.parametrize("qid, mistake", CHANGES, ids=[f"{qid}-{m.key}" for qid, m in CHANGES])
def test_changed_reference_is_rejected_and_named(qid, mistake):
    """Every form of a counterfactual entry (the question's references with one part changed)
    applies to the question, is rejected and is named by its key and form: no form another entry
    already names, none that finds nothing to change."""
    question = autograder.question(qid)
    answers = mistake.change.answers(entry(qid).references())
    assert answers, f"{qid}/{mistake.key}: no form applies to the question's references"
    for wrong, detail in answers:
        # judged without the static scan, which refuses the grader's own code (vitref) as an answer
        result = judge(question, probe(question, wrong))
        assert "NotApplicable" not in result.feedback, f"{qid}/{mistake.key} {detail} finds nothing to change"
        assert not result.passed and result.score == 0, (detail, result.feedback)
        assert result.mistake == mistake.key, (detail, result.feedback)
        assert f"{mistake.title} {detail}".strip() in result.feedback


@pytest.mark.parametrize("qid", sorted({qid for qid, _ in CATALOGUE}))
def test_grade_raises_the_checks_feedback_on_a_wrong_answer(qid, monkeypatch):
    """``grade`` is ``check`` plus an AssertionError (what nbgrader counts): once per question,
    not again for every mistake the test above already checked. In nbgrader's own runs
    (``NBGRADER_EXECUTION``) the feedback is the full one, the mistake named."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    mistake = entry(qid).catalogue[0]
    wrong = mistake.answers(PARTS)[0]
    with pytest.raises(AssertionError, match="not yet") as raised:
        autograder.grade(qid, wrong)
    assert mistake.title in str(raised.value)


def test_feedback_names_shapes_and_the_failing_input():
    def transposed(q, k, v, mask=None):
        out, weights = S.scaled_dot_product_attention(q, k, v, mask)
        return (out.transpose(-2, -1) if q.dim() == 3 and k.shape[-2] != q.shape[-2] else out), weights

    result = autograder.check("attention", transposed)
    assert not result.passed
    assert "expected out of shape (2, 5, 6) = (B, T, d_v), got (2, 6, 5) = (B, d_v, T)" in result.feedback
    assert "q (2, 5, 8), k (2, 7, 8), v (2, 7, 6)" in result.feedback


def test_unknown_wrong_answer_gets_numbers_but_no_mistake_name():
    def off(x, dim=-1):
        return S.softmax(x * 1.01, dim)         # a softmax (slices sum to 1) of slightly other numbers

    result = autograder.check("softmax", off)
    assert not result.passed and result.mistake is None
    assert "should be" in result.feedback and "got" in result.feedback


# --------------------------------------------------------------------------- shortcuts

_captured_softmax = torch.softmax


def sm_torch(x, dim=-1):
    return torch.softmax(x, dim)


def sm_functional(x, dim=-1):
    return F.softmax(x, dim=dim)


def sm_method(x, dim=-1):
    return x.softmax(dim)


def sm_module(x, dim=-1):
    return nn.Softmax(dim=dim)(x)


def sm_captured(x, dim=-1):
    return _captured_softmax(x, dim)


def sm_getattr(x, dim=-1):
    return getattr(torch, "soft" + "max")(x, dim)


def attention_sdpa(q, k, v, mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.bool())
    return out, S.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5)


class MHATorch(nn.Module):
    def __init__(self, emb_size=768, num_heads=8, dropout=0.0):
        super().__init__()
        self.mha = nn.MultiheadAttention(emb_size, num_heads, batch_first=True)

    def forward(self, x, mask=None):
        return self.mha(x, x, x, need_weights=False)[0]


class LayerNormTorch(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x):
        return self.norm(x)


class LayerNormFunctional(S.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def ce_torch(logits, targets):
    return F.cross_entropy(logits, targets)


def ce_module(logits, targets):
    return nn.CrossEntropyLoss()(logits, targets)


def ce_nll(logits, targets):
    return F.nll_loss(F.log_softmax(logits, -1), targets)


def embed_torch(token_ids, weight):
    return F.embedding(token_ids, weight)


SHORTCUTS = [
    ("softmax", sm_torch, "library softmax"), ("softmax", sm_functional, "library softmax"),
    ("softmax", sm_method, "library softmax"), ("softmax", sm_module, "library softmax"),
    ("softmax", sm_captured, "library softmax"), ("softmax", sm_getattr, "library softmax"),
    ("attention", attention_sdpa, "built-in attention"), ("q5", MHATorch, "built-in attention"),
    ("layernorm", LayerNormTorch, "LayerNorm"), ("layernorm", LayerNormFunctional, "LayerNorm"),
    ("cross_entropy", ce_torch, "cross-entropy"), ("cross_entropy", ce_module, "cross-entropy"),
    ("cross_entropy", ce_nll, "cross-entropy"), ("embedding_lookup", embed_torch, "embedding lookup"),
]


@pytest.mark.parametrize("qid, answer, words", SHORTCUTS, ids=[f"{q}-{a.__name__}" for q, a, _ in SHORTCUTS])
def test_forbidden_shortcut_is_rejected_with_a_message(qid, answer, words):
    result = autograder.check(qid, answer)
    assert not result.passed
    assert result.mistake == "shortcut"
    assert "Not accepted" in result.feedback and words in result.feedback


def test_shortcut_tripwire_restores_the_library():
    autograder.check("softmax", sm_torch)
    assert torch.softmax is _captured_softmax
    assert torch.allclose(F.softmax(torch.zeros(3), 0), torch.full((3,), 1 / 3))


def test_answers_using_vitref_are_rejected():
    import vitref

    def uses_vitref(x, dim=-1):
        return vitref.softmax(x, dim)

    class SubclassesVitref(vitref.MultiHeadAttention):
        pass

    for qid, answer in (("softmax", uses_vitref), ("q5", SubclassesVitref), ("softmax", vitref.softmax),
                        ("q1", lambda s, d, n=10000: vitref.sinusoidal_encoding(s, d, n))):
        result = autograder.check(qid, answer)
        assert not result.passed and result.mistake == "shortcut", result.feedback
        assert "vitref" in result.feedback


def test_hidden_library_call_is_caught_at_the_dispatcher():
    """A computed name and a switched-off profiler do not hide a forbidden call: the
    operator itself is disabled while the answer runs."""
    import sys

    def sneaky(x, dim=-1):
        sys.setprofile(None)
        return getattr(torch._C._VariableFunctions, "soft" + "max")(x, dim)

    result = autograder.check("softmax", sneaky)
    assert not result.passed and result.mistake == "shortcut", result.feedback
    assert "aten::" in result.feedback and "library softmax" in result.feedback
    assert torch.allclose(torch.softmax(torch.zeros(2), 0), torch.full((2,), 0.5))   # restored after check()


def test_own_softmax_with_the_profiler_switched_off_passes():
    import sys

    def own(x, dim=-1):
        sys.setprofile(None)
        return S.softmax(x, dim)

    assert autograder.check("softmax", own).passed


# --------------------------------------------------------------------------- untrusted outputs


class LyingTensor(torch.Tensor):
    def __eq__(self, other):
        return True

    def allclose(self, *args, **kwargs):
        return True


class LyingArray(np.ndarray):
    def __eq__(self, other):
        return np.ones(np.shape(self), dtype=bool)


def test_lying_tensor_subclass_is_rejected():
    result = autograder.check("softmax", lambda x, dim=-1: S.softmax(x, dim).as_subclass(LyingTensor))
    assert not result.passed
    assert "LyingTensor, a subclass of torch.Tensor" in result.feedback
    result = autograder.check("causal_mask", lambda T: np.tril(np.ones((T, T))).view(LyingArray))
    assert not result.passed and "subclass of numpy.ndarray" in result.feedback


def test_other_return_types_are_explained():
    assert "forget a return statement" in autograder.check("softmax", lambda x, dim=-1: None).feedback
    assert "should return a tuple (out, weights)" in autograder.check(
        "attention", lambda q, k, v, mask=None: q).feedback
    assert "mask is a list of 1 items; expected a single tensor" in autograder.check(
        "causal_mask", lambda T: [[1] * T] * T).feedback
    assert "expected a torch.Tensor or numpy array" in autograder.check("causal_mask", lambda T: "mask").feedback


# --------------------------------------------------------------------------- student exceptions


def test_student_exceptions_become_feedback():
    def raises(x, dim=-1):
        raise ValueError("my own message")

    result = autograder.check("softmax", raises)
    assert not result.passed
    assert "your code raised ValueError: my own message" in result.feedback
    assert "On input x (2, 5), default dim" in result.feedback
    assert "raise ValueError" in result.feedback          # the student's line is quoted

    class Blank(nn.Module):                                 # what nbgrader leaves in an exercise
        def __init__(self, fn):
            super().__init__()
            raise NotImplementedError()

    result = autograder.check("q6", Blank)
    assert not result.passed and "NotImplementedError" in result.feedback

    class Recursive(S.ResidualAdd):
        def forward(self, x, **kwargs):
            return self(x)

    assert "RecursionError" in autograder.check("q6", Recursive).feedback


def test_wrong_kind_of_answer_is_explained():
    assert "should be a class" in autograder.check("q5", S.softmax).feedback
    assert "should be a function" in autograder.check("softmax", S.LayerNorm).feedback
    assert "should be a function" in autograder.check("softmax", 42).feedback


def test_weights_the_answer_overwrites_do_not_help():
    class ZeroingFFN(S.FeedForwardBlock):
        def forward(self, x):
            with torch.no_grad():
                for p in self.parameters():
                    p.zero_()
            return super().forward(x)

    assert not autograder.check("q7", ZeroingFFN).passed

    class LayersInForward(nn.Module):
        def __init__(self, emb_size, expansion=4, drop_p=0.0):
            super().__init__()
            self.e, self.x = emb_size, expansion

        def forward(self, x):
            self.net = S.FeedForwardBlock(self.e, self.x)
            return self.net(x)

    result = autograder.check("q7", LayersInForward)
    assert not result.passed and result.mistake == "parameters_made_in_forward"
    assert "creates new parameters" in result.feedback
    assert "Create every layer and nn.Parameter in __init__" in result.feedback


def test_check_is_fast_for_a_warm_kernel():
    import time

    for qid in ("q1", "attention", "q5"):
        autograder.check(qid, solution_of(qid))
        start = time.process_time()
        for _ in range(3):
            autograder.check(qid, solution_of(qid))
        assert (time.process_time() - start) / 3 < 0.3, qid


# --------------------------------------------------------------------------- a tuple where a tensor is due

# The questions whose contract returns a pair (attention: (out, weights); kv_cache: (out, cache)), and
# q2, which reads module.projection (an nn.Sequential), not the student's forward.
RETURNS_A_PAIR = {"attention", "attention_head", "kv_cache", "q2"}
TENSOR_CONTRACTS = [q.id for q in QUESTIONS if q.kind != "value" and not q.seconds and q.id not in RETURNS_A_PAIR]


def _always_a_pair(answer):
    """``answer`` returning ``(its result, None)`` wherever it returned one tensor."""
    if isinstance(answer, type):
        class Paired(answer):
            def forward(self, *args, **kwargs):
                out = super().forward(*args, **kwargs)
                return out if isinstance(out, tuple) else (out, None)
        Paired.__name__ = answer.__name__
        return Paired

    def paired(*args, **kwargs):
        out = answer(*args, **kwargs)
        return out if isinstance(out, tuple) else (out, None)
    paired.__name__ = answer.__name__
    return paired


@pytest.mark.parametrize("qid", TENSOR_CONTRACTS)
def test_a_tuple_is_refused_where_the_contract_returns_a_tensor(qid):
    """The grader used to take the first item of any tuple: a MultiHeadAttentionLoop that always
    returned (out, weights) passed. Every question whose contract returns a tensor refuses the
    solution made to return (out, None)."""
    result = autograder.check(qid, _always_a_pair(solutions()[qid]))
    assert not result.passed and result.score == 0, result.feedback
    assert "tuple" in result.feedback, result.feedback
