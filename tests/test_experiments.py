"""vitref.experiments: chapter 7's accuracy against training-set size, and how its sentence reads a crossing."""
import pytest

from vitref.experiments import crossing, data_size_curve


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


@pytest.mark.parametrize("sizes, epochs", [((100,), 1), ((70000,), 1), ((1000,), 0)])
def test_bad_arguments_are_refused_before_training(sizes, epochs):
    with pytest.raises(ValueError):
        data_size_curve(sizes, epochs)


@pytest.mark.slow   # four tiny training runs
def test_both_models_train_the_same_epochs_on_each_size():
    curve = data_size_curve((256, 512), epochs=1, threads=1, test_limit=500)
    assert [(r["size"], r["model"]) for r in curve] == [(256, "vit"), (256, "cnn"), (512, "vit"), (512, "cnn")]
    assert [r["steps"] for r in curve] == [1, 1, 2, 2]             # batches of 256, whole batches only
    assert all(r["epochs"] == 1 for r in curve)
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in curve)
    assert all(abs(r["accuracy"] * 500 - round(r["accuracy"] * 500)) < 1e-6 for r in curve)   # of 500 images
