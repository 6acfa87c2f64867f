"""The data model of the autograder: questions, cases, mistakes, results.

A :class:`Question` is checked in two halves:

* the **probe** runs in the student's process. It builds fixed inputs (several shapes and
  seeds), calls the student's answer on them and returns plain data only: numpy arrays,
  numbers and strings. It never imports ``vitref``;
* the **judge** runs in the grader's process. It rebuilds the same inputs, computes the
  reference outputs with ``vitref`` (using the student's own parameters where the answer is
  a module), compares, and on a mismatch compares the student's outputs with every entry
  of the question's *catalogue of known mistakes* to name the mistake.

Both halves run the same ``run_case`` function of the question, with a different recorder
(:class:`autograder.probe.ProbeRecorder` or :class:`autograder.judge.JudgeRecorder`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class Result:
    """The verdict on one answer. ``feedback`` is written for the student."""

    id: str
    passed: bool
    score: float
    max_score: float
    feedback: str
    mistake: str | None = None  # key of the catalogue entry the answer matched, if any

    def to_dict(self) -> dict:
        return {"id": self.id, "passed": self.passed, "score": self.score, "max_score": self.max_score,
                "feedback": self.feedback, "mistake": self.mistake}

    def __str__(self) -> str:
        return self.feedback


@dataclass(frozen=True)
class Case:
    """One fixed input set. ``params`` is plain data read by ``run_case``; ``dims`` maps a
    size to its name for messages ("(2, 5, 8) = (B, T, d_v)"): pick distinct sizes."""

    label: str
    params: Mapping[str, Any]
    dims: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer, kept as data next to its check.

    ``build(parts)`` returns the wrong answer written the way a student would (a function or
    a class with the question's signature). ``parts`` gives the building blocks a composite
    answer needs (for example a correct ``MultiHeadAttention`` for a wrong encoder block):
    the grader passes ``vitref``'s, the tests pass the course's solutions. ``needs`` names them.
    """

    key: str
    title: str                      # short name shown to the student
    hint: str                       # what to change, in a sentence
    build: Callable[[Any], Any]
    needs: tuple[str, ...] = ()
    also: tuple = ()                # more builders of the same mistake (combined with a harmless variation)

    def answers(self, parts) -> list:
        """Every wrong answer of this entry: ``build`` first, then ``also``."""
        return [builder(parts) for builder in (self.build, *self.also)]


@dataclass
class Question:
    id: str
    chapter: str
    title: str
    points: float
    answer_name: str
    kind: str                                  # "function" or "class"
    signature: str                             # what the answer looks like, for messages and docs
    cases: Sequence[Case]
    run_case: Callable[[Any, Case, Any], None]  # (answer, case, recorder): probe and judge share it
    references: Callable[[], list]             # grader side: correct answers (built from vitref), any may match
    catalogue: Sequence[Mistake] = ()
    forbidden: tuple[str, ...] = ()            # keys of autograder.shortcuts.FORBIDDEN
    skeleton: str = ""                         # the starter code with blanks, as the notebooks show it
    outputs: Mapping[str, str] = field(default_factory=dict)  # output name -> shape in words, e.g. "(B, T, d_v)"
    reference_parts: Callable[[], Any] | None = None  # grader side: parts for composite catalogue answers

    def __repr__(self) -> str:
        return f"<Question {self.id} ({self.chapter}): {self.title}, {self.points} points>"


_REGISTRY: dict[str, Question] = {}


def register(question: Question) -> Question:
    if question.id in _REGISTRY:
        raise ValueError(f"duplicate question id {question.id!r}")
    _REGISTRY[question.id] = question
    return question


def registry() -> dict[str, Question]:
    from . import checks  # noqa: F401  (importing the chapters registers their questions)
    return _REGISTRY
