"""The training question (``train_to_accuracy``, assignment 09): the verdict and its mistakes.

No reference output is compared: the student's model made predictions for held-out images in
the student's process, and here, on the grader's side, they are scored against labels the
student's process never held (drawn with the run's source, so the grader's secret subset in a
batch, the public one in a student's own check). The verdict names what went wrong from the
predictions and the time taken:

* ``overtime``: train_vit ran longer than the seconds it was given;
* ``chance``: about one prediction in ten right, as without training;
* ``one_class``: (almost) every image put in the same class, the sign of a run that diverged;
* ``undertrained``: it learned, but not to the accuracy asked.

The reference (:func:`reference_train_vit`, vitref's ViT and the course's recipe) shows that
the target is reachable on one CPU thread in the time given (tests/test_training_question.py).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...questions import inputs as I
from ..model import Mistake
from . import add
from ._common import vitref

FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
TIME_SLACK = 1.10           # train_vit may overrun its seconds by 10% (+ 2 s) before it counts as overtime
CHANCE_BELOW = 0.20         # at most this accuracy: no learning (chance is 0.10)
ONE_CLASS_SHARE = 0.90      # at least this share of predictions in one class: collapsed


class _Standardize(nn.Module):
    """uint8 images (B, 1, 28, 28) in 0..255 -> standardised float32 (B, 1, 28, 28)."""

    def forward(self, images):
        return (images.float() / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD


def reference_train_vit(images, labels, seconds):
    """The course's recipe within ``seconds``: vitref's ViT (patch 7, dim 64, 3 blocks, 4 heads,
    MLP 128), AdamW 2e-3 with weight decay 0.05 on the matrices, 5% warm-up then cosine over the
    time budget, batch 128, label smoothing 0.1."""
    start = time.monotonic()
    budget = 0.9 * float(seconds)                      # the rest: returning, the caller's evaluation
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    v = vitref()
    from vitref.training.optim import param_groups, warmup_cosine

    x = _Standardize()(images)                                                       # (N, 1, 28, 28)
    y = labels.long()                                                                # (N,)
    vit = v.ViT(img_size=28, patch_size=7, in_channels=1, num_classes=10, dim=64, depth=3, num_heads=4,
                mlp_dim=128)
    optimizer = torch.optim.AdamW(param_groups(vit, 0.05), lr=2e-3)
    batch = 128
    while True:
        order = torch.randperm(len(y), generator=generator)
        for first in range(0, len(y) - batch + 1, batch):
            progress = (time.monotonic() - start) / budget
            if progress >= 1:
                return nn.Sequential(_Standardize(), vit).eval()
            for group in optimizer.param_groups:
                group["lr"] = warmup_cosine(progress, 2e-3, 0.05)
            index = order[first:first + batch]
            loss = F.cross_entropy(vit(x[index]), y[index], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def _draw_stand_in(images, labels, seconds):
    """What the grader's input-drawing pass calls instead of training: a model that predicts
    class 0 (only the inputs the recipe asks for matter there)."""
    return _Constant()


class _Constant(nn.Module):
    """Logits (B, 10) that are all zero: every image predicted as class 0."""

    def forward(self, images):
        return torch.zeros(len(images), 10)                                          # (B, 10)


def _held_out_labels(case) -> np.ndarray:
    p = case.params
    return np.asarray(I.dataset("fashion-mnist", "test", p["test"], p["seed"] + 1, "labels"))


def _scores(case, student_case) -> dict | None:
    """Accuracy, time and the largest class share of the student's predictions, or None when
    the outputs are not there."""
    outputs = student_case.get("outputs") or {}
    predictions, seconds = outputs.get("predictions"), outputs.get("train_seconds")
    if predictions is None or seconds is None:
        return None
    predictions = np.asarray(predictions).reshape(-1)
    labels = _held_out_labels(case)
    if predictions.shape != labels.shape:
        return {"shape": predictions.shape, "expected": labels.shape}
    counts = np.bincount(np.clip(predictions, 0, 9).astype(np.int64), minlength=10)
    return {"accuracy": float((predictions == labels).mean()), "seconds": float(np.asarray(seconds).reshape(-1)[0]),
            "top_share": float(counts.max() / max(1, len(predictions))), "top_class": int(counts.argmax())}


def _overtime(case, scores) -> bool:
    return scores["seconds"] > TIME_SLACK * float(case.params["seconds"]) + 2.0


def verdict(question, case, student_case) -> str | None:
    scores = _scores(case, student_case)
    if scores is None:
        return "the checker got no predictions from your model"
    if "shape" in scores:
        return f"the model made {scores['shape']} predictions for {scores['expected']} held-out images"
    need = float(case.params["accuracy"])
    if _overtime(case, scores):
        return (f"train_vit took {scores['seconds']:.0f} s; it was given seconds={case.params['seconds']} "
                f"(accuracy {scores['accuracy']:.3f})")
    if scores["accuracy"] < need:
        return (f"accuracy {scores['accuracy']:.3f} on {case.params['test']:,} held-out images, {need:.2f} needed "
                f"(train_vit took {scores['seconds']:.0f} s of its {case.params['seconds']})")
    return None


def match(question, data) -> str | None:
    """The key of the mistake the predictions show, or None."""
    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error"):
        return None
    case = question.cases[0]
    scores = _scores(case, cases[0])
    if scores is None or "shape" in scores:
        return None
    if _overtime(case, scores):
        return "overtime"
    if scores["top_share"] >= ONE_CLASS_SHARE:
        return "one_class"
    if scores["accuracy"] <= CHANCE_BELOW:
        return "chance"
    if scores["accuracy"] < float(case.params["accuracy"]):
        return "undertrained"
    return None


def summary(question, data) -> str | None:
    """What a passing answer reached, for its feedback."""
    cases = data.get("cases") or []
    scores = _scores(question.cases[0], cases[0]) if len(cases) == 1 else None
    if not scores or "accuracy" not in scores:
        return None
    return (f"accuracy {scores['accuracy']:.3f} on {question.cases[0].params['test']:,} held-out images "
            f"after {scores['seconds']:.0f} s of training")


# Each mistake's builder is a train_vit that makes it, fast (the tests run them); the model is
# a linear classifier, since the mistakes are the training loop's.

def _linear():
    torch.manual_seed(0)
    return nn.Sequential(_Standardize(), nn.Flatten(), nn.Linear(28 * 28, 10))   # (B, 1, 28, 28) -> (B, 10)


def _untrained(parts):
    def train_vit(images, labels, seconds):
        return _linear()                                                            # never trained
    return train_vit


def _naive_cross_entropy(logits, targets):
    """A cross-entropy written without the max shift: large logits overflow exp (NaN)."""
    probs = torch.exp(logits) / torch.exp(logits).sum(dim=-1, keepdim=True)          # (B, 10)
    return -torch.log(probs[torch.arange(len(logits)), targets]).mean()


def _steps(lr, steps, optimizer_class, loss_fn=F.cross_entropy):
    """A train_vit that takes ``steps`` fixed steps of 128 images, whatever its seconds."""
    def build(parts):
        def train_vit(images, labels, seconds):
            model = _linear()
            optimizer = optimizer_class(model.parameters(), lr=lr)
            for step in range(steps):
                index = slice(128 * step, 128 * (step + 1))
                loss = loss_fn(model(images[index]), labels[index].long())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return model
        return train_vit
    return build


# A learning rate far too large with the naive cross-entropy: the logits overflow exp, the loss
# and then every parameter become NaN, every image is predicted class 0.
_diverged = _steps(1e3, 8, torch.optim.SGD, _naive_cross_entropy)
_few_steps = _steps(1e-3, 5, torch.optim.AdamW)         # stops after 5 steps, not on the clock


def _overtime_builder(parts):
    def train_vit(images, labels, seconds):
        time.sleep(TIME_SLACK * seconds + 3)                                         # ignores its budget
        return _Constant()
    return train_vit


MISTAKES = [
    Mistake("overtime", "trained past the time budget",
            "Read the clock in the loop (time.monotonic() at the start, then before every step) and stop "
            "when the seconds are used up; keep a few seconds for returning.", _overtime_builder),
    Mistake("one_class", "every image in the same class",
            "The run diverged (the loss became NaN or huge): lower the learning rate (AdamW about 1e-3), "
            "warm it up over the first steps, and standardise the images to mean 0, std 1.", _diverged),
    Mistake("chance", "predictions at chance level",
            "The model did not learn: check that the optimizer steps (zero_grad, backward, step) run, that "
            "images and labels are shuffled with the same permutation, and that the returned model is the "
            "one you trained.", _untrained),
    Mistake("undertrained", "learned, but not enough",
            "Use the whole time budget (stop on the clock, not after a fixed number of steps), standardise "
            "the images, keep the model small (patch 7, dim 64, 3-4 blocks), AdamW around 2e-3 with warm-up "
            "and cosine decay, batch 128, label smoothing 0.1.", _few_steps),
]

add("train_to_accuracy", references=lambda: [reference_train_vit], catalogue=MISTAKES, verdict=verdict,
    match=match, summary=summary, draw_answer=_draw_stand_in)
