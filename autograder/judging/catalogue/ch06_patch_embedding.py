"""The references and the catalogue of known mistakes of ch06_patch_embedding (grader side)."""
from __future__ import annotations


import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from ..model import Mistake
from . import add
from ._common import parts, vitref
from ...questions.ch06_patch_embedding import (  # noqa: F401
    CONV_CASES,
    Q2_CASES,
    Q3_CASES,
    Q4_CASES,
    _build_patch_embedding,
    _case,
    _dims,
    _images,
    _run_conv,
    _run_q2,
    _run_q3,
    _run_q4,
    _run_tokens,
)

PATCH = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"


def _projection_reference():
    v = vitref()

    class ProjectionOnly(nn.Module):
        def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=None):
            super().__init__()
            self.projection = v.PatchEmbedding(in_channels, patch_size, emb_size, img_size or patch_size,
                                               positions=None).projection
    return [ProjectionOnly]


def _q2(pattern=PATCH, in_features="ppc", swapped=False):
    def build(parts):
        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                features = {"ppc": patch_size * patch_size * in_channels, "pp": patch_size * patch_size}[in_features]
                linear = nn.Linear(emb_size, features) if swapped else nn.Linear(features, emb_size)
                self.projection = nn.Sequential(Rearrange(pattern, s1=patch_size, s2=patch_size), linear)

            def forward(self, x):
                return self.projection(x)
        return PatchEmbedding
    return build


Q2_MISTAKES = [
    Mistake("channels_first", "channels first inside each patch, (c s1 s2)",
            "Use the slides' pattern 'b c (h s1) (w s2) -> b (h w) (s1 s2 c)': channels last in a patch.",
            _q2(pattern="b c (h s1) (w s2) -> b (h w) (c s1 s2)")),
    Mistake("transposed_patch", "pixels inside a patch taken column by column, (s2 s1 c)",
            "Inside a patch go row by row: (s1 s2 c).", _q2(pattern="b c (h s1) (w s2) -> b (h w) (s2 s1 c)")),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Number the patches row by row: (h w).", _q2(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)")),
    Mistake("in_features_without_channels", "Linear input size P*P instead of P*P*C",
            "A flattened patch has patch_size * patch_size * in_channels numbers.", _q2(in_features="pp")),
    Mistake("linear_swapped", "nn.Linear(emb_size, P*P*C): input and output sizes swapped",
            "nn.Linear(in_features, out_features): from P*P*C to emb_size.", _q2(swapped=True)),
]

add('q2', references=_projection_reference, catalogue=Q2_MISTAKES)

def _pe_part():
    import numpy as np

    def getPositionEncoding(seq_len, d, n=10000):
        if d % 2:
            # vitref refuses odd widths; only the catalogue's swapped-arguments answer asks for
            # one, and there only the table's shape matters (adding it fails).
            return np.zeros((seq_len, d))
        return vitref().sinusoidal_encoding(seq_len, d, n).double().numpy()
    return getPositionEncoding


def _tokens_references(*kinds):
    def make():
        v = vitref()
        refs = []
        for kind in kinds:
            class Reference(v.PatchEmbedding):
                positions_kind = kind

                def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=None):
                    super().__init__(in_channels, patch_size, emb_size, img_size or patch_size,
                                     positions=self.positions_kind)
            refs.append(Reference)
        return refs
    return make


def _q3(cls_mode, positions=None):
    """A wrong class token; ``positions`` (None, "sinusoidal", "learned") as the final
    version of the class adds them after the class token."""
    def build(parts):
        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                self.projection = nn.Sequential(Rearrange(PATCH, s1=patch_size, s2=patch_size),
                                                nn.Linear(patch_size * patch_size * in_channels, emb_size))
                self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
                num_tokens = (img_size // patch_size) ** 2 + 1
                if positions == "learned":
                    self.learnable_positions = nn.Parameter(torch.randn(num_tokens, emb_size))
                elif positions == "sinusoidal":
                    table = torch.as_tensor(parts.getPositionEncoding(num_tokens, emb_size)).float()
                    self.register_buffer("sinusoids_positions", table)

            def forward(self, x):
                b = x.shape[0]
                x = self.projection(x)
                if cls_mode == "not_repeated":
                    x = torch.cat([self.cls_token, x], dim=1)
                else:
                    cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
                    if cls_mode == "at_end":
                        x = torch.cat([x, cls_tokens], dim=1)
                    elif cls_mode == "added":
                        x = x + cls_tokens
                    else:
                        raise ValueError(cls_mode)
                if positions == "learned":
                    x = x + self.learnable_positions[:x.shape[1]]
                elif positions == "sinusoidal":
                    x = x + self.sinusoids_positions[:x.shape[1]]
                return x
        return PatchEmbedding
    return build


def _q3_mistake(key, title, hint, cls_mode):
    return Mistake(key, title, hint, _q3(cls_mode), ("getPositionEncoding",),
                   also=(_q3(cls_mode, "sinusoidal"), _q3(cls_mode, "learned")))


Q3_MISTAKES = [
    _q3_mistake("cls_not_repeated", "class token not repeated over the batch",
                "repeat(self.cls_token, '() n e -> b n e', b=b) gives one class token per image; without it "
                "torch.cat fails for batches larger than 1.", "not_repeated"),
    _q3_mistake("cls_at_end", "class token appended after the patches",
                "The class token is token 0: torch.cat([cls_tokens, x], dim=1).", "at_end"),
    _q3_mistake("cls_added", "class token added to every patch instead of prepended",
                "Concatenate it as an extra token (N + 1 tokens), do not add it.", "added"),
]

add('q3', references=_tokens_references(None, "sinusoidal", "learned"), catalogue=Q3_MISTAKES, reference_parts=parts(getPositionEncoding=_pe_part))


def _q4(mode):
    def build(parts):
        getPositionEncoding = parts.getPositionEncoding

        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                num_patches = (img_size // patch_size) ** 2
                self.projection = nn.Sequential(Rearrange(PATCH, s1=patch_size, s2=patch_size),
                                                nn.Linear(patch_size * patch_size * in_channels, emb_size))
                self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
                self.learnable_positions = nn.Parameter(torch.randn(num_patches + 1, emb_size))
                if mode == "swapped":
                    table = getPositionEncoding(emb_size, num_patches + 1)
                elif mode in ("num_patches", "before_cls"):
                    table = getPositionEncoding(num_patches, emb_size)
                else:
                    table = getPositionEncoding(num_patches + 1, emb_size)
                self.register_buffer("sinusoids_positions", torch.as_tensor(table).float())

            def forward(self, x):
                b = x.shape[0]
                x = self.projection(x)
                if mode == "before_cls":
                    x = x + self.sinusoids_positions
                cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
                x = torch.cat([cls_tokens, x], dim=1)
                if mode == "learned":
                    return x + self.learnable_positions
                if mode in ("none", "before_cls"):
                    return x
                return x + self.sinusoids_positions
        return PatchEmbedding
    return build


Q4_MISTAKES = [
    Mistake("learned_positions", "the learnable positions were added, not the sinusoids",
            "Q4 asks for the fixed table: add self.sinusoids_positions built with getPositionEncoding.",
            _q4("learned"), ("getPositionEncoding",)),
    Mistake("no_positions", "no positional encoding added",
            "Add the (N + 1, emb_size) sinusoidal table to the tokens after the class token is prepended.",
            _q4("none"), ("getPositionEncoding",)),
    Mistake("positions_before_cls", "positions added before the class token was prepended (offset by one)",
            "Prepend the class token first, then add getPositionEncoding(N + 1, emb_size): the class "
            "token gets row 0 and patch k row k + 1.", _q4("before_cls"), ("getPositionEncoding",)),
    Mistake("swapped_arguments", "getPositionEncoding(emb_size, N + 1): arguments swapped",
            "The table has one row per token: getPositionEncoding(seq_len=N + 1, d=emb_size).",
            _q4("swapped"), ("getPositionEncoding",)),
    Mistake("seq_len_num_patches", "a table for N positions instead of N + 1",
            "With the class token there are N + 1 tokens: seq_len = (img_size // patch_size) ** 2 + 1.",
            _q4("num_patches"), ("getPositionEncoding",)),
]

add('q4', references=_tokens_references("sinusoidal"), catalogue=Q4_MISTAKES, reference_parts=parts(getPositionEncoding=_pe_part))


def _conv(stride="patch", flatten="b e h w -> b (h w) e"):
    def build(parts):
        class ConvPatchEmbedding(nn.Module):
            def __init__(self, in_channels, patch_size, emb_size):
                super().__init__()
                self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size,
                                      stride=patch_size if stride == "patch" else 1)

            def forward(self, images):
                grid = self.proj(images)
                if flatten is None:
                    return grid.flatten(2)
                return rearrange(grid, flatten)
        return ConvPatchEmbedding
    return build


CONV_MISTAKES = [
    Mistake("stride_one", "stride 1: overlapping patches",
            "Non-overlapping patches need stride = kernel_size = patch_size.", _conv(stride=1)),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Flatten the grid row by row: 'b e h w -> b (h w) e'.", _conv(flatten="b e h w -> b (w h) e")),
    Mistake("channels_not_last", "(B, emb_size, N): the embedding axis is not last",
            "Conv2d gives (B, E, H/P, W/P); flatten the grid and move E last: 'b e h w -> b (h w) e'.",
            _conv(flatten=None)),
]

add('conv_patch_embedding', references=lambda: [vitref().ConvPatchEmbedding], catalogue=CONV_MISTAKES)
