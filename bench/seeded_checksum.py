"""Checksums of short seeded training runs, to show that a refactoring changed nothing.

Run it before and after a change and compare the two outputs (same machine, same torch)::

    git stash; python -m bench.seeded_checksum > /tmp/before.json; git stash pop
    python -m bench.seeded_checksum > /tmp/after.json; diff /tmp/before.json /tmp/after.json

Each run trains a few steps with ``threads=1`` on ``VITREF_FAST`` data (2,048 training, 1,000
test images) and prints a SHA-256 prefix of the trained parameters (bitwise), the steps, the
test accuracy and the per-epoch losses; the last entry is the gradient of one batch cut into two
slices run in parallel threads (the batch slices of vitref.training.tuner). Not part of
``make bench``: it measures no speed, and its numbers only mean something compared with each other.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

TINY = dict(dim=16, depth=1, heads=2, mlp_dim=32, batch_size=64)
RUNS = {
    "default-recipe": dict(steps=5),
    "distill-ema-mean-latecrop": dict(steps=5, distill="soft", teacher_epochs=0.5, ema=0.9, pool="mean",
                                      crop_from=0.5, val_size=256, **TINY),
    "hard-distill-erase-tta-flip": dict(epochs=0.2, distill="hard", teacher_epochs=0.3, erase=0.25, tta="flip",
                                        pos_init="random", **TINY),
}


def digest(named_tensors) -> str:
    """SHA-256 prefix of the names and the bytes of ``(name, tensor)`` pairs, in order."""
    h = hashlib.sha256()
    for name, tensor in named_tensors:
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def checksums() -> dict:
    os.environ["VITREF_FAST"] = "1"
    from concurrent.futures import ThreadPoolExecutor

    import torch

    import vitref
    from vitref.train import TrainConfig, train
    from vitref.training import forward_backward

    out = {}
    for name, extra in RUNS.items():
        model, history = train(seed=0, threads=1, out=None, progress=False, **extra)
        out[name] = dict(params=digest(model.state_dict().items()), steps=history["steps"],
                         test_accuracy=history["test_accuracy"],
                         train_loss=[e["train_loss"] for e in history["epochs"]])
    torch.manual_seed(0)
    model = vitref.ViT(28, 7, 1, 10, 32, 2, 4, 64)
    x, y, teacher = torch.randn(37, 1, 28, 28), torch.randint(0, 10, (37,)), torch.randn(37, 10)
    config = TrainConfig(distill="soft", distill_weight=0.3, distill_temperature=2.0)
    with ThreadPoolExecutor(2) as pool:
        loss, _ = forward_backward(model, x, y, teacher, config, 2, pool)
    out["slices-gradient"] = dict(grads=digest((n, p.grad) for n, p in model.named_parameters()), loss=loss.item())
    return out


def main(argv=None) -> int:
    if argv:
        print(__doc__)
        return 0 if argv in (["-h"], ["--help"]) else 2
    print(json.dumps(checksums(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
