"""Train to accuracy: the course's promise, measured with the command-line contract.

    python -m bench.train_to_accuracy                 # python -m vitref.train --dataset fashion-mnist --minutes 10
    python -m bench.train_to_accuracy --with-timm     # then the same recipe on timm's VisionTransformer

Runs the command in a fresh process (so the wall clock includes start-up and data loading),
reads its last line ``test_accuracy=... wall_seconds=...``, and prints it with the machine's
load average before and after (on a shared machine, other programs slow training down and the
timed schedule then fits fewer epochs). The target is test accuracy >= 0.92 within 660 s (it was 0.91
until issue 29 raised it; bench/RESULTS.md, sections 1 and 7).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

TARGET_ACCURACY, TARGET_SECONDS = 0.92, 660


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def run(minutes: float, extra: list[str], out: str) -> dict:
    """Run ``python -m vitref.train`` once; its measured numbers and history."""
    name = "bench-" + time.strftime("%Y%m%d-%H%M%S")
    command = [sys.executable, "-m", "vitref.train", "--dataset", "fashion-mnist", "--minutes", str(minutes),
               "--out", out, "--name", name, "--no-progress", *extra]
    load_before = _load()
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.time() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"test_accuracy=([\d.]+) wall_seconds=(\d+)", last)
    if not match:
        raise RuntimeError(f"unexpected last line {last!r}")
    with open(os.path.join(out, name, "history.json")) as f:
        history = json.load(f)
    return dict(command=" ".join(command[1:]), last_line=last, accuracy=float(match.group(1)),
                wall_seconds=int(match.group(2)), measured_seconds=round(seconds, 1), steps=history["steps"],
                epochs=history["epochs_run"], threads=history.get("thread_choices", []),
                load_before=load_before, load_after=_load())


def target_met(accuracy: float, wall_seconds: float, minutes: float) -> bool:
    """Test accuracy >= TARGET_ACCURACY within TARGET_SECONDS, scaled to the run's minutes (660 s for 10)."""
    return accuracy >= TARGET_ACCURACY and wall_seconds <= TARGET_SECONDS * minutes / 10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.train_to_accuracy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--with-timm", action="store_true", help="also train timm's VisionTransformer (same recipe)")
    parser.add_argument("--out", default=None, help="run folder parent (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="vitref-bench-")
    results = {"vitref": run(args.minutes, [], out)}
    if args.with_timm:
        results["timm"] = run(args.minutes, ["--arch", "timm"], out)
    for arch, r in results.items():
        threads = ", ".join(f"step {c['step']}: {c['threads']}" for c in r["threads"][:6])
        print(f"{arch}: {r['last_line']}  ({r['steps']} steps = {r['epochs']} epochs; "
              f"process {r['measured_seconds']} s; "
              f"load average before {r['load_before']}, after {r['load_after']}; threads chosen {threads or 'fixed'})")
        print(f"  command: python {r['command']}")
    r = results["vitref"]
    ok = target_met(r["accuracy"], r["wall_seconds"], args.minutes)
    print(f"train_to_accuracy: test_accuracy={r['accuracy']:.4f} (target {TARGET_ACCURACY}) "
          f"wall_seconds={r['wall_seconds']} (limit {TARGET_SECONDS * args.minutes / 10:.0f}) -> "
          f"{'target met' if ok else 'target NOT met'}")
    if "timm" in results:
        print(f"accuracy_ratio_vs_timm={r['accuracy'] / results['timm']['accuracy']:.4f} "
              f"steps_ratio_vs_timm={r['steps'] / results['timm']['steps']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
