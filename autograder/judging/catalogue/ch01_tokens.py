"""The references and the catalogue of known mistakes of ch01_tokens (grader side)."""
from __future__ import annotations


import torch.nn.functional as F
from einops import rearrange

import vitref

from ..model import Mistake
from ._entry import add
from ._changes import patch_order
from ._common import function_answer
from ._symptoms import FLOAT64_RAISES, INTEGER_TIMES_FLOAT, PROPERTIES, RECIPE_SAYS


def _pattern(pattern, sized=("s1", "s2")):
    """image_to_patches as one einops ``pattern`` whose axes ``sized`` get the patch size (("h", "w"):
    the grid sizes given where the patch sizes belong)."""
    def build(parts):
        def image_to_patches(images, patch_size):
            return rearrange(images, pattern, **{axis: patch_size for axis in sized})
        return image_to_patches
    return build


def _channels_last_reshape(parts):
    def image_to_patches(images, patch_size):
        b, c, h, w = images.shape
        return images.permute(0, 2, 3, 1).reshape(b, (h // patch_size) * (w // patch_size), -1)
    return image_to_patches


def _reshape_only(parts):
    def image_to_patches(images, patch_size):
        b, c, h, w = images.shape
        return images.reshape(b, (h // patch_size) * (w // patch_size), -1)
    return image_to_patches


def _unfold_no_permute(parts):
    def image_to_patches(images, patch_size):
        b, c, h, w = images.shape
        grid = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)  # (B, C, h, w, P, P)
        return grid.reshape(b, (h // patch_size) * (w // patch_size), -1)
    return image_to_patches


PATCH_MISTAKES = [
    Mistake("channels_first", "channels first inside each patch, (c s1 s2)",
            "Flatten each patch as (s1 s2 c): pixels row by row, the C values of a pixel side by side "
            "(pattern 'b c (h s1) (w s2) -> b (h w) (s1 s2 c)').",
            _pattern("b c (h s1) (w s2) -> b (h w) (c s1 s2)")),
    Mistake("transposed_patch", "pixels inside a patch taken column by column, (s2 s1 c)",
            "Inside a patch go row by row: s1 (the row) before s2 (the column).",
            _pattern("b c (h s1) (w s2) -> b (h w) (s2 s1 c)")),
    Mistake("column_order", "patches numbered column by column, (w h)",
            "Number the patches row by row, like reading text: (h w), not (w h).",
            _pattern("b c (h s1) (w s2) -> b (w h) (s1 s2 c)")),
    Mistake("interleaved", "strided pixels instead of contiguous blocks, (s1 h) (s2 w)",
            "A patch is a block of neighbouring pixels: split H as (h s1), the patch index first.",
            _pattern("b c (s1 h) (s2 w) -> b (h w) (s1 s2 c)")),
    Mistake("unfold_no_permute", "unfold, then reshape without moving the channel axis",
            "After unfold the tensor is (B, C, h, w, P, P): permute to (B, h, w, P, P, C) before reshaping "
            "to (B, N, P*P*C).", _unfold_no_permute),
    Mistake("reshape_only", "a plain reshape without moving the axes",
            "reshape(B, N, -1) keeps the memory order (c, H, W), so a 'patch' mixes whole image rows; "
            "move the axes first (einops rearrange or permute).",
            _reshape_only),
    Mistake("channels_last_reshape", "channels moved last, then a plain reshape",
            "permute(0, 2, 3, 1) gives (B, H, W, C), but reshaping that to (B, N, P*P*C) takes P*P "
            "consecutive pixels of one image row, not a P x P block: split H and W into (h, P) and (w, P) "
            "first (pattern 'b c (h s1) (w s2) -> b (h w) (s1 s2 c)').", _channels_last_reshape),
    Mistake("grid_not_flattened", "the patch grid not flattened, (B, h, w, P*P*C)",
            "Number the patches in one axis: 'b (h w) (s1 s2 c)', not 'b h w (s1 s2 c)'.",
            _pattern("b c (h s1) (w s2) -> b h w (s1 s2 c)")),
    Mistake("patch_not_flattened", "each patch kept as (P, P, C) instead of one vector",
            "Flatten each patch into one vector of P*P*C numbers: '(s1 s2 c)' in parentheses.",
            _pattern("b c (h s1) (w s2) -> b (h w) s1 s2 c")),
    Mistake("grid_as_patch_size", "patch_size given as the number of patches (h=P, w=P)",
            "patch_size is the side of a patch: pass s1=patch_size, s2=patch_size to rearrange; h and w "
            "(the number of patches per column and row) follow from the image size.",
            _pattern("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", sized=("h", "w"))),
]

add('patches', references=lambda: [vitref.image_to_patches],
    catalogue=[*PATCH_MISTAKES, patch_order(), INTEGER_TIMES_FLOAT, FLOAT64_RAISES, *PROPERTIES, *RECIPE_SAYS])


def _embed_variant(fn):
    """An ``embed(token_ids, weight)`` that returns ``fn(token_ids, weight)``."""
    return function_answer("embed", fn)


EMBED_MISTAKES = [
    Mistake("one_hot_classes", "one_hot without num_classes",
            "F.one_hot(ids) makes only max(ids)+1 columns; pass num_classes=V (weight.shape[0]) so the "
            "one-hot rows match the V rows of W.",
            _embed_variant(lambda ids, w: F.one_hot(ids).to(w.dtype) @ w)),
    Mistake("off_by_one", "token ids shifted by one",
            "Token id t selects row t of W (rows count from 0).",
            _embed_variant(lambda ids, w: w[ids - 1]),
            also=(_embed_variant(lambda ids, w: F.one_hot(ids - 1, w.shape[0]).to(w.dtype) @ w),)),
    Mistake("transposed_weight", "one-hot times W transposed",
            "W is (V, D): one_hot (..., V) @ W gives (..., D); do not transpose W.",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype) @ w.T)),
    Mistake("returns_one_hot", "returned the one-hot matrix",
            "The one-hot matrix (..., V) is only the selector: multiply it by W to get (..., D).",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype))),
    Mistake("summed_tokens", "embeddings summed over the tokens",
            "Keep one embedding per token: the result has the shape of token_ids plus D.",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype).sum(-2) @ w)),
    Mistake("num_classes_d", "one-hot of length D (weight.shape[1]) instead of V",
            "The one-hot vectors have one entry per token of the vocabulary: num_classes = weight.shape[0] (V).",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[1]).to(w.dtype) @ w)),
]

add('embedding_lookup', references=lambda: [vitref.one_hot_embedding],
    catalogue=[*EMBED_MISTAKES, INTEGER_TIMES_FLOAT, FLOAT64_RAISES, *PROPERTIES, *RECIPE_SAYS])
