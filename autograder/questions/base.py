"""The data of a question: what is asked, for how many points, on which inputs, and how the
answer is called (the *probe recipe*, ``run_case``).

A :class:`Question` holds no reference code and no catalogue of mistakes (those live on the
grader's side, in :mod:`autograder.judging.catalogue`), so this package runs beside student
code in the grading sandbox. ``run_case(answer, case, recorder)`` is called twice:

* in the student's process, by :class:`autograder.student.probe.ProbeCase`, with the
  student's answer and the inputs the grader drew for this run (plain arrays);
* in the grader's process, by :mod:`autograder.judging.judge`, with each reference and each
  catalogued mistake, on the same inputs in float64 and with the student's parameters.

What a recipe may ask of its recorder ``rec`` (same calls on both sides):

* ``rec.tensor(array, dtype=None, requires_grad=False)``: the input as a tensor (inputs come
  from :mod:`autograder.questions.inputs`: ``I.randn``, ``I.randint``, ``I.bernoulli_mask``);
  ``dtype="float64"`` gives the answer float64 inputs (nudged off float32's grid,
  :func:`autograder.student.probe.float64_input`), and its outputs must agree with the
  float64 reference to float64's precision (a case's ``float64_outputs`` may name the ones
  that must, ``"param_grads"`` for the parameters' gradients);
* ``rec.build(cls, *args, train=False, dtype=None, heads=, head_width=, **kwargs)``: the
  student's module with the checker's parameter values, in eval mode (``train=True``: train
  mode, for dropout cases); ``rec.seed(n)`` seeds torch's generator (dropout masks);
* ``rec.call(fn, *args, **kwargs)``, ``rec.unpack(value, names, what)``, ``rec.output(name, value)``;
* ``rec.grads(out, upstream, {"x": x}, module, params=False)``: backpropagate
  ``sum(out * upstream)``; the gradient of each named input is compared like an output
  (``grad_x``); with a case parameter ``param_grads`` (True, or name fragments) the probe
  sends every parameter's gradient as an array, and each matching parameter's must equal
  the reference's (a frozen or detached parameter sends none, and fails).
  Set ``grads=True`` in the case's params so the judge records the graph.

Questions of ``kind="value"`` (:mod:`autograder.questions.concepts`) ask for a plain number
(an int or a float: a count, a ratio, the number of a multiple-choice option): the recipe
only records it (``rec.output("answer", value)``). The correct value lives on the grader's
side only (the catalogue's ``references``), never in this package.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .forbidden import FORBIDDEN


@dataclass(frozen=True)
class Case:
    """One input set. ``params`` is plain data read by ``run_case``; ``dims`` maps a size to
    its name for messages ("(2, 5, 8) = (B, T, d_v)"): pick distinct sizes."""

    label: str
    params: Mapping[str, Any]
    dims: Mapping[int, str] = field(default_factory=dict)


@dataclass
class Question:
    id: str
    chapter: str
    title: str
    points: float
    answer_name: str
    kind: str                                  # "function", "class" or "value" (a plain number)
    cases: Sequence[Case]
    run_case: Callable[[Any, Case, Any], None]  # (answer, case, recorder): probe and judge share it
    forbidden: tuple[str, ...] = ()            # keys of autograder.questions.forbidden.FORBIDDEN
    outputs: Mapping[str, str] = field(default_factory=dict)  # output name -> shape in words, e.g. "(B, T, d_v)"
    # wall-clock seconds its probe may take (a training question), added to the submission's
    # budget; 0: the usual per-answer limit
    seconds: float = 0.0

    def __repr__(self) -> str:
        return f"<Question {self.id} ({self.chapter}): {self.title}, {self.points} points>"


_REGISTRY: dict[str, Question] = {}


def register(question: Question) -> Question:
    if question.id in _REGISTRY:
        raise ValueError(f"duplicate question id {question.id!r}")
    unknown = [key for key in question.forbidden if key not in FORBIDDEN]
    if unknown:      # expand() skips unknown keys: a typo here would forbid nothing
        raise ValueError(f"question {question.id!r} forbids unknown key(s) {unknown}: declare each with "
                         f"forbid(key, what, why, attrs=...) above the question in its chapter module "
                         f"(see autograder/questions/forbidden.py), or use a key declared there")
    _REGISTRY[question.id] = question
    return question


def registry() -> dict[str, Question]:
    """Every question, in course order. Complete whenever this module is importable: importing it
    runs :mod:`autograder.questions` first, which imports (registers) every chapter."""
    return _REGISTRY
