"""Chapter 1, tokens: image -> patches, and embedding lookup as one-hot x W.

Skeletons (``Question.skeleton``)::

    def image_to_patches(images, patch_size):
        # images (B, C, H, W) -> patches (B, N, P*P*C), N = (H/P)(W/P):
        # patches row by row; inside a patch, pixels row by row, channels last (s1 s2 c)
        ...

    def embed(token_ids, weight):
        # token_ids (...) integers in [0, V), weight (V, D) -> (..., D)
        # one-hot rows (..., V) times the weight matrix (V, D)
        ...
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .. import inputs as I
from ..core import Case, Mistake, Question, register
from ._common import vitref

# --------------------------------------------------------------------------- patches

PATCH_CASES = [
    Case("images (1, 3, 8, 12), patch_size 4", {"shape": (1, 3, 8, 12), "patch_size": 4, "seed": 11},
         {1: "B", 6: "N", 48: "P*P*C"}),
    Case("images (2, 3, 12, 12), patch_size 3", {"shape": (2, 3, 12, 12), "patch_size": 3, "seed": 12},
         {2: "B", 16: "N", 27: "P*P*C"}),
    Case("images (3, 1, 4, 6), patch_size 2", {"shape": (3, 1, 4, 6), "patch_size": 2, "seed": 13},
         {3: "B", 6: "N", 4: "P*P*C"}),
    Case("images (2, 2, 6, 4), patch_size 2", {"shape": (2, 2, 6, 4), "patch_size": 2, "seed": 14},
         {2: "B", 6: "N", 8: "P*P*C"}),
]


def _run_patches(answer, case, rec):
    p = case.params
    images = rec.tensor(I.randn(p["shape"], p["seed"]))          # (B, C, H, W)
    rec.output("patches", rec.call(answer, images, p["patch_size"]))


def _pattern(pattern):
    def build(parts):
        def image_to_patches(images, patch_size):
            return rearrange(images, pattern, s1=patch_size, s2=patch_size)
        return image_to_patches
    return build


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
]

register(Question(
    id="patches", chapter="01_tokens", title="Image to patches", points=2, answer_name="image_to_patches",
    kind="function", signature="image_to_patches(images, patch_size) -> (B, N, P*P*C)",
    cases=PATCH_CASES, run_case=_run_patches, references=lambda: [vitref().image_to_patches],
    catalogue=PATCH_MISTAKES, outputs={"patches": "(B, N, P*P*C)"},
    skeleton='''def image_to_patches(images, patch_size):
    """images (B, C, H, W) -> patches (B, N, P*P*C) with N = (H/P) * (W/P)."""
    # Patches row by row; inside a patch, pixels row by row with the channels last: (s1 s2 c).
    patches = ...  # hint: einops.rearrange(images, 'b c (h s1) (w s2) -> ...', s1=..., s2=...)
    return patches
''',
))

# --------------------------------------------------------------------------- embedding lookup

EMBED_CASES = [
    Case("token_ids (2, 5) from a vocabulary of 7, weight (7, 4)",
         {"ids": (2, 5), "vocab": 7, "dim": 4, "seed": 21, "high": 5}, {2: "B", 5: "T", 7: "V", 4: "D"}),
    Case("token_ids (6,) from a vocabulary of 9, weight (9, 3)",
         {"ids": (6,), "vocab": 9, "dim": 3, "seed": 22, "high": 9}, {6: "T", 9: "V", 3: "D"}),
    Case("token_ids (1, 3) from a vocabulary of 5, weight (5, 6)",
         {"ids": (1, 3), "vocab": 5, "dim": 6, "seed": 23, "high": 5}, {1: "B", 3: "T", 5: "V", 6: "D"}),
]


def _run_embed(answer, case, rec):
    p = case.params
    ids = I.randint(p["ids"], p["high"], p["seed"])
    if p["high"] == p["vocab"]:
        ids.reshape(-1)[-1] = p["vocab"] - 1          # the last token of the vocabulary appears
    token_ids = rec.tensor(ids)                        # (...) int64
    weight = rec.tensor(I.randn((p["vocab"], p["dim"]), p["seed"]))   # (V, D)
    rec.output("embeddings", rec.call(answer, token_ids, weight))


def _embed_variant(fn):
    def build(parts):
        def embed(token_ids, weight):
            return fn(token_ids, weight)
        return embed
    return build


EMBED_MISTAKES = [
    Mistake("one_hot_classes", "one_hot without num_classes",
            "F.one_hot(ids) makes only max(ids)+1 columns; pass num_classes=V (weight.shape[0]) so the "
            "one-hot rows match the V rows of W.",
            _embed_variant(lambda ids, w: F.one_hot(ids).to(w.dtype) @ w)),
    Mistake("off_by_one", "token ids shifted by one",
            "Token id t selects row t of W (rows count from 0).",
            _embed_variant(lambda ids, w: w[ids - 1])),
    Mistake("transposed_weight", "one-hot times W transposed",
            "W is (V, D): one_hot (..., V) @ W gives (..., D); do not transpose W.",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype) @ w.T)),
    Mistake("returns_one_hot", "returned the one-hot matrix",
            "The one-hot matrix (..., V) is only the selector: multiply it by W to get (..., D).",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype))),
    Mistake("summed_tokens", "embeddings summed over the tokens",
            "Keep one embedding per token: the result has the shape of token_ids plus D.",
            _embed_variant(lambda ids, w: F.one_hot(ids, w.shape[0]).to(w.dtype).sum(-2) @ w)),
]

register(Question(
    id="embedding_lookup", chapter="01_tokens", title="Embedding lookup as one-hot x W", points=1,
    answer_name="embed", kind="function", signature="embed(token_ids, weight) -> (..., D)",
    cases=EMBED_CASES, run_case=_run_embed, references=lambda: [vitref().one_hot_embedding],
    catalogue=EMBED_MISTAKES, forbidden=("embedding",), outputs={"embeddings": "(..., D)"},
    skeleton='''def embed(token_ids, weight):
    """token_ids (...) integers in [0, V), weight (V, D) -> embeddings (..., D)."""
    vocab_size = weight.shape[0]
    one_hot = ...   # (..., V), in the dtype of weight
    return ...      # (..., D)
''',
))
