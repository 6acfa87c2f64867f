"""What a Vision Transformer looks at: attention maps and attention rollout.

Start from the per-layer attention weights that ``ViT(..., return_attention=True)`` returns,
a list of ``L`` tensors ``(B, heads, N+1, N+1)`` (token 0 is the class token):

* :func:`cls_attention_maps` -- the class token's attention to each patch, per layer and head,
  laid out on the patch grid: ``(B, L, heads, grid, grid)``;
* :func:`attention_rollout` -- Abnar & Zuidema (2020): average the heads, add the identity for
  the residual connection and renormalise the rows (``0.5 A + 0.5 I``), then multiply the
  layers' matrices, ``R = Ã_L ... Ã_1``: row ``i`` of ``R`` says how much each input token
  flows into token ``i`` at the top. :func:`rollout_map` takes the class token's row;
* :func:`overlay` and :func:`plot_attention_grid` draw maps over the input image (matplotlib), one flat
  block per patch (a map has nothing finer than a patch), each with a colour bar of its weights.
"""
from __future__ import annotations

import math

import numpy as np
import torch

HEAT_LABEL = "attention weight"      # the colour bar of every map: the weights themselves, not rescaled


def _check_attentions(attentions) -> list[torch.Tensor]:
    if isinstance(attentions, torch.Tensor):
        attentions = list(attentions) if attentions.ndim == 5 else [attentions]
    if not attentions:
        raise ValueError("expected a non-empty list of attention weights (B, heads, N+1, N+1), one per layer")
    for i, a in enumerate(attentions):
        if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"layer {i}: expected attention weights (B, heads, T, T), got {tuple(a.shape)}")
        if a.shape != attentions[0].shape:
            raise ValueError(f"layer {i}: shape {tuple(a.shape)} differs from layer 0's {tuple(attentions[0].shape)}")
    return list(attentions)


def _grid_side(num_tokens: int) -> int:
    side = math.isqrt(num_tokens - 1)
    if side * side != num_tokens - 1:
        raise ValueError(f"{num_tokens} tokens is not a class token plus a square grid of patches")
    return side


def cls_attention_maps(attentions) -> torch.Tensor:
    """The class token's attention to the patches: list of ``L`` ``(B, h, N+1, N+1)`` ->
    ``(B, L, h, grid, grid)`` with ``grid = sqrt(N)``. Each ``(grid, grid)`` map sums to
    ``1 - (attention of the class token to itself)``."""
    attentions = _check_attentions(attentions)
    side = _grid_side(attentions[0].shape[-1])
    stacked = torch.stack([a[:, :, 0, 1:] for a in attentions], dim=1)   # (B, L, h, N)
    return stacked.reshape(*stacked.shape[:3], side, side)               # (B, L, h, grid, grid)


def attention_rollout(attentions, head_fusion: str = "mean", residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): list of ``L`` ``(B, h, T, T)`` -> ``(B, T, T)``.

    Per layer: fuse the heads (``'mean'``, ``'max'`` or ``'min'``), then, with ``residual``,
    ``Ã = (A + I) / 2`` (the residual connection carries each token's own value forward; rows
    still sum to 1). The result is ``Ã_L @ ... @ Ã_1``, whose rows sum to 1.
    """
    attentions = _check_attentions(attentions)
    fuse = {"mean": lambda a: a.mean(dim=1), "max": lambda a: a.amax(dim=1), "min": lambda a: a.amin(dim=1)}
    if head_fusion not in fuse:
        raise ValueError(f"unknown head_fusion {head_fusion!r}: expected 'mean', 'max' or 'min'")
    B, _, T, _ = attentions[0].shape
    eye = torch.eye(T, dtype=attentions[0].dtype, device=attentions[0].device)
    rollout = eye.expand(B, T, T)
    for weights in attentions:                                   # bottom layer first
        layer = fuse[head_fusion](weights)                      # (B, T, T)
        if residual:
            layer = layer + eye
        layer = layer / layer.sum(dim=-1, keepdim=True)         # rows sum to 1
        rollout = layer @ rollout                               # (B, T, T)
    return rollout


def rollout_map(attentions, head_fusion: str = "mean", residual: bool = True) -> torch.Tensor:
    """The class token's row of :func:`attention_rollout`, over the patches: ``(B, grid, grid)``."""
    rollout = attention_rollout(attentions, head_fusion, residual)          # (B, T, T)
    side = _grid_side(rollout.shape[-1])
    return rollout[:, 0, 1:].reshape(-1, side, side)                         # (B, grid, grid)


@torch.no_grad()
def attention_of(model, images: torch.Tensor):
    """Run ``model(images, return_attention=True)`` in eval mode: ``(logits (B, classes), [L x (B, h, T, T)])``."""
    was_training = model.training
    model.eval()
    try:
        logits, attentions = model(images, return_attention=True)
    finally:
        model.train(was_training)
    return logits, attentions


def _as_display_image(image, mean=None, std=None) -> np.ndarray:
    """A PIL image, ``(C, H, W)`` / ``(H, W)`` tensor or array -> ``(H, W[, 3])`` floats in [0, 1]."""
    if hasattr(image, "convert"):                                           # PIL
        return np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    x = torch.as_tensor(image).detach().float().cpu()
    if x.ndim == 3 and x.shape[0] in (1, 3):
        if mean is not None:
            x = x * torch.tensor(std).view(-1, 1, 1) + torch.tensor(mean).view(-1, 1, 1)
        x = x.permute(1, 2, 0)                                              # (H, W, C)
        if x.shape[-1] == 1:
            x = x[..., 0]
    elif mean is not None:
        x = x * std[0] + mean[0]
    if x.max() > 1.5:                                                       # uint8 range
        x = x / 255.0
    return x.clamp(0, 1).numpy()


def _patch_map(attention_map) -> torch.Tensor:
    m = torch.as_tensor(attention_map).detach().float().cpu()
    if m.ndim != 2:
        raise ValueError(f"expected one map (grid, grid), got {tuple(m.shape)}")
    return m


def _colorbar(figure, mappable, label: str, **where):
    """A colour bar for ``mappable``, ticked at 0 and its top value, labelled ``label``
    (``where``: ``ax=``, ``location=``... or ``cax=``)."""
    bar = figure.colorbar(mappable, **where)
    top = mappable.norm.vmax
    bar.set_ticks([0.0, top], labels=["0", f"{top:.2g}"])
    bar.set_label(label, fontsize=8, labelpad=1)
    bar.ax.tick_params(labelsize=8, length=2, pad=1)
    return bar


def overlay(image, attention_map, ax=None, alpha: float = 0.55, cmap: str = "inferno", title: str | None = None,
            mean=None, std=None, *, vmax: float | None = None, colorbar: bool = True, label: str = HEAT_LABEL):
    """Draw ``image`` with ``attention_map (grid, grid)`` on top, one flat block per patch (the map has
    no detail below a patch: never smoothed), coloured from 0 to ``vmax`` (default: the map's largest
    value), with a colour bar labelled ``label`` (none with ``colorbar=False`` or ``alpha=0``, where no map
    shows). ``mean``/``std`` undo a normalisation of a tensor image. Returns the matplotlib axes."""
    import matplotlib.pyplot as plt

    shown = _as_display_image(image, mean, std)
    heat = _patch_map(attention_map)
    if ax is None:
        _, ax = plt.subplots(figsize=(3.6, 3))
    height, width = shown.shape[:2]
    ax.imshow(shown, cmap="gray" if shown.ndim == 2 else None, vmin=0, vmax=1)
    top = float(heat.max()) if vmax is None else float(vmax)
    mappable = ax.imshow(heat.numpy(), cmap=cmap, alpha=alpha, vmin=0, vmax=max(top, 1e-12),
                         interpolation="nearest", extent=(-0.5, width - 0.5, height - 0.5, -0.5))
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar and alpha > 0:
        _colorbar(ax.figure, mappable, label, ax=ax, location="bottom", fraction=0.05, pad=0.03, aspect=12)
    return ax


def plot_attention_grid(image, maps: torch.Tensor, mean=None, std=None, alpha: float = 0.55, size: float = 1.6,
                        label: str = HEAT_LABEL):
    """One image's class-token maps ``(L, h, grid, grid)`` as an ``L x h`` grid of overlays
    (rows: layers, columns: heads), on one colour scale from 0 to the largest weight of all, shown by
    one colour bar beside the grid. Returns the figure."""
    import matplotlib.pyplot as plt

    if maps.ndim != 4:
        raise ValueError(f"expected maps (L, heads, grid, grid) of one image, got {tuple(maps.shape)}")
    layers, heads = maps.shape[:2]
    fig = plt.figure(figsize=(size * heads + 0.9, size * layers))
    grid = fig.add_gridspec(layers, heads + 1, width_ratios=[1.0] * heads + [0.08])
    vmax = float(torch.as_tensor(maps).max())
    for layer in range(layers):
        for head in range(heads):
            ax = overlay(image, maps[layer, head], ax=fig.add_subplot(grid[layer, head]), alpha=alpha, mean=mean,
                         std=std, vmax=vmax, colorbar=False,
                         title=f"layer {layer + 1}, head {head + 1}" if layer == 0 or head == 0 else None)
    _colorbar(fig, ax.images[-1], label, cax=fig.add_subplot(grid[:, heads]))
    fig.tight_layout()
    return fig


__all__ = ["cls_attention_maps", "attention_rollout", "rollout_map", "attention_of", "overlay",
           "plot_attention_grid"]
