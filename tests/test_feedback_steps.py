"""Feedback in two steps (autograder.judging.model.staged): the first time a student's own check
meets a mistake it names the symptom and asks a question that points at the cause; the same
mistake checked again gets the fix in code words. The counter lives with the caller (the student's
kernel: ``autograder.grade``); it changes the wording, never the score, and the grader's reports
(``check`` without a counter, nbgrader's own runs) keep the full text."""
from collections import Counter

import pytest

import autograder
from answers.ch05_blocks import PostNoResidualAroundAttention, PostNoResidualAroundMlp, ResidualGate
from autograder.judging.catalogue import entry

pytestmark = pytest.mark.usefixtures("one_thread")


def _mistake(qid, key):
    return next(m for m in entry(qid).catalogue if m.key == key)


def test_the_first_check_asks_and_the_second_gives_the_fix():
    seen: Counter = Counter()
    mistake = _mistake("post_ln_block", "residual_dropped")
    first = autograder.check("post_ln_block", PostNoResidualAroundAttention, seen=seen)
    second = autograder.check("post_ln_block", PostNoResidualAroundAttention, seen=seen)
    full = autograder.check("post_ln_block", PostNoResidualAroundAttention)
    assert first.mistake == second.mistake == full.mistake == "residual_dropped"
    assert "On input" in first.feedback and mistake.ask in first.feedback           # the symptom and a question
    assert mistake.hint not in first.feedback and mistake.title not in first.feedback   # not yet the fix
    assert second.feedback == full.feedback and mistake.hint in second.feedback
    assert first.score == second.score == full.score == 0 and not first.passed


def test_the_count_is_per_question_and_mistake():
    """Another answer with the same mistake is the mistake seen again; another mistake starts at one."""
    seen: Counter = Counter()
    autograder.check("post_ln_block", PostNoResidualAroundAttention, seen=seen)
    again = autograder.check("post_ln_block", PostNoResidualAroundMlp, seen=seen)
    other = autograder.check("q6", ResidualGate, seen=seen)
    assert _mistake("post_ln_block", "residual_dropped").hint in again.feedback
    assert other.mistake == "residual_multiplies" and _mistake("q6", "residual_multiplies").hint not in other.feedback
    assert seen == Counter({("post_ln_block", "residual_dropped"): 2, ("q6", "residual_multiplies"): 1})


def test_grade_counts_in_the_kernel_and_nbgrader_gets_the_full_text(monkeypatch):
    monkeypatch.setattr(autograder, "_SEEN", Counter())
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    hint = _mistake("q6", "residual_multiplies").hint
    with pytest.raises(AssertionError) as first:
        autograder.grade("q6", ResidualGate)
    with pytest.raises(AssertionError) as second:
        autograder.grade("q6", ResidualGate)
    assert hint not in str(first.value) and hint in str(second.value)
    monkeypatch.setattr(autograder, "_SEEN", Counter())
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError) as graded:
        autograder.grade("q6", ResidualGate)
    assert hint in str(graded.value) and not autograder._SEEN


def test_a_passing_answer_and_an_unnamed_failure_are_told_once():
    from answers.solutions import ResidualAdd

    seen: Counter = Counter()
    assert autograder.check("q6", ResidualAdd, seen=seen).passed and not seen

    def off(x, dim=-1):
        shifted = (x * 1.01) - (x * 1.01).amax(dim=dim, keepdim=True)
        return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)
    result = autograder.check("softmax", off, seen=seen)
    assert result.mistake is None and result.first_step == "" and not seen


def _embed_in_float32(token_ids, weight):
    """A lookup right to float32's precision only: the one-hot matrix and the weight cast to float32."""
    import torch.nn.functional as F
    return F.one_hot(token_ids, num_classes=weight.shape[0]).float() @ weight.float()


def test_a_symptom_the_failure_already_shows_gives_its_fix_the_second_time_only():
    """The float32 symptom is the failure's own sentence ("right to float32's precision only"):
    the first step adds the question, and only the second names the fix (dtype=x.dtype)."""
    seen: Counter = Counter()
    mistake = _mistake("embedding_lookup", "float32_precision")
    first = autograder.check("embedding_lookup", _embed_in_float32, seen=seen)
    second = autograder.check("embedding_lookup", _embed_in_float32, seen=seen)
    assert first.mistake == second.mistake == "float32_precision"
    assert "float32's precision only" in first.feedback and mistake.ask in first.feedback
    assert "dtype=" not in first.feedback and ".float()" not in first.feedback
    assert mistake.hint in second.feedback and mistake.ask not in second.feedback
