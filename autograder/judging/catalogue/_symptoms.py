"""Symptoms many questions share (grader side): mistakes recognised from what the failed cases
show, through :class:`autograder.judging.diagnosis.View`, when no wrong answer or changed
reference reproduced the student's outputs. Each is a :class:`~autograder.judging.model.Mistake`
with ``detect(view) -> sentence or None``; a question lists the ones that apply to it.

They read markers of the cases (params): ``dtype="float64"``, a mask (``mask``/``causal``,
``full_rows``), ``dropout`` with ``train``, ``drop_p``/``forward_drop_p`` with ``base_label``,
``grads``, ``attention`` (return_attention=True), ``tests`` (the one property a case isolates),
and the outputs' names (``out``, ``weights``, ``P``, ``softmax``, ``tokens``).
"""
from __future__ import annotations

import numpy as np
import torch

from ...questions.base import Case
from ...questions.common import case_mask
from ..diagnosis import View
from ..messages import FLOAT32_ONLY, compare, outputs_equal, precision_problem
from ..model import Mistake
from ..variants import JudgeCase, needs_grad

MARKERS = ("mask", "causal", "dropout", "dtype", "grads", "attention")


def symptom(key: str, title: str, hint: str, ask: str, detect) -> Mistake:
    return Mistake(key, title, hint, ask=ask, detect=detect)


def _has_mask(case) -> bool:
    return "mask" in case.params or "causal" in case.params


def _differs(row) -> bool:
    return row.status in ("differs", "structure")


def _same(a, b) -> bool:
    return a is not None and b is not None and outputs_equal(a, b)


def _outputs(row) -> dict:
    return row.student.get("outputs") or {}


# --------------------------------------------------------------------------- properties of any answer


def _with_case(fix: str, row, sentence: str, first) -> str:
    """The symptom's sentence in the full feedback: ``fix``, then what was found on ``row``'s case
    unless that case is the failure the feedback shows (``first``). The case's own sentence says
    what is wrong and never how to fix it: the first step of the feedback shows it, with a question."""
    fix = fix.rstrip(".")
    return fix if row is first else f"{fix}. On input {row.case.label}: {sentence}"


def _found_property(view: View, words: tuple, fix: str) -> str | None:
    """The first property of a case (a failed case's own sentence, or one decided from values)
    containing one of ``words``, as :func:`_with_case` gives it; None when there is none."""
    first = next((row for row in view.failing), None)
    for row in view.rows:
        if row.status == "property" and any(w in str(row.detail) for w in words):
            return _with_case(fix, row, str(row.detail), first)
    return None


def property_symptom(key: str, title: str, hint: str, ask: str, *words: str) -> Mistake:
    """A mistake found as a property of a case containing one of ``words``."""
    return symptom(key, title, hint, ask, lambda view: _found_property(view, words, hint))


PARAMETER_NOT_TRAINED = property_symptom(
    "parameter_not_trained", "a parameter the output does not reach through autograd",
    "Compute the output from the parameters with torch operations only: no .detach(), .data, numpy, "
    "torch.no_grad() or requires_grad=False on the way.",
    "Which of your parameters would never change in training: is it used, and is the path from it to the "
    "output one autograd can follow?",
    "gradient of the parameter")

FLOAT32_FIX = ("Create every intermediate tensor in the input's dtype (dtype=x.dtype, .to(x.dtype)), never with a "
               "fixed float32 (.float(), torch.zeros(...) without dtype)")


def _float32(view: View) -> str | None:
    """A float64 case right to float32's precision only (a property of the case, or, where several
    parameter layouts were tried, of the layout whose outputs the answer is closest to): the fix,
    followed by that case's sentence where the feedback's failure is another case's."""
    found = _found_property(view, (FLOAT32_ONLY,), FLOAT32_FIX)
    if found:
        return found
    first = next((row for row in view.failing), None)
    for row in view.failing:
        got = _outputs(row)
        for reference in row.references if row.status == "differs" else ():
            message = next((m for name, value in reference.items() if name in got
                            for m in [precision_problem(name, got[name], value, row.case)] if m), None)
            if message:
                return _with_case(FLOAT32_FIX, row, message, first)
    return None


FLOAT32_PRECISION = symptom(
    "float32_precision", "float64 inputs computed in float32", FLOAT32_FIX,
    "Where does a tensor of your code get float32, whatever the dtype of the inputs?", _float32)

BIAS_MISSING = property_symptom(
    "bias_missing", "a layer built without its bias",
    "Keep the bias of every nn.Linear / nn.Conv2d / nn.LayerNorm of the exercise (bias=True, the default).",
    "Which of your layers has a weight but no bias?",
    "but no bias")

PROPERTIES = (PARAMETER_NOT_TRAINED, FLOAT32_PRECISION, BIAS_MISSING)


def _fresh_class_token(view: View) -> str | None:
    """The class token is not the module's parameter: the parameter named like a class token gets no
    gradient (or a zero one) while the outputs that depend on it differ."""
    for row in view.rows:
        detail = str(row.detail or "") if row.status == "property" else ""
        if "gradient of the parameter" in detail and "cls" in detail.split("gradient of the parameter")[1][:24]:
            if any(r.status == "differs" for r in view.rows):
                return ("the class token your model uses is not its parameter self.cls_token: the outputs differ and "
                        "no gradient reaches self.cls_token (a new tensor made in forward, e.g. torch.randn(1, 1, "
                        "dim) or torch.zeros, instead of the module's parameter)")
    return None


FRESH_CLASS_TOKEN = symptom(
    "class_token_not_parameter", "a class token made in forward instead of the parameter",
    "Make the class token once, in __init__, as nn.Parameter (self.cls_token), and use that parameter in forward, "
    "repeated for every image.",
    "Your class token differs from run to run and training never changes it: where is it created, and is it one "
    "of the module's parameters?", _fresh_class_token)


# --------------------------------------------------------------------------- errors


def _integer_times_float(view: View) -> str | None:
    messages = [m for m in view.errors()]
    if any("long int" in m or ("Long" in m and "dtype" in m) for m in messages):
        return ("an integer tensor (int64: F.one_hot's result, torch.arange, a mask) is multiplied with "
                "floating-point numbers: convert it first with .to(weight.dtype) (or .to(x.dtype))")
    return None


def _float64_raises(view: View) -> str | None:
    failing = view.failing
    if failing and all(r.case.params.get("dtype") == "float64" for r in failing) and any(
            r.status == "error" and ("dtype" in str(r.detail.get("message", ""))
                                     or "double" in str(r.detail.get("message", "")).lower()) for r in failing):
        return ("your code works with float32 inputs but raises with float64 ones: a tensor made with a fixed "
                "dtype (.float(), torch.zeros(...) or torch.ones(...) without dtype=) meets the float64 inputs; "
                "create it in the input's dtype (dtype=x.dtype, or .to(x.dtype))")
    return None


def _dtype_mix(view: View) -> str | None:
    for text in view.errors():
        low = text.lower()
        if ("dtype" in low or "scalar type" in low or "should be the same" in low) and (
                "double" in low or "float64" in low):
            return ("your code mixes float32 and float64 tensors (it fails on the float64 inputs): create or cast "
                    "intermediate tensors with the input's dtype (e.g. dtype=x.dtype, .to(x.dtype)) instead of "
                    ".float() or a default-dtype torch.zeros/torch.tensor")
    return None


INTEGER_TIMES_FLOAT = symptom(
    "integer_times_float", "an integer tensor in floating-point arithmetic",
    "Convert integer tensors (F.one_hot, torch.arange, masks) to the floats' dtype before multiplying.",
    "Your code raises a dtype error: which of your tensors holds integers where numbers with decimals meet it?",
    _integer_times_float)

FLOAT64_RAISES = symptom(
    "float64_raises", "a tensor with a fixed dtype meets float64 inputs",
    "Create intermediate tensors in the input's dtype (dtype=x.dtype), not with .float() or a default dtype.",
    "Your code works with float32 inputs and raises with float64 ones: which tensor of yours does not follow the "
    "dtype of the inputs?", _float64_raises)

FLOAT_MIX = symptom(
    "float32_float64_mix", "float32 and float64 tensors mixed",
    "Create or cast intermediate tensors with the input's dtype (dtype=x.dtype, .to(x.dtype)).",
    "Your code raises on the float64 inputs only: which tensor of yours has a dtype of its own?", _dtype_mix)


def said(key: str, title: str, hint: str, ask: str, *words: str) -> Mistake:
    """A mistake the recipe (or the probe) names itself: a case raised its sentence, which contains
    one of ``words``."""
    def detect(view: View) -> str | None:
        first = next((row for row in view.failing), None)
        for row in view.failing:
            message = str((row.detail or {}).get("message", "")) if row.status == "error" else ""
            if any(w in message for w in words):
                return _with_case(hint, row, message, first)
        return None
    return symptom(key, title, hint, ask, detect)


# the sentences of the recipes and the probe (autograder/questions, autograder/student/probe.py)
RECIPE_SAYS = (
    said("returns_none", "nothing returned", "End the function (or forward) with return and the result.",
         "What does your function give back to its caller?", "did you forget a return statement"),
    said("pair_expected", "one value returned where the exercise expects a pair",
         "Return the tuple the exercise describes, e.g. (out, weights) with return_attention=True.",
         "What should your forward return when it is asked for more than the output?", "should return a tuple ("),
    said("not_differentiable", "an output autograd cannot follow back",
         "Compute the output with torch operations on the inputs: no numpy, .detach(), .data or torch.no_grad().",
         "No gradient flows back from your output: which step of your computation leaves torch's autograd?",
         "does not depend differentiably"),
    said("loss_not_a_tensor", "a loss that is not a tensor",
         "Compute the loss with torch operations on the logits and return the 0-dim tensor (no numpy, .item(), "
         "float()).", "Can loss.backward() be called on what your function returns?", "not a torch tensor"),
    said("parameters_made_in_forward", "layers or parameters created in forward",
         "Create every layer and nn.Parameter in __init__; forward only uses them.",
         "Which of your layers is created again at every call, and would it ever be trained?",
         "creates new parameters", "was replaced after the module was built"),
    said("input_changed_in_place", "the input changed in place",
         "Return a new tensor (x + ...) instead of writing into x (x += ..., x.add_).",
         "Does your code change the tensor it was given, which its caller and autograd still need?",
         "changed its input x in place"),
)


RETURNS_TUPLE = said(
    "returns_a_tuple", "a tuple returned where the output tensor alone is expected",
    "Return the tensor itself; return a pair only where the exercise asks for one (return_attention=True).",
    "Your forward returns a tuple where the exercise expects one tensor: when should it return a pair, and when "
    "the output alone?", "should return the output tensor alone")


# --------------------------------------------------------------------------- gradients


def _gradients_only(view: View) -> str | None:
    failing = view.failing
    if not failing or any(view.kind(r) != "grad" for r in failing):
        return None
    row = failing[0]
    reference = view.closest(row) or {}
    got = _outputs(row)
    names = [k[len("grad_"):] for k in reference if k.startswith("grad_") and k in got
             and not outputs_equal({k: got[k]}, {k: reference[k]})]
    return (f"Your output is right but its gradient with respect to {' and '.join(names) or 'the input'} is not: "
            f"a path from the input to the output is cut or changed (.detach(), .data, torch.no_grad(), numpy, "
            f"or an in-place change)")


GRADIENT_DIFFERS = symptom(
    "gradient_differs", "right outputs, wrong gradients",
    "Keep the whole computation in torch operations autograd follows: no .detach(), .data, numpy, "
    "torch.no_grad() or in-place changes of a tensor autograd still needs.",
    "Your outputs are right and their gradients are not: where does autograd lose the path from the input to "
    "the output?", _gradients_only)


def _output_right_grad_wrong(view: View) -> str | None:
    failing = view.failing
    if failing and all(r.case.params.get("grads") for r in failing) and all(_differs(r) for r in failing):
        for row in failing:
            if any(_same({"out": _outputs(row).get("out")}, {"out": r.get("out")}) for r in row.references):
                return ("the output is right but its gradient is not: part of the computation is cut from autograd "
                        "(.detach(), .data, numpy, torch.no_grad())")
    return None


OUTPUT_RIGHT_GRADIENT_WRONG = symptom(
    "gradient_cut", "right output, a gradient cut",
    "Keep every step in torch operations autograd follows (no .detach(), .data, numpy, torch.no_grad()).",
    "Your output is right but its gradient is not: which step of your computation does autograd not see?",
    _output_right_grad_wrong)


def _failing_tags(view: View) -> frozenset | None:
    """The ``tests`` tags of the failing cases (those a reference could be run for), when every
    one of them carries a tag and fails by its numbers (an exception speaks for itself)."""
    failing = [r for r in view.rows if r.status not in ("ok", "structure")]
    if not failing or any(not r.case.params.get("tests") or r.status == "error" for r in failing):
        return None
    return frozenset(r.case.params["tests"] for r in failing)


def by_tag(key: str, tags, title: str, sentence: str, ask: str) -> Mistake:
    """Only the cases that isolate one property (``params["tests"]``, one tag or a known
    combination of tags) fail: that property is what the answer gets wrong."""
    wanted = frozenset([tags] if isinstance(tags, str) else tags)
    return symptom(key, title, sentence, ask, lambda view: sentence if _failing_tags(view) == wanted else None)


def gradient_differs(reached: str) -> Mistake:
    """Only the gradient cases fail (tag ``grads``): the output does not reach ``reached`` ("the images and
    every parameter") through autograd."""
    return by_tag("gradient_differs", "grads", "right outputs, wrong gradients",
                  f"the outputs are right but the gradients are not: the output must reach {reached} through "
                  f"autograd (no .detach(), .data or numpy)",
                  "Your outputs are right and their gradients are not: where does autograd lose the path?")


def keyed(problem, which: str, *args):
    """A symptom's test from a shared reading: ``problem(view, *args)`` finds the first thing wrong as
    ``(key, sentence)`` (or None), and this symptom is the one whose key is ``which``. The reading is
    made once per failed answer, whichever of its symptoms asks first (``View.memo``)."""
    def detect(view: View) -> str | None:
        memo_key = (problem, args)
        if memo_key not in view.memo:
            view.memo[memo_key] = problem(view, *args)
        found = view.memo[memo_key]
        return found[1] if found and found[0] == which else None
    return detect


# --------------------------------------------------------------------------- the sinusoidal table (q1)


def _table_problem(view: View) -> tuple[str, str] | None:
    """(which, sentence) for the first failing table ``P``: row 0, sin/cos pairs, the first
    pair, the later frequencies."""
    for row in view.failing:
        got = _outputs(row).get("P") if _differs(row) else None
        want = row.references[0].get("P") if row.references else None
        if got is None or want is None or np.shape(got) != np.shape(want):
            continue
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if not (np.allclose(got[0, 0::2], 0, atol=1e-4) and np.allclose(got[0, 1::2], 1, atol=1e-4)):
            return "row_zero", ("row 0 should be 0 in the even columns (sin 0) and 1 in the odd columns (cos 0): "
                                "positions start at 0 and row k is position k, column 2i the sine, column 2i+1 the "
                                "cosine")
        if not np.allclose(got[:, 0::2] ** 2 + got[:, 1::2] ** 2, 1.0, atol=1e-4):
            return "pairs", ("columns 2i and 2i+1 must be the sine and the cosine of one angle (their squares sum "
                             "to 1): P[k, 2i] = sin(k / n^(2i/d)), P[k, 2i+1] = cos(k / n^(2i/d))")
        if not np.allclose(got[:, :2], want[:, :2], atol=1e-4):
            return "first_pair", ("the first pair (columns 0 and 1) should be sin(k) and cos(k): for i = 0 the "
                                  "denominator n^(2i/d) is 1")
        return "frequencies", ("the first pair is right but the frequencies of the later pairs are wrong: pair i "
                               "divides k by n^(2i/d), with the argument n and the model dimension d")
    return None


TABLE = (
    symptom("row_zero_wrong", "row 0 is not position 0",
            "Row k is position k from 0: P[0, 2i] = sin(0) = 0 and P[0, 2i+1] = cos(0) = 1.",
            "What should the first row of the table be, for position 0: which values do sin(0) and cos(0) give, and "
            "in which columns?", keyed(_table_problem, "row_zero")),
    symptom("pair_not_sin_cos", "columns 2i and 2i+1 are not the sine and cosine of one angle",
            "P[k, 2i] = sin(angle) and P[k, 2i+1] = cos(angle) with the same angle k / n^(2i/d).",
            "Take any row: do columns 2i and 2i+1 hold the sine and the cosine of the same angle?",
            keyed(_table_problem, "pairs")),
    symptom("first_pair_wrong", "the first pair of columns is not sin(k), cos(k)",
            "For i = 0 the denominator n^(2i/d) is 1: columns 0 and 1 are sin(k) and cos(k).",
            "What is the denominator of the first pair, i = 0, and so the angle of position k there?",
            keyed(_table_problem, "first_pair")),
    symptom("frequencies_wrong", "the later pairs have the wrong frequencies",
            "Pair i divides k by n^(2i/d), with the argument n and the model dimension d.",
            "The first pair is right: how does the denominator grow from one pair to the next, and with which of "
            "the function's arguments?", keyed(_table_problem, "frequencies")),
)


# --------------------------------------------------------------------------- softmax


def _slices_sum(view: View) -> str | None:
    for row in view.failing:
        got = _outputs(row).get("softmax") if _differs(row) else None
        if got is None:
            continue
        got = np.asarray(got, dtype=np.float64)
        dim = row.case.params.get("dim")
        dim = -1 if dim is None else dim
        if np.isfinite(got).all() and not np.allclose(got.sum(axis=dim), 1.0, atol=1e-4):
            return (f"the slices along dim={dim} do not sum to 1: normalise with the sum along the same dim "
                    f"(keepdim=True)")
    return None


SLICES_DO_NOT_SUM_TO_ONE = symptom(
    "slices_do_not_sum_to_one", "the slices along dim do not sum to 1",
    "Divide by the sum along the same dim, with keepdim=True.",
    "Add up your result along dim: do you get 1 everywhere? Along which axis does your code sum?", _slices_sum)


# --------------------------------------------------------------------------- attention: masks and dropout


def reference_without(view: View, row, drop: tuple) -> dict:
    """The first reference's outputs on ``row``'s case with the params ``drop`` removed (same
    inputs, same parameters): what the answer would give if it ignored them."""
    case = row.case
    other = Case(case.label, {k: v for k, v in case.params.items() if k not in drop}, case.dims)
    recorder = JudgeCase(view.question, other, row.index, row.student, 0, False)
    with torch.set_grad_enabled(needs_grad(view.question)):
        view.question.run_case(view.references()[0], other, recorder)
    return recorder.outputs


def _ignores_mask(view: View) -> str | None:
    """On a masked case, the student's output equals the reference's output without the mask."""
    for row in view.failing:
        if row.status != "differs" or not _has_mask(row.case):
            continue
        try:
            unmasked = reference_without(view, row, ("mask", "causal", "full_rows"))
        except Exception:  # noqa: BLE001 - a symptom never fails the verdict
            continue
        got = _outputs(row)
        if "out" in got and _same({"out": got["out"]}, {"out": unmasked.get("out")}):
            return ("the output does not depend on the mask: with the mask given, your result equals the result "
                    "without it (apply the mask, or pass it on to every head)")
    return None


def _return_attention(view: View) -> str | None:
    messages = [str((r.detail or {}).get("message", "")) for r in view.failing
                if r.status == "error" and r.case.params.get("attention")]
    if any("should return a tuple" in m or "return_attention" in m for m in messages):
        return ("forward must take return_attention=False and, with return_attention=True, return the pair "
                "(out, weights (B, h, N, N))")
    return None


def _base_passes(view: View) -> bool:
    """Some case without any special marker (plain inputs, eval mode, float32) passes."""
    return any(r.status == "ok" for r in view.rows if not any(m in r.case.params for m in MARKERS))


def _attention_dropout(which: str):
    def detect(view: View) -> str | None:
        failing = [r for r in view.failing if "dropout" in r.case.params and not _has_mask(r.case)]
        if not failing or not _base_passes(view):
            return None
        if any(not r.case.params.get("train") for r in failing):
            found = "eval"
        elif any(r.case.params.get("dropout") == 1.0 for r in failing):
            found = "full"
        else:
            found = "seeded"
        return _ATTENTION_DROPOUT[which] if found == which else None
    return detect


_ATTENTION_DROPOUT = {
    "eval": ("with dropout > 0 in eval mode (model.eval()) the output must equal the output without dropout; yours "
             "differs, so your dropout also acts in eval mode (use the module's nn.Dropout, or F.dropout(..., "
             "training=self.training))"),
    "full": ("in train mode with dropout=1.0 every attention weight is dropped, so the output must be the output "
             "projection's bias alone; yours is not: the dropout is missing or not applied to the attention weights"),
    "seeded": ("in train mode (after torch.manual_seed) your dropout does not drop the same attention weights as one "
               "nn.Dropout applied to the weights (B, h, N, N) right after the softmax: it sits elsewhere or draws "
               "its random numbers differently"),
}


def _fully_masked_rows_only(row) -> bool:
    """Whether the student's ``out`` matches some reference on every query whose keys are not
    all blocked (the differences sit in fully masked rows only)."""
    got = _outputs(row).get("out")
    mask = case_mask(row.case.params)
    if got is None or mask is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    dead = ~np.asarray(mask != 0).any(axis=-1)
    while dead.ndim > got.ndim - 1 and 1 in dead.shape[1:]:
        dead = np.squeeze(dead, axis=1 + dead.shape[1:].index(1))
    try:
        dead = np.broadcast_to(dead, got.shape[:-1])
    except ValueError:
        return False
    for reference in row.references:
        want = reference.get("out")
        if want is None or np.shape(want) != got.shape:
            continue
        differs = ~np.isclose(got, want, atol=1e-4, rtol=1e-4).all(axis=-1)
        if differs.any() and not (differs & ~dead).any():
            return True
    return False


def _mask_failure(view: View) -> str | None:
    """How an answer right without a mask fails with one: ``"fully_masked"`` when only inputs with a fully
    masked row (a query whose keys are all blocked) fail, ``"masked"`` otherwise, None when the failing cases
    are not the masked ones."""
    failing = view.failing
    if not failing or not all(_has_mask(r.case) and _differs(r) for r in failing):
        return None
    if not any(r.status == "ok" for r in view.rows if not _has_mask(r.case)):
        return None
    if all(r.case.params.get("full_rows") and _fully_masked_rows_only(r) for r in failing):
        return "fully_masked"
    return "masked"


def _masked_cases_only(view: View) -> str | None:
    if _mask_failure(view) != "masked":
        return None
    return ("your answer is right without a mask but not with one: blocked keys (mask == 0) get a large negative "
            "score (-1e9) before the softmax, allowed keys (mask == 1) keep theirs")


def _fully_masked_only(view: View) -> str | None:
    if _mask_failure(view) != "fully_masked":
        return None
    return ("only the inputs with a fully masked row fail: a query whose keys are all blocked must not give "
            "NaN; with -1e9 its weights are uniform, with -inf and a fix they are zero (both accepted)")


MASKS = (
    symptom("output_ignores_mask", "the output does not depend on the mask",
            "Apply the mask to the scores before the softmax, and pass it on to every head.",
            "With a mask given, your output is the output without it: where does your mask reach the scores?",
            _ignores_mask),
    symptom("return_attention_pair", "return_attention=True does not return (out, weights)",
            "forward takes return_attention=False and, with return_attention=True, returns (out, weights).",
            "What should forward return when it is called with return_attention=True?", _return_attention),
    symptom("eval_mode_dropout", "dropout acting in eval mode",
            "Use the module's nn.Dropout, or F.dropout(..., training=self.training).",
            "After model.eval(), should anything still be dropped? Which of your dropouts does not know the "
            "module's mode?", _attention_dropout("eval")),
    symptom("weights_dropout_missing", "the attention weights are not dropped",
            "Apply the dropout to the attention weights, right after the softmax.",
            "With dropout=1.0 in train mode every attention weight is dropped: what should the output be then, and "
            "is your dropout on the weights?", _attention_dropout("full")),
    symptom("dropout_mask_differs", "the dropout is elsewhere than on the attention weights",
            "One nn.Dropout applied to the weights (B, h, N, N) right after the softmax.",
            "With the same seed, your dropout drops other numbers than one dropout on the attention weights: "
            "which tensor does yours act on?", _attention_dropout("seeded")),
    symptom("fully_masked_rows", "queries with every key blocked give NaN",
            "Fill blocked scores with -1e9 (uniform weights) or set those rows to zero after -inf.",
            "Only the inputs with a fully masked row fail: what does the softmax of a row of -inf give?",
            _fully_masked_only),
    symptom("mask_wrong", "right without a mask, wrong with one",
            "Blocked keys (mask == 0) get -1e9 before the softmax, allowed keys (mask == 1) keep their scores.",
            "Your answer is right without a mask: which scores does your mask block, and when?", _masked_cases_only),
)


# --------------------------------------------------------------------------- attention weights


def _weights_problem(view: View) -> tuple[str, str] | None:
    """(which, sentence): properties of returned attention weights a right answer has whatever
    the numbers (stacked per head, rows summing to 1, zero on blocked keys), or out not weights @ v."""
    for row in view.failing:
        if row.status != "differs" or "weights" not in _outputs(row):
            continue
        got = np.asarray(_outputs(row)["weights"], dtype=np.float64)
        expected = [r.get("weights") for r in row.references if r.get("weights") is not None]
        if not expected or got.shape != np.shape(expected[0]):
            if expected and "attention" in row.case.params:
                return "shape", (f"with return_attention=True the weights must be every head's weights stacked on "
                                 f"axis 1, shape {np.shape(expected[0])} = (B, h, N, N); yours have shape "
                                 f"{got.shape}")
            continue
        mask = np.broadcast_to(case_mask(row.case.params) != 0, got.shape) if _has_mask(row.case) else None
        live = np.ones(got.shape[:-1], dtype=bool) if mask is None else np.asarray(mask.any(axis=-1))
        sums = np.asarray(got.sum(axis=-1))
        bad = np.asarray(live & ~np.isclose(sums, 1.0, atol=1e-4))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return "sum", (f"each row of the attention weights must sum to 1 over the keys (the last axis); the row "
                           f"{list(where)} of yours sums to {sums[where]:.4g} (softmax over another axis, or the "
                           f"weights changed after the softmax?)")
        if mask is not None:
            leak = ~mask & live[..., None] & (np.abs(got) > 1e-6)
            if leak.any():
                where = tuple(int(i) for i in np.argwhere(leak)[0])
                return "leak", (f"your weights are not zero where the mask blocks a key (mask == 0), e.g. at "
                                f"{list(where)}: blocked keys get -1e9 before the softmax (mask == 0 means blocked)")
        if "h" not in row.case.params and any(np.allclose(got, e, atol=1e-4, equal_nan=True) for e in expected):
            return "values", "the attention weights are right but out is not weights @ values"
    return None


WEIGHTS = (
    symptom("weights_not_stacked", "the heads' weights are not stacked as (B, h, N, N)",
            "Stack every head's (B, N, N) weights on a new axis 1: torch.stack(weights, dim=1).",
            "What shape should the weights of all heads have together, and on which axis do the heads go?",
            keyed(_weights_problem, "shape")),
    symptom("weights_rows_not_normalised", "rows of attention weights that do not sum to 1",
            "Take the softmax over the keys (the last axis) and leave the weights as the softmax gives them.",
            "Add up one row of your weights (one query, over the keys): is it 1? Over which axis is your softmax?",
            keyed(_weights_problem, "sum")),
    symptom("weights_on_blocked_keys", "weight on keys the mask blocks",
            "Blocked keys (mask == 0) get -1e9 before the softmax, so their weight is 0.",
            "Look at a blocked position (mask == 0) in your weights: is its weight zero? Which value does mask == 0 "
            "mean?", keyed(_weights_problem, "leak")),
    symptom("out_not_weights_times_values", "the weights are right but the output is not weights @ values",
            "The output is the weights times the values: weights @ v.",
            "Your weights are right: what do you multiply them with to get the output?",
            keyed(_weights_problem, "values")),
)


def merged_heads(view: View, row):
    """(the student's merged heads, the reference's) before the output projection, (B, N, E): the
    student's recovered by inverting the projection with the student's own weights
    (``out = merged @ W^T + b``); None when the reference has no ``projection`` layer."""
    captured: dict = {}

    class Capture(JudgeCase):
        def build(self, *args, **kwargs):
            module = super().build(*args, **kwargs)
            projection = getattr(module, "projection", None)
            if projection is not None:
                captured["projection"] = projection
                projection.register_forward_pre_hook(lambda mod, inputs: captured.__setitem__("merged", inputs[0]))
            return module

    recorder = Capture(view.question, row.case, row.index, row.student, 0, False)
    with torch.no_grad():
        view.question.run_case(view.references()[0], row.case, recorder)
    if "merged" not in captured:
        return None
    weight = captured["projection"].weight.detach().numpy()
    bias = captured["projection"].bias.detach().numpy()
    out = np.asarray(_outputs(row)["out"], dtype=np.float64)
    merged = np.linalg.solve(weight, (out - bias).reshape(-1, out.shape[-1]).T).T.reshape(out.shape)
    return merged, captured["merged"].detach().numpy()


def _heads_problem(view: View) -> tuple[str, str] | None:
    """Multi-head attention: are the heads put side by side in head order before the projection?"""
    for row in view.failing:
        p = row.case.params
        if row.status != "differs" or "h" not in p or p.get("train") or "out" not in _outputs(row):
            continue
        if np.shape(_outputs(row)["out"]) != tuple(p["x"]):
            continue
        found = merged_heads(view, row)
        if found is None:
            return None
        got, want = found
        if not np.isfinite(got).all() or np.allclose(got, want, atol=1e-4):
            return None                          # the merge is right: the difference comes from elsewhere
        return _merge_problem(got, want, p["h"], p["E"] // p["h"])
    return None


def _merge_problem(got, want, h: int, d: int) -> tuple[str, str] | None:
    for j in range(h):
        for k in range(h):
            if k != j and np.allclose(got[..., j * d:(j + 1) * d], want[..., k * d:(k + 1) * d], atol=1e-4):
                return "order", (f"the merged heads (recovered through your output projection) are out of order: "
                                 f"features {j * d}-{(j + 1) * d - 1} (head {j}'s place) hold head {k}'s output; "
                                 f"concatenate the heads in head order")
    if np.allclose(np.sort(got, axis=-1), np.sort(want, axis=-1), atol=1e-4):
        return "places", (f"each token's merged heads (recovered through your output projection) hold the right "
                          f"numbers in the wrong places: head 0's features are not features 0-{d - 1}, so changing "
                          f"head 1's weights changes the features where head 0's output belongs (merge as (h d), "
                          f"not (d h))")

    def flat(a):
        return np.sort(a.reshape(a.shape[0], -1), axis=-1)
    if np.allclose(flat(got), flat(want), atol=1e-4):
        return "tokens", ("the merged heads (recovered through your output projection) mix the tokens: a token's "
                          "features come from other tokens' heads (reshape of (B, h, N, d) without moving the heads "
                          "axis next to the features?)")
    return None


HEADS = (
    symptom("heads_out_of_order", "the heads merged out of order",
            "Concatenate the heads in head order: head 0's features first.",
            "Which head's output sits where head 0's output belongs once the heads are merged?",
            keyed(_heads_problem, "order")),
    symptom("heads_features_misplaced", "the heads' features interleaved when merged",
            "Merge as (h d): head 0's d features, then head 1's, and so on.",
            "Once the heads are merged, are head 0's features the first d numbers of each token?",
            keyed(_heads_problem, "places")),
    symptom("heads_mix_tokens", "the merge mixes tokens",
            "Move the heads axis next to the features before reshaping: (B, h, N, d) -> (B, N, h, d) -> (B, N, E).",
            "After your merge, does each token's vector hold only that token's heads?",
            keyed(_heads_problem, "tokens")),
)


# --------------------------------------------------------------------------- dropout of blocks (chapter 5)

_DROP_KEYS = ("drop_p", "forward_drop_p")


def _block_dropout_problem(view: View) -> tuple[str, str] | None:
    """The first failing case is a dropout case whose dropout-free twin (same seed, same x and
    weights: ``base_label``) passes: what dropout does wrong there."""
    failing = view.failing
    if not failing:
        return None
    row = failing[0]
    params = row.case.params
    probs = {k: params[k] for k in _DROP_KEYS if k in params}
    if not probs or view.kind(row) != "output":
        return None
    twin = next((r for r in view.rows if r.case.label == params.get("base_label")), None)
    if twin is None or twin.status != "ok":
        return None
    shown = ", ".join(f"{k}={v}" for k, v in probs.items())
    if not params.get("train"):
        return "eval", (f"In eval mode (module.eval()) your output changes with {shown}: dropout must be off outside "
                        f"training (nn.Dropout is; F.dropout needs training=self.training)")
    ones = [k for k, v in probs.items() if v == 1.0]
    if not ones:
        return "seeded", (f"In training mode with {shown} (seeded), your dropout masks differ from nn.Dropout's where "
                          f"the exercise puts them: a dropout is misplaced, missing or extra, or forward draws other "
                          f"random numbers")
    name = ones[0]
    got, base = _outputs(row).get("out"), _outputs(twin).get("out")
    if got is not None and base is not None and outputs_equal({"out": got}, {"out": base}):
        return "unused", (f"In training mode your output does not change with {name}=1.0: {name} is not used (the "
                          f"dropout it sets is missing, or built with another probability)")
    return "misplaced", (f"In training mode with {name}=1.0 your output is not what dropout gives where the exercise "
                         f"puts it: a dropout is misplaced, or uses another probability than {name}")


BLOCK_DROPOUT = (
    symptom("eval_mode_dropout", "dropout acting in eval mode",
            "nn.Dropout is off in eval mode; F.dropout needs training=self.training.",
            "After module.eval(), should your output still depend on the dropout probability? Which of your dropouts "
            "does not know the module's mode?", keyed(_block_dropout_problem, "eval")),
    symptom("dropout_probability_unused", "a dropout probability that changes nothing",
            "Build the dropout the exercise describes with that probability, where the exercise puts it.",
            "With that probability at 1.0 in training mode, your output does not change: which dropout should it "
            "set, and does yours exist?", keyed(_block_dropout_problem, "unused")),
    symptom("dropout_misplaced", "a dropout in another place or with another probability",
            "Put each dropout where the exercise puts it, with the probability it names.",
            "With that probability at 1.0 your output is not what the exercise's dropout gives: where does your "
            "dropout sit, and which probability does it get?", keyed(_block_dropout_problem, "misplaced")),
    symptom("dropout_mask_differs", "dropout masks other than the exercise's",
            "The exercise's dropouts, in its order, each applied once in forward.",
            "With the same seed your dropouts drop other numbers: is one misplaced, missing or extra, or does "
            "forward draw random numbers of its own?", keyed(_block_dropout_problem, "seeded")),
)


# --------------------------------------------------------------------------- tokens (chapter 6)


def _row_permutation(got, want, atol) -> bool:
    used: set = set()
    for row in got:
        match = next((j for j in range(len(want)) if j not in used and np.allclose(row, want[j], atol=atol)), None)
        if match is None:
            return False
        used.add(match)
    return True


def _tokens_problem(view: View, name: str, class_token: bool) -> tuple[str, str] | None:
    """Compare the student's tokens with the reference's, token by token."""
    failing = view.failing
    if not failing or view.kind(failing[0]) != "output":
        return None
    row = failing[0]
    got = np.asarray(_outputs(row).get(name), dtype=np.float64)
    want = np.asarray((view.closest(row) or {}).get(name), dtype=np.float64)
    if got.shape != want.shape or got.ndim != 3:
        return None
    scale = max(1.0, float(np.abs(want).max()))
    per_token = np.asarray((~np.isclose(got, want, rtol=1e-4, atol=1e-4 * scale)).any(axis=(0, 2)))  # (T,)
    if class_token and per_token[0] and not per_token[1:].any():
        return "class", "The class token (token 0) is wrong; the patch tokens (1 to N) are right"
    if class_token and not per_token[0] and per_token[1:].any():
        return "patches", "The class token (token 0) is right; the patch tokens (1 to N) are wrong"
    if all(_row_permutation(got[b], want[b], 1e-4 * scale) for b in range(got.shape[0])):
        return "order", ("Your tokens are the expected ones in another order: the patches are not numbered row by "
                         "row (h w) as the exercise asks")
    offset = got - want
    if got.shape[0] > 1 and np.allclose(offset, offset[:1], atol=1e-4 * scale):
        return "offset", ("Every image's tokens differ from the expected ones by the same offset at each position: "
                          "the table of positions (or a bias) added is not the one the exercise asks for")
    return None


def tokens(name: str, class_token: bool) -> tuple[Mistake, ...]:
    """The token symptoms of an output ``name`` (B, T, E); ``class_token``: token 0 is the class token."""
    def detect(which):
        return keyed(_tokens_problem, which, name, class_token)
    found = []
    if class_token:
        found += [
            symptom("class_token_wrong", "the class token is wrong, the patch tokens right",
                    "Token 0 is the parameter self.cls_token (the same one every call), repeated for each image.",
                    "Only token 0 differs: where does your class token come from, and is it the module's parameter?",
                    detect("class")),
            symptom("patch_tokens_wrong", "the patch tokens are wrong, the class token right",
                    "Tokens 1 to N are the projected patches (plus their positions).",
                    "Token 0 is right and the others are not: what happens to the patches before they join it?",
                    detect("patches"))]
    return (*found,
            symptom("tokens_reordered", "the right tokens in another order",
                    "Number the patches row by row: (h w).",
                    "Your tokens are the expected ones, shuffled: in which order do you number the patches?",
                    detect("order")),
            symptom("positions_offset", "the same wrong offset added at every position",
                    "Add the table of positions the exercise asks for, row k to token k.",
                    "Every image is off by the same amount at each position: which table (or bias) do you add?",
                    detect("offset")))


# --------------------------------------------------------------------------- outputs, one by one


def first_wrong_output(view: View) -> tuple | None:
    """(row, names of the outputs that differ from the closest reference) of the first case whose
    outputs differ, in the order the recipe recorded them; None when every case's are right."""
    for row in view.rows:
        if row.status not in ("differs", "ok"):
            continue
        got = _outputs(row)
        best = None
        for reference in row.references:
            wrong = [name for name, value in reference.items()
                     if name not in got or compare(name, got[name], value, row.case) is not None]
            if best is None or len(wrong) < len(best):
                best = wrong
        if best:
            return row, best
    return None
