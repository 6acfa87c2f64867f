"""The grader's verdicts and the known mistakes they name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Result:
    """The verdict on one answer. ``feedback`` is written for the student."""

    id: str
    passed: bool
    score: float
    max_score: float
    feedback: str
    mistake: str | None = None  # key of the catalogue entry the answer matched, if any
    flags: tuple = ()           # for the instructor: the flagged constructs of the source, as text
    held: tuple = ()            # the flags that hold this score for review ({"flag", "line", ...} each)
    # (name, number) pairs the grader measured itself (a training question: the held-out accuracy,
    # the host's seconds), for a leaderboard; never a number the student's process reported
    measures: tuple = ()

    def to_dict(self) -> dict:
        out = {"id": self.id, "passed": self.passed, "score": self.score, "max_score": self.max_score,
               "feedback": self.feedback, "mistake": self.mistake, "flags": list(self.flags)}
        if self.held:
            out["held"] = [dict(h) for h in self.held]
        if self.measures:
            out["measures"] = dict(self.measures)
        return out

    def __str__(self) -> str:
        return self.feedback


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
