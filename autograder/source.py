"""Reading a submission: the code cells of a notebook, or the cells of a Python file.

* ``.ipynb``: the code cells, in order (nbformat 4 JSON, read with the standard library);
* ``.py``: split at ``# %%`` markers when there are any, else one cell per top-level
  statement (so one failing statement does not hide the definitions after it).

IPython syntax is made plain Python: ``!shell`` and ``%magic`` lines become ``pass``, and a
cell starting with a cell magic other than ``%%time``/``%%capture`` is skipped.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path


class SubmissionError(Exception):
    """The submission file cannot be read (missing, not UTF-8, not a notebook...)."""


_MAGIC_LINE = re.compile(r"^(\s*)(?:[!%].*)$")
_KEEP_CELL_MAGICS = ("%%time", "%%timeit", "%%capture")


def to_python(cell: str) -> str:
    """A notebook cell as plain Python (magics and shell escapes neutralised)."""
    lines = cell.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if lines[0].split()[0] in _KEEP_CELL_MAGICS:
            lines = lines[1:]
        else:
            return ""
    out = []
    for line in lines:
        match = _MAGIC_LINE.match(line)
        if match:
            out.append(f"{match.group(1)}pass  # {line.strip()[:60]}")
        else:
            out.append(line)
    return "\n".join(out)


def _notebook_cells(text: str, path: Path) -> list[str]:
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise SubmissionError(f"{path} is not a valid notebook (invalid JSON: {error})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SubmissionError(f"{path} is not a Jupyter notebook (no list of cells)")
    cells = []
    for cell in notebook["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(part) for part in source)
        if not isinstance(source, str):
            continue
        cells.append(to_python(source))
    return cells


def _python_cells(text: str) -> list[str]:
    if re.search(r"^# %%", text, flags=re.MULTILINE):
        parts = re.split(r"^# %%.*$", text, flags=re.MULTILINE)
        return [to_python(part) for part in parts if part.strip()]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [text]               # executed as one cell: the SyntaxError becomes the cell's error
    lines = text.splitlines(keepends=True)
    cells = []
    for node in tree.body:
        start = node.lineno - 1
        if getattr(node, "decorator_list", None):
            start = min(d.lineno for d in node.decorator_list) - 1
        end = node.end_lineno
        # keep line numbers: pad with blank lines so tracebacks point at the file's lines
        cells.append("\n" * start + "".join(lines[start:end]))
    return cells


def read_cells(path) -> list[str]:
    """The submission's code, cell by cell; :class:`SubmissionError` when it cannot be read."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SubmissionError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SubmissionError(f"{path} is not UTF-8 text") from None
    if path.suffix == ".ipynb":
        return _notebook_cells(text, path)
    if path.suffix == ".py":
        return _python_cells(text)
    raise SubmissionError(f"{path}: expected a notebook (.ipynb) or a Python file (.py)")


def defined_names(cells: list[str]) -> set[str]:
    """Top-level names bound in the cells (definitions, assignments, imports)."""
    from .shortcuts import _bound_names

    names = set()
    for cell in cells:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        for node in tree.body:
            names.update(_bound_names(node))
    return names
