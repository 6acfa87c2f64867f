"""The class's similar submissions: ``ROOT/similarity.csv`` and the report's "Similar
submissions" section (:func:`check_class`, :func:`write_csv`, :func:`html_section`).

Per assignment, every submitted notebook that was read (:func:`autograder.batch.tasks.read_notebook`:
nothing followed) is cut into its code cells, each labelled with the question it answers
(its nbgrader ``grade_id`` ``<qid>_answer`` or cell id ``<qid>-answer``, else the cell that
defines the question's answer name, else ``cell N``), and compared with the others by
:mod:`autograder.batch.similarity` against the assignment's skeleton: the course's
source notebook with its ``### BEGIN SOLUTION`` regions taken out and the released
notebook (``<source>/../release/<a>/`` in an nbgrader course, ``<source>/../exercises/<a>/``
in this one). Nothing is run; a notebook that cannot be read is left out.

The student's text shown (names, code) is cleaned (:func:`autograder.batch.text.clean`:
control and bidirectional characters escaped) and HTML-escaped; the CSV's fields are
neutralised (:func:`autograder.batch.outputs.write_rows`).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.batch import similarity
from autograder.batch.outputs import write_rows
from autograder.batch.sources import load_sources
from autograder.batch.tasks import Refused, Task, discover, questions_by_assignment, read_notebook
from autograder.batch.text import clean

CSV_NAME = "similarity.csv"
CSV_COLUMNS = ["assignment", "student_a", "student_b", "score", "shared_weight", "matched_questions",
               "identical_questions", "joint_bits"]
SHOWN_ROWS = 1_000          # pairs listed in the report (all are in the CSV)...
SHOWN_PAIRS = 200           # ...and shown side by side
SHOWN_MATCHES = 4           # matched cells shown per pair
SHOWN_CHARS = 6_000         # characters of a cell shown
_SOLUTION = re.compile(r"### BEGIN SOLUTION.*?### END SOLUTION[^\n]*\n?", re.DOTALL)


@dataclass
class ClassSimilarity:
    """What :func:`check_class` found: the pairs at or over ``threshold``, how many
    submissions of each assignment were compared, and the seconds it took."""

    threshold: float
    pairs: list[similarity.Pair] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def threshold_argument(text: str) -> float:
    """``--similarity-threshold``: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], e.g. 0.8, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--similarity-threshold`` and ``--no-similarity`` (the ``grade`` and ``report`` commands)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--similarity-threshold", type=threshold_argument, default=similarity.DEFAULT_THRESHOLD,
                       metavar="T", help="report the pairs of submissions whose similarity score reaches T, "
                       f"in (0, 1] (default {similarity.DEFAULT_THRESHOLD:g}): report.html's \"Similar "
                       "submissions\" and ROOT/similarity.csv")
    group.add_argument("--no-similarity", action="store_true",
                       help="do not compare the submissions with each other")


# ---------------------------------------------------------------- reading

def _notebook_code_cells(raw: bytes) -> list[tuple[str, str, str]]:
    """``(source, grade_id, cell id)`` of a notebook's code cells ([] when it is not one)."""
    try:
        notebook = json.loads(raw)
        cells = notebook.get("cells") if isinstance(notebook, dict) else None
    except (ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return []
    out = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(part for part in source[:10_000] if isinstance(part, str))
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        nbgrader = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
        out.append((source if isinstance(source, str) else "", str(nbgrader.get("grade_id") or ""),
                    str(cell.get("id") or "")))
        if len(out) >= similarity.MAX_CELLS:
            break
    return out


def labelled_cells(raw: bytes, questions: list) -> list[tuple[str, str]]:
    """``(label, source)`` of a submission's code cells: the id of the question a cell
    answers, else ``cell N``."""
    answers = [(q.id, re.compile(rf"^(?:def|class)\s+{re.escape(q.answer_name)}\b|^{re.escape(q.answer_name)}\s*=",
                                 re.MULTILINE)) for q in questions]
    out = []
    for index, (source, grade_id, cell_id) in enumerate(_notebook_code_cells(raw)):
        label = next((qid for qid, defines in answers if grade_id == f"{qid}_answer" or cell_id == f"{qid}-answer"),
                     None) or next((qid for qid, defines in answers
                                    if defines.search(source[:similarity.MAX_CELL_CHARS])), f"cell {index + 1}")
        out.append((label, source))
    return out


def skeleton_sources(source_dir: Path | None, assignment: str) -> list[str]:
    """The code every student of ``assignment`` is given: the source notebooks' code cells
    without their solution regions, and the released notebooks' code cells."""
    if source_dir is None:
        return []
    source_dir = Path(source_dir)
    folders = [source_dir / assignment, source_dir.parent / "release" / assignment,
               source_dir.parent / "exercises" / assignment]
    out = []
    for folder in folders:
        for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
            try:
                raw = path.read_bytes()
            except OSError:
                continue
            out.extend(_SOLUTION.sub("", source) for source, _, _ in _notebook_code_cells(raw))
    return out


def solution_cells(source_dir: Path | None, assignment: str, questions: list) -> list[tuple[str, str]]:
    """``(question id, source)`` of the source notebooks' answer cells (nbgrader grade id
    ``QID_answer``), their solution regions kept: what a forced answer is near."""
    if source_dir is None:
        return []
    ids = {f"{q.id}_answer": q.id for q in questions}
    out = []
    folder = Path(source_dir) / assignment
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        out.extend((ids[grade_id], source) for source, grade_id, _ in _notebook_code_cells(raw) if grade_id in ids)
    return out


def assignment_skeleton(source_dir: Path | None, assignment: str, questions: list) -> similarity.Skeleton:
    """What every student of ``assignment`` is given, and its solution's answers (``questions``: its questions)."""
    return similarity.Skeleton.of(skeleton_sources(source_dir, assignment),
                                  solution_cells(source_dir, assignment, questions))


def fingerprint_notebooks(notebooks: list[tuple[str, bytes]], questions: list,
                          skeleton: similarity.Skeleton) -> list[similarity.Submission]:
    """The submissions of one assignment, fingerprinted against its ``skeleton``: ``notebooks`` are
    ``(student, the notebook's bytes)``, cut into cells labelled by ``questions``."""
    cache: dict = {}
    return [similarity.fingerprint_submission(student, labelled_cells(raw, questions), skeleton, cache)
            for student, raw in notebooks]


def _read(task: Task) -> bytes | None:
    if task.notebook is None or task.problem:
        return None
    try:
        return read_notebook(task.notebook, task.base or task.folder or None)
    except (Refused, OSError):
        return None


def check_class(tasks: list[Task], source_dir: Path | None, questions: dict[str, list],
                threshold: float = similarity.DEFAULT_THRESHOLD) -> ClassSimilarity:
    """The similar pairs of every assignment of ``tasks`` (``questions``: by assignment)."""
    started = time.monotonic()
    found = ClassSimilarity(threshold)
    by_assignment: dict[str, list[Task]] = {}
    for task in tasks:
        by_assignment.setdefault(task.assignment, []).append(task)
    for assignment in sorted(by_assignment):
        skeleton = assignment_skeleton(source_dir, assignment, questions.get(assignment, []))
        read = ((task.student, _read(task)) for task in by_assignment[assignment])
        submissions = fingerprint_notebooks([(student, raw) for student, raw in read if raw is not None],
                                            questions.get(assignment, []), skeleton)
        found.compared[assignment] = len(submissions)
        found.pairs.extend(similarity.similar_pairs(assignment, submissions, skeleton.keep, threshold))
    found.seconds = time.monotonic() - started
    return found


def check_root(root: Path, source_dir: Path | None,
               threshold: float = similarity.DEFAULT_THRESHOLD) -> ClassSimilarity:
    """:func:`check_class` on every submission under ``ROOT/submitted`` (the ``report`` and
    ``export`` commands, which have no task list)."""
    questions = questions_by_assignment()
    tasks = discover(Path(root), questions, load_sources(source_dir, questions), "", source_dir)
    return check_class(tasks, source_dir, questions, threshold)


def write(root: Path, source_dir: Path | None, threshold: float | None) -> tuple[str, str]:
    """For the ``report`` and ``export`` commands: ``(the report's section, a line to print)``,
    ROOT/similarity.csv written (``threshold`` None: not checked, an old CSV removed)."""
    root = Path(root)
    if threshold is None:
        (root / CSV_NAME).unlink(missing_ok=True)
        return html_section(None, "--no-similarity"), ""
    if not (root / "submitted").is_dir():
        return html_section(None, f"no {root / 'submitted'} to compare"), ""
    found = check_root(root, source_dir, threshold)
    path = write_csv(root, found)
    return html_section(found), f"wrote {path} ({len(found.pairs)} similar pair(s), {found.seconds:.1f} s)"


# ---------------------------------------------------------------- writing

def write_csv(root: Path, found: ClassSimilarity) -> Path:
    """``ROOT/similarity.csv``: one row per pair, the highest score first within an assignment."""
    rows = [[p.assignment, p.student_a, p.student_b, f"{p.score:.3f}", f"{p.shared:g}", ";".join(p.questions),
             ";".join(p.identical), f"{p.bits:g}"]
            for p in sorted(found.pairs, key=lambda p: (p.assignment, -p.score, p.student_a, p.student_b))]
    path = Path(root) / CSV_NAME
    write_rows(path, [CSV_COLUMNS] + rows)
    return path


def _shown(text: str, limit: int = 200) -> str:
    """A student's text (a name, a label) as HTML: cleaned, escaped."""
    return html.escape(clean(text, limit, newlines=False))


def highlighted(source: str, spans: list[tuple[int, int]]) -> str:
    """``source`` as escaped HTML with the ``spans`` in ``<mark>``; at most ``SHOWN_CHARS``."""
    cut = len(source) > SHOWN_CHARS
    source = source[:SHOWN_CHARS]
    parts, done = [], 0
    for start, end in spans:
        start, end = max(start, done), min(end, len(source))
        if start >= end:
            continue
        parts.append(html.escape(clean(source[done:start], SHOWN_CHARS)))
        parts.append(f"<mark>{html.escape(clean(source[start:end], SHOWN_CHARS))}</mark>")
        done = end
    parts.append(html.escape(clean(source[done:], SHOWN_CHARS)))
    return "".join(parts) + ("\n<span class=\"muted\">(cut)</span>" if cut else "")


def _pair_html(pair: similarity.Pair) -> str:
    a, b = _shown(pair.student_a), _shown(pair.student_b)
    questions = ", ".join(_shown(q) for q in pair.questions) or "none"
    rows = []
    for match in pair.matches[:SHOWN_MATCHES]:
        how = "identical once normalised" if match.identical else f"shared weight {match.weight:g}"
        rows.append(f"<tr><th>{a}: {_shown(match.label_a)}</th><th>{b}: {_shown(match.label_b)} "
                    f"<span class=\"muted\">({how})</span></th></tr>"
                    f"<tr><td><pre>{highlighted(match.source_a, match.spans_a)}</pre></td>"
                    f"<td><pre>{highlighted(match.source_b, match.spans_b)}</pre></td></tr>")
    joint = (f"; identical answers to {', '.join(_shown(q) for q in pair.identical)} ({pair.bits:g} bits)"
             if pair.identical else "")
    return (f"<details><summary><strong>{a}</strong> and <strong>{b}</strong> "
            f"({_shown(pair.assignment)}): score {pair.score:.2f}; matched: {questions}{joint}</summary>"
            f"<table class=\"side-by-side\">{''.join(rows)}</table></details>")


def html_section(found: ClassSimilarity | None, why_not: str = "") -> str:
    """The report's "Similar submissions" section (``found`` None: not checked, ``why_not``)."""
    parts = ["<h2 id=\"similar-submissions\">Similar submissions</h2>"]
    if found is None:
        parts.append(f"<p class=\"muted\">Not checked{': ' + html.escape(why_not) if why_not else ''}.</p>")
        return "\n".join(parts)
    compared = ", ".join(f"{_shown(a)}: {n}" for a, n in sorted(found.compared.items())) or "none"
    parts.append(
        f"<p>Pairs of submissions of one assignment whose answers are alike once local names, comments, "
        f"docstrings and formatting are set aside, and the code the notebook gives is left out (score: "
        f"the share of the smaller submission's fingerprints found in the other, a fingerprint that "
        f"many students share counting little). Answers under {similarity.MIN_TOKENS} tokens of their own "
        f"are not counted. Threshold {found.threshold:g}. Also listed, whatever their score: pairs that hand "
        f"in identical answers (once normalised) to {similarity.MIN_IDENTICAL} or more questions, in a "
        f"combination rarer than chance explains among the class's pairs (joint evidence in bits: how "
        f"rarely the class hands in each of those answers). Submissions compared per assignment: {compared}. "
        f"A high score is a reason to look, not a verdict: read both notebooks. All pairs are in "
        f"<code>{CSV_NAME}</code>.</p>")
    if not found.pairs:
        parts.append("<p class=\"muted\">No pair reached the threshold.</p>")
        return "\n".join(parts)
    parts.append("<table><thead><tr><th>assignment</th><th>student</th><th>student</th><th>score</th>"
                 "<th>matched questions</th></tr></thead><tbody>")
    for p in found.pairs[:SHOWN_ROWS]:
        parts.append(f"<tr><td>{_shown(p.assignment)}</td><td>{_shown(p.student_a)}</td>"
                     f"<td>{_shown(p.student_b)}</td><td class=\"n\">{p.score:.2f}</td>"
                     f"<td>{', '.join(_shown(q) for q in p.questions)}</td></tr>")
    parts.append("</tbody></table>")
    parts.extend(_pair_html(p) for p in found.pairs[:SHOWN_PAIRS])
    if len(found.pairs) > SHOWN_PAIRS:
        parts.append(f"<p class=\"muted\">{len(found.pairs) - SHOWN_PAIRS} more pair(s), not shown side by side: "
                     f"see {CSV_NAME}.</p>")
    return "\n".join(parts)
