"""From images to tokens.

An image ``(C, H, W)`` cut into ``P x P`` patches gives ``N = HW / P^2`` tokens, each a
vector of ``P * P * C`` pixel values. A linear map sends each to ``D`` dimensions. Doing that
with ``Rearrange + Linear`` or with a ``Conv2d`` whose kernel size and stride are both ``P`` is
the same computation (:func:`linear_from_conv` converts the weights).
"""
from __future__ import annotations

from typing import cast

import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from ._checks import shape_str
from .positional import sinusoidal_encoding

# The slides' patch order: patches row by row, pixels inside a patch row by row, channels last.
PATCH_PATTERN = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"


def check_images(images: torch.Tensor, patch_size: int, in_channels: int | None = None, img_size: int | None = None):
    """Validate an image batch ``(B, C, H, W)``; return ``(grid_h, grid_w)`` in patches."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4:
        got = shape_str(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"expected images of shape (B, C, H, W), got {got}")
    _, channels, height, width = images.shape
    if in_channels is not None and channels != in_channels:
        raise ValueError(f"expected {in_channels} channels, got {channels} (images of shape {shape_str(images.shape)})")
    if img_size is not None and (height, width) != (img_size, img_size):
        raise ValueError(f"expected images of size {img_size}x{img_size}, got {height}x{width}")
    for size in {height, width}:
        if size % patch_size:
            label = f"{size}" if height == width else f"{height}x{width}"
            raise ValueError(f"image size {label} is not divisible by patch size {patch_size}")
    return height // patch_size, width // patch_size


def image_to_patches(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut ``images (B, C, H, W)`` into flattened patches ``(B, N, P*P*C)``, N = HW/P^2."""
    check_images(images, patch_size)
    return rearrange(images, PATCH_PATTERN, s1=patch_size, s2=patch_size)


def patches_to_image(patches: torch.Tensor, patch_size: int, grid: tuple[int, int], channels: int) -> torch.Tensor:
    """Inverse of :func:`image_to_patches`: ``(B, N, P*P*C) -> (B, C, H, W)``."""
    return rearrange(
        patches, "b (h w) (s1 s2 c) -> b c (h s1) (w s2)",
        h=grid[0], w=grid[1], s1=patch_size, s2=patch_size, c=channels,
    )


class LinearPatchEmbedding(nn.Module):
    """``Rearrange`` into patches, then ``Linear(P*P*C, D)``: ``(B, C, H, W) -> (B, N, D)``."""

    def __init__(self, in_channels: int, patch_size: int, emb_size: int):
        super().__init__()
        self.in_channels, self.patch_size, self.emb_size = in_channels, patch_size, emb_size
        self.rearrange = Rearrange(PATCH_PATTERN, s1=patch_size, s2=patch_size)
        self.linear = nn.Linear(patch_size * patch_size * in_channels, emb_size)

    def forward(self, images):
        check_images(images, self.patch_size, self.in_channels)
        return self.linear(self.rearrange(images))                       # (B, N, D)


class ConvPatchEmbedding(nn.Module):
    """``Conv2d(C, D, kernel_size=P, stride=P)``, flattened: ``(B, C, H, W) -> (B, N, D)``."""

    def __init__(self, in_channels: int, patch_size: int, emb_size: int):
        super().__init__()
        self.in_channels, self.patch_size, self.emb_size = in_channels, patch_size, emb_size
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)

    def forward(self, images):
        check_images(images, self.patch_size, self.in_channels)
        grid = self.proj(images)                                         # (B, D, H/P, W/P)
        return rearrange(grid, "b d gh gw -> b (gh gw) d")               # (B, N, D)


@torch.no_grad()
def linear_from_conv(conv_embed: ConvPatchEmbedding) -> LinearPatchEmbedding:
    """The :class:`LinearPatchEmbedding` that computes what ``conv_embed`` computes.

    A conv kernel ``(D, C, P, P)`` becomes a linear weight ``(D, P*P*C)`` by ordering its
    entries like the pixels of a flattened patch: ``(s1 s2 c)``.
    """
    conv = conv_embed.proj
    assert conv.bias is not None   # ConvPatchEmbedding's convolution has a bias
    linear_embed = LinearPatchEmbedding(conv_embed.in_channels, conv_embed.patch_size, conv_embed.emb_size)
    linear_embed = linear_embed.to(dtype=conv.weight.dtype, device=conv.weight.device)
    linear_embed.linear.weight.copy_(rearrange(conv.weight, "d c s1 s2 -> d (s1 s2 c)"))
    linear_embed.linear.bias.copy_(conv.bias)
    return linear_embed


class ChannelwisePatchEmbedding(nn.Module):
    """The Julia notebook's patch embedding: one ``Linear(P*P, D)`` per channel, results summed.

    It is a full linear map on ``(s1 s2 c)`` patches whose weight is the per-channel
    weights side by side (see :meth:`as_linear`), with the biases added together.
    """

    def __init__(self, in_channels: int, patch_size: int, emb_size: int):
        super().__init__()
        self.in_channels, self.patch_size, self.emb_size = in_channels, patch_size, emb_size
        self.per_channel = nn.ModuleList(nn.Linear(patch_size * patch_size, emb_size) for _ in range(in_channels))

    def forward(self, images):
        check_images(images, self.patch_size, self.in_channels)
        p = self.patch_size
        channel_patches = rearrange(images, "b c (h s1) (w s2) -> c b (h w) (s1 s2)", s1=p, s2=p)  # (C, B, N, P*P)
        return sum(proj(patches) for proj, patches in zip(self.per_channel, channel_patches))    # (B, N, D)

    @torch.no_grad()
    def as_linear(self) -> LinearPatchEmbedding:
        """The equivalent single :class:`LinearPatchEmbedding`."""
        linears = cast("list[nn.Linear]", list(self.per_channel))   # a ModuleList's items are typed Module
        first = linears[0].weight
        linear_embed = LinearPatchEmbedding(self.in_channels, self.patch_size, self.emb_size).to(first.dtype)
        stacked = torch.stack([proj.weight for proj in linears], dim=-1)   # (D, P*P, C)
        linear_embed.linear.weight.copy_(rearrange(stacked, "d pp c -> d (pp c)"))
        linear_embed.linear.bias.copy_(cast(torch.Tensor, sum(proj.bias for proj in linears)))
        return linear_embed


class PatchEmbedding(nn.Module):
    """The slides' patch embedding (Q2-Q4): patches -> linear projection -> class token -> positions.

    ``forward(images (B, C, H, W)) -> (B, N + 1, E)``; token 0 is the class token
    (``cls_token=False``: no class token, ``(B, N, E)``).
    ``positions`` is ``"learned"`` (a trained ``(N + 1, E)`` table), ``"sinusoidal"`` (the fixed
    table of :func:`~vitref.positional.sinusoidal_encoding`) or ``None``.
    """

    positions: torch.Tensor | None

    def __init__(self, in_channels: int = 3, patch_size: int = 16, emb_size: int = 768, img_size: int = 224,
                 positions: str | None = "learned", cls_token: bool = True):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"image size {img_size} is not divisible by patch size {patch_size}")
        self.in_channels, self.patch_size, self.img_size = in_channels, patch_size, img_size
        self.num_patches = (img_size // patch_size) ** 2
        num_tokens = self.num_patches + int(cls_token)
        self.projection = nn.Sequential(
            Rearrange(PATCH_PATTERN, s1=patch_size, s2=patch_size),      # (B, N, P*P*C)
            nn.Linear(patch_size * patch_size * in_channels, emb_size),  # (B, N, E)
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size)) if cls_token else None  # (1, 1, E)
        if positions == "learned":
            self.positions = nn.Parameter(torch.randn(num_tokens, emb_size))  # (N+1, E), or (N, E) without CLS
        elif positions == "sinusoidal":
            self.register_buffer("positions", sinusoidal_encoding(num_tokens, emb_size))
        elif positions is None:
            self.positions = None
        else:
            raise ValueError(f"positions must be 'learned', 'sinusoidal' or None, got {positions!r}")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_images(images, self.patch_size, self.in_channels, self.img_size)
        tokens = self.projection(images)                                          # (B, N, E)
        if self.cls_token is None:
            return tokens if self.positions is None else tokens + self.positions
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=images.shape[0])  # (B, 1, E)
        tokens = torch.cat([cls_tokens, tokens], dim=1)                           # (B, N+1, E)
        return tokens if self.positions is None else tokens + self.positions


__all__ = [
    "PATCH_PATTERN", "check_images", "image_to_patches", "patches_to_image", "LinearPatchEmbedding",
    "ConvPatchEmbedding", "linear_from_conv", "ChannelwisePatchEmbedding", "PatchEmbedding",
]
