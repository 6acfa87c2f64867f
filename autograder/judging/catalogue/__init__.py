"""What the grader knows about each question and the student must not: the correct answers
(built from ``vitref``) and the catalogue of known mistakes. Never bundled into the sandbox.

One module per chapter, next to :mod:`autograder.questions`' module of the same name; each
calls :func:`add` (:mod:`._entry`, the catalogue's lowest module) for its questions. Importing
this package imports every chapter, so :func:`entry` finds every question. The catalogue imports
nothing of :mod:`autograder.judging.judge`: the judge looks an entry up and hands it on.
"""
from __future__ import annotations

from . import (  # noqa: F401 - importing a chapter adds its entries
    ch01_tokens,
    ch02_positional_encoding,
    ch03_attention,
    ch04_multihead_attention,
    ch05_blocks,
    ch06_patch_embedding,
    ch07_label_smoothing,
    ch07_vit,
    ch08_decoder,
    ch08_kvcache,
    ch09_training,
    concepts,
)
from ._entry import _ENTRIES, Entry, add

__all__ = ["Entry", "add", "entry"]


def entry(qid: str) -> Entry:
    """The catalogue entry of question ``qid`` (ValueError when there is none)."""
    if qid not in _ENTRIES:
        raise ValueError(f"no references or catalogue for question {qid!r}")
    return _ENTRIES[qid]
