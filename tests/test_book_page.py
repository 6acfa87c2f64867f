"""The book's pages tell the story without the machinery (issue "The book an expert would sign").

Fast: reads the notebooks' JSON, runs nothing. A code cell whose job is bookkeeping (gluing numbers
into the text, building a Markdown table, switching to the tests' short runs, checking with
``assert``, reading the repository's benchmark records) hides its input: it is tagged
``remove-input`` when the reader needs its output (a table, a figure), ``remove-cell`` when not.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_book import toc_pages

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_PAGES = [page for page in toc_pages() if (ROOT / f"{page}.ipynb").is_file()]

# a reader never needs to see these in a code cell: they serve the build, not the story
BOOKKEEPING = {
    "glue(": re.compile(r"\bglue\("),
    "VITREF_FAST / FAST": re.compile(r"\bVITREF_FAST\b|\bFAST\b"),
    "assert": re.compile(r"^\s*assert\b", re.M),
    "bench/results": re.compile(r"bench/results|[\"']bench[\"']\)?\s*/\s*[\"']results[\"']"),
    "Markdown(": re.compile(r"\bMarkdown\("),
}
HIDDEN_INPUT = {"remove-input", "remove-cell", "hide-input"}


def cells(page: str) -> list[dict]:
    return json.loads((ROOT / f"{page}.ipynb").read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def visible_code(page: str) -> list[tuple[int, dict]]:
    """(index, cell) of the code cells whose input the page shows."""
    return [(i, c) for i, c in enumerate(cells(page)) if c["cell_type"] == "code"
            and not HIDDEN_INPUT & set(c.get("metadata", {}).get("tags", []))]


def test_the_book_has_notebook_pages():
    assert len(NOTEBOOK_PAGES) >= 9, NOTEBOOK_PAGES


@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=lambda p: p.split("/")[-1])
def test_no_visible_code_cell_does_bookkeeping(page):
    problems = []
    for index, cell in visible_code(page):
        found = [name for name, pattern in BOOKKEEPING.items() if pattern.search(source(cell))]
        if found:
            problems.append(f"{page}.ipynb cell {index} (id {cell.get('id')!r}) shows {', '.join(found)}: move those "
                            "lines into a cell of their own tagged remove-input (its output is a table or figure "
                            "the reader needs) or remove-cell (it outputs nothing), and keep the story visible")
    assert not problems, "\n".join(problems)


def test_the_check_finds_bookkeeping():
    """The patterns catch what they are meant to, and leave story code alone."""
    caught = ['glue("x", 1, display=False)', "steps = 20 if FAST else 120", "    assert a == b",
              'Path("bench") / "results" / "x.json"', "display(Markdown(text))"]
    for text in caught:
        assert any(p.search(text) for p in BOOKKEEPING.values()), text
    story = ["steps = 120  # training steps", "fast_path = True", "print('assertion')", "markdown = 1"]
    for text in story:
        assert not any(p.search(text) for p in BOOKKEEPING.values()), text
