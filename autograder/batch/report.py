"""The class report: ``ROOT/report.html``, next to ``grades.csv``.

What an instructor reads after grading, to decide what to re-teach next lecture:

* per assignment, a plot of each question's score distribution (how many submissions got
  each score), embedded as a PNG;
* per question: submissions, mean score, full marks, and the **most frequent named
  mistakes** (the catalogue entry the judge recognised: the result's ``mistake`` key, the
  title the student saw as "Looks like a known mistake: <title>"), with how many
  submissions made each; then the most frequent other reasons for a zero (an answer that
  raised, a time limit, a blank answer...);
* the submissions **held for review**: per submission, the constructs the static scan flagged
  in its source (``flags``, :func:`autograder.judging.scan.flags`) and the questions they hold
  (``held``), to look at by hand;
* submissions not graded normally (status other than ``ok``);
* the similar submissions, a section written by :mod:`autograder.batch.similarity_report`
  (``similarity_html``).

Everything that comes from a submission (student names, messages) is escaped.
``python -m autograder report ROOT`` writes it again from the saved results.
"""
from __future__ import annotations

import collections
import html
import os
import re
from pathlib import Path

import autograder
from autograder.judging.scan import suspicious
from autograder.student.cells import code_cells

KNOWN = re.compile(r"Looks like a known mistake: (.+?)\.(?:\s|$)")
TOP = 5
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1b1b; line-height: 1.45; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0 1.5rem; }
th, td { text-align: left; padding: .35rem .55rem; border-bottom: 1px solid #ddd; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
h2 { border-bottom: 2px solid #333; padding-bottom: .2rem; margin-top: 2.5rem; }
.muted { color: #666; } svg.scores { max-width: 100%; height: auto; } figure { margin: 1rem 0; }
table.side-by-side td { width: 50%; } pre { white-space: pre-wrap; font-size: .85em; margin: 0; }
mark { background: #ffe08a; } details { margin: .4rem 0; }
"""


def mistake_titles() -> dict[tuple[str, str], str]:
    """{(qid, mistake key): title} from the catalogue of known mistakes (grader side)."""
    out = {}
    try:
        # inner import: the catalogue (~250 ms with vitref) stays out of the `grade` coordinator until the report
        from autograder.judging.catalogue import entry
        for q in autograder.questions():
            try:
                for m in entry(q.id).catalogue:
                    out[(q.id, m.key)] = m.title
            except ValueError:
                continue
    except Exception:  # noqa: BLE001 - titles are a nicety; the feedback text has them too
        pass
    return out


def named_mistake(row: dict, titles: dict) -> str | None:
    """The known mistake a question row was recognised as, by title (None: none named)."""
    key = row.get("mistake")
    if key:
        return titles.get((row.get("id"), key)) or str(key)
    found = KNOWN.search(row.get("feedback") or row.get("reason") or "")
    return found.group(1) if found else None


def _reason_kind(row: dict) -> str:
    text = " ".join(str(row.get("reason") or row.get("feedback") or "").split())
    text = re.sub(r"^[^:]{0,80}: ", "", text, count=1)            # drop the question title
    text = re.sub(r"\d+(\.\d+)?", "N", text)                     # numbers vary per student
    return text[:140] or "(no reason recorded)"


def summarise(results: list[dict]) -> dict:
    """Per assignment and question: scores, counts of named mistakes and of other reasons."""
    titles = mistake_titles()
    out: dict = {}
    for r in results:
        a = out.setdefault(r["assignment"], {"submissions": 0, "totals": [], "max": 0.0,
                                             "questions": {}})
        a["submissions"] += 1
        a["totals"].append(float(r.get("score", 0)))
        a["max"] = max(a["max"], float(r.get("max_score", 0)))
        for q in r.get("questions", []):
            s = a["questions"].setdefault(q["id"], {
                "title": q.get("title", q["id"]), "max": float(q["max_score"]), "scores": [],
                "mistakes": collections.Counter(), "other": collections.Counter(),
                "students": collections.defaultdict(list)})
            s["scores"].append(float(q["score"]))
            if q.get("passed"):
                continue
            name = named_mistake(q, titles)
            if name:
                s["mistakes"][name] += 1
                s["students"][name].append(r["student"])
            else:
                s["other"][_reason_kind(q)] += 1
    return out


PANEL_W, PANEL_H, PANEL_COLS = 230, 150, 3     # one question's chart in the score figure (SVG user units)


def _plot(assignment: str, questions: dict) -> str:
    """The score distributions of an assignment's questions: an inline SVG, one small bar chart
    a question (submissions per score; full marks green, zero red, partial amber), every bar
    titled with its count so that a screen reader or a hover says it. Text, not a picture:
    sharp at any zoom and drawn in milliseconds."""
    cols = min(len(questions), PANEL_COLS)
    rows = (len(questions) + cols - 1) // cols
    panels = [_panel(i % cols * PANEL_W, i // cols * PANEL_H, qid, s)
              for i, (qid, s) in enumerate(questions.items())]
    width, height = cols * PANEL_W, rows * PANEL_H
    return (f"<svg class=\"scores\" role=\"img\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" "
            f"height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\" "
            f"aria-label=\"score distribution per question of {html.escape(assignment)}\">"
            + "".join(panels) + "</svg>")


def _panel(left: int, top: int, qid: str, s: dict) -> str:
    """One question's bars, its title and its axis labels, at (left, top)."""
    esc = html.escape
    counts = collections.Counter(s["scores"])
    scores = sorted(set(counts) | {0.0, s["max"]})
    most = max(counts.values(), default=0) or 1
    base, tallest = top + PANEL_H - 28, PANEL_H - 62          # the bars' baseline and the tallest bar
    slot = (PANEL_W - 30) / len(scores)
    parts = [f"<text x=\"{left + 10}\" y=\"{top + 16}\" font-weight=\"bold\">{esc(qid)} "
             f"({s['max']:g} pt)</text>",
             f"<line x1=\"{left + 10}\" y1=\"{base}\" x2=\"{left + PANEL_W - 20}\" y2=\"{base}\" "
             f"stroke=\"#555\"/>"]
    for i, score in enumerate(scores):
        count = counts.get(score, 0)
        bar = round(tallest * count / most)
        x = left + 15 + i * slot
        colour = "#2e7d32" if score == s["max"] else "#c62828" if score == 0 else "#f9a825"
        parts.append(f"<rect x=\"{x:.1f}\" y=\"{base - bar}\" width=\"{slot - 10:.1f}\" height=\"{bar}\" "
                     f"fill=\"{colour}\"><title>{esc(qid)}: {count} submission(s) scored {score:g}</title></rect>"
                     f"<text x=\"{x + (slot - 10) / 2:.1f}\" y=\"{base - bar - 4}\" text-anchor=\"middle\">"
                     f"{count}</text>"
                     f"<text x=\"{x + (slot - 10) / 2:.1f}\" y=\"{base + 14}\" text-anchor=\"middle\">"
                     f"{score:g}</text>")
    parts.append(f"<text x=\"{left + PANEL_W / 2 - 5:.0f}\" y=\"{base + 26}\" text-anchor=\"middle\" "
                 f"fill=\"#555\">score (bar: submissions)</text>")
    return "".join(parts)


def baseline_flags(source_dir, assignments) -> dict[str, set]:
    """{assignment: flags of the course's own source notebook}: the course's cells (the Colab
    set-up cell reads sys.modules) are flagged in every submission that keeps them."""
    out: dict[str, set] = {}
    if source_dir is None:
        return out
    for a in assignments:
        path = Path(source_dir) / a / f"{a}.ipynb"
        try:
            cells, problem = code_cells(path.read_bytes())
            out[a] = set(suspicious(cells)) if not problem else set()
        except Exception:  # noqa: BLE001 - a baseline is a nicety
            out[a] = set()
    return out


def _held(result: dict) -> list[dict]:
    """The questions of a result held for review (a flag in its source)."""
    return [q for q in result.get("questions") or [] if isinstance(q, dict) and q.get("held")]


def _table(columns: list[str], rows: list[str]) -> list[str]:
    """A table's parts of the page: its head (``columns``, already escaped), one part a row, its end."""
    return ["<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr></thead><tbody>",
            *rows, "</tbody></table>"]


def _question_row(qid: str, s: dict) -> str:
    """One question's row of an assignment's table: mean, full marks, zeros, named mistakes, other reasons."""
    esc = html.escape
    n = len(s["scores"])
    qmean = sum(s["scores"]) / n if n else 0.0
    qfull = sum(1 for x in s["scores"] if x == s["max"])
    zero = sum(1 for x in s["scores"] if x == 0)
    mistakes = "".join(
        f"<li><strong>{esc(name)}</strong>: {count} "
        f"<span class=\"muted\">({esc(', '.join(sorted(s['students'][name])[:8]))}"
        f"{', ...' if len(s['students'][name]) > 8 else ''})</span></li>"
        for name, count in s["mistakes"].most_common(TOP)) or "<li class=\"muted\">none</li>"
    other = "".join(f"<li>{count} &times; {esc(text)}</li>"
                    for text, count in s["other"].most_common(3)) or \
        "<li class=\"muted\">none</li>"
    return (f"<tr><td><code>{esc(qid)}</code><br>{esc(s['title'])}</td>"
            f"<td class=\"n\">{qmean:.2f}&nbsp;/&nbsp;{s['max']:g}</td>"
            f"<td class=\"n\">{qfull}/{n}</td><td class=\"n\">{zero}/{n}</td>"
            f"<td><ol>{mistakes}</ol></td><td><ul>{other}</ul></td></tr>")


def _assignment_section(assignment: str, a: dict) -> list[str]:
    """An assignment's heading, totals, score plot and table of questions."""
    esc = html.escape
    mean = sum(a["totals"]) / len(a["totals"]) if a["totals"] else 0.0
    full = sum(1 for t in a["totals"] if a["max"] and t == a["max"])
    heading = assignment or "(no assignment: a student folder that was not read)"
    parts = [f"<h2 id=\"{esc(assignment)}\">{esc(heading)}</h2>"
             f"<p>{a['submissions']} submission(s); mean {mean:.2f} / {a['max']:g}; "
             f"{full} with full marks.</p>"]
    if not a["questions"]:
        return parts
    parts.append(f"<figure>{_plot(assignment, a['questions'])}<figcaption>Score per question: "
                 f"how many submissions got each score.</figcaption></figure>")
    parts += _table(["question", "mean", "full marks", "zero", "most frequent named mistakes",
                     "other reasons for losing points"],
                    [_question_row(qid, s) for qid, s in a["questions"].items()])
    return parts


def _held_section(results: list[dict], baseline: dict) -> list[str]:
    """The submissions held for review, with their own flags (not those of the course's notebook)."""
    esc = html.escape

    def own(r) -> list:
        return [f for f in r.get("flags") or [] if f not in baseline.get(r["assignment"], set())]

    flagged = [r for r in results if own(r) or _held(r)]
    parts = ["<h2 id=\"flags\">Held for review</h2><p>Submissions whose source has a construct with "
             "no place in an answer (instructor flags): every question of the submission is held "
             "for review. The automatic score is kept in grades.csv and the gradebook, where "
             "formgrader lists the held questions as needing manual grading; Gradescope shows 0 "
             "until you override it. Look at these notebooks by hand.</p>"]
    common = sorted({(a, f) for a, fs in baseline.items() for f in fs
                     if any(f in (r.get("flags") or []) for r in results if r["assignment"] == a)})
    if common:
        parts.append("<p class=\"muted\">Not listed: flags the course's own notebook raises too "
                     "(its set-up cells): " + "; ".join(f"{esc(a)}: {esc(f)}" for a, f in common) + ".</p>")
    if not flagged:
        parts.append("<p class=\"muted\">No submission was flagged or held.</p>")
        return parts
    rows = []
    for r in sorted(flagged, key=lambda r: (r["assignment"], r["student"])):
        flags = "".join(f"<li>{esc(str(f))}</li>" for f in own(r) or r.get("flags") or [])
        held = ", ".join(esc(str(q.get("id"))) for q in _held(r)) or "<span class=\"muted\">none</span>"
        rows.append(f"<tr><td>{esc(r['student'])}</td><td>{esc(r['assignment'])}</td>"
                    f"<td class=\"n\">{float(r.get('score', 0)):g}/{float(r.get('max_score', 0)):g}</td>"
                    f"<td>{held}</td>"
                    f"<td><ul>{flags}</ul></td></tr>")
    return parts + _table(["student", "assignment", "automatic score", "held questions", "flags"], rows)


def _not_graded_section(results: list[dict]) -> list[str]:
    """The submissions whose status is not ``ok``, with the reason."""
    esc = html.escape
    odd = [r for r in results if r.get("status") not in ("ok", None)]
    parts = ["<h2 id=\"not-graded-normally\">Not graded normally</h2>"]
    if not odd:
        parts.append("<p class=\"muted\">Every submission ran normally.</p>")
        return parts
    rows = [f"<tr><td>{esc(r['student'])}</td><td>{esc(r['assignment'])}</td>"
            f"<td>{esc(str(r.get('status')))}</td><td>{esc(str(r.get('reason', ''))[:400])}</td></tr>"
            for r in sorted(odd, key=lambda r: (r["assignment"], r["student"]))]
    return parts + _table(["student", "assignment", "status", "reason"], rows)


def render(results: list[dict], title: str = "Grading report", baseline: dict | None = None,
           similarity_html: str = "") -> str:
    esc = html.escape
    summary = summarise(results)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
             f"<style>{STYLE}</style></head><body>\n<h1>{esc(title)}</h1>"]
    students = len({r["student"] for r in results})
    parts.append(f"<p>{len(results)} submission(s) of {students} student(s), "
                 f"{len(summary)} assignment(s).</p>")
    for assignment in sorted(summary):
        parts.extend(_assignment_section(assignment, summary[assignment]))
    parts.extend(_held_section(results, baseline or {}))
    parts.extend(_not_graded_section(results))
    if similarity_html:
        parts.append(similarity_html)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write(path: Path, results: list[dict], title: str = "Grading report",
          source_dir=None, similarity_html: str = "") -> Path:
    """``similarity_html``: the "Similar submissions" section (already escaped), at the end."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    baseline = baseline_flags(source_dir, sorted({r["assignment"] for r in results}))
    tmp.write_text(render(results, title, baseline, similarity_html), encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)
    return path
