"""The references and the catalogue of known mistakes of ch06_patch_embedding (grader side)."""
from __future__ import annotations


from types import SimpleNamespace

import numpy as np
import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

import vitref

from ..model import Mistake
from ._entry import add
from ._common import parts
from ._changes import patch_order, table_mistakes
from ._symptoms import FRESH_CLASS_TOKEN, GRADIENT_DIFFERS, PROPERTIES, RECIPE_SAYS, tokens
from .ch01_tokens import PATCH_MISTAKES

# The part the answers that add positions build on: the notebook's given getPositionEncoding.
_NEEDS_PE = ("getPositionEncoding",)

PATCH = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"


def _projection_reference():

    class ProjectionOnly(nn.Module):
        def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=None):
            super().__init__()
            self.projection = vitref.PatchEmbedding(in_channels, patch_size, emb_size, img_size or patch_size,
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


class _Patches(nn.Module):
    """A patch-cutting function (chapter 1's image_to_patches) as a layer."""

    def __init__(self, fn, patch_size):
        super().__init__()
        self.fn, self.patch_size = fn, patch_size

    def forward(self, images):
        return self.fn(images, self.patch_size)


def _embedding(patches=None, linear="ok", cls="ok", positions=None, table="ok", pe=None):
    """A (wrong) PatchEmbedding of the final notebook's shape, one part at a time:
    ``patches``: a builder of chapter 1's image_to_patches (None: the slides' Rearrange);
    ``linear``: "ok", "no_bias"; ``cls``: "ok", "cat_wrong_dim"; ``positions``: None,
    "sinusoidal", "learned", "both", "cls_without"; ``table``: which getPositionEncoding table
    (seq_len N + 1 "ok", "base_patch": the patch size passed as the base n, "from_one": rows
    1..N+1); ``pe``: the getPositionEncoding to use (default: the parts')."""
    def build(parts):
        getPositionEncoding = pe or getattr(parts, "getPositionEncoding", None)

        class PatchEmbedding(nn.Module):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__()
                cut = (Rearrange(PATCH, s1=patch_size, s2=patch_size) if patches is None
                       else _Patches(patches(parts), patch_size))
                self.projection = nn.Sequential(cut, nn.Linear(patch_size * patch_size * in_channels, emb_size,
                                                               bias=linear != "no_bias"))
                self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
                n = (img_size // patch_size) ** 2
                if positions in ("learned", "both"):
                    self.learnable_positions = nn.Parameter(torch.randn(n + 1, emb_size))
                if positions in ("sinusoidal", "both", "cls_without"):
                    rows = {"ok": lambda: getPositionEncoding(n + 1, emb_size),
                            "base_patch": lambda: getPositionEncoding(n + 1, emb_size, patch_size),
                            "from_one": lambda: getPositionEncoding(n + 2, emb_size)[1:]}[table]()
                    self.register_buffer("sinusoids_positions", torch.as_tensor(rows).float())

            def forward(self, x):
                x = self.projection(x)
                cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=x.shape[0])
                x = torch.cat([cls_tokens, x], dim=-1 if cls == "cat_wrong_dim" else 1)
                if positions == "learned":
                    return x + self.learnable_positions
                if positions == "both":
                    return x + self.learnable_positions + self.sinusoids_positions
                if positions == "cls_without":
                    return torch.cat([x[:, :1], x[:, 1:] + self.sinusoids_positions[1:]], dim=1)
                return x if positions is None else x + self.sinusoids_positions
        return PatchEmbedding
    return build


def _with_q2(mistake, key=None, **options):
    """A Q2 mistake (a builder of a PatchEmbedding whose .projection is wrong) inside a whole
    PatchEmbedding: the projection of the Q2 answer, the rest as ``_embedding(**options)``."""
    def build(parts):
        Wrong, Rest = mistake(parts), _embedding(**options)(parts)

        class PatchEmbedding(Rest):
            def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
                super().__init__(in_channels, patch_size, emb_size, img_size)
                self.projection = Wrong(in_channels, patch_size, emb_size, img_size).projection
        return PatchEmbedding
    return build


_CH01 = {m.key: m for m in PATCH_MISTAKES}


def _from_ch01(key):
    m = _CH01[key]
    return Mistake(key, m.title, m.hint + " (the Rearrange pattern of Q2 is chapter 1's patch order)",
                   _embedding(patches=m.build))


Q2_MISTAKES += [
    _from_ch01("interleaved"),
    _from_ch01("reshape_only"),
    _from_ch01("unfold_no_permute"),
    Mistake("no_bias", "nn.Linear without bias (bias=False)",
            "Keep nn.Linear's bias (the default): nn.Linear(patch_size * patch_size * in_channels, emb_size).",
            _embedding(linear="no_bias")),
]


def _projection_mistakes(positions_forms):
    """Every Q2 mistake in a whole PatchEmbedding, one form per kind of positions."""
    found = []
    for m in Q2_MISTAKES:
        forms = [_with_q2(m.build, positions=kind) for kind in positions_forms]
        found.append(Mistake(m.key, m.title, m.hint, forms[0], _NEEDS_PE, also=tuple(forms[1:])))
    return found


add('q2', references=_projection_reference,
    catalogue=[*Q2_MISTAKES, patch_order(), *PROPERTIES, GRADIENT_DIFFERS, *tokens("patch_embeddings", False),
               *RECIPE_SAYS])

def _pe_part():
    def getPositionEncoding(seq_len, d, n=10000):
        if d % 2:
            # vitref refuses odd widths; only the catalogue's swapped-arguments answer asks for
            # one, and there only the table's shape matters (adding it fails).
            return np.zeros((seq_len, d))
        return vitref.sinusoidal_encoding(seq_len, d, n).double().numpy()
    return getPositionEncoding


def _tokens_references(*kinds):
    def make():
        refs = []
        for kind in kinds:
            class Reference(vitref.PatchEmbedding):
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
    return Mistake(key, title, hint, _q3(cls_mode), _NEEDS_PE,
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

Q3_MISTAKES += [
    Mistake("cls_cat_wrong_dim", "class token concatenated along the embedding axis (dim=-1)",
            "Tokens are stacked along dim=1: torch.cat([cls_tokens, x], dim=1) gives (B, N + 1, emb_size).",
            _embedding(cls="cat_wrong_dim"), _NEEDS_PE,
            also=(_embedding(cls="cat_wrong_dim", positions="sinusoidal"),
                  _embedding(cls="cat_wrong_dim", positions="learned"))),
    *_projection_mistakes((None, "sinusoidal", "learned")),
]

add('q3', references=_tokens_references(None, "sinusoidal", "learned"),
    catalogue=[*Q3_MISTAKES, patch_order(), FRESH_CLASS_TOKEN, *PROPERTIES, GRADIENT_DIFFERS, *tokens("tokens", True),
               *RECIPE_SAYS],
    reference_parts=parts(getPositionEncoding=_pe_part))


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


def _q4_mistake(key, title, hint, mode):
    """A Q4 mistake: the PatchEmbedding :func:`_q4` writes for ``mode``, on the given getPositionEncoding."""
    return Mistake(key, title, hint, _q4(mode), _NEEDS_PE)


Q4_MISTAKES = [
    _q4_mistake("learned_positions", "the learnable positions were added, not the sinusoids",
                "Q4 asks for the fixed table: add self.sinusoids_positions built with getPositionEncoding.", "learned"),
    _q4_mistake("no_positions", "no positional encoding added",
                "Add the (N + 1, emb_size) sinusoidal table to the tokens after the class token is prepended.", "none"),
    _q4_mistake("positions_before_cls", "positions added before the class token was prepended (offset by one)",
                "Prepend the class token first, then add getPositionEncoding(N + 1, emb_size): the class "
                "token gets row 0 and patch k row k + 1.", "before_cls"),
    _q4_mistake("swapped_arguments", "getPositionEncoding(emb_size, N + 1): arguments swapped",
                "The table has one row per token: getPositionEncoding(seq_len=N + 1, d=emb_size).", "swapped"),
    _q4_mistake("seq_len_num_patches", "a table for N positions instead of N + 1",
                "With the class token there are N + 1 tokens: seq_len = (img_size // patch_size) ** 2 + 1.",
                "num_patches"),
]

def _notebook_pe(seq_len, d, n=10000):
    """getPositionEncoding exactly as chapter 6's notebook gives it (it fails for an odd d)."""
    k = np.arange(seq_len)[:, None]
    i = np.arange(d // 2)[None, :]
    angles = k / np.power(n, 2 * i / d)
    P = np.zeros((seq_len, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


def _with_pe(builder, pe):
    def build(parts):
        return builder(SimpleNamespace(**{**vars(parts), "getPositionEncoding": pe}))
    return build


Q4_MISTAKES = [m if m.key != "swapped_arguments" else
               Mistake(m.key, m.title, m.hint, m.build, m.needs, also=(_with_pe(m.build, _notebook_pe),))
               for m in Q4_MISTAKES]
Q4_MISTAKES += [
    Mistake("both_positions", "both tables added: the learnable positions and the sinusoids",
            "Q4 adds only the fixed sinusoidal table: x + self.sinusoids_positions.",
            _embedding(positions="both"), _NEEDS_PE),
    Mistake("cls_without_position", "no position added to the class token",
            "Add the whole (N + 1, emb_size) table after prepending the class token: token 0 gets row 0.",
            _embedding(positions="cls_without"), _NEEDS_PE),
    Mistake("base_not_default", "getPositionEncoding(N + 1, emb_size, patch_size): the base n is not the default",
            "Two arguments: getPositionEncoding(seq_len=N + 1, d=emb_size); the third, n, keeps its default 10000.",
            _embedding(positions="sinusoidal", table="base_patch"), _NEEDS_PE),
    Mistake("positions_from_one", "positions counted from 1: rows 1 to N + 1 of the table",
            "Token k gets row k of getPositionEncoding(N + 1, emb_size), the class token row 0.",
            _embedding(positions="sinusoidal", table="from_one"), _NEEDS_PE),
    # the class token's mistakes (Q3) and the projection's (Q2), seen through the final class
    *(Mistake(m.key, m.title, m.hint, _q3(cls_mode, "sinusoidal"), _NEEDS_PE)
      for m, cls_mode in zip(Q3_MISTAKES[:3], ("not_repeated", "at_end", "added"))),
    Mistake("cls_cat_wrong_dim", Q3_MISTAKES[3].title, Q3_MISTAKES[3].hint,
            _embedding(cls="cat_wrong_dim", positions="sinusoidal"), _NEEDS_PE),
    *_projection_mistakes(("sinusoidal",)),
]

add('q4', references=_tokens_references("sinusoidal"),
    # (n = 10000 is the right table; rows from position 1: positions_from_one above; with n = 10000 an
    # exponent 2i/(2d) is the table of n = 100, named so)
    catalogue=[*Q4_MISTAKES, patch_order(),
               *table_mistakes("positions", ("(n = 10000)", "(rows start at position 1)", "(2i/(2d) in the exponent)")),
               FRESH_CLASS_TOKEN, *PROPERTIES, GRADIENT_DIFFERS, *tokens("tokens", True), *RECIPE_SAYS],
    reference_parts=parts(getPositionEncoding=_pe_part))


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
                if callable(flatten):
                    return flatten(grid)
                return rearrange(grid, flatten)
        return ConvPatchEmbedding
    return build


def _reshape_no_permute(grid):
    return grid.reshape(grid.shape[0], -1, grid.shape[1])


class _SwappedConv(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(emb_size, in_channels, kernel_size=patch_size, stride=patch_size)

    def forward(self, images):
        return rearrange(self.proj(images), "b e h w -> b (h w) e")


class _ConvNoBias(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size, bias=False)

    def forward(self, images):
        return rearrange(self.proj(images), "b e h w -> b (h w) e")


CONV_MISTAKES = [
    Mistake("stride_one", "stride 1: overlapping patches",
            "Non-overlapping patches need stride = kernel_size = patch_size.", _conv(stride=1)),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Flatten the grid row by row: 'b e h w -> b (h w) e'.", _conv(flatten="b e h w -> b (w h) e")),
    Mistake("channels_not_last", "(B, emb_size, N): the embedding axis is not last",
            "Conv2d gives (B, E, H/P, W/P); flatten the grid and move E last: 'b e h w -> b (h w) e'.",
            _conv(flatten=None)),
    Mistake("reshape_no_permute", "the grid reshaped to (B, N, emb_size) without moving the embedding axis",
            "reshape keeps the memory order (B, emb_size, h, w), so a 'token' mixes channels of several patches: "
            "flatten then transpose (x.flatten(2).transpose(1, 2)) or rearrange 'b e h w -> b (h w) e'.",
            _conv(flatten=_reshape_no_permute)),
    Mistake("no_bias", "Conv2d without bias (bias=False)",
            "Keep the convolution's bias (the default).", lambda parts: _ConvNoBias),
    Mistake("conv_channels_swapped", "nn.Conv2d(emb_size, in_channels, ...): channel arguments swapped",
            "nn.Conv2d(in_channels, out_channels, ...): from in_channels to emb_size.",
            lambda parts: _SwappedConv),
]

add('conv_patch_embedding', references=lambda: [vitref.ConvPatchEmbedding],
    catalogue=[*CONV_MISTAKES, *PROPERTIES, GRADIENT_DIFFERS, *tokens("patch_embeddings", False), *RECIPE_SAYS])
