"""Diagnoses: when no catalogued mistake matches, name the property a wrong answer fails
(grader side; see ``Entry.diagnose``). Shared by every question whose cases carry the
markers read here (case params): ``dtype="float64"``, a mask (``mask``/``causal``,
``full_rows``), ``dropout`` with ``train``, ``grads``, ``attention`` (return_attention=True),
and the outputs ``out``/``weights`` of attention.

Each rule looks at which cases fail and how; the first rule that applies gives the sentence.
"""
from __future__ import annotations

import numpy as np
import torch

from ...questions.base import Case
from ...questions.common import case_mask
from ..compare import case_rows
from ..messages import outputs_equal
from ..variants import JudgeCase, needs_grad
from ._entry import registered


def case_results(question, data) -> list[dict]:
    """Per case: {"case", "student", "status" (None = passes, "error", "property", "differs"),
    "references"}; from :func:`autograder.judging.compare.case_rows`, the judge's own case loop (references are cached)."""
    names = {"ok": None, "error": "error", "property": "property", "structure": "differs", "differs": "differs"}
    return [{"case": row.case, "student": row.student, "status": names[row.status], "references": row.references,
             "index": row.index} for row in case_rows(question, data, registered(question.id).references)]


def _has_mask(case) -> bool:
    return "mask" in case.params or "causal" in case.params


def _message(row) -> str:
    return str((row["student"].get("error") or {}).get("message", ""))


def reference_without(question, row, drop: tuple) -> dict | None:
    """The first reference's outputs on ``row``'s case with the params ``drop`` removed (same
    inputs, same parameters): what the answer would give if it ignored them."""
    case = row["case"]
    params = {k: v for k, v in case.params.items() if k not in drop}
    other = Case(case.label, params, case.dims)
    recorder = JudgeCase(question, other, row["index"], row["student"], 0, False)
    reference = registered(question.id).references()[0]
    with torch.set_grad_enabled(needs_grad(question)):
        question.run_case(reference, other, recorder)
    return recorder.outputs


def _same(a, b) -> bool:
    return a is not None and b is not None and outputs_equal(a, b)


# --------------------------------------------------------------------------- the rules


def _dtype_rule(question, rows, failing):
    messages = [_message(r) for r in failing if r["status"] == "error"]
    if any("long int" in m or ("Long" in m and "dtype" in m) for m in messages):
        return ("an integer tensor (int64: F.one_hot's result, torch.arange, a mask) is multiplied with "
                "floating-point numbers: convert it first with .to(weight.dtype) (or .to(x.dtype))")
    if failing and all(r["case"].params.get("dtype") == "float64" for r in failing) and any(
            ("dtype" in m or "double" in m.lower()) for m in messages):
        return ("your code works with float32 inputs but raises with float64 ones: a tensor made with a fixed "
                "dtype (.float(), torch.zeros(...) or torch.ones(...) without dtype=) meets the float64 inputs; "
                "create it in the input's dtype (dtype=x.dtype, or .to(x.dtype))")
    return None


MARKERS = ("mask", "causal", "dropout", "dtype", "grads", "attention")


def _base_passes(rows) -> bool:
    """Some case without any special marker (plain inputs, eval mode, float32) passes."""
    return any(r["status"] is None for r in rows if not any(m in r["case"].params for m in MARKERS))


def _dropout_rule(question, rows, failing):
    failing = [r for r in failing if "dropout" in r["case"].params and not _has_mask(r["case"])]
    if not failing or not _base_passes(rows):
        return None
    eval_fail = [r for r in failing if not r["case"].params.get("train")]
    if eval_fail:
        return ("with dropout > 0 in eval mode (model.eval()) the output must equal the output without "
                "dropout; yours differs, so your dropout also acts in eval mode (use the module's nn.Dropout, "
                "or F.dropout(..., training=self.training))")
    full = [r for r in failing if r["case"].params.get("dropout") == 1.0]
    if full:
        return ("in train mode with dropout=1.0 every attention weight is dropped, so the output must be the "
                "output projection's bias alone; yours is not: the dropout is missing or not applied to the "
                "attention weights")
    return ("in train mode (after torch.manual_seed) your dropout does not drop the same attention weights as "
            "one nn.Dropout applied to the weights (B, h, N, N) right after the softmax: it sits elsewhere or "
            "draws its random numbers differently")


def _mask_independence_rule(question, rows, failing):
    """Evidence whatever else fails: on a masked case, the student's output equals the
    reference's output without the mask."""
    for row in failing:
        if row["status"] != "differs" or not _has_mask(row["case"]):
            continue
        try:
            unmasked = reference_without(question, row, ("mask", "causal", "full_rows"))
        except Exception:  # noqa: BLE001 - a diagnosis never fails the verdict
            unmasked = None
        got = row["student"]["outputs"]
        if unmasked is not None and "out" in got and _same({"out": got["out"]}, {"out": unmasked.get("out")}):
            return ("the output does not depend on the mask: with the mask given, your result equals the result "
                    "without it (apply the mask, or pass it on to every head)")
    return None


def _only_dead_rows_differ(row) -> bool:
    """Whether the student's ``out`` matches some reference on every query whose keys are not
    all blocked (the differences sit in fully masked rows only)."""
    got = row["student"]["outputs"].get("out")
    mask = case_mask(row["case"].params)
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
    for reference in row["references"]:
        want = reference.get("out")
        if want is None or np.shape(want) != got.shape:
            continue
        differs = ~np.isclose(got, want, atol=1e-4, rtol=1e-4).all(axis=-1)
        if differs.any() and not (differs & ~dead).any():
            return True
    return False


def _mask_rule(question, rows, failing):
    if not failing or not all(_has_mask(r["case"]) and r["status"] == "differs" for r in failing):
        return None
    if not any(r["status"] is None for r in rows if not _has_mask(r["case"])):
        return None
    if all(r["case"].params.get("full_rows") and _only_dead_rows_differ(r) for r in failing):
        return ("only the inputs with a fully masked row fail: a query whose keys are all blocked must not give "
                "NaN; with -1e9 its weights are uniform, with -inf and a fix they are zero (both accepted)")
    return ("your answer is right without a mask but not with one: blocked keys (mask == 0) get a large negative "
            "score (-1e9) before the softmax, allowed keys (mask == 1) keep theirs")


def _weights_rule(question, rows, failing):
    """Properties of attention weights that a right answer has whatever the numbers."""
    for row in failing:
        if row["status"] != "differs" or "weights" not in row["student"]["outputs"]:
            continue
        got = np.asarray(row["student"]["outputs"]["weights"], dtype=np.float64)
        expected = [r.get("weights") for r in row["references"] if r.get("weights") is not None]
        if not expected or got.shape != np.shape(expected[0]):
            if expected and "attention" in row["case"].params:
                want = np.shape(expected[0])
                return (f"with return_attention=True the weights must be every head's weights stacked on axis 1, "
                        f"shape {want} = (B, h, N, N); yours have shape {got.shape}")
            continue
        mask = None
        if _has_mask(row["case"]):
            mask = np.broadcast_to(case_mask(row["case"].params) != 0, got.shape)
        live = np.ones(got.shape[:-1], dtype=bool) if mask is None else mask.any(axis=-1)
        sums = got.sum(axis=-1)
        bad = live & ~np.isclose(sums, 1.0, atol=1e-4)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"each row of the attention weights must sum to 1 over the keys (the last axis); the row "
                    f"{list(where)} of yours sums to {sums[where]:.4g} (softmax over another axis, or the weights "
                    f"changed after the softmax?)")
        if mask is not None:
            leak = ~mask & live[..., None] & (np.abs(got) > 1e-6)
            if leak.any():
                where = tuple(int(i) for i in np.argwhere(leak)[0])
                return (f"your weights are not zero where the mask blocks a key (mask == 0), e.g. at {list(where)}: "
                        f"blocked keys get -1e9 before the softmax (mask == 0 means blocked)")
        if "h" not in row["case"].params and any(np.allclose(got, e, atol=1e-4, equal_nan=True) for e in expected):
            return "the attention weights are right but out is not weights @ values"
    return None


def _grads_rule(question, rows, failing):
    if failing and all(r["case"].params.get("grads") for r in failing) and all(
            r["status"] == "differs" for r in failing):
        for row in failing:
            if any(_same({"out": row["student"]["outputs"].get("out")}, {"out": r.get("out")})
                   for r in row["references"]):
                return ("the output is right but its gradient is not: part of the computation is cut from autograd "
                        "(.detach(), .data, numpy, torch.no_grad())")
    return None


def _attention_output_rule(question, rows, failing):
    attention = [r for r in failing if r["case"].params.get("attention")]
    if any("should return a tuple" in _message(r) or "return_attention" in _message(r) for r in attention):
        return ("forward must take return_attention=False and, with return_attention=True, return the pair "
                "(out, weights (B, h, N, N))")
    return None


def merged_heads(question, row):
    """(the student's merged heads, the reference's) before the output projection, (B, N, E):
    the student's recovered by inverting the projection with the student's own weights
    (``out = merged @ W^T + b``); None when the reference has no ``projection`` layer."""
    captured = {}

    class Capture(JudgeCase):
        def build(self, *args, **kwargs):
            module = super().build(*args, **kwargs)
            projection = getattr(module, "projection", None)
            if projection is not None:
                captured["projection"] = projection
                projection.register_forward_pre_hook(lambda mod, inputs: captured.__setitem__("merged", inputs[0]))
            return module

    recorder = Capture(question, row["case"], row["index"], row["student"], 0, False)
    with torch.no_grad():
        question.run_case(registered(question.id).references()[0], row["case"], recorder)
    if "merged" not in captured:
        return None
    weight = captured["projection"].weight.detach().numpy()
    bias = captured["projection"].bias.detach().numpy()
    out = np.asarray(row["student"]["outputs"]["out"], dtype=np.float64)
    merged = np.linalg.solve(weight, (out - bias).reshape(-1, out.shape[-1]).T).T.reshape(out.shape)
    return merged, captured["merged"].detach().numpy()


def _heads_rule(question, rows, failing):
    """Multi-head attention: are the heads put side by side in head order before the projection?"""
    for row in failing:
        p = row["case"].params
        if row["status"] != "differs" or "h" not in p or p.get("train") or "out" not in row["student"]["outputs"]:
            continue
        if np.shape(row["student"]["outputs"]["out"]) != tuple(p["x"]):
            continue
        found = merged_heads(question, row)
        if found is None:
            return None
        got, want = found
        if not np.isfinite(got).all() or np.allclose(got, want, atol=1e-4):
            return None                          # the merge is right: the difference comes from elsewhere
        h, d = p["h"], p["E"] // p["h"]
        blocks_got = [got[..., j * d:(j + 1) * d] for j in range(h)]
        blocks_want = [want[..., j * d:(j + 1) * d] for j in range(h)]
        for j, block in enumerate(blocks_got):
            for k, other in enumerate(blocks_want):
                if k != j and np.allclose(block, other, atol=1e-4):
                    return (f"the merged heads (recovered through your output projection) are out of order: "
                            f"features {j * d}-{(j + 1) * d - 1} (head {j}'s place) hold head {k}'s output; "
                            f"concatenate the heads in head order")
        if np.allclose(np.sort(got, axis=-1), np.sort(want, axis=-1), atol=1e-4):
            return (f"each token's merged heads (recovered through your output projection) hold the right numbers "
                    f"in the wrong places: head 0's features are not features 0-{d - 1}, so changing head 1's "
                    f"weights changes the features where head 0's output belongs (merge as (h d), not (d h))")
        flat = lambda a: np.sort(a.reshape(a.shape[0], -1), axis=-1)  # noqa: E731 - a one-line helper local to this rule
        if np.allclose(flat(got), flat(want), atol=1e-4):
            return ("the merged heads (recovered through your output projection) mix the tokens: a token's "
                    "features come from other tokens' heads (reshape of (B, h, N, d) without moving the heads "
                    "axis next to the features?)")
        return None
    return None


def _softmax_rule(question, rows, failing):
    """softmax: each slice along dim sums to 1."""
    for row in failing:
        got = row["student"].get("outputs", {}).get("softmax") if row["status"] == "differs" else None
        if got is None:
            continue
        got = np.asarray(got, dtype=np.float64)
        dim = row["case"].params.get("dim")
        dim = -1 if dim is None else dim
        if np.isfinite(got).all() and not np.allclose(got.sum(axis=dim), 1.0, atol=1e-4):
            return (f"the slices along dim={dim} do not sum to 1: normalise with the sum along the same dim "
                    f"(keepdim=True)")
    return None


def _positional_rule(question, rows, failing):
    """q1: row 0, sin/cos pairs, the first pair, the later frequencies."""
    for row in failing:
        got = row["student"].get("outputs", {}).get("P") if row["status"] == "differs" else None
        want = row["references"][0].get("P") if row["references"] else None
        if got is None or want is None or np.shape(got) != np.shape(want):
            continue
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        if not (np.allclose(got[0, 0::2], 0, atol=1e-4) and np.allclose(got[0, 1::2], 1, atol=1e-4)):
            return ("row 0 should be 0 in the even columns (sin 0) and 1 in the odd columns (cos 0): positions "
                    "start at 0 and row k is position k, column 2i the sine, column 2i+1 the cosine")
        if not np.allclose(got[:, 0::2] ** 2 + got[:, 1::2] ** 2, 1.0, atol=1e-4):
            return ("columns 2i and 2i+1 must be the sine and the cosine of one angle (their squares sum to 1): "
                    "P[k, 2i] = sin(k / n^(2i/d)), P[k, 2i+1] = cos(k / n^(2i/d))")
        if not np.allclose(got[:, :2], want[:, :2], atol=1e-4):
            return ("the first pair (columns 0 and 1) should be sin(k) and cos(k): for i = 0 the denominator "
                    "n^(2i/d) is 1")
        return ("the first pair is right but the frequencies of the later pairs are wrong: pair i divides k by "
                "n^(2i/d), with the argument n and the model dimension d")
    return None


RULES = (_positional_rule, _softmax_rule, _dtype_rule, _mask_independence_rule, _attention_output_rule, _dropout_rule, _mask_rule, _grads_rule,
         _weights_rule, _heads_rule)


def diagnose(question, data, limit: int = 2) -> str | None:
    """The sentences of the first ``limit`` rules that apply, joined; None when none does."""
    rows = case_results(question, data)
    failing = [r for r in rows if r["status"] is not None]
    found = []
    for rule in RULES:
        try:
            sentence = rule(question, rows, failing)
        except Exception:  # noqa: BLE001 - one rule failing must not hide the others
            sentence = None
        if sentence and sentence not in found:
            found.append(sentence)
        if len(found) >= limit:
            break
    if not found:
        return None
    return found[0][0].upper() + found[0][1:] + "".join(f"; also, {f}" for f in found[1:])


def dtype_mix(data) -> str | None:
    """A float32/float64 clash in the student's code (raised on the float64 inputs only)."""
    for case in data.get("cases") or []:
        low = str((case.get("error") or {}).get("message", "")).lower()
        if ("dtype" in low or "scalar type" in low) and ("double" in low or "float64" in low):
            return ("your code mixes float32 and float64 tensors (it fails on the float64 inputs): create or cast "
                    "intermediate tensors with the input's dtype (e.g. .to(weight.dtype), dtype=x.dtype) instead "
                    "of .float() or a default-dtype torch.zeros/torch.eye")
    return None
