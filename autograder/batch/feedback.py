"""Per-student feedback files written by ``python -m autograder grade``.

``ROOT/autograder-feedback/<student>/<assignment>/feedback.html`` (and ``feedback.md`` next
to it):
each question's verdict, points and the checker's message. The messages are the ones the
in-notebook ``check()`` shows: shapes, the name of the failing input set ("batch 1,
T=5, S=7"), the mistake recognised; never the hidden test tensors themselves. Everything
that comes from the student's process (exception messages, names) is escaped: for HTML in
the page, for HTML and markdown (:func:`md_text`) in the ``.md``.

Not in ``ROOT/feedback/``: that folder is nbgrader's (``nbgrader generate_feedback`` writes
``feedback/<student>/<assignment>/<notebook>.html`` there and skips a student whose folder
already exists; ``release_feedback`` hands those pages out).
"""
from __future__ import annotations

import html
import os
import re
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
       color: #1b1b1b; line-height: 1.45; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid #ddd; vertical-align: top; }
.pass { color: #11692b; font-weight: 600; } .fail { color: #a4161a; font-weight: 600; }
.note { background: #fff7e0; border-left: 4px solid #e0a800; padding: .5rem .8rem; }
td.msg { white-space: pre-wrap; font-size: .95em; }
"""


def _fmt_points(x: float) -> str:
    return f"{x:g}"


_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+!|~])")


def md_text(text) -> str:
    """Text (a student's exception message, a name) as markdown that shows exactly that text:
    HTML escaped (no tag survives) and markdown's punctuation backslash-escaped (no link,
    image or code span can be made of it), on one line."""
    text = html.escape(" ".join(str(text).split()), quote=False)
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def render_markdown(result: dict) -> str:
    lines = [f"# Feedback: {md_text(result['assignment'])} ({md_text(result['student'])})", "",
             f"Score: **{_fmt_points(result['score'])} / {_fmt_points(result['max_score'])}**", ""]
    if result.get("reason"):
        lines += [f"> Note: {md_text(result['reason'])}", ""]
    lines += ["| question | verdict | points | feedback |", "|---|---|---|---|"]
    for q in result["questions"]:
        verdict = "passed" if q["passed"] else "not passed"
        text = md_text(q.get("feedback") or q.get("reason") or "")
        lines.append(f"| `{q['id']}` {md_text(q.get('title', ''))} | {verdict} | "
                     f"{_fmt_points(q['score'])} / {_fmt_points(q['max_score'])} | {text} |")
    return "\n".join(lines) + "\n"


def render_html(result: dict) -> str:
    esc = html.escape
    rows = []
    for q in result["questions"]:
        verdict = ('<span class="pass">passed</span>' if q["passed"]
                   else '<span class="fail">not passed</span>')
        text = q.get("feedback") or q.get("reason") or ""
        rows.append(f"<tr><td><code>{esc(q['id'])}</code><br>{esc(q.get('title', ''))}</td>"
                    f"<td>{verdict}</td><td>{_fmt_points(q['score'])}&nbsp;/&nbsp;"
                    f"{_fmt_points(q['max_score'])}</td><td class=\"msg\">{esc(text)}</td></tr>")
    note = (f'<p class="note">{esc(result["reason"])}</p>' if result.get("reason") else "")
    title = f"Feedback: {result['assignment']} ({result['student']})"
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>\n"
            f"<h1>{esc(title)}</h1>\n<p>Score: <strong>{_fmt_points(result['score'])} / "
            f"{_fmt_points(result['max_score'])}</strong></p>\n{note}\n"
            f"<table><thead><tr><th>question</th><th>verdict</th><th>points</th>"
            f"<th>feedback</th></tr></thead><tbody>\n" + "\n".join(rows) +
            "\n</tbody></table>\n</body></html>\n")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)


FOLDER = "autograder-feedback"


def page_folder(root: Path, student: str, assignment: str) -> Path:
    return Path(root) / FOLDER / student / assignment


def write(root: Path, result: dict) -> Path:
    """Write ROOT/autograder-feedback/<student>/<assignment>/feedback.{html,md}; returns the HTML path."""
    folder = page_folder(root, result["student"], result["assignment"])
    _atomic_write(folder / "feedback.md", render_markdown(result))
    path = folder / "feedback.html"
    _atomic_write(path, render_html(result))
    return path
