"""The secret inputs of a grading run (grader side).

A grading run draws one secret number (the *salt*) and mixes it into every seed: the
inputs of that run cannot be known in advance, so an answer that returns outputs
precomputed for the public inputs of ``check()`` fails. The salt never leaves the grader:
:func:`draw_inputs` computes the arrays a question's probe recipe asks for, and only those
arrays (and the pool the parameters are filled from) are sent into the sandbox.
"""
from __future__ import annotations

import io

import numpy as np

from ..questions import inputs as I
from ..questions.base import Question


class SaltedSource(I.PublicSource):
    """The public recipes with ``salt`` mixed into every seed (salt 0 = public inputs)."""

    def __init__(self, salt: int):
        self.salt = int(salt)

    def seed_words(self, code: int, seed: int) -> list[int]:
        words = [int(code), int(seed)]
        return [self.salt, *words] if self.salt else words


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
        import torch
        tensor = torch.from_numpy(np.array(array, copy=True))
        return tensor.double() if dtype == "float64" and tensor.is_floating_point() else tensor

    def seed(self, value):
        import torch
        torch.manual_seed(int(value))

    def grads(self, out, upstream, inputs, module=None, params=False):
        pass

    def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def build(self, cls, *args, heads=None, head_width=None, record_tensors=False, train=False, dtype=None,
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
    import torch

    from .catalogue import entry

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


def public_inputs(qids) -> bytes:
    """The public inputs of ``qids``, packed for a child process (``python -m autograder check``):
    the same values the child would draw itself, plus those only the grader's side can make
    (dataset images)."""
    from ..questions import question

    source = I.PublicSource()
    arrays: dict[str, np.ndarray] = {}
    for qid in dict.fromkeys(qids):
        arrays.update(draw_inputs(question(qid), source))
    return pack_inputs(arrays, source.pool())


def pack_inputs(arrays: dict[str, np.ndarray], pool: np.ndarray) -> bytes:
    """The arrays and the parameter pool as one uncompressed ``.npz`` (no pickle): what the
    sandbox receives. The descriptions travel in ``keys`` (a unicode array)."""
    names = sorted(arrays)
    buffer = io.BytesIO()
    # numpy's stub gives **kwds the type of savez's allow_pickle: bool
    np.savez(buffer, keys=np.array(names, dtype=np.str_), pool=np.asarray(pool, dtype=np.float32),
             **{f"a{i}": arrays[name] for i, name in enumerate(names)})  # type: ignore[arg-type]
    return buffer.getvalue()
