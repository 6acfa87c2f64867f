"""The files nbgrader's own tools read, written for each graded submission.

``ROOT/autograded/<student>/<assignment>/<notebook>.ipynb`` is where ``nbgrader autograde``
puts the executed notebook; ``nbgrader formgrader`` shows it and ``nbgrader
generate_feedback`` turns it into ``ROOT/feedback/<student>/<assignment>/<notebook>.html``
(with the scores and comments of the gradebook). The sandboxed grader never executes the
notebook in the instructor's process, so the notebook written here is rebuilt from the
submission, as data:

* every cell's text as submitted, **no output of the student's** (outputs are whatever the
  student saved, HTML and scripts included: they would run in the instructor's browser in
  formgrader); markdown cells rendered and cleaned (:mod:`autograder.batch.sanitize`: no
  script, event handler, ``javascript:`` URL, frame or style survives), code cells as text;
* nbgrader metadata only where the source notebook has the same cell (``grade_id``), and
  then the source's metadata (points, grade/solution/locked), so that a student cannot add
  points, invent grade cells (``generate_feedback`` would fail on an unknown ``grade_id``)
  or duplicate one;
* a written answer (a markdown cell with nbgrader's ``grade`` and ``solution`` metadata: a
  manually graded answer) keeps its cell id and metadata, its text rendered and cleaned like
  every markdown cell, so that formgrader shows it to the instructor to grade; one the
  student deleted comes back at the end, saying so;
* each test cell's output is the grader's verdict for the questions it covers (the message
  the student sees in the feedback); a test cell the student deleted is appended at the
  end (its visible text, never its hidden tests) so that the feedback shows every score;
* a notebook that could not be read (not JSON, not nbformat 4, missing, a link or a pipe:
  never followed, :func:`autograder.batch.tasks.read_notebook`) becomes a notebook with the reason
  and the test cells, so that every graded submission has a feedback page.

``timestamp.txt`` next to it is the submission's (``nbgrader collect`` writes one in
``submitted/``), else the notebook file's modification time: ``generate_feedback``
regenerates a student's page when it is newer than the page's.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from pathlib import Path

from autograder.batch import sanitize, text
from autograder.batch.sources import HIDDEN_TESTS
from autograder.batch.tasks import Refused, read_notebook
from autograder.judging import preflight

_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _text(source) -> str:
    """A cell's source as the cell runner joins it, with lone surrogates escaped (a UTF-8 file
    cannot hold them: nbformat.write would fail on ``"\\ud800"`` in a student's cell)."""
    if isinstance(source, list):
        source = "".join(str(s) for s in source)
    if not isinstance(source, str):
        return ""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        source = source.encode("utf-8", "backslashreplace").decode("utf-8")
    return source


def verdict_text(qids: list[str], result: dict) -> tuple[str, bool]:
    """The grader's verdict on the questions of one test cell, and whether all passed."""
    rows = {q["id"]: q for q in result.get("questions", [])}
    lines, ok = [], True
    for qid in qids:
        q = rows.get(qid)
        if q is None:
            continue
        ok = ok and bool(q.get("passed"))
        head = f"[{qid}] {q.get('title', qid)}: {q['score']:g}/{q['max_score']:g}"
        message = q.get("feedback") or q.get("reason") or ""
        lines.append(head + (" - correct" if q.get("passed") else "") +
                     ("" if q.get("passed") or not message else "\n" + message))
    if not lines:
        return "not graded automatically (no question of the autograder covers this cell)", False
    return "\n".join(lines) + "\n", ok


def _cell_maker(kind: str):
    """A cell as nbformat's ``new_<kind>_cell`` makes it, without validating each one on its own:
    :func:`build_notebook` validates the notebook once, whole."""
    import nbformat
    from nbformat.v4.nbbase import random_cell_id

    def make(source: str, id: str | None = None):
        cell = nbformat.NotebookNode(id=id or random_cell_id(), cell_type=kind, metadata=nbformat.NotebookNode(),
                                     source=source)
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        return cell
    return make


def _student_cells(raw: bytes | None, problem: str) -> tuple[list[dict], str]:
    """The cells (dicts) of the submitted notebook ``raw``, and the problem that stopped the
    grading normally (unchanged, or why ``raw`` could not be read)."""
    if raw is None or problem:
        return [], problem
    try:
        nb = json.loads(raw)
        return [c for c in nb.get("cells", []) if isinstance(c, dict)], problem
    except (ValueError, AttributeError, UnicodeDecodeError) as error:
        return [], f"the notebook could not be read ({error})"


class _NotebookBuilder:
    """The cells of one autograded notebook: fresh cell ids, the source's nbgrader metadata, the
    grader's verdicts on the test cells."""

    def __init__(self, source, result: dict):
        self.new_code_cell, self.new_markdown_cell, self.new_raw_cell = (
            _cell_maker(kind) for kind in ("code", "markdown", "raw"))
        self.trusted = {cell["name"]: cell for cell in source.source_cells}
        self.grade_cells = {c.name: c for c in source.grade_cells}
        self.solution = set(source.solution_cells)
        self.result = result
        self.used_ids: set[str] = set()
        self.seen_grade_ids: set[str] = set()
        self.last_suffix: dict[str, int] = {}

    def fresh_id(self, wanted) -> str:
        """A cell id not used yet: ``wanted`` if free, else ``<base>-<n>``. The search for
        ``n`` goes on from where the last one for this base stopped, so that n cells
        without an id cost O(n) in all, not O(n^2)."""
        base = wanted if isinstance(wanted, str) and _ID.match(wanted) else "cell"
        cid, n = base, self.last_suffix.get(base, 1)
        while cid in self.used_ids:
            n += 1
            cid = f"{base[:56]}-{n}"
        self.last_suffix[base] = n
        self.used_ids.add(cid)
        return cid

    def metadata_for(self, name: str, kind: str) -> dict:
        meta = {"grade": name in self.grade_cells, "grade_id": name,
                "locked": bool(self.trusted.get(name, {}).get("locked")),
                "schema_version": 3, "solution": name in self.solution, "task": False}
        if name in self.grade_cells:
            meta["points"] = self.grade_cells[name].points
        return meta

    def add_verdict(self, cell, name: str) -> None:
        import nbformat
        message, ok = verdict_text(self.grade_cells[name].qids, self.result)
        cell.outputs = [nbformat.NotebookNode(output_type="stream", name="stdout" if ok else "stderr", text=message)]

    def copied_cell(self, cell: dict):
        """The student's ``cell`` as the autograded notebook shows it (None for an unknown kind):
        no output, markdown cleaned, nbgrader metadata only from the source's cell of that name."""
        kind = cell.get("cell_type")
        text = _text(cell.get("source", ""))
        meta = ((cell.get("metadata") or {}).get("nbgrader") or {}) if isinstance(cell.get("metadata"), dict) else {}
        name = meta.get("grade_id") if isinstance(meta, dict) else None
        known = isinstance(name, str) and name in self.trusted and name not in self.seen_grade_ids \
            and self.trusted[name]["cell_type"] == kind
        if known and name in self.grade_cells:
            text = HIDDEN_TESTS.sub("", text)       # never show the source's hidden tests
        if kind == "code":
            new = self.new_code_cell(text, id=self.fresh_id(cell.get("id")))
        elif kind == "markdown":
            new = self.new_markdown_cell(sanitize.markdown_cell_source(text), id=self.fresh_id(cell.get("id")))
        elif kind == "raw":
            new = self.new_raw_cell(text, id=self.fresh_id(cell.get("id")))
        else:
            return None
        if known:
            self.seen_grade_ids.add(name)
            new.metadata["nbgrader"] = self.metadata_for(name, kind)
            if kind == "code" and name in self.grade_cells:
                self.add_verdict(new, name)
        return new

    def missing_cell(self, name: str, cell, any_cells: bool):
        """The cell that stands for grade cell ``name`` the student deleted (None for a kind
        that is neither markdown nor code)."""
        if cell.cell_type == "markdown":     # a written answer the student deleted: 0 in formgrader
            new = self.new_markdown_cell(sanitize.markdown_cell_source(
                "**(the answer cell of this written question was missing from the submitted notebook)**"),
                id=self.fresh_id(name.replace("_", "-")))
            new.metadata["nbgrader"] = self.metadata_for(name, "markdown")
            return new
        if cell.cell_type != "code":
            return None
        visible = HIDDEN_TESTS.sub("", self.trusted.get(name, {}).get("source", "")).rstrip() + "\n"
        note = "# (this test cell was missing from the submitted notebook)\n" if any_cells else ""
        new = self.new_code_cell(note + visible, id=self.fresh_id(name.replace("_", "-")))
        new.metadata["nbgrader"] = self.metadata_for(name, "code")
        self.add_verdict(new, name)
        return new


def build_notebook(raw: bytes | None, source, result: dict, problem: str = ""):
    """The autograded notebook (an nbformat NotebookNode) for one submission."""
    import nbformat
    from nbformat.v4 import new_notebook

    builder = _NotebookBuilder(source, result)
    cells_in, problem = _student_cells(raw, problem)
    out = new_notebook()
    out.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                    "language_info": {"name": "python"}}
    if problem:
        out.cells.append(builder.new_markdown_cell(
            sanitize.markdown_cell_source(f"**Not graded normally:** {problem}")))
    for cell in cells_in:
        new = builder.copied_cell(cell)
        if new is not None:
            out.cells.append(new)
    for name, grade_cell in builder.grade_cells.items():
        if name not in builder.seen_grade_ids:
            new = builder.missing_cell(name, grade_cell, bool(cells_in))
            if new is not None:
                out.cells.append(new)
    nbformat.validate(out)
    return out


def submission_timestamp(task) -> str:
    """nbgrader's timestamp of a submission: submitted/.../timestamp.txt (a regular file, read
    without following a link, its first line, cleaned), else the notebook's mtime (lstat)."""
    folder = Path(task.folder)
    try:
        raw = read_notebook(folder / "timestamp.txt", getattr(task, "base", "") or folder)
        stamp = text.clean(raw[:200].decode("utf-8", "replace").strip().split("\n")[0], 100, newlines=False)
        if stamp:
            return stamp
    except Refused:
        pass
    path = Path(task.notebook) if task.notebook else folder
    try:
        when = datetime.datetime.fromtimestamp(os.lstat(path).st_mtime, tz=datetime.timezone.utc)
    except OSError:
        when = datetime.datetime.now(datetime.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f %Z")


def write_autograded(root: Path, task, source, result: dict) -> Path | None:
    """Write ROOT/autograded/<student>/<assignment>/<notebook>.ipynb and timestamp.txt."""
    import nbformat
    if source is None:
        return None
    folder = Path(root) / "autograded" / task.student / task.assignment
    raw, problem = None, ""
    if task.notebook is None:
        problem = result.get("reason") or "no notebook was submitted"
    elif result.get("status") == "invalid" or getattr(task, "problem", ""):
        problem = result.get("reason") or getattr(task, "problem", "") or "the notebook could not be read"
    else:
        try:
            raw = read_notebook(task.notebook, getattr(task, "base", "") or task.folder or None)
        except Refused as why:
            problem = str(why)
        else:
            problem = preflight.problem(raw)     # too many cells to copy: the reason instead
            raw = None if problem else raw
    nb = build_notebook(raw, source, result, problem)
    if folder.exists():
        shutil.rmtree(folder)       # a renamed notebook must not leave the old one behind
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{source.notebook}.ipynb"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    nbformat.write(nb, str(tmp))
    os.replace(tmp, target)
    (folder / "timestamp.txt").write_text(result.get("timestamp") or submission_timestamp(task),
                                          encoding="utf-8")
    return target
