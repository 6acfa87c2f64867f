"""ROOT/report.html after `python -m autograder grade`: per question the score distribution
(a plot) and the most frequent named mistakes; the submissions held for review (instructor flags);
odd submissions."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys

import pytest

import autograder

import grading_students as S

pytestmark = pytest.mark.slow   # grades a class first (make test-fast skips it)

A = "02_positional_encoding"
SWAPPED = ("            P[k, 2 * i] = np.cos(k / denominator)\n"
           "            P[k, 2 * i + 1] = np.sin(k / denominator)\n")


def _swap(nb):
    for cell in nb.cells:
        if "P[k, 2 * i] = np.sin(k / denominator)" in cell.source:
            cell.source = cell.source.replace(
                "            P[k, 2 * i] = np.sin(k / denominator)\n"
                "            P[k, 2 * i + 1] = np.cos(k / denominator)\n", SWAPPED)
            return nb
    raise AssertionError("the solution changed: no sin/cos line to swap")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    S.write(S.load(A), root, "honest1", A)
    S.write(S.load(A), root, "honest2", A)
    for student in ("swap1", "swap2", "swap3"):                   # the same named mistake x3
        S.write(_swap(S.load(A)), root, student, A)
    S.write(S.load(A, "exercises"), root, "blank", A)
    # a flagged construct: the checker looked up by a computed attribute name
    S.write(S.insert_cell(S.load(A), "import builtins\nname = 'pr' + 'int'\n"
                          "getattr(builtins, name)('hello')"), root, "flagged", A)
    (root / "submitted" / "broken" / A).mkdir(parents=True)
    (root / "submitted" / "broken" / A / f"{A}.ipynb").write_text("{not json")
    env = dict(os.environ, AUTOGRADER_GRADER_VERSION="report-test")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2",
                           "--no-progress", "--timeout", "20"], cwd=S.REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "report.html" in proc.stdout
    return root, (root / "report.html").read_text()


def _text(page: str) -> str:
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    return re.sub(r" ([:;,.)])", r"\1", text)


def test_most_frequent_named_mistake_with_its_count(graded):
    root, page = graded
    text = _text(page)
    rows = S.read_csv(root)
    assert all("sine and cosine swapped" in rows[(s, A, "q1")][2] for s in ("swap1", "swap2", "swap3"))
    # the catalogue's title, counted once per submission that made it, with who made it
    assert "sine and cosine swapped: 3 (swap1, swap2, swap3)" in text, text
    # the blank answer is not a named mistake: it is among the other reasons
    assert "NotImplementedError" in text


def test_score_distribution_is_an_inline_svg_with_the_counts(graded):
    _, page = graded
    m = re.search(r'<svg class="scores" role="img"[^>]*aria-label="score distribution per question of '
                  r'02_positional_encoding">(.*?)</svg>', page, flags=re.S)
    assert m, "no score figure"
    # one titled bar per score of each question: q1 (2 points) scored 0 by 5 and 2 by 3 of 8
    bars = dict(re.findall(r"<title>(\w+): (\d+) submission\(s\) scored 0</title>", m.group(1)))
    assert bars.get("q1") == "5", bars
    assert "<title>q1: 3 submission(s) scored 2</title>" in m.group(1)
    assert "data:image" not in page          # no picture to decode: text, sharp at any zoom
    text = _text(page)
    # 8 submissions: 3 with full marks (honest1, honest2, flagged), 5 with zero
    assert "8 submission(s) of 8 student(s)" in text
    assert re.search(r"q1 .*? 0\.75 / 2 3/8 5/8", text), text


def test_flags_and_odd_submissions_sections(graded):
    _, page = graded
    flags = _text(page.split('id="flags"')[1].split('id="not-graded-normally"')[0])
    full = sum(q.points for q in autograder.questions("02_positional_encoding"))
    # held for review: the automatic score kept, every question held, the flag with its line
    held = ", ".join(q.id for q in autograder.questions("02_positional_encoding"))
    assert f"flagged 02_positional_encoding {full:g}/{full:g} {held} looks up or sets an attribute of a module " \
           f"by a computed name" in flags, flags
    assert "getattr(builtins, name)('hello')" in flags, flags
    # the course's own set-up cell ("google.colab" in sys.modules) is not flagged in anyone's submission
    assert "honest1" not in flags and "swap1" not in flags, flags
    assert "sys.modules" not in flags, flags
    odd = _text(page.split('id="not-graded-normally"')[1])
    assert "broken" in odd and "invalid" in odd and "honest1" not in odd


def test_report_command_rewrites_it_from_saved_results(graded, tmp_path):
    root, page = graded
    out = tmp_path / "again.html"
    proc = subprocess.run([sys.executable, "-m", "autograder", "report", str(root), "--out", str(out)],
                          cwd=S.REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _text(out.read_text()) == _text(page)


def test_names_from_a_student_are_escaped():
    from autograder.batch import report
    page = report.render([{"student": "<script>x</script>", "assignment": A, "score": 0, "max_score": 2,
                           "status": "ok", "flags": ["<b>f</b>"],
                           "questions": [{"id": "q1", "title": "Q1", "passed": False, "score": 0,
                                          "max_score": 2, "mistake": None,
                                          "feedback": "Looks like a known mistake: <i>x</i>. hint",
                                          "reason": ""}]}])
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>f</b>" not in page
