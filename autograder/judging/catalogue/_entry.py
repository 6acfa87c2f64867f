"""One question's entry in the catalogue: its references, its known mistakes and its own rules
(grader side), and the table the chapters of the catalogue fill with :func:`add`.

The lowest module of :mod:`autograder.judging.catalogue` (with ``_asks``, its data): the chapters
and their shared mistakes import it; it imports nothing else of the catalogue or of the judge.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..model import Mistake
from ._asks import ASKS


@dataclass
class Entry:
    references: Callable[[], list]                 # correct answers (any may match): built here, once per use
    # the question's mistakes, in the order they are tried (autograder.judging.diagnosis.name_mistake):
    # wrong answers (build), the references changed (change) and symptoms (detect)
    catalogue: Sequence[Mistake] = ()
    reference_parts: Callable[[], Any] | None = None  # parts for composite catalogue answers
    # instead of comparing outputs with the references: verdict(question, case, student_case)
    # -> None when the case passes, else a sentence for the student (value questions: never
    # the expected value itself)
    verdict: Callable[[Any, Any, dict], str | None] | None = None
    # with a verdict: match(question, data) -> the key of the catalogue mistake the outputs show
    # (instead of running each mistake's answer), and summary(question, data) -> what a passing
    # answer reached, added to its feedback
    match: Callable[[Any, dict], str | None] | None = None
    summary: Callable[[Any, dict], str | None] | None = None
    # a stand-in for the first reference in the grader's input-drawing pass, where running the
    # reference would be expensive (a training question): only the inputs it is given matter
    draw_answer: Callable | None = None
    # measures(question, data) -> {name: number} the grader measured itself (Result.measures: a
    # training question's held-out accuracy and the host's seconds, for Gradescope's leaderboard)
    measures: Callable[[Any, dict], dict] | None = None


_ENTRIES: dict[str, Entry] = {}


def add(qid: str, references, catalogue=(), reference_parts=None, verdict=None, match=None, summary=None,
        draw_answer=None, measures=None) -> None:
    if qid in _ENTRIES:
        raise ValueError(f"duplicate catalogue entry {qid!r}")
    keys = [m.key for m in catalogue]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"catalogue of {qid!r}: the keys {twice} name two mistakes")
    asked = tuple(m if m.ask or m.key not in ASKS else dataclasses.replace(m, ask=ASKS[m.key]) for m in catalogue)
    _ENTRIES[qid] = Entry(references, asked, reference_parts, verdict, match, summary, draw_answer, measures)


def registered(qid: str) -> Entry:
    """The entry ``qid`` added, for the catalogue's own code (the judge uses
    :func:`autograder.judging.catalogue.entry`, which loads every chapter first)."""
    if qid not in _ENTRIES:
        raise ValueError(f"no references or catalogue for question {qid!r}")
    return _ENTRIES[qid]
