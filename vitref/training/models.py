"""The model a run trains: built from a config, its positions' starting point, reloaded from a run."""
from __future__ import annotations

import math
from typing import cast

import torch

from ..positional import sinusoidal_encoding
from ..vit import ViT
from .config import TrainConfig


def build_model(config: TrainConfig, info: dict) -> torch.nn.Module:
    """The model of ``config`` for a dataset described by ``info`` (see ``vitref.data.DATASET_INFO``)."""
    if config.arch == "vitref":
        return ViT(img_size=info["img_size"], patch_size=config.patch_size, in_channels=info["in_channels"],
                   num_classes=info["num_classes"], dim=config.dim, depth=config.depth, num_heads=config.num_heads,
                   mlp_dim=config.mlp_dim, dropout=config.dropout, pool=config.pool, patch_dropout=config.patch_dropout)
    if config.arch == "timm":
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(img_size=info["img_size"], patch_size=config.patch_size,
                                 in_chans=info["in_channels"], num_classes=info["num_classes"],
                                 embed_dim=config.dim, depth=config.depth, num_heads=config.num_heads,
                                 mlp_ratio=config.mlp_dim / config.dim, drop_rate=config.dropout,
                                 proj_drop_rate=config.dropout, patch_drop_rate=config.patch_dropout,
                                 global_pool="token" if config.pool == "cls" else "avg",
                                 # final norm before pooling, as vitref.ViT (timm's 'avg' default norms after)
                                 fc_norm=False)
    raise ValueError(f"unknown arch {config.arch!r}: expected 'vitref' or 'timm'")


@torch.no_grad()
def init_sincos_positions(model: torch.nn.Module) -> None:
    """Start the learned ``pos_embed (1, N+1, D)`` at a 2-D sine-cosine table.

    The first ``D/2`` features encode the patch's row, the last ``D/2`` its column, each with
    :func:`vitref.sinusoidal_encoding`; the class token's position starts at zero. The
    positions stay trainable: only their starting point changes.
    """
    pos_embed = cast(torch.Tensor, model.pos_embed)   # vitref.ViT's or timm's (1, N+1, D) parameter
    num_tokens, dim = pos_embed.shape[1:]
    side = math.isqrt(num_tokens - 1)
    if side * side != num_tokens - 1 or dim % 4:
        raise ValueError(f"sincos positions need a square grid and dim divisible by 4, "
                         f"got {num_tokens - 1} patches, dim {dim}")
    table = sinusoidal_encoding(side, dim // 2)                           # (side, D/2)
    rows = table[:, None, :].expand(side, side, dim // 2)                 # (side, side, D/2): row of each patch
    cols = table[None, :, :].expand(side, side, dim // 2)                 # (side, side, D/2): column of each patch
    grid = torch.cat([rows, cols], dim=-1).reshape(side * side, dim)      # (N, D), row-major like the patches
    pos_embed[0, 0].zero_()
    pos_embed[0, 1:] = grid.to(pos_embed)


def load_checkpoint(path) -> torch.nn.Module:
    """The :class:`~vitref.vit.ViT` saved in ``model.pt`` by :func:`vitref.training.train`, in eval mode."""
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = ViT(**saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval()


__all__ = ["build_model", "init_sincos_positions", "load_checkpoint"]
