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

:func:`availability` is the guard the book uses: it says, without any network call, whether the
weights are already on this machine (timm's Hugging Face or torch-hub cache) or may be
downloaded (in Colab, or with ``VITREF_DOWNLOAD=1``), and otherwise how to get them.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

from .interop import from_timm
from .viz import attention_of, cls_attention_maps, rollout_map


def imagenet_categories() -> list[str]:
    """The 1,000 ImageNet-1k class names, in the usual index order (shipped with torchvision)."""
    from torchvision.models import ViT_B_16_Weights

    return list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


# The files timm looks for in a Hugging Face repository, in its order (timm.models.load_state_dict_from_hf).
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def cached_weights(name: str, cache_dir: str | Path | None = None) -> str | None:
    """The local file of timm's pretrained weights for the model ``name``, or ``None`` when they are not
    on this machine. Looks in the Hugging Face cache (``cache_dir``, default ``HF_HUB_CACHE``) and, for
    weights timm fetches by URL, torch hub's checkpoint folder; never touches the network."""
    import timm
    from huggingface_hub import try_to_load_from_cache

    cfg = timm.models.get_pretrained_cfg(name)
    if cfg is None:
        raise ValueError(f"timm has no pretrained weights named {name!r}")
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        names = (cfg.hf_hub_filename,) if cfg.hf_hub_filename else HF_WEIGHT_FILES
        for filename in names:
            found = try_to_load_from_cache(repo, filename, cache_dir=cache_dir, revision=revision or None)
            if isinstance(found, str) and Path(found).is_file():
                return found
    urls = cfg.url if isinstance(cfg.url, (tuple, list)) else (cfg.url,) if cfg.url else ()
    for url in urls:                       # timm names a URL, or several mirrors of one file
        local = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]
        if local.is_file():
            return str(local)
    return None


def download_allowed() -> bool:
    """Whether this session may download weights: in Colab, or where ``VITREF_DOWNLOAD`` is set (not 0)."""
    return "google.colab" in sys.modules or os.environ.get("VITREF_DOWNLOAD", "") not in ("", "0")


def availability(name: str, cache_dir: str | Path | None = None) -> tuple[str | None, str]:
    """How the pretrained weights of ``name`` can be had here, without trying the network.

    Returns ``(source, sentence)``: ``source`` is the local file (already downloaded), ``"download"``
    (:func:`download_allowed`), or ``None`` (neither: the sentence says how to run it elsewhere)."""
    local = cached_weights(name, cache_dir)
    if local is not None:
        return local, f"The pretrained weights of `{name}` are on this machine (`{local}`)."
    if download_allowed():
        return "download", f"The pretrained weights of `{name}` will be downloaded (about 350 MB for ViT-B/16)."
    return None, (f"This part needs the pretrained weights of `{name}`, which are not on this machine, and this "
                  "build does not download them. Run the notebook in Colab (it downloads them there), or where "
                  "there is internet with `VITREF_DOWNLOAD=1` set; once downloaded, they are found in the "
                  "Hugging Face cache.")


def load_timm_vit(name: str = "vit_tiny_patch16_224", pretrained: bool = True, return_timm: bool = False,
                  weights_file: str | None = None):
    """``(vitref.ViT, data_config)`` [and the timm model] for the timm ViT ``name``.

    ``data_config`` is timm's preprocessing for the model: ``input_size``, ``interpolation``,
    ``mean``, ``std``, ``crop_pct``. ``pretrained=True`` downloads the weights (needs internet),
    unless ``weights_file`` names a local copy (e.g. from :func:`cached_weights`): then nothing is downloaded.
    """
    import timm
    from timm.data import resolve_data_config

    overlay = {"file": str(weights_file)} if pretrained and weights_file else None
    timm_model = timm.create_model(name, pretrained=pretrained, pretrained_cfg_overlay=overlay).eval()
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
    x = preprocess(image, config)
    logits, attentions = attention_of(model, x)
    return dict(input=x, logits=logits, cls_maps=cls_attention_maps(attentions)[0], rollout=rollout_map(attentions)[0])


__all__ = ["imagenet_categories", "cached_weights", "download_allowed", "availability", "load_timm_vit", "preprocess",
           "classify", "attention_maps"]
