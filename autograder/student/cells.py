"""Reading a submission: the code cells of a notebook, or the cells of a Python file.

* ``.ipynb``: the code cells, in order (nbformat 4 JSON, read with the standard library);
* ``.py``: split at ``# %%`` markers when there are any, else one cell per top-level
  statement (so one failing statement does not hide the definitions after it).

IPython syntax is made plain Python by IPython's own transformer, as IPython would run it
(:func:`to_python`): on the grader's side, once (:func:`code_cells` for the static scan,
:func:`code_only` for the student's process, which receives the same plain cells).

:func:`run_cells` runs a cell's top-level statements one after the other, as IPython does: an
error stops the cell, except a :class:`~autograder.student.ban.ForbiddenCall` (a comparison
with the library function the exercise forbids, ``nn.LayerNorm(8)(x)``, written above the
answer in the same cell), which is recorded and the cell goes on.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from .ban import ForbiddenCall


class SubmissionError(Exception):
    """The submission file cannot be read (missing, not UTF-8, not a notebook...)."""


#: Cell magics whose cell runs as Python under IPython (timed, or with its output captured):
#: their body runs; any other cell magic (``%%writefile``, ``%%bash``, ``%%html``...) is skipped.
_KEEP_CELL_MAGICS = frozenset({"time", "timeit", "capture"})
#: Line magics that run their statement (``%time out = model(x)``): the statement runs.
_KEEP_LINE_MAGICS = frozenset({"time", "timeit"})
#: A line IPython may rewrite (an escape at its start: ``%``, ``!``, ``?``, autocall ``,;/``; ``x = !ls``;
#: a trailing ``?``), or a first line with a prompt or an indentation (IPython strips them).
#: Over-matching only sends a plain cell through IPython, which leaves plain Python as it is.
_IPYTHON_LINE = re.compile(r"^[ \t]*[%!?,;/]|=[ \t]*[%!]|\?[ \t]*$", re.MULTILINE)
_IPYTHON_FIRST_LINE = re.compile(r"^(?:>>>|In \[\d+\]:|[ \t]+\S)")
#: IPython re-reads (tokenizes) the whole cell after each rewrite, at up to 3.8 us a character
#: (measured on dense code): a cell with many magics costs (rewrites + 1) x its size. The cells
#: of one notebook get this many characters of such reading in all (about 2 s at worst); a cell
#: past it, or with more rewrites than :data:`_MAX_REWRITES` (IPython gives up at 500), is left as
#: it is and fails as the SyntaxError it is, in the scan and in the run alike. The course's
#: notebooks have no IPython syntax; a 5 KB ``%%time`` cell costs 15,000.
TRANSFORM_BUDGET = 500_000
_MAX_REWRITES = 400
_transformer = None


def _transformer_manager():
    """IPython's own cell transformer (imported on first use: the sandbox receives notebooks
    already rewritten by :func:`code_only`, so it never imports IPython for them)."""
    global _transformer
    if _transformer is None:
        from IPython.core.inputtransformer2 import TransformerManager
        _transformer = TransformerManager()
    return _transformer


def _get_ipython_call(node, method: str):
    """The constant arguments of ``get_ipython().<method>(...)``, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython" and not node.keywords
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
        return [a.value for a in node.args]
    return None


def _run_line_magics(code: str) -> str:
    """``get_ipython().run_line_magic('time', 'out = f(x)')`` (IPython's ``%time out = f(x)``)
    as the statement it times, in place (the same line, the same indentation)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    lines = code.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Expr) and node.lineno == node.end_lineno):
            continue
        args = _get_ipython_call(node.value, "run_line_magic")
        if not args or len(args) != 2 or args[0] not in _KEEP_LINE_MAGICS:
            continue
        statement = args[1].strip()
        try:
            parsed = ast.parse(statement)
        except SyntaxError:
            continue                      # options (%timeit -n 3 ...) or not Python: IPython's no-op stays
        if "\n" in statement or len(parsed.body) != 1:
            continue
        raw = lines[node.lineno - 1].encode("utf-8")
        raw = raw[:node.col_offset] + statement.encode("utf-8") + raw[node.end_col_offset:]
        lines[node.lineno - 1] = raw.decode("utf-8")
    return "".join(lines)


def to_python(cell: str, budget: list[int] | None = None) -> str:
    """A notebook cell as the plain Python IPython runs for it, rewritten by IPython's own
    transformer (``IPython.core.inputtransformer2``, logical lines: a continuation line that
    starts with ``%`` is Python, not a magic): ``!pip install einops`` and ``%matplotlib inline``
    become ``get_ipython()`` calls (which do nothing while grading), ``%time stmt`` runs ``stmt``,
    a ``%%time``/``%%timeit``/``%%capture`` cell runs its body and any other cell magic is
    skipped (""). Line numbers are kept. A cell without IPython syntax is returned as it is.
    ``budget`` ([characters left]) bounds IPython's work over a notebook (:data:`TRANSFORM_BUDGET`)."""
    first = next((line for line in cell.splitlines() if line.strip()), "")
    candidates = len(_IPYTHON_LINE.findall(cell)) + bool(_IPYTHON_FIRST_LINE.match(first))
    if not candidates:
        return cell
    cost = (min(candidates, _MAX_REWRITES) + 2) * len(cell)
    if candidates > _MAX_REWRITES or (budget is not None and cost > budget[0]):
        return cell
    if budget is not None:
        budget[0] -= cost
    lines = cell.splitlines(keepends=True)
    blank_lines = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    try:
        code = _transformer_manager().transform_cell(cell)
    except ImportError:
        return cell                       # no IPython: the cell fails as the SyntaxError it is
    except (RuntimeError, SyntaxError, ValueError, IndexError, TypeError):
        return cell                       # IPython gives up on it: so does the run
    if code.rstrip("\n") == "".join(lines[blank_lines:]).rstrip("\n"):
        return cell                       # nothing rewritten (IPython drops leading blank lines, adds a newline)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "\n" * blank_lines + code
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
        args = _get_ipython_call(tree.body[0].value, "run_cell_magic")
        if args is not None and len(args) == 3:
            name, line, body = args
            if name not in _KEEP_CELL_MAGICS:
                return ""
            setup = line.strip() if name == "timeit" and not line.strip().startswith("-") else ""
            return "\n" * blank_lines + setup + "\n" + to_python(body, budget)
    return "\n" * blank_lines + _run_line_magics(code)


def plain_cells(sources: list[str]) -> list[str]:
    """:func:`to_python` of each cell of one submission, within one :data:`TRANSFORM_BUDGET`."""
    budget = [TRANSFORM_BUDGET]
    return [to_python(source, budget) for source in sources]


#: Set by :func:`code_only` in the notebook the student's process receives: its cells are
#: already plain Python (what the static scan read), so they are not rewritten again there.
PLAIN_MARK = "autograder_plain_python"


def _notebook(text: str, path) -> dict:
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError as error:
        raise SubmissionError(f"{path} is not a valid notebook (invalid JSON: {error})") from None
    except RecursionError:
        raise SubmissionError(f"{path} is not a valid notebook (nested too deeply)") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SubmissionError(f"{path} is not a Jupyter notebook (no list of cells)")
    return notebook


def _code_cells_with_metadata(notebook: dict) -> list[tuple[str, dict]]:
    """``(source, nbgrader metadata)`` of a notebook's code cells, in order (a source that is not
    text: ""; metadata that is not a dict: {})."""
    found = []
    for cell in notebook["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(part) for part in source)
        metadata = cell.get("metadata")
        nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
        found.append((source if isinstance(source, str) else "", nbgrader if isinstance(nbgrader, dict) else {}))
    return found


def _code_sources(notebook: dict) -> list[str]:
    """The sources of a notebook's code cells, in order (a source that is not text: "")."""
    return [source for source, _ in _code_cells_with_metadata(notebook)]


def nbgrader_code_cells(raw: bytes, name: str = "submission.ipynb") -> list[tuple[str, dict]]:
    """``(source, nbgrader metadata)`` of the code cells of a notebook's bytes, numbered as the runner
    numbers them ([] for bytes that are not a readable notebook, and for a Python file)."""
    if name.endswith(".py"):
        return []
    try:
        return _code_cells_with_metadata(_notebook(raw.decode("utf-8"), name))
    except (UnicodeDecodeError, SubmissionError):
        return []


def _notebook_cells(text: str, path, honor_mark: bool = False) -> list[str]:
    notebook = _notebook(text, path)
    sources = _code_sources(notebook)
    metadata = notebook.get("metadata")
    if honor_mark and isinstance(metadata, dict) and metadata.get(PLAIN_MARK) is True:
        return sources
    return plain_cells(sources)


def _python_cells(text: str) -> list[str]:
    if re.search(r"^# %%", text, flags=re.MULTILINE):
        parts = re.split(r"^# %%.*$", text, flags=re.MULTILINE)
        return plain_cells([part for part in parts if part.strip()])
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


def read_cells(path, honor_mark: bool = True) -> list[str]:
    """The submission's code, cell by cell; :class:`SubmissionError` when it cannot be read.

    ``honor_mark``: a notebook :func:`code_only` wrote (its :data:`PLAIN_MARK`) is already plain
    Python and is read as it is (the student's process reads only such notebooks). The grader
    reading a student's own file passes False: a mark the student wrote means nothing."""
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
        return _notebook_cells(text, path, honor_mark=honor_mark)
    if path.suffix == ".py":
        return _python_cells(text)
    raise SubmissionError(f"{path}: expected a notebook (.ipynb) or a Python file (.py)")


def code_only(raw: bytes, name: str = "submission.ipynb", blank: tuple[int, ...] = ()) -> bytes:
    """The submission as the student's process receives it: a notebook of its code cells only,
    each already the plain Python the static scan read (:func:`to_python`, marked
    :data:`PLAIN_MARK`, so the student's process neither rewrites them again nor imports IPython).
    Markdown, raw cells, saved outputs, attachments and metadata stay with the grader, so
    nothing the student's code can read in its own notebook file holds more than the code the
    static scan saw (no data set or trained weights hidden in an output or a markdown cell). A
    Python file, or bytes that are not a notebook, are passed on as they are (the runner reports
    what is wrong with them). ``blank``: code cells (0-based) sent empty, the instructor's own
    test cells (:func:`autograder.batch.submission.instructor_test_cells`)."""
    if name.endswith(".py"):
        return raw
    try:
        notebook = _notebook(raw.decode("utf-8"), name)
    except (UnicodeDecodeError, SubmissionError):
        return raw
    sources = ["" if index in blank else source for index, source in enumerate(_code_sources(notebook))]
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}
             for source in plain_cells(sources)]
    return json.dumps({"cells": cells, "metadata": {PLAIN_MARK: True}, "nbformat": 4, "nbformat_minor": 5}).encode()


def code_cells(raw: bytes, name: str = "submission.ipynb", honor_mark: bool = False) -> tuple[list[str], str]:
    """(code cells as plain Python, problem) of a submission's bytes; problem is "" when it
    is readable, else why not (not UTF-8, invalid JSON, no cells...). ``honor_mark``: cells of a
    notebook :func:`code_only` made are taken as they are (only for bytes the grader made)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [], "it is not UTF-8 text"
    if name.endswith(".py"):
        return _python_cells(text), ""
    try:
        return _notebook_cells(text, "the notebook", honor_mark), ""
    except SubmissionError as error:
        return [], str(error).replace("the notebook is not", "it is not")


def bound_names(node) -> list[str]:
    """The global names a top-level statement binds (defined, imported or assigned)."""
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
            names.update(bound_names(node))
    return names


# ---------------------------------------------------------------- running the cells

class CellTimeout(BaseException):
    """Raised by the alarm (a BaseException: ``except Exception`` in student code does not stop it)."""


def _on_alarm(signum, frame_):
    raise CellTimeout()


def describe_error(error: BaseException, cell_index: int) -> str:
    import traceback

    where = ""
    for entry in reversed(traceback.extract_tb(error.__traceback__)):
        if entry.filename.startswith("<cell"):
            where = f" at line {entry.lineno}"
            break
    message = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    return f"cell {cell_index + 1}{where}: {type(error).__name__}" + (f": {message}" if message else "")


def _forbidden(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling, a :class:`ForbiddenCall`."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, ForbiddenCall):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def run_cells(cells: list[str], namespace: dict, budget, skip=(), on_cell=None, timed_out=None) -> list[str]:
    """Run the cells in ``namespace``, in order, each under an alarm of ``budget(index)``
    seconds (None or <= 0: stop there). A cell's top-level statements run one after the other,
    as IPython runs them: one that raises, exits or runs out of time is recorded and stops its
    cell (the next cell runs), except a :class:`ForbiddenCall` (the library function the
    exercise forbids, called for a comparison above the answer): it is recorded and the cell's
    next statement runs. ``on_cell(index)`` is called before each cell; the indices of cells
    stopped by the alarm are appended to ``timed_out``. Returns the errors, one line each."""
    import __future__
    import builtins
    import linecache
    import signal

    namespace.setdefault("__builtins__", builtins)
    features = 0                         # the __future__ imports so far, kept from cell to cell as IPython does
    every_feature = 0
    for name in __future__.all_feature_names:
        every_feature |= getattr(__future__, name).compiler_flag
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
            for statement in ast.parse(cell, filename).body:
                code = compile(ast.Module(body=[statement], type_ignores=[]), filename, "exec",
                               flags=features, dont_inherit=True)
                features |= code.co_flags & every_feature
                try:
                    exec(code, namespace)  # noqa: S102 - running the submission is the point
                except Exception as error:      # only a ForbiddenCall lets the cell go on
                    if not _forbidden(error):
                        raise
                    errors.append(describe_error(error, index))
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
