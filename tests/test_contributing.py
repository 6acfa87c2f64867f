"""The checklists of CONTRIBUTING.md, where a test can hold them: a question, a chapter, a
mistake or a training recipe that misses one of its files fails here, with what is missing.
(What other tests already hold is named in CONTRIBUTING.md and not repeated here.)"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib.metadata
import inspect
import io
import json
import re
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest
import torch
from einops import rearrange
from torch import nn

import autograder
import vitref
from answers import solutions as S            # tests/answers (tests/ is on sys.path under pytest)
from answers.bank import solutions, variants
from autograder.judging import catalogue
from autograder.judging.catalogue import entry
from autograder.instructor import nbtools
from vitref.training.cli import parse_args
from vitref.training.config import PRESETS, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = autograder.questions()
CHAPTER_MODULE = re.compile(r"ch(\d\d)_(\w+)\.py")
DOCUMENT = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[A-Z][A-Z0-9_]+\.md)\b")   # README.md, bench/RESULTS.md


CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


def _chapter_modules(folder: Path) -> dict[str, str]:
    """``{"ch03_attention": "03_attention", "ch07_label_smoothing": "07_vit", ...}``: a chapter's
    main module is named after it; more modules of the same chapter (a topic of their own) share
    its number. ``concepts.py`` (the conceptual questions of every chapter) is not a chapter module."""
    found = {}
    for path in sorted(folder.glob("ch*.py")):
        m = CHAPTER_MODULE.fullmatch(path.name)
        if m:
            same_number = [c for c in CHAPTERS if c.startswith(m.group(1) + "_")]
            found[path.stem] = same_number[0] if same_number else f"{m.group(1)}_{m.group(2)}"
    return found


QUESTION_MODULES = _chapter_modules(ROOT / "autograder" / "questions")
CATALOGUE_MODULES = _chapter_modules(ROOT / "autograder" / "judging" / "catalogue")


# ------------------------------------------------------------------ a chapter

def test_each_chapter_has_a_question_module_a_catalogue_module_and_its_notebooks():
    assert QUESTION_MODULES, "no autograder/questions/chNN_<name>.py found"
    assert QUESTION_MODULES == CATALOGUE_MODULES, (
        "autograder/questions/chNN_<a>.py and autograder/judging/catalogue/chNN_<a>.py come in pairs")
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert set(QUESTION_MODULES.values()) == set(CHAPTERS), "every chapter has its module"
    for module, chapter in QUESTION_MODULES.items():
        book = nbtools.chapter_of(chapter)       # an assignment may go with a chapter of another name
        for path in (f"book/{book}.ipynb", f"solutions/{chapter}/{chapter}.ipynb",
                     f"exercises/{chapter}/{chapter}.ipynb"):
            assert (ROOT / path).is_file(), f"{module}: {path} is missing"
        assert f"book/{book}" in toc, f"{module}: book/{book} is not in _toc.yml"


def _imported_from_package(init: Path) -> set[str]:
    """The names ``from . import (...)`` brings in, anywhere in ``init`` (the catalogue's are in _load())."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    return {alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None
            for alias in node.names}


def test_every_chapter_module_is_imported_by_its_package():
    """A chapter module that autograder/questions/__init__.py does not import registers nothing (or only by
    accident, through another module's import). The catalogue's package imports every module of its folder
    without a leading underscore, so there each question module needs a catalogue module of the same name."""
    missing = sorted(set(QUESTION_MODULES) - _imported_from_package(ROOT / "autograder/questions/__init__.py"))
    assert not missing, f"autograder/questions/__init__.py does not import {missing}"
    catalogue = ROOT / "autograder/judging/catalogue"
    missing = sorted(name for name in QUESTION_MODULES if not (catalogue / f"{name}.py").is_file())
    assert not missing, f"autograder/judging/catalogue/ has no module for {missing} (add <name>.py beside the others)"
    loaded = {name.rpartition(".")[2] for name in sys.modules if name.startswith("autograder.judging.catalogue.")}
    assert set(QUESTION_MODULES) <= loaded, "importing autograder.judging.catalogue did not import every chapter"


def test_every_chapter_module_registers_only_its_own_chapter():
    by_module: dict[str, set] = {}
    for q in QUESTIONS:
        by_module.setdefault(q.run_case.__module__.rpartition(".")[2], set()).add(q.chapter)
    by_module.pop("concepts", None)          # the conceptual questions of every chapter, in one module
    for module, chapters in by_module.items():
        assert module in QUESTION_MODULES, f"{module} registers questions but is not a chapter module"
        assert chapters == {QUESTION_MODULES[module]}, f"{module} registers questions of {sorted(chapters)}"
    assert set(by_module) == set(QUESTION_MODULES), "a chapter module registers no question"


# ------------------------------------------------------------------ a question
# (tests/test_answer_banks.py: a solution (@solution in the bank, equal to the notebook's answer) and an answer bank;
# tests/test_autograder_checks.py: >= 3 catalogued mistakes, each rejected and named;
# tests/test_notebooks.py: one test cell per question in its solutions notebook,
# print(autograder.grade("<id>", <answer>)), with the question's points)

def test_every_question_has_a_correct_variant_and_every_variant_a_question():
    ids = {q.id for q in QUESTIONS if q.kind != "value"}      # a value question has one right answer
    # variants in tests/test_exercises_new.py and (training, a minute each) tests/test_training_question.py
    tested_elsewhere = {"label_smoothing", "kv_cache", "train_to_accuracy"}
    VARIANTS = variants()
    missing = sorted(ids - set(VARIANTS) - tested_elsewhere)
    assert not missing, f"no @variant(...) in tests/answers/ch<chapter>.py for {missing}"
    unknown = sorted(set(VARIANTS) - {q.id for q in QUESTIONS})
    assert not unknown, f"tests/answers/ch*.py have variants for unknown questions {unknown}"


def test_the_solution_fixture_is_named_as_the_answer():
    """The tests' solution defines what the notebook defines, under the same name."""
    found = solutions()
    for q in QUESTIONS:
        if q.kind != "value":                    # a value answer is a number, not a named object
            assert found[q.id].__name__ == q.answer_name, (
                f"{q.id}: the tests' solution is named {found[q.id].__name__}, the notebook's {q.answer_name}")


def test_every_catalogue_entry_belongs_to_a_question():
    entry(QUESTIONS[0].id)                       # loads every chapter's catalogue
    orphans = sorted(set(catalogue._ENTRIES) - {q.id for q in QUESTIONS})
    assert not orphans, f"catalogue entries for questions that do not exist: {orphans}"


# ------------------------------------------------------------------ a mistake

@pytest.mark.parametrize("qid", [q.id for q in QUESTIONS])
def test_every_mistake_says_what_it_is_and_what_to_change(qid):
    for mistake in entry(qid).catalogue:
        where = f"{qid}/{mistake.key}"
        assert re.fullmatch(r"[a-z][a-z0-9_]*", mistake.key), f"{where}: keys are snake_case"
        assert mistake.title.strip() and mistake.hint.strip(), f"{where}: a title and a hint"
        # the first step of the feedback: a question of its own for every change and symptom (a wrong answer
        # without one asks about its title), never the fix itself
        assert mistake.build is not None or mistake.ask.strip(), f"{where}: a change or a symptom needs its ask"
        assert mistake.hint not in mistake.question(), f"{where}: the ask gives the fix away"
        missing = sorted(set(mistake.needs) - set(S.PARTS))
        assert not missing, (f"{where} needs {missing}: add them to PARTS in tests/answers/solutions.py "
                             f"(a question's solution or given code)")


# ------------------------------------------------------------------ a training recipe

@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_recipe_is_a_valid_command_line(name):
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(PRESETS[name]) - fields)
    assert not unknown, f"PRESETS[{name!r}] sets {unknown}, which are not TrainConfig fields"
    config = parse_args(["--preset", name])
    for key, value in PRESETS[name].items():
        assert getattr(config, key) == value, (name, key)


# ------------------------------------------------------------------ contracts (CONTRIBUTING.md, "Vocabulary")

def _parameters(obj) -> list[str]:
    return [p for p in inspect.signature(obj).parameters if p != "self"]


def test_contract_signatures_keep_their_names():
    assert _parameters(vitref.sinusoidal_encoding) == ["seq_len", "d_model", "n"]
    assert _parameters(vitref.ViT)[:8] == ["img_size", "patch_size", "in_channels", "num_classes", "dim", "depth",
                                           "num_heads", "mlp_dim"]
    # the slides' exercise-facing classes: emb_size for the width, drop_p for dropout
    for cls in (vitref.MultiHeadAttention, vitref.FeedForwardBlock, vitref.TransformerEncoderBlock,
                vitref.PatchEmbedding, vitref.MultiHeadAttentionLoop, vitref.CrossAttention):
        assert "emb_size" in _parameters(cls), cls.__name__
    for cls in (vitref.FeedForwardBlock, vitref.TransformerEncoderBlock):
        assert "drop_p" in _parameters(cls), cls.__name__
    assert "forward_drop_p" in _parameters(vitref.TransformerEncoderBlock)
    assert _parameters(vitref.FeedForwardBlock) == ["emb_size", "expansion", "drop_p", "hidden_dim"]
    # chapter 8's exercise (kv_cache): what generation adds (dropout, key_mask) comes after, with defaults
    init = inspect.signature(vitref.CachedSelfAttention).parameters
    forward = inspect.signature(vitref.CachedSelfAttention.forward).parameters
    assert list(init)[:2] == ["emb_size", "num_heads"] and list(forward)[:3] == ["self", "x", "cache"]
    added = list(init.values())[2:] + list(forward.values())[3:]
    assert all(p.default is not inspect.Parameter.empty for p in added), added


def _feed_forward_cells():
    """(notebook, source) of every solutions cell that defines FeedForwardBlock."""
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "class FeedForwardBlock(" in source:
                yield path.parent.name, source


def test_the_notebooks_feed_forward_block_is_vitrefs():
    """One signature for one concept: chapter 5's answer (Q7) and the block chapters 7 and 8 give
    take vitref.FeedForwardBlock's parameters, with its defaults, layers and parameter names."""
    found = dict(_feed_forward_cells())
    assert {"05_blocks", "07_vit", "08_decoder"} <= set(found), sorted(found)
    reference = vitref.FeedForwardBlock(6, hidden_dim=10)
    wanted = [(p.name, p.default) for p in inspect.signature(vitref.FeedForwardBlock).parameters.values()]
    for name, source in found.items():
        namespace = {"torch": torch, "nn": nn, "rearrange": rearrange}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, name, "exec"), namespace)  # noqa: S102 - the course's own notebook cell
        block = namespace["FeedForwardBlock"]
        assert [(p.name, p.default) for p in inspect.signature(block).parameters.values()] == wanted, name
        mine = block(6, hidden_dim=10)
        assert [type(m) for m in mine.children()] == [type(m) for m in reference.children()], name
        assert ([(k, tuple(v.shape)) for k, v in mine.state_dict().items()]
                == [(k, tuple(v.shape)) for k, v in reference.state_dict().items()]), name
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):   # the width goes by name: hidden_dim=mlp_dim
        assert not re.search(r"FeedForwardBlock\(\w+, mlp_dim", path.read_text(encoding="utf-8")), path.name


def _class_cells(name: str):
    """(notebook, source) of every solutions code cell that defines class ``name``."""
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and f"class {name}(" in source:
                yield path.parent.name, source


def test_the_notebooks_encoder_block_has_vitrefs_signature():
    """One signature for TransformerEncoderBlock: chapter 5's answer (Q7b), the block chapter 7
    gives and the q7b solution fixture take vitref's parameters, in its order and with its
    defaults, up to mlp_dim (vitref adds norm_first, norm_eps, attn_drop_p after it)."""
    wanted = [(p.name, p.default) for p in inspect.signature(vitref.TransformerEncoderBlock).parameters.values()]
    wanted = [w for w in wanted if w[0] != "norm_first"][:6]      # norm_first: vitref's post-LN option
    assert [n for n, _ in wanted] == ["emb_size", "num_heads", "drop_p", "forward_expansion", "forward_drop_p",
                                      "mlp_dim"]
    found = {}
    for name, source in _class_cells("TransformerEncoderBlock"):
        tree = ast.parse(source)
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TransformerEncoderBlock")
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        args = init.args.args[1:]
        defaults = [ast.literal_eval(d) for d in init.args.defaults]
        found[name] = list(zip([a.arg for a in args], defaults))
        assert init.args.kwarg is None and not init.args.kwonlyargs, name
    assert set(found) == {"05_blocks", "07_vit"}, sorted(found)
    for name, params in found.items():
        assert params == wanted, name
    fixture = [(p.name, p.default) for p in inspect.signature(S.TransformerEncoderBlock).parameters.values()]
    assert fixture == wanted


# ------------------------------------------------------------------ the repository

def test_one_version():
    with open(ROOT / "pyproject.toml", "rb") as f:
        written = tomllib.load(f)["project"]["version"]
    assert vitref.__version__ == autograder.__version__ == importlib.metadata.version("vitref-course") == written
    literals = [str(p.relative_to(ROOT)) for folder in ("vitref", "autograder") for p in (ROOT / folder).rglob("*.py")
                if re.search(r"^__version__\s*=\s*['\"]", p.read_text(encoding="utf-8"), re.M)]
    assert not literals, f"a second version is written in {literals}; pyproject.toml's is the one"


def test_documents_cited_by_the_code_exist():
    """A test or module that cites a document (an upper-case Markdown name, like README.md) cites
    a file of this repository. (tests/test_autograder_checks.py cited a DESIGN document that
    never was in it.)"""
    cited = set()
    for folder in ("tests", "vitref", "autograder", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for name in DOCUMENT.findall(path.read_text(encoding="utf-8")):
                cited.add((name, str(path.relative_to(ROOT))))
    missing = sorted((name, where) for name, where in cited
                     if not (ROOT / name).is_file() and not (ROOT / Path(where).parent / name).is_file())
    assert not missing, f"documents cited but not in the repository: {missing}"


def test_make_targets_named_in_the_docs_exist():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for doc in ("README.md", "CONTRIBUTING.md"):
        named = set(re.findall(r"`make ([a-z][\w-]*)", (ROOT / doc).read_text(encoding="utf-8")))
        assert named, doc
        assert named <= targets, f"{doc} names make targets that do not exist: {sorted(named - targets)}"


def test_tests_named_in_contributing_exist():
    """CONTRIBUTING.md says which test catches a forgotten step: each test it names (a file
    test_x.py or a function test_x) is defined under tests/."""
    files, functions = set(), set()
    for path in (ROOT / "tests").rglob("*.py"):
        files.add(path.name)
        functions |= set(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    named = set(re.findall(r"\btest_\w+(?:\.py)?", (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")))
    assert len(named) >= 20, sorted(named)
    missing = sorted(n for n in named if n not in (files if n.endswith(".py") else functions))
    assert not missing, (f"CONTRIBUTING.md names tests that do not exist: {missing}: rename them there to the "
                         f"tests that now hold the rule")


def test_every_noqa_says_why():
    """CONTRIBUTING asks for ``# noqa: CODE - reason``: a bare noqa hides a warning without telling
    the next reader whether it is still needed."""
    root = Path(__file__).resolve().parents[1]
    bare = []
    for folder in ("autograder", "vitref", "tests", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            with path.open("rb") as source:
                comments = [t for t in tokenize.tokenize(source.readline) if t.type == tokenize.COMMENT]
            for comment in comments:
                found = re.search(r"#\s*noqa\b(.*)$", comment.string)
                if found and not re.match(r":\s*[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*\s+-\s+\S", found.group(1)):
                    bare.append(f"{path.relative_to(root)}:{comment.start[0]}")
    assert not bare, f"give each of these noqa its reason, as '# noqa: CODE - why': {bare}"


def test_readme_is_a_two_minute_read_and_the_instructors_reference_is_a_page_of_the_book():
    """The README holds what a newcomer needs (at most 150 lines); the instructor's reference is
    the book's page For instructors, listed in _toc.yml and linked from the README."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = len(readme.splitlines())
    assert lines <= 150, f"README.md has {lines} lines: move reference text to book/for_instructors.md"
    assert "](book/for_instructors.md)" in readme
    assert "file: book/for_instructors" in (ROOT / "_toc.yml").read_text(encoding="utf-8")
    page = (ROOT / "book" / "for_instructors.md").read_text(encoding="utf-8")
    assert page.startswith("# For instructors\n") and "## Grading a class" in page and "### Gradescope" in page
