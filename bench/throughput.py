"""Train-step throughput: ``vitref.ViT`` against timm's ``VisionTransformer``, same configuration.

Both models are built with the same shape, trained on the same random batch with AdamW, and
timed in interleaved repetitions (vitref, timm, vitref, timm, ...) so that a change in the
machine's load hits both alike; the medians are compared::

    python -m bench.throughput                          # recipe shape, timm baseline shape, vit_tiny_cifar10
    python -m bench.throughput --config 32,4,3,128,6,4,512 --batch-size 128   # vit_tiny_cifar10
    python -m bench.throughput --threads 1 2 --no-timm --config 28,7,1,128,4,4,512 28,4,1,64,4,4,128
    python -m bench.throughput --device cuda            # GPU shapes: the recipes, DeiT-Tiny, ViT-B/16 in bf16

A configuration is ``img_size,patch_size,in_channels,dim,depth,heads,mlp_dim``, optionally followed
by ``@batch`` and ``:bf16`` (autocast to bfloat16). The last line is ``throughput_ratio=R`` (vitref
images/s divided by timm images/s; > 1 means vitref is faster). On CUDA each step is timed between
device synchronisations, and vitref is also timed with its step recorded as a CUDA graph
(``vitref+graph``, :mod:`vitref.training.graphed`: one launch per step).
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
# on a GPU: the CPU recipe at two batches, the GPU recipe (fashion-mnist-gpu), DeiT-Tiny's shape on
# 32 px in bf16, ViT-B/16 at 224 px in bf16
CUDA_CONFIGS = ["28,7,1,64,4,4,128@256", "28,7,1,64,4,4,128@1024", "28,4,1,128,6,4,256@512",
                "32,4,3,192,12,3,768@256:bf16", "224,16,3,768,12,12,3072@64:bf16"]


def parse_config(config: str, batch_size: int) -> tuple[str, int, bool]:
    """``(shape, batch, bf16)`` of ``img,patch,chans,dim,depth,heads,mlp[@batch][:bf16]``."""
    shape, _, precision = config.partition(":")
    if precision not in ("", "bf16"):
        raise ValueError(f"precision must be ':bf16' or nothing, got {precision!r} in {config!r}")
    shape, _, batch = shape.partition("@")
    if len(shape.split(",")) != 7:
        raise ValueError(f"expected img_size,patch_size,in_channels,dim,depth,heads,mlp_dim, got {shape!r}")
    return shape, int(batch) if batch else batch_size, precision == "bf16"


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


def _stepper(model, batch, bf16: bool = False, graph: bool = False):
    """A function running one train step (forward, backward, AdamW) of ``model`` on ``batch``;
    with ``graph`` the step is recorded once as a CUDA graph and replayed."""
    device = batch[0].device
    fused = device.type == "cuda"
    lr = torch.tensor(1e-4, device=device) if graph else 1e-4
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=fused or None, capturable=graph)

    def compute(x, y, _teacher=None):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach(), loss.detach()

    if not graph:
        return lambda: compute(*batch)
    from vitref.training.graphed import CapturedStep

    captured = CapturedStep(compute, device)
    return lambda: captured(batch[0], batch[1], None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(config: str, batch_size: int, repeats: int, steps: int, use_timm: bool = True,
            device: str = "cpu", bf16: bool = False) -> dict:
    """Median seconds per train step of each implementation, timed in interleaved rounds (on CUDA
    also vitref's step recorded as a graph, ``vitref+graph``)."""
    device_ = torch.device(device)
    (img, chans), built = _models(config)
    if not use_timm:
        built.pop("timm", None)
    torch.manual_seed(0)
    batch = (torch.randn(batch_size, chans, img, img, device=device_),             # (B, C, H, W)
             torch.randint(0, 10, (batch_size,), device=device_))                # (B,)
    variants = [(name, make, False) for name, make in built.items()]
    if device_.type == "cuda":
        variants.insert(1, ("vitref+graph", built["vitref"], True))
    steppers = {}
    for name, make, graph in variants:
        torch.manual_seed(0)
        steppers[name] = _stepper(make().to(device_).train(), batch, bf16, graph)
        for _ in range(5):                                  # warm-up: allocations, kernel selection, recording
            steppers[name]()
    times: dict[str, list[float]] = {name: [] for name in steppers}
    for _ in range(repeats):
        for name, step in steppers.items():
            _sync(device_)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            _sync(device_)
            times[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


TARGET_RATIO = 1.0      # vitref at least as fast as timm (bench/README.md)


def ratio_verdict(ratios: list[float]) -> tuple[float, bool]:
    """(the median of the timm/vitref step-time ratios, whether it meets the target)."""
    ratio = statistics.median(ratios)
    return ratio, ratio >= TARGET_RATIO


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="+", default=None,
                        help="img_size,patch_size,in_channels,dim,depth,heads,mlp_dim[@batch][:bf16] "
                             "(default: the CPU shapes, or the GPU shapes with --device cuda)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, nargs="+", default=[None], help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds (median taken)")
    parser.add_argument("--steps", type=int, default=3, help="train steps per round")
    parser.add_argument("--no-timm", action="store_true", help="time vitref only (per-config step times)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: torch {torch.__version__} finds no CUDA GPU on this machine", file=sys.stderr)
        return 2
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name(args.device)}, torch {torch.__version__}", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = True            # float32 products on TF32 units, as the GPU preset
    configs = args.config or (CUDA_CONFIGS if args.device.startswith("cuda") else DEFAULT_CONFIGS)
    ratios = []
    for threads in args.threads:
        if threads:
            torch.set_num_threads(threads)
        for config in configs:
            shape, batch_size, bf16 = parse_config(config, args.batch_size)
            result = measure(shape, batch_size, args.repeats, args.steps, use_timm=not args.no_timm,
                             device=args.device, bf16=bf16)
            line = f"config={shape} batch={batch_size}{' bf16' if bf16 else ''} threads={torch.get_num_threads()}"
            for name, seconds in result.items():
                line += f" {name}={seconds * 1000:.2f}ms/step ({batch_size / seconds:.0f} img/s)"
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
