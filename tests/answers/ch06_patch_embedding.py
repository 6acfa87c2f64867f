"""Answer banks of Chapter 6 (patch embedding): q2, q3, q4, conv_patch_embedding.

Variants, realistic right answers and realistic wrong answers, each with how the check must
name it (the schema: tests/answers/bank.py; the test: tests/test_answer_banks.py). Written by
hand as students write them, not with the catalogue's builders; the building blocks they use are the
course's solutions (each question's @solution) or the code the notebooks give (given.py).
"""

import numpy as np
import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn

from .bank import right, says, solution, solution_value, variant, wrong, wrong_rows
from .ch02_positional_encoding import getPositionEncoding as chapter2_getPositionEncoding
from .ch02_positional_encoding import pe_torch
from .ch05_blocks import getPositionEncoding


# ###################################################################################################
# the solutions, as the answer cells of the solutions notebook write them
# (tests/test_answer_banks.py::test_each_solution_is_the_notebooks_answer holds them equal)
@solution("q2")
class PatchEmbedding(nn.Module):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__()
        self.patch_size = patch_size
        # Q2. Break the image into s1 x s2 patches and flatten them, then project to emb_size:
        # fill in output_axes (a string), in_features and out_features.
        ### BEGIN SOLUTION
        output_axes = "b (h w) (s1 s2 c)"
        in_features, out_features = patch_size * patch_size * in_channels, emb_size
        ### END SOLUTION
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> " + output_axes, s1=patch_size, s2=patch_size),
            nn.Linear(in_features, out_features),
        )

    def forward(self, x):
        return self.projection(x)  # (B, N, emb_size)


PatchEmbeddingQ2 = PatchEmbedding  # the next step builds on this version


@solution("q3")
class PatchEmbedding(PatchEmbeddingQ2):   # extends your Q2 class
    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__(in_channels, patch_size, emb_size)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))

    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)                                 # (B, N, emb_size)
        # Q3. Fill in pattern (a string): repeat the class token once per image of the batch.
        ### BEGIN SOLUTION
        pattern = "() n e -> b n e"
        ### END SOLUTION
        cls_tokens = repeat(self.cls_token, pattern, b=b)      # (B, 1, emb_size)
        x = torch.cat([cls_tokens, x], dim=1)                  # (B, N + 1, emb_size)
        return x


PatchEmbeddingQ3 = PatchEmbedding  # the next step builds on this version


@solution("q4")
class PatchEmbedding(PatchEmbeddingQ3):   # extends your Q3 class
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size)
        num_patches = (img_size // patch_size) ** 2
        self.learnable_positions = nn.Parameter(torch.randn(num_patches + 1, emb_size))
        # Q4. Define the positional embedding with getPositionEncoding.
        ### BEGIN SOLUTION
        table = getPositionEncoding(seq_len=num_patches + 1, d=emb_size)
        ### END SOLUTION
        self.register_buffer("sinusoids_positions", torch.from_numpy(table).float())  # (N + 1, emb_size)

    def forward(self, x):
        x = super().forward(x)                                 # (B, N + 1, emb_size)
        return x + self.sinusoids_positions


@solution("conv_patch_embedding")
class ConvPatchEmbedding(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        ### BEGIN SOLUTION
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)
        ### END SOLUTION

    def forward(self, images):
        # images (B, C, H, W) -> tokens (B, N, emb_size)
        ### BEGIN SOLUTION
        grid = self.proj(images)                        # (B, emb_size, H/P, W/P)
        return rearrange(grid, "b e h w -> b (h w) e")  # (B, N, emb_size)
        ### END SOLUTION


position_rows = solution_value("concept_position_rows", 197)


# ####################################################################################################
# variants: other correct formulations
# ----------------------------------------------------------------- q2, q3, q4
@variant("q2")
@variant("q3")
class PatchEmbeddingClsExpand(nn.Module):
    """The earlier notebook version: no img_size, no positions; expand instead of repeat."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


@variant("q2")
@variant("q3")
@variant("q4")
class PatchEmbeddingBuffer(nn.Module):
    """Positions as a registered buffer computed with torch, class token via einops.repeat."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.register_buffer("positions", pe_torch((img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=x.shape[0])
        return torch.cat([cls_tokens, x], dim=1) + self.positions


@variant("q3")
class PatchEmbeddingLearned(PatchEmbedding):
    """Q3 only checks the class token: learned positions are fine there."""

    def forward(self, x):
        x = self.projection(x)
        x = torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)
        return x + self.learnable_positions


# ----------------------------------------------------------------- conv
@variant("conv_patch_embedding")
class ConvFlatten(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, emb_size, patch_size, stride=patch_size)

    def forward(self, x):
        return self.conv(x).flatten(2).transpose(1, 2)


@variant("q3")
class PatchEmbeddingBatchedPositions(nn.Module):
    """Learned positions kept as (1, N+1, E) and a (1, 1, E) class token expanded."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.projection = nn.Sequential(
            Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
            nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, emb_size))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (img_size // patch_size) ** 2 + 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1) + self.pos_embedding


# ####################################################################################################
# realistic answers
# =========================================================================== q2, q3, q4 PatchEmbedding
class _Embed(nn.Module):
    """The notebook's PatchEmbedding (the final version takes img_size)."""

    pattern = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"
    bias = True
    features = "ppc"

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.patch_size = patch_size
        if self.features == "swapped":                  # nn.Linear(emb_size, P*P*C)
            linear = nn.Linear(emb_size, patch_size * patch_size * in_channels)
        else:                                           # "pp": nn.Linear(P*P, emb_size)
            features = patch_size * patch_size * (in_channels if self.features == "ppc" else 1)
            linear = nn.Linear(features, emb_size, bias=self.bias)
        self.projection = nn.Sequential(Rearrange(self.pattern, s1=patch_size, s2=patch_size), linear)
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        num_patches = (img_size // patch_size) ** 2
        self.learnable_positions = nn.Parameter(torch.randn(num_patches + 1, emb_size))
        self.register_buffer("sinusoids_positions", self.table(num_patches, emb_size, patch_size))

    def table(self, num_patches, emb_size, patch_size):
        return torch.from_numpy(getPositionEncoding(num_patches + 1, emb_size)).float()

    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token, "() n e -> b n e", b=b)
        x = torch.cat([cls_tokens, x], dim=1)
        return self.add_positions(x)

    def add_positions(self, x):
        return x + self.sinusoids_positions


def _embed(**attrs):
    return type("PatchEmbedding", (_Embed,), attrs)


class _Projection(nn.Module):
    def __init__(self, fn, in_features, emb_size):
        super().__init__()
        self.fn, self.linear = fn, nn.Linear(in_features, emb_size)

    def forward(self, images):
        return self.linear(self.fn(images))


def _patches_unfold(images, p):
    b = images.shape[0]
    patches = images.unfold(2, p, p).unfold(3, p, p)                       # (B, C, h, w, P, P)
    return patches.permute(0, 2, 3, 4, 5, 1).reshape(b, -1, patches.shape[1] * p * p)


def _patches_reshape(images, p):
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // p, p, w // p, p)                       # (B, C, h, P, w, P)
    return grid.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


@right("q2", "q3", "q4")
class EmbedUnfold(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = _Projection(lambda x: _patches_unfold(x, patch_size),
                                      patch_size * patch_size * in_channels, emb_size)


@right("q2", "q3", "q4")
class EmbedReshape(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = _Projection(lambda x: _patches_reshape(x, patch_size),
                                      patch_size * patch_size * in_channels, emb_size)


right("q2", "q3", "q4")(_embed(pattern="batch chan (rows s1) (cols s2) -> batch (rows cols) (s1 s2 chan)"))


@right("q3")
class EmbedExpand(nn.Module):
    """The Q3 notebook class (no img_size, no positions); the class token expanded."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__()
        self.projection = nn.Sequential(Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size,
                                                  s2=patch_size),
                                        nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), 1)


@right("q3")
class EmbedRepeatMethod(EmbedExpand):
    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.repeat(x.size(0), 1, 1), x], dim=1)


@right("q3")
class EmbedFlatClsToken(EmbedExpand):
    """A class token stored as (emb_size,)."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768):
        super().__init__(in_channels, patch_size, emb_size)
        self.cls_token = nn.Parameter(torch.randn(emb_size))

    def forward(self, x):
        x = self.projection(x)
        return torch.cat([self.cls_token.expand(x.shape[0], 1, -1), x], dim=1)


@right("q4")
class EmbedPlainAttribute(_Embed):
    """The table kept as a plain float32 attribute (as the slides do) and added in place."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        del self.sinusoids_positions
        self.sinusoids_positions = torch.from_numpy(getPositionEncoding((img_size // patch_size) ** 2 + 1,
                                                                        emb_size)).float()

    def add_positions(self, x):
        x += self.sinusoids_positions
        return x


@right("q4")
class EmbedBatchedTable(_Embed):
    def table(self, num_patches, emb_size, patch_size):
        return torch.tensor(getPositionEncoding(seq_len=num_patches + 1, d=emb_size),
                            dtype=torch.float32).unsqueeze(0)      # (1, N + 1, E)


wrong_rows([
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (h w) (c s1 s2)"), "channels_first"),
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (h w) (s2 s1 c)"), "transposed_patch"),
    ("q2", _embed(pattern="b c (h s2) (w s1) -> b (h w) (s1 s2 c)"), "transposed_patch"),
    ("q2", _embed(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)"), "column_order"),
    ("q2", _embed(pattern="b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)"), "interleaved"),
    ("q2", _embed(features="pp"), "in_features_without_channels"),
    ("q2", _embed(features="swapped"), "linear_swapped"),
    ("q2", _embed(bias=False), "no_bias"),
    ("q3", _embed(pattern="b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)"), "interleaved"),
    ("q4", _embed(pattern="b c (h s1) (w s2) -> b (w h) (s1 s2 c)"), "column_order"),
])


@wrong("q2", "channels_first")
class EmbedNnUnfold(_Embed):
    """nn.Unfold flattens a patch channel-major, (c s1 s2)."""

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection = nn.Sequential(nn.Unfold(kernel_size=patch_size, stride=patch_size),
                                        Rearrange("b f n -> b n f"),
                                        nn.Linear(patch_size * patch_size * in_channels, emb_size))


@wrong("q2", "reshape_only")
class EmbedReshapeOnly(_Embed):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        p = patch_size
        self.projection = _Projection(lambda x: x.reshape(x.shape[0], (x.shape[2] // p) * (x.shape[3] // p), -1),
                                      p * p * in_channels, emb_size)


class _Q3(EmbedExpand):
    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        return self.join(self.cls_token, x, b)


def _q3(join):
    return type("PatchEmbedding", (_Q3,), {"join": staticmethod(join)})


wrong_rows([
    ("q3", _q3(lambda cls, x, b: torch.cat([cls, x], dim=1)), "cls_not_repeated"),
    ("q3", _q3(lambda cls, x, b: torch.cat([x, repeat(cls, "() n e -> b n e", b=b)], dim=1)), "cls_at_end"),
    ("q3", _q3(lambda cls, x, b: x + repeat(cls, "() n e -> b n e", b=b)), "cls_added"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls, "() n e -> n b e", b=b), x], dim=1)), "cls_not_repeated"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls, "() n e -> b n e", b=b), x], dim=-1)),
     "cls_cat_wrong_dim"),
    ("q3", _q3(lambda cls, x, b: torch.cat([repeat(cls.detach(), "() n e -> b n e", b=b), x], dim=1)),
     says("gradient of the parameter cls_token")),
    ("q3", _q3(lambda cls, x, b: torch.cat([torch.zeros(b, 1, x.shape[-1], dtype=x.dtype), x], dim=1)),
     ("class_token_not_parameter", says("no gradient reaches self.cls_token"))),
])


def _q4(add=None, table=None):
    attrs = {}
    if add is not None:
        attrs["add_positions"] = add
    if table is not None:
        attrs["table"] = table
    return _embed(**attrs)


def _before_cls_forward(self, x):
    x = self.projection(x) + self.sinusoids_positions
    return torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)


def _cls_without_position(self, x):
    return torch.cat([x[:, :1], x[:, 1:] + self.sinusoids_positions[1:]], dim=1)


wrong_rows([
    ("q4", _q4(add=lambda self, x: x + self.learnable_positions), "learned_positions"),
    ("q4", _q4(add=lambda self, x: x), "no_positions"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n, e)).float()),
     "seq_len_num_patches"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(e, n + 1)).float()),
     "swapped_arguments"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(e, n + 1)).float().T),
     "swapped_arguments"),
    # with chapter 2's own loop version (an odd width leaves the last column 0), the transposed table fits
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(chapter2_getPositionEncoding(e, n + 1)).float().T),
     says("the table of positions")),
    ("q4", _q4(add=lambda self, x: x + self.learnable_positions + self.sinusoids_positions), "both_positions"),
    ("q4", _q4(add=_cls_without_position), "cls_without_position"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n + 1, e, p)).float()),
     "base_not_default"),
    ("q4", _q4(table=lambda self, n, e, p: torch.from_numpy(getPositionEncoding(n + 2, e)[1:]).float()),
     "positions_from_one"),
    ("q4", type("PatchEmbedding", (_Embed,), {"forward": _before_cls_forward,
                                              "table": lambda self, n, e, p: torch.from_numpy(
                                                  getPositionEncoding(n, e)).float()}), "positions_before_cls"),
    ("q4", type("PatchEmbedding", (_Embed,), {"forward": lambda self, x: self.add_positions(torch.cat(
        [self.projection(x), repeat(self.cls_token, "() n e -> b n e", b=x.shape[0])], dim=1))}), "cls_at_end"),
])


# =========================================================================== conv_patch_embedding
class _Conv(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, emb_size, kernel_size=patch_size, stride=patch_size)


@right("conv_patch_embedding")
class ConvPermute(_Conv):
    def forward(self, images):
        grid = self.proj(images)
        b, e, h, w = grid.shape
        return grid.permute(0, 2, 3, 1).reshape(b, h * w, e)


@right("conv_patch_embedding")
class ConvView(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.patcher = nn.Conv2d(in_channels, emb_size, patch_size, patch_size)

    def forward(self, images):
        out = self.patcher(images)
        return out.view(out.shape[0], out.shape[1], -1).permute(0, 2, 1)


@right("conv_patch_embedding")
class ConvSequential(nn.Module):
    def __init__(self, in_channels, patch_size, emb_size):
        super().__init__()
        self.embed = nn.Sequential(nn.Conv2d(in_channels, emb_size, patch_size, stride=patch_size),
                                   Rearrange("b e gh gw -> b (gh gw) e"))

    def forward(self, images):
        return self.embed(images)


def _conv(flatten, **conv):
    class ConvPatchEmbedding(nn.Module):
        def __init__(self, in_channels, patch_size, emb_size):
            super().__init__()
            options = {"kernel_size": patch_size, "stride": patch_size, **conv}
            if options.pop("swap", False):
                in_channels, emb_size = emb_size, in_channels
            if options.get("stride") == "default":
                del options["stride"]
            self.proj = nn.Conv2d(in_channels, emb_size, **options)

        def forward(self, images):
            return flatten(self.proj(images))
    return ConvPatchEmbedding


def _rows(grid):
    return rearrange(grid, "b e h w -> b (h w) e")


wrong_rows([
    ("conv_patch_embedding", _conv(_rows, stride="default"), "stride_one"),
    ("conv_patch_embedding", _conv(lambda g: rearrange(g, "b e h w -> b (w h) e")), "column_order"),
    ("conv_patch_embedding", _conv(lambda g: rearrange(g, "b e w h -> b (h w) e")), "column_order"),
    ("conv_patch_embedding", _conv(lambda g: g.flatten(2)), "channels_not_last"),
    ("conv_patch_embedding", _conv(lambda g: g.reshape(g.shape[0], -1, g.shape[1])), "reshape_no_permute"),
    ("conv_patch_embedding", _conv(_rows, bias=False),
     ("no_bias", says("proj (nn.Conv2d) has a weight but no bias"))),
    ("conv_patch_embedding", _conv(_rows, swap=True), "conv_channels_swapped"),
    ("conv_patch_embedding", _conv(lambda g: _rows(g).detach()), says("does not depend differentiably")),
    ("conv_patch_embedding", _conv(lambda g: _rows(g).float()), says("float32's precision only")),
])


# ####################################################################################################
# classes of the instructor's hidden collection: patches flattened channel-interleaved (the counterfactual
# "patch_order"), a fresh random class token per call, and a table of positions with another base / width
# / length or sines only (the counterfactual tables of q4)
class _Embedding(nn.Module):
    """The final notebook's class; ``pattern`` and ``table`` are what the subclasses get wrong."""

    pattern = "b c (h s1) (w s2) -> b (h w) (s1 s2 c)"

    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__()
        self.projection = nn.Sequential(Rearrange(self.pattern, s1=patch_size, s2=patch_size),
                                        nn.Linear(patch_size * patch_size * in_channels, emb_size))
        self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size))
        self.sinusoids_positions = torch.from_numpy(self.table((img_size // patch_size) ** 2 + 1, emb_size)).float()

    def table(self, num_tokens, emb_size):
        return getPositionEncoding(num_tokens, emb_size)

    def forward(self, x):
        x = self.projection(x)
        x = torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)
        return x + self.sinusoids_positions


@wrong("q2", ("patch_order", says("(s1 c s2)")))
class EmbeddingChannelsBetweenRows(_Embedding):
    pattern = "b c (h s1) (w s2) -> b (h w) (s1 c s2)"


@wrong("q3", ("patch_order", says("(s2 c s1)")))
class EmbeddingChannelsInterleavedColumns(_Embedding):
    pattern = "b c (h s1) (w s2) -> b (h w) (s2 c s1)"


@wrong("q4", ("patch_order", says("(c s2 s1)")))
class EmbeddingChannelsFirstColumns(_Embedding):
    pattern = "b c (h s1) (w s2) -> b (h w) (c s2 s1)"


@wrong("q3", ("class_token_not_parameter", says("self.cls_token")))
class EmbeddingFreshClassToken(_Embedding):
    def forward(self, x):
        x = self.projection(x)
        cls_token = torch.randn(1, 1, x.shape[-1], dtype=x.dtype)          # a new token at every call
        x = torch.cat([cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.sinusoids_positions


@wrong("q4", ("class_token_not_parameter", says("self.cls_token")))
class EmbeddingClassTokenParameterInForward(_Embedding):
    def forward(self, x):
        x = self.projection(x)
        cls = nn.Parameter(torch.randn(x.shape[0], 1, x.shape[-1], dtype=x.dtype))
        return torch.cat([cls, x], dim=1) + self.sinusoids_positions


@wrong("q4", ("table_other_base", says("n = 100)")))
class EmbeddingSlidesBase(_Embedding):
    def table(self, num_tokens, emb_size):
        return getPositionEncoding(num_tokens, emb_size, 100)               # the slides' example table


@wrong("q4", ("table_sines_only", says("sines only")))
class EmbeddingSinesOnly(_Embedding):
    def table(self, num_tokens, emb_size):
        k = np.arange(num_tokens)[:, None]
        angles = k / np.power(10000, np.arange(0, emb_size, 2) / emb_size)
        return np.repeat(np.sin(angles), 2, axis=1)


@wrong("q4", ("table_other_width", says("2i/seq_len")))
class EmbeddingExponentOverTokens(_Embedding):
    def table(self, num_tokens, emb_size):
        P = np.zeros((num_tokens, emb_size))
        for k in range(num_tokens):
            for i in range(emb_size // 2):
                denominator = np.power(10000, 2 * i / num_tokens)
                P[k, 2 * i], P[k, 2 * i + 1] = np.sin(k / denominator), np.cos(k / denominator)
        return P


@wrong("q4", ("table_positions_shifted", says("position 2")))
class EmbeddingTableOffsetTwo(_Embedding):
    def table(self, num_tokens, emb_size):
        return getPositionEncoding(num_tokens + 2, emb_size)[2:]
