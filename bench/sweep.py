"""Recipe sweep for the Fashion-MNIST target: many short trainings, in parallel processes.

Each recipe is a set of :class:`vitref.train.TrainConfig` overrides, trained for a fixed number
of epochs (the number of epochs the recipe's model gets through in the CPU budget is measured
separately, see bench/RESULTS.md). Selection uses a validation split carved from the training
set (``val_size=5000``), never the test set; test accuracy is recorded for the table only.

    python -m bench.sweep --sweep models --device cuda --workers 8 --out sweep.jsonl
    python -m bench.sweep --sweep recipes --epochs 10 --device cpu --workers 1
    python -m bench.sweep --table bench/results/sweep*.jsonl      # the results as a markdown table

Not part of ``python -m bench`` (it is the exploration that chose the default recipe).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time

# The recipe every sweep run starts from (TrainConfig's defaults when the sweeps ran); a run's
# label names the model and the RECIPES entries applied on top, in order.
SWEEP_BASE = dict(batch_size=256, lr=2e-3, weight_decay=0.05, warmup=0.05, label_smoothing=0.1, grad_clip=1.0,
                  crop_padding=2, flip=True, erase=0.0, dropout=0.0, pos_init="random", tta="flip")

MODELS = {
    "p4-d64-L4-m128": dict(patch_size=4, dim=64, depth=4, heads=4, mlp_dim=128),
    "p4-d64-L4-m256": dict(patch_size=4, dim=64, depth=4, heads=4, mlp_dim=256),
    "p4-d48-L4-m96": dict(patch_size=4, dim=48, depth=4, heads=4, mlp_dim=96),
    "p4-d96-L4-m192": dict(patch_size=4, dim=96, depth=4, heads=4, mlp_dim=192),
    "p4-d64-L6-m128": dict(patch_size=4, dim=64, depth=6, heads=4, mlp_dim=128),
    "p7-d96-L4-m384": dict(patch_size=7, dim=96, depth=4, heads=4, mlp_dim=384),
    "p7-d128-L4-m512": dict(patch_size=7, dim=128, depth=4, heads=4, mlp_dim=512),
    "p7-d128-L6-m256": dict(patch_size=7, dim=128, depth=6, heads=4, mlp_dim=256),
    "p7-d192-L6-m384": dict(patch_size=7, dim=192, depth=6, heads=6, mlp_dim=384),
    "p7-d96-L6-m192": dict(patch_size=7, dim=96, depth=6, heads=4, mlp_dim=192),
    "p7-d64-L6-m256": dict(patch_size=7, dim=64, depth=6, heads=4, mlp_dim=256),
    "p7-d128-L3-m512": dict(patch_size=7, dim=128, depth=3, heads=4, mlp_dim=512),
    "p7-d160-L4-m320": dict(patch_size=7, dim=160, depth=4, heads=4, mlp_dim=320),
    "p7-d96-L8-m192": dict(patch_size=7, dim=96, depth=8, heads=4, mlp_dim=192),
    "p7-d64-L6-m128": dict(patch_size=7, dim=64, depth=6, heads=4, mlp_dim=128),
    "p7-d64-L4-m256": dict(patch_size=7, dim=64, depth=4, heads=4, mlp_dim=256),
    "p7-d64-L8-m256": dict(patch_size=7, dim=64, depth=8, heads=4, mlp_dim=256),
    "p7-d64-L6-m256-h2": dict(patch_size=7, dim=64, depth=6, heads=2, mlp_dim=256),
    "p7-d64-L6-m256-h8": dict(patch_size=7, dim=64, depth=6, heads=8, mlp_dim=256),
    "p7-d64-L4-m128": dict(patch_size=7, dim=64, depth=4, heads=4, mlp_dim=128),
    "p7-d80-L4-m320": dict(patch_size=7, dim=80, depth=4, heads=4, mlp_dim=320),
    "p7-d64-L3-m256": dict(patch_size=7, dim=64, depth=3, heads=4, mlp_dim=256),
    "p7-d48-L4-m192": dict(patch_size=7, dim=48, depth=4, heads=4, mlp_dim=192),
}

RECIPES = {
    "base": {},
    "lr1e-3": dict(lr=1e-3),
    "lr4e-3": dict(lr=4e-3),
    "bs128": dict(batch_size=128),
    "bs512-lr3e-3": dict(batch_size=512, lr=3e-3),
    "no-aug": dict(crop_padding=0, flip=False),
    "flip-only": dict(crop_padding=0),
    "crop1-flip": dict(crop_padding=1),
    "erase0.25": dict(erase=0.25),
    "ls0": dict(label_smoothing=0.0),
    "wd0.1": dict(weight_decay=0.1),
    "warm0.15": dict(warmup=0.15),
    "beta2-0.99": dict(beta2=0.99),
    "noclip": dict(grad_clip=0.0),
    "crop0": dict(crop_padding=0),
    "sincos": dict(pos_init="sincos"),
    "lr3e-3": dict(lr=3e-3),
    "wd0": dict(weight_decay=0.0),
    "ls0.2": dict(label_smoothing=0.2),
    "warm0.1": dict(warmup=0.1),
    "erase0.1": dict(erase=0.1),
    "tta10": dict(tta="flip-shift"),
    "drop0.1": dict(dropout=0.1),
    # sweep 6 (after the faster CPU attention): pooling, weight averaging, distillation from a CNN teacher
    "cur": dict(crop_padding=0, pos_init="sincos", tta="flip"),
    "pool-mean": dict(pool="mean"),
    "ema": dict(ema=0.999),
    "kd-soft": dict(distill="soft", distill_weight=0.5, distill_temperature=1.0),
    "kd-soft-t3": dict(distill="soft", distill_weight=0.5, distill_temperature=3.0),
    "kd-soft-w0.8": dict(distill="soft", distill_weight=0.8, distill_temperature=1.0),
    "kd-hard": dict(distill="hard", distill_weight=0.5),
    "tgap": dict(teacher_arch="gap"), "tlr4e-3": dict(teacher_lr=4e-3), "tlr1e-3": dict(teacher_lr=1e-3),
    "te10": dict(teacher_epochs=10), "te15": dict(teacher_epochs=15),
    "crop1": dict(crop_padding=1), "late0.3": dict(crop_from=0.3), "late0.5": dict(crop_from=0.5),
    "late0.7": dict(crop_from=0.7), "wd0.02": dict(weight_decay=0.02),
    "te3": dict(teacher_epochs=3), "te5": dict(teacher_epochs=5), "te8": dict(teacher_epochs=8),
}


def sweep(name: str, epochs: list[float], models: list[str], recipes: list[str], seeds: list[int]):
    """The runs of a sweep: (label, overrides) pairs."""
    runs = []
    if name == "models":          # accuracy against epochs, per model shape, base recipe
        for model in models:
            for e in epochs:
                for seed in seeds:
                    runs.append((f"{model} base e{e:g} s{seed}",
                                 dict(SWEEP_BASE, **MODELS[model], epochs=e, seed=seed)))
    elif name == "recipes":       # recipe variants on given models at given epochs
        for model in models:
            for recipe in recipes:
                for e in epochs:
                    for seed in seeds:
                        runs.append((f"{model} {recipe} e{e:g} s{seed}",
                                     dict(SWEEP_BASE, **MODELS[model], **RECIPES[recipe], epochs=e, seed=seed)))
    elif name == "list":          # explicit runs: MODEL/RECIPE[+RECIPE...]/EPOCHS[/SEED]
        for spec in models:
            model, recipe, e, *seed = spec.split("/")
            overrides = dict(SWEEP_BASE, **MODELS[model])
            for part in recipe.split("+"):
                overrides.update(RECIPES[part])
            overrides.update(epochs=float(e), seed=int(seed[0]) if seed else 0)
            runs.append((spec, overrides))
    else:
        raise ValueError(f"unknown sweep {name!r}")
    return runs


def _run_one(job):
    label, overrides, device, threads = job
    import torch

    from vitref.train import train

    if threads:
        torch.set_num_threads(threads)
    started = time.time()
    _, history = train(device=device, out=None, progress=False, val_size=5000, **overrides)
    last = history["epochs"][-1]
    return dict(label=label, overrides=overrides, train_accuracy=last["train_accuracy"],
                val_accuracy=history.get("val_accuracy", last.get("val_accuracy")),
                val_accuracy_plain=history.get("val_accuracy_plain", last.get("val_accuracy_plain")),
                teacher=history.get("teacher"), test_accuracy=history["test_accuracy"],
                test_accuracy_plain=history.get("test_accuracy_plain"),
                val_accuracy_flip=last.get("val_accuracy_flip"), test_accuracy_flip=history.get("test_accuracy_flip"),
                steps=history["steps"],
                num_parameters=history["num_parameters"], seconds=round(time.time() - started, 1),
                curve=[round(r.get("val_accuracy", float("nan")), 4) for r in history["epochs"]])


def table(paths: list[str]) -> str:
    """A markdown table of sweep results (JSON lines written by --out), one row per run."""
    lines = ["| sweep | run (model / recipes / epochs / seed) | train acc | val acc | test acc | test, 1 view "
             "| test, flip |",
             "|---|---|---|---|---|---|---|"]
    for path in paths:
        rows = [json.loads(line) for line in open(path)]
        rows.sort(key=lambda r: r["label"])
        for r in rows:
            label = r["label"].replace(" base", "/base").replace(" ", "/")
            flip = r.get("test_accuracy_flip")
            train = r.get("train_accuracy")
            lines.append(f"| {path.rsplit('/', 1)[-1].split('.')[0]} | {label} | "
                         + (f"{train:.4f}" if train is not None else "") + f" | {r['val_accuracy']:.4f} | "
                         f"{r['test_accuracy']:.4f} | {r['test_accuracy_plain']:.4f} | "
                         + (f"{flip:.4f}" if flip is not None else "") + " |")
    return "\n".join(lines)


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["--table"] or argv and argv[:1] == ["--table"]:
        print(table((argv or sys.argv[1:])[1:]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.sweep")
    parser.add_argument("--sweep", choices=["models", "recipes", "list"], required=True)
    parser.add_argument("--epochs", type=float, nargs="+", default=[10])
    parser.add_argument("--models", nargs="+", default=list(MODELS),
                        help="model names; with --sweep list, run specs MODEL/RECIPE[+RECIPE]/EPOCHS[/SEED]")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    parser.add_argument("--out", default=None, help="append results here (JSON lines)")
    args = parser.parse_args(argv)
    runs = sweep(args.sweep, args.epochs, args.models, args.recipes, args.seeds)
    jobs = [(label, overrides, args.device, args.threads) for label, overrides in runs]
    # longest first, so the pool ends together
    jobs.sort(key=lambda job: -job[1].get("epochs", 0) * MODELS_COST.get(job[0].split()[0].split("/")[0], 1))
    print(f"{len(jobs)} runs on {args.device} with {args.workers} workers", flush=True)
    out = open(args.out, "a") if args.out else None
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for result in pool.imap_unordered(_run_one, jobs):
            print(f"{result['label']:<40} train={result['train_accuracy']:.4f} val={result['val_accuracy']:.4f} "
                  f"(plain {result['val_accuracy_plain']:.4f}) "
                  f"test={result['test_accuracy']:.4f} (plain {result['test_accuracy_plain']:.4f}"
                  + (f", flip {result['test_accuracy_flip']:.4f}" if result.get("test_accuracy_flip") else "") + ") "
                  f"{result['seconds']:.0f}s curve={result['curve']}", flush=True)
            if out:
                out.write(json.dumps(result) + "\n")
                out.flush()
    return 0


# rough relative cost per epoch (for ordering only)
MODELS_COST = {"p4-d64-L4-m128": 1.0, "p4-d64-L4-m256": 1.2, "p4-d48-L4-m96": 0.8, "p4-d96-L4-m192": 1.8,
               "p4-d64-L6-m128": 1.5, "p7-d96-L4-m384": 0.6, "p7-d128-L4-m512": 0.9, "p7-d128-L6-m256": 1.1,
               "p7-d192-L6-m384": 2.0}

if __name__ == "__main__":
    sys.exit(main())
