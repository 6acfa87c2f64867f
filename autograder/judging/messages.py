"""Comparing outputs and saying what differs, with shapes named ("(2, 5, 8) = (B, T, d_v)")."""
from __future__ import annotations

import numpy as np

from ..questions.base import Case

RTOL = 1e-4
ATOL = 1e-4          # relative to the largest expected magnitude (at least 1)
# A case with float64 inputs (``dtype="float64"``): the probe sends float64 results exactly
# (float32 converts to float64 without loss), and a computation kept in float64 agrees with
# the float64 reference to ~1e-15; one done in float32 anywhere is off by ~1e-7. So these
# cases are compared to float64 precision: what the answer computed, not what it says.
RTOL64 = 1e-10
ATOL64 = 1e-10


def float64_case(case: Case, key: str | None = None) -> bool:
    """Whether output ``key`` of ``case`` is compared to float64 precision: every output of a
    float64 case, unless the case names the ones that are (``float64_outputs``, for a case
    whose correct answers add a constant computed in float32, such as a sinusoidal table;
    ``"param_grads"`` stands for the parameters' gradients)."""
    if case.params.get("dtype") != "float64":
        return False
    names = case.params.get("float64_outputs")
    return names is None or key is None or key in names


def describe_shape(shape, dims) -> str:
    shape = tuple(int(s) for s in shape)
    text = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    names = [dims.get(s) for s in shape]
    if shape and all(names) and len(set(shape)) == len(shape):
        text += " = (" + ", ".join(names) + ")"
    return text


def _fmt(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    x = float(x)
    if np.isnan(x) or np.isinf(x):
        return str(x)
    return f"{x:.4g}"


def compare(name: str, got, expected, case: Case, shape_words: str = "", key: str | None = None) -> str | None:
    """None when ``got`` matches ``expected``, else a message with names and numbers. In a
    float64 case (:func:`float64_case`) the tolerance is float64's; an answer right to
    float32's precision only is told that it lost the inputs' dtype."""
    return (_compare(name, got, expected, case, shape_words, RTOL, ATOL)
            or precision_problem(name, got, expected, case, key))


def loosely_equal(name: str, got, expected, case: Case) -> bool:
    """``got`` matches ``expected`` to float32's precision (what every case accepts)."""
    return _compare(name, got, expected, case, "", RTOL, ATOL) is None


FLOAT32_ONLY = "right to float32's precision only"      # the words the float32 symptom finds a case by


def precision_problem(name: str, got, expected, case: Case, key: str | None = None) -> str | None:
    """In a float64 case, an output (``key``, default ``name``) right to float32's precision
    (RTOL) but not to float64's (RTOL64): the sentence that says so, else None."""
    if not float64_case(case, name if key is None else key) or got is None:
        return None
    if _compare(name, got, expected, case, "", RTOL, ATOL) is not None:
        return None
    if _compare(name, got, expected, case, "", RTOL64, ATOL64) is None:
        return None
    error = _largest_relative_error(got, expected)
    return (f"{name} is {FLOAT32_ONLY}, on float64 inputs: off from the float64 result by up to {error:.1g} "
            f"of its scale, where float64 gives ~1e-15")


def _largest_relative_error(got, expected) -> float:
    e = np.asarray(expected, dtype=np.float64)
    g = np.asarray(got, dtype=np.float64)
    finite = np.isfinite(e) & np.isfinite(g)
    scale = max(1.0, float(np.max(np.abs(np.where(finite, e, 0.0)), initial=0.0)))
    return float(np.max(np.abs(np.where(finite, g - e, 0.0)), initial=0.0)) / scale


def _compare(name: str, got, expected, case: Case, shape_words: str, rtol: float, atol: float) -> str | None:
    if got is None:
        return f"no {name} was returned"
    expected = np.asarray(expected)
    got = np.asarray(got)
    if got.shape != expected.shape:
        words = f" = {shape_words}" if shape_words and "=" not in describe_shape(expected.shape, case.dims) else ""
        return (f"expected {name} of shape {describe_shape(expected.shape, case.dims)}{words}, "
                f"got {describe_shape(got.shape, case.dims)}")
    e = expected.astype(np.float64)
    g = got.astype(np.float64)
    if expected.size == 0:
        return None
    nan_got, nan_exp = np.isnan(g), np.isnan(e)
    if (nan_got & ~nan_exp).any():
        index = tuple(int(i) for i in np.argwhere(nan_got & ~nan_exp)[0])
        return (f"{name} contains NaN (first at index {index}, where {_fmt(e[index])} was expected)")
    finite = ~nan_exp
    scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(e), e, 0.0)), initial=0.0)))
    with np.errstate(invalid="ignore"):
        diff = np.abs(np.where(finite, g, 0.0) - np.where(finite, e, 0.0))
        same_inf = np.isinf(e) & (g == e)
        diff = np.where(same_inf, 0.0, diff)
        bad = diff > atol * scale + rtol * np.abs(np.where(np.isfinite(e), e, 0.0))
    bad |= nan_exp & ~nan_got
    if not bad.any():
        return None
    if e.ndim == 0:
        return f"expected {name} {_fmt(e)}, got {_fmt(g)}"
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad, diff, -1))), e.shape))
    count = int(bad.sum())
    return (f"{name}{list(index)} should be {_fmt(e[index])}, got {_fmt(g[index])} "
            f"({count} of {e.size} values differ, largest difference {_fmt(np.max(np.where(bad, diff, 0)))})")


def outputs_equal(a: dict, b: dict) -> bool:
    if set(a) != set(b):
        return False
    for key in a:
        x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
        if x.shape != y.shape:
            return False
        scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(y), y, 0.0)), initial=0.0)))
        with np.errstate(invalid="ignore"):
            if not np.allclose(x, y, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
                return False
    return True
