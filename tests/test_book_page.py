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


# ------------------------------------------------------------------ the sources, and the objectives

CHAPTER_PAGES = [page for page in NOTEBOOK_PAGES if re.search(r"/\d\d[a-z]?_", page)]
NOTES_PAGE = "book/notes_on_sources"
# what sends a reader to a work the reader may not be able to open, or tells of its mistakes on the page
SENDS_TO_A_SOURCE = re.compile(r"\bslides\b|among (?:this course's |the )?sources|course's (?:other )?sources|"
                               r"\bthe sources?\b(?! code)|source says|source writes|draws on|is based on", re.I)
OBJECTIVES = "**Learning objectives.** After this chapter you can"


def page_text(page: str) -> str:
    """Every cell's source, code included (comments can send a reader to a source too)."""
    return "\n".join(source(c) for c in cells(page))


def test_every_chapter_page_is_checked():
    assert len(CHAPTER_PAGES) >= 8, CHAPTER_PAGES
    assert NOTES_PAGE in toc_pages(), f"{NOTES_PAGE} is not listed in _toc.yml"


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.split("/")[-1])
def test_chapter_states_facts_without_sending_the_reader_to_the_sources(page):
    found = [(i, m.group(0)) for i, c in enumerate(cells(page)) for m in SENDS_TO_A_SOURCE.finditer(source(c))]
    assert not found, (f"{page}.ipynb names the course's sources in cells {found}: state the fact directly, and "
                       f"move what a source gets wrong to {NOTES_PAGE}.md (which work, what it says, the correction "
                       "and its evidence)")


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.split("/")[-1])
def test_chapter_links_the_notes_on_the_sources_once(page):
    links = re.findall(r"\{doc\}`(?:[^`<]*<)?notes_on_sources>?`", page_text(page))
    assert len(links) == 1, f"{page}.ipynb links {{doc}}`notes_on_sources` {len(links)} times: link it once"


@pytest.mark.parametrize("page", CHAPTER_PAGES, ids=lambda p: p.split("/")[-1])
def test_chapter_states_its_learning_objectives_in_the_books_one_style(page):
    text = page_text(page)
    assert text.count(OBJECTIVES) == 1, f"{page}.ipynb: write the objectives once, as '{OBJECTIVES}' and a list"
    assert "{admonition} Learning objectives" not in text, f"{page}.ipynb: objectives as a bold paragraph, not a box"
    first = cells(page)[0]
    assert first["cell_type"] == "markdown" and OBJECTIVES in source(first), (
        f"{page}.ipynb: the objectives belong to the chapter's first cell, its introduction")
    intro = source(first)
    assert "{admonition}" not in intro[:intro.index(OBJECTIVES)], (
        f"{page}.ipynb opens with a box before its learning objectives")


def test_the_notes_name_each_source_and_the_chapter_of_each_note():
    text = (ROOT / f"{NOTES_PAGE}.md").read_text(encoding="utf-8")
    for work in ("*Transformer*", "Implementing a Vision Transformer (ViT) in Julia!", "*Transformer Model*",
                 "Deconstructing ViTs from Scratch", "Trying to implement: An Image is Worth 16x16 Words"):
        assert work in text, f"{NOTES_PAGE}.md does not name the source {work!r}"
    notes = ["* **" + note.split("\n\n")[0] for note in re.split(r"^\* \*\*", text, flags=re.M)[1:]]
    assert len(notes) >= 12, notes
    chapters = {page.split("/")[-1] for page in CHAPTER_PAGES}
    for note in notes:
        linked = re.findall(r"\{doc\}`([\w]+)`", note)
        assert linked and set(linked) <= chapters, f"each note names its chapter with {{doc}}: {note[:80]}"
    assert "seed" not in text.lower() and ".txt" not in text, "cite the works, not the files they came in"


# ------------------------------------------------------------------ layout: code that reads at any width

CODE_WIDTH = 88            # characters: what a phone shows with a small scroll, and what ruff format wraps at
PYTHON_BLOCK = re.compile(r"^(?P<fence>`{3,})python[ \t]*\n(?P<code>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


def shown_code(page_cells: list[dict]) -> list[tuple[int, str]]:
    """(cell index, code) of everything a reader can see as code: the input of every code cell not
    removed (hidden inputs open with a click) and every ```python block of the text (the Try it boxes)."""
    found = []
    for i, cell in enumerate(page_cells):
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "code" and not tags & {"remove-input", "remove-cell"}:
            found.append((i, source(cell)))
        elif cell["cell_type"] == "markdown":
            found += [(i, m["code"]) for m in PYTHON_BLOCK.finditer(source(cell))]
    return found


@pytest.mark.parametrize("page", NOTEBOOK_PAGES, ids=lambda p: p.split("/")[-1])
def test_shown_code_lines_fit_the_width(page):
    long = [(i, len(line), line.strip()[:60]) for i, code in shown_code(cells(page)) for line in code.splitlines()
            if len(line) > CODE_WIDTH]
    assert not long, (f"{page}.ipynb: code lines longer than {CODE_WIDTH} characters (cell, length, start): {long}; "
                      f"wrap them (`ruff format --line-length {CODE_WIDTH}` on the cell, then comments and strings)")


def test_the_width_check_reads_code_cells_and_try_it_blocks():
    page = {"cells": [{"cell_type": "markdown", "metadata": {},
                       "source": "````{admonition} Try it: x\n```python\n" + "y" * 90 + "\n```\n````"},
                      {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "source": "z = 1"},
                      {"cell_type": "code", "metadata": {"tags": ["remove-input"]}, "source": "w" * 99}]}
    assert [len(code.strip()) for _, code in shown_code(page["cells"])] == [90, 5]


def figure_cells(page: str) -> list[tuple[int, dict]]:
    """(index, cell) of the code cells that show a figure: a plot has alt text (the browser test
    requires it), given as the cell's mystnb.image.alt; an architecture diagram is shown by
    ``diagrams.show``, which gives it its alt text (tests/test_diagrams.py)."""
    return [(i, c) for i, c in enumerate(cells(page))
            if c["cell_type"] == "code" and (c.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
                                             or "diagrams.show(" in source(c))]


def test_every_figure_has_a_numbered_caption_and_a_name_of_its_own():
    config = (ROOT / "_config.yml").read_text()
    assert 'numfig_format: {figure: "Fig. %s:"}' in config, "figures are captioned 'Fig. N: ...' (_config.yml)"
    names, problems = {}, []
    for page in NOTEBOOK_PAGES:
        for i, cell in figure_cells(page):
            figure = cell["metadata"]["mystnb"].get("figure", {})
            where = f"{page}.ipynb cell {i} (id {cell.get('id')!r})"
            if len(figure.get("caption", "").split()) < 4:
                problems.append(f"{where}: a figure without a caption (mystnb.figure.caption)")
            name = figure.get("name", "")
            if not re.fullmatch(r"fig-[a-z0-9-]+", name) or name in names:
                problems.append(f"{where}: figure name {name!r} missing, malformed or also used in {names.get(name)}")
            names[name] = where
    assert len(names) >= 40, f"only {len(names)} figures found"
    assert not problems, "\n".join(problems)
