"""Gradescope's results.json as :func:`autograder.instructor.gradescope.to_gradescope` writes it from a
grading result: markdown outputs that show a student's text as text, and the leaderboard of what the
grader measured. (tests/test_gradescope.py runs the zip on a fake /autograder tree: slow.)"""
from __future__ import annotations

from html.parser import HTMLParser

import mistune
import pytest
from markdown_it import MarkdownIt

from autograder.instructor.gradescope import leaderboard, md_code, md_text, to_gradescope

OUTPUT_FORMATS = {"text", "html", "simple_format", "md", "ansi"}     # Gradescope's results.json spec
RENDERERS = {
    "commonmark": MarkdownIt("commonmark").render,
    "gfm": MarkdownIt("gfm-like").render,                              # tables, autolinks (linkify)
    "mistune": mistune.html,
}
HOSTILE = [
    "your code raised ValueError: ![x](https://evil.example/p.png) and <img src=x onerror=alert(1)>",
    "[click](javascript:alert(1)) [ref][1]\n\n[1]: https://evil.example/ref",
    "<script>alert(1)</script> <iframe src=//evil.example></iframe> &lt;b&gt; &amp; &#x3C;",
    "__init__() takes from 1 to 3 positional arguments but 4 were given; *x* **y** `z` ~~s~~",
    "# heading\n- item\n1. item\n> quote\n===\n---\n| a | b |\n|---|---|",
    "    indented like code\n\tand a tab\nhttp://a.example www.b.example mail@c.example.org",
    "``` fence\ncode\n```\n$x^2$ \\(math\\) trailing backslash \\",
]


class _Visible(HTMLParser):
    """The tags of rendered HTML and the text a reader sees."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def visible(html: str) -> tuple[set, str]:
    parser = _Visible()
    parser.feed(html)
    text = "".join(parser.text).replace("\xa0", " ")
    return {tag for tag, _ in parser.tags}, " ".join(text.split())


@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("text", HOSTILE)
def test_a_students_text_shows_as_written_in_every_renderer(text, renderer):
    """No tag but paragraphs, line breaks and code spans; no link, image, script; every character
    of the message shown (whitespace aside)."""
    tags, shown = visible(RENDERERS[renderer](md_text(text)))
    assert tags <= {"p", "br", "code"}, (tags, md_text(text))
    assert shown == " ".join(text.split()), md_text(text)


def test_a_code_span_holds_any_backticks():
    for text in ("a`b", "``x``", "`start", "end`"):
        tags, shown = visible(MarkdownIt("commonmark").render(md_code(text)))
        assert tags == {"p", "code"} and shown == text


def _result(**question) -> dict:
    row = {"id": "train_to_accuracy", "title": "Train a ViT", "passed": True, "score": 4.0, "max_score": 4.0,
           "feedback": "Train a ViT: correct: accuracy 0.834 on 2,000 held-out images after 55 s of training.",
           "mistake": None}
    row.update(question)
    return {"assignment": "09_training", "status": "ok", "reason": "", "notebook": "Copy of 09_training.ipynb",
            "questions": [row, {"id": "concept_augmentation", "title": "Predict", "passed": True, "score": 1.0,
                                "max_score": 1.0, "feedback": "Predict: correct.", "mistake": None}]}


def test_the_leaderboard_is_what_the_grader_measured_in_gradescopes_format():
    data = to_gradescope(_result(measures={"accuracy": 0.83449, "seconds": 55.27}), {}, 70.0)
    assert data["leaderboard"] == [{"name": "Held-out accuracy", "value": 0.8345, "order": "desc"},
                                   {"name": "Training seconds", "value": 55.3, "order": "asc"}]
    output = data["tests"][0]["output"]
    assert "| held-out accuracy (the grader's prediction) | 0.8345 |" in output
    assert "| training time (the grader's clock) | 55.3 s |" in output
    assert {"table", "td"} <= visible(RENDERERS["gfm"](output))[0]


def test_no_leaderboard_without_measures_or_for_a_held_question():
    assert "leaderboard" not in to_gradescope(_result(), {}, 1.0)
    held = _result(measures={"accuracy": 0.9, "seconds": 50.0},
                   held=[{"flag": "ctypes", "what": "native code (ctypes/cffi)", "line": "cell 3, line 1",
                          "snippet": "import ctypes"}])
    data = to_gradescope(held, {}, 1.0)
    assert "leaderboard" not in data and leaderboard(held) == []
    test = data["tests"][0]
    assert test["score"] == 0.0 and test["status"] == "failed"
    shown = visible(RENDERERS["commonmark"](test["output"]))[1]
    assert shown.startswith("Held for review by your instructor (automatic score 4/4")
    assert "native code (ctypes/cffi) (cell 3, line 1): import ctypes" in shown
    assert leaderboard(_result(measures={"accuracy": float("nan"), "seconds": 50.0})) == \
        [{"name": "Training seconds", "value": 50.0, "order": "asc"}]            # no NaN in results.json


def test_outputs_are_markdown_valid_for_gradescope_and_keep_their_words():
    result = _result(passed=False, score=0.0, feedback="Train a ViT: not yet. your code raised "
                                                       "ValueError: <b>bold</b> [x](http://e.example)")
    result["reason"] = "several notebooks submitted; graded my_work.ipynb"
    data = to_gradescope(result, {"visibility": "after_due_date"}, 3.2)
    assert data["output_format"] == "md" and {t["output_format"] for t in data["tests"]} <= OUTPUT_FORMATS
    assert data["execution_time"] == 3 and data["score"] == 1.0
    tags, shown = visible(RENDERERS["gfm"](data["output"]))
    assert "table" in tags and "a" not in tags
    assert shown.startswith("09_training: 1 / 5") and "graded my_work.ipynb" in shown
    assert "train_to_accuracy: Train a ViT 0 / 4 failed" in shown
    tags, shown = visible(RENDERERS["gfm"](data["tests"][0]["output"]))
    assert tags <= {"p", "br", "code"} and "<b>bold</b> [x](http://e.example)" in shown
