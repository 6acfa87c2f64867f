"""What defines a training run: :class:`TrainConfig`, the named :data:`PRESETS`, the device."""
from __future__ import annotations

from dataclasses import InitVar, dataclass, replace
from typing import Any

import torch


@dataclass
class TrainConfig:
    """Everything that defines a run. Defaults are the Fashion-MNIST CPU recipe.

    The model's fields are named as :class:`vitref.ViT`'s arguments (``dim``, ``depth``,
    ``num_heads``, ``mlp_dim``, ``dropout``). ``heads`` is ``num_heads``' old name, still accepted
    (``TrainConfig(heads=8)``, ``train(heads=8)``, ``--heads 8``, the ``config`` of an old
    ``history.json``); it is not stored.
    """

    dataset: str = "fashion-mnist"
    # budget: any of minutes (wall clock for everything), epochs, steps; the first reached ends training
    minutes: float | None = None
    epochs: float | None = None
    steps: int | None = None
    # model (vitref.ViT)
    patch_size: int = 7
    dim: int = 64
    depth: int = 4
    num_heads: int = 4
    mlp_dim: int = 128
    dropout: float = 0.0
    patch_dropout: float = 0.0    # share of the patch tokens dropped per image in training (PatchDropout)
    arch: str = "vitref"          # 'vitref' or 'timm' (timm's VisionTransformer, for comparisons)
    pos_init: str = "sincos"      # 'sincos' (start at a 2-D sine-cosine table, still learned) or 'random'
    pool: str = "cls"             # what the head sees: 'cls' (class token) or 'mean' (average of the patch tokens)
    # optimisation
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: float = 0.05          # fraction of the progress spent warming up linearly
    min_lr: float = 0.0           # learning rate at the end of the cosine decay
    beta2: float = 0.999
    label_smoothing: float = 0.1
    grad_clip: float | None = 1.0
    ema: float = 0.0              # >0: evaluate an exponential moving average of the weights with this decay
    # distillation from a small CNN trained first, in the same budget (vitref.training.teacher)
    # 'none', 'soft' (match the teacher's probabilities) or 'hard' (its argmax as a second label)
    distill: str = "none"
    distill_weight: float = 0.5   # loss = (1 - w) * label loss + w * distillation loss
    distill_temperature: float = 1.0
    teacher_share: float = 0.25   # timed runs: fraction of the training time that trains the teacher
    teacher_epochs: float = 5.0   # counted runs (--epochs/--steps): the teacher's epochs
    teacher_arch: str = "fc"      # vitref.training.teacher.ConvTeacher: 'fc' or 'gap'
    teacher_lr: float = 2e-3
    # augmentation (on whole batches, see vitref.data.augment_batch)
    crop_padding: int = 1
    crop_from: float = 0.0        # random crops start at this fraction of the progress (0: from the start)
    flip: bool = True
    erase: float = 0.0
    # evaluation
    tta: str = "flip-shift"       # test-time augmentation: 'none', 'flip' (2 views), 'flip-shift' (10 views)
    val_size: int = 0             # training images held out for validation (recipe tuning)
    eval_every_epoch: bool = False  # also evaluate on the test set after each epoch (costs time)
    eval_batch_size: int = 1000
    # machine
    seed: int = 0
    # torch threads; None: adaptive for timed CPU runs (ThreadTuner), else torch's; 0: adaptive
    threads: int | None = None
    device: str = "auto"
    # torch.compile the model the steps call; None: where it pays (see :func:`compiles`)
    compile: bool | None = None
    # 'fp32'; 'bf16': forward pass and loss autocast to bfloat16 (weights, gradients, optimizer and
    # evaluation stay float32); 'auto': bf16 for timed runs on a CPU with bfloat16 matrix units
    # (Intel AMX), fp32 otherwise (counted runs stay float32: the same numbers on every CPU)
    precision: str = "auto"
    cuda_graph: bool = False      # record the step as a CUDA graph, replay it (vitref.training.graphed; CPU: eager)
    tf32: bool = False            # float32 matrix products on TF32 units (GPU; torch's 'high' matmul precision)
    train_limit: int | None = None  # use only the first N training images (VITREF_FAST sets it)
    test_limit: int | None = None
    out: str | None = "runs"      # run folder parent (None: save nothing)
    name: str | None = None       # run folder name (default <dataset>-<time>)
    progress: bool = True
    heads: InitVar[int | None] = None   # num_heads' old name (until 0.2.0), for old scripts and config files

    def __post_init__(self, heads: int | None) -> None:
        if heads is not None:
            self.num_heads = heads

    @property
    def timed(self) -> bool:
        """Whether the run has a wall-clock budget (``minutes``); a counted run has only epochs or steps."""
        return self.minutes is not None


PRESETS: dict[str, dict[str, Any]] = {
    # the Fashion-MNIST CPU recipe: the TrainConfig defaults
    "fashion-mnist-cpu": {},
    # CIFAR-10 on a GPU (Colab T4 or better): vit_tiny_cifar10's shape, stronger regularisation
    "cifar10-gpu": dict(dataset="cifar10", patch_size=4, dim=128, depth=6, num_heads=4, mlp_dim=512, batch_size=128,
                        lr=1e-3, weight_decay=0.05, warmup=0.05, label_smoothing=0.1, crop_padding=4,
                        flip=True, erase=0.25, dropout=0.0, pos_init="sincos", tta="flip", epochs=100),
    # Fashion-MNIST on one GPU in 2 minutes: the step recorded as a CUDA graph (one launch a step), a
    # batch and width that give the card work (bench/RESULTS.md, "GPU recipe")
    "fashion-mnist-gpu": dict(device="cuda", cuda_graph=True, tf32=True, minutes=2.0, patch_size=4, dim=128,
                              depth=6, num_heads=4, mlp_dim=256, batch_size=512, lr=2e-3, crop_padding=2),
}


def resolve_device(name: str) -> torch.device:
    """``'auto'``: CUDA when available, else the CPU; any other name as ``torch.device`` reads it.
    Asking for CUDA where there is none is a ValueError that says so in one line."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but this machine has no CUDA GPU that torch "
                         f"{torch.__version__} can use: run on a GPU (e.g. Colab: Runtime > Change runtime type), "
                         f"or use the CPU recipe (no --preset, or --device cpu without --cuda-graph)")
    return device


PRECISIONS = ("fp32", "bf16", "auto")
COMPILE_MIN_MINUTES = 5.0       # compile=None: a timed run shorter than this is not compiled


def has_bf16_matrix_units() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware (Intel AMX): there a bf16 train step
    is faster; elsewhere the CPU converts and computes in float32, and bf16 is slower."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def autocast_dtype(precision: str, device: torch.device, timed: bool = False) -> torch.dtype | None:
    """The dtype the forward pass is autocast to (``None``: float32 throughout) for ``precision``
    (see :class:`TrainConfig`) on ``device``; ``timed``: the run has a time budget."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: expected one of {list(PRECISIONS)}")
    if precision == "bf16" or (precision == "auto" and timed and device.type == "cpu" and has_bf16_matrix_units()):
        return torch.bfloat16
    return None


def compiles(config: TrainConfig, device: torch.device) -> bool:
    """Whether the run ``torch.compile``s its model: ``config.compile`` when given; else (None) a timed
    CPU run of at least :data:`COMPILE_MIN_MINUTES` whose steps are autocast to bfloat16. There the
    compiled step fuses the casts and elementwise work around the matrix products (about 1.3x the
    steps, bench/RESULTS.md, "CPU levers"), and the 20 s (warm cache) to 60 s (cold) of compiling is
    a small share of the budget; in float32 compiling gained nothing measurable, and it rules out the
    batch slices."""
    if config.compile is not None:
        return config.compile
    if config.minutes is None or config.minutes < COMPILE_MIN_MINUTES or device.type != "cpu":
        return False
    return autocast_dtype(config.precision, device, timed=True) is not None


def resolved(config: TrainConfig, device: torch.device) -> TrainConfig:
    """``config`` with what ``'auto'`` and ``None`` mean for this run on ``device`` written out
    (``precision`` 'fp32' or 'bf16', ``compile`` True or False): what the history records."""
    dtype = autocast_dtype(config.precision, device, config.timed)
    return replace(config, precision="bf16" if dtype is not None else "fp32", compile=compiles(config, device))


__all__ = ["TrainConfig", "PRESETS", "PRECISIONS", "COMPILE_MIN_MINUTES", "resolve_device", "has_bf16_matrix_units",
           "autocast_dtype", "compiles", "resolved"]
