"""The exercises added for "Exercises that teach": questions of kind "value" (conceptual
questions answered with a number), label smoothing, the KV cache, and what the notebooks must
show (hints on every question, the names the checks need, the slides' blanks).

Each new question: correct variants pass, realistic mistakes are rejected and (where
catalogued) named; the value questions never give their value away.
"""
from __future__ import annotations

import ast
import io
import math
import re
import textwrap
import tokenize
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

import autograder
import vitref
from autograder.judging.catalogue import entry
from autograder.student.probe import ProbeRecorder
from answers import solutions as S          # tests/answers (tests/ is on sys.path under pytest)

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
VALUE_QUESTIONS = [q for q in autograder.questions() if q.kind == "value"]


pytestmark = pytest.mark.usefixtures("one_thread")


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


# ======================================================================= value questions

def test_every_chapter_has_a_graded_conceptual_question():
    chapters = {q.chapter for q in VALUE_QUESTIONS}
    assert chapters == {q.chapter for q in autograder.questions()}
    assert any("options" in q.cases[0].params for q in VALUE_QUESTIONS), "a multiple-choice question"


def _independent_values() -> dict:
    """Every conceptual question's value, recomputed here by running the code it talks about
    (the course's solutions, not the catalogue)."""
    masked = S.scaled_dot_product_attention(torch.randn(1, 1, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 3),
                                            torch.zeros(1, 1, 5, dtype=torch.bool))[1]
    assert torch.allclose(masked, torch.full_like(masked, masked[0, 0, 0].item()))
    keys, cache = 0, 0
    for step in range(1, 11):           # without a cache, step t computes the keys of all t tokens
        keys += step
        cache += 1
    assert cache == 10
    return {
        "concept_patch_numbers": S.image_to_patches(torch.zeros(1, 3, 32, 32), 8).shape[-1],
        "concept_sinusoid_value": float(S.getPositionEncoding(8, 4, n=100)[5, 2]),
        "concept_masked_row": float(masked[0, 0, 0]),
        "concept_heads_params": count(S.MultiHeadAttention(64, 8)) / count(S.MultiHeadAttention(64, 4)),
        "concept_mlp_share": count(S.FeedForwardBlock(768)) / count(S.MultiHeadAttention(768, 12)),
        "concept_position_rows": S.PatchEmbedding(3, 16, 768, img_size=224).sinusoids_positions.shape[0],
        "concept_initial_loss": float(S.cross_entropy(torch.zeros(1, 10), torch.tensor([3]))),
        "concept_decoding_work": keys,
    }


@pytest.mark.parametrize("qid, value", sorted(_independent_values().items()))
def test_value_computed_by_running_the_code_passes(qid, value):
    """The number the code gives is accepted (the catalogue's value agrees with the code)."""
    result = autograder.check(qid, value)
    assert result.passed, result.feedback
    assert result.feedback.endswith("correct.")


def test_the_multiple_choice_answer_is_the_option_the_chapter_argues():
    nb = nbformat.read(ROOT / "solutions" / "05_blocks" / "05_blocks.ipynb", as_version=4)
    text = next(c.source for c in nb.cells if c.id == "concept_warmup-intro")
    options = dict(re.findall(r"^(\d)\. (.+?)(?=^\d\. |\Z)", text, flags=re.MULTILINE | re.DOTALL))
    assert sorted(options) == ["1", "2", "3", "4"]
    right = [k for k, v in options.items() if "gradients are largest near the output" in v]
    assert right == ["2"]
    assert autograder.check("concept_warmup", int(right[0])).passed
    for wrong in set(options) - set(right):
        result = autograder.check("concept_warmup", int(wrong))
        assert not result.passed and result.mistake, result.feedback


@pytest.mark.parametrize("qid, inside, outside", [
    ("concept_sinusoid_value", [0.48, 0.479, 0.4794, 0.47943], [0.47, 0.49, 0.5]),
    ("concept_initial_loss", [2.3, 2.30, 2.303, np.float32(2.3026)], [2.2, 2.4, 2.31]),
    ("concept_mlp_share", [2, 2.0, 1.999, 2.004], [1.99, 1.95, 2.05, 2.1]),
    ("concept_masked_row", [0.2, 1 / 5, np.float64(0.2)], [0.19, 0.21, 0.25]),
    ("concept_patch_numbers", [192, 192.0, np.int64(192)], [191, 193]),
    ("concept_warmup", [2, 2.0], [5, 0, -1, 2.5]),
])
def test_tolerance_of_value_questions(qid, inside, outside):
    for value in inside:
        assert autograder.check(qid, value).passed, (qid, value)
    for value in outside:
        result = autograder.check(qid, value)
        assert not result.passed and result.score == 0, (qid, value)


@pytest.mark.parametrize("q", VALUE_QUESTIONS, ids=lambda q: q.id)
def test_a_wrong_value_is_rejected_without_giving_the_value_away(q):
    expected = float(entry(q.id).references()[0])
    params = q.cases[0].params
    wrong = int(params["options"]) + 1 if "options" in params else expected * 3 + 7.5
    result = autograder.check(q.id, wrong)
    assert not result.passed and result.mistake is None
    for shown in {f"{expected:g}", f"{expected:.2f}", f"{expected:.3g}", str(expected)}:
        assert shown not in result.feedback.replace(f"{wrong:g}", ""), (shown, result.feedback)


@pytest.mark.parametrize("q", VALUE_QUESTIONS, ids=lambda q: q.id)
def test_catalogued_values_are_named_with_a_hint(q):
    mistakes = entry(q.id).catalogue
    assert len(mistakes) >= 2
    for mistake in mistakes:
        for wrong in mistake.answers(None):
            result = autograder.check(q.id, wrong)
            assert not result.passed and result.mistake == mistake.key, (q.id, wrong, result.feedback)
            assert mistake.hint in result.feedback


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", text)]


@pytest.mark.parametrize("q", [q for q in VALUE_QUESTIONS if "options" not in q.cases[0].params],
                         ids=lambda q: q.id)
def test_a_catalogued_hint_never_states_the_value(q):
    """Each wrong value's title, hint and question lead back to the reasoning without the expected
    value: no number in them is the expected value (under the question's own tolerance)."""
    from autograder.judging.compare import values_close

    params = q.cases[0].params
    expected = entry(q.id).references()[0]
    for mistake in entry(q.id).catalogue:
        text = " ".join([mistake.title, mistake.hint, mistake.question()])
        assert not [x for x in _numbers(text) if values_close(x, expected, params)], (q.id, mistake.key, text)
        assert mistake.question() != mistake.hint


@pytest.mark.parametrize("q", [q for q in VALUE_QUESTIONS if "options" not in q.cases[0].params],
                         ids=lambda q: q.id)
def test_the_value_is_not_in_what_the_sandbox_holds(q):
    """questions/ runs beside student code: nothing it says about a value question (title,
    case parameters) is the expected value. (An option number, 1 to 4,
    is unavoidably a small integer: the next test looks at the multiple-choice question.)"""
    from autograder.judging.compare import values_close

    params = q.cases[0].params
    expected = entry(q.id).references()[0]
    text = " ".join([q.title, " ".join(q.outputs.values()), repr(dict(params))])
    assert not [x for x in _numbers(text) if values_close(x, expected, params)], (q.id, text)


def test_the_right_option_is_not_in_what_the_sandbox_holds():
    source = (ROOT / "autograder" / "questions" / "concepts.py").read_text()
    assert "WARMUP_RIGHT" not in source and "warmup_option = " not in source
    from autograder.judging.catalogue import concepts
    assert concepts.WARMUP_RIGHT == 2


def test_value_probe_accepts_numbers_only():
    q = autograder.question("concept_masked_row")
    for good in (0, 0.2, np.float32(0.2), np.int64(3)):
        data = ProbeRecorder(q).run(good)
        assert data["fatal"] is None and len(data["cases"]) == 1, good
    for bad in (..., "0.2", True, [0.2], torch.tensor(0.2), lambda: 0.2, int, np.array([0.2])):
        data = ProbeRecorder(q).run(bad)
        assert data["fatal"] and "should be a number" in data["fatal"], bad
    # the blank exercise's placeholder (`masked_row_weight = None` above the blank)
    assert "no answer yet: masked_row_weight is still None" in ProbeRecorder(q).run(None)["fatal"]


def test_every_blank_concept_answer_starts_as_none_so_its_check_gives_feedback():
    """In the exercises a concept answer cell raises NotImplementedError at its blank: the name is
    set to None above it, so the check cell prints feedback instead of a NameError."""
    import json

    for q in VALUE_QUESTIONS:
        path = ROOT / "exercises" / q.chapter / f"{q.chapter}.ipynb"
        cells = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
        answer = next(c for c in cells if "raise NotImplementedError()" in c and f"print({q.answer_name})" in c)
        assert answer.index(f"{q.answer_name} = None") < answer.index("raise NotImplementedError()"), q.id


def test_value_question_answer_of_the_wrong_type_gets_a_clear_message():
    result = autograder.check("concept_decoding_work", "55")
    assert not result.passed and "keys_without_cache should be a number" in result.feedback


# ======================================================================= label smoothing

def _formula(logits, targets, eps):
    """The book's definition, written out with vitref's softmax, in float64."""
    logits = logits.double()
    log_p = torch.log(vitref.softmax(logits, dim=-1))
    C = logits.shape[-1]
    q = torch.full_like(log_p, eps / C)
    q[torch.arange(len(targets)), targets] += 1 - eps
    return -(q * log_p).sum(-1).mean()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3, 1.0])
def test_label_smoothing_reference_is_the_books_formula(eps):
    reference = entry("label_smoothing").references()[0]
    logits, targets = torch.randn(6, 7, dtype=torch.float64), torch.randint(0, 7, (6,))
    assert torch.allclose(reference(logits, targets, eps), _formula(logits, targets, eps), atol=1e-12)


def ls_decomposed(logits, targets, smoothing=0.1):
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    nll = -log_p.gather(1, targets[:, None]).squeeze(1)
    return ((1 - smoothing) * nll - smoothing * log_p.mean(dim=-1)).mean()


def ls_one_hot(logits, targets, smoothing=0.1):
    C = logits.shape[-1]
    shifted = logits - logits.max(dim=1, keepdim=True).values
    log_p = shifted - shifted.exp().sum(dim=1, keepdim=True).log()
    q = F.one_hot(targets, C).to(logits.dtype) * (1 - smoothing) + smoothing / C
    return torch.mean(torch.sum(-q * log_p, dim=1))


def ls_loop(logits, targets, smoothing=0.1):
    losses = []
    for row, t in zip(logits, targets):
        m = row.max()
        log_p = row - m - torch.log(torch.exp(row - m).sum())
        losses.append(-(1 - smoothing) * log_p[t] - smoothing * log_p.mean())
    return torch.stack(losses).mean()


@pytest.mark.parametrize("answer", [S.smoothed_cross_entropy, ls_decomposed, ls_one_hot, ls_loop],
                         ids=lambda a: a.__name__)
def test_label_smoothing_correct_variants_pass(answer):
    result = autograder.check("label_smoothing", answer)
    assert result.passed, result.feedback


def ls_library(logits, targets, smoothing=0.1):
    return F.cross_entropy(logits, targets, label_smoothing=smoothing)


def ls_log_softmax(logits, targets, smoothing=0.1):
    log_p = F.log_softmax(logits, dim=-1)
    return ((1 - smoothing) * -log_p.gather(1, targets[:, None]).squeeze(1) - smoothing * log_p.mean(-1)).mean()


def ls_float32(logits, targets, smoothing=0.1):
    return S.smoothed_cross_entropy(logits.float(), targets, smoothing)


def ls_default_zero(logits, targets, smoothing=0.0):
    return S.smoothed_cross_entropy(logits, targets, smoothing)


def ls_detached(logits, targets, smoothing=0.1):
    return S.smoothed_cross_entropy(logits.detach(), targets, smoothing)


@pytest.mark.parametrize("answer, words", [
    (ls_library, "Not accepted"), (ls_log_softmax, "Not accepted"),
    (ls_float32, "float32's precision only"), (ls_default_zero, "called without smoothing"),
    (ls_detached, "does not depend differentiably"),
], ids=lambda a: getattr(a, "__name__", "words"))
def test_label_smoothing_realistic_mistakes_are_rejected(answer, words):
    result = autograder.check("label_smoothing", answer)
    assert not result.passed and result.score == 0
    assert words in result.feedback, result.feedback


# ======================================================================= KV cache

@pytest.mark.parametrize("emb, heads, steps", [(8, 2, [3, 1, 1, 1]), (12, 3, [1, 2, 1, 3]), (16, 4, [1] * 6),
                                               (8, 4, [6])])
def test_kv_cache_reference_equals_recomputing_the_prefix(emb, heads, steps):
    """vitref.CachedSelfAttention, step by step, gives the rows of the causal multi-head
    attention of the whole sequence (vitref.MultiHeadAttention with the same weights)."""
    torch.manual_seed(0)
    cached = vitref.CachedSelfAttention(emb, heads).double()
    full_mha = vitref.MultiHeadAttention(emb, heads).double()
    full_mha.load_state_dict(cached.state_dict())
    x = torch.randn(2, sum(steps), emb, dtype=torch.float64)
    expected = full_mha(x, causal=True)
    cache, start, outs = None, 0, []
    for length in steps:
        out, cache = cached(x[:, start:start + length], cache)
        outs.append(out)
        start += length
        assert cache[0].shape == (2, heads, start, emb // heads) == cache[1].shape
    assert torch.allclose(torch.cat(outs, dim=1), expected, atol=1e-12)


class KVMinusInf(S.CachedSelfAttention):
    """-inf fills and the mask from absolute positions."""

    def forward(self, x, cache=None):
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)
        past = 0 if cache is None else cache[0].shape[2]
        if cache is not None:
            k, v = torch.cat((cache[0], k), 2), torch.cat((cache[1], v), 2)
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
        query_pos = torch.arange(past, past + q.shape[2])[:, None]
        scores = scores.masked_fill(torch.arange(k.shape[2])[None, :] > query_pos, float("-inf"))
        out = rearrange(scores.softmax(-1) @ v, "b h t d -> b t (h d)")
        return self.projection(out), [k, v]           # a list is a fine cache too


class KVLoopOverTokens(S.CachedSelfAttention):
    """Every new token processed one at a time through the cache (a chunk = several steps)."""

    def forward(self, x, cache=None):
        outs = []
        for t in range(x.shape[1]):
            out, cache = S.CachedSelfAttention.forward(self, x[:, t:t + 1], cache)
            outs.append(out)
        return torch.cat(outs, dim=1), cache


@pytest.mark.parametrize("answer", [S.CachedSelfAttention, KVMinusInf, KVLoopOverTokens], ids=lambda a: a.__name__)
def test_kv_cache_correct_variants_pass(answer):
    result = autograder.check("kv_cache", answer)
    assert result.passed, result.feedback


class KVLibrary(S.CachedSelfAttention):
    def forward(self, x, cache=None):
        q, k, v = rearrange(self.qkv(x), "b t (qkv h d) -> qkv b h t d", qkv=3, h=self.num_heads)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        T, total = q.shape[2], k.shape[2]
        mask = torch.ones(T, total, dtype=torch.bool).tril(total - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.projection(rearrange(out, "b h t d -> b t (h d)")), (k, v)


class KVNoCacheReturned(S.CachedSelfAttention):
    def forward(self, x, cache=None):
        return S.CachedSelfAttention.forward(self, x, cache)[0]


class KVCacheInputs(S.CachedSelfAttention):
    """Caches the token vectors x instead of the keys and values (recomputes the prefix)."""

    def forward(self, x, cache=None):
        whole = x if cache is None else torch.cat([cache, x], dim=1)
        out = S.CachedSelfAttention.forward(self, whole)[0][:, -x.shape[1]:]
        return out, whole


class KVHeadsMerged(nn.Module):
    """Caches keys (B, S, E) with the heads merged."""

    def __init__(self, emb_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(emb_size, 3 * emb_size)
        self.projection = nn.Linear(emb_size, emb_size)

    def forward(self, x, cache=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)                                    # (B, T, E)
        if cache is not None:
            k, v = torch.cat([cache[0], k], 1), torch.cat([cache[1], v], 1)
        split = lambda t: rearrange(t, "b t (h d) -> b h t d", h=self.num_heads)  # noqa: E731 - as a student writes it
        T, total = q.shape[1], k.shape[1]
        scores = split(q) @ split(k).transpose(-2, -1) / (q.shape[-1] // self.num_heads) ** 0.5
        scores = scores.masked_fill(~torch.ones(T, total, dtype=torch.bool).tril(total - T), -1e9)
        out = rearrange(scores.softmax(-1) @ split(v), "b h t d -> b t (h d)")
        return self.projection(out), (k, v)


@pytest.mark.parametrize("answer, words", [
    (KVLibrary, "Not accepted"),
    (KVNoCacheReturned, "should return a tuple (out, cache)"),
    (KVCacheInputs, "the cache returned by forward should be a tuple (keys, values)"),
    (KVHeadsMerged, "expected cached keys of shape"),
], ids=lambda a: getattr(a, "__name__", "words"))
def test_kv_cache_realistic_mistakes_are_rejected(answer, words):
    result = autograder.check("kv_cache", answer)
    assert not result.passed and result.score == 0
    assert words in result.feedback, result.feedback


def test_kv_cache_mistakes_are_named_with_the_step_that_differs():
    from autograder.judging.catalogue.ch08_kvcache import _cached

    result = autograder.check("kv_cache", _cached(causal="tril", fill=-1e9)(None))
    assert result.mistake == "mask_without_offset"
    assert "out of step 2" in result.feedback and "a prompt of 3 tokens" in result.feedback


def test_kv_cache_cases_use_several_heads_and_grow_the_cache():
    for case in autograder.question("kv_cache").cases:
        assert case.params["h"] >= 2 and len(case.params["steps"]) >= 4


# ======================================================================= the notebooks

def _cells(name):
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4).cells


# The hints and the names the given code reads: tests/test_conventions.py (with the fix in each message).


@pytest.mark.parametrize("name, qid, scaffold", [
    ("06_patch_embedding", "q2", ['Rearrange("b c (h s1) (w s2) -> " + output_axes',
                                  "nn.Linear(in_features, out_features)"]),
    ("06_patch_embedding", "q3", ["cls_tokens = repeat(self.cls_token, pattern, b=b)"]),
    ("04_multihead_attention", "q5", ['torch.einsum("bhal, bhlv -> " + einsum_output, att, values)',
                                      "rearrange(out, merge_heads)"]),
])
def test_the_exercise_shows_the_slides_partial_code(name, qid, scaffold):
    exercise = nbformat.read(ROOT / "exercises" / name / f"{name}.ipynb", as_version=4)
    cell = next(c for c in exercise.cells if c.id == f"{qid}-answer")
    assert "raise NotImplementedError()" in cell.source
    for line in scaffold:
        assert line in cell.source, (qid, line)
        assert cell.source.index("raise NotImplementedError()") < cell.source.index(line)


# ----------------------------------------------------------------- Hint 2 is a scaffold, never the answer
#
# A Hint 2 gives the shapes, a pattern's left side, a question that points at the next step, or a
# partial step with its key part left blank (`<...>` or `...`), never the lines of the answer. The
# answer is the code between ### BEGIN SOLUTION and ### END SOLUTION; what the student is given (the
# answer cell's other code, the question's text) may be quoted.

SCAFFOLD = ("rewrite Hint 2 as a scaffold: the shapes, a pattern's left side, a question that points at the "
            "next step, or a partial step with the key part left as <...> (CONTRIBUTING.md, 'Add a question', 4)")
BLANK = re.compile(r"<[^<>]*>|\.\.\.")        # a blank in a hint's code: <what goes there> or ...
MIN_LINE, MIN_EXPRESSION, MIN_SKELETON = 12, 16, 6


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _without_comments(source: str) -> str:
    """The Python source with its comments cut out (strings that hold a # are kept)."""
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(lines)


def _solution_regions(source: str) -> tuple[list[str], str]:
    """(the solution regions of an answer cell, comments out; the cell's given code without them)."""
    pattern = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION", re.DOTALL)
    regions = [textwrap.dedent(_without_comments(m)) for m in pattern.findall(source)]
    return regions, _without_comments(pattern.sub("", source))


def _key_expressions(region: str) -> list[str]:
    """The values the answer computes: each assignment's right-hand side, each returned or evaluated
    expression, and each call inside them (squeezed)."""
    found = []
    for node in ast.walk(ast.parse(region)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)) and node.value:
            found.append(node.value)
        elif isinstance(node, ast.Call):
            found.append(node)
    return [_squeeze(ast.get_source_segment(region, node) or "") for node in found]


def _skeleton_matches(span: str, statement: str) -> bool:
    """Whether a hint's code `span`, its blanks filled in, is the whole `statement` (both squeezed)."""
    parts = BLANK.split(span)
    literal = "".join(parts)
    if len(parts) == 1 or len(literal) < MIN_SKELETON:
        return False
    return re.fullmatch(".+".join(map(re.escape, parts)), statement) is not None


def _answer_problems(hint: str, answer: str, given_text: str) -> list[str]:
    """What of the answer cell's solution Hint 2 gives away (hint and given_text squeezed)."""
    regions, given_code = _solution_regions(answer)
    given = _squeeze(given_code) + given_text
    problems = []
    for region in regions:
        for line in map(_squeeze, region.splitlines()):
            if len(line) >= MIN_LINE and line in hint and line not in given:
                problems.append(f"it gives the answer's line {line!r}")
        for expression in _key_expressions(region):
            if len(expression) >= MIN_EXPRESSION and expression in hint and expression not in given:
                problems.append(f"it gives the answer's expression {expression!r}")
    for region in regions:
        statements = ast.parse(region).body
        if len(statements) != 1:        # a one-statement answer: no skeleton of it either
            continue
        whole = _squeeze(ast.get_source_segment(region, statements[0]) or "")
        value = getattr(statements[0], "value", None)
        rhs = _squeeze(ast.get_source_segment(region, value) or "") if value else whole
        for span in re.findall(r"`([^`]+)`", hint):
            if _skeleton_matches(span, whole) or _skeleton_matches(span, rhs):
                problems.append(f"its skeleton `{span}` is the one-line answer {whole!r} with a blank in it")
    return list(dict.fromkeys(problems))


def _options(intro: str) -> dict[int, str]:
    """A multiple-choice question's options, {number: text}, from its numbered list."""
    found = re.findall(r"^(\d+)\. (.+?)(?=^\d+\. |^\s*$|\Z)", intro, flags=re.MULTILINE | re.DOTALL)
    return {int(number): " ".join(text.split()) for number, text in found}


def _phrases(text: str, n: int = 3) -> set[str]:
    words = re.findall(r"[a-z0-9'-]+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _value_problems(q, hint: str, intro: str) -> list[str]:
    """What of a value question's answer Hint 2 (raw text) gives away: the right option (its number
    as the answer, or a phrase of its own), or the expected number."""
    expected = float(entry(q.id).references()[0])
    if "options" not in q.cases[0].params:
        shown = {f"{expected:g}", f"{round(expected, 2):g}"} - {str(d) for d in range(10)}
        return [f"it states the expected value {v}" for v in sorted(shown)
                if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", hint)]
    options, right = _options(intro), int(expected)
    assert right in options and len(options) == q.cases[0].params["options"], (q.id, sorted(options))
    problems = [f"it names option {right} as the answer" for _ in re.finditer(
        rf"\b(?:option|answer|choice|number)\s*\(?{right}\)?(?!\d)|\({right}\)|\b{right}\)", hint, re.IGNORECASE)]
    stem = intro[:intro.index("\n1. ")]
    elsewhere = " ".join([stem, *(t for k, t in options.items() if k != right)])
    common = _phrases(elsewhere, 1)                 # words that do not point at the right option
    own = sorted(p for p in _phrases(options[right]) & _phrases(hint) if set(p.split()) - common)
    return problems + [f"it quotes the right option ({right}): {', '.join(repr(p) for p in own)}"] * bool(own)


def _hint_2_of(name: str, qid: str, hint: str | None = None) -> list[str]:
    """How the Hint 2 of question ``qid`` (the notebook's, or ``hint``) gives its answer away."""
    q = autograder.question(qid)
    cells = {c.get("id"): c for c in _cells(name)}
    intro, hints, answer = (cells[f"{qid}-{s}"].source for s in ("intro", "hints", "answer"))
    hint = hints.split("<summary>Hint 2</summary>")[1] if hint is None else hint
    found = _answer_problems(_squeeze(hint), answer, _squeeze(intro))
    return found + (_value_problems(q, hint, intro) if q.kind == "value" else [])


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_hint_2_is_a_scaffold_not_the_answer(name):
    """No Hint 2 holds a line of its answer (>= 12 characters, whitespace and comments aside), an
    expression the answer computes (>= 16), a skeleton of a one-line answer, the right option of a
    multiple-choice question or a value question's number; what the question gives may be quoted."""
    problems = [f"solutions/{name}/{name}.ipynb, cell {q.id}-hints: Hint 2 {what}: {SCAFFOLD}"
                for q in autograder.questions() if q.chapter == name for what in _hint_2_of(name, q.id)]
    assert not problems, "\n".join(problems)


# Hint 2s the notebooks held before, each giving its answer away, and what the check must say of each.
@pytest.mark.parametrize("name, qid, hint, says", [
    ("03_attention", "attention_head", "`q, k, v = self.query(x), self.key(x), self.value(x)` are each "
     "`(B, T, head_dim)`.", "the answer's line 'q,k,v=self.query(x),self.key(x),self.value(x)'"),
    ("05_blocks", "q6", "One line: `return x + <what self.fn makes of x, with the keyword arguments passed on>`.",
     "is the one-line answer"),
    ("05_blocks", "concept_warmup", "The chapter's experiment: post-LN concentrates the gradient near the output; "
     "the first Adam steps are full-size steps on very few gradient samples.", "'near the output'"),
    ("08_decoder", "kv_cache", "put the cached keys first, `k = torch.cat([cache[0], k], dim=2)`, and the same for "
     "`v`", "the answer's line 'k=torch.cat([cache[0],k],dim=2)'"),
    ("09_training", "train_to_accuracy", "then `lr = peak_lr * 0.5 * (1 + math.cos(math.pi * (progress - warmup) / "
     "(1 - warmup)))`", "'peak_lr*0.5*(1+math.cos(math.pi*(progress-warmup)/(1-warmup)))'"),
    ("09_training", "train_to_accuracy", "the step is `loss = F.cross_entropy(model(images[index]), labels[index], "
     "label_smoothing=0.1)`", "'F.cross_entropy(model(images[index]),labels[index],label_smoothing=0.1)'"),
    ("08_decoder", "causal_mask", "Start from `torch.ones(T, T, dtype=torch.bool)` and keep one triangle.",
     "expression 'torch.ones(T,T,dtype=torch.bool)'"),
    ("09_training", "concept_augmentation", "Shifted images teach it that: the answer is option 2.",
     "names option 2 as the answer"),
    ("01_tokens", "concept_patch_numbers", "8 x 8 pixels of 3 numbers: 192 in all.", "the expected value 192"),
])
def test_hint_2_check_catches_an_answer_given_away(name, qid, hint, says):
    assert any(says in problem for problem in _hint_2_of(name, qid, hint)), _hint_2_of(name, qid, hint)


@pytest.mark.parametrize("name, qid, hint", [
    ("03_attention", "softmax", "`shifted = x - <the maximum along dim, kept>`, then `exps = <e to the power>`"),
    ("06_patch_embedding", "q3", 'the left side is `"() n e -> "`; write the right side, with `b=b`'),
    ("05_blocks", "concept_warmup", "Which option needs both? Compare the first block's gradient with the last's."),
])
def test_hint_2_check_lets_a_scaffold_through(name, qid, hint):
    assert _hint_2_of(name, qid, hint) == []
