"""The Vision Transformer (Dosovitskiy et al., 2020), pre-LN.

    z_0 = [x_cls; x_p^1 E; ...; x_p^N E] + E_pos          (B, N+1, D)
    z'_l = z_{l-1} + MSA(LN(z_{l-1}))                      l = 1..L
    z_l  = z'_l + MLP(LN(z'_l))
    y    = head(LN(z_L^0))                                 (B, num_classes)
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ._checks import check_divisible
from .blocks import TransformerEncoderBlock
from .patches import ConvPatchEmbedding, check_images


class ViT(nn.Module):
    """``ViT(img_size, patch_size, in_channels, num_classes, dim, depth, num_heads, mlp_dim)``.

    ``model(x (B, C, H, W))`` -> ``logits (B, num_classes)``;
    ``model(x, return_attention=True)`` -> ``(logits, [weights (B, heads, N+1, N+1) per layer])``.

    The image is cut into ``N = (img_size / patch_size)^2`` patches, each embedded in ``dim``
    features (chapter 6); a learned class token is put in front and learned positions are added;
    ``depth`` pre-LN encoder blocks (chapter 5) of multi-head attention (chapter 4) and an MLP
    follow; a final LayerNorm, and a linear head reads the class token's output (or, with
    ``pool='mean'``, the patch tokens' mean). ``patch_dropout`` drops a share of the patch tokens
    in training (:meth:`drop_patches`).

    Two parts are stand-ins that compute the same functions as the chapters' modules, tested equal:
    ``nn.LayerNorm`` for chapter 5's :class:`~vitref.blocks.LayerNorm`, and
    :class:`~vitref.patches.ConvPatchEmbedding` (one strided convolution, timm's layout, so that
    :func:`vitref.from_timm` loads timm's weights as they are) for cutting patches and applying a
    linear layer.
    """

    def __init__(self, img_size: int = 32, patch_size: int = 4, in_channels: int = 3, num_classes: int = 10,
                 dim: int = 128, depth: int = 6, num_heads: int = 4, mlp_dim: int = 512,
                 dropout: float = 0.0, norm_eps: float = 1e-6, pool: str = "cls", patch_dropout: float = 0.0):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' (the class token's output) or 'mean' (average of the patch tokens), "
                             f"got {pool!r}")
        if img_size % patch_size:
            raise ValueError(f"image size {img_size} is not divisible by patch size {patch_size}")
        check_divisible(dim, num_heads)
        if not 0.0 <= patch_dropout < 1.0:
            raise ValueError(f"patch_dropout is the share of patch tokens dropped in training, in [0, 1), "
                             f"got {patch_dropout}")
        self.config: dict[str, Any] = dict(
            img_size=img_size, patch_size=patch_size, in_channels=in_channels, num_classes=num_classes,
            dim=dim, depth=depth, num_heads=num_heads, mlp_dim=mlp_dim, dropout=dropout, norm_eps=norm_eps, pool=pool)
        if patch_dropout:
            self.config["patch_dropout"] = patch_dropout
        self.pool, self.patch_dropout = pool, patch_dropout
        self.img_size, self.patch_size, self.in_channels = img_size, patch_size, in_channels
        self.num_patches = (img_size // patch_size) ** 2
        # chapter 6's patch embedding as one strided convolution (tested equal; timm's layout):
        # (B, C, H, W) -> (B, N, D)
        self.patch_embed = ConvPatchEmbedding(in_channels, patch_size, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))                       # (1, 1, D)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_patches + 1, dim))    # (1, N+1, D)
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerEncoderBlock(dim, num_heads, drop_p=dropout, forward_drop_p=dropout, norm_first=True,
                                    mlp_dim=mlp_dim, norm_eps=norm_eps)
            for _ in range(depth)
        )
        # = chapter 5's vitref.LayerNorm (tested equal: tests/test_blocks.py test_layernorm_equals_torch), one
        # fused kernel against five elementwise steps: about 5x faster at the recipe's shape on a CPU
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.head = nn.Linear(dim, num_classes)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """Truncated-normal(0.02) weights and zero biases, as in the reference implementations."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``(B, C, H, W)`` -> tokens with class token and positions ``(B, N+1, D)``."""
        check_images(images, self.patch_size, self.in_channels, self.img_size)
        patches = self.patch_embed(images)                                        # (B, N, D)
        cls = self.cls_token.expand(images.shape[0], -1, -1)                      # (B, 1, D)
        tokens = torch.cat([cls, patches], dim=1) + self.pos_embed                # (B, N+1, D)
        if self.training and self.patch_dropout:
            tokens = self.drop_patches(tokens)                                    # (B, K+1, D)
        return self.pos_drop(tokens)

    def drop_patches(self, tokens: torch.Tensor) -> torch.Tensor:
        """PatchDropout (Liu et al., 2023, "PatchDropout: Economizing Vision Transformers Using Patch
        Dropout"): in training, each image keeps the class token and a random ``K`` of its ``N``
        patch tokens, ``K = round(N (1 - patch_dropout))``, positions already added (so the kept
        tokens still know where they are). Fewer tokens make a step cheaper and act as a
        regulariser; at evaluation every token is used. ``tokens (B, N+1, D)`` -> ``(B, K+1, D)``."""
        batch, count, dim = tokens.shape
        keep = max(1, round((count - 1) * (1 - self.patch_dropout)))
        kept = torch.rand(batch, count - 1, device=tokens.device).argsort(dim=1)[:, :keep] + 1   # (B, K)
        patches = tokens.gather(1, kept.unsqueeze(-1).expand(-1, -1, dim))                       # (B, K, D)
        return torch.cat([tokens[:, :1], patches], dim=1)                                        # (B, K+1, D)

    def forward_features(self, images: torch.Tensor, return_attention: bool = False):
        """Encoder output after the final LayerNorm, ``(B, N+1, D)`` [and per-layer weights]."""
        x = self.embed(images)
        attentions = []
        for block in self.blocks:
            if return_attention:
                x, weights = block(x, return_attention=True)                     # weights (B, h, N+1, N+1)
                attentions.append(weights)
            else:
                x = block(x)
        x = self.norm(x)
        return (x, attentions) if return_attention else x

    def pooled(self, features: torch.Tensor) -> torch.Tensor:
        """What the head sees, ``(B, D)``: the class token's output, or (``pool='mean'``) the patch tokens' mean."""
        return features[:, 0] if self.pool == "cls" else features[:, 1:].mean(dim=1)

    def forward(self, images: torch.Tensor, return_attention: bool = False):
        if return_attention:
            features, attentions = self.forward_features(images, return_attention=True)
            return self.head(self.pooled(features)), attentions                   # (B, classes), list
        return self.head(self.pooled(self.forward_features(images)))              # (B, num_classes)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def vit_tiny_cifar10(num_classes: int = 10, **overrides) -> ViT:
    """The CIFAR-10 article's small ViT (32x32 images, patch 4, D=128, 4 heads, depth 6, MLP 512): 1,205,898
    parameters. The article calls it ViT-Tiny; DeiT's ViT-Ti is larger (12 blocks, D=192, 3 heads, MLP 768)."""
    config = dict(img_size=32, patch_size=4, in_channels=3, num_classes=num_classes, dim=128, depth=6,
                  num_heads=4, mlp_dim=512)
    return ViT(**{**config, **overrides})


def vit_b16(num_classes: int = 1000, img_size: int = 224, **overrides) -> ViT:
    """ViT-Base/16 (D=768, 12 heads, depth 12, MLP 3072); 85,800,963 parameters with 3 classes."""
    config = dict(img_size=img_size, patch_size=16, in_channels=3, num_classes=num_classes, dim=768, depth=12,
                  num_heads=12, mlp_dim=3072)
    return ViT(**{**config, **overrides})


__all__ = ["ViT", "count_parameters", "vit_tiny_cifar10", "vit_b16"]
