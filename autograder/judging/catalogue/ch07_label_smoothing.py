"""The reference and the catalogue of mistakes of the label-smoothing exercise (grader side).

The reference is PyTorch's own ``F.cross_entropy(logits, targets, label_smoothing=eps)``
(Szegedy et al. 2016: the smoothing mass spread over all C classes, the target included), the
definition of the book's chapter 5; tests/test_exercises_new.py checks it equals the formula
written out with ``vitref.softmax``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..model import Mistake
from ._entry import add
from ._symptoms import FLOAT_MIX, GRADIENT_DIFFERS, PROPERTIES, RECIPE_SAYS


def _reference(logits, targets, smoothing=0.1):
    return F.cross_entropy(logits, targets, label_smoothing=smoothing)


def _stable_log_probs(logits, dim=-1):
    shifted = logits - logits.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


# which class of each example gets the 1 - eps: (logits (B, C), targets (B,)) -> (B, C) of 0/1
_TARGETS = {
    "target": lambda logits, t: F.one_hot(t, logits.shape[-1]).to(logits.dtype),
    # q[:, targets] += 1 - eps: every row gets every class that is some example's target
    "columns": lambda logits, t: F.one_hot(t, logits.shape[-1]).amax(dim=0, keepdim=True).expand_as(logits)
    .to(logits.dtype),
    "predicted": lambda logits, t: F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype),
    "previous": lambda logits, t: F.one_hot((t - 1) % logits.shape[-1], logits.shape[-1]).to(logits.dtype),
}


def _ls(form, stable=True, batch="mean", target="target", dim=-1):
    """A wrong smoothed cross-entropy, parametrised by the mistake: ``target``, the class that gets
    the 1 - eps (``_TARGETS``); ``dim``, the axis of the log-softmax."""
    def build(parts):
        def smoothed_cross_entropy(logits, targets, smoothing=0.1):
            if stable == "global":          # shifted by the largest logit of the batch, then log of the softmax
                exps = torch.exp(logits - logits.amax())
                log_probs = torch.log(exps / exps.sum(dim=dim, keepdim=True))
            elif stable:
                log_probs = _stable_log_probs(logits, dim)
            else:
                log_probs = torch.log(torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True))
            C = logits.shape[-1]
            nll = -(_TARGETS[target](logits, targets) * log_probs).sum(dim=-1)  # (B,)
            uniform = -log_probs.mean(dim=-1)                                   # (B,)
            if form == "right":
                per = (1 - smoothing) * nll + smoothing * uniform
            elif form == "none":
                per = nll
            elif form == "others":          # 1 - eps on the target, eps / (C - 1) on every other class
                others = (-log_probs.sum(dim=-1) - nll) / (C - 1)
                per = (1 - smoothing) * nll + smoothing * others
            elif form == "sum_uniform":     # the uniform term not divided by C
                per = (1 - smoothing) * nll + smoothing * (-log_probs.sum(dim=-1))
            elif form == "no_one_minus":
                per = nll + smoothing * uniform
            elif form == "swapped":
                per = smoothing * nll + (1 - smoothing) * uniform
            elif form == "probabilities":   # q mixed with the probabilities, not the log-probabilities
                probs = torch.exp(log_probs)
                per = -torch.log((1 - smoothing) * probs.gather(-1, targets[:, None]).squeeze(-1)
                                 + smoothing * probs.mean(dim=-1))
            return per.sum() if batch == "sum" else per.mean()
        return smoothed_cross_entropy
    return build


LS_MISTAKES = [
    Mistake("no_smoothing", "the smoothing is ignored",
            "With smoothing = eps the target is no longer one-hot: q_c = (1 - eps) y_c + eps / C, and the loss is "
            "-sum_c q_c log p_c = (1 - eps) * NLL + eps * mean_c(-log p_c).", _ls("none")),
    Mistake("spread_over_others", "the smoothing spread over the other classes only (eps / (C - 1))",
            "This exercise (like PyTorch's label_smoothing and the book) spreads eps over all C classes, the "
            "target included: the target gets 1 - eps + eps / C, every other class eps / C.", _ls("others")),
    Mistake("uniform_not_averaged", "the uniform term summed over the classes instead of averaged",
            "The smoothing mass eps is shared by the C classes: eps / C each, so the second term is "
            "eps * mean_c(-log p_c), not eps * sum_c.", _ls("sum_uniform")),
    Mistake("no_one_minus_eps", "the target's term not scaled by 1 - eps",
            "The target distribution must sum to 1: (1 - eps) on the one-hot part plus eps spread uniformly.",
            _ls("no_one_minus")),
    Mistake("weights_swapped", "eps and 1 - eps swapped",
            "Most of the mass (1 - eps) stays on the right class; only eps is spread over the classes.",
            _ls("swapped")),
    Mistake("mixed_probabilities", "smoothed the probabilities inside the log",
            "Label smoothing changes the target q, not the prediction: -sum_c q_c log p_c, a weighted sum of "
            "log-probabilities, not the log of a weighted sum of probabilities.", _ls("probabilities")),
    Mistake("batch_sum", "summed over the batch instead of averaging",
            "Return the mean over the batch (.mean()), as F.cross_entropy does by default.", _ls("right", batch="sum")),
    Mistake("smoothing_wrong_class", "the 1 - eps put on another class than each example's target",
            "Row b of the target distribution puts 1 - eps + eps / C on class targets[b], its own label, and eps / C "
            "on every other class: index the row and the column together, q[torch.arange(B), targets].",
            _ls("right", target="columns"), also=(_ls("right", target="predicted"), _ls("right", target="previous")),
            ask="Look at one row of your target distribution: which class gets the large weight, and is it that "
                "example's label?"),
    Mistake("softmax_over_batch", "the log-softmax taken over the batch axis",
            "Each example's log-probabilities are normalised over its classes: the maximum, the sum of exp and the "
            "log-softmax along dim=-1 (keepdim=True).", _ls("right", dim=0),
            also=(_ls("right", stable="global", dim=0),),
            ask="Add up exp of one row of your log-probabilities: do you get 1? Over which axis do you normalise?"),
    Mistake("unstable_log_softmax", "log(softmax) computed without subtracting the maximum",
            "exp(1000) overflows to inf and log(inf / inf) is NaN: use log_softmax(z) = z - max(z) - "
            "log(sum(exp(z - max(z)))).", _ls("right", stable=False)),
]

add("label_smoothing", references=lambda: [_reference],
    catalogue=[*LS_MISTAKES, *PROPERTIES, FLOAT_MIX, GRADIENT_DIFFERS,
                                                                    *RECIPE_SAYS])
