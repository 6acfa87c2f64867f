"""The grader's verdicts and the known mistakes they name."""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Result:
    """The verdict on one answer. ``feedback`` is written for the student, in full: the symptom,
    the mistake named and how to fix it (what the grader's reports keep). ``first_step``: the
    same failure told without the fix, the symptom and a question that points at the cause
    (what a student's own check shows the first time it meets that mistake: :func:`staged`)."""

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
    first_step: str = ""        # the feedback without the fix ("" where there is no mistake to name)

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


def staged(result: Result, seen: Counter) -> Result:
    """The result as a student's own check shows it: the first time ``seen`` meets this
    (question, mistake), the symptom and a question (``first_step``); from the second time, the
    full feedback with the fix. ``seen`` counts the (question id, mistake key) pairs of the
    caller's session (the student's kernel keeps one): it changes the wording only, never the
    score."""
    if result.passed or not result.mistake or not result.first_step:
        return result
    key = (result.id, result.mistake)
    seen[key] += 1
    if seen[key] > 1:
        return result
    return dataclasses.replace(result, feedback=result.first_step)


@dataclass(frozen=True)
class Mistake:
    """A known mistake of one question, kept as data next to its check: what the student did
    (``title``), how to fix it (``hint``), a question that points at the cause without giving the
    fix (``ask``, the first step of the feedback), and how the grader recognises it: exactly one
    of

    * ``build(parts)``: the wrong answer written the way a student would (a function or a class
      with the question's signature), run on the student's inputs and parameters. ``parts``
      gives the building blocks a composite answer needs (for example a correct
      ``MultiHeadAttention`` for a wrong encoder block): the grader passes ``vitref``'s, the
      tests pass the course's solutions. ``needs`` names them; ``also``: more builders of the
      same mistake;
    * ``change``: the question's own references run with one part changed (a counterfactual:
      :class:`autograder.judging.diagnosis.Change`), so one entry covers a mistake wherever the
      changed part appears;
    * ``detect(view)``: a symptom read off the cases the answer failed
      (:class:`autograder.judging.diagnosis.View`): a sentence saying what was found, or None.
    """

    key: str
    title: str                      # short name shown to the student
    hint: str                       # what to change, in a sentence
    build: Callable[[Any], Any] | None = None
    needs: tuple[str, ...] = ()
    also: tuple = ()                # more builders of the same mistake (combined with a harmless variation)
    ask: str = ""                   # the first step: a question pointing at the cause, without the fix
    change: Any = None              # a diagnosis.Change
    detect: Callable[[Any], str | None] | None = None

    def __post_init__(self):
        ways = [w for w in (self.build, self.change, self.detect) if w is not None]
        if len(ways) != 1:
            raise ValueError(f"mistake {self.key!r}: give exactly one of build, change or detect")

    def answers(self, parts) -> list:
        """Every wrong answer of a ``build`` entry: ``build`` first, then ``also`` (none for a
        change or a symptom)."""
        if self.build is None:
            return []
        return [builder(parts) for builder in (self.build, *self.also)]

    def question(self) -> str:
        """The first step's question: ``ask``, or one made from the title."""
        if self.ask:
            return self.ask
        return f"Your outputs are those of a known mistake ({self.title}): where could your code do that?"
