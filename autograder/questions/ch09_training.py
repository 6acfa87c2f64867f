"""Assignment 09: train a ViT on Fashion-MNIST within a time budget (``train_to_accuracy``).

The answer is a function ``train_vit(images, labels, seconds) -> model``: it gets 10,000
training images of Fashion-MNIST as they are stored (uint8 ``(N, 1, 28, 28)``, 0..255) with
their labels (int64 ``(N,)``, 0..9), trains the exercise's given ``FashionViT`` for at most
``seconds`` of wall-clock time and returns it. The probe sends back the returned model's
*parameters* only (its ``state_dict``, numbers), the names and classes of its submodules and
its number of attention heads; nothing the model computes in the student's process counts.

The grader loads those numbers into its own copy of ``FashionViT``
(:mod:`autograder.judging.catalogue.ch09_training`) and predicts 2,000 held-out test images
there: the held-out images and their labels never enter the student's process. Anything that
is not the given ``FashionViT`` with its given sizes (other or extra parameters or buffers,
other shapes or head count, other modules, non-finite values) scores zero.

In a grading run the ten classes are numbered in a secret order drawn for the run (the same in
the training labels ``train_vit`` gets and in the held-out labels the grader scores against,
:func:`autograder.judging.secret.class_order`): a model trained on the labels it is given is
scored on the classes it learned; one trained elsewhere on Fashion-MNIST's own numbering is not.
The public inputs (the in-notebook check) keep Fashion-MNIST's numbering.

In a grading run the training images are not among the inputs the notebook's process gets at
its start: the host holds them back and hands them over when this probe asks for them
(:mod:`autograder.hosts.training`), and the host, not the student's clock, times the call from
that moment to the result, killing the run at :func:`time_limit`. ``train_seconds``, the probe's
own measurement, is only used by a student's in-notebook check (no host there).
"""
from __future__ import annotations

import time

from .base import Case, Question, register
from .errors import CaseFailure
from . import inputs as I

STATE_PREFIX = "state."         # the outputs that carry the model's state_dict, one per entry
MAX_STATE = 4_000_000           # numbers in the returned model's state (the given FashionViT: about 105,000)
TIME_SLACK = 1.10               # train_vit may overrun its seconds by 10% (+ 2 s) before it counts as overtime
KILL_MARGIN = 5.0               # seconds after the overtime limit at which the host stops the run


def overtime_after(seconds: float) -> float:
    """The time (from receiving its training data) after which a train_vit counts as overtime."""
    return TIME_SLACK * float(seconds) + 2.0


def time_limit(seconds: float) -> float:
    """The hard limit the host enforces from delivering the training data to receiving the
    result (parameters sent included): the overtime limit + ``KILL_MARGIN``."""
    return overtime_after(seconds) + KILL_MARGIN


def record_model(model, rec) -> None:
    """Record what the grader needs to rebuild ``model`` as its own FashionViT: every
    ``state_dict`` entry as an output ``state.<name>``, and the notes ``modules`` ([name,
    class name] of every submodule) and ``num_heads``."""
    import torch
    from torch import nn

    if not isinstance(model, nn.Module):
        raise CaseFailure(f"train_vit should return the trained FashionViT (an nn.Module), got {type(model).__name__}")
    state = model.state_dict()
    total = 0
    for name, value in state.items():
        if type(value) is not torch.Tensor:
            raise CaseFailure(f"the model's state {name!r} is a {type(value).__name__}, not a tensor: "
                              f"the model is not the given FashionViT")
        total += value.numel()
        if total > MAX_STATE:
            raise CaseFailure(f"the model holds more than {MAX_STATE:,} numbers: it is not the given FashionViT "
                              f"(about 105,000 with its default sizes)")
    for name, value in state.items():
        rec.output(STATE_PREFIX + str(name), value)
    rec.note("modules", [[str(name), type(module).__name__] for name, module in model.named_modules()][:1000])
    heads = [m.num_heads for m in model.modules() if isinstance(m, nn.MultiheadAttention)]
    rec.note("num_heads", int(heads[0]) if heads and isinstance(heads[0], int) else 0)


def _run(answer, case, rec):
    p = case.params
    train = ("fashion-mnist", "train", p["train"], p["seed"])
    images = rec.tensor(I.dataset(*train, "images"))                             # (N, 1, 28, 28) uint8
    labels = rec.tensor(I.dataset(*train, "labels"))                             # (N,) int64
    start = time.monotonic()
    model = rec.call(answer, images, labels, p["seconds"])
    rec.output("train_seconds", float(time.monotonic() - start))    # the student's clock: the self-check only
    if rec.mode != "draw":
        record_model(model, rec)


CASES = [Case(
    "train_vit(10,000 Fashion-MNIST training images (10000, 1, 28, 28) uint8, their labels (10000,), "
    "seconds=60), then the returned FashionViT's predictions (made by the checker) on 2,000 held-out test images",
    {"train": 10_000, "test": 2_000, "seconds": 60, "seed": 901, "accuracy": 0.80, "noise": 2},
)]

# seconds: 60 s of training, the host's limit (71 s), and slack for a loaded machine
register(Question(id="train_to_accuracy", chapter="09_training",
                  title="Train a ViT to 80% on Fashion-MNIST in one minute", points=4, answer_name="train_vit",
                  kind="function", cases=CASES, run_case=_run, seconds=100,
                  outputs={"state.*": "the returned FashionViT's state_dict",
                           "train_seconds": "seconds train_vit took"}))
