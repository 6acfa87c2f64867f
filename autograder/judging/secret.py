"""The secret inputs of a grading run (grader side).

Every run of a notebook in the sandbox (one per group of questions with the same forbidden
functions, :func:`autograder.hosts.driver.ban_groups`, and a re-run without any ban) gets
its own secret number, the *salt*, mixed into every seed: :func:`run_salt`, an HMAC of the
grading job's secret key over (student, assignment, run, questions of the run). The inputs
of a run cannot be known in advance, so an answer that returns outputs precomputed for the
public inputs of ``check()`` fails; and nothing one run receives is the input of another
run or of another student, so a run where a function is allowed cannot compute the answers
of a run where it is forbidden and hand them over. The salt never leaves the grader:
:func:`draw_inputs` computes the arrays a question's probe recipe asks for, and only the
arrays of the run's own questions (and the pool the parameters are filled from) are sent
into the sandbox (:func:`run_inputs`).

The salt also renumbers the classes of a data set's labels (:meth:`SaltedSource.relabel`): in
a grading run the training labels the student's process receives and the held-out labels the
grader scores against name the classes in the same secret order, none under its own number, so
a model trained elsewhere on the data set's own labels is right only where it was wrong, while
a model trained on the labels it was given is scored on the classes it learned.
"""
from __future__ import annotations

import hashlib
import hmac

import numpy as np
import torch

from ..questions import inputs as I
from ..questions import question
from ..questions.base import Question
from ..student import wire
from .catalogue import entry


class SaltedSource(I.PublicSource):
    """The public recipes with ``salt`` mixed into every seed (salt 0 = public inputs)."""

    def __init__(self, salt: int):
        self.salt = int(salt)

    def cache_key(self) -> tuple:
        return ("salt", self.salt) if self.salt else ("public",)

    def seed_words(self, code: int, seed: int) -> list[int]:
        words = [int(code), int(seed)]
        return [self.salt, *words] if self.salt else words

    def relabel(self, labels: np.ndarray, classes: int) -> np.ndarray:
        """``labels`` with the classes renumbered by :func:`class_order` of this run (salt 0:
        unchanged, the public inputs)."""
        if not self.salt:
            return labels
        return class_order(self.salt, classes)[np.asarray(labels)]


RELABEL_CODE = 9                 # the seed code of the class order (the input recipes use 1 to 7)


def class_order(salt: int, classes: int) -> np.ndarray:
    """The number each of ``classes`` classes gets in the labels of the grading run with
    ``salt``: a permutation drawn from the salt in which no class keeps its own number (a
    derangement), the same for every data set split of the run. Without the salt it cannot be
    known in advance; a run's own training labels show it to a model that already knows the
    classes ("What remains possible" in book/for_instructors.md)."""
    identity = np.arange(int(classes))
    if classes < 2:
        return identity
    rng = np.random.default_rng([int(salt), RELABEL_CODE, int(classes)])
    while True:                      # about e draws on average
        order = rng.permutation(int(classes))
        if not (order == identity).any():
            return order


class _Recording:
    """Wraps a source and keeps every array drawn, by description."""

    def __init__(self, source):
        self.source = source
        self.arrays: dict[str, np.ndarray] = {}

    def draw(self, key, make):
        value = self.source.draw(key, make)
        self.arrays[I.key_text(key)] = np.array(value, copy=True)
        return value

    def pool(self):
        return self.source.pool()


class _DrawCase:
    """A recorder for ``run_case`` that only needs the inputs to be drawn: it runs the first
    reference answer (default initialisation) and ignores the outputs."""

    mode = "draw"

    def __init__(self, case):
        self.case = case

    def tensor(self, array, dtype=None, requires_grad=False):
        tensor = torch.from_numpy(np.array(array, copy=True))
        return tensor.double() if dtype == "float64" and tensor.is_floating_point() else tensor

    def seed(self, value):
        torch.manual_seed(int(value))

    def grads(self, out, upstream, inputs, module=None, params=False):
        pass

    def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def build(self, cls, *args, heads=None, head_width=None, train=False, dtype=None,
              **kwargs):
        module = cls(*args, **kwargs)
        module.train(bool(train))
        return module.double() if dtype == "float64" else module

    def output(self, name, value):
        return value

    def unpack(self, value, names, what):
        return tuple(value)

    def note(self, key, value):
        pass

    def check_new_params(self, module):
        pass


def draw_inputs(question: Question, source) -> dict[str, np.ndarray]:
    """Every input array ``question``'s cases ask for, drawn from ``source``."""
    found = entry(question.id)
    reference = found.draw_answer or found.references()[0]
    recording = _Recording(source)
    with I.using(recording), torch.no_grad():
        for case in question.cases:
            try:
                question.run_case(reference, case, _DrawCase(case))
            except Exception as error:  # re-raised: only the inputs drawn before matter
                raise RuntimeError(f"drawing the inputs of {question.id} ({case.label}) failed: {error}") from error
    return recording.arrays


def run_salt(key: bytes, student: str, assignment: str, run: int, qids) -> int:
    """The salt of one run of one submission: HMAC-SHA256 of the job's secret ``key`` over
    ``student/assignment/run/sorted questions``, 63 bits, never 0 (0 means the public inputs).
    Without the key, the salt of one run says nothing about another's."""
    if len(key) < 16:
        raise ValueError("the secret key of a grading job must have at least 16 bytes")
    message = "/".join([str(student), str(assignment), str(int(run)), ",".join(sorted(map(str, qids)))])
    digest = hmac.new(key, message.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return (int.from_bytes(digest[:8], "big") >> 1) or 1


# the inputs each question's cases ask for, as (description, make) recorded once per process:
# which inputs a recipe draws does not depend on the salt, only their values do
_RECIPES: dict[str, list] = {}


class _KeyRecording:
    """Wraps a source and keeps the description and the maker of every input drawn."""

    def __init__(self, source):
        self.source = source
        self.made: dict[str, tuple] = {}

    def draw(self, key, make):
        self.made.setdefault(I.key_text(key), (key, make))
        return self.source.draw(key, make)

    def pool(self):
        return self.source.pool()


def _recipe(question: Question) -> list:
    """``question``'s inputs as (key, make) pairs, recorded once by drawing them. Which inputs a
    recipe asks for must not depend on their values (their shapes and seeds come from the case):
    ``tests/threats/test_cross_run_inputs.py`` checks that the quick draw is the reference draw
    for every question and two salts."""
    if question.id not in _RECIPES:
        recording = _KeyRecording(SaltedSource(0x5EC12E7))
        draw_inputs(question, recording)
        _RECIPES[question.id] = list(recording.made.values())
    return _RECIPES[question.id]


def draw_question(question: Question, source) -> dict[str, np.ndarray]:
    """What :func:`draw_inputs` returns, without running the reference answer again: the
    recorded makers are called with ``source``'s seeds (the first call per question and
    process records them)."""
    return {I.key_text(key): np.array(source.draw(key, make), copy=True) for key, make in _recipe(question)}


def run_inputs(qids, source) -> bytes:
    """The packed inputs of one run: the arrays of ``qids`` only, drawn from ``source``, and
    its parameter pool."""
    arrays: dict[str, np.ndarray] = {}
    for qid in dict.fromkeys(qids):
        arrays.update(draw_question(question(qid), source))
    return pack_inputs(arrays, source.pool())


def public_inputs(qids) -> bytes:
    """The public inputs of ``qids``, packed for a child process (``python -m autograder check``):
    the same values the child would draw itself, plus those only the grader's side can make
    (dataset images)."""
    return run_inputs(qids, I.PublicSource())


def pack_inputs(arrays: dict[str, np.ndarray], pool: np.ndarray) -> bytes:
    """The arrays and the parameter pool as one blob (:func:`autograder.student.wire.arrays_bytes`;
    no pickle): what the sandbox receives. The descriptions travel in ``keys`` (a unicode array)."""
    names = sorted(arrays)
    return wire.arrays_bytes({"keys": np.array(names, dtype=np.str_), "pool": np.asarray(pool, dtype=np.float32),
                              **{f"a{i}": arrays[name] for i, name in enumerate(names)}})
