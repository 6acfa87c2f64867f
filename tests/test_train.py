"""vitref.training (and its entry point vitref.train): schedule, determinism, outputs, the command line's
contract, the thread tuner, the package's structure."""
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vitref
from vitref import training as vtrain

TINY = dict(dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=64, progress=False)


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setenv("VITREF_FAST", "1")      # 2,048 training and 1,000 test images


def test_schedule_warms_up_then_decays_to_min_lr():
    config = vtrain.TrainConfig(lr=1e-3, warmup=0.1, min_lr=1e-5)
    assert vtrain.lr_at(0.0, config) == 0.0
    assert vtrain.lr_at(0.05, config) == pytest.approx(5e-4)
    assert vtrain.lr_at(0.1, config) == pytest.approx(1e-3)
    assert vtrain.lr_at(0.55, config) == pytest.approx(1e-5 + (1e-3 - 1e-5) / 2)
    assert vtrain.lr_at(1.0, config) == pytest.approx(1e-5)
    values = [vtrain.lr_at(p / 100, config) for p in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.slow   # training runs
def test_same_seed_same_run_different_seed_different_run(tmp_path):
    runs = [vtrain.train(steps=4, seed=seed, out=None, threads=1, **TINY) for seed in (3, 3, 4)]
    (m1, h1), (m2, h2), (m3, h3) = runs
    assert h1["steps"] == 4 and h1["epochs"][0]["train_loss"] == h2["epochs"][0]["train_loss"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert h1["test_accuracy"] == h2["test_accuracy"]
    assert h3["epochs"][0]["train_loss"] != h1["epochs"][0]["train_loss"]


@pytest.mark.slow   # training runs
def test_training_learns_and_writes_history_and_checkpoint(tmp_path):
    model, history = vtrain.train(epochs=3, seed=0, out=str(tmp_path), name="run", threads=1,
                                  tta="flip", lr=3e-3, **dict(TINY, dim=32, mlp_dim=64, batch_size=32))
    assert isinstance(model, vitref.ViT)
    run_dir = tmp_path / "run"
    saved = json.loads((run_dir / "history.json").read_text())
    assert saved["steps"] == history["steps"] == 3 * (2048 // 32)
    assert [e["epoch"] for e in saved["epochs"]] == [1, 2, 3]
    assert saved["config"]["dim"] == 32 and saved["num_parameters"] == vitref.count_parameters(model)
    assert saved["epochs"][1]["train_loss"] < saved["epochs"][0]["train_loss"]
    assert saved["test_accuracy"] > 0.3              # far above chance (0.1 on 1,000 test images)
    assert 0 <= saved["test_accuracy_plain"] <= 1 and saved["seconds"] > 0
    reloaded = vtrain.load_checkpoint(run_dir / "model.pt")
    x = torch.randn(3, 1, 28, 28)
    assert torch.equal(reloaded(x), model.eval()(x))


def test_a_budget_is_required():
    with pytest.raises(ValueError, match="budget"):
        vtrain.train(out=None, **TINY)


def test_sincos_positions_encode_row_and_column():
    model = vitref.ViT(28, 7, 1, 10, 16, 1, 2, 32)
    vtrain.init_sincos_positions(model)
    table = vitref.sinusoidal_encoding(4, 8)                          # 4 x 4 grid, D/2 = 8
    pos = model.pos_embed[0].detach()                                 # (17, 16)
    assert torch.equal(pos[0], torch.zeros(16))
    patch = 1 + 2 * 4 + 3                                             # row 2, column 3
    assert torch.allclose(pos[patch], torch.cat([table[2], table[3]]))
    assert model.pos_embed.requires_grad


def test_shift_moves_pixels_and_repeats_the_edge():
    x = torch.arange(9.0).view(1, 1, 3, 3)
    down = vtrain.shift_images(x, 1, 0)
    assert torch.equal(down[0, 0, 1:], x[0, 0, :2]) and torch.equal(down[0, 0, 0], x[0, 0, 0])
    left = vtrain.shift_images(x, 0, -1)
    assert torch.equal(left[0, 0, :, :2], x[0, 0, :, 1:])


def test_test_time_augmentation_averages_views():
    class Constant(torch.nn.Module):
        """Predicts class 1 for upright images, class 0 for mirror images (a left-right asymmetric pixel)."""

        def forward(self, x):
            right = x[..., -1].mean(dim=(1, 2))
            left = x[..., 0].mean(dim=(1, 2))
            return torch.stack([left - right, right - left], dim=1)

    images = torch.zeros(10, 1, 4, 4, dtype=torch.uint8)
    images[..., -1] = 255                                             # bright right column
    labels = torch.ones(10, dtype=torch.long)
    info = dict(mean=(0.0,), std=(1.0,))
    plain = vtrain.evaluate(Constant(), images, labels, info, tta="none")
    assert plain["accuracy"] == 1.0
    both = vtrain.evaluate(Constant(), images, labels, info, tta="flip")
    assert both["accuracy_plain"] == 1.0
    assert both["loss"] == pytest.approx(math.log(2))                  # the two views cancel out
    with pytest.raises(ValueError, match="tta"):
        vtrain.evaluate(Constant(), images, labels, info, tta="mirror")


def test_thread_tuner_keeps_the_faster_option():
    tuner = vtrain.ThreadTuner([2, 1], interval=10.0, steps_per_option=2)
    try:
        now = 0.0
        timings = {2: 0.5, 1: 0.1}                                    # a busy machine: one thread wins

        def run(steps, start_step):
            nonlocal now
            for step in range(start_step, start_step + steps):
                tuner.before_step(now)
                threads = torch.get_num_threads()
                now += timings[threads]
                tuner.after_step(timings[threads], now, step)

        # 2 steps with 1 thread, then 2 threads (a first, untimed step, then 5x slower: dropped)
        run(4, 1)
        assert tuner.best == 1 and torch.get_num_threads() == 1 and not tuner.plan
        assert tuner.choices[-1]["ms_per_step"] == {1: 100.0, 2: 500.0}
        tuner.before_step(now + 1.0)                                  # before the next check: no probing
        assert torch.get_num_threads() == 1 and not tuner.plan
        timings = {2: 0.06, 1: 0.1}                                   # the machine is idle again
        now += 100.0
        run(4, 4)
        assert tuner.best == 2 and torch.get_num_threads() == 2 and tuner.interval == 10.0
        assert tuner.choices[-1]["ms_per_step"] == {1: 100.0, 2: 60.0}
        timings = {2: 0.5, 1: 0.1}                                    # busy again: 2 threads slow down
        run(3, 8)                                                     # three slow steps ...
        assert tuner.next_probe == pytest.approx(now) and not tuner.plan
        run(3, 11)                                                    # ... trigger a check well before 10 s
        assert tuner.best == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(vtrain.available_cores())


@pytest.mark.slow   # training runs
def test_command_line_contract(tmp_path):
    env = dict(os.environ, VITREF_FAST="1")
    command = [sys.executable, "-m", "vitref.train", "--dataset", "fashion-mnist", "--minutes", "0.25",
               "--dim", "16", "--depth", "1", "--heads", "2", "--mlp-dim", "32", "--batch-size", "64",
               "--tta", "flip", "--out", str(tmp_path), "--name", "cli", "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"test_accuracy=(0\.\d{4}|1\.0000) wall_seconds=(\d+)", last)
    assert match, last
    history = json.loads((tmp_path / "cli" / "history.json").read_text())
    assert f"{history['test_accuracy']:.4f}" == match.group(1)
    assert history["steps"] > 0 and history["config"]["minutes"] == 0.25
    assert int(match.group(2)) <= 0.25 * 60 + 15                     # the budget covers the whole command


@pytest.mark.slow   # training runs
def test_distillation_trains_a_teacher_first_and_records_it():
    model, history = vtrain.train(epochs=1, seed=0, out=None, threads=1, distill="soft", teacher_epochs=1,
                                  val_size=256, **TINY)
    teacher = history["teacher"]
    assert teacher["steps"] == 2048 // 256 and teacher["epochs"] == 1    # VITREF_FAST: 2,048 training images
    assert 0.0 <= teacher["train_accuracy"] <= 1.0 and 0.0 <= teacher["val_accuracy"] <= 1.0
    _, plain = vtrain.train(epochs=1, seed=0, out=None, threads=1, val_size=256, **TINY)
    assert "teacher" not in plain
    # the loss includes the teacher's term
    assert history["epochs"][0]["train_loss"] != plain["epochs"][0]["train_loss"]
    with pytest.raises(ValueError, match="distill 'sharp'"):
        vtrain.train(steps=1, out=None, distill="sharp", **TINY)
    with pytest.raises(ValueError, match="teacher_share"):
        vtrain.train(minutes=1, out=None, distill="hard", teacher_share=1.5, **TINY)


@pytest.mark.slow   # training runs
def test_weight_averaging_and_late_crops_change_the_run_deterministically():
    base = dict(steps=6, seed=1, out=None, threads=1, **TINY)
    (m_plain, _), (m_ema, _), (m_ema2, _) = [vtrain.train(**base, **extra)
                                             for extra in ({}, dict(ema=0.9), dict(ema=0.9))]
    assert all(torch.equal(a, b) for a, b in zip(m_ema.state_dict().values(), m_ema2.state_dict().values()))
    assert not torch.equal(m_ema.head.weight, m_plain.head.weight)
    runs = [vtrain.train(**base, crop_padding=1, crop_from=p)[0] for p in (0.0, 0.5, 1.0)]
    assert not torch.equal(runs[0].head.weight, runs[1].head.weight)
    assert not torch.equal(runs[1].head.weight, runs[2].head.weight)
    no_crop, _ = vtrain.train(**base, crop_padding=0)
    assert torch.equal(no_crop.head.weight, runs[2].head.weight)      # crops that never start: no crops


def test_batch_slices_in_threads_give_the_whole_batch_gradient_deterministically():
    from concurrent.futures import ThreadPoolExecutor

    torch.manual_seed(0)
    model = vitref.ViT(28, 7, 1, 10, 32, 2, 4, 64)
    x, y = torch.randn(37, 1, 28, 28), torch.randint(0, 10, (37,))    # an odd batch: slices of 18 and 19
    teacher = torch.randn(37, 10)
    config = vtrain.TrainConfig(distill="soft", distill_weight=0.3, distill_temperature=2.0)

    def gradients(splits, pool=None):
        model.zero_grad(set_to_none=True)
        loss, correct = vtrain.forward_backward(model, x, y, teacher, config, splits, pool)
        return loss, correct, [p.grad.clone() for p in model.parameters()]

    whole_loss, whole_correct, whole = gradients(1)
    with ThreadPoolExecutor(2) as pool:
        runs = [gradients(2, pool) for _ in range(3)]
    for loss, correct, grads in runs:
        torch.testing.assert_close(loss, whole_loss)
        assert int(correct) == int(whole_correct)
        for g, w in zip(grads, whole):
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)
        for g, first in zip(grads, runs[0][2]):
            assert torch.equal(g, first)                               # same slices, same sums: bitwise


def test_thread_tuner_can_choose_batch_slices():
    tuner = vtrain.ThreadTuner([1, 2, (1, 2)], interval=10.0, steps_per_option=1)
    try:
        assert tuner.options == [1, 2, (1, 2)] and tuner.splits == 1
        timings = {(1, 1): 0.1, (2, 1): 0.07, (1, 2): 0.05}
        now = 0.0
        for step in range(1, 6):                  # 1 thread; 2 threads twice and slices twice (first steps untimed)
            tuner.before_step(now)
            option = (torch.get_num_threads(), tuner.splits)
            now += timings[option]
            tuner.after_step(timings[option], now, step)
        assert tuner.best == (1, 2) and tuner.splits == 2 and torch.get_num_threads() == 1
        assert tuner.choices[-1] == dict(step=5, threads="1x2", ms_per_step={1: 100.0, 2: 70.0, "1x2": 50.0})
    finally:
        torch.set_num_threads(vtrain.available_cores())


def test_sliced_forward_equals_the_model_without_building_graphs():
    from concurrent.futures import ThreadPoolExecutor

    model = vitref.ViT(28, 7, 1, 10, 16, 1, 2, 32).eval()
    x = torch.randn(9, 1, 28, 28)
    with ThreadPoolExecutor(2) as pool:
        sliced = vtrain.SlicedForward(model, 2, pool)
        out = sliced(x)
        assert not out.requires_grad and not sliced.training
        torch.testing.assert_close(out, model(x))
        labels = torch.randint(0, 10, (9,))
        images = torch.randint(0, 256, (9, 1, 28, 28), dtype=torch.uint8)
        info = dict(mean=(0.3,), std=(0.3,))
        assert vtrain.evaluate(sliced, images, labels, info, tta="flip-shift") == \
            pytest.approx(vtrain.evaluate(model, images, labels, info, tta="flip-shift"))


def test_thread_tuner_does_not_time_an_options_first_step():
    tuner = vtrain.ThreadTuner([1, (1, 2)], interval=10.0, steps_per_option=1)
    try:
        timings = iter([0.1, 5.0, 0.05])          # 1 thread; slices' first step (thread start-up); slices
        now = 0.0
        for step in range(1, 4):
            tuner.before_step(now)
            seconds = next(timings)
            now += seconds
            tuner.after_step(seconds, now, step)
        assert tuner.best == (1, 2) and tuner.choices[-1]["ms_per_step"] == {1: 100.0, "1x2": 50.0}
    finally:
        torch.set_num_threads(vtrain.available_cores())


def test_timm_comparison_model_pools_like_vitref():
    from vitref import data as vdata

    info = vdata.DATASET_INFO["fashion-mnist"]
    for pool, global_pool in (("cls", "token"), ("mean", "avg")):
        shape = {k: TINY[k] for k in ("dim", "depth", "num_heads", "mlp_dim")}
        model = vtrain.build_model(vtrain.TrainConfig(arch="timm", pool=pool, **shape), info)
        assert model.global_pool == global_pool
        assert isinstance(model.norm, torch.nn.LayerNorm) and isinstance(model.fc_norm, torch.nn.Identity)


# ------------------------------------------------------------ the package's structure and entry points

TRAINING_DIR = os.path.join(os.path.dirname(vitref.__file__), "training")


def _relative_imports(path):
    """``(module imported, names)`` of each ``from .x import a, b`` in a vitref.training module."""
    import ast

    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            target = ("" if node.level == 1 else "..") + (node.module or "")
            yield target, [alias.name for alias in node.names]


def test_training_modules_import_no_private_name_and_form_no_cycle():
    modules = sorted(f[:-3] for f in os.listdir(TRAINING_DIR) if f.endswith(".py") and f != "__init__.py")
    assert {"config", "optim", "models", "evaluate", "tuner", "teacher", "loop", "cli"} <= set(modules)
    graph = {}
    for module in modules:
        graph[module] = set()
        for target, names in _relative_imports(os.path.join(TRAINING_DIR, module + ".py")):
            private = [n for n in names if n.startswith("_")]
            assert not private, f"vitref/training/{module}.py imports private names {private} from {target}"
            if not target.startswith(".."):                       # a sibling module of vitref.training
                assert target in modules, f"{module} imports an unknown sibling {target!r}"
                graph[module].add(target)
    # depth-first search for a cycle among the siblings
    state = {}

    def visit(module, path):
        if state.get(module) == "open":
            raise AssertionError("import cycle: " + " -> ".join(path + [module]))
        if state.get(module) != "done":
            state[module] = "open"
            for target in sorted(graph[module]):
                visit(target, path + [module])
            state[module] = "done"

    for module in modules:
        visit(module, [])
    assert "loop" not in graph["teacher"] and "cli" not in graph["loop"]


def test_the_entry_point_re_exports_the_training_package_and_is_the_only_alias():
    import vitref.train

    for name in set(vitref.train.__all__) - {"main"}:
        assert getattr(vitref.train, name) is getattr(vtrain, name), name
    assert vitref.train.main is vtrain.cli.main
    assert "vitref.train" not in vitref.__dict__.get("__all__", [])
    # the teacher is imported from where it lives: one name for it, not an alias beside the package
    assert not (Path(vitref.__file__).parent / "teacher.py").exists()


def test_model_fields_are_named_as_vits_arguments_and_the_old_heads_still_works():
    import dataclasses
    import inspect

    from vitref.training.cli import parse_args

    fields = {f.name for f in dataclasses.fields(vtrain.TrainConfig)}
    model_fields = {"dim", "depth", "num_heads", "mlp_dim", "dropout", "patch_size"}
    assert model_fields <= fields and model_fields <= set(inspect.signature(vitref.ViT).parameters)
    assert "heads" not in fields                                            # not stored, not in history.json
    assert vtrain.TrainConfig(heads=8).num_heads == 8                      # scripts written before the rename
    assert vtrain.TrainConfig(num_heads=2).num_heads == 2
    assert dataclasses.replace(vtrain.TrainConfig(num_heads=2), lr=1e-3).num_heads == 2
    assert dataclasses.replace(vtrain.TrainConfig(), heads=6).num_heads == 6  # train(heads=6) goes through replace
    old_history_config = dict(dataclasses.asdict(vtrain.TrainConfig()), heads=8)
    del old_history_config["num_heads"]
    assert vtrain.TrainConfig(**old_history_config).num_heads == 8
    assert "heads" not in dataclasses.asdict(vtrain.TrainConfig(heads=8))
    for flag in ("--heads", "--num-heads"):
        assert parse_args(["--steps", "1", flag, "8"]).num_heads == 8
    assert parse_args(["--steps", "1"]).num_heads == vtrain.TrainConfig().num_heads
    assert parse_args(["--preset", "cifar10-gpu"]).num_heads == vtrain.PRESETS["cifar10-gpu"]["num_heads"]
    assert all(set(preset) <= fields for preset in vtrain.PRESETS.values())


def test_console_script_is_declared_and_points_to_the_command_line():
    import importlib
    import tomllib

    root = os.path.dirname(os.path.dirname(vitref.__file__))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, _, function = scripts["vitref-train"].partition(":")
    assert getattr(importlib.import_module(module), function) is vitref.train.main


@pytest.mark.slow   # training runs
def test_command_line_and_python_api_give_the_same_seeded_run(tmp_path):
    # Two code paths to the same run: the command line's defaults (argument parsing, presets) must
    # be TrainConfig's, and the run bitwise the same as train()'s in this process.
    env = dict(os.environ, VITREF_FAST="1")
    command = [sys.executable, "-m", "vitref.train", "--steps", "3", "--seed", "5", "--threads", "1",
               "--tta", "none", "--out", str(tmp_path), "--name", "cli", "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = torch.load(tmp_path / "cli" / "model.pt", weights_only=True)
    model, history = vtrain.train(steps=3, seed=5, threads=1, tta="none", out=None, progress=False)
    expected_config = dict(history["config"], out=str(tmp_path), name="cli")
    assert saved["config"] == expected_config
    state = model.state_dict()
    assert saved["state_dict"].keys() == state.keys()
    assert all(torch.equal(saved["state_dict"][k], state[k]) for k in state)


def test_precision_auto_is_bf16_only_for_timed_cpu_runs_with_matrix_units_and_compiles_only_those(monkeypatch):
    from vitref.training import config as vconfig

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(vconfig, "has_bf16_matrix_units", lambda: True)
    assert vconfig.autocast_dtype("auto", cpu, timed=True) is torch.bfloat16
    assert vconfig.autocast_dtype("auto", cpu, timed=False) is None        # counted runs: float32 on every CPU
    assert vconfig.autocast_dtype("auto", cuda, timed=True) is None
    assert vconfig.autocast_dtype("fp32", cpu, timed=True) is None
    assert vconfig.autocast_dtype("bf16", cpu) is torch.bfloat16
    with pytest.raises(ValueError, match=r"unknown precision 'fp16': expected one of \['fp32', 'bf16', 'auto'\]"):
        vconfig.autocast_dtype("fp16", cpu)
    ten = vtrain.TrainConfig(minutes=10)
    assert vconfig.compiles(ten, cpu) and not vconfig.compiles(vtrain.TrainConfig(minutes=1), cpu)
    assert not vconfig.compiles(vtrain.TrainConfig(epochs=50), cpu)
    assert not vconfig.compiles(vtrain.TrainConfig(minutes=10, compile=False), cpu)
    assert not vconfig.compiles(vtrain.TrainConfig(minutes=10, precision="fp32"), cpu)
    assert vconfig.compiles(vtrain.TrainConfig(steps=3, compile=True), cpu)
    assert vconfig.resolved(ten, cpu) == vtrain.TrainConfig(minutes=10, precision="bf16", compile=True)
    monkeypatch.setattr(vconfig, "has_bf16_matrix_units", lambda: False)     # e.g. an AMD or older Intel CPU
    assert vconfig.resolved(ten, cpu) == vtrain.TrainConfig(minutes=10, precision="fp32", compile=False)


def test_a_bf16_step_autocasts_the_forward_and_keeps_float32_gradients():
    torch.manual_seed(0)
    model = vitref.ViT(28, 7, 1, 10, 32, 2, 4, 64)
    x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))

    def step(precision):
        model.zero_grad(set_to_none=True)
        loss, _ = vtrain.forward_backward(model, x, y, None, vtrain.TrainConfig(precision=precision))
        return loss, [p.grad.clone() for p in model.parameters()]

    loss32, grads32 = step("fp32")
    loss16, grads16 = step("bf16")
    assert loss16.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads16)
    assert loss16 != loss32                                     # the forward really ran in bfloat16...
    torch.testing.assert_close(loss16, loss32, rtol=2e-2, atol=0)   # ...to bfloat16's precision
    cosine = torch.cosine_similarity(torch.cat([g.flatten() for g in grads16]),
                                     torch.cat([g.flatten() for g in grads32]), dim=0)
    assert cosine > 0.99
    assert step("auto")[0] == loss32                           # no time budget: float32


def test_a_compiled_run_keeps_all_cores_untuned_and_the_history_says_what_ran(monkeypatch):
    from vitref.training import loop

    monkeypatch.setattr(loop, "available_cores", lambda: 2)
    cpu = torch.device("cpu")
    try:
        torch.set_num_threads(1)
        assert loop._thread_tuner(vtrain.TrainConfig(minutes=10, compile=True), cpu) is None
        assert torch.get_num_threads() == 2                  # one thread count: one compilation
        assert loop._thread_tuner(vtrain.TrainConfig(minutes=10, compile=False), cpu).options == [1, 2, (1, 2)]
    finally:
        torch.set_num_threads(vtrain.available_cores())
    _, history = vtrain.train(steps=2, precision="bf16", out=None, threads=1, tta="none", **TINY)
    assert history["config"]["precision"] == "bf16" and history["config"]["compile"] is False
    _, history = vtrain.train(steps=2, out=None, threads=1, tta="none", **TINY)
    assert history["config"]["precision"] == "fp32"           # 'auto' written out: a counted run


def test_the_command_line_keeps_freed_memory_for_the_next_step_on_glibc():
    import platform

    probe = "from vitref.training.cli import keep_freed_memory; print(keep_freed_memory())"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert out == ("True" if glibc else "False")
