"""Chapter 7 prints the same numbers at every build: its two training runs (the ViT, the CNN it is
compared with) are budgeted in epochs with a fixed seed and a fixed number of threads, never in
wall-clock time, and the training code gives bit-identical results for those settings."""
import ast
import hashlib
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


def test_chapter_budgets_its_runs_in_epochs_with_a_seed_and_fixed_threads():
    vit = chapter_setting("VIT_RUN")
    assert isinstance(vit.get("epochs"), int) and vit["epochs"] >= 1, vit
    assert isinstance(vit.get("threads"), int) and vit["threads"] >= 1, "threads=0 or None lets the tuner choose"
    assert isinstance(vit.get("seed"), int) and "minutes" not in vit, vit
    cnn = chapter_setting("CNN_RUN")
    assert isinstance(cnn.get("epochs"), (int, float)) and cnn["epochs"] > 0 and isinstance(cnn.get("seed"), int)
    code = "\n".join(chapter_code())
    # the runs use these settings, and nothing in the chapter trains against the clock or tunes threads
    assert "train(out=None, eval_every_epoch=True, tta=\"none\", progress=False, **VIT_RUN)" in code
    assert "train_teacher(cnn_images, cnn_labels, info, **CNN_RUN)" in code
    for timed in ("minutes=", "deadline=", "ThreadTuner", "threads=0"):
        assert timed not in code, f"chapter 7 still has a time-dependent setting: {timed}"


RUN = """
import hashlib, json, sys, torch
from vitref.train import train
from vitref.teacher import train_teacher
import vitref.data
torch.set_num_threads(1)                          # as the chapter's setup cell
vit, cnn = json.loads(sys.argv[1]), json.loads(sys.argv[2])
model, history = train(out=None, eval_every_epoch=True, tta="none", progress=False, **vit)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())).hexdigest()
info = vitref.data.DATASET_INFO["fashion-mnist"]
images, labels = vitref.data.load_tensors("fashion-mnist", train=True)
teacher, summary = train_teacher(images, labels, info, **cnn)
cnn_digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in teacher.state_dict().values())).hexdigest()
print(json.dumps(dict(loss=history["epochs"][-1]["train_loss"], test=history["epochs"][-1]["test_loss"],
                      accuracy=history["test_accuracy"], vit=digest, cnn=cnn_digest, steps=history["steps"],
                      cnn_steps=summary["steps"], thread_choices=history.get("thread_choices"))))
"""


@pytest.mark.slow   # two short training runs in fresh processes
def test_chapter_settings_give_bit_identical_runs():
    vit = chapter_setting("VIT_RUN")
    vit.update(epochs=None, steps=30)                       # the chapter's settings, a few steps of them
    cnn = dict(chapter_setting("CNN_RUN"), epochs=0.1)      # 24 steps of the CNN's
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", RUN, json.dumps(vit), json.dumps(cnn)], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["steps"] == 30 and first["cnn_steps"] == 24 and first["thread_choices"] is None
    assert first == second, f"two runs with chapter 7's settings differ:\n{first}\n{second}"
    assert hashlib.sha256(b"").hexdigest() not in (first["vit"], first["cnn"])
