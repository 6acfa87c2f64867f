"""Chapters 7 and 8 beyond their answer banks (tests/answers/ch07_vit.py, ch08_decoder.py, run by
tests/test_answer_banks.py): latency, the checks' properties, and cross_entropy's ban on a library
log-softmax, which holds for every alias at PyTorch's dispatcher."""
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import autograder
from answers import solutions as S
from answers.bank import load, solution_of

pytestmark = pytest.mark.usefixtures("one_thread")

QIDS = [q.id for q in autograder.questions() if q.chapter[:2] in ("07", "08") and q.kind != "value"]


@pytest.mark.parametrize("qid", QIDS)
def test_check_latency(qid):
    autograder.check(qid, solution_of(qid))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        assert autograder.check(qid, solution_of(qid)).passed
        times.append(time.perf_counter() - start)
    times.sort()
    assert times[2] < 0.3, f"{qid}: median {times[2]:.3f} s"


# --------------------------------------------------------------------------- the checks' properties


def test_vit_attention_maps_of_every_layer_are_compared():
    """A ViT whose last block returns another block's weights is caught: every layer's map
    is compared, not just the first or the logits."""
    class ViTRepeatedMap(S.ViT):
        def forward(self, x, return_attention=False):
            logits, maps = super().forward(x, return_attention=True)
            return (logits, [maps[0]] * len(maps)) if return_attention else logits

    result = autograder.check("vit_forward", ViTRepeatedMap)
    assert not result.passed
    assert "attention map of block 1" in result.feedback


def test_cross_attention_key_value_layout_is_the_exercises():
    """(h kv d) and (h d kv) splits of key_value give other outputs with >= 2 heads: rejected
    and named, while (kv h d) by rearrange or by chunk passes (the cross_attention bank's
    CrossKVPerHead and CrossEinsumChunk, which test_answer_banks checks)."""
    bank = load()["cross_attention"]
    assert "CrossEinsumChunk" in {a.__name__ for a in bank.right}
    assert ("CrossKVPerHead", "kv_layout") in {(a.__name__, e) for a, e in bank.wrong}
    assert all(case.params["h"] >= 2 for case in autograder.question("cross_attention").cases)


def test_cross_attention_fully_masked_query_must_not_be_nan():
    """Zeros for a fully masked query are fine (the bank's CrossViewPermuteNanToNum passes)."""
    question = autograder.question("cross_attention")
    assert any(case.params.get("full_rows") for case in question.cases)
    assert "CrossViewPermuteNanToNum" in {a.__name__ for a in load()["cross_attention"].right}


def test_decoder_block_future_independence_is_diagnosed():
    """A causal mask that is wrong in a way no wrong answer of the catalogue reproduces is named by
    the symptom: the outputs depend on future positions."""
    from answers.ch08_decoder import _DecoderBase

    class HalfCausal(_DecoderBase):
        def forward(self, x, context, self_mask=None):
            T = x.shape[1]
            mask = None
            if self_mask == "causal":
                mask = torch.ones(T, T, dtype=torch.bool).tril()
                mask[0, -1] = True                           # query 0 sees the last token
            x = x + self.self_attn(self.norm1(x), mask=mask)
            x = x + self.cross_attn(self.norm2(x), context)
            return x + self.mlp(self.norm3(x))

    result = autograder.check("decoder_block", HalfCausal)
    assert not result.passed and result.mistake == "sees_the_future"
    assert "depends on future positions" in result.feedback


def test_causal_mask_diagnosis_names_the_position():
    def leaky(T):
        mask = torch.ones(T, T).tril()
        mask[1, 3 % T] = 1
        return mask

    result = autograder.check("causal_mask", leaky)
    assert not result.passed
    assert "lets query 1 attend the later key 3" in result.feedback


def test_cross_entropy_checks_float64_and_the_gradient():
    cases = autograder.question("cross_entropy").cases
    assert any(c.params.get("dtype") == "float64" for c in cases)
    assert any(c.params.get("grads") for c in cases)

    def off_gradient(logits, targets):                       # right value, gradient scaled by 2
        loss = S.cross_entropy(logits, targets)
        return loss + (loss - loss.detach())

    result = autograder.check("cross_entropy", off_gradient)
    assert not result.passed and "grad_logits" in result.feedback


# --------------------------------------------------------------------------- cross_entropy's ban

def _pick(log_probs, targets):
    return -log_probs[torch.arange(targets.shape[0]), targets].mean()


# Every route to a library log-softmax, softmax or loss; names computed so that only the
# dispatcher-level ban (not the source scan) can stop them.
_LOG = "log_" + "soft" + "max"
_SOFT = "soft" + "max"
ALIASES = {
    "F.log_softmax": lambda z, t: _pick(getattr(F, _LOG)(z, dim=-1), t),
    "torch.log_softmax": lambda z, t: _pick(getattr(torch, _LOG)(z, -1), t),
    "Tensor.log_softmax": lambda z, t: _pick(getattr(z, _LOG)(-1), t),
    "nn.LogSoftmax": lambda z, t: _pick(getattr(nn, "Log" + "Soft" + "max")(dim=-1)(z), t),
    "torch.special.log_softmax": lambda z, t: _pick(getattr(torch.special, _LOG)(z, -1), t),
    "torch._log_softmax": lambda z, t: _pick(getattr(torch, "_" + _LOG)(z, -1, False), t),
    "aten._log_softmax": lambda z, t: _pick(getattr(torch.ops.aten, "_" + _LOG).default(z, -1, False), t),
    "aten.log_softmax.int": lambda z, t: _pick(getattr(torch.ops.aten, _LOG).int(z, -1), t),
    "torch._C._VariableFunctions.log_softmax": lambda z, t: _pick(
        getattr(torch._C._VariableFunctions, _LOG)(z, -1), t),
    "F.softmax": lambda z, t: _pick(torch.log(getattr(F, _SOFT)(z, dim=-1)), t),
    "torch.softmax": lambda z, t: _pick(torch.log(getattr(torch, _SOFT)(z, -1)), t),
    "Tensor.softmax": lambda z, t: _pick(torch.log(getattr(z, _SOFT)(-1)), t),
    "nn.Softmax": lambda z, t: _pick(torch.log(getattr(nn, "Soft" + "max")(dim=-1)(z)), t),
    "F.softmin": lambda z, t: _pick(torch.log(getattr(F, "soft" + "min")(-z, dim=-1)), t),
    "F.cross_entropy": lambda z, t: getattr(F, "cross_" + "entropy")(z, t),
    "nn.CrossEntropyLoss": lambda z, t: getattr(nn, "Cross" + "EntropyLoss")()(z, t),
    "F.nll_loss": lambda z, t: getattr(F, "nll_" + "loss")(z - torch.logsumexp(z, -1, keepdim=True), t),
    "torch._C._nn.cross_entropy_loss": lambda z, t: getattr(torch._C._nn, "cross_" + "entropy_loss")(z, t, None, 1),
}


def _as_answer(name, fn):
    def cross_entropy(logits, targets):
        return fn(logits, targets)
    cross_entropy.__qualname__ = f"alias_{name}"
    return cross_entropy


@pytest.mark.parametrize("name", list(ALIASES))
def test_cross_entropy_library_aliases_are_disabled_at_the_dispatcher(name):
    from autograder.judging.scan import scan_object

    answer = _as_answer(name, ALIASES[name])
    question = autograder.question("cross_entropy")
    assert scan_object(answer, question.answer_name, question.forbidden) == []   # the scan sees nothing...
    result = autograder.check("cross_entropy", answer)
    assert not result.passed and result.mistake == "shortcut", result.feedback     # ...the dispatcher does
    assert "Not accepted" in result.feedback and "cross-entropy or log-softmax" in result.feedback
    z, t = torch.randn(3, 4, dtype=torch.float64), torch.tensor([0, 3, 1])
    assert torch.allclose(ALIASES[name](z, t), F.cross_entropy(z, t))             # restored after the check


@pytest.mark.parametrize("source", [
    "F.log_softmax(logits, dim=-1)", "torch.log_softmax(logits, -1)", "logits.log_softmax(-1)",
    "nn.LogSoftmax(dim=-1)(logits)", "torch.log(F.softmax(logits, -1))", "torch.log(logits.softmax(-1))",
])
def test_cross_entropy_library_log_softmax_is_rejected_by_name(source):
    namespace = {"torch": torch, "F": F, "nn": nn}
    exec(f"def cross_entropy(logits, targets):\n"  # noqa: S102 - builds an answer the way a notebook cell defines it
         f"    log_probs = {source}\n"
         f"    return -log_probs[torch.arange(len(targets)), targets].mean()\n", namespace)
    result = autograder.check("cross_entropy", namespace["cross_entropy"])
    assert not result.passed and result.mistake == "shortcut", result.feedback


def test_cross_entropy_own_log_softmax_with_logsumexp_passes():
    def own(logits, targets):
        return _pick(logits - torch.logsumexp(logits, dim=-1, keepdim=True), targets)

    assert autograder.check("cross_entropy", own).passed


def test_cross_entropy_constant_factor_is_diagnosed():
    def halved(logits, targets):
        log_probs = logits - torch.logsumexp(logits, -1, keepdim=True)
        return -0.5 * log_probs[torch.arange(len(targets)), targets].mean()

    result = autograder.check("cross_entropy", halved)
    assert not result.passed and result.mistake == "loss_scaled"
    assert "0.5 times the expected one on every input" in result.feedback


def test_vit_wrong_positions_are_diagnosed_before_the_blocks():
    from answers.ch07_vit import _ViTBase

    class HalfPositions(_ViTBase):
        def forward(self, x, return_attention=False):
            x = self.patch_embed(x)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + 0.5 * self.pos_embed
            x, maps = self.run_blocks(x)
            logits = self.head(self.norm(x)[:, 0])
            return (logits, maps) if return_attention else logits

    result = autograder.check("vit_forward", HalfPositions)
    assert not result.passed and result.mistake == "tokens_before_blocks_wrong"
    assert "tokens entering the first block are wrong" in result.feedback
