"""One module per chapter; importing this package registers every question.

Each module keeps, next to its checks, the question's cases (fixed inputs), the skeleton
shown to students and the catalogue of known mistakes (:class:`autograder.core.Mistake`).
"""
from . import (  # noqa: F401
    ch01_tokens,
    ch02_positional_encoding,
    ch03_attention,
    ch04_multihead_attention,
    ch05_blocks,
    ch06_patch_embedding,
    ch07_vit,
    ch08_decoder,
)
