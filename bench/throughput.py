"""Train-step throughput: ``vitref.ViT`` against timm's ``VisionTransformer``, same configuration.

Both models are built with the same shape, trained on the same random batch with AdamW, and
timed in interleaved repetitions (vitref, timm, vitref, timm, ...) so that a change in the
machine's load hits both alike; the medians are compared::

    python -m bench.throughput                          # recipe shape, timm baseline shape, vit_tiny_cifar10
    python -m bench.throughput --config 32,4,3,128,6,4,512 --batch-size 128   # vit_tiny_cifar10
    python -m bench.throughput --threads 1 2 --no-timm --config 28,7,1,128,4,4,512 28,4,1,64,4,4,128

A configuration is ``img_size,patch_size,in_channels,dim,depth,heads,mlp_dim``. The last line is
``throughput_ratio=R`` (vitref images/s divided by timm images/s; > 1 means vitref is faster).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# the recipe, the baseline, vit_tiny_cifar10
DEFAULT_CONFIGS = ["28,7,1,64,4,4,256", "28,4,1,64,4,4,128", "32,4,3,128,6,4,512"]


def _models(config: str):
    import vitref

    img, patch, chans, dim, depth, heads, mlp = (int(v) for v in config.split(","))
    built = {"vitref": lambda: vitref.ViT(img, patch, chans, 10, dim, depth, heads, mlp)}
    try:
        from timm.models.vision_transformer import VisionTransformer

        built["timm"] = lambda: VisionTransformer(img_size=img, patch_size=patch, in_chans=chans, num_classes=10,
                                                   embed_dim=dim, depth=depth, num_heads=heads,
                                                   mlp_ratio=mlp / dim)
    except ImportError:
        pass
    return (img, chans), built


def _stepper(model, batch):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = batch

    def step():
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step


def measure(config: str, batch_size: int, repeats: int, steps: int, use_timm: bool = True) -> dict:
    """Median seconds per train step of each implementation, timed in interleaved rounds."""
    (img, chans), built = _models(config)
    if not use_timm:
        built.pop("timm", None)
    torch.manual_seed(0)
    batch = (torch.randn(batch_size, chans, img, img), torch.randint(0, 10, (batch_size,)))
    steppers = {}
    for name, make in built.items():
        torch.manual_seed(0)
        steppers[name] = _stepper(make().train(), batch)
        for _ in range(3):                                  # warm-up: allocations, kernel selection
            steppers[name]()
    times = {name: [] for name in steppers}
    for _ in range(repeats):
        for name, step in steppers.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


TARGET_RATIO = 1.0      # vitref at least as fast as timm (bench/README.md)


def ratio_verdict(ratios: list[float]) -> tuple[float, bool]:
    """(the median of the timm/vitref step-time ratios, whether it meets the target)."""
    ratio = statistics.median(ratios)
    return ratio, ratio >= TARGET_RATIO


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", default=DEFAULT_CONFIGS,
                        help="img_size,patch_size,in_channels,dim,depth,heads,mlp_dim")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, nargs="+", default=[None], help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds (median taken)")
    parser.add_argument("--steps", type=int, default=3, help="train steps per round")
    parser.add_argument("--no-timm", action="store_true", help="time vitref only (per-config step times)")
    args = parser.parse_args(argv)
    ratios = []
    for threads in args.threads:
        if threads:
            torch.set_num_threads(threads)
        for config in args.config:
            result = measure(config, args.batch_size, args.repeats, args.steps, use_timm=not args.no_timm)
            line = f"config={config} batch={args.batch_size} threads={torch.get_num_threads()}"
            for name, seconds in result.items():
                line += f" {name}={seconds * 1000:.1f}ms/step ({args.batch_size / seconds:.0f} img/s)"
            if "timm" in result:
                ratio = result["timm"] / result["vitref"]
                ratios.append(ratio)
                line += f" ratio={ratio:.3f}"
            print(line, flush=True)
    if ratios:
        ratio, met = ratio_verdict(ratios)
        print(f"target ratio >= {TARGET_RATIO}: {'met' if met else 'NOT met'}")
        print(f"throughput_ratio={ratio:.3f}")
    elif not args.no_timm:
        print("timm is not installed: no ratio", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
