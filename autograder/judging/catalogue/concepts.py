"""The values of the conceptual questions (:mod:`autograder.questions.concepts`) and the
wrong values students give, each with a hint that teaches (grader side only).

Each reference is computed, not typed, where it can be: from ``vitref``'s modules (parameter
counts, the sinusoidal table, attention with a -1e9 fill) or from the formula. The tests
(tests/test_exercises_new.py) recompute every value by running the code the question talks
about.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch
import vitref

from ..compare import values_close
from ..model import Mistake
from ._entry import add, registered


def _value(v):
    """A catalogue builder returning the plain number ``v`` (the wrong answer)."""
    return lambda parts: v


def wrong(key, title, hint, *values):
    """A mistake given as one or more wrong values (the first is the entry's answer). Neither the
    title nor the hint states the expected value (tests/test_exercises_new.py holds it)."""
    first, *rest = values
    return Mistake(key, title, hint, _value(first), also=tuple(_value(v) for v in rest),
                   ask=f"Your number is the one this slip gives: {title}. Which step of your reasoning could it be?")


def value_verdict(question, case, student_case):
    """None when the student's number is the expected value; else a message that does not
    give the value away."""
    got = (student_case.get("outputs") or {}).get("answer")
    if got is None:
        return "No answer was recorded"
    got = float(np.asarray(got).reshape(-1)[0])
    params = case.params
    if "options" in params:
        n = int(params["options"])
        if got != int(got) or not 1 <= got <= n:
            return f"Answer with the number of one option, 1 to {n} (you answered {got:g})"
    expected = entry_value(question.id)
    if values_close(got, expected, params):
        return None
    if "options" in params:
        return f"Option {int(got)} is not the right one: read the options again, then the hints"
    if "atol" in params or "rtol" in params:
        return (f"{got:g} is not the expected value (to the precision asked): predict it again with the hints, "
                f"then run the code to check your prediction")
    return (f"{got:g} is not the expected count: predict it again with the hints, then run the code to check "
            f"your prediction")


def entry_value(qid: str):
    return registered(qid).references()[0]


def concept(qid, compute, mistakes):
    """Register a conceptual question whose expected value ``compute()`` works out with vitref
    (once: the value depends on nothing a submission sends)."""
    value = functools.cache(compute)
    add(qid, references=lambda: [value()], catalogue=mistakes, verdict=value_verdict)


# ------------------------------------------------------------------ 01 tokens

def _patch_numbers():
    patches = vitref.image_to_patches(torch.zeros(1, 3, 32, 32), 8)      # (1, N, P*P*C)
    return int(patches.shape[-1])


concept("concept_patch_numbers", _patch_numbers, [
    wrong("forgot_channels", "counted one channel only",
          "A patch of an RGB image holds P x P pixels, and a pixel of an RGB image is more than one number: count "
          "every number of the patch.",
          64),
    wrong("counted_tokens", "counted the tokens, not the numbers in one token",
          "(32/8)^2 = 16 is the number of tokens of the image; the question asks how long one token vector is.",
          16),
    wrong("counted_pixels", "counted the pixels of the whole image",
          "One token is one P x P patch, not the whole image: count the numbers of one patch.", 1024, 3072),
])

# ------------------------------------------------------------------ 02 positional encoding


def _sinusoid():
    table = vitref.sinusoidal_encoding(8, 4, n=100)
    return round(float(np.asarray(table)[5, 2]), 4)


concept("concept_sinusoid_value", _sinusoid, [
    wrong("sin_cos_swapped", "cosine where the sine goes",
          "Even columns 2i hold sin(k / n^(2i/d)), odd columns 2i+1 the cosine: column 2 is a sine (i = 1).",
          round(math.cos(5 / 10), 4)),
    wrong("column_as_i", "the column index used as i",
          "Columns 2i and 2i+1 share one frequency: which pair i does column 2 belong to, and so which exponent "
          "does its denominator have?",
          round(math.sin(5 / 100), 4), round(math.sin(5 / 100 ** 0.25), 4)),
    wrong("no_denominator", "the position without its denominator",
          "Each pair of columns divides the position by n^(2i/d) before the sine: sin(k / n^(2i/d)).",
          round(math.sin(5), 4)),
    wrong("degrees", "the angle read in degrees",
          "numpy's sin takes radians: the angle k / n^(2i/d) is used as it is, never converted to degrees.",
          round(math.sin(math.radians(0.5)), 4)),
])

# ------------------------------------------------------------------ 03 attention


def _masked_row():
    q, k = torch.randn(1, 1, 4), torch.randn(1, 5, 4)
    scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(torch.zeros(1, 1, 5, dtype=torch.bool) == 0, -1e9)
    return round(float(vitref.softmax(scores.double(), dim=-1)[0, 0, 0]), 6)


concept("concept_masked_row", _masked_row, [
    wrong("zero_weights", "all weights zero",
          "-1e9 is a finite number: what are the five scores once they are filled, and what does the softmax make "
          "of scores that are all alike? (Zeros are what -inf with NaN rows set to 0 gives, another convention.)", 0.0),
    wrong("one_weight", "one key gets all the weight",
          "No score stands out when they are all -1e9: how does the softmax share the weight between keys whose "
          "scores are the same?", 1.0),
    wrong("nan_row", "NaN",
          "NaN comes from -inf fills (exp(-inf) / sum = 0/0); -1e9 is finite, so the row is a proper softmax.",
          float("nan")),
])

# ------------------------------------------------------------------ 04 multi-head attention


def _heads_factor():
    mha = vitref.MultiHeadAttention
    count = lambda m: sum(p.numel() for p in m.parameters())      # noqa: E731 - a one-line helper local to this builder
    return count(mha(64, 8)) / count(mha(64, 4))


concept("concept_heads_params", _heads_factor, [
    wrong("params_per_head", "each head adds its own full-size projections",
          "The heads split emb_size: with h heads each has d = emb_size / h features. Write down the shapes of qkv "
          "and projection in both modules, then count.", 2.0),
    wrong("inverse_per_head", "smaller heads, fewer parameters",
          "Smaller heads, but twice as many of them: count the weights of each module's layers.", 0.5),
    wrong("score_pairs", "the number of score matrices counted as parameters",
          "More heads compute more (N x N) score matrices, but scores are activations, not parameters: count only "
          "the learned weights, those of qkv and projection.", 4.0),
])

# ------------------------------------------------------------------ 05 blocks


def _mlp_share():
    count = lambda m: sum(p.numel() for p in m.parameters())      # noqa: E731 - a one-line helper local to this builder
    return count(vitref.FeedForwardBlock(768, 4)) / count(vitref.MultiHeadAttention(768, 12))


concept("concept_mlp_share", _mlp_share, [
    wrong("inverted", "attention over feed-forward",
          "The question asks feed-forward / attention, not attention / feed-forward.", 0.5),
    wrong("expansion", "the expansion factor",
          "The hidden layer is 4 times wider, but that is not the whole count: how many weight matrices does each "
          "sub-layer have, and of which shapes?", 4.0),
    wrong("equal", "equal shares",
          "Count them: write down every weight matrix of each sub-layer with its shape.", 1.0),
    wrong("three_matrices", "attention counted as three matrices (q, k, v)",
          "Attention also has its output projection: count it too.", 8 / 3),
])

WARMUP_RIGHT = 2

concept("concept_warmup", lambda: WARMUP_RIGHT, [
    wrong("layernorm_init", "LayerNorm's initial weights",
          "LayerNorm's gain starts at 1 and its bias at 0, and both train from the first step: nothing waits for "
          "the learning rate. What is large at the first steps of a post-LN model, and what do the first optimizer "
          "steps do with it?", 1),
    wrong("softmax_uniform", "the attention softmax",
          "Warm-up does not act on the attention weights, and the attention at the start does no harm. What does "
          "a small learning rate protect during the first steps?", 3),
    wrong("residual_growth", "the residual stream grows",
          "That is pre-LN: its residual stream grows slowly with depth, and it trains without warm-up. What does "
          "post-LN do after every sum, and what does that do to the first steps of training?", 4),
])

# ------------------------------------------------------------------ 06 patch embedding


def _position_rows():
    return (224 // 16) ** 2 + 1


concept("concept_position_rows", _position_rows, [
    wrong("no_class_token", "the class token forgotten",
          "The table has one row per token: are the patches the only tokens?", 196),
    wrong("per_side", "patches along one side",
          "224 / 16 is the number of patches along one side; the table has a row for every token of the image.",
          14, 15),
    wrong("pixels", "one row per pixel",
          "Positions belong to tokens (patches), not pixels.", 224 * 224, 224 * 224 + 1),
])

# ------------------------------------------------------------------ 07 ViT


def _initial_loss():
    loss = -vitref.softmax(torch.zeros(1, 10, dtype=torch.float64), dim=-1)[0, 3].log()
    return round(float(loss), 4)


concept("concept_initial_loss", _initial_loss, [
    wrong("log10", "logarithm in base 10",
          "The cross-entropy uses the natural logarithm.", 1.0),
    wrong("log2", "logarithm in base 2",
          "The cross-entropy uses the natural logarithm (nats, not bits).", round(math.log2(10), 4)),
    wrong("probability", "the probability, not the loss",
          "Equal logits give every class the same probability; the loss is not that probability but a function "
          "of it.", 0.1),
    wrong("zero", "zero loss",
          "A loss of 0 means probability 1 on the right class; what probability do 10 equal logits give it?", 0.0),
])

# ------------------------------------------------------------------ 08 decoder


def _keys_without_cache():
    return sum(range(1, 11))


concept("concept_decoding_work", _keys_without_cache, [
    wrong("with_cache", "the count with a cache",
          "With a cache each step computes the key of the new token only (10 in all). Without it, step t "
          "recomputes the keys of all t tokens of the prefix.", 10),
    wrong("square", "T x T",
          "Step t has t tokens, not 10: the prefix grows by one token at every step.", 100),
    wrong("off_by_one", "the last step left out (or the first)",
          "Count the steps again: both the first and the last step compute keys.", 45, 66),
])

# ------------------------------------------------------------------ 09 training

# After a minute of training: 99% on the 10,000 training images, 84% on held-out ones. The gap
# is overfitting of a model with no built-in locality (chapter 7, "Why ViTs need data"): more
# varied data, i.e. augmentation (random shifts/crops), is what closes it within the same time.
DATA_RIGHT = 2

concept("concept_augmentation", lambda: DATA_RIGHT, [
    wrong("bigger_model", "a larger model",
          "More blocks fit the 10,000 training images even better (they are at 99% already) and make every step "
          "slower: what does the gap between training and held-out accuracy tell you?", 1),
    wrong("larger_lr", "a larger learning rate",
          "The training images are learned already: the problem is generalisation, not optimisation, and a 10x "
          "learning rate risks the divergence warm-up protects against.", 3),
    wrong("no_warmup", "dropping the warm-up",
          "Warm-up only protects the first steps of AdamW; without it the run may start badly, and the "
          "gap between training and held-out accuracy stays.", 4),
])
