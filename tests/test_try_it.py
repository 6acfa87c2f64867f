"""The book's "Try it" experiments (issue 18): every chapter has at least two, and their code runs.

A "Try it" box is a MyST admonition in a markdown cell whose title starts with "Try it:",
fenced with more backticks (or colons) than the code blocks inside it:

    ````{admonition} Try it: <title>
    :class: tip
    **Change one thing.** ...
    ```python
    <a self-contained snippet>
    ```
    **Predict** ...  **Measure.** ...
    ````

Every ```` ```python ```` block inside a box is meant to be pasted into a new cell: it must run on
its own, in a fresh interpreter, on a CPU, in a few seconds.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = [f"{number:02d}" for number in range(1, 9)]  # 01_tokens ... 08_decoder
MIN_BOXES = 2
# one snippet, interpreter start and `import torch, vitref` included (about 6 s of the
# measured 7-12 s on a busy 2-core machine); generous, so that a loaded CI runner does not flake
SNIPPET_TIMEOUT_S = 60

BOX_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{admonition\}[ \t]+Try it:[ \t]*(?P<title>\S.*?)[ \t]*$", re.M)
PYTHON_BLOCK = re.compile(r"^(?P<fence>`{3,})python[ \t]*\n(?P<code>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


def try_it_boxes(markdown: str) -> list[tuple[str, str]]:
    """(title, body) of every "Try it" admonition in a markdown text, in order.

    The body ends at the first line that is the opening fence's character alone, at least as
    long as the opening fence (so a nested ```` ``` ```` block does not close a ```` ```` ```` box).
    Raises ValueError for a box that is never closed.
    """
    boxes = []
    for match in BOX_OPEN.finditer(markdown):
        fence = match["fence"]
        closing = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.M)
        end = closing.search(markdown, match.end())
        if end is None:
            raise ValueError(f"the 'Try it: {match['title']}' box is never closed (no line {fence!r})")
        boxes.append((match["title"], markdown[match.end():end.start()]))
    return boxes


def python_blocks(body: str) -> list[str]:
    """The code of every ```` ```python ```` block in a box's body."""
    return [match["code"] for match in PYTHON_BLOCK.finditer(body)]


def chapter_notebook(chapter: str) -> Path:
    found = sorted(BOOK.glob(f"{chapter}_*.ipynb"))
    assert len(found) == 1, f"expected one notebook book/{chapter}_*.ipynb, found {[p.name for p in found]}"
    return found[0]


def notebook_boxes(path: Path) -> list[tuple[str, str]]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    boxes = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = cell["source"]
            boxes += try_it_boxes(source if isinstance(source, str) else "".join(source))
    return boxes


def all_snippets() -> list:
    """One pytest.param per runnable block of every chapter present (a missing chapter fails below)."""
    params = []
    for chapter in CHAPTERS:
        for path in sorted(BOOK.glob(f"{chapter}_*.ipynb")):
            for title, body in notebook_boxes(path):
                for number, code in enumerate(python_blocks(body), start=1):
                    params.append(pytest.param(path.name, title, code, id=f"{path.stem}:{title}:{number}"))
    return params


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_two_try_it_boxes(chapter):
    path = chapter_notebook(chapter)
    boxes = notebook_boxes(path)
    titles = [title for title, _ in boxes]
    assert len(boxes) >= MIN_BOXES, f"{path.name}: {len(boxes)} 'Try it' box(es) {titles}, at least {MIN_BOXES} wanted"
    for title, body in boxes:
        assert re.search(r"\bpredict", body, re.I), f"{path.name}, 'Try it: {title}': nothing asks for a prediction"


def test_the_parser_finds_boxes_and_their_code():
    """The reader of the boxes itself: nested fences, other admonitions, an unclosed box."""
    text = (
        "Intro.\n\n````{admonition} Try it: one\n:class: tip\n**Predict** x.\n```python\nprint(1)\n```\n"
        "Then\n```python\nprint(2)\n```\n````\n\n```{admonition} Exercise: not a try-it\n:class: tip\nNo.\n```\n\n"
        ":::{admonition} Try it: two\n```python\nx = 3\n```\n:::\n"
    )
    boxes = try_it_boxes(text)
    assert [title for title, _ in boxes] == ["one", "two"]
    assert python_blocks(boxes[0][1]) == ["print(1)\n", "print(2)\n"]
    assert python_blocks(boxes[1][1]) == ["x = 3\n"]
    with pytest.raises(ValueError, match="never closed"):
        try_it_boxes("````{admonition} Try it: open\n```python\nprint(1)\n```\n")


def test_the_snippet_runner_reports_a_failing_snippet(tmp_path):
    """A snippet that raises must fail the run (the check below could not fail otherwise)."""
    result = run_snippet("raise SystemExit('boom')", tmp_path)
    assert result.returncode != 0 and "boom" in result.stderr


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=SNIPPET_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize(("notebook", "title", "code"), all_snippets())
def test_try_it_snippet_runs_on_its_own(notebook, title, code, tmp_path):
    start = time.perf_counter()
    try:
        result = run_snippet(code, tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{notebook}, 'Try it: {title}': still running after {SNIPPET_TIMEOUT_S} s")
    seconds = time.perf_counter() - start
    assert result.returncode == 0, (
        f"{notebook}, 'Try it: {title}': the snippet failed in a fresh interpreter\n{result.stderr[-3000:]}")
    assert result.stdout.strip(), f"{notebook}, 'Try it: {title}': the snippet prints nothing to measure"
    print(f"{notebook}, 'Try it: {title}': {seconds:.1f} s")
