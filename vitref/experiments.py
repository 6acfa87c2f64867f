"""Experiments that train several small models: accuracy against training-set size (chapter 7) and
with dropout on or off (chapter 5).

:func:`data_size_curve` trains the course's ViT (:func:`vitref.train.train`, its recipe) and the small
CNN (:func:`vitref.training.teacher.train_teacher`, the ``ConvTeacher``) on the first ``n`` training images for
the same number of optimiser steps, for each ``n`` in ``sizes``, and scores both on the same test images
with a single view. Everything is counted (steps, seeds, threads), never timed, so the numbers are the same
at every run with the same PyTorch on the same kind of processor. :func:`dropout_on_off` trains the same
ViT with and without dropout and scores it on its training images and on the test images.

:func:`save_run` and :func:`load_or_train_run` let chapter 7's second page ("What a ViT learns") use
the ViT that its first page trained, without training it again: the first page saves the model under a
key made of the run's settings, PyTorch's version and vitref's source code; the second loads it, or, where
no such file exists (another machine, a changed vitref), trains it with the same settings, which gives
the same weights.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch

from . import data as vdata
from .training import evaluate, load_checkpoint, train
from .training.teacher import train_teacher

VITREF_ROOT = Path(__file__).resolve().parent


def data_size_curve(sizes, steps: int, *, dataset: str = "fashion-mnist", seed: int = 0, threads: int = 1,
                    test_limit: int | None = None) -> list[dict]:
    """Test accuracy of the ViT and the CNN, each trained for the same ``steps`` optimiser steps on the
    first ``n`` training images, for each ``n`` in ``sizes``.

    Every size gets the same number of steps (batches of 256, whole batches only, the learning-rate
    schedule spread over those steps), so a small set is passed over more often: ``steps * 256 / n``
    epochs, about. What differs between sizes is only how many different images the steps see.
    Returns one row per (size, model): ``dict(size, model ('vit' or 'cnn'), accuracy, steps, epochs,
    seconds)``; ``seconds`` is this machine's training time (the only number that varies).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive whole number of optimiser steps, got {steps!r}")
    info = vdata.DATASET_INFO[dataset]
    train_images, train_labels = vdata.load_tensors(dataset, train=True)
    sizes = [int(n) for n in sizes]
    for n in sizes:
        if not 256 <= n <= len(train_labels):
            raise ValueError(f"training-set size {n} is outside 256 .. {len(train_labels)}")
    test_images, test_labels = vdata.load_tensors(dataset, train=False)
    test_limit = test_limit or len(test_labels)
    test_images, test_labels = test_images[:test_limit], test_labels[:test_limit]
    rows = []
    threads_before = torch.get_num_threads()
    try:
        for n in sizes:
            _, history = train(dataset=dataset, seed=seed, threads=threads, steps=steps, train_limit=n,
                               test_limit=test_limit, tta="none", eval_every_epoch=False, out=None, progress=False)
            rows.append(dict(size=n, model="vit", accuracy=history["test_accuracy"], steps=history["steps"],
                             epochs=history["epochs_run"], seconds=round(history["train_seconds"], 1)))
            torch.set_num_threads(threads)
            started = time.time()
            cnn, summary = train_teacher(train_images[:n], train_labels[:n], info, steps=steps, seed=seed)
            seconds = time.time() - started
            result = evaluate(cnn, test_images, test_labels, info, tta="none")
            rows.append(dict(size=n, model="cnn", accuracy=result["accuracy"], steps=summary["steps"],
                             epochs=summary["epochs"], seconds=round(seconds, 1)))
    finally:
        torch.set_num_threads(threads_before)
    return rows


def dropout_on_off(rates=(0.0, 0.1), *, steps: int, train_limit: int, dataset: str = "fashion-mnist",
                   seed: int = 0, threads: int = 1, test_limit: int | None = None) -> list[dict]:
    """The course's ViT (:func:`vitref.train.train`, its recipe) trained once per dropout rate in
    ``rates``, everything else equal (seed, ``steps``, the first ``train_limit`` training images), and
    scored with a single view on those training images and on the test images.

    Returns one row per rate: ``dict(dropout, train_accuracy, test_accuracy, gap (train - test), steps)``.
    Counted, never timed: the same numbers at every run with the same PyTorch on the same processor.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive whole number of optimiser steps, got {steps!r}")
    if not rates or any(not 0.0 <= float(p) < 1.0 for p in rates):
        raise ValueError(f"rates must be dropout probabilities in [0, 1), got {rates!r}")
    info = vdata.DATASET_INFO[dataset]
    train_images, train_labels = vdata.load_tensors(dataset, train=True)
    if not 256 <= train_limit <= len(train_labels):
        raise ValueError(f"train_limit {train_limit} is outside 256 .. {len(train_labels)}")
    seen_images, seen_labels = train_images[:train_limit], train_labels[:train_limit]   # (n, C, H, W), (n,)
    rows = []
    threads_before = torch.get_num_threads()
    try:
        for rate in rates:
            model, history = train(dataset=dataset, seed=seed, threads=threads, steps=steps, dropout=float(rate),
                                   train_limit=train_limit, test_limit=test_limit, tta="none",
                                   eval_every_epoch=False, out=None, progress=False)
            on_train = evaluate(model, seen_images, seen_labels, info, tta="none")["accuracy"]
            rows.append(dict(dropout=float(rate), train_accuracy=on_train, test_accuracy=history["test_accuracy"],
                             gap=on_train - history["test_accuracy"], steps=history["steps"]))
    finally:
        torch.set_num_threads(threads_before)
    return rows


def crossing(rows, first: str = "vit", second: str = "cnn") -> dict:
    """Where the ``first`` model's accuracy curve meets the ``second``'s, read from ``rows`` of
    :func:`data_size_curve`: ``dict(gaps {size: first - second}, ahead_at_smallest, ahead_at_largest,
    crosses, between (the two sizes around the first sign change, or None))``. A model is ahead when
    its accuracy is higher; a tie counts as neither ahead (``'level'``)."""
    accuracy = {(r["size"], r["model"]): r["accuracy"] for r in rows}
    sizes = sorted({r["size"] for r in rows if (r["size"], first) in accuracy and (r["size"], second) in accuracy})
    if not sizes:
        raise ValueError(f"no size has both {first!r} and {second!r}")
    gaps = {n: accuracy[n, first] - accuracy[n, second] for n in sizes}

    def ahead(gap: float) -> str:
        return first if gap > 0 else second if gap < 0 else "level"

    between = None
    for small, large in zip(sizes, sizes[1:]):
        if gaps[small] * gaps[large] < 0:
            between = (small, large)
            break
    return dict(gaps=gaps, ahead_at_smallest=ahead(gaps[sizes[0]]), ahead_at_largest=ahead(gaps[sizes[-1]]),
                crosses=between is not None, between=between)


def run_path(run: dict) -> Path:
    """Where :func:`save_run` keeps the model of ``train(**run)``: a file in vitref's cache folder
    (:func:`vitref.data.cache_dir`) named by a digest of the settings, ``VITREF_FAST`` (which shortens
    ``train``), PyTorch's version and the source of every vitref module, so that a change to any of them
    names another file."""
    if not isinstance(run, dict) or not run:
        raise ValueError(f"run must be a non-empty dict of train() settings, got {run!r}")
    fast = os.environ.get("VITREF_FAST", "") not in ("", "0")
    digest = hashlib.sha256(json.dumps([run, fast], sort_keys=True).encode() + torch.__version__.encode())
    for source in sorted(VITREF_ROOT.rglob("*.py")):
        digest.update(str(source.relative_to(VITREF_ROOT)).encode() + source.read_bytes())
    return vdata.cache_dir() / "book" / f"vit-{digest.hexdigest()[:20]}.pt"


def save_run(model: torch.nn.Module, history: dict, run: dict) -> Path:
    """Save the ViT that ``train(**run)`` returned, with its history, for :func:`load_or_train_run`."""
    path = run_path(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    torch.save(dict(state_dict=model.state_dict(), model=history["model"], history=json.dumps(history)), partial)
    partial.replace(path)                              # a reader never sees half a file
    return path


def load_or_train_run(run: dict) -> tuple[torch.nn.Module, dict]:
    """``(model in eval mode, history)`` of ``train(**run)`` as chapter 7 trains it (a per-epoch test
    record, single views, no files written by ``train``): read from :func:`save_run`'s file when it exists,
    otherwise trained now and saved."""
    path = run_path(run)
    if path.is_file():
        return load_checkpoint(path), json.loads(torch.load(path, map_location="cpu", weights_only=True)["history"])
    model, history = train(out=None, eval_every_epoch=True, tta="none", progress=False, **run)
    save_run(model, history, run)
    return model.eval(), history


__all__ = ["data_size_curve", "dropout_on_off", "crossing", "run_path", "save_run", "load_or_train_run"]
