"""Assignment 09: train a ViT on Fashion-MNIST within a time budget (``train_to_accuracy``).

The answer is a function ``train_vit(images, labels, seconds) -> model``: it gets 10,000
training images of Fashion-MNIST as they are stored (uint8 ``(N, 1, 28, 28)``, 0..255) with
their labels (int64 ``(N,)``, 0..9), trains for at most ``seconds`` of wall-clock time and
returns the trained ``nn.Module``, which maps such images ``(B, 1, 28, 28)`` to logits
``(B, 10)`` (preprocessing included). The probe then runs the model, in eval mode and without
gradients, on 2,000 held-out test images and records its predicted classes.

The labels of the held-out images never enter the student's process: the grader draws the
same subset on its side and computes the accuracy there. The held-out images carry a little
noise (up to 2 grey levels a pixel), so that no copy of the public dataset matches them byte
for byte, and the grading sandbox hides the dataset's folders
(:mod:`autograder.judging.catalogue.ch09_training`). Which images are drawn depends on the
grading run's secret; the student's own check draws a public subset.
"""
from __future__ import annotations

import time

from .base import Case, Question, register
from ..student.probe import CaseFailure
from . import inputs as I

NUM_CLASSES = 10
EVAL_BATCH = 500


def predictions(model, images):
    """The classes ``model`` predicts for ``images`` (B, 1, 28, 28): int64 (B,), in eval mode,
    without gradients, ``EVAL_BATCH`` images at a time."""
    import torch
    from torch import nn

    if not isinstance(model, nn.Module):
        raise CaseFailure(f"train_vit should return the trained model (an nn.Module), got {type(model).__name__}")
    model.eval()
    chunks = []
    with torch.no_grad():
        for start in range(0, len(images), EVAL_BATCH):
            batch = images[start:start + EVAL_BATCH]                               # (b, 1, 28, 28) uint8
            try:
                logits = model(batch)
            except RuntimeError as error:
                if "Byte" not in str(error):
                    raise
                raise CaseFailure(f"the model cannot take the images as they are stored, uint8 (B, 1, 28, 28) "
                                  f"({error}): convert them inside the model, e.g. images.float() / 255, "
                                  f"then standardise (FashionViT's forward does)") from None
            if not isinstance(logits, torch.Tensor):
                raise CaseFailure(f"the model returned a {type(logits).__name__}; it should return the logits, "
                                  f"a tensor (B, {NUM_CLASSES})")
            if tuple(logits.shape) != (len(batch), NUM_CLASSES):
                raise CaseFailure(f"the model maps images (B, 1, 28, 28) = {tuple(batch.shape)} to "
                                  f"{tuple(logits.shape)}; it should return logits (B, {NUM_CLASSES}) = "
                                  f"({len(batch)}, {NUM_CLASSES})")
            chunks.append(logits.float().argmax(dim=-1))                           # (b,)
    return torch.cat(chunks).to(torch.int64)                                        # (num_test,)


def _run(answer, case, rec):
    p = case.params
    train = ("fashion-mnist", "train", p["train"], p["seed"])
    images = rec.tensor(I.dataset(*train, "images"))                             # (N, 1, 28, 28) uint8
    labels = rec.tensor(I.dataset(*train, "labels"))                             # (N,) int64
    test_images = rec.tensor(I.dataset("fashion-mnist", "test", p["test"], p["seed"] + 1, "images",
                                       noise=p["noise"]))                         # (M, 1, 28, 28) uint8
    start = time.monotonic()
    model = rec.call(answer, images, labels, p["seconds"])
    rec.output("train_seconds", float(time.monotonic() - start))
    rec.output("predictions", rec.call(predictions, model, test_images))


CASES = [Case(
    "train_vit(10,000 Fashion-MNIST training images (10000, 1, 28, 28) uint8, their labels (10000,), "
    "seconds=60), then its predictions on 2,000 held-out test images",
    {"train": 10_000, "test": 2_000, "seconds": 60, "seed": 901, "accuracy": 0.80, "noise": 2},
)]

register(Question(
    id="train_to_accuracy",
    chapter="09_training",
    title="Train a ViT to 80% on Fashion-MNIST in one minute",
    points=4,
    answer_name="train_vit",
    kind="function",
    cases=CASES,
    run_case=_run,
    outputs={"predictions": "(2000,) predicted classes", "train_seconds": "seconds train_vit took"},
    seconds=100,        # 60 s of training, the predictions, and slack for a loaded machine
))
