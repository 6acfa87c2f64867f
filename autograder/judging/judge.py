"""The judge: compares probed outputs with ``vitref`` and names known mistakes (grader side).

It trusts nothing from the student's process but plain arrays: inputs are rebuilt here, the
parameter values are regenerated here (:func:`autograder.judging.params.student_params`), and every
reference and every catalogue variant is computed here, in float64. Properties are decided from
values too: a float64 case must agree with the float64 reference to float64 precision
(:data:`autograder.judging.messages.RTOL64`), every parameter gradient the reference has must
arrive as an array equal to the reference's (:func:`_compare_param_grads`), and where the
exercise's layers have biases, a candidate that would fill a missing bias with zeros is refused.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..questions.base import Case, Question
from ..student.probe import BadOutput, CaseFailure, ProbeCase, describe_exception, float64_input
from .catalogue import entry
from .messages import compare, loosely_equal, outputs_equal, precision_problem
from .model import Result
from .params import AlignmentError, P, TamperError, candidate_state_dicts, describe_params, student_params
from .scan import describe as describe_shortcut

MAX_CANDIDATES = 18
# a reference gradient this large is not a rounding error of a zero one (the keys' bias: ~1e-17)
CLEARLY_NONZERO = 1e-6


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


class Observed(dict):
    """A variant's outputs (name -> array), and ``param_grads``: ``(module index, student
    parameter index) -> array or None``, the variant's gradient of each of the student's
    parameters (mapped back through the candidate's layout), None where the variant's
    output does not reach it. Only the keys of the dict are outputs (diagnoses iterate them)."""

    param_grads: dict

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.param_grads = {}


class JudgeCase(ProbeCase):
    """``run_case``'s recorder in the grader: float64 inputs, the student's weights."""

    mode = "judge"

    def __init__(self, question: Question, case: Case, index: int, student_case: dict, candidate: int,
                 verify: bool):
        self.question, self.case, self.index = question, case, index
        self.student_case, self.candidate, self.verify = student_case, candidate, verify
        self.outputs: Observed = Observed()
        self.modules, self.error = [], None
        self.notes: dict = {}           # what a recipe notes about a reference is never read here
        self.built: list = []           # (module, record index, target name -> student entry ids)
        self.candidates_seen = 1

    def tensor(self, array, dtype=None, requires_grad=False):
        import torch
        array = np.array(array, copy=True)
        if array.dtype.kind == "f":
            array = float64_input(array) if dtype == "float64" else array.astype(np.float64)
        tensor = torch.from_numpy(array)
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor

    def seed(self, value):
        import torch
        torch.manual_seed(int(value))

    def grads(self, out, upstream, inputs: dict, module=None, params: bool = False):
        """The inputs' gradients as outputs, and with ``params`` the gradient of every
        parameter of the modules built here, in float64, mapped back onto the student's
        parameters (``self.outputs.param_grads``)."""
        import torch
        named = []
        if params:
            for built, m, index in self.built:
                for name, param in built.named_parameters():
                    if param.requires_grad:
                        named.append((m, index[name], param))
        wrt = list(inputs.values()) + [param for _, _, param in named]
        with torch.enable_grad():
            found = torch.autograd.grad((out * upstream.to(out.dtype)).sum(), wrt, allow_unused=True)
        for (name, tensor), grad in zip(inputs.items(), found):
            self.output(f"grad_{name}", grad if grad is not None else torch.zeros_like(tensor))
        if params:
            self.outputs.param_grads.update(self._student_layout(named, found[len(inputs):]))

    def _student_layout(self, named, found) -> dict:
        """The gradients of the target parameters, carried back onto the student's parameters:
        the candidate is a gather (each target entry is a student entry, or a zero fill), so
        the gradient of a student entry is the sum of the gradients of the target entries it
        fills. A student parameter none of whose entries is reached gets None."""
        import torch

        records = self.student_case.get("modules") or []
        by_module: dict = {}
        for (m, ids, _), grad in zip(named, found):
            if grad is None:
                continue
            total, hit = by_module.setdefault(m, (np.zeros(_entries(records[m]) + 1), np.zeros(
                _entries(records[m]) + 1, dtype=bool)))
            flat = ids.reshape(-1)
            np.add.at(total, flat, grad.detach().to(torch.float64).numpy().reshape(-1))
            hit[flat] = True
        result: dict = {}
        for m, (total, hit) in by_module.items():
            start = 1
            for i, (_, shape, _) in enumerate(records[m]["params"]):
                size = int(np.prod(shape)) if len(shape) else 1
                part = slice(start, start + size)
                result[(m, i)] = total[part].reshape(tuple(shape)) if hit[part].any() else None
                start += size
        return result

    def call(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def build(self, cls, *args, heads=None, head_width=None, train=False, dtype=None, **kwargs):
        import torch

        module = cls(*args, **kwargs)
        module.train(bool(train))
        module.double()
        index = len(self.built)
        records = self.student_case.get("modules") or []
        if index >= len(records):
            raise AlignmentError("the student's module was not built")
        seed = int(self.case.params.get("seed", 0))
        student, values = student_params(records[index], seed, index, verify=self.verify)
        target = module_params(module)
        states = _candidate_cache(self.question.id, target, student, values, heads, head_width,
                                  records[index]["params"], seed, index,
                                  layouts=self.case.params.get("fused_layouts"),
                                  biases=bool(self.case.params.get("biases")))
        self.candidates_seen = max(self.candidates_seen, len(states))
        if self.candidate >= len(states):
            raise NoMoreCandidates()
        state, ids = states[self.candidate]
        with torch.no_grad():
            for name, param in module.named_parameters():
                param.copy_(torch.from_numpy(np.asarray(state[name], dtype=np.float64)))
        self.built.append((module, index, ids))
        return module

    def check_new_params(self, module):
        return None


def _entries(record: dict) -> int:
    return sum(int(np.prod(shape)) if len(shape) else 1 for _, shape, _ in record["params"])


_STATE_CACHE: OrderedDict = OrderedDict()


def _inputs_key() -> tuple:
    """Which inputs (and parameter pool) are in force: part of the key of every cache of values
    computed from them, since every run of a notebook draws its own."""
    from ..questions import inputs as recipes

    return recipes.current().cache_key()


def _candidate_cache(qid, target, student, values, heads, head_width, record_params, seed, index, layouts=None,
                     biases=False):
    """The candidates (:func:`autograder.judging.params.candidate_state_dicts`) as
    ``(state, ids)``: ``state`` target name -> values, ``ids`` target name -> the index of the
    student's entry each target entry holds (1-based over the student's parameters in order,
    0 for a zero fill). Found once by running the matching on the entries' ids, so values and
    gradients travel the same way. With ``biases`` (the exercise's layers all have one), a
    candidate that fills a bias of the reference with zeros is refused."""
    key = (qid, tuple((p.name, p.shape) for p in target), tuple(map(lambda p: (p[0], tuple(p[1]), p[2]),
                                                                   record_params)),
           heads, head_width, seed, index, layouts, biases, _inputs_key())
    if key in _STATE_CACHE:
        _STATE_CACHE.move_to_end(key)
        return _STATE_CACHE[key]
    ids, flat, start = {}, [np.zeros(1)], 1
    for p in student:
        value = np.asarray(values[p.name], dtype=np.float64)
        ids[p.name] = (start + np.arange(value.size, dtype=np.float64)).reshape(value.shape)
        flat.append(value.reshape(-1))
        start += value.size
    pool = np.concatenate(flat)
    states, failure = [], None
    try:
        for id_state in candidate_state_dicts(target, student, ids, heads, head_width, limit=MAX_CANDIDATES,
                                              layouts=layouts):
            index_state = {name: np.rint(np.asarray(v, dtype=np.float64)).astype(np.int64)
                           for name, v in id_state.items()}
            if biases and any(p.is_bias and not index_state[p.name].all() for p in target):
                failure = failure or AlignmentError(_MISSING_BIAS)
                continue
            states.append(({name: pool[i] for name, i in index_state.items()}, index_state))
    except AlignmentError as error:
        failure = error
        states = []
    if not states:
        failure = failure or AlignmentError("the parameters do not match the reference's")
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
        with torch.set_grad_enabled(_needs_grad(question)):
            question.run_case(answer, case, recorder)
    except (NoMoreCandidates, AlignmentError, TamperError):
        raise
    except (BadOutput, CaseFailure) as error:
        return None, {"type": type(error).__name__, "message": str(error), "where": ""}, recorder.candidates_seen
    except Exception as error:  # noqa: BLE001 - the student's code may raise anything
        return None, describe_exception(error), recorder.candidates_seen
    return recorder.outputs, None, recorder.candidates_seen


def _needs_grad(question: Question) -> bool:
    """Whether a question's cases check gradients (the judge then records the graph)."""
    return any(case.params.get("grads") for case in question.cases)


_REF_CACHE: OrderedDict = OrderedDict()


def _structure_key(student_case: dict):
    return tuple(tuple((p[0], tuple(p[1]), p[2]) for p in m["params"]) for m in student_case.get("modules") or [])


def reference_outputs(question: Question, case_index: int, student_case: dict, verify: bool = True,
                      accept=None):
    """All acceptable reference outputs for a case: list of dicts (may be empty), and the
    structural error message when the student's parameters fit no reference.

    ``accept(outputs) -> bool``: stop at the first reference outputs it accepts (the list then
    ends with them, and is not cached); every run of a notebook draws its own inputs, so the
    references of a passing answer are computed once and only as far as needed."""
    key = (question.id, case_index, _structure_key(student_case), _inputs_key())
    if key in _REF_CACHE:
        _REF_CACHE.move_to_end(key)
        return _REF_CACHE[key]
    results, structural = [], None
    for reference in entry(question.id).references():
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
            if accept is not None and accept(outputs):
                return results, structural
            candidate += 1
            if count <= candidate:
                break
    value = (results, structural)
    _REF_CACHE[key] = value
    if len(_REF_CACHE) > 512:
        _REF_CACHE.popitem(last=False)
    return value


# --------------------------------------------------------------------------- mistakes


def mistake_answers(question: Question, parts=None):
    """(mistake, wrong answer) for every catalogue entry (and its ``also`` forms), built with
    the grader's parts."""
    catalogue = entry(question.id)
    if parts is None and catalogue.reference_parts is not None:
        parts = catalogue.reference_parts()
    for mistake in catalogue.catalogue:
        for answer in mistake.answers(parts):
            yield mistake, answer


def _same_error(a: dict | None, b: dict | None) -> bool:
    return bool(a and b and a.get("type") == b.get("type") and a.get("message") == b.get("message"))


def match_mistake(question: Question, data: dict, verify: bool = True):
    """The first catalogue entry whose outputs equal the student's on every case, or None.

    Where the student's code raised, an entry that raised the same exception there (type and
    message) is preferred to one that raised the same type, and that to one that raised
    another (two mistakes may fail on the same inputs: a class token not repeated over the
    batch and attention maps stacked the wrong way)."""
    if question.kind == "value":
        return _match_value(question, data)
    found = entry(question.id)
    if found.match is not None:
        key = found.match(question, data)
        return next((m for m in found.catalogue if m.key == key), None)
    best, best_rank = None, 0
    for mistake, answer in mistake_answers(question):
        rank = _matches(question, answer, data, verify)
        if rank == 3:
            return mistake
        if rank > best_rank:
            best, best_rank = mistake, rank
    return best


def _match_value(question: Question, data: dict):
    """A value question's catalogued wrong value equal to the student's answer (under the
    question's tolerance), or None."""
    from .catalogue.concepts import values_close

    cases = data.get("cases") or []
    if len(cases) != 1 or cases[0].get("error"):
        return None
    got = (cases[0].get("outputs") or {}).get("answer")
    if got is None:
        return None
    got = float(np.asarray(got).reshape(-1)[0])
    for mistake, answer in mistake_answers(question):
        if values_close(got, answer, question.cases[0].params):
            return mistake
    return None


def _matches(question, answer, data, verify) -> int:
    """A catalogue answer matches when, on every case, it returns the student's outputs or
    raises where the student's code raised; and either some outputs agreed or every
    exception is identical in type and message (so "raises everywhere" alone names nothing).
    3: a match whose exceptions (if any) are the student's, type and message; 2: of the
    student's types; 1: another match; 0: none."""
    outputs_agreed, messages_identical, types_identical = 0, True, True
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
                if agreed and error is not None and student_error.get("type") != error.get("type"):
                    types_identical = False
            else:
                agreed = (outputs is not None and outputs_equal(student_case["outputs"], outputs)
                          and _param_grads_equal(student_case, outputs))
                if agreed:
                    outputs_agreed += 1
            if agreed:
                break
            candidate += 1
            if count <= candidate:
                break
        if not agreed:
            return 0
    if not (outputs_agreed > 0 or messages_identical):
        return 0
    return 3 if messages_identical else 2 if types_identical else 1


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
    """Verdict on probe output ``data`` (from :func:`autograder.student.probe.probe`)."""
    from ..student.probe import single_thread

    with single_thread():
        return _judge(question, data, static_hits, verify)


def _judge(question: Question, data: dict, static_hits, verify: bool) -> Result:
    qid, points = question.id, float(question.points)

    def fail(text, mistake=None):
        return Result(qid, False, 0.0, points, f"{question.title}: not yet. {text}", mistake)

    if data.get("fatal"):
        return fail(data["fatal"])
    hits = list(dict.fromkeys(getattr(h, "key", h) for h in static_hits))
    if hits:
        details = [h.where for h in static_hits if getattr(h, "where", None)]
        text = "; ".join(f"your {question.answer_name} {describe_shortcut(key)}" for key in hits)
        if details:
            text += f" (found: {details[0]})"
        return fail("Not accepted: " + text + ".", mistake="shortcut")
    cases = data.get("cases") or []
    forbidden = [c["error"] for c in cases
                 if isinstance(c, dict) and (c.get("error") or {}).get("type") == "ForbiddenCall"]
    if forbidden:
        return fail(f"Not accepted: your {question.answer_name} called a function this exercise forbids "
                    f"({forbidden[0].get('message', '')}).", mistake="shortcut")
    if len(cases) != len(question.cases):
        return fail("the checker could not run your answer on all inputs.")
    if verify:
        try:
            verify_parameters(question, cases)
        except TamperError as error:
            return fail(f"Not accepted: {error}.", mistake="tamper")
        verify = False                          # checked once here; the caches below rely on it
    problems = []
    verdict = entry(question.id).verdict
    try:
        for index, (case, student_case) in enumerate(zip(question.cases, cases)):
            if student_case.get("error"):
                problems.append((case, _error_text(student_case["error"], question)))
                continue
            prop = property_problem(question, case, student_case)
            if prop:
                problems.append((case, prop))
                continue
            if verdict is not None:
                message = verdict(question, case, student_case)
                if message:
                    problems.append((case, message))
                continue
            references, structural = reference_outputs(
                question, index, student_case, verify,
                accept=lambda outputs: _compare_outputs(question, case, student_case["outputs"], outputs) is None)
            if not references:
                problems.append((case, f"your module's parameters do not fit the exercise: {structural}"))
                continue
            messages = []
            for reference in references:
                message = _compare_case(question, case, student_case, reference)
                if message is None:
                    break
                messages.append((_outputs_matching(question, case, student_case["outputs"], reference), message))
            else:
                # the message of the reference the answer comes closest to (most outputs equal): with two
                # accepted conventions (fully masked rows zero or uniform) the other one's differences mislead
                problems.append((case, max(messages, key=lambda m: m[0])[1]))
    except TamperError as error:
        return fail(f"Not accepted: {error}.", mistake="tamper")
    if not problems:
        checked = "" if question.kind == "value" else f" ({len(question.cases)} input sets checked)"
        summary = entry(question.id).summary
        if summary is not None:
            reached = summary(question, data)
            checked = f": {reached}" if reached else checked
        return Result(qid, True, points, points, f"{question.title}: correct{checked}.")
    case, message = problems[0]
    text = f"{message}." if question.kind == "value" else f"On input {case.label}: {message}."
    if len(problems) > 1:
        text += f" ({len(problems)} of {len(question.cases)} input sets fail.)"
    mistake = None
    try:
        mistake = match_mistake(question, data, verify)
    except TamperError:
        mistake = None
    if mistake is not None:
        text = f"Looks like a known mistake: {mistake.title}. {mistake.hint} " + text
    else:
        diagnose = entry(question.id).diagnose
        try:
            found = diagnose(question, data) if diagnose is not None else None
        except Exception:  # noqa: BLE001 - a diagnosis is a bonus, never a reason to fail the verdict
            found = None
        if found:
            text = f"{found.rstrip('.')}. " + text
    return fail(text, mistake=mistake.key if mistake else None)


_MISSING_BIAS = ("a layer of the reference has a bias that none of your parameters provides (a layer built "
                 "with bias=False?)")


def property_problem(question: Question, case: Case, student_case: dict) -> str | None:
    """A property decided before any reference runs: where the exercise's layers all have a
    bias (``biases=True``), a parameter named as a layer's weight with no bias beside it.
    Read from the reported names, it can only fail an answer; the guarantee is the
    candidates' (a reference bias is never filled with zeros in those cases). Precision
    (float64 in, float64 out) and parameter gradients are decided from values, in
    :func:`_compare_case`."""
    if case.params.get("biases"):
        missing = _missing_bias(student_case)
        if missing:
            return (f"the layer {missing} has a weight but no bias (built with bias=False?): the exercise's "
                    f"nn.Linear / nn.Conv2d / nn.LayerNorm layers keep their bias")
    return None


def _missing_bias(student_case: dict) -> str | None:
    """The first nn.Linear / conv / LayerNorm of the student's modules that has a weight and
    no bias (cases with ``biases=True``: the exercise's layers all have one), or None."""
    for record in student_case.get("modules") or []:
        params = record.get("params") or []
        names = {p[0] for p in params}
        for name, _shape, owner in params:
            prefix, _, leaf = name.rpartition(".")
            if leaf == "weight" and (owner in ("linear", "conv") or "norm" in str(owner).lower()):
                if (f"{prefix}.bias" if prefix else "bias") not in names:
                    kind = {"linear": "nn.Linear", "conv": "nn.Conv2d"}.get(owner, owner)
                    return f"{prefix or record.get('class', 'of your module')} ({kind})"
    return None


def _wanted(name: str, fragments) -> bool:
    """Whether the gradient check covers parameter ``name``: it contains one of the fragments
    (all parameters when there are only exclusions), and none of the ``"!fragment"`` ones (e.g.
    ``"!key.bias"``: the keys' bias adds the same amount to every score of a query, which the
    softmax cancels, so its gradient is zero by design)."""
    name = name.lower()
    include = [f for f in fragments if not f.startswith("!")]
    if any(f[1:] in name for f in fragments if f.startswith("!")):
        return False
    return not include or any(f in name for f in include)


def verify_parameters(question: Question, cases: list) -> None:
    """Every parameter the probe reports must hold the value the checker wrote into it
    (regenerated here). Done before any cached reference is used."""
    for case, student_case in zip(question.cases, cases):
        seed = int(case.params.get("seed", 0))
        for index, record in enumerate(student_case.get("modules") or []):
            student_params(record, seed, index, verify=True)


def _outputs_matching(question: Question, case: Case, got: dict, expected: dict) -> int:
    """How many of ``expected``'s outputs ``got`` matches (to float32's precision: an answer
    that lost float64's is closest to the reference it would otherwise match)."""
    return sum(name in got and loosely_equal(name, got[name], value, case) for name, value in expected.items())


def _compare_outputs(question: Question, case: Case, got: dict, expected: dict) -> str | None:
    for name, value in expected.items():
        if name not in got:
            return f"no {name} was returned"
        message = compare(name, got[name], value, case, question.outputs.get(name, ""))
        if message:
            return message
    return None


def _compare_case(question: Question, case: Case, student_case: dict, expected: dict) -> str | None:
    """In order: a parameter the reference trains and the answer does not (cases with
    ``param_grads``); an output right only to float32's precision in a float64 case; the
    outputs; the parameters' gradients."""
    checked = case.params.get("param_grads")
    got = student_case.get("outputs") or {}
    message = _compare_param_grads(case, student_case, expected, presence=True) if checked else None
    message = message or next((m for name, value in expected.items() if name in got
                               for m in [precision_problem(name, got[name], value, case)] if m), None)
    message = message or _compare_outputs(question, case, got, expected)
    if message is None and checked:
        message = _compare_param_grads(case, student_case, expected)
    return message


def _compare_param_grads(case: Case, student_case: dict, expected: dict, presence: bool = False) -> str | None:
    """Each of the student's parameters that the reference's output reaches (and that the
    case checks: ``param_grads`` True or name fragments) must come with a gradient array equal
    to the reference's float64 gradient, carried onto the student's layout by the same
    candidate that loaded the values. No array: the parameter is frozen or detached; an
    array of zeros where the reference's is not: detached or unused. ``presence``: only those
    two. Nothing the student's process says about a parameter decides this, only the arrays
    it sent."""
    wanted = case.params.get("param_grads")
    records = student_case.get("modules") or []
    for (m, i), value in sorted(getattr(expected, "param_grads", {}).items()):
        if value is None or m >= len(records) or i >= len(records[m].get("params") or []):
            continue
        name = str(records[m]["params"][i][0])
        if wanted is not True and not _wanted(name, wanted):
            continue            # a parameter this exercise does not use yet (e.g. positions before Q4)
        got = (records[m].get("grads") or {}).get(str(i))
        trained = float(np.max(np.abs(value), initial=0.0)) > CLEARLY_NONZERO
        if got is None and not trained:
            continue            # the reference's gradient is zero too (the keys' bias): nothing to train
        if got is None:
            return (f"the gradient of the parameter {name} is missing: no gradient reaches it, so it would never "
                    f"be trained (frozen with requires_grad=False, or detached from the output with .detach() "
                    f"or .data)")
        got = np.asarray(got)
        if got.shape == value.shape and trained and not np.any(got):
            return (f"the gradient of the parameter {name} is zero: the output does not depend on it through "
                    f"autograd (detached with .detach() or .data, or not used)")
        message = None if presence else compare(f"the gradient of the parameter {name}", got, value, case,
                                                key="param_grads")
        if message:
            return message
    return None


def _param_grads_equal(student_case: dict, expected: dict) -> bool:
    """For naming mistakes: the variant's parameter gradients are the student's (loose
    tolerance; a parameter the variant does not reach is not compared)."""
    records = student_case.get("modules") or []
    for (m, i), value in getattr(expected, "param_grads", {}).items():
        if m >= len(records):
            return False
        got = (records[m].get("grads") or {}).get(str(i))
        if value is None:
            continue
        if got is None or not outputs_equal({"g": got}, {"g": value}):
            return False
    return True


def value_property(question: Question, case: Case, student_case: dict, references: list) -> str | None:
    """The properties decided from values, when every acceptable reference finds one: a
    parameter the reference trains whose gradient is missing or zero (cases with
    ``param_grads``), an output right only to float32's precision in a float64 case."""
    found = []
    for reference in references:
        message = (_compare_param_grads(case, student_case, reference, presence=True)
                   if case.params.get("param_grads") else None)
        if message is None:
            got = student_case.get("outputs") or {}
            message = next((m for name, value in reference.items() if name in got
                            for m in [precision_problem(name, got[name], value, case)] if m), None)
        if message is None:
            return None
        found.append(message)
    return found[0] if found else None


@dataclass
class CaseRow:
    """One case of a probe, judged the judge's way (for the catalogues' diagnoses).

    ``status``: "ok" (a reference matches), "error" (the answer raised: ``detail`` is the error),
    "property" (a property failed: ``detail`` is the sentence), "structure" (the parameters fit
    no reference) or "differs"; ``references``: the acceptable reference outputs (cached)."""

    index: int
    case: Case
    student: dict
    status: str
    detail: Any = None
    references: list = field(default_factory=list)


def case_rows(question: Question, data: dict) -> list[CaseRow]:
    """Every case of ``data`` as a :class:`CaseRow`: the one loop the diagnoses share."""
    rows = []
    for index, (case, student) in enumerate(zip(question.cases, data.get("cases") or [])):
        if student.get("error"):
            rows.append(CaseRow(index, case, student, "error", student["error"]))
            continue
        prop = property_problem(question, case, student)
        if prop:
            rows.append(CaseRow(index, case, student, "property", prop))
            continue
        references, _ = reference_outputs(question, index, student, verify=False)
        if not references:
            rows.append(CaseRow(index, case, student, "structure"))
            continue
        prop = value_property(question, case, student, references)
        if prop:
            rows.append(CaseRow(index, case, student, "property", prop, references))
            continue
        matched = any(_compare_case(question, case, student, r) is None for r in references)
        rows.append(CaseRow(index, case, student, "ok" if matched else "differs", None, references))
    return rows


def judge_outcome(question: Question, outcome, cells: list[str], flags=None) -> Result:
    """The verdict on one question of a submission run by a host (:mod:`autograder.hosts.driver`):
    what the student's process sent for it, the static scan of the notebook's ``cells``,
    and the flags of the notebook (:func:`autograder.judging.scan.flags`; ``flags`` passes them
    when the caller has them already). A flag holds the score for review: the automatic score
    stays in the result, with ``held`` naming the flags (see :func:`autograder.judging.scan.holds`)."""
    import dataclasses

    from ..questions import inputs as recipes
    from .scan import holds, scan_source
    from .scan import flags as scan_flags

    points = float(question.points)
    if flags is None:
        try:
            flags = scan_flags(cells)
        except Exception:  # noqa: BLE001 - a scan that fails holds nothing; the score is still computed
            flags = []
    got = outcome.probes.get(question.id)
    if got is None:
        result = Result(question.id, False, 0.0, points, outcome.missing_reason(question))
    elif "unavailable" in got:
        result = Result(question.id, False, 0.0, points, f"{question.title}: {got['unavailable']}")
    else:
        try:
            hits = scan_source(cells, question.answer_name, question.forbidden)
        except Exception:  # noqa: BLE001 - the scan must never block a grade
            hits = []
        try:
            # the inputs of the run that produced this result (each run draws its own)
            source = got.get("source") or recipes.current()
            with recipes.using(source):
                result = judge(question, got["data"], static_hits=hits)
        except Exception as error:  # noqa: BLE001 - a malformed probe result is a zero, not a crash
            result = Result(question.id, False, 0.0, points,
                            f"{question.title}: the answer's outputs could not be read "
                            f"({type(error).__name__}: {str(error)[:200]})")
    texts = tuple(f.text() if hasattr(f, "text") else str(f) for f in flags)
    return dataclasses.replace(result, flags=texts, held=holds(question, flags))
