"""The questions: ids, points, inputs and how each answer is called (no reference code).

One module per chapter; importing this package registers every question. This package and
:mod:`autograder.student` are what the grading sandbox holds: a test fails if either imports
``vitref`` or the grader's side (:mod:`autograder.judging`, hosts, batch, instructor).
"""
from . import (  # noqa: F401 - importing a chapter registers its questions
    ch01_tokens,
    ch02_positional_encoding,
    ch03_attention,
    ch04_multihead_attention,
    ch05_blocks,
    ch06_patch_embedding,
    ch07_vit,
    ch07_label_smoothing,
    ch08_decoder,
    ch08_kvcache,
    ch09_training,
    concepts,
)
from .base import Case, Question, register, registry

__all__ = ["Case", "Question", "question", "register", "registry"]


def question(qid: str) -> Question:
    table = registry()
    if qid not in table:
        raise ValueError(f"unknown question id {qid!r}; known ids: {', '.join(table)}")
    return table[qid]
