"""Comments, docstrings and the project's Markdown name only repository files that exist.

A comment that says "see autograder/<module>.py" after the module moved sends the reader nowhere.
This test reads the comments and docstrings of every .py file under autograder/, vitref/, tests/ and
bench/, and the Markdown there, in book/ and at the top (README.md, CONTRIBUTING.md), and fails on
each path with a slash that ends in .py, .md or .ipynb and names no file. A path counts as found
when it exists relative to the repository root or to any folder above the file that names it, or
when it is the end of a file's path (CONTRIBUTING.md writes autograder/hosts/training.py as
``hosts/training.py``). A folder in capitals is a placeholder (``ROOT/nbgrader_config.py``).
Fast: reads text only.
"""
from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("autograder", "vitref", "tests", "bench")
TOP_MARKDOWN = ("README.md", "CONTRIBUTING.md")
SKIPPED_PARTS = {"__pycache__", "node_modules", ".venv", "_build", ".ipynb_checkpoints"}
# a path with at least one folder, not part of a longer word, URL or placeholder (<chapter>/x.ipynb)
PATH = re.compile(r"(?<![\w./<>{}*$-])((?:[\w.-]+/)+[\w-]+\.(?:py|md|ipynb))(?![\w/-])")
# Paths named in comments or docstrings that exist only while something runs: path -> why.
MADE_AT_RUN_TIME: dict[str, str] = {
    "folder/google/colab/__init__.py": "bench/colab_like.py: the stub package it writes into a temporary folder",
    "google/__init__.py": "bench/colab_like.py: the same stub package's parent",
}


def named_paths(text: str) -> list[str]:
    """The repository-like paths in ``text`` (``vitref/train.py``, ``../README.md``), in order."""
    return [path for path in PATH.findall(text) if not any(part.isupper() for part in path.split("/")[:-1])]


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment and each module, class or function docstring of ``source``."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


@functools.cache
def repository_files() -> frozenset[str]:
    """The paths of the repository's files, relative to the root (caches and builds left out)."""
    found = set()
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in SKIPPED_PARTS and not name.startswith(".")]
        found.update(Path(folder, name).relative_to(ROOT).as_posix() for name in files)
    return frozenset(found)


def exists_near(path: str, named_in: Path) -> bool:
    """Whether ``path`` names a file from the root, from a folder between ``named_in`` and the root,
    or as the end of a file's path in the repository."""
    folder = named_in.parent
    while folder == ROOT or ROOT in folder.parents:
        if (folder / path).exists():
            return True
        folder = folder.parent
    return "../" not in path and any(known.endswith("/" + path) for known in repository_files())


@functools.cache
def project_files() -> tuple[Path, ...]:
    files = [ROOT / name for name in TOP_MARKDOWN] + sorted((ROOT / "book").glob("*.md"))
    for top in CODE_DIRS:
        files += sorted(p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md")
                        and not SKIPPED_PARTS.intersection(p.relative_to(ROOT).parts))
    return tuple(files)


@functools.cache
def places(file: Path) -> tuple[tuple[int, str], ...]:
    """(line, text) of what ``file`` says to its reader: comments and docstrings, or Markdown lines."""
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".py":
        return tuple(comments_and_docstrings(text))
    return tuple(enumerate(text.splitlines(), start=1))


def missing_references(file: Path) -> list[str]:
    return [f"{file.relative_to(ROOT)}:{line}: {path}" for line, chunk in places(file) for path in named_paths(chunk)
            if path not in MADE_AT_RUN_TIME and not exists_near(path, file)]


def test_comments_docstrings_and_markdown_name_only_files_that_exist():
    missing = [entry for file in project_files() for entry in missing_references(file)]
    assert not missing, ("these comments, docstrings or Markdown lines name a file that does not exist; point "
                         "them at where the thing lives now, or drop the reference:\n  " + "\n  ".join(missing))


def test_every_run_time_path_is_still_named_somewhere():
    named = {path for file in project_files() for _, chunk in places(file) for path in named_paths(chunk)}
    assert set(MADE_AT_RUN_TIME) <= named, f"stale allow-list entries: {set(MADE_AT_RUN_TIME) - named}"


@pytest.mark.parametrize("text, paths", [
    ("# see autograder/hosts/training.py for the clock", ["autograder/hosts/training.py"]),
    ("moved from tests/answers/variants.py.", ["tests/answers/variants.py"]),
    ("https://github.com/o/r/blob/main/x/y.py and solutions/<chapter>/<chapter>.ipynb", []),
    ("a bare name.py, a folder/ only, ROOT/nbgrader_config.py", []),
    ("../other.ipynb, book/07_vit.ipynb", ["../other.ipynb", "book/07_vit.ipynb"]),
])
def test_the_pattern_finds_paths_and_skips_urls_and_placeholders(text, paths):
    assert named_paths(text) == paths


def test_a_moved_file_is_reported_and_a_package_relative_one_is_not():
    module = ROOT / "autograder" / "hosts" / "driver.py"
    assert exists_near("hosts/training.py", module)              # autograder/hosts/training.py
    assert exists_near("autograder/hosts/training.py", module)
    assert exists_near("catalogue/_changes.py", ROOT / "CONTRIBUTING.md")  # autograder/judging/catalogue/
    assert exists_near("../README.md", ROOT / "tests" / "test_references.py")
    assert not exists_near("tests/answers/variants.py", module)
    assert not exists_near("hosts/variants.py", module)
    assert not exists_near("../variants.py", ROOT / "tests" / "test_references.py")
