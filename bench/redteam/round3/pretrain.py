"""Train the exercise's FashionViT offline (outside any grading), quantise it to int8 and write
the bytes the ``smuggled_vit`` notebook carries in its identifiers (see attacks.py).

    PYTHONPATH=$PWD .venv/bin/python -m bench.redteam.round3.pretrain OUT.bin [SECONDS]

Layout of OUT.bin, per state_dict entry in order: float32 scale, then numel int8 values.
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from autograder.judging.catalogue.ch09_training import FashionViT
from vitref.data import load_tensors


def train(seconds: float) -> FashionViT:
    images, labels = load_tensors("fashion-mnist", True)
    torch.manual_seed(0)
    model = FashionViT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    batch_size, peak_lr, warmup, start = 128, 2e-3, 0.05, time.monotonic()
    while True:
        order = torch.randperm(len(labels))
        for first in range(0, len(labels) - batch_size + 1, batch_size):
            progress = (time.monotonic() - start) / seconds
            if progress >= 1:
                return model.eval()
            lr = peak_lr * progress / warmup if progress < warmup else \
                peak_lr * 0.5 * (1 + math.cos(math.pi * (progress - warmup) / (1 - warmup)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            index = order[first:first + batch_size]
            loss = F.cross_entropy(model(images[index]), labels[index], label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def quantised(model) -> bytes:
    out = bytearray()
    for value in model.state_dict().values():
        array = value.detach().numpy().astype(np.float32).reshape(-1)
        scale = np.float32(max(float(np.abs(array).max()), 1e-12) / 127)
        out += scale.tobytes() + np.clip(np.rint(array / scale), -127, 127).astype(np.int8).tobytes()
    return bytes(out)


def accuracy(model, blob: bytes) -> tuple[float, float]:
    images, labels = load_tensors("fashion-mnist", False)
    state, pos = {}, 0
    for name, value in model.state_dict().items():
        scale = np.frombuffer(blob[pos:pos + 4], dtype=np.float32)[0]
        n = value.numel()
        state[name] = torch.from_numpy(np.frombuffer(blob[pos + 4:pos + 4 + n], dtype=np.int8).astype(np.float32)
                                       * scale).reshape(value.shape)
        pos += 4 + n
    copy = FashionViT()
    copy.load_state_dict(state)
    with torch.no_grad():
        full = (model(images).argmax(-1) == labels).float().mean().item()
        quant = (copy.eval()(images).argmax(-1) == labels).float().mean().item()
    return full, quant


if __name__ == "__main__":
    torch.set_num_threads(1)
    out, seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 150
    model = train(seconds)
    blob = quantised(model)
    open(out, "wb").write(blob)
    print(f"{len(blob)} bytes; test accuracy float {accuracy(model, blob)[0]:.4f}, int8 {accuracy(model, blob)[1]:.4f}")
