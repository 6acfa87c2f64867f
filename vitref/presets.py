"""Named ViT configurations from the course's sources, with what is known about each.

A :class:`Preset` keeps a model shape (the arguments of :class:`vitref.ViT`), a training recipe
(a plain dict in :class:`vitref.train.TrainConfig`'s vocabulary where one exists), and two
separate statements: what the *source* reports (quoted, never re-measured here) and what was
*measured* by this repository, if anything. :func:`preset` returns one by name;
:func:`mlp_dim_for` solves the parameter count of a ViT for its MLP width.

* ``'stl10-article'`` -- the STL-10 run of the ViT article among the course's sources: 96 x 96
  colour images, patch 8 (a 12 x 12 grid), D = 256, 8 heads, 6 blocks, AdamW lr 3e-4, cosine
  schedule, 50 epochs, reported test accuracy 59.51% and "~4.2M" parameters. The article does
  not give the MLP width; this preset uses the width that makes the count about 4.2M
  (:func:`mlp_dim_for`), rounded to a multiple of 32. STL-10 is not among the datasets of
  :mod:`vitref.data` (nothing downloads offline), so the preset is a shape and a recipe only.
* ``'cifar10-gpu'`` -- ``vitref.train.PRESETS['cifar10-gpu']`` (the CIFAR-10 article's small ViT, 1,205,898
  parameters): its accuracy has not been measured anywhere in this repository (no CIFAR-10 copy
  on the machines used), so none is claimed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .training import PRESETS
from .vit import ViT, count_parameters

_VIT_KEYS = ("img_size", "patch_size", "in_channels", "num_classes", "dim", "depth", "num_heads", "mlp_dim")


@dataclass(frozen=True)
class Preset:
    """A named ViT shape and recipe. ``model`` holds :class:`vitref.ViT`'s arguments."""

    name: str
    dataset: str
    model: dict
    recipe: dict
    source: str                              # where the configuration comes from
    reported: dict = field(default_factory=dict)   # what the source reports (quoted, not re-measured)
    measured: str = ""                       # what this repository measured, or that nothing was

    def build(self, **overrides) -> ViT:
        """The :class:`vitref.ViT` of this preset (``overrides`` change its arguments)."""
        unknown = set(overrides) - set(_VIT_KEYS) - {"dropout", "norm_eps", "pool"}
        if unknown:
            raise ValueError(f"unknown ViT arguments {sorted(unknown)}")
        return ViT(**{**self.model, **overrides})

    @property
    def num_parameters(self) -> int:
        """Trainable parameters of :meth:`build`, computed without building the model."""
        return vit_parameter_count(**self.model)


def vit_parameter_count(img_size: int, patch_size: int, in_channels: int, num_classes: int, dim: int,
                        depth: int, num_heads: int, mlp_dim: int) -> int:
    """Parameters of ``vitref.ViT(...)`` by formula (tested equal to counting the built model).

    patch embedding ``C P^2 D + D``; class token ``D``; positions ``(N + 1) D``; per block
    ``4 D^2 + 4 D`` (attention) ``+ 2 D m + m + D`` (MLP of width ``m``) ``+ 4 D`` (two
    LayerNorms); final LayerNorm ``2 D``; head ``D K + K``. ``num_heads`` does not change the count.
    """
    if img_size % patch_size:
        raise ValueError(f"image size {img_size} is not divisible by patch size {patch_size}")
    if dim % num_heads:
        raise ValueError(f"dim {dim} is not divisible by {num_heads} heads")
    n = (img_size // patch_size) ** 2
    D, m = dim, mlp_dim
    per_block = (4 * D * D + 4 * D) + (2 * D * m + m + D) + 4 * D
    return (in_channels * patch_size ** 2 * D + D) + D + (n + 1) * D + depth * per_block + 2 * D \
        + D * num_classes + num_classes


def mlp_dim_for(target_parameters: float, **shape) -> float:
    """The MLP width ``m`` (a real number) at which the ViT of ``shape`` has ``target_parameters``.

    ``shape`` is every argument of :func:`vit_parameter_count` except ``mlp_dim``. The count is
    linear in ``m`` (``depth * (2 D + 1)`` parameters per unit of width), so this solves it exactly;
    a negative answer means the rest of the model alone is already larger than the target.
    """
    if "mlp_dim" in shape:
        raise ValueError("mlp_dim is what is solved for: leave it out")
    base = vit_parameter_count(mlp_dim=0, **shape)
    per_unit = shape["depth"] * (2 * shape["dim"] + 1)
    return (target_parameters - base) / per_unit


def _stl10_article() -> Preset:
    shape = dict(img_size=96, patch_size=8, in_channels=3, num_classes=10, dim=256, depth=6, num_heads=8)
    width = 32 * round(mlp_dim_for(4.2e6, **shape) / 32)
    return Preset(
        name="stl10-article", dataset="stl10", model={**shape, "mlp_dim": width},
        recipe=dict(optimizer="AdamW", lr=3e-4, schedule="cosine (CosineAnnealingLR)", epochs=50),
        source="the ViT article among the course's sources (the book's bibliography): STL-10 run",
        reported=dict(test_accuracy=0.5951, parameters="~4.2M", epochs=50),
        measured="nothing: STL-10 is not available offline here, and the MLP width is not given by the source",
    )


def _cifar10_gpu() -> Preset:
    recipe = dict(PRESETS["cifar10-gpu"])
    model = dict(img_size=32, patch_size=recipe.pop("patch_size"), in_channels=3, num_classes=10,
                 dim=recipe.pop("dim"), depth=recipe.pop("depth"), num_heads=recipe.pop("num_heads"),
                 mlp_dim=recipe.pop("mlp_dim"))
    return Preset(
        name="cifar10-gpu", dataset=recipe.pop("dataset"), model=model, recipe=recipe,
        source="vitref.train.PRESETS['cifar10-gpu'] (bench/README.md), "
               "the small ViT of the CIFAR-10 article among the course's sources (its 'ViT-Tiny')",
        reported={},
        measured="nothing: no CIFAR-10 copy on the machines used (bench/README.md), so no accuracy is claimed",
    )


_FACTORIES = {"stl10-article": _stl10_article, "cifar10-gpu": _cifar10_gpu}
NAMES = tuple(_FACTORIES)


def preset(name: str) -> Preset:
    """The :class:`Preset` called ``name`` (one of :data:`NAMES`)."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown preset {name!r}: expected one of {NAMES}")
    return _FACTORIES[name]()


__all__ = ["Preset", "preset", "NAMES", "vit_parameter_count", "mlp_dim_for", "count_parameters"]
