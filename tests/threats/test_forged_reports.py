"""Threat: the student's process forges its report (issue 17, "values, not reports").

The probe runs inside the student's process, so a notebook can import
``autograder.student.probe`` and patch it (``ProbeCase.output``, ``ProbeCase.grads``,
``ProbeCase.to_data``...) or rewrite what it sends. Before this change the judge believed
notes written there: the outputs' dtypes (float64 in -> float64 out) and each parameter's
gradient status ("ok"/"frozen"/"none"/"zero"). A float32 softmax that said "float64" and a
frozen class token whose status said "ok" got full marks.

Each test here takes an honest wrong answer that scores 0, forges one field of its report
the way a notebook can, and asserts the forged report scores 0 too; the honest solutions keep
full marks. The fast tests judge forged probe data with :func:`autograder.judging.judge.judge`
(the grade's own verdict on what the sandbox sends); the slow one grades a submission file
that patches the probe through :func:`autograder.hosts.child_process.check_file` (a child process,
:func:`autograder.hosts.driver.run_submission`, the wire format, the judge).
"""
from __future__ import annotations

import copy
import textwrap

import numpy as np
import pytest
import torch
from einops import repeat
from torch import nn

import autograder
from autograder.judging.judge import judge
from autograder.questions import inputs
from autograder.student import probe as P
from tests.answers import solutions as S
from tests.answers.bank import solution_of
from tests.answers.submission import write_submission


def _question(qid):
    return autograder.question(qid)


def _probe(qid, answer, monkeypatch=None, **patches):
    """Probe ``answer`` with ``ProbeCase`` methods replaced (what a notebook cell can do)."""
    if monkeypatch is not None:
        for name, replacement in patches.items():
            monkeypatch.setattr(P.ProbeCase, name, replacement)
    data = P.probe(_question(qid), answer)
    if monkeypatch is not None:
        monkeypatch.undo()
    return data


def _score(qid, data) -> float:
    return judge(_question(qid), data).score


def _verdict(qid, data):
    return judge(_question(qid), data)


# --------------------------------------------------------------------------- honest answers


@pytest.mark.parametrize("qid", ["softmax", "q2", "q3", "q4", "conv_patch_embedding", "attention_head", "q5"])
def test_the_solutions_keep_full_marks(qid):
    result = autograder.check(qid, solution_of(qid))
    assert result.passed and result.score == result.max_score, result.feedback


# --------------------------------------------------------------------------- float32 claiming float64


def softmax_in_float32(x, dim=-1):
    """Computed in float32; the result is cast back to the input's dtype (it "is" float64)."""
    y = x.float()
    e = torch.exp(y - y.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def softmax_float32_out(x, dim=-1):
    """Computed and returned in float32 whatever the input's dtype."""
    y = x.float()
    e = torch.exp(y - y.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _output_claiming_float64(self, name, value):
    """A patched ProbeCase.output that sends a float64 tensor and the old 'dtypes' note."""
    if type(value) is torch.Tensor and value.is_floating_point():
        value = value.double()
    self.outputs[name] = P.to_array(value, name)
    self.__dict__.setdefault("notes", {}).setdefault("dtypes", {})[name] = "float64"
    return self.outputs[name]


def _to_data_with_notes(self):
    """A patched ProbeCase.to_data that adds the notes the judge used to believe."""
    data = {"outputs": self.outputs, "modules": self.modules, "error": self.error}
    data["notes"] = {"float64_inputs": True, "dtypes": {name: "float64" for name in self.outputs},
                     "param_grads": [[p[0], "ok"] for m in self.modules for p in m["params"]]}
    return data


FLOAT64_CASE = 6        # softmax's case "float64 x (2, 3, 4) with values near +-800"


def test_the_softmax_float64_case_is_the_one_attacked():
    case = _question("softmax").cases[FLOAT64_CASE]
    assert case.params.get("dtype") == "float64"


@pytest.mark.parametrize("answer", [softmax_in_float32, softmax_float32_out])
def test_a_float32_softmax_fails_whatever_it_reports(monkeypatch, answer):
    honest = _verdict("softmax", _probe("softmax", answer))
    assert honest.score == 0 and "float32's precision only" in honest.feedback, honest.feedback
    assert "in the input's dtype" in honest.feedback
    forged = [
        _probe("softmax", answer, monkeypatch, output=_output_claiming_float64),
        _probe("softmax", answer, monkeypatch, to_data=_to_data_with_notes),
    ]
    rewritten = copy.deepcopy(forged[0])
    for case in rewritten["cases"]:
        case["notes"] = {"float64_inputs": False, "dtypes": {}}
    forged.append(rewritten)
    for data in forged:
        assert data["cases"][FLOAT64_CASE]["outputs"]["softmax"].dtype == np.float64
        result = _verdict("softmax", data)
        assert result.score == 0, result.feedback
        assert "float32's precision only" in result.feedback, result.feedback


def test_float32_precision_fails_only_the_float64_case():
    """The float32 softmax is right to float32's precision: only the float64 case fails."""
    result = _verdict("softmax", _probe("softmax", softmax_in_float32))
    assert "On input float64 x (2, 3, 4)" in result.feedback and "1 of" not in result.feedback, result.feedback


# --------------------------------------------------------------------------- frozen / detached parameters


class FrozenClassToken(S.PatchEmbedding):
    """The solution with the class token frozen: it would never be trained."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cls_token.requires_grad_(False)


class DetachedClassToken(S.PatchEmbedding):
    def forward(self, x):
        b = x.shape[0]
        x = self.projection(x)
        cls_tokens = repeat(self.cls_token.detach(), "() n e -> b n e", b=b)
        return torch.cat([cls_tokens, x], dim=1) + self.sinusoids_positions


def _grads_old_style(self, out, upstream, inputs, module=None, params=False):
    """The probe's old ``grads``, patched back in: input gradients, and a status note "ok"
    for every parameter instead of arrays."""
    with torch.enable_grad():
        found = torch.autograd.grad((out * upstream.to(out.dtype)).sum(), list(inputs.values()), allow_unused=True)
    for (name, tensor), grad in zip(inputs.items(), found):
        self.output(f"grad_{name}", grad if grad is not None else torch.zeros_like(tensor))
    if params and module is not None:
        self.__dict__.setdefault("notes", {})["param_grads"] = [[n, "ok"] for n, _ in module.named_parameters()]


def _forge_param_grads(data, fill):
    """Every case's module records: a gradient array for every parameter, ``fill(values)``."""
    forged = copy.deepcopy(data)
    for case in forged["cases"]:
        for record in case.get("modules") or []:
            record["grads"] = {key: fill(np.asarray(value)) for key, value in record["values"].items()}
            case["notes"] = {"param_grads": [[p[0], "ok"] for p in record["params"]]}
    return forged


FILLS = {
    "zeros": np.zeros_like,
    "ones": np.ones_like,
    "the values": lambda v: np.array(v, copy=True),
    "noise": lambda v: np.random.default_rng(0).normal(size=v.shape),
}


@pytest.mark.parametrize("qid", ["q3", "q4"])
@pytest.mark.parametrize("answer", [FrozenClassToken, DetachedClassToken], ids=["frozen", "detached"])
def test_a_class_token_that_is_not_trained_fails_whatever_its_report_says(monkeypatch, qid, answer):
    honest = _verdict(qid, _probe(qid, answer))
    assert honest.score == 0 and "the gradient of the parameter cls_token" in honest.feedback, honest.feedback
    patched = _probe(qid, answer, monkeypatch, grads=_grads_old_style)
    result = _verdict(qid, patched)
    assert result.score == 0 and "the gradient of the parameter cls_token" in result.feedback, result.feedback
    for fill_name, fill in FILLS.items():
        result = _verdict(qid, _forge_param_grads(_probe(qid, answer), fill))
        assert result.score == 0, (fill_name, result.feedback)


def test_the_frozen_class_token_is_named_with_requires_grad():
    result = _verdict("q3", _probe("q3", FrozenClassToken))
    assert "requires_grad=False" in result.feedback and "is missing" in result.feedback, result.feedback


class DetachedValue(S.AttentionHead):
    """value's weight used through .detach(): the head's value projection would never learn."""

    def forward(self, x, mask=None):
        v = nn.functional.linear(x, self.value.weight.detach(), self.value.bias)
        return S.scaled_dot_product_attention(self.query(x), self.key(x), v, mask)


def test_a_detached_parameter_reported_ok_fails(monkeypatch):
    honest = _verdict("attention_head", _probe("attention_head", DetachedValue))
    assert honest.score == 0 and "the gradient of the parameter value.weight" in honest.feedback, honest.feedback
    patched = _probe("attention_head", DetachedValue, monkeypatch, grads=_grads_old_style, to_data=_to_data_with_notes)
    assert _score("attention_head", patched) == 0
    for fill_name, fill in FILLS.items():
        assert _score("attention_head", _forge_param_grads(_probe("attention_head", DetachedValue), fill)) == 0, \
            fill_name


def test_a_parameter_gradient_must_equal_the_references():
    """The honest solution's report with one parameter's gradient scaled: refused, and named."""
    data = _probe("q3", S.PatchEmbedding)
    assert _score("q3", data) == 1
    forged = copy.deepcopy(data)
    case = next(c for c in forged["cases"] if any(m.get("grads") for m in c["modules"]))
    record = case["modules"][0]
    index = next(str(i) for i, p in enumerate(record["params"]) if p[0] == "projection.1.weight")
    record["grads"][index] = record["grads"][index] * 1.001
    result = _verdict("q3", forged)
    assert result.score == 0 and "the gradient of the parameter projection.1.weight" in result.feedback, \
        result.feedback


def test_a_forged_float32_gradient_fails_the_float64_case():
    data = _probe("q3", S.PatchEmbedding)
    forged = copy.deepcopy(data)
    for case in forged["cases"]:
        for record in case["modules"]:
            for key, value in (record.get("grads") or {}).items():
                record["grads"][key] = value.astype(np.float32).astype(np.float64) * (1 + 1e-7)
    result = _verdict("q3", forged)
    assert result.score == 0 and "float32's precision only" in result.feedback, result.feedback


# --------------------------------------------------------------------------- the owner kind, names and values


class ProjectionWithoutBias(S.PatchEmbedding):
    def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
        super().__init__(in_channels, patch_size, emb_size, img_size)
        self.projection[1] = nn.Linear(patch_size * patch_size * in_channels, emb_size, bias=False)


def _rewrite_params(data, rewrite):
    forged = copy.deepcopy(data)
    for case in forged["cases"]:
        for record in case.get("modules") or []:
            record["params"] = [rewrite(list(p)) for p in record["params"]]
    return forged


def test_a_missing_bias_fails_whatever_owner_or_name_is_reported():
    """``_missing_bias`` reads the reported owner kind and names; forging them only reaches the
    candidates, which never fill a reference bias with zeros where the layers have biases."""
    data = _probe("q2", ProjectionWithoutBias)
    honest = _verdict("q2", data)
    assert honest.score == 0 and "no bias" in honest.feedback, honest.feedback
    owner = _rewrite_params(data, lambda p: [p[0], p[1], "Identity"])
    result = _verdict("q2", owner)
    assert result.score == 0, result.feedback
    assert "bias" in result.feedback, result.feedback
    renamed = _rewrite_params(data, lambda p: [p[0].replace("weight", "kernel"), p[1], "Identity"])
    assert _score("q2", renamed) == 0


def test_a_claimed_bias_must_show_in_the_outputs():
    """A report that adds the missing bias (with the very values the checker would write, so
    the values check passes) makes the reference add it: the outputs computed without it fail."""
    data = _probe("q2", ProjectionWithoutBias)
    forged = copy.deepcopy(data)
    for case, question_case in zip(forged["cases"], _question("q2").cases):
        seed = int(question_case.params.get("seed", 0))
        record = case["modules"][0]
        i = len(record["params"])
        weight = next(p for p in record["params"] if p[0] == "projection.1.weight")
        shape = [weight[1][0]]                                     # (emb_size,)
        record["params"].append(["projection.1.bias", shape, "linear"])
        record["values"][str(i)] = inputs.param_values(tuple(shape), seed, 0, i, "projection.1.bias").astype(
            np.float64)
    result = _verdict("q2", forged)
    assert result.score == 0 and "patch_embeddings" in result.feedback, result.feedback


def test_forged_error_and_fatal_fields_only_cost():
    """``error`` and ``fatal`` can only fail: a raising answer's report with its errors erased
    has no outputs, and a correct answer's report with an error added fails."""
    class Raising(S.PatchEmbedding):
        def forward(self, x):
            raise RuntimeError("boom")

    erased = _probe("q3", Raising)
    for case in erased["cases"]:
        case["error"] = None
    assert _score("q3", erased) == 0
    honest = _probe("q3", S.PatchEmbedding)
    assert _score("q3", honest) == 1
    broken = copy.deepcopy(honest)
    broken["cases"][0]["error"] = {"type": "RuntimeError", "message": "forged", "where": ""}
    assert _score("q3", broken) == 0
    broken = copy.deepcopy(honest)
    broken["fatal"] = "forged"
    assert _score("q3", broken) == 0


def test_the_report_carries_no_notes():
    """What leaves the student's process: arrays and the parameters' names and shapes; no
    dtype, status or 'float64_inputs' note (a forged one is ignored, tests above)."""
    data = _probe("q3", S.PatchEmbedding)
    for case in data["cases"]:
        assert set(case) == {"outputs", "modules", "error"}
        for record in case["modules"]:
            assert set(record) <= {"params", "values", "grads", "class", "param_names_before"}
    graded = [c for c, q in zip(data["cases"], _question("q3").cases) if q.params.get("param_grads")]
    assert graded and all(c["modules"][0]["grads"] for c in graded)


# --------------------------------------------------------------------------- end to end


FORGING_SUBMISSION = textwrap.dedent('''
    import numpy as np
    import torch
    from torch import nn
    from einops import repeat
    from einops.layers.torch import Rearrange
    import autograder.student.probe as P

    def _output(self, name, value):                  # claims float64 for every output
        if type(value) is torch.Tensor and value.is_floating_point():
            value = value.double()
        self.outputs[name] = P.to_array(value, name)
        self.__dict__.setdefault("notes", {}).setdefault("dtypes", {})[name] = "float64"
        return self.outputs[name]

    def _grads(self, out, upstream, inputs, module=None, params=False):   # "ok" for every parameter
        with torch.enable_grad():
            found = torch.autograd.grad((out * upstream.to(out.dtype)).sum(), list(inputs.values()),
                                        allow_unused=True)
        for (name, tensor), grad in zip(inputs.items(), found):
            self.output("grad_" + name, grad if grad is not None else torch.zeros_like(tensor))
        self.__dict__.setdefault("notes", {})["float64_inputs"] = False
        if params and module is not None:
            self.notes["param_grads"] = [[n, "ok"] for n, _ in module.named_parameters()]

    _to_data = P.ProbeCase.to_data

    def _data(self):                                   # and notes in every case, whatever ran
        data = _to_data(self)
        data["notes"] = {"float64_inputs": False, **self.__dict__.get("notes", {})}
        return data

    P.ProbeCase.output, P.ProbeCase.grads, P.ProbeCase.to_data = _output, _grads, _data

    def softmax(x, dim=-1):
        y = x.float()
        e = torch.exp(y - y.amax(dim=dim, keepdim=True))
        return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)

    def getPositionEncoding(seq_len, d, n=10000):
        table = np.zeros((seq_len, d))
        for k in range(seq_len):
            for i in range(d // 2):
                denominator = np.power(n, 2 * i / d)
                table[k, 2 * i] = np.sin(k / denominator)
                table[k, 2 * i + 1] = np.cos(k / denominator)
        return table

    class PatchEmbedding(nn.Module):
        def __init__(self, in_channels=3, patch_size=16, emb_size=768, img_size=224):
            super().__init__()
            self.projection = nn.Sequential(
                Rearrange("b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=patch_size, s2=patch_size),
                nn.Linear(patch_size * patch_size * in_channels, emb_size))
            self.cls_token = nn.Parameter(torch.randn(1, 1, emb_size), requires_grad=False)   # frozen
            self.sinusoids_positions = torch.from_numpy(
                getPositionEncoding((img_size // patch_size) ** 2 + 1, emb_size)).float()

        def forward(self, x):
            x = self.projection(x)
            x = torch.cat([repeat(self.cls_token, "() n e -> b n e", b=x.shape[0]), x], dim=1)
            return x + self.sinusoids_positions
''')


@pytest.mark.slow
def test_a_submission_that_patches_the_probe_scores_zero(tmp_path):
    """The measured attacks, end to end: the float32 softmax claiming float64 (1/1 before)
    and the frozen class token with patched grads (q3 1/1, q4 1/1 before) score 0; the
    solutions through the same path keep full marks."""
    from autograder.hosts.child_process import check_file

    path = tmp_path / "forging.py"
    path.write_text(FORGING_SUBMISSION)
    results = {r.id: r for r in check_file(path, ["softmax", "q3", "q4"])}
    assert results["softmax"].score == 0 and "float32's precision only" in results["softmax"].feedback, \
        results["softmax"].feedback
    for qid in ("q3", "q4"):
        assert results[qid].score == 0, results[qid].feedback
        assert "the gradient of the parameter cls_token" in results[qid].feedback, results[qid].feedback
    whole = write_submission(tmp_path / "solutions.py")        # every solution, from the banks
    honest = {r.id: r for r in check_file(whole, ["softmax", "q3", "q4", "attention_head"])}
    assert all(r.passed and r.score == r.max_score for r in honest.values()), \
        [r.feedback for r in honest.values() if not r.passed]
