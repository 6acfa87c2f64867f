"""Diagnoses: when no catalogued mistake matches, name the property that failed (grader side).

:func:`case_status` redoes the judge's per-case verdict (cached references, so it is cheap);
:func:`diagnosis` builds a question's ``diagnose(question, data)`` from general rules and the
chapter's own (``rules``: ``rule(question, data, status) -> sentence or None``):

* a later case failed on a property (a frozen or unused parameter, float32 outputs) while the
  first failure is a number: the property is named;
* only gradients differ: the output is right but a path to the input is cut or changed;
* then the chapter's rules (dropout cases, token order...).
"""
from __future__ import annotations

import numpy as np

from ..compare import case_rows, compare_outputs
from ..messages import outputs_equal
from ._entry import registered


def case_status(question, data) -> list:
    """Per case: (kind, detail); kind is "ok", "error", "property" (detail: the sentence),
    "structure", "grad" (only gradients differ; detail: the reference) or "output"."""
    status: list = []
    for row in case_rows(question, data, registered(question.id).references):
        if row.status in ("error", "property", "structure"):
            status.append((row.status, row.detail))
            continue
        got = row.student["outputs"]
        found = None
        for reference in row.references:
            if compare_outputs(question, row.case, got, reference) is None:
                found = ("ok", reference)
                break
            plain = {k: v for k, v in reference.items() if not k.startswith("grad_")}
            mine = {k: v for k, v in got.items() if not k.startswith("grad_")}
            kind = "grad" if compare_outputs(question, row.case, mine, plain) is None else "output"
            if found is None or (found[0] == "output" and kind == "grad"):
                found = (kind, reference)
        status.append(found)
    return status


def _property_elsewhere(question, data, status):
    failing = [kind for kind, _ in status if kind != "ok"]
    if not failing or failing[0] == "property":
        return None
    for kind, detail in status:
        if kind == "property":
            return f"On another input, {detail}"
    return None


def _gradients_only(question, data, status):
    failing = [(i, detail) for i, (kind, detail) in enumerate(status) if kind != "ok"]
    if not failing or any(status[i][0] != "grad" for i, _ in failing):
        return None
    index, reference = failing[0]
    got = data["cases"][index]["outputs"]
    names = [k[len("grad_"):] for k in reference if k.startswith("grad_") and k in got
             and not outputs_equal({k: got[k]}, {k: reference[k]})]
    return (f"Your output is right but its gradient with respect to {' and '.join(names) or 'the input'} is not: "
            f"a path from the input to the output is cut or changed (.detach(), .data, torch.no_grad(), numpy, "
            f"or an in-place change)")


def diagnosis(*rules):
    """A ``diagnose(question, data)`` hook: the general rules, then ``rules``."""
    def diagnose(question, data):
        status = case_status(question, data)
        for rule in (_property_elsewhere, _gradients_only, *rules):
            found = rule(question, data, status)
            if found:
                return found
        return None
    return diagnose


# --------------------------------------------------------------------------- dropout (chapter 5)

_DROP_KEYS = ("drop_p", "forward_drop_p")


def dropout_rule(question, data, status):
    """The first failing case is a dropout case whose dropout-free twin (same seed, same x and
    weights: ``base_label``) passes: say what dropout does wrong there."""

    failing = [i for i, (kind, _) in enumerate(status) if kind != "ok"]
    if not failing:
        return None
    index = failing[0]
    case = question.cases[index]
    params = case.params
    probs = {k: params[k] for k in _DROP_KEYS if k in params}
    if not probs or status[index][0] != "output":
        return None
    base = next((i for i, c in enumerate(question.cases) if c.label == params.get("base_label")), None)
    if base is None or status[base][0] != "ok":
        return None
    shown = ", ".join(f"{k}={v}" for k, v in probs.items())
    if not params.get("train"):
        return (f"In eval mode (module.eval()) your output changes with {shown}: dropout must be off outside "
                f"training (nn.Dropout is; F.dropout needs training=self.training)")
    got = data["cases"][index]["outputs"].get("out")
    twin = data["cases"][base]["outputs"].get("out")
    unchanged = got is not None and twin is not None and outputs_equal({"out": got}, {"out": twin})
    ones = [k for k, v in probs.items() if v == 1.0]
    if ones:
        name = ones[0]
        if unchanged:
            return (f"In training mode your output does not change with {name}=1.0: {name} is not used (the "
                    f"dropout it sets is missing, or built with another probability)")
        return (f"In training mode with {name}=1.0 your output is not what dropout gives where the exercise puts "
                f"it: a dropout is misplaced, or uses another probability than {name}")
    return (f"In training mode with {shown} (seeded), your dropout masks differ from nn.Dropout's where the "
            f"exercise puts them: a dropout is misplaced, missing or extra, or forward draws other random numbers")


# --------------------------------------------------------------------------- tokens (chapter 6)


def tokens_rule(name, class_token):
    """Compare the student's tokens with the reference's, token by token: the class token
    alone wrong, the patch tokens alone wrong, the same per-position offset in every image, or
    the right tokens in another order."""
    def rule(question, data, status):
        failing = [i for i, (kind, _) in enumerate(status) if kind != "ok"]
        if not failing or status[failing[0]][0] != "output":
            return None
        index = failing[0]
        got = np.asarray(data["cases"][index]["outputs"].get(name), dtype=np.float64)
        want = np.asarray(status[index][1].get(name), dtype=np.float64)
        if got.shape != want.shape or got.ndim != 3:
            return None
        scale = max(1.0, float(np.abs(want).max()))
        bad = ~np.isclose(got, want, rtol=1e-4, atol=1e-4 * scale)            # (B, T, E)
        per_token = bad.any(axis=(0, 2))                                       # (T,)
        if class_token and per_token[0] and not per_token[1:].any():
            return "The class token (token 0) is wrong; the patch tokens (1 to N) are right"
        if class_token and not per_token[0] and per_token[1:].any():
            return "The class token (token 0) is right; the patch tokens (1 to N) are wrong"
        for b in range(got.shape[0]):
            order = _row_permutation(got[b], want[b], 1e-4 * scale)
            if order is None:
                break
        else:
            return ("Your tokens are the expected ones in another order: the patches are not numbered row by "
                    "row (h w) as the exercise asks")
        offset = got - want
        if got.shape[0] > 1 and np.allclose(offset, offset[:1], atol=1e-4 * scale):
            return ("Every image's tokens differ from the expected ones by the same offset at each position: the "
                    "table of positions (or a bias) added is not the one the exercise asks for")
        return None
    return rule


def _row_permutation(got, want, atol):
    used = set()
    for row in got:
        match = next((j for j in range(len(want)) if j not in used and np.allclose(row, want[j], atol=atol)), None)
        if match is None:
            return None
        used.add(match)
    return used
