"""Use a trained ViT at another resolution, and short training runs on a given model.

A ViT's weights do not depend on the image size except in one place: the position table
``pos_embed (1, 1 + h*w, D)`` has one row per patch of the ``h x w`` grid it was trained on
(plus the class token's row). The patch embedding depends only on the patch size ``P`` and the
number of channels ``C``; the blocks, the final norm and the head do not see the grid at all.
So a model trained on ``28 x 28`` images with ``P = 7`` (a ``4 x 4`` grid) can take ``42 x 42``
images (a ``6 x 6`` grid) once its table has 36 patch rows. The usual way to get them
(Dosovitskiy et al. 2021, section 3.2) is to treat the table as a ``D``-channel image of size
``h x w`` and resize it in 2-D; the class token's row has no place on the grid and is kept.

* :func:`resample_positions` -- ``(1, k + h*w, D)`` -> ``(1, k + H*W, D)``, 2-D bicubic or
  bilinear interpolation of the patch rows, the ``k`` prefix rows (class token) unchanged;
  the same computation as timm's ``resample_abs_pos_embed``;
* :func:`resize_vit` -- a copy of a :class:`vitref.ViT` for a new image size, every weight
  copied and the position table resampled;
* :func:`resize_images` -- ``uint8 (N, C, H, W)`` images resized to a new side;
* :func:`train_steps` -- a fixed number of AdamW steps on an existing model with the course's
  warm-up + cosine schedule (:func:`vitref.train.lr_at`), returning the loss of every step:
  fine-tuning after :func:`resize_vit`, and the small optimisation experiments of chapter 5.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .data import BatchLoader
from .training import TrainConfig, lr_at
from .vit import ViT

INTERPOLATIONS = ("bicubic", "bilinear")


def _grid_of(num_patch_rows: int, grid) -> tuple[int, int]:
    """The ``(rows, cols)`` grid of ``num_patch_rows`` positions: ``grid`` if given, else a square."""
    if grid is None:
        side = math.isqrt(num_patch_rows)
        if side * side != num_patch_rows:
            raise ValueError(f"{num_patch_rows} patch positions are not a square grid: pass old_grid=(rows, cols)")
        return side, side
    rows, cols = _as_grid(grid, "old_grid")
    if rows * cols != num_patch_rows:
        raise ValueError(f"old_grid {rows} x {cols} = {rows * cols} positions, "
                         f"but the table has {num_patch_rows} patch rows")
    return rows, cols


def _as_grid(grid, name: str) -> tuple[int, int]:
    if isinstance(grid, int):
        grid = (grid, grid)
    try:
        rows, cols = (int(g) for g in grid)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an int or a pair (rows, cols), got {grid!r}") from None
    if rows < 1 or cols < 1 or (rows, cols) != tuple(grid):
        raise ValueError(f"{name} must be positive integers, got {grid!r}")
    return rows, cols


def resample_positions(pos_embed: torch.Tensor, new_grid, old_grid=None, num_prefix_tokens: int = 1,
                       mode: str = "bicubic", antialias: bool = True) -> torch.Tensor:
    """Resize a position table to a new patch grid.

    ``pos_embed (B, k + h*w, D)`` (usually ``B = 1``), rows in the patches' row-major order after
    ``k = num_prefix_tokens`` rows that are not on the grid (the class token) ->
    ``(B, k + H*W, D)`` for ``new_grid = (H, W)`` (or an int for a square grid). ``old_grid``
    defaults to the square ``h = w = sqrt(number of patch rows)``. The patch rows are reshaped
    to ``(B, D, h, w)``, resized with ``F.interpolate`` (``mode`` 'bicubic' or 'bilinear',
    ``align_corners=False``; ``antialias`` matters only when shrinking), and flattened back; the
    prefix rows are copied unchanged. Same grid in and out: the table itself is returned.
    """
    if not isinstance(pos_embed, torch.Tensor) or pos_embed.ndim != 3:
        got = tuple(pos_embed.shape) if isinstance(pos_embed, torch.Tensor) else type(pos_embed).__name__
        raise ValueError(f"expected a position table (B, prefix + rows*cols, D), got {got}")
    if mode not in INTERPOLATIONS:
        raise ValueError(f"unknown mode {mode!r}: expected one of {INTERPOLATIONS}")
    if not 0 <= num_prefix_tokens < pos_embed.shape[1]:
        raise ValueError(f"num_prefix_tokens must be between 0 and {pos_embed.shape[1] - 1}, got {num_prefix_tokens}")
    B, T, D = pos_embed.shape
    old_rows, old_cols = _grid_of(T - num_prefix_tokens, old_grid)
    new_rows, new_cols = _as_grid(new_grid, "new_grid")
    if (new_rows, new_cols) == (old_rows, old_cols):
        return pos_embed
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]   # (B, k, D), (B, h*w, D)
    as_image = patches.float().reshape(B, old_rows, old_cols, D).permute(0, 3, 1, 2)       # (B, D, h, w)
    resized = F.interpolate(as_image, size=(new_rows, new_cols), mode=mode, align_corners=False,
                            antialias=antialias)                                           # (B, D, H, W)
    patches = resized.permute(0, 2, 3, 1).reshape(B, new_rows * new_cols, D).to(pos_embed.dtype)  # (B, H*W, D)
    return torch.cat([prefix, patches], dim=1)                                             # (B, k + H*W, D)


def resize_vit(model: nn.Module, img_size: int, mode: str = "bicubic") -> nn.Module:
    """A new :class:`vitref.ViT` for ``img_size x img_size`` images, with ``model``'s weights.

    Every parameter is copied; the position table is resampled from the old patch grid to
    ``img_size // patch_size`` per side with :func:`resample_positions` (class token row kept).
    ``img_size`` must be a multiple of the patch size. ``model`` is left unchanged; the copy
    is in the same training/eval mode.
    """
    if not isinstance(model, ViT):
        raise TypeError(f"expected a vitref.ViT, got {type(model).__name__}")
    if not isinstance(img_size, int) or img_size < model.patch_size or img_size % model.patch_size:
        raise ValueError(f"img_size must be a positive multiple of the patch size {model.patch_size}, got {img_size!r}")
    new = ViT(**{**model.config, "img_size": img_size}).to(model.pos_embed.device)
    state = {k: v for k, v in model.state_dict().items() if k != "pos_embed"}
    new.load_state_dict(state, strict=False)
    with torch.no_grad():
        new.pos_embed.copy_(resample_positions(model.pos_embed, img_size // model.patch_size, mode=mode))
    return new.train(model.training)


def resize_images(images: torch.Tensor, size: int, mode: str = "bilinear") -> torch.Tensor:
    """``uint8 (N, C, H, W)`` -> ``uint8 (N, C, size, size)``, resized (rounded back to 0..255)."""
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4:
        got = f"{images.dtype} {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"expected uint8 images (N, C, H, W), got {got}")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    kwargs = {} if mode == "nearest" else dict(align_corners=False, antialias=True)
    resized = F.interpolate(images.float(), size=(size, size), mode=mode, **kwargs)       # (N, C, size, size)
    return resized.round().clamp(0, 255).to(torch.uint8)


def train_steps(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, info: dict, steps: int, *,
                lr: float = 2e-3, warmup: float = 0.05, weight_decay: float = 0.05, batch_size: int = 128,
                label_smoothing: float = 0.0, grad_clip: float | None = 1.0, flip: bool = False,
                seed: int = 0) -> list[float]:
    """Train ``model`` in place for ``steps`` AdamW steps; return the training loss of each step.

    ``images uint8 (N, C, H, W)`` and ``labels (N,)`` are the training set, normalised with
    ``info['mean']``/``info['std']`` (``vitref.data.DATASET_INFO``); batches are drawn in a
    shuffled order fixed by ``seed`` (epochs repeat as needed), optionally with random flips.
    The learning rate follows :func:`vitref.train.lr_at`: linear warm-up over the first
    ``warmup`` fraction of the steps (0: none), then cosine to zero. Weight decay on weight
    matrices only, as in :func:`vitref.train.train`. A loss that is not finite is recorded and
    the run goes on (an exploding run is a result, not an error). The model is left in train mode.
    """
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not 0.0 <= warmup < 1.0:
        raise ValueError(f"warmup is a fraction of the steps in [0, 1), got {warmup}")
    if len(images) < batch_size:
        raise ValueError(f"batch size {batch_size} is larger than the {len(images)} training images")
    schedule = TrainConfig(lr=lr, warmup=warmup, min_lr=0.0)
    decay = [p for n, p in model.named_parameters()
             if p.requires_grad and p.ndim > 1 and "pos_embed" not in n and "cls_token" not in n]
    other = [p for n, p in model.named_parameters()
             if p.requires_grad and not (p.ndim > 1 and "pos_embed" not in n and "cls_token" not in n)]
    optimizer = torch.optim.AdamW([dict(params=decay, weight_decay=weight_decay),
                                   dict(params=other, weight_decay=0.0)], lr=lr)
    torch.manual_seed(seed)
    loader = BatchLoader(images, labels, batch_size, info["mean"], info["std"], shuffle=True,
                         generator=torch.Generator().manual_seed(seed), flip=flip, drop_last=True)
    losses: list[float] = []
    model.train()
    while len(losses) < steps:
        for x, y in loader:                                          # (B, C, H, W), (B,)
            lr_now = lr_at(len(losses) / steps, schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr_now
            loss = F.cross_entropy(model(x), y, label_smoothing=label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


__all__ = ["resample_positions", "resize_vit", "resize_images", "train_steps", "INTERPOLATIONS"]
