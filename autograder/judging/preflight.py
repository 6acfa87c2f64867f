"""A submitted notebook's format and shape, checked before anything runs or is copied.

First the format: the notebook must follow nbformat 4's JSON schema (``nbformat``'s own
schema files, checked with the ``fastjsonschema`` validator nbformat ships with: about 0.4 ms
for the course's largest notebook, against 12 ms with ``jsonschema``). A cell whose source is
not a string or a list of strings, an unknown cell type, a missing field: the notebook gets
zero on every question, with the first schema error quoted. Cell ids are the one leniency:
nbformat itself adds missing ids (4.5) and Jupyter tools wrote ids into 4.4 notebooks, so
they are not held against a student (the autograded copy gives every cell a fresh id).

Then the size, counted on exactly the text the grader's readers use (the cell runner,
``autograder.student.cells``, and the autograded copy, ``autograder.batch.formgrader``: a
list source is ``"".join(str(part) ...)``, anything else is no text).

A notebook within the 50 MB file cap can still be built to make the grader's own work
(parsing, the autograded copy, the feedback pages) slow: 30,000 one-line cells, one huge
cell. The course's notebooks have at most 91 cells, 4 KB of source in a cell and 68 KB in
all; a submission may have twenty times that and more:

* at most ``MAX_CELLS`` cells (code, markdown and raw alike: each is copied);
* at most ``MAX_CELL_SOURCE`` bytes of source in one cell;
* at most ``MAX_TOTAL_SOURCE`` bytes of source in all its cells.

Outputs do not count: the grader never runs, shows or copies a student's outputs (the
autograded notebook has only the grader's own), so their only cost is reading the JSON,
which the file cap (``autograder.batch.tasks.MAX_NOTEBOOK_MB``) bounds. A notebook over a limit
gets zero on every question with the reason :func:`problem` gives, and its autograded
copy holds that reason instead of its cells.
"""
from __future__ import annotations

import json
import re
from typing import Any

MAX_CELLS = 2000
MAX_CELL_SOURCE = 100_000
MAX_TOTAL_SOURCE = 1_000_000

LIMITS = (f"at most {MAX_CELLS:,} cells, {MAX_CELL_SOURCE // 1000} KB of source in a cell and "
          f"{MAX_TOTAL_SOURCE // 1_000_000} MB of source in all (outputs do not count)")


def _size(source: Any) -> int:
    """The UTF-8 bytes of a cell's source as the readers join it."""
    if isinstance(source, list):
        return sum(len((part if isinstance(part, str) else str(part)).encode("utf-8", "surrogatepass"))
                   for part in source)
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


_CELL_TYPES = ("code", "markdown", "raw")
_CELL_ERROR = re.compile(r"^data\.cells\[(\d+)\]")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _cell_error(cell: Any, index: int, minor: int, fallback: str) -> str:
    """The first schema error of one cell, said as where and what (never the whole cell)."""
    if not isinstance(cell, dict):
        return f"cell {index + 1} is not a JSON object"
    kind = cell.get("cell_type")
    if kind not in _CELL_TYPES:
        return f"cell {index + 1} has the cell_type {_short(repr(kind), 40)}, not one of {', '.join(_CELL_TYPES)}"
    try:
        from nbformat import ValidationError
        from nbformat.validator import validate
        validate(cell, ref=f"{kind}_cell", version=4, version_minor=minor)
    except ValidationError as error:
        field = "/".join(str(p) for p in error.relative_path)
        if field == "source" or field.startswith("source/"):
            return f"cell {index + 1} ({kind}): its source is not a string or a list of strings"
        return f"cell {index + 1} ({kind}): " + (f"{field}: " if field else "") + _short(error.message)
    except Exception:  # noqa: BLE001 - the cell's own check failed to run: the notebook's message stands
        pass
    return fallback


def schema_problem(notebook: Any) -> str:
    """Why a parsed notebook does not follow nbformat 4's schema ("" when it does, or when it is
    not a JSON object with a list of cells: the reader says what is wrong with that)."""
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return ""
    version, minor = notebook.get("nbformat"), notebook.get("nbformat_minor")
    if version != 4 or not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
        return (f"the notebook is not in nbformat 4 (it says nbformat {_short(repr(version), 20)}."
                f"{_short(repr(minor), 20)}); open it in a current Jupyter and save it again; nothing was graded")
    try:
        from nbformat import ValidationError
        from nbformat.validator import get_validator
    except ImportError:         # no nbformat (the grading extra): the sizes below still hold
        return ""
    try:
        validator = get_validator(4, minor, name="fastjsonschema")
    except (ImportError, ValueError):
        validator = get_validator(4, minor)
    if validator is None:
        return f"the notebook's nbformat_minor {minor} has no schema; nothing was graded"
    cells: list[Any] = []
    for cell in notebook["cells"]:             # the one leniency: cell ids (see the module's text)
        if isinstance(cell, dict) and (("id" in cell) != (minor >= 5)):
            cell = {k: v for k, v in cell.items() if k != "id"}
            if minor >= 5:
                cell["id"] = f"cell-{len(cells)}"
        cells.append(cell)
    try:
        validator.validate({**notebook, "cells": cells})
    except ValidationError as error:
        message = _short(getattr(error, "message", "") or str(error))
        found = _CELL_ERROR.match(message)
        if found and int(found.group(1)) < len(cells):
            index = int(found.group(1))
            message = _cell_error(cells[index], index, minor, message)
        return (f"the notebook does not follow Jupyter's notebook format (nbformat 4.{minor}): "
                f"{message}; nothing was graded")
    except RecursionError:
        return "the notebook is nested too deeply to be read; nothing was graded"
    return ""


def problem(raw: bytes) -> str:
    """Why a notebook's bytes are refused: :func:`schema_problem`, then :func:`problem_of`
    ("" for bytes that are not JSON: the reader says what is wrong with those)."""
    try:
        notebook = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    try:
        return schema_problem(notebook) or problem_of(notebook)
    except RecursionError:
        return "the notebook is nested too deeply to be read; nothing was graded"
