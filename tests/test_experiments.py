"""vitref.experiments: chapter 7's accuracy against training-set size, and how its sentence reads a crossing."""
import pytest

from vitref import experiments
from vitref.experiments import crossing, data_size_curve, dropout_on_off


def rows(vit, cnn, sizes=(1000, 2000, 4000)):
    return ([dict(size=n, model="vit", accuracy=a) for n, a in zip(sizes, vit)]
            + [dict(size=n, model="cnn", accuracy=a) for n, a in zip(sizes, cnn)])


def test_curves_that_cross_are_found_between_the_right_sizes():
    meet = crossing(rows([0.50, 0.70, 0.85], [0.60, 0.72, 0.80]))
    assert meet["crosses"] and meet["between"] == (2000, 4000)
    assert meet["ahead_at_smallest"] == "cnn" and meet["ahead_at_largest"] == "vit"
    assert meet["gaps"][1000] == pytest.approx(-0.10) and meet["gaps"][4000] == pytest.approx(0.05)


def test_curves_that_do_not_cross():
    meet = crossing(rows([0.50, 0.70, 0.79], [0.60, 0.72, 0.80]))
    assert not meet["crosses"] and meet["between"] is None
    assert meet["ahead_at_smallest"] == meet["ahead_at_largest"] == "cnn"


def test_a_touch_is_not_a_crossing_and_a_tie_is_level():
    meet = crossing(rows([0.60, 0.72, 0.70], [0.60, 0.72, 0.80]))
    assert not meet["crosses"] and meet["ahead_at_smallest"] == "level" and meet["ahead_at_largest"] == "cnn"


def test_only_sizes_with_both_models_count():
    data = rows([0.5, 0.7], [0.6, 0.8], sizes=(1000, 2000)) + [dict(size=60000, model="vit", accuracy=0.9)]
    meet = crossing(data)
    assert set(meet["gaps"]) == {1000, 2000} and not meet["crosses"]
    with pytest.raises(ValueError, match="no size has both"):
        crossing([dict(size=60000, model="vit", accuracy=0.9)])


@pytest.mark.parametrize("sizes, steps, message", [
    ((100,), 10, "outside 256"), ((70000,), 10, "outside 256"), ((1000, 100), 10, "outside 256"),
    ((1000,), 0, "steps must be a positive whole number"), ((1000,), -5, "steps must be a positive whole number"),
    ((1000,), 2.5, "steps must be a positive whole number"), ((1000,), True, "steps must be a positive whole number"),
    ((1000,), None, "steps must be a positive whole number")])
def test_bad_arguments_are_refused_before_training(monkeypatch, sizes, steps, message):
    monkeypatch.setattr(experiments, "train", lambda **_: pytest.fail("trained before checking its arguments"))
    with pytest.raises(ValueError, match=message):
        data_size_curve(sizes, steps)


@pytest.mark.slow   # four tiny training runs
def test_every_size_trains_the_same_steps_so_small_sets_repeat():
    curve = data_size_curve((256, 512), steps=3, threads=1, test_limit=500)
    assert [(r["size"], r["model"]) for r in curve] == [(256, "vit"), (256, "cnn"), (512, "vit"), (512, "cnn")]
    assert [r["steps"] for r in curve] == [3, 3, 3, 3]                # equal steps, whatever the size
    assert [r["epochs"] for r in curve] == [3.0, 3.0, 1.5, 1.5]       # batches of 256: 1 and 2 an epoch
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in curve)
    assert all(abs(r["accuracy"] * 500 - round(r["accuracy"] * 500)) < 1e-6 for r in curve)   # of 500 images


@pytest.mark.slow   # two tiny training runs
def test_dropout_runs_differ_only_in_their_rate(monkeypatch):
    calls, original = [], experiments.train

    def spy(**settings):
        calls.append(settings)
        return original(**settings)

    monkeypatch.setattr(experiments, "train", spy)
    rows = dropout_on_off((0.0, 0.1), steps=2, train_limit=256, test_limit=200)
    assert [c["dropout"] for c in calls] == [0.0, 0.1]
    others = [{k: v for k, v in c.items() if k != "dropout"} for c in calls]
    assert others[0] == others[1] and others[0]["steps"] == 2 and others[0]["seed"] == 0
    assert [r["dropout"] for r in rows] == [0.0, 0.1] and [r["steps"] for r in rows] == [2, 2]
    for r in rows:
        assert abs(r["train_accuracy"] * 256 - round(r["train_accuracy"] * 256)) < 1e-6   # of the 256 images
        assert abs(r["test_accuracy"] * 200 - round(r["test_accuracy"] * 200)) < 1e-6     # of 200 test images
        assert r["gap"] == pytest.approx(r["train_accuracy"] - r["test_accuracy"])


@pytest.mark.parametrize("rates, steps, train_limit, message", [
    ((0.0, 1.0), 5, 1024, "dropout probabilities"), ((), 5, 1024, "dropout probabilities"),
    ((0.1,), 0, 1024, "steps must be"), ((0.1,), 5, 100, "train_limit 100")])
def test_bad_dropout_runs_are_refused(rates, steps, train_limit, message):
    with pytest.raises(ValueError, match=message):
        dropout_on_off(rates, steps=steps, train_limit=train_limit)
