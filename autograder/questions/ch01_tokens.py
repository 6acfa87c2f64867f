"""Chapter 1, tokens: image -> patches, and embedding lookup as one-hot x W.

Skeletons (as the notebooks show them)::

    def image_to_patches(images, patch_size):
        # images (B, C, H, W) -> patches (B, N, P*P*C), N = (H/P)(W/P):
        # patches row by row; inside a patch, pixels row by row, channels last (s1 s2 c)
        ...

    def embed(token_ids, weight):
        # token_ids (...) integers in [0, V), weight (V, D) -> (..., D)
        # one-hot rows (..., V) times the weight matrix (V, D), in the dtype of weight
        # (indexing weight[token_ids] selects the same rows and is accepted too)
        ...
"""
from __future__ import annotations


from . import inputs as I
from .base import Case, Question, register

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
    Case("float64 images (2, 3, 4, 10), patch_size 2 (the patches must stay float64)",
         {"shape": (2, 3, 4, 10), "patch_size": 2, "seed": 15, "dtype": "float64"},
         {2: "B", 10: "N", 12: "P*P*C"}),
]


def _run_patches(answer, case, rec):
    p = case.params
    images = rec.tensor(I.randn(p["shape"], p["seed"]), dtype=p.get("dtype"))   # (B, C, H, W)
    rec.output("patches", rec.call(answer, images, p["patch_size"]))

register(Question(id="patches", chapter="01_tokens", title="Image to patches", points=2,
                  answer_name="image_to_patches", kind="function", cases=PATCH_CASES, run_case=_run_patches,
                  outputs={"patches": "(B, N, P*P*C)"}))

# --------------------------------------------------------------------------- embedding lookup

EMBED_CASES = [
    Case("token_ids (2, 5) from a vocabulary of 7, weight (7, 4)",
         {"ids": (2, 5), "vocab": 7, "dim": 4, "seed": 21, "high": 5}, {2: "B", 5: "T", 7: "V", 4: "D"}),
    Case("token_ids (6,) from a vocabulary of 9, weight (9, 3)",
         {"ids": (6,), "vocab": 9, "dim": 3, "seed": 22, "high": 9}, {6: "T", 9: "V", 3: "D"}),
    Case("token_ids (1, 3) from a vocabulary of 5, weight (5, 6)",
         {"ids": (1, 3), "vocab": 5, "dim": 6, "seed": 23, "high": 5}, {1: "B", 3: "T", 5: "V", 6: "D"}),
    Case("token_ids (2, 3, 4) from a vocabulary of 6, float64 weight (6, 5) (the result must stay float64)",
         {"ids": (2, 3, 4), "vocab": 6, "dim": 5, "seed": 24, "high": 6, "dtype": "float64"},
         {2: "B", 3: "T1", 4: "T2", 6: "V", 5: "D"}),
]


def _run_embed(answer, case, rec):
    p = case.params
    ids = I.randint(p["ids"], p["high"], p["seed"])
    if p["high"] == p["vocab"]:
        ids.reshape(-1)[-1] = p["vocab"] - 1          # the last token of the vocabulary appears
    token_ids = rec.tensor(ids)                        # (...) int64
    weight = rec.tensor(I.randn((p["vocab"], p["dim"]), p["seed"]), dtype=p.get("dtype"))   # (V, D)
    rec.output("embeddings", rec.call(answer, token_ids, weight))

register(Question(id="embedding_lookup", chapter="01_tokens", title="Embedding lookup as one-hot x W", points=1,
                  answer_name="embed", kind="function", cases=EMBED_CASES, run_case=_run_embed,
                  forbidden=("embedding",), outputs={"embeddings": "(..., D)"}))
