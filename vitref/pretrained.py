"""Real pretrained weights in your own ViT: timm -> :func:`vitref.from_timm` -> classify a photo.

Online (e.g. Colab)::

    from vitref.pretrained import load_timm_vit, classify
    from vitref.data import sample_photo
    model, config = load_timm_vit("vit_tiny_patch16_224", pretrained=True)   # vitref.ViT, ImageNet weights
    classify(model, sample_photo(), config)            # [('military uniform', 0.6...), ...]

:func:`load_timm_vit` builds the timm model (downloading the weights when ``pretrained``),
copies them into a :class:`vitref.ViT` with :func:`vitref.from_timm` and reads timm's own
preprocessing settings (resize, crop, mean, std). :func:`preprocess` applies them with
torchvision, :func:`classify` names the top classes with the ImageNet-1k class names that ship
inside torchvision (no download), and :func:`attention_maps` returns the class-token maps and
the attention rollout of :mod:`vitref.viz` for the photo. Offline, ``pretrained=False`` runs
the same pipeline with randomly initialised weights (that is how the tests check it).
"""
from __future__ import annotations

import math

import torch

from .interop import from_timm


def imagenet_categories() -> list[str]:
    """The 1,000 ImageNet-1k class names, in the usual index order (shipped with torchvision)."""
    from torchvision.models import ViT_B_16_Weights

    return list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


def load_timm_vit(name: str = "vit_tiny_patch16_224", pretrained: bool = True, return_timm: bool = False):
    """``(vitref.ViT, data_config)`` [and the timm model] for the timm ViT ``name``.

    ``data_config`` is timm's preprocessing for the model: ``input_size``, ``interpolation``,
    ``mean``, ``std``, ``crop_pct``. ``pretrained=True`` downloads the weights (needs internet).
    """
    import timm
    from timm.data import resolve_data_config

    timm_model = timm.create_model(name, pretrained=pretrained).eval()
    model = from_timm(timm_model).eval()
    config = resolve_data_config({}, model=timm_model)
    return (model, config, timm_model) if return_timm else (model, config)


def preprocess(image, config: dict) -> torch.Tensor:
    """A PIL image -> ``(1, 3, H, W)``: resize the shorter side to ``H / crop_pct``, centre-crop
    ``H x W``, scale to [0, 1], normalise with ``mean`` and ``std`` (timm's evaluation transform)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    if config.get("crop_mode", "center") != "center":
        raise ValueError(f"only centre crops are supported, got crop_mode={config['crop_mode']!r}")
    _, height, width = config["input_size"]
    scaled = math.floor(height / config.get("crop_pct", 1.0)) if height == width else height
    interpolation = InterpolationMode(config.get("interpolation", "bilinear"))
    image = TF.resize(image.convert("RGB"), scaled, interpolation=interpolation, antialias=True)
    image = TF.center_crop(image, [height, width])
    x = TF.normalize(TF.to_tensor(image), config["mean"], config["std"])       # (3, H, W)
    return x.unsqueeze(0)                                                      # (1, 3, H, W)


@torch.no_grad()
def classify(model, image, config: dict, top: int = 5, categories=None) -> list[tuple[str, float]]:
    """The ``top`` classes for a PIL ``image`` as ``[(name, probability), ...]``, most likely first."""
    categories = categories or imagenet_categories()
    was_training = model.training
    model.eval()
    probabilities = model(preprocess(image, config)).softmax(dim=-1)[0]       # (num_classes,)
    model.train(was_training)
    if len(categories) != probabilities.numel():
        raise ValueError(f"{len(categories)} category names for {probabilities.numel()} classes")
    values, indices = probabilities.topk(top)
    return [(categories[i], float(p)) for p, i in zip(values, indices)]


@torch.no_grad()
def attention_maps(model, image, config: dict) -> dict:
    """The model's view of a PIL ``image``: ``dict(input (1, 3, H, W), logits (1, classes),
    cls_maps (L, heads, grid, grid), rollout (grid, grid))``."""
    from .viz import attention_of, cls_attention_maps, rollout_map

    x = preprocess(image, config)
    logits, attentions = attention_of(model, x)
    return dict(input=x, logits=logits, cls_maps=cls_attention_maps(attentions)[0], rollout=rollout_map(attentions)[0])


__all__ = ["imagenet_categories", "load_timm_vit", "preprocess", "classify", "attention_maps"]
