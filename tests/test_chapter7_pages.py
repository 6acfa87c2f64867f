"""Chapter 7 on two pages: "The Vision Transformer" (build and train) and "What a ViT learns" (attention
maps, position table, a pretrained ViT-B/16, a new resolution). The second page uses the model the first
trained: the first saves it with ``vitref.experiments.save_run``, the second reads it with
``load_or_train_run``, which trains it again with the same settings where no file exists. Fast: reads the
notebooks' JSON and saves tiny models, trains nothing."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

import vitref
from vitref import experiments

ROOT = Path(__file__).resolve().parents[1]
FIRST, SECOND = ROOT / "book" / "07_vit.ipynb", ROOT / "book" / "07b_what_vit_learns.ipynb"
TINY = dict(img_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1, num_heads=2, mlp_dim=16)


def code_cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def vit_run(path: Path) -> tuple[dict, list[str]]:
    """The literal ``VIT_RUN = dict(...)`` of a page, and every line of the page that changes it."""
    found = []
    for source in code_cells(path):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["VIT_RUN"]:
                found.append({kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords})
    changes = [line.strip() for source in code_cells(path) for line in source.splitlines()
               if "VIT_RUN.update(" in line]
    assert len(found) == 1, f"{path.name} should define VIT_RUN once, found {found}"
    return found[0], changes


def test_the_second_page_uses_the_first_pages_run():
    first, first_changes = vit_run(FIRST)
    second, second_changes = vit_run(SECOND)
    assert second == first, f"07b's VIT_RUN {second} differs from 07's {first}: it would train another model"
    assert second_changes == first_changes, (first_changes, second_changes)
    assert any("save_run(model, history, VIT_RUN)" in s for s in code_cells(FIRST)), "07 does not save its model"
    assert any("load_or_train_run(VIT_RUN)" in s for s in code_cells(SECOND)), "07b does not load the model"


def test_the_pages_are_listed_in_order():
    toc = (ROOT / "_toc.yml").read_text()
    assert toc.index("book/07_vit\n") < toc.index("book/07b_what_vit_learns\n") < toc.index("book/08_decoder")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("VITREF_FAST", raising=False)
    return tmp_path


def test_run_path_is_named_by_the_settings_and_the_fast_mode(cache, monkeypatch):
    run = dict(dataset="fashion-mnist", seed=0, threads=2, epochs=16)
    path = experiments.run_path(run)
    assert path.parent == cache / "vitref" / "book" and path.suffix == ".pt"
    assert experiments.run_path(dict(run)) == path                      # the same settings, the same file
    assert experiments.run_path(dict(run, seed=1)) != path
    assert experiments.run_path(dict(run, epochs=15)) != path
    monkeypatch.setenv("VITREF_FAST", "1")                               # train() shortens its runs then
    assert experiments.run_path(run) != path
    with pytest.raises(ValueError, match="non-empty dict"):
        experiments.run_path({})


def test_a_saved_run_is_loaded_without_training(cache, monkeypatch):
    torch.manual_seed(0)
    model = vitref.ViT(**TINY)
    history = dict(model=TINY, steps=3, epochs=[dict(epoch=1, test_accuracy=0.5)], config=dict(test_limit=None))
    run = dict(dataset="fashion-mnist", seed=0, threads=1, steps=3)
    path = experiments.save_run(model, history, run)
    assert path.is_file() and not list(path.parent.glob("*.part"))

    def no_training(**kwargs):
        raise AssertionError("load_or_train_run trained although the run was saved")

    monkeypatch.setattr(experiments, "train", no_training)
    loaded, loaded_history = experiments.load_or_train_run(run)
    assert loaded_history == history and not loaded.training
    for (name, saved), (_, got) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(saved, got), name


def test_a_missing_run_is_trained_with_the_chapters_call_and_saved(cache, monkeypatch):
    calls = []

    def fake_train(**kwargs):
        calls.append(kwargs)
        torch.manual_seed(1)
        return vitref.ViT(**TINY), dict(model=TINY, steps=1, config=dict(test_limit=None))

    monkeypatch.setattr(experiments, "train", fake_train)
    run = dict(dataset="fashion-mnist", seed=3, threads=1, steps=1)
    model, history = experiments.load_or_train_run(run)
    assert calls == [dict(out=None, eval_every_epoch=True, tta="none", progress=False, **run)]
    assert experiments.run_path(run).is_file() and history["steps"] == 1 and not model.training
    experiments.load_or_train_run(run)
    assert len(calls) == 1, "the second call should read the file the first one saved"
