"""The course's side of a class: the source notebooks that give the gradebook its structure
(:func:`load_sources`: grade cells, points, the questions each grade cell calls), where they are
(:func:`find_source_dir`) and the nbgrader ``course_id`` (:func:`course_id`)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

#: The instructor's hidden tests in a source notebook's test cell (nbgrader removes them from the release).
HIDDEN_TESTS = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.DOTALL)
_GRADE_CALL = re.compile(r"""\b(?:grade|check)\s*\(\s*(?:qid\s*=\s*)?["']([A-Za-z0-9_]+)["']""")


@dataclass
class GradeCell:
    name: str
    points: float
    qids: list[str]
    cell_type: str = "code"


@dataclass
class Source:
    assignment: str
    notebook: str                                  # gradebook notebook name (file stem)
    grade_cells: list[GradeCell] = field(default_factory=list)
    solution_cells: list[str] = field(default_factory=list)
    source_cells: list[dict] = field(default_factory=list)


def find_source_dir(root: Path, explicit: str | None) -> Path | None:
    """--source, else ROOT/source (nbgrader's layout), else the course's solutions/."""
    if explicit:
        return Path(explicit).resolve()
    if (root / "source").is_dir():
        return root / "source"
    candidates = [Path.cwd(), Path(__file__).resolve().parent.parent]
    for start in candidates:
        for folder in (start, *start.parents):
            if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
                return folder / "solutions"
    return None


def load_sources(source_dir: Path | None, questions: dict[str, list]) -> dict[str, Source]:
    """The gradebook structure of every assignment: from its source notebook's nbgrader
    metadata when there is one, else one synthetic grade cell per question."""
    out = {}
    for assignment, qs in questions.items():
        path = None
        if source_dir is not None and (source_dir / assignment).is_dir():
            found = sorted((source_dir / assignment).glob("*.ipynb"))
            preferred = source_dir / assignment / f"{assignment}.ipynb"
            path = preferred if preferred in found else (found[0] if found else None)
        if path is None:
            out[assignment] = Source(assignment, assignment, [
                GradeCell(f"{q.id}_test", float(q.points), [q.id]) for q in qs])
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        src = Source(assignment, path.stem)
        for cell in nb.get("cells", []):
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            name = meta.get("grade_id")
            if not name:
                continue
            text = cell.get("source", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            kind = cell.get("cell_type", "code")
            if meta.get("grade"):
                qids = [qid for qid in _GRADE_CALL.findall(text) if qid in {q.id for q in qs}]
                src.grade_cells.append(GradeCell(name, float(meta.get("points", 0)),
                                                 list(dict.fromkeys(qids)), kind))
            if meta.get("solution"):
                src.solution_cells.append(name)
            if meta.get("locked") or meta.get("grade") or meta.get("solution"):
                src.source_cells.append({"name": name, "cell_type": kind,
                                         "locked": bool(meta.get("locked")), "source": text})
        out[assignment] = src
    return out


def course_id(root: Path, source_dir: Path | None) -> str:
    """course_id of ROOT/nbgrader_config.py, else of the course's, else nbgrader's default."""
    for folder in (root, source_dir.parent if source_dir else None):
        if folder is None or not (folder / "nbgrader_config.py").is_file():
            continue
        text = (folder / "nbgrader_config.py").read_text(encoding="utf-8", errors="replace")
        m = re.search(r"course_id\s*=\s*[\"']([^\"']+)[\"']", text)
        if m:
            return m.group(1)
    return "default_course"

