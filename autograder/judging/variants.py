"""Running an answer in the grader (grader side): a reference or a catalogued mistake, on one
case's float64 inputs with the student's own parameter values loaded into it.

:class:`JudgeCase` is ``run_case``'s recorder here: it rebuilds the inputs in float64, loads the
values the checker wrote into the student's parameters (regenerated here,
:func:`autograder.judging.params.student_params`) into the answer's module by every matching
layout (:func:`autograder.judging.params.candidate_state_dicts`), and records the outputs and the
gradients mapped back onto the student's parameters. :func:`reference_outputs` runs a question's
references (which the caller takes from the catalogue and hands over) and caches their outputs.
Nothing here looks anything up in the catalogue.
"""
from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..questions.base import Case, Question
from ..questions.errors import CaseFailure
from ..questions import inputs as recipes
from ..student.probe import BadOutput, ProbeCase, describe_exception, float64_input
from .params import AlignmentError, P, TamperError, candidate_state_dicts, describe_params, student_params

MAX_CANDIDATES = 18
_MISSING_BIAS = ("a layer of the reference has a bias that none of your parameters provides (a layer built "
                 "with bias=False?)")

# --------------------------------------------------------------------------- the judge-side recorder


class NoMoreCandidates(Exception):
    pass


class NotApplicable(Exception):
    """A counterfactual change (:class:`autograder.judging.diagnosis.Change`) found nothing to
    change in this reference: it names nothing here."""


def module_params(module) -> list[P]:
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
        array = np.array(array, copy=True)
        if array.dtype.kind == "f":
            array = float64_input(array) if dtype == "float64" else array.astype(np.float64)
        tensor = torch.from_numpy(array)
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor

    def seed(self, value):
        torch.manual_seed(int(value))

    def grads(self, out, upstream, inputs: dict, module=None, params: bool = False):
        """The inputs' gradients as outputs, and with ``params`` the gradient of every
        parameter of the modules built here, in float64, mapped back onto the student's
        parameters (``self.outputs.param_grads``)."""
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
        with _without_random_init():        # every parameter is overwritten below
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


_RANDOM_INITS = ("kaiming_uniform_", "kaiming_normal_", "uniform_", "normal_", "xavier_uniform_", "xavier_normal_",
                 "trunc_normal_")


@contextmanager
def _without_random_init():
    """While a module whose parameters are all set afterwards is built: ``nn.init``'s random fills (what
    ``nn.Linear``, ``nn.Conv2d`` and ``nn.Embedding`` do to their new parameters, half of a reference
    build's time) leave the tensor as it is. The judge runs no student code."""
    saved = {name: getattr(nn.init, name) for name in _RANDOM_INITS}
    for name in _RANDOM_INITS:
        setattr(nn.init, name, _leave)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def _leave(tensor, *args, **kwargs):
    return tensor


def _entries(record: dict) -> int:
    return sum(int(np.prod(shape)) if len(shape) else 1 for _, shape, _ in record["params"])


_STATE_CACHE: OrderedDict = OrderedDict()


def _inputs_key() -> tuple:
    """Which inputs (and parameter pool) are in force: part of the key of every cache of values
    computed from them, since every run of a notebook draws its own."""
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
    case = question.cases[case_index]
    recorder = JudgeCase(question, case, case_index, student_case, candidate, verify)
    try:
        with torch.set_grad_enabled(needs_grad(question)):
            question.run_case(answer, case, recorder)
    except (NoMoreCandidates, AlignmentError, TamperError, NotApplicable):
        raise
    except (BadOutput, CaseFailure) as error:
        return None, {"type": type(error).__name__, "message": str(error), "where": ""}, recorder.candidates_seen
    except Exception as error:  # noqa: BLE001 - the student's code may raise anything
        return None, describe_exception(error), recorder.candidates_seen
    return recorder.outputs, None, recorder.candidates_seen


def clear_caches() -> None:
    """Forget every parameter layout and reference output kept so far."""
    _STATE_CACHE.clear()
    _REF_CACHE.clear()


def needs_grad(question: Question) -> bool:
    """Whether a question's cases check gradients (the judge then records the graph)."""
    return any(case.params.get("grads") for case in question.cases)


_REF_CACHE: OrderedDict = OrderedDict()


def _structure_key(student_case: dict):
    return tuple(tuple((p[0], tuple(p[1]), p[2]) for p in m["params"]) for m in student_case.get("modules") or [])


def reference_outputs(question: Question, references: Callable[[], list], case_index: int, student_case: dict,
                      verify: bool = True, accept=None):
    """All acceptable reference outputs for a case: list of dicts (may be empty), and the
    structural error message when the student's parameters fit no reference. ``references``:
    the question's catalogue entry's ``references`` (the caller looked it up).

    ``accept(outputs) -> bool``: stop at the first reference outputs it accepts (the list then
    ends with them, and is not cached); every run of a notebook draws its own inputs, so the
    references of a passing answer are computed once and only as far as needed."""
    key = (question.id, case_index, _structure_key(student_case), _inputs_key())
    if key in _REF_CACHE:
        _REF_CACHE.move_to_end(key)
        return _REF_CACHE[key]
    results, structural = [], None
    for reference in references():
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

