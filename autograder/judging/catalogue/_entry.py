"""One question's entry in the catalogue: its references, its known mistakes and its own rules
(grader side), and the table the chapters of the catalogue fill with :func:`add`.

The lowest module of :mod:`autograder.judging.catalogue`: the chapters and their shared
diagnoses import it; it imports nothing of the catalogue or of the judge.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..model import Mistake


@dataclass
class Entry:
    references: Callable[[], list]                 # correct answers (any may match)
    catalogue: Sequence[Mistake] = ()
    reference_parts: Callable[[], Any] | None = None  # parts for composite catalogue answers
    # when no catalogued mistake matches: diagnose(question, data) -> a sentence naming the
    # property that failed ("the output does not depend on the mask"), or None
    diagnose: Callable[[Any, dict], str | None] | None = None
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


def add(qid: str, references, catalogue=(), reference_parts=None, diagnose=None, verdict=None, match=None,
        summary=None, draw_answer=None, measures=None) -> None:
    if qid in _ENTRIES:
        raise ValueError(f"duplicate catalogue entry {qid!r}")
    _ENTRIES[qid] = Entry(references, tuple(catalogue), reference_parts, diagnose, verdict, match, summary,
                          draw_answer, measures)


def registered(qid: str) -> Entry:
    """The entry ``qid`` added, for the catalogue's own diagnoses (the judge uses
    :func:`autograder.judging.catalogue.entry`, which loads every chapter first)."""
    if qid not in _ENTRIES:
        raise ValueError(f"no references or catalogue for question {qid!r}")
    return _ENTRIES[qid]
