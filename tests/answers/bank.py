"""Answer banks: for every question, the answers its check is tested against, in one schema.

One file per chapter, named for the chapter (``autograder.question(qid).chapter``, e.g.
``03_attention`` -> ``tests/answers/ch03_attention.py``), holds the banks of all its questions:

* the **solution**: ``@solution(qid)`` on the answer written as the solutions notebook's answer
  cell writes it (``solution_value(qid, value)`` for a question answered with a number), exactly one
  per question (``tests/test_answer_banks.py`` holds it equal to the notebook's);
  :func:`solutions` gives them by question id, ``tests/answers/submission.py`` writes them into
  the whole submission the CLI, bench and threat tests hand to the autograder;
* ``@variant(qid)``: other correct formulations (loops, numpy, float64, other layouts...);
* ``@right(qid, ...)``: correct answers written the way students write them;
* ``@wrong(qid, expected)`` (or ``wrong_list(qid, [(answer, expected), ...])``): realistic wrong
  answers, each with how the check must name it: a catalogue key (``result.mistake == key``),
  ``says("words")`` (words the feedback must contain, case ignored: a property the judge or a
  diagnosis names when no catalogue entry matches), or a tuple of these (every one must hold;
  ``lacks("words")``: words the feedback must not contain).

``tests/test_answer_banks.py`` discovers the questions from ``autograder.questions()`` and runs
every bank: solution, variants and right answers pass with full marks; every wrong answer scores
0 and is named as its ``expected``; every question has a bank with at least ``MIN_WRONG`` wrong
answers (the exceptions, with their reasons, are listed there).
"""
from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
MIN_WRONG = 6


@dataclass(frozen=True)
class Says:
    """The feedback must contain these words (case ignored)."""

    words: str

    def __str__(self) -> str:
        return f"says({self.words!r})"


def says(words: str) -> Says:
    return Says(words)


@dataclass(frozen=True)
class Lacks:
    """The feedback must not contain these words (case ignored)."""

    words: str

    def __str__(self) -> str:
        return f"lacks({self.words!r})"


def lacks(words: str) -> Lacks:
    return Lacks(words)


@dataclass
class Bank:
    qid: str
    solution: Any = None                             # @solution(qid): the notebook's answer
    variants: list = field(default_factory=list)
    right: list = field(default_factory=list)
    wrong: list = field(default_factory=list)        # (answer, expected)
    modules: set = field(default_factory=set)        # the modules that define the answers


BANKS: dict[str, Bank] = {}


def bank(qid: str) -> Bank:
    return BANKS.setdefault(qid, Bank(qid))


def _module(answer) -> str:
    return getattr(answer, "__module__", None) or "?"


def _check_expected(expected: Any) -> None:
    parts = expected if isinstance(expected, tuple) else (expected,)
    assert parts and all(isinstance(p, (str, Says, Lacks)) for p in parts), (
        f"expected must be a catalogue key, says('words') or a tuple of them, not {expected!r}")


def solution(qid: str):
    """The question's solution (a function or class), as the solutions notebook's answer cell writes it."""
    def register(obj):
        assert bank(qid).solution is None, f"{qid} has two @solution answers"
        bank(qid).solution = obj
        bank(qid).modules.add(_module(obj))
        return obj
    return register


def solution_value(qid: str, value):
    """The solution of a question answered with a number: ``name = solution_value(qid, 0.48)``,
    the number the solutions notebook's answer cell assigns."""
    assert bank(qid).solution is None, f"{qid} has two solutions"
    bank(qid).solution = value
    return value


def solutions() -> dict[str, Any]:
    """Every question's solution by id (the banks' ``@solution`` and ``solution_value``)."""
    return {qid: b.solution for qid, b in load().items() if b.solution is not None}


def solution_of(qid: str) -> Any:
    """The solution of question ``qid``; a question without one fails with where to add it."""
    found = solutions()
    if qid not in found:
        raise LookupError(f"no solution for question {qid!r}: add it to {chapter_file(_chapter(qid))} with "
                          f"@solution({qid!r}) on the answer written as its solutions notebook's answer cell "
                          f"writes it (solution_value({qid!r}, <number>) for a number)")
    return found[qid]


def _chapter(qid: str) -> str:
    # the registry, imported here: the sandbox-bundle probe test imports this module where only the
    # student side of autograder exists, and bench/ imports it before anything else
    from autograder.questions import registry

    question = registry().get(qid)
    return question.chapter if question is not None else "<NN>_<chapter>"


def variant(qid: str):
    def register(obj):
        bank(qid).variants.append(obj)
        bank(qid).modules.add(_module(obj))
        return obj
    return register


def right(*qids: str):
    def register(obj):
        for qid in qids:
            bank(qid).right.append(obj)
            bank(qid).modules.add(_module(obj))
        return obj
    return register


def wrong(qid: str, expected):
    _check_expected(expected)

    def register(obj):
        bank(qid).wrong.append((obj, expected))
        bank(qid).modules.add(_module(obj))
        return obj
    return register


def wrong_list(qid: str, rows) -> None:
    """Register (answer, expected) pairs for qid (answers built by a helper, several at once)."""
    for answer, expected in rows:
        _check_expected(expected)
        bank(qid).wrong.append((answer, expected))
        bank(qid).modules.add(_module(answer))


def chapter_file(chapter: str) -> str:
    """Where the banks of a chapter's questions live, relative to the repository root."""
    return f"tests/answers/ch{chapter}.py"


def load() -> dict[str, Bank]:
    """Import every chapter file (``tests/answers/ch<NN>_<chapter>.py``, found by name: a new
    chapter's file needs no list) and return the banks by question id."""
    for path in sorted(HERE.glob("ch[0-9][0-9]_*.py")):
        importlib.import_module(f"{__package__}.{path.stem}")     # importing a chapter file registers its banks
    return BANKS


def named(result, expected) -> bool:
    """Whether a check's result names the mistake as ``expected`` says."""
    parts = expected if isinstance(expected, tuple) else (expected,)
    for part in parts:
        if isinstance(part, Says):
            if part.words.lower() not in result.feedback.lower():
                return False
        elif isinstance(part, Lacks):
            if part.words.lower() in result.feedback.lower():
                return False
        elif result.mistake != part:
            return False
    return True


def answer_name(answer) -> str:
    return getattr(answer, "__name__", type(answer).__name__)


def wrong_rows(rows) -> None:
    """Register (qid, answer, expected) triples."""
    for qid, answer, expected in rows:
        _check_expected(expected)
        bank(qid).wrong.append((answer, expected))
        bank(qid).modules.add(_module(answer))


def variants() -> dict[str, list]:
    """Every question's variants (other correct formulations), by question id."""
    return {qid: list(b.variants) for qid, b in load().items() if b.variants}


def right_answers() -> list[tuple[str, Any]]:
    """(qid, answer) for every variant and realistic right answer of every bank."""
    return [(qid, a) for qid, b in load().items() for a in [*b.variants, *b.right]]


# The fast loop (`make test-fast`) checks this many answers or mistakes of each question; `make test`
# checks every one (the others are marked slow). Each check costs about 0.1 s and the banks hold ~400
# wrong answers and the catalogues ~320 mistakes: all of them would double the fast loop.
FAST_PER_QUESTION = 3


def fast_sample(rows: list[tuple], per_question: int = FAST_PER_QUESTION) -> list:
    """``rows`` (tuples whose first item is a question id) as pytest parameters: the first
    ``per_question`` of each question as they are, the others marked slow."""
    seen: Counter = Counter()
    params = []
    for row in rows:
        seen[row[0]] += 1
        params.append(pytest.param(*row, marks=() if seen[row[0]] <= per_question else pytest.mark.slow))
    return params
