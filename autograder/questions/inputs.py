"""The inputs of the probe recipes, and where their values come from.

A recipe asks for an input by its description (``randn((2, 5, 8), seed=42)``); the *source*
in force decides the values:

* :class:`PublicSource` (the default): values drawn from the public seed. This is what a
  student's in-notebook ``check()`` uses, and ``python -m autograder check``;
* :class:`ProvidedSource` (in the grading sandbox): the values the grader drew for this run
  and sent in as plain arrays, looked up by description. The student's process never holds
  the grader's secret, only the arrays;
* the grader's salted source (:mod:`autograder.judging.secret`), which mixes a secret drawn
  per grading run into every seed, so answers that return outputs precomputed for the
  public inputs fail.

Parameters of a student's module are filled from a *pool* of normal values (also drawn by
the source): parameter ``i`` of the ``m``-th module built in a case reads the pool along a
stride that depends on (case seed, m, i), so every parameter gets its own values and the
grader regenerates them exactly (:func:`param_values`).
"""
from __future__ import annotations

import contextlib

import numpy as np

POOL_SIZE = 65521                 # a prime: every stride visits the whole pool
_MASK64 = (1 << 64) - 1


class InputMissing(LookupError):
    """The grader did not send an input the recipe asks for (a bug of the course)."""


def key_text(key: tuple) -> str:
    """The description of an input as text (the name it travels under)."""
    return repr(key)


class PublicSource:
    """Values from the public seeds (no secret)."""

    def cache_key(self) -> tuple:
        """Equal for two sources exactly when they give the same values (what a cache of
        values computed from the inputs is keyed on)."""
        return ("public",)

    def seed_words(self, code: int, seed: int) -> list[int]:
        return [int(code), int(seed)]

    def draw(self, key: tuple, make):
        code, seed = key[1], key[2]
        value = make(np.random.default_rng(self.seed_words(code, seed)))
        classes = label_classes(key)
        return value if classes is None else self.relabel(value, classes)

    def relabel(self, labels: np.ndarray, classes: int) -> np.ndarray:
        """A data set's class labels (values in ``[0, classes)``) as the runs of this source
        see them: the public inputs keep the data set's own numbering. The grader's secret
        source numbers the classes in another order per grading run
        (:meth:`autograder.judging.secret.SaltedSource.relabel`)."""
        return labels

    def pool(self) -> np.ndarray:
        cached = getattr(self, "_pool", None)
        if cached is None:
            rng = np.random.default_rng(self.seed_words(4, 0))
            cached = self._pool = rng.standard_normal(POOL_SIZE).astype(np.float32)
        return cached


class ProvidedSource:
    """Values sent by the grader: ``arrays`` maps :func:`key_text` to the array."""

    def __init__(self, arrays: dict, pool: np.ndarray, fetch=None):
        self.arrays = arrays
        self._pool = np.asarray(pool, dtype=np.float32)
        if self._pool.shape != (POOL_SIZE,):
            raise InputMissing(f"the parameter pool has shape {self._pool.shape}, expected ({POOL_SIZE},)")
        # fetch() -> more arrays: asks the host for what it held back (the training data), once,
        # the first time a recipe asks for an input that is not here
        self.fetch = fetch

    def cache_key(self) -> tuple:
        return ("provided", id(self))

    def draw(self, key: tuple, make):
        text = key_text(key)
        if text not in self.arrays and self.fetch is not None:
            fetch, self.fetch = self.fetch, None
            self.arrays.update(fetch())
        if text not in self.arrays:
            raise InputMissing(f"the grader did not send the input {text}")
        return np.array(self.arrays[text], copy=True)

    def pool(self) -> np.ndarray:
        return self._pool


_SOURCE = PublicSource()


def current():
    return _SOURCE


@contextlib.contextmanager
def using(source):
    """Draw every input from ``source`` inside the block."""
    global _SOURCE
    previous, _SOURCE = _SOURCE, source
    try:
        yield source
    finally:
        _SOURCE = previous


# ----------------------------------------------------------------- the inputs recipes ask for

def randn(shape, seed: int, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """float32 normal values ``offset + scale * N(0, 1)``."""
    shape = tuple(int(s) for s in shape)
    key = ("randn", 1, int(seed), shape, float(scale), float(offset))
    return _SOURCE.draw(key, lambda rng: (offset + scale * rng.standard_normal(shape)).astype(np.float32))


def randint(shape, high: int, seed: int) -> np.ndarray:
    """int64 values in ``[0, high)``."""
    shape = tuple(int(s) for s in shape)
    key = ("randint", 2, int(seed), shape, int(high))
    return _SOURCE.draw(key, lambda rng: rng.integers(0, high, size=shape).astype(np.int64))


def bernoulli_mask(shape, seed: int, p_allowed: float = 0.6, full_rows=(), ensure_one: bool = True) -> np.ndarray:
    """bool mask, True = allowed. ``full_rows``: index tuples (over the leading axes and the
    query axis) whose row is entirely blocked. Other rows keep at least one allowed key."""
    shape = tuple(int(s) for s in shape)
    rows = tuple(tuple(int(i) for i in row) for row in full_rows)
    key = ("mask", 3, int(seed), shape, float(p_allowed), rows, bool(ensure_one))

    def make(rng):
        mask = rng.random(shape) < p_allowed
        if ensure_one:
            empty = ~mask.any(axis=-1)
            mask[..., 0] = mask[..., 0] | empty
        for row in rows:
            mask[row] = False
        return mask

    return _SOURCE.draw(key, make)


# Real images for the questions that train a model. The student side holds no data and no
# way to load it: the grader's side registers a loader (autograder.judging), draws the subset
# and, in the sandbox, sends it as arrays like every other input.
_DATASETS: dict = {}              # name -> (loader, number of classes)


def register_dataset(name: str, loader, classes: int) -> None:
    """``loader(train: bool) -> (images uint8 (N, C, H, W), labels int64 (N,) in [0, classes))``
    for ``name``."""
    _DATASETS[name] = (loader, int(classes))


def label_classes(key: tuple) -> int | None:
    """The number of classes when ``key`` describes a data set's labels (which a source may
    renumber, :meth:`PublicSource.relabel`), else None."""
    if key[0] != "dataset" or key[5] != "labels":
        return None
    name = key[3]
    if name not in _DATASETS:
        raise InputMissing(f"this question needs {name} labels, which only the grader's side can draw "
                           f"(import autograder.judging first)")
    return _DATASETS[name][1]


def dataset(name: str, split: str, count: int, seed: int, part: str, noise: int = 0) -> np.ndarray:
    """``count`` examples of ``name``'s ``split`` ("train" or "test"), a random subset without
    repeats chosen by the seed: their ``part`` ("images": uint8 (count, C, H, W); "labels":
    int64 (count,)). The two parts of one (split, count, seed) are the same examples. The labels
    are numbered as the source in force says (:meth:`PublicSource.relabel`: the data set's own
    numbering in the public inputs, another order of the classes in each grading run).
    ``noise``: each pixel of the images moves by up to that many grey levels, at random (held-out
    images then match no stored copy of the dataset byte for byte)."""
    if split not in ("train", "test") or part not in ("images", "labels"):
        raise ValueError(f"dataset split must be 'train' or 'test' and part 'images' or 'labels', "
                         f"got {split!r} and {part!r}")
    key = ("dataset", 6 if split == "train" else 7, int(seed), str(name), int(count), part, int(noise))

    def make(rng):
        loader = _DATASETS.get(name, (None, 0))[0]
        if loader is None:
            raise InputMissing(f"this question needs {name} images, which only the grader's side can load "
                               f"(import autograder.judging first)")
        images, labels = loader(split == "train")
        if count > len(labels):
            raise ValueError(f"{name} {split} has {len(labels)} examples, fewer than the {count} asked for")
        index = np.sort(rng.choice(len(labels), size=int(count), replace=False))
        if part == "labels":
            return np.ascontiguousarray(labels[index])
        chosen = images[index]
        if noise:
            shift = rng.integers(-int(noise), int(noise) + 1, size=chosen.shape)
            chosen = np.clip(chosen.astype(np.int16) + shift, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(chosen)

    return _SOURCE.draw(key, make)


def _mix(*words: int) -> int:
    """splitmix64 over the words: a public, well-spread integer hash."""
    state = 0x9E3779B97F4A7C15
    for word in words:
        state = (state + (int(word) & _MASK64) + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        state = z ^ (z >> 31)
    return state


def param_values(shape, seed: int, module_index: int, param_index: int, name: str) -> np.ndarray:
    """The values the checker writes into parameter ``param_index`` of the
    ``module_index``-th module built in a case (float32), read from the source's pool."""
    shape = tuple(int(s) for s in shape)
    count = int(np.prod(shape)) if shape else 1
    word = _mix(seed, module_index, param_index)
    start = word % POOL_SIZE
    stride = 1 + (word >> 24) % (POOL_SIZE - 1)
    index = (start + stride * np.arange(count, dtype=np.int64)) % POOL_SIZE
    z = _SOURCE.pool()[index].astype(np.float64)
    if len(shape) == 0:
        return np.float32(z[0]).reshape(())
    if len(shape) == 1:
        base = 1.0 if name.endswith("weight") else 0.0    # LayerNorm gains near 1, biases near 0
        return (base + 0.5 * z).astype(np.float32).reshape(shape)
    fan_in = int(np.prod(shape[1:]))
    return (z / np.sqrt(max(fan_in, 1))).astype(np.float32).reshape(shape)
