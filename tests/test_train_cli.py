"""The training command line (``python -m vitref.train``) is built from :class:`TrainConfig`'s fields.

One option per field, typed by the field's annotation: a field added to the config is an option at
once, with no edit to vitref/training/cli.py. Fast: parses command lines, trains nothing.
"""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from vitref.training import PRESETS, TrainConfig, cli

FIELDS = dataclasses.fields(TrainConfig)
BOOL_FIELDS = {f.name for f in FIELDS if f.type in ("bool", "bool | None")}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def options_by_dest(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions if action.dest != "help"}


def test_every_field_is_one_option_and_nothing_else_is():
    options = options_by_dest(cli.build_parser())
    assert set(options) == {"preset"} | {f.name for f in FIELDS}
    for f in FIELDS:
        expected = {flag(f.name)} | ({"--no-" + flag(f.name)[2:]} if f.name in BOOL_FIELDS else set())
        expected |= {"--heads"} if f.name == "num_heads" else set()      # the old name still works
        assert set(options[f.name].option_strings) == expected, f.name
        assert options[f.name].default is None, f"{f.name}: an absent option must leave the preset's value"
    assert BOOL_FIELDS == {"flip", "eval_every_epoch", "compile", "cuda_graph", "tf32", "progress"}


def test_a_full_command_line_gives_the_config_it_spells_with_the_fields_types():
    argv = ("--dataset cifar10 --epochs 2.5 --steps 40 --patch-size 4 --dim 32 --depth 2 --heads 2 --mlp-dim 96 "
            "--dropout 0.1 --arch timm --pos-init random --pool mean --batch-size 32 --lr 1e-3 --min-lr 1e-5 "
            "--grad-clip 0 --distill soft --teacher-epochs 3 --crop-padding 2 --no-flip --erase 0.25 --tta flip "
            "--eval-every-epoch --seed 7 --threads 2 --device cpu --compile --precision bf16 --train-limit 512 "
            "--out none --name trial --no-progress").split()
    expected = TrainConfig(dataset="cifar10", epochs=2.5, steps=40, patch_size=4, dim=32, depth=2, num_heads=2,
                           mlp_dim=96, dropout=0.1, arch="timm", pos_init="random", pool="mean", batch_size=32,
                           lr=1e-3, min_lr=1e-5, grad_clip=0.0, distill="soft", teacher_epochs=3.0,
                           crop_padding=2, flip=False, erase=0.25, tta="flip", eval_every_epoch=True, seed=7,
                           threads=2, device="cpu", compile=True, precision="bf16", train_limit=512, out=None,
                           name="trial", progress=False)
    config = cli.parse_args(argv)
    assert config == expected
    assert type(config.steps) is int and type(config.epochs) is float and type(config.grad_clip) is float
    assert config.minutes is None                      # a counted budget given: no default minutes


def test_defaults_presets_and_the_ten_minute_budget():
    assert cli.parse_args([]) == TrainConfig(minutes=10.0)
    assert cli.parse_args(["--steps", "3"]) == TrainConfig(steps=3)
    gpu = cli.parse_args(["--preset", "fashion-mnist-gpu", "--dim", "64"])
    assert gpu == dataclasses.replace(TrainConfig(), **{**PRESETS["fashion-mnist-gpu"], "dim": 64})
    assert cli.parse_args(["--steps", "1", "--num-heads", "8"]).num_heads == 8


@pytest.mark.parametrize("argv, says", [
    (["--dataset", "mnist"], "invalid choice: 'mnist'"),
    (["--tta", "all"], "invalid choice: 'all'"),
    (["--precision", "fp16"], "invalid choice: 'fp16'"),
    (["--steps", "1.5"], "invalid int value: '1.5'"),
    (["--lr", "fast"], "invalid float value: 'fast'"),
    (["--flip", "yes"], "unrecognized arguments: yes"),
    (["--preset", "tpu"], "invalid choice: 'tpu'"),
])
def test_bad_values_are_refused_with_what_was_expected(argv, says, capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(argv)
    assert says in capsys.readouterr().err


@dataclasses.dataclass
class GrownConfig(TrainConfig):
    """A config with fields the command line has never seen."""

    mixup: float = 0.0
    shuffle: bool = True
    note: str | None = None
    warmup_steps: int | None = None


@dataclasses.dataclass
class TupleConfig(TrainConfig):
    sizes: tuple[int, ...] = (1, 2)


def test_a_new_field_is_an_option_without_editing_the_command_line(monkeypatch):
    monkeypatch.setattr(cli, "TrainConfig", GrownConfig)
    config = cli.parse_args(["--steps", "1", "--mixup", "0.2", "--no-shuffle", "--note", "x", "--warmup-steps", "5"])
    assert isinstance(config, GrownConfig)
    assert (config.mixup, config.shuffle, config.note, config.warmup_steps) == (0.2, False, "x", 5)
    assert type(config.warmup_steps) is int
    assert cli.parse_args(["--steps", "1"]) == GrownConfig(steps=1)


def test_a_field_of_a_type_the_command_line_cannot_read_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cli, "TrainConfig", TupleConfig)
    with pytest.raises(TypeError, match=r"must be a bool, int, float or str \(or None\), got tuple\[int, \.\.\.\]"):
        cli.build_parser()
