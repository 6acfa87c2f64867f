"""Threat: a library implementation of the exercise's operation that the forbidden lists miss,
or a construct that gets around the checks, graded as the student's own work.

Measured by a red team before this change: a multi-head attention from torch.ao's
quantizable namespace fetched with ``getattr(module, "MultiheadAttention")`` scored the
attention question 3/3 with no flag; ``torch.distributions.Categorical(logits=...).log_prob``
(a library log-softmax) scored the cross-entropy questions; a native kernel called through
ctypes scored softmax 1/1; and the old ``eval`` flag fired on every honest ``model.eval()``.

Now: a constant-name getattr is the attribute access it spells (a hit: zero); every library
route found in torch's namespaces is in the forbidden lists (static scan) and, where the
dispatcher or a Python function can be disabled, banned in the student's process; and every
flag (:func:`autograder.judging.scan.flags`, no false positives on the course's code) holds
the submission's questions for review: grades.csv says so, the gradebook marks them as
needing manual grading, report.html lists them, Gradescope holds them at 0.

A flag holds only what the run cannot decide: a library function by a computed name
(``getattr(torch, "soft" + "max")``) is not held but still a zero, for the call, in the sandbox
(``test_what_the_flags_no_longer_hold_is_decided_at_run_time``); honest idioms the flags used
to hold are in tests/test_honest_idioms.py."""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import autograder
from autograder.judging.scan import flags, scan_source
from autograder.student.cells import code_cells
from autograder.questions.forbidden import FORBIDDEN, expand

import grading_students as S

REPO = Path(__file__).resolve().parents[2]


def _hits(source: str, qid: str) -> list[str]:
    q = autograder.question(qid)
    return [h.key for h in scan_source(["import torch\nimport torch.nn.functional as F\nfrom torch import nn",
                                        textwrap.dedent(source)], q.answer_name, q.forbidden)]


# ------------------------------------------------------------------ the red team's three cases

def test_quantizable_multihead_attention_by_a_constant_getattr_is_a_hit():
    source = '''
    import torch.ao.nn.quantizable as Qz
    def scaled_dot_product_attention(q, k, v, mask=None):
        mha = getattr(Qz, "MultiheadAttention")(q.shape[-1], 1, bias=False)
        return mha(q, k, v)[0]
    '''
    assert _hits(source, "attention") == ["attention"]
    assert "getattr-forbidden" in {f.kind for f in flags([textwrap.dedent(source)])}
    # spelled as an attribute or through a module alias, the same
    direct = ("def scaled_dot_product_attention(q, k, v, mask=None):\n"
              "    return torch.ao.nn.quantizable.MultiheadAttention(4, 1)(q, k, v)[0]")
    assert _hits(direct, "attention") == ["attention"]


def test_categorical_log_prob_is_a_hit_for_the_cross_entropy_and_softmax_questions():
    ce = '''
    def cross_entropy(logits, targets):
        return -torch.distributions.Categorical(logits=logits).log_prob(targets).mean()
    '''
    ce_questions = [q for q in autograder.questions() if "cross_entropy" in q.forbidden]
    assert ce_questions
    for q in ce_questions:
        source = ce.replace("def cross_entropy(", f"def {q.answer_name}(")
        assert _hits(source, q.id) == ["categorical"], q.id
    sm = "def softmax(x, dim=-1):\n    return torch.distributions.Categorical(logits=x).probs"
    assert _hits(sm, "softmax") == ["categorical"]
    message = FORBIDDEN["categorical"].what
    assert "log-softmax" in message and "Categorical" in message     # the key owns its message


def test_a_native_kernel_through_ctypes_is_a_flag_that_holds():
    source = ("import ctypes\nlib = ctypes.CDLL(torch._C.__file__)\n"
              "def softmax(x, dim=-1):\n    return x\n")
    kinds = {f.kind for f in flags(["import torch", source])}
    assert {"ctypes", "torch-internals"} <= kinds


def test_model_eval_is_not_a_flag_anymore():
    for assignment in ("07_vit", "08_decoder", "09_training"):
        cells, problem = code_cells((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_bytes())
        assert not problem
        text = "\n".join(cells)
        assert ".eval()" in text, assignment            # the case the old flag fired on
        assert flags(cells) == [], assignment


# ------------------------------------------------------------------ every library route

# Names in torch's namespaces that look like an exercise's operation but are not an
# implementation of it (each with why); every other name the survey finds must be forbidden.
NOT_AN_IMPLEMENTATION = {
    "_get_softmax_dim": "picks the dim argument's default (a warning helper)",
    "_softmax_unbacked_safe_amax": "a max used inside a decomposition (torch._decomp is a flag)",
    "GaussianNLLLoss": "a Gaussian likelihood, no softmax", "gaussian_nll_loss": "a Gaussian likelihood",
    "PoissonNLLLoss": "a Poisson likelihood, no softmax", "poisson_nll_loss": "a Poisson likelihood",
    "binary_cross_entropy": "takes probabilities: needs the softmax it would replace",
    "binary_cross_entropy_with_logits": "a sigmoid per class, not a softmax over classes",
    "LinearCrossEntropyOptions": "options of LinearCrossEntropyLoss (forbidden)",
    "linear_cross_entropy_options": "the module of those options",
    "categorical": "the module torch.distributions.categorical (its class is forbidden)",
    "one_hot_categorical": "a module (its class is forbidden)",
    "relaxed_categorical": "a module (its classes are forbidden)",
    "_check_native_layer_norm_cuda_param_dtype": "a dtype check",
    "native_layer_norm_fake": "shapes only (fake tensors)",
    "_get_batch_norm_reserve_tensor": "allocates a buffer",
    "batchnorm": "the module torch.nn.modules.batchnorm", "instancenorm": "the module torch.nn.modules.instancenorm",
    "replace_all_batch_norm_modules_": "switches modules' running stats off",
    "FlexAttentionBackwardHOP": "the backward pass only", "flex_attention_fake_impl": "shapes only (fake tensors)",
    "SDPAParams": "a parameter record for backend choice",
    "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG": "a debug switch", "_FlashAttentionImpl": "a backend registry entry",
    "_cur_sdpa_kernel_backends": "backend choice", "_sdpa_kernel": "backend choice (context manager)",
    "_sdpa_kernel_variadic": "backend choice", "sdpa_kernel": "backend choice (context manager)",
    "_validate_sdpa_input": "argument checks", "_varlen_attn_fake": "shapes only (fake tensors)",
    "_varlen_attn_forward_flop": "a flop count", "_varlen_attn_out_fake": "shapes only",
    "_varlen_attn_out_flop": "a flop count", "activate_flash_attention_impl": "backend choice",
    "attention": "the package torch.nn.attention", "transformer": "the module torch.nn.modules.transformer",
    "can_use_efficient_attention": "backend availability", "can_use_flash_attention": "backend availability",
    "is_flash_attention_available": "backend availability", "current_flash_attention_impl": "backend choice",
    "list_flash_attention_impls": "backend choice", "register_flash_attention_impl": "backend registry",
    "restore_flash_attention_impl": "backend choice",
}
NAMESPACES = ["torch", "torch.nn", "torch.nn.functional", "torch.nn.modules", "torch.nn.modules.activation",
              "torch.nn.modules.normalization", "torch.nn.modules.loss", "torch.ao.nn.quantizable",
              "torch.ao.nn.quantized", "torch.ao.nn.quantized.functional", "torch.ao.nn.qat",
              "torch.ao.nn.quantized.dynamic", "torch.ao.nn.quantized.reference", "torch.distributions",
              "torch.distributions.utils", "torch.sparse", "torch.nested", "torch.masked", "torch.special",
              "torch._refs", "torch._refs.nn.functional", "torch._refs.special", "torch._decomp.decompositions",
              "torch.nn.attention", "torch.nn.attention.flex_attention", "torch.nn.attention.varlen",
              "torch.nn.attention.bias", "torch.func", "torch._C._nn", "torch._C._VariableFunctions",
              "torch._C._sparse", "torch._C._special", "torch._higher_order_ops.flex_attention"]
SURVEY = {"softmax": r"soft(max|min)", "cross_entropy": r"cross_?entropy|nll|log_?softmax|categorical|log_prob",
          "layer_norm": r"(layer|rms|group|batch|instance)_?norm",
          "attention": r"attention|attn|sdpa|transformer|scaled_dot",
          "embedding": r"^_?embedding(_bag)?$|^Embedding(Bag)?$"}


def _namespace_names() -> dict[str, set[str]]:
    import torch
    out: dict[str, set[str]] = {"torch.Tensor": set(dir(torch.Tensor))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in NAMESPACES:
            try:
                out[name] = set(dir(importlib.import_module(name)))
            except ImportError:
                module, _, attr = name.rpartition(".")
                out[name] = set(dir(getattr(importlib.import_module(module), attr)))
    for namespace in ("aten", "quantized"):
        out[f"torch.ops.{namespace}"] = {n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                                         if n.startswith(f"{namespace}::")}
    return out


@pytest.mark.parametrize("key", sorted(SURVEY))
def test_every_library_route_in_torchs_namespaces_is_forbidden(key):
    """A survey of the installed torch: every name that looks like the exercise's operation in
    every namespace is forbidden (by the key or a key it implies) or is listed above as not
    an implementation, with why."""
    attrs = set().union(*(FORBIDDEN[k].attrs for k in expand([key])))
    aten = {op.split("::")[-1].split(".")[0] for k in expand([key]) for op in FORBIDDEN[k].aten}
    missing = {}
    for namespace, names in _namespace_names().items():
        for name in names:
            if (re.search(SURVEY[key], name, re.I) and "backward" not in name and name not in attrs
                    and name not in NOT_AN_IMPLEMENTATION and not (namespace.startswith("torch.ops") and name in aten)):
                missing.setdefault(name, []).append(namespace)
    assert missing == {}


ROUTES = {   # (what the question forbids, the library route as the answer's body) -> the key that forbids it
    ("softmax", "return torch.distributions.Categorical(logits=x).probs"): "categorical",
    ("softmax", "return torch.distributions.transforms.SoftmaxTransform()(x)"): "categorical",
    ("softmax", "return torch.sparse.softmax(x.to_sparse(), dim).to_dense()"): "softmax",
    ("softmax", "return torch.masked.softmax(x, dim)"): "softmax",
    ("softmax", "return torch.special.softmax(x, dim)"): "softmax",
    ("softmax", "return torch.nested.nested_tensor([x]).softmax(dim)"): "softmax",
    ("softmax", "return torch.ao.nn.quantized.Softmax()(x)"): "softmax",
    ("attention", "return torch.ao.nn.quantizable.MultiheadAttention(4, 1)(q, k, v)[0]"): "attention",
    ("attention", "return torch.nn.attention.flex_attention.flex_attention(q, k, v)"): "attention",
    ("layer_norm", "return F.batch_norm(x.reshape(1, -1, x.shape[-1]), None, None, training=True)"): "batch_norm",
    ("layer_norm", "return nn.InstanceNorm1d(4)(x)"): "batch_norm",
    ("layer_norm", "return torch.ao.nn.quantized.LayerNorm(4, 1.0, 0)(x)"): "layer_norm",
    ("layer_norm", "return F.rms_norm(x, x.shape[-1:])"): "layer_norm",
    ("embedding", "return torch.ao.nn.qat.Embedding(4, 4)(x)"): "embedding",
    ("cross_entropy", "return -torch.distributions.OneHotCategorical(logits=x).log_prob(q).mean()"): "categorical",
    ("cross_entropy", "return F.linear_cross_entropy(x, q, k)"): "cross_entropy",
    ("cross_entropy", "return nn.AdaptiveLogSoftmaxWithLoss(4, 10, [2])(x, q).loss"): "cross_entropy",
}


@pytest.mark.parametrize("forbids_body, key", list(ROUTES.items()), ids=[b for _, b in ROUTES])
def test_each_library_route_is_a_hit(forbids_body, key):
    forbids, body = forbids_body
    q = next(q for q in autograder.questions() if forbids in q.forbidden)
    source = f"def {q.answer_name}(x, q=None, k=None, v=None, dim=-1):\n    {body}\n"
    assert key in _hits(source, q.id), (q.id, body)


RUNTIME = r'''
import warnings
warnings.simplefilter("ignore")
import torch
import torch.nn.functional as F
from autograder.student.ban import install, ForbiddenCall
x = torch.randn(3, 5)
t = torch.tensor([0, 1, 2])
q4 = torch.randn(1, 1, 4, 8)
mha_in = torch.randn(4, 1, 8)
ROUTES = {
    "softmax": {
        "Categorical.probs": lambda: torch.distributions.Categorical(logits=x).probs,
        "SoftmaxTransform": lambda: torch.distributions.transforms.SoftmaxTransform()(x),
        "quantized::softmax": lambda: torch.ops.quantized.softmax(
            torch.quantize_per_tensor(x, 0.05, 128, torch.quint8), 1, 0.004, 0),
        "masked.softmax": lambda: torch.masked.softmax(x, -1),
        "sparse.softmax": lambda: torch.sparse.softmax(x.to_sparse(), -1),
    },
    "cross_entropy": {
        "Categorical.log_prob": lambda: torch.distributions.Categorical(logits=x).log_prob(t),
        "OneHotCategorical": lambda: torch.distributions.OneHotCategorical(logits=x).log_prob(F.one_hot(t, 5).float()),
        "linear_cross_entropy": lambda: F.linear_cross_entropy(torch.randn(3, 4), torch.randn(5, 4), t),
        "AdaptiveLogSoftmaxWithLoss": lambda: torch.nn.AdaptiveLogSoftmaxWithLoss(5, 10, [4])(x, t),
    },
    "attention": {
        "quantizable MultiheadAttention": lambda: torch.ao.nn.quantizable.MultiheadAttention(8, 2)(
            mha_in, mha_in, mha_in),
        "flex_attention": lambda: __import__("torch.nn.attention.flex_attention", fromlist=["x"]).flex_attention(
            q4, q4, q4),
    },
    "layer_norm": {
        "batch_norm": lambda: F.batch_norm(x, None, None, training=True),
        "instance_norm": lambda: F.instance_norm(x[None]),
        "quantized::layer_norm": lambda: torch.ops.quantized.layer_norm(
            torch.quantize_per_tensor(x, 0.05, 128, torch.quint8), [5], None, None, 1e-5, 0.05, 128),
    },
}
out = {}
for key, routes in ROUTES.items():
    for name, route in routes.items():
        route()                                   # works before the ban
    ban = install([key], reversible=True)
    for name, route in routes.items():
        try:
            route()
            out[name] = "computed"
        except ForbiddenCall:
            out[name] = "forbidden"
    ban.undo()
    for name, route in routes.items():
        route()                                   # and after it is undone
import json
print(json.dumps(out))
'''


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_each_library_route_is_banned_in_the_students_process():
    """Under the ban of the question's key (as the sandbox installs it before the notebook
    runs; flex_attention's module is imported only afterwards, as a student would), every
    route raises; undone, every route computes again."""
    proc = subprocess.run([sys.executable, "-c", RUNTIME], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got and set(got.values()) == {"forbidden"}, got


# ------------------------------------------------------------------ held for review, end to end

A = "02_positional_encoding"
B = "03_attention"
# A library softmax by a computed name: no flag holds it (getattr on torch is not a flag), the ban
# in the student's process makes it a zero; beside it, honest code the flags used to hold.
COMPUTED_SOFTMAX = """
def softmax(x, dim=-1):
    return getattr(torch, "soft" + "max")(x, dim)
"""
HONEST_GUARDS = "import gc\ngc.collect()\nfused = hasattr(F, 'scaled_dot_product_attention')"


@pytest.fixture(scope="module")
def held_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("held-class")
    S.write(S.load(A), root, "honest", A)
    # the solution, right, with a construct that has no place in an answer in a cell of its own
    S.write(S.insert_cell(S.load(A), "import ctypes\nlibc = ctypes.CDLL(None)"), root, "native", A)
    # what the narrowed flags no longer hold is decided while the notebook runs
    computed = S.replace_definition(S.load(B), "softmax", COMPUTED_SOFTMAX)
    S.write(S.insert_cell(computed, HONEST_GUARDS), root, "computed", B)
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="flags-hold-test")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2",
                           "--no-progress", "--timeout", "20"], cwd=S.REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@pytest.mark.slow
def test_a_flag_holds_every_question_in_grades_csv(held_class):
    rows = S.read_csv(held_class)
    for q in autograder.questions(A):
        score, points, reason = rows[("native", A, q.id)]
        assert reason.startswith("held for review: ctypes, cell "), reason
        assert score == points == q.points           # the automatic score is kept in the record
        assert rows[("honest", A, q.id)] == (q.points, q.points, "")


@pytest.mark.slow
def test_what_the_flags_no_longer_hold_is_decided_at_run_time(held_class):
    """A computed getattr on torch and a hasattr guard hold nothing any more: the library
    softmax by a computed name still scores 0, for the call itself, and nothing is held."""
    rows = S.read_csv(held_class)
    score, points, reason = rows[("computed", B, "softmax")]
    assert (score, points) == (0, 1) and "called a function this exercise forbids" in reason, reason
    assert "held" not in reason
    for q in autograder.questions(B):
        if q.id != "softmax":     # the other answers use the library softmax where it is allowed
            assert rows[("computed", B, q.id)] == (q.points, q.points, ""), q.id


@pytest.mark.slow
def test_a_held_question_needs_manual_grading_in_the_gradebook(held_class):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{held_class / 'gradebook.db'}") as gb:
        native = gb.find_submission_notebook(A, A, "native")
        honest = gb.find_submission_notebook(A, A, "honest")
        assert native.grades and all(g.needs_manual_grade for g in native.grades)
        assert native.needs_manual_grade
        # nothing held: only the written question (graded by hand in every submission) waits
        assert [g.name for g in honest.grades if g.needs_manual_grade] == ["written"]
        def auto(grades):           # the written question has no automatic score
            return sum(g.auto_score for g in grades if g.auto_score is not None)
        assert auto(native.grades) == auto(honest.grades) > 0


@pytest.mark.slow
def test_report_lists_the_held_submission(held_class):
    page = (held_class / "report.html").read_text()
    section = page.split('id="flags"')[1].split('id="not-graded-normally"')[0]
    assert "Held for review" in page and "native" in section and "honest" not in section
    assert "ctypes" in section and ", ".join(q.id for q in autograder.questions(A)) in section


@pytest.mark.slow
def test_the_saved_result_names_the_flag_of_each_held_question(held_class):
    from autograder.batch.state import load_results
    results = {r["student"]: r for r in load_results(held_class)}
    native = results["native"]["questions"]
    assert [q["id"] for q in native] == [q.id for q in autograder.questions(A)]
    for q in native:                          # both lines of the ctypes cell, each with its text
        assert [(h["flag"], h["snippet"]) for h in q["held"]] == [("ctypes", "import ctypes"),
                                                                  ("ctypes", "libc = ctypes.CDLL(None)")]
        assert q["held"][0]["line"].endswith("line 1") and q["held"][1]["line"].endswith("line 2")
    assert all("held" not in q for q in results["honest"]["questions"])
