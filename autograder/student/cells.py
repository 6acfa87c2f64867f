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


def code_only(raw: bytes, name: str = "submission.ipynb") -> bytes:
    """The submission as the student's process receives it: a notebook of its code cells'
    sources only. Markdown, raw cells, saved outputs, attachments and metadata stay with the
    grader, so nothing the student's code can read in its own notebook file holds more than the
    code the static scan saw (no data set or trained weights hidden in an output or a markdown
    cell). A Python file, or bytes that are not a notebook, are passed on as they are (the
    runner reports what is wrong with them)."""
    if name.endswith(".py"):
        return raw
    try:
        notebook = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return raw
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return raw
    cells = []
    for cell in notebook["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            if isinstance(source, list):
                source = "".join(str(part) for part in source)
            cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                          "source": source if isinstance(source, str) else ""})
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def code_cells(raw: bytes, name: str = "submission.ipynb") -> tuple[list[str], str]:
    """(code cells as plain Python, problem) of a submission's bytes; problem is "" when it
    is readable, else why not (not UTF-8, invalid JSON, no cells...)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], "it is not UTF-8 text"
    if name.endswith(".py"):
        return _python_cells(text), ""
    try:
        return _notebook_cells(text, "the notebook"), ""
    except SubmissionError as error:
        return [], str(error).replace("the notebook is not", "it is not")


def _bound_names(node) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    names = []
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            names += [sub.id for sub in ast.walk(target) if isinstance(sub, ast.Name)]
    return names


def defined_names(cells: list[str]) -> set[str]:
    """Top-level names bound in the cells (definitions, assignments, imports)."""
    names = set()
    for cell in cells:
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        for node in tree.body:
            names.update(_bound_names(node))
    return names


# ---------------------------------------------------------------- running the cells

class CellTimeout(BaseException):
    """Raised by the alarm (a BaseException: ``except Exception`` in student code does not stop it)."""


def _on_alarm(signum, frame_):
    raise CellTimeout()


class Shell:
    """Stand-in for ``get_ipython()``: magics and shell commands do nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def describe_error(error: BaseException, cell_index: int) -> str:
    import traceback

    where = ""
    for entry in reversed(traceback.extract_tb(error.__traceback__)):
        if entry.filename.startswith("<cell"):
            where = f" at line {entry.lineno}"
            break
    message = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"cell {cell_index + 1}{where}: {type(error).__name__}" + (f": {message}" if message else "")


def run_cells(cells: list[str], namespace: dict, budget, skip=(), on_cell=None, timed_out=None) -> list[str]:
    """Run the cells in ``namespace``, in order, each under an alarm of ``budget(index)``
    seconds (None or <= 0: stop there). A cell that raises, exits or runs out of time is
    recorded and the next one runs. ``on_cell(index)`` is called before each cell; the
    indices of cells stopped by the alarm are appended to ``timed_out``.
    Returns the errors, one line each."""
    import builtins
    import linecache
    import signal

    namespace.setdefault("__builtins__", builtins)
    errors: list[str] = []
    for index, cell in enumerate(cells):
        if index in skip:
            errors.append(f"cell {index + 1}: skipped (it stopped the notebook's process in an earlier attempt)")
            continue
        seconds = budget(index)
        if seconds is None or seconds <= 0.05:
            errors.append(f"cell {index + 1} and later: not run (the time limit was reached)")
            break
        if on_cell is not None:
            on_cell(index)
        filename = f"<cell {index + 1}>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            exec(compile(cell, filename, "exec"), namespace)  # noqa: S102 - running the submission is the point
        except CellTimeout:
            errors.append(f"cell {index + 1}: did not finish within {seconds:.0f} s")
            if timed_out is not None:
                timed_out.append(index)
        except BaseException as error:  # noqa: BLE001 - SystemExit, KeyboardInterrupt... recorded
            errors.append(describe_error(error, index))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _on_alarm)   # in case a cell replaced the handler
    return errors
