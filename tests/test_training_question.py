"""The training question (assignment 09, ``train_to_accuracy``): data, time budget, verdict.

Fast tests judge fabricated predictions (of a FashionViT's parameters, timed by a host) and run
the catalogue's quick wrong answers; the slow one trains for the question's full minute with the
course's reference recipe. tests/threats/test_trained_model.py holds what the grader does not
take from the student's process (the model's predictions, its clock, the data before the probe). The solution's
train_vit is checked through the child process by tests/test_autograder_cli.py (the solutions
file), in the sandbox by tests/test_grading_batch.py, and in its notebook by nbval and nbgrader.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

import autograder
from autograder.hosts.driver import ban_groups
from autograder.judging.catalogue import entry
from autograder.judging.catalogue import ch09_training as ch09
from autograder.judging.catalogue.ch09_training import MISTAKES, reference_train_vit
from autograder.judging.judge import judge
from autograder.judging.secret import SaltedSource, class_order, draw_inputs
from autograder.questions import inputs as I

Q = autograder.question("train_to_accuracy")
CASE = Q.cases[0]
P = CASE.params


def _labels(source=None):
    with I.using(source or I.PublicSource()):
        return np.asarray(I.dataset("fashion-mnist", "test", P["test"], P["seed"] + 1, "labels"))


def _data(predictions, seconds=50.0, monkeypatch=None):
    """Probe data of an untrained FashionViT, timed ``seconds`` by the host, whose predictions
    (the grader's own, made on its side) are replaced by ``predictions``."""
    if monkeypatch is not None:
        made = np.asarray(predictions, dtype=np.int64)
        monkeypatch.setattr(ch09, "predictions", lambda model, images: made)
    model = ch09.FashionViT()
    outputs = {f"state.{k}": v.double().numpy() for k, v in model.state_dict().items()}
    outputs["train_seconds"] = np.float64(0.0)          # the student's own clock: ignored where the host timed it
    notes = {"modules": [[n, type(m).__name__] for n, m in model.named_modules()], "num_heads": 4}
    return {"qid": Q.id, "cases": [{"outputs": outputs, "notes": notes, "measured_seconds": seconds}]}


def test_the_subsets_are_real_fashion_mnist_and_depend_on_the_runs_secret():
    public = draw_inputs(Q, I.PublicSource())
    salted = draw_inputs(Q, SaltedSource(12345))
    assert sorted(public) == sorted(salted)
    images = next(v for k, v in public.items() if "'train'" not in k and "images" in k and "10000" in k)
    assert images.shape == (P["train"], 1, 28, 28) and images.dtype == np.uint8 and images.max() > 200
    labels = next(v for k, v in public.items() if "labels" in k)
    assert labels.shape == (P["train"],) and set(np.unique(labels)) == set(range(10))
    for key in public:
        assert not np.array_equal(public[key], salted[key]), key      # another subset in every grading run
    # the held-out labels are not among what the student's process receives
    assert not any("labels" in k and str(P["test"]) in k for k in public)
    assert not np.array_equal(_labels(), _labels(SaltedSource(12345)))


@pytest.mark.parametrize("source", [I.PublicSource(), SaltedSource(7)], ids=["public", "salted"])
def test_images_and_labels_of_a_subset_are_the_same_examples(source):
    """The labels are the images' own classes, numbered in the run's order (a grading run's
    secret order; the public inputs keep Fashion-MNIST's numbering)."""
    from vitref.data import load_tensors

    images, labels = load_tensors("fashion-mnist", False)
    order = class_order(source.salt, 10) if isinstance(source, SaltedSource) else np.arange(10)
    with I.using(source):
        got_images = I.dataset("fashion-mnist", "test", 50, 3, "images")
        got_labels = I.dataset("fashion-mnist", "test", 50, 3, "labels")
    for image, label in zip(got_images, got_labels):
        match = np.flatnonzero((images.numpy() == image).all(axis=(1, 2, 3)))
        assert len(match) >= 1 and label in order[labels.numpy()[match]]


def test_held_out_images_are_the_labelled_examples_with_noise_no_stored_copy_matches():
    from vitref.data import load_tensors

    stored, stored_labels = (t.numpy() for t in load_tensors("fashion-mnist", False))
    with I.using(SaltedSource(11)):
        held_out = I.dataset("fashion-mnist", "test", 40, 5, "images", noise=P["noise"])
        labels = I.dataset("fashion-mnist", "test", 40, 5, "labels")
    for image, label in zip(held_out, labels):
        distance = np.abs(stored.astype(np.int16) - image.astype(np.int16)).max(axis=(1, 2, 3))
        assert distance.min() >= 1                      # no stored image equals it byte for byte
        nearest = np.flatnonzero(distance <= P["noise"])
        assert len(nearest) >= 1 and label in class_order(11, 10)[stored_labels[nearest]]


def test_perfect_predictions_pass_with_the_accuracy_in_the_feedback(monkeypatch):
    result = judge(Q, _data(_labels(), monkeypatch=monkeypatch))
    assert result.passed and result.score == Q.points
    assert "accuracy 1.000 on 2,000 held-out images" in result.feedback


def test_accuracy_threshold_is_applied_to_the_held_out_labels(monkeypatch):
    labels = _labels()
    rng = np.random.default_rng(0)
    for accuracy, passes in ((0.79, False), (0.81, True)):
        predictions = labels.copy()
        wrong = rng.choice(len(labels), size=int(round((1 - accuracy) * len(labels))), replace=False)
        predictions[wrong] = (labels[wrong] + 1) % 10
        result = judge(Q, _data(predictions, monkeypatch=monkeypatch))
        assert result.passed is passes, result.feedback
    assert f"accuracy {0.79:.3f}" in judge(Q, _data(np.where(np.arange(len(labels)) < 420, (labels + 1) % 10,
                                                             labels), monkeypatch=monkeypatch)).feedback


@pytest.mark.parametrize("key, predictions, seconds", [
    ("overtime", "labels", 80.0),
    ("one_class", "zeros", 50.0),
    ("chance", "random", 50.0),
    ("undertrained", "half", 50.0),
])
def test_each_mistake_is_named_from_the_predictions(key, predictions, seconds, monkeypatch):
    labels = _labels()
    made = {"labels": labels, "zeros": np.zeros_like(labels),
            "random": np.random.default_rng(1).integers(0, 10, size=len(labels)),
            "half": np.where(np.arange(len(labels)) % 2 == 0, labels, (labels + 3) % 10)}[predictions]
    result = judge(Q, _data(made, seconds, monkeypatch))
    assert not result.passed and result.mistake == key, result.feedback
    mistake = next(m for m in MISTAKES if m.key == key)
    assert mistake.title in result.feedback


def test_the_hosts_clock_counts_not_the_students(monkeypatch):
    data = _data(_labels(), 80.0, monkeypatch)
    data["cases"][0]["outputs"]["train_seconds"] = np.float64(1.0)     # what a patched clock would say
    result = judge(Q, data)
    assert not result.passed and result.mistake == "overtime" and "train_vit took 80 s" in result.feedback
    data = _data(_labels(), None)                                     # the host never handed over the data
    result = judge(Q, data)
    assert not result.passed and "never handed train_vit its training data" in result.feedback


def _with_accuracy(accuracy: float) -> np.ndarray:
    """Predictions of the held-out images whose accuracy is ``accuracy`` (the first ones wrong)."""
    labels = _labels()
    wrong = int(round((1 - accuracy) * len(labels)))
    return np.where(np.arange(len(labels)) < wrong, (labels + 1) % 10, labels)


@pytest.mark.parametrize("accuracy, warned", [(0.80, True), (0.81, True), (0.8195, True), (0.82, False),
                                              (0.90, False)])
def test_a_pass_within_two_points_of_the_bar_is_warned_about(accuracy, warned, monkeypatch):
    """A pass by less than 2 points still passes, and the feedback says it is close to the bar, why
    that is fragile and what makes it robust, in words (no code)."""
    result = judge(Q, _data(_with_accuracy(accuracy), monkeypatch=monkeypatch))
    assert result.passed and result.score == Q.points, result.feedback
    assert ("Close to the bar" in result.feedback) is warned, result.feedback
    if warned:
        warning = result.feedback[result.feedback.index("Close to the bar"):]
        assert warning.startswith(f"Close to the bar: {accuracy:.4g} is within 2 points of the 0.80 needed")
        assert "seed" in warning and "whole time budget" in warning
        assert not re.search(r"\w\(|=|\bimport\b|torch\.", warning), warning      # advice, not code
        assert result.feedback.endswith("before you submit.")
    failed = judge(Q, _data(_with_accuracy(0.79), monkeypatch=monkeypatch))
    assert not failed.passed and "Close to the bar" not in failed.feedback


def test_the_measures_are_the_graders_accuracy_and_the_hosts_clock(monkeypatch):
    """What a leaderboard shows: the accuracy of the grader's own predictions and the host's
    seconds; the probe's own clock (train_seconds) is never one of them."""
    data = _data(_with_accuracy(0.85), seconds=42.5, monkeypatch=monkeypatch)
    data["cases"][0]["outputs"]["train_seconds"] = np.float64(0.25)        # what a patched clock would say
    data["cases"][0]["outputs"]["accuracy"] = np.float64(1.0)              # a number of the student's: unread
    result = judge(Q, data)
    assert result.passed and dict(result.measures) == {"accuracy": 0.85, "seconds": 42.5}
    assert result.to_dict()["measures"] == {"accuracy": 0.85, "seconds": 42.5}
    # below the bar but in time: measured all the same (a leaderboard ranks it lower)
    assert dict(judge(Q, _data(_with_accuracy(0.5), 30.0, monkeypatch)).measures) == {"accuracy": 0.5,
                                                                                        "seconds": 30.0}
    # no host clock (an in-notebook check: only the probe's), overtime, or a refused model: nothing
    no_host = _data(_with_accuracy(0.85), monkeypatch=monkeypatch)
    del no_host["cases"][0]["measured_seconds"]
    assert judge(Q, no_host).measures == ()
    assert judge(Q, _data(_with_accuracy(0.85), 80.0, monkeypatch)).measures == ()
    refused = _data(_labels())
    refused["cases"][0]["notes"]["num_heads"] = 8
    assert judge(Q, refused).measures == ()
    assert "measures" not in judge(Q, refused).to_dict()


def test_a_diverged_run_is_named_from_its_parameters():
    data = _data(_labels())
    data["cases"][0]["outputs"]["state.head.bias"] = np.full(10, np.nan)
    result = judge(Q, data)
    assert not result.passed and result.mistake == "one_class" and "head.bias holds NaN" in result.feedback


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m.key != "overtime"], ids=lambda m: m.key)
def test_the_catalogues_quick_wrong_answers_are_rejected_and_named(mistake):
    result = autograder.check(Q.id, mistake.build(None))
    assert not result.passed and result.mistake == mistake.key, result.feedback


def test_answers_that_do_not_return_the_given_fashionvit_are_explained():
    def returns_nothing(images, labels, seconds=60):
        return None

    def linear(images, labels, seconds=60):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))

    class Wider(ch09.FashionViT):
        def __init__(self):
            super().__init__()
            self.extra = torch.nn.Linear(64, 64)

    assert "should return the trained FashionViT (an nn.Module), got NoneType" in \
        autograder.check(Q.id, returns_nothing).feedback
    assert "the model is not the given FashionViT: extra parameters or buffers 1.weight, 1.bias; missing " \
        "cls_token, pos_embed, patch_embed.1.weight and 41 more" in autograder.check(Q.id, linear).feedback
    assert "the model is not the given FashionViT: extra parameters or buffers extra.weight, extra.bias" in \
        autograder.check(Q.id, lambda images, labels, seconds=60: Wider()).feedback


def test_the_question_brings_its_own_time_and_runs_without_a_ban():
    assert Q.seconds >= 1.5 * P["seconds"]
    assert ban_groups([q.id for q in autograder.questions("09_training")]) == \
        [((), ["train_to_accuracy", "concept_augmentation"])]
    assert entry(Q.id).draw_answer is not None          # drawing the inputs never trains


# --------------------------------------------------------------------------- a minute each

@pytest.mark.slow
@pytest.mark.alone       # wall-clock limits: make test runs it on its own, after the rest
def test_the_course_recipe_reaches_the_target_on_one_thread():
    """The target is reachable as graded: the given FashionViT and the course's recipe, one
    thread, within the question's seconds, on the grader's kind of subset (salted)."""
    from autograder.student.probe import probe

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with I.using(SaltedSource(2024)):
            start = time.monotonic()
            data = probe(Q, reference_train_vit)        # check() would refuse it: it is built from vitref
            took = time.monotonic() - start
            result = judge(Q, data)
    finally:
        torch.set_num_threads(threads)
    assert result.passed, result.feedback
    assert took < P["seconds"] + 15
