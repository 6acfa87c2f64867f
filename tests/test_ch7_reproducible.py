"""Chapter 7 prints the same numbers at every build: its training runs (the ViT, the CNN it is
compared with, and both again on smaller training sets) are budgeted in epochs or optimiser steps with
a fixed seed and a fixed number of threads, never in wall-clock time, and the training code gives bit-identical
results for those settings."""
import ast
import hashlib
import re
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "07_vit.ipynb"


def chapter_code() -> list:
    return ["".join(c["source"]) for c in json.loads(CHAPTER.read_text())["cells"] if c["cell_type"] == "code"]


def chapter_setting(name: str) -> dict:
    """The keyword arguments of ``NAME = dict(...)`` in chapter 7 (literals only), and the cell that defines it."""
    for source in chapter_code():
        for node in ast.parse(source).body:
            if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]
                    and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "dict"):
                return {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
    raise AssertionError(f"chapter 7 defines no {name} = dict(...)")


def chapter_threads() -> int:
    """N of the one ``torch.set_num_threads(N)`` in chapter 7 (its setup cell)."""
    found = re.findall(r"^torch\.set_num_threads\((\d+)\)", "\n".join(chapter_code()), flags=re.M)
    assert len(found) == 1, f"chapter 7 should set its threads once, found {found}"
    return int(found[0])


def test_chapter_budgets_its_runs_in_epochs_with_a_seed_and_fixed_threads():
    vit = chapter_setting("VIT_RUN")
    assert isinstance(vit.get("epochs"), int) and vit["epochs"] >= 1, vit
    assert isinstance(vit.get("threads"), int) and vit["threads"] >= 1, "threads=0 or None lets the tuner choose"
    assert isinstance(vit.get("seed"), int) and "minutes" not in vit, vit
    cnn = chapter_setting("CNN_RUN")
    assert isinstance(cnn.get("epochs"), (int, float)) and cnn["epochs"] > 0 and isinstance(cnn.get("seed"), int)
    data = chapter_setting("DATA_RUN")
    # every training-set size gets the same optimiser steps, for both models (not the same epochs)
    assert isinstance(data.get("steps"), int) and data["steps"] >= 1 and "epochs" not in data, data
    assert isinstance(data.get("seed"), int) and data.get("threads") == vit["threads"], data
    assert all(isinstance(n, int) and 256 <= n < 60000 for n in data["sizes"]), data
    code = "\n".join(chapter_code())
    calls = re.sub(r"\s+", "", code)                # the calls as written, however a formatter wraps them
    # the runs use these settings, and nothing in the chapter trains against the clock or tunes threads
    assert "train(out=None,eval_every_epoch=True,tta=\"none\",progress=False,**VIT_RUN)" in calls
    assert "train_teacher(cnn_images,cnn_labels,info,**CNN_RUN)" in calls
    assert "data_size_curve(**DATA_RUN)" in calls
    # the CNN runs in the setup cell's thread count, which is the ViT's
    assert chapter_threads() == vit["threads"], "the setup cell's torch.set_num_threads differs from VIT_RUN's"
    for timed in ("minutes=", "deadline=", "ThreadTuner", "threads=0"):
        assert timed not in code, f"chapter 7 still has a time-dependent setting: {timed}"


RUN = """
import hashlib, json, sys, torch
from vitref.train import train
from vitref.training.teacher import train_teacher
import vitref.data
from vitref.experiments import data_size_curve
torch.set_num_threads(int(sys.argv[3]))           # as the chapter's setup cell
vit, cnn, data = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[4])
model, history = train(out=None, eval_every_epoch=True, tta="none", progress=False, **vit)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())).hexdigest()
info = vitref.data.DATASET_INFO["fashion-mnist"]
images, labels = vitref.data.load_tensors("fashion-mnist", train=True)
teacher, summary = train_teacher(images, labels, info, **cnn)
cnn_digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in teacher.state_dict().values())).hexdigest()
curve = [{k: v for k, v in row.items() if k != "seconds"} for row in data_size_curve(**data)]
print(json.dumps(dict(loss=history["epochs"][-1]["train_loss"], test=history["epochs"][-1]["test_loss"],
                      accuracy=history["test_accuracy"], vit=digest, cnn=cnn_digest, steps=history["steps"],
                      cnn_steps=summary["steps"], thread_choices=history.get("thread_choices"),
                      threads=torch.get_num_threads(), curve=curve)))
"""


@pytest.mark.slow   # short training runs in fresh processes, twice
def test_chapter_settings_give_bit_identical_runs():
    vit = chapter_setting("VIT_RUN")
    vit.update(epochs=None, steps=30)                       # the chapter's settings, a few steps of them
    cnn = dict(chapter_setting("CNN_RUN"), epochs=0.1)      # 24 steps of the CNN's
    data = dict(chapter_setting("DATA_RUN"), sizes=[1000], steps=6, test_limit=2000)   # 6 steps of each model
    threads = chapter_threads()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", RUN, json.dumps(vit), json.dumps(cnn), str(threads),
                              json.dumps(data)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["steps"] == 30 and first["cnn_steps"] == 24 and first["thread_choices"] is None
    assert first["threads"] == threads == vit["threads"]
    assert [(r["model"], r["steps"]) for r in first["curve"]] == [("vit", 6), ("cnn", 6)], first["curve"]
    assert first == second, f"two runs with chapter 7's settings differ:\n{first}\n{second}"
    assert hashlib.sha256(b"").hexdigest() not in (first["vit"], first["cnn"])
