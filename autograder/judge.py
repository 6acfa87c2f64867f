"""The judge: compares probed outputs with ``vitref`` and names known mistakes (grader side).

It trusts nothing from the student's process but plain arrays: inputs are rebuilt here, the
parameter values are regenerated here (:func:`autograder.params.student_params`), and every
reference and every catalogue variant is computed here, in float64.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .core import Case, Question, Result
from .params import AlignmentError, P, TamperError, candidate_state_dicts, describe_params, student_params
from .probe import BadOutput, CaseFailure, ProbeCase, describe_exception
from .shortcuts import describe as describe_shortcut

RTOL = 1e-4
ATOL = 1e-4          # relative to the largest expected magnitude (at least 1)
MAX_CANDIDATES = 18


# --------------------------------------------------------------------------- messages


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


def compare(name: str, got, expected, case: Case, shape_words: str = "") -> str | None:
    """None when ``got`` matches ``expected``, else a message with names and numbers."""
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
        return (f"{name} contains NaN (first at index {index}, where {_fmt(e[index])} was expected)"
                + _row_hint(index, case))
    finite = ~nan_exp
    scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(e), e, 0.0)), initial=0.0)))
    with np.errstate(invalid="ignore"):
        diff = np.abs(np.where(finite, g, 0.0) - np.where(finite, e, 0.0))
        same_inf = np.isinf(e) & (g == e)
        diff = np.where(same_inf, 0.0, diff)
        bad = diff > ATOL * scale + RTOL * np.abs(np.where(np.isfinite(e), e, 0.0))
    bad |= nan_exp & ~nan_got
    if not bad.any():
        return None
    if e.ndim == 0:
        return f"expected {name} {_fmt(e)}, got {_fmt(g)}"
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad, diff, -1))), e.shape))
    count = int(bad.sum())
    return (f"{name}{list(index)} should be {_fmt(e[index])}, got {_fmt(g[index])} "
            f"({count} of {e.size} values differ, largest difference {_fmt(np.max(np.where(bad, diff, 0)))})")


def _row_hint(index, case) -> str:
    return ""


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


# --------------------------------------------------------------------------- the judge-side recorder


class NoMoreCandidates(Exception):
    pass


def module_params(module) -> list[P]:
    from torch import nn

    out = []
    for name, param in module.named_parameters():
        owner_name = name.rpartition(".")[0]
        owner = module.get_submodule(owner_name) if owner_name else module
        kind = ("linear" if isinstance(owner, nn.Linear) else
                "conv" if isinstance(owner, nn.modules.conv._ConvNd) else type(owner).__name__)
        out.append(P(name, tuple(param.shape), kind))
    return out


class JudgeCase(ProbeCase):
    """``run_case``'s recorder in the grader: float64 inputs, the student's weights."""

    mode = "judge"

    def __init__(self, question: Question, case: Case, index: int, student_case: dict, candidate: int,
                 verify: bool):
        self.question, self.case, self.index = question, case, index
        self.student_case, self.candidate, self.verify = student_case, candidate, verify
        self.outputs, self.modules, self.notes, self.error = {}, [], {}, None
        self.built = 0
        self.candidates_seen = 1

    def tensor(self, array):
        import torch
        array = np.array(array, copy=True)
        if array.dtype.kind == "f":
            array = array.astype(np.float64)
        return torch.from_numpy(array)

    def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def build(self, cls, *args, heads=None, head_width=None, record_tensors=False, **kwargs):
        import torch

        module = cls(*args, **kwargs)
        module.eval()
        module.double()
        index = self.built
        self.built += 1
        records = self.student_case.get("modules") or []
        if index >= len(records):
            raise AlignmentError("the student's module was not built")
        seed = int(self.case.params.get("seed", 0))
        student, values = student_params(records[index], seed, index, verify=self.verify)
        target = module_params(module)
        states = _candidate_cache(self.question.id, target, student, values, heads, head_width,
                                  records[index]["params"], seed, index)
        self.candidates_seen = max(self.candidates_seen, len(states))
        if self.candidate >= len(states):
            raise NoMoreCandidates()
        state = states[self.candidate]
        with torch.no_grad():
            for name, param in module.named_parameters():
                param.copy_(torch.from_numpy(np.asarray(state[name], dtype=np.float64)))
        return module

    def check_new_params(self, module):
        return None


_STATE_CACHE: OrderedDict = OrderedDict()


def _candidate_cache(qid, target, student, values, heads, head_width, record_params, seed, index):
    key = (qid, tuple((p.name, p.shape) for p in target), tuple(map(lambda p: (p[0], tuple(p[1]), p[2]),
                                                                   record_params)),
           heads, head_width, seed, index)
    if key in _STATE_CACHE:
        _STATE_CACHE.move_to_end(key)
        return _STATE_CACHE[key]
    try:
        states = list(candidate_state_dicts(target, student, values, heads, head_width, limit=MAX_CANDIDATES))
    except AlignmentError as error:
        states = []
        failure = error
    else:
        failure = None
    if failure is not None:
        raise AlignmentError(f"{failure}. Your parameters: {describe_params(student)}; "
                             f"expected: {describe_params(target)}")
    _STATE_CACHE[key] = states
    if len(_STATE_CACHE) > 256:
        _STATE_CACHE.popitem(last=False)
    return states


def run_variant(question: Question, answer, case_index: int, student_case: dict, candidate: int = 0,
                verify: bool = True) -> tuple[dict | None, dict | None, int]:
    """Run ``answer`` (reference or catalogue entry) in the grader on one case.

    Returns (outputs, error, number of parameter candidates). ``outputs`` is None with
    ``error`` set when the answer raised; both None when the student's parameters cannot be
    loaded into this answer's module (AlignmentError) or the candidates are exhausted.
    """
    import torch

    case = question.cases[case_index]
    recorder = JudgeCase(question, case, case_index, student_case, candidate, verify)
    try:
        with torch.no_grad():
            question.run_case(answer, case, recorder)
    except (NoMoreCandidates, AlignmentError, TamperError):
        raise
    except (BadOutput, CaseFailure) as error:
        return None, {"type": type(error).__name__, "message": str(error), "where": ""}, recorder.candidates_seen
    except Exception as error:
        return None, describe_exception(error), recorder.candidates_seen
    return recorder.outputs, None, recorder.candidates_seen


_REF_CACHE: OrderedDict = OrderedDict()


def _structure_key(student_case: dict):
    return tuple(tuple((p[0], tuple(p[1]), p[2]) for p in m["params"]) for m in student_case.get("modules") or [])


def reference_outputs(question: Question, case_index: int, student_case: dict, verify: bool = True):
    """All acceptable reference outputs for a case: list of dicts (may be empty), and the
    structural error message when the student's parameters fit no reference."""
    key = (question.id, case_index, _structure_key(student_case))
    if key in _REF_CACHE and not _needs_tensors(student_case):
        _REF_CACHE.move_to_end(key)
        return _REF_CACHE[key]
    results, structural = [], None
    for reference in question.references():
        candidate = 0
        while candidate < MAX_CANDIDATES:
            try:
                outputs, error, count = run_variant(question, reference, case_index, student_case, candidate, verify)
            except NoMoreCandidates:
                break
            except AlignmentError as error:
                structural = structural or str(error)
                break
            if error is not None:
                raise RuntimeError(f"reference for {question.id} failed on case {case_index}: {error}")
            results.append(outputs)
            candidate += 1
            if count <= candidate:
                break
    value = (results, structural)
    if not _needs_tensors(student_case):
        _REF_CACHE[key] = value
        if len(_REF_CACHE) > 512:
            _REF_CACHE.popitem(last=False)
    return value


def _needs_tensors(student_case: dict) -> bool:
    return any(m.get("tensors") for m in student_case.get("modules") or [])


# --------------------------------------------------------------------------- mistakes


def mistake_answers(question: Question, parts=None):
    """(mistake, wrong answer) for every catalogue entry (and its ``also`` forms), built with
    the grader's parts."""
    if parts is None and question.reference_parts is not None:
        parts = question.reference_parts()
    for mistake in question.catalogue:
        for answer in mistake.answers(parts):
            yield mistake, answer


def _same_error(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a.get("type") == b.get("type") and a.get("message") == b.get("message"))


def match_mistake(question: Question, data: dict, verify: bool = True):
    """The first catalogue entry whose outputs equal the student's on every case, or None."""
    for mistake, answer in mistake_answers(question):
        if _matches(question, answer, data, verify):
            return mistake
    return None


def _matches(question, answer, data, verify) -> bool:
    """A catalogue answer matches when, on every case, it returns the student's outputs or
    raises where the student's code raised; and either some outputs agreed or every
    exception is identical in type and message (so "raises everywhere" alone names nothing)."""
    outputs_agreed, messages_identical = 0, True
    for index, student_case in enumerate(data["cases"]):
        agreed = False
        candidate = 0
        while candidate < MAX_CANDIDATES:
            try:
                outputs, error, count = run_variant(question, answer, index, student_case, candidate, verify)
            except (NoMoreCandidates, AlignmentError):
                break
            student_error = student_case.get("error")
            if student_error:
                # both raised: validators may word the same shape error differently
                agreed = bool(error)
                if agreed and not _same_error(student_error, error):
                    messages_identical = False
            else:
                agreed = outputs is not None and outputs_equal(student_case["outputs"], outputs)
                if agreed:
                    outputs_agreed += 1
            if agreed:
                break
            candidate += 1
            if count <= candidate:
                break
        if not agreed:
            return False
    return outputs_agreed > 0 or messages_identical


# --------------------------------------------------------------------------- the verdict


def _error_text(error: dict, question: Question) -> str:
    kind = error.get("type")
    if kind in ("BadOutput", "CaseFailure"):
        return error["message"]
    if kind == "ForbiddenCall":
        return f"your code called a forbidden function: {error['message']}"
    where = f" ({error['where']})" if error.get("where") else ""
    message = error.get("message", "")
    if kind == "NotImplementedError" and not message:
        return f"this answer is not written yet: it still raises NotImplementedError{where}"
    return f"your code raised {kind}" + (f": {message}" if message else "") + where


def judge(question: Question, data: dict, static_hits=(), verify: bool = True) -> Result:
    """Verdict on probe output ``data`` (from :func:`autograder.probe.probe`)."""
    from .probe import single_thread

    with single_thread():
        return _judge(question, data, static_hits, verify)


def _judge(question: Question, data: dict, static_hits, verify: bool) -> Result:
    qid, points = question.id, float(question.points)

    def fail(text, mistake=None):
        return Result(qid, False, 0.0, points, f"{question.title}: not yet. {text}", mistake)

    if data.get("fatal"):
        return fail(data["fatal"])
    hits = list(dict.fromkeys(list(getattr(h, "key", h) for h in static_hits) + list(data.get("hits") or [])))
    if hits:
        details = [h.where for h in static_hits if getattr(h, "where", None)]
        text = "; ".join(f"your {question.answer_name} {describe_shortcut(key)}" for key in hits)
        if details:
            text += f" (found: {details[0]})"
        return fail("Not accepted: " + text + ".", mistake="shortcut")
    cases = data.get("cases") or []
    if len(cases) != len(question.cases):
        return fail("the checker could not run your answer on all inputs.")
    if verify:
        try:
            verify_parameters(question, cases)
        except TamperError as error:
            return fail(f"Not accepted: {error}.", mistake="tamper")
        verify = False                          # checked once here; the caches below rely on it
    problems = []
    try:
        for index, (case, student_case) in enumerate(zip(question.cases, cases)):
            if student_case.get("error"):
                problems.append((case, _error_text(student_case["error"], question)))
                continue
            references, structural = reference_outputs(question, index, student_case, verify)
            if not references:
                problems.append((case, f"your module's parameters do not fit the exercise: {structural}"))
                continue
            messages = []
            for reference in references:
                message = _compare_outputs(question, case, student_case["outputs"], reference)
                if message is None:
                    break
                messages.append(message)
            else:
                problems.append((case, messages[0]))
    except TamperError as error:
        return fail(f"Not accepted: {error}.", mistake="tamper")
    if not problems:
        return Result(qid, True, points, points,
                      f"{question.title}: correct ({len(question.cases)} input sets checked).")
    case, message = problems[0]
    text = f"On input {case.label}: {message}."
    if len(problems) > 1:
        text += f" ({len(problems)} of {len(question.cases)} input sets fail.)"
    mistake = None
    try:
        mistake = match_mistake(question, data, verify)
    except TamperError:
        mistake = None
    if mistake is not None:
        text = f"Looks like a known mistake: {mistake.title}. {mistake.hint} " + text
    return fail(text, mistake=mistake.key if mistake else None)


def verify_parameters(question: Question, cases: list) -> None:
    """Every parameter the probe reports must hold the value the checker wrote into it
    (regenerated here). Done before any cached reference is used."""
    for case, student_case in zip(question.cases, cases):
        seed = int(case.params.get("seed", 0))
        for index, record in enumerate(student_case.get("modules") or []):
            student_params(record, seed, index, verify=True)


def _compare_outputs(question: Question, case: Case, got: dict, expected: dict) -> str | None:
    for name, value in expected.items():
        if name not in got:
            return f"no {name} was returned"
        message = compare(name, got[name], value, case, question.outputs.get(name, ""))
        if message:
            return message
    return None
