"""The course's solutions by answer name, for tests that build on them (``S.softmax``,
``S.MultiHeadAttention``...), and the building blocks the catalogue's composite mistakes need.

Nothing is written here: every solution is the ``@solution`` of its question in its chapter's
bank (``tests/answers/ch<chapter>.py``, equal to the solutions notebook's answer cell), and
``S.<answer name>`` is the solution of the last question answered with that name (``PatchEmbedding``:
chapter 6's q4, built on q2 and q3). The whole submission the CLI tests run is written from the
same banks by ``tests/answers/submission.py``.
"""
from __future__ import annotations

from typing import Any

import autograder

from . import given
from .bank import solution_of, solutions


def _by_answer_name() -> dict[str, Any]:
    found = solutions()
    return {q.answer_name: found[q.id] for q in autograder.questions() if q.id in found}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    answers = _by_answer_name()
    if name not in answers:
        raise AttributeError(f"no question is answered by {name!r}: the solutions are by answer name "
                             f"({', '.join(sorted(answers))})")
    return answers[name]


# Building blocks the catalogue's composite wrong answers need (autograder.judging.model.Mistake's
# `needs`): the solutions of the questions that define them, and the notebooks' given attention and block.
PARTS = {
    "MultiHeadAttention": given.MultiHeadAttention, "TransformerEncoderBlock": given.TransformerEncoderBlock,
    "ResidualAdd": solution_of("q6"), "FeedForwardBlock": solution_of("q7"),
    "AttentionHead": solution_of("attention_head"), "CrossAttention": solution_of("cross_attention"),
    "getPositionEncoding": solution_of("q1"),
}
