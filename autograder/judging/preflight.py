"""Limits on a submitted notebook's shape, checked before anything runs or is copied.

A notebook within the 50 MB file cap can still be built to make the grader's own work
(parsing, the autograded copy, the feedback pages) slow: 30,000 one-line cells, one huge
cell. The course's notebooks have at most 91 cells, 4 KB of source in a cell and 68 KB in
all; a submission may have twenty times that and more:

* at most ``MAX_CELLS`` cells (code, markdown and raw alike: each is copied);
* at most ``MAX_CELL_SOURCE`` bytes of source in one cell;
* at most ``MAX_TOTAL_SOURCE`` bytes of source in all its cells.

Outputs do not count: the grader never runs, shows or copies a student's outputs (the
autograded notebook has only the grader's own), so their only cost is reading the JSON,
which the file cap (``autograder.batch.submission.MAX_NOTEBOOK_MB``) bounds. A notebook over a limit
gets zero on every question with the reason :func:`problem` gives, and its autograded
copy holds that reason instead of its cells.
"""
from __future__ import annotations

import json
from typing import Any

MAX_CELLS = 2000
MAX_CELL_SOURCE = 100_000
MAX_TOTAL_SOURCE = 1_000_000

LIMITS = (f"at most {MAX_CELLS:,} cells, {MAX_CELL_SOURCE // 1000} KB of source in a cell and "
          f"{MAX_TOTAL_SOURCE // 1_000_000} MB of source in all (outputs do not count)")


def _size(source: Any) -> int:
    if isinstance(source, list):
        return sum(len(part.encode("utf-8", "surrogatepass")) for part in source if isinstance(part, str))
    if isinstance(source, str):
        return len(source.encode("utf-8", "surrogatepass"))
    return 0


def problem_of(notebook: Any) -> str:
    """Why a parsed notebook is over the limits ("" when it is not, or is not a notebook:
    reading it reports that)."""
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return ""
    cells = notebook["cells"]
    if len(cells) > MAX_CELLS:
        return (f"the notebook has {len(cells):,} cells, more than the {MAX_CELLS:,} accepted "
                f"(the grader takes {LIMITS}); nothing was graded")
    total = 0
    for index, cell in enumerate(cells):
        size = _size(cell.get("source", "")) if isinstance(cell, dict) else 0
        if size > MAX_CELL_SOURCE:
            return (f"cell {index + 1} of the notebook has {size:,} bytes of source, more than "
                    f"the {MAX_CELL_SOURCE:,} accepted (the grader takes {LIMITS}); nothing was graded")
        total += size
    if total > MAX_TOTAL_SOURCE:
        return (f"the notebook's cells have {total:,} bytes of source in all, more than the "
                f"{MAX_TOTAL_SOURCE:,} accepted (the grader takes {LIMITS}); nothing was graded")
    return ""


def problem(raw: bytes) -> str:
    """:func:`problem_of` for a notebook's bytes ("" for bytes that are not JSON: the
    reader says what is wrong with those)."""
    try:
        notebook = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    return problem_of(notebook)
