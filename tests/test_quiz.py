"""The book's self-check questions: vitref.quiz's HTML (one labelled group per question, native
controls, the right answer only in data for the script, an explanation for every answer, nothing
from another site), its errors on bad questions, and the "Check yourself" cell that ends every
chapter (vitref.quizzes), run on its own. The browser test (tests/test_book.py) answers them in
Chromium."""
from __future__ import annotations

import ast
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from vitref.quiz import Choice, ChoiceQuestion, NumberQuestion, Quiz, inline_html
from vitref.quizzes import chapter_quiz

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
MIN_QUESTIONS = 3


class Element:
    def __init__(self, tag: str, attrs: dict, parent: "Element | None"):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element] = []
        self.nodes: list = []                      # children and text, in document order

    def find_all(self, tag: str) -> list["Element"]:
        found = []
        for child in self.children:
            if child.tag == tag:
                found.append(child)
            found.extend(child.find_all(tag))
        return found

    def all_text(self) -> str:
        return "".join(node if isinstance(node, str) else node.all_text() for node in self.nodes)


class TreeBuilder(HTMLParser):
    """A small DOM of the quiz's HTML: elements with attributes, children and text."""

    VOID = {"input", "br", "img", "meta", "link"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("root", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), self.current)
        self.current.children.append(element)
        self.current.nodes.append(element)
        if tag not in self.VOID:
            self.current = element

    def handle_endtag(self, tag):
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>"
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.nodes.append(data)


def parse(markup: str) -> Element:
    builder = TreeBuilder()
    builder.feed(markup)
    builder.close()
    assert builder.current is builder.root, "unclosed elements in the quiz's HTML"
    return builder.root


def sample_quiz() -> Quiz:
    return Quiz("ch99", [
        ChoiceQuestion("How many tokens does `image_to_patches` make of <this> image?", [
            Choice("12", "12 is one side of the grid."),
            Choice("144", "The grid is 12 × 12: N = HW/P².", right=True),
            Choice("432", "432 = P²C is the length of one token."),
        ]),
        NumberQuestion("Which token holds row 2, column 3?", answer=31, why="2 × 14 + 3 = 31.",
                       wrong="Count row by row.", mistakes={44: "That counts column by column."}),
        ChoiceQuestion("Pre-LN or post-LN?", [Choice("post-LN", "It normalises after the sum."),
                                              Choice("pre-LN", "ViT normalises each sub-layer's input.",
                                                     right=True)],
                       code="x = x + attn(norm(x))"),
    ])


def test_each_question_is_a_form_with_a_fieldset_named_by_its_legend():
    quiz = sample_quiz()
    root = parse(quiz._repr_html_())
    forms = root.find_all("form")
    assert len(forms) == len(quiz.questions)
    for number, (form, question) in enumerate(zip(forms, quiz.questions), start=1):
        fieldsets = form.find_all("fieldset")
        assert len(fieldsets) == 1
        first = fieldsets[0].children[0]
        assert first.tag == "legend", "the legend must be the fieldset's first child, or it names nothing"
        legend = first.all_text()
        assert legend.startswith(f"Question {number}.")
        assert html.unescape(re.sub(r"<[^>]+>", "", inline_html(question.prompt))) in legend
        buttons = form.find_all("button")
        assert [(b.attrs.get("type"), b.all_text()) for b in buttons] == [("submit", "Check")]
        live = [p for p in form.find_all("p") if p.attrs.get("aria-live") == "polite"]
        assert len(live) == 1 and live[0].all_text() == "", "one empty live region per question, for the verdict"


def test_choices_are_labelled_radio_buttons_and_only_data_says_which_is_right():
    quiz = sample_quiz()
    question = quiz.questions[0]
    form = parse(quiz._repr_html_()).find_all("form")[0]
    inputs = form.find_all("input")
    labels = {label.attrs["for"]: label.all_text() for label in form.find_all("label")}
    assert [i.attrs["type"] for i in inputs] == ["radio"] * len(question.choices)
    assert len({i.attrs["name"] for i in inputs}) == 1, "one radio group per question"
    assert [labels[i.attrs["id"]] for i in inputs] == [c.text for c in question.choices]
    assert [i.attrs["data-right"] for i in inputs] == ["0", "1", "0"]
    assert [i.attrs["data-why"] for i in inputs] == [inline_html(c.why) for c in question.choices]
    # the right choice looks like the others: the same attributes, no checked box, the same label markup
    assert len({tuple(sorted(i.attrs)) for i in inputs}) == 1 and "checked" not in inputs[1].attrs
    assert len({i.parent.attrs.get("class") for i in inputs}) == 1


def test_a_number_question_has_a_labelled_field_and_its_answers_in_data():
    quiz = sample_quiz()
    form = parse(quiz._repr_html_()).find_all("form")[1]
    field, = form.find_all("input")
    label, = form.find_all("label")
    assert field.attrs["type"] == "text" and label.attrs["for"] == field.attrs["id"] and label.all_text()
    assert form.attrs["data-kind"] == "number"
    assert json.loads(form.attrs["data-answer"]) == 31 and json.loads(form.attrs["data-tolerance"]) == 0
    assert form.attrs["data-why-right"] == "2 × 14 + 3 = 31." and form.attrs["data-why-wrong"] == "Count row by row."
    assert json.loads(form.attrs["data-mistakes"]) == [[44, "That counts column by column."]]


def test_text_is_escaped_code_is_marked_and_ids_are_unique():
    markup = sample_quiz()._repr_html_()
    root = parse(markup)
    legend = root.find_all("legend")[0]
    assert [c.tag for c in legend.children] == ["span", "code"]
    assert "<this>" in legend.all_text() and "<this>" not in markup, "text must be escaped, not markup"
    assert root.find_all("pre")[0].all_text() == "x = x + attn(norm(x))"
    ids = re.findall(r'\bid="([^"]+)"', markup)
    assert len(ids) == len(set(ids)) and all(i.startswith("quiz-ch99") for i in ids)


def test_the_quiz_loads_nothing_from_another_site():
    markup = sample_quiz()._repr_html_()
    scripts = parse(markup).find_all("script")
    assert len(scripts) == 1 and "src" not in scripts[0].attrs, "one inline script, no file loaded"
    assert "addEventListener('submit'" in scripts[0].all_text()
    assert not re.search(r"https?:|//cdn|<iframe|<link|@import", markup)


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: Quiz("Chapter 3", [ChoiceQuestion("p?", [Choice("a", "w", right=True), Choice("b", "w")])]),
     "lower-case letters, digits and '-'"),
    (lambda: Quiz("ch01", []), "at least one question"),
    (lambda: ChoiceQuestion("p?", [Choice("a", "why", right=True)]), "at least two Choice"),
    (lambda: ChoiceQuestion("p?", [Choice("a", "why"), Choice("b", "why")]), "exactly one choice with right=True"),
    (lambda: ChoiceQuestion("p?", [Choice("a", "w", right=True), Choice("b", "w", right=True)]),
     "exactly one choice with right=True"),
    (lambda: ChoiceQuestion("p?", [Choice("a", "w", right=True), Choice("a", "w")]), "the same text"),
    (lambda: ChoiceQuestion("p?", [Choice("a", " ", right=True), Choice("b", "w")]), "non-empty string"),
    (lambda: ChoiceQuestion("", [Choice("a", "w", right=True), Choice("b", "w")]), "the prompt must be"),
    (lambda: ChoiceQuestion("what does `x do?", [Choice("a", "w", right=True), Choice("b", "w")]),
     "unbalanced backticks"),
    (lambda: NumberQuestion("n?", answer=float("nan"), why="w", wrong="w"), "finite number"),
    (lambda: NumberQuestion("n?", answer=True, why="w", wrong="w"), "finite number"),
    (lambda: NumberQuestion("n?", answer=1.0, why="w", wrong="w", tolerance=-0.1), "tolerance must be a number >= 0"),
    (lambda: NumberQuestion("n?", answer=1.0, why="w", wrong="w", tolerance=0.1, mistakes={1.05: "m"}),
     "would be graded right"),
    (lambda: NumberQuestion("n?", answer=1.0, why="w", wrong="w", mistakes={"2": "m"}), "finite number"),
    (lambda: NumberQuestion("n?", answer=1.0, why="w", wrong=""), "explanation of a wrong answer"),
])
def test_a_bad_question_is_refused_with_what_was_expected(make, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        make()


def test_a_quiz_holds_only_questions():
    with pytest.raises(TypeError, match="expected ChoiceQuestion or NumberQuestion, got str"):
        Quiz("ch01", ["What is a token?"])


# --------------------------------------------------------------------------- the chapters


def quiz_cell(path: Path) -> nbformat.NotebookNode:
    """The chapter's last cell, which must be its quiz (cells are only ever added after it)."""
    cells = nbformat.read(path, as_version=4).cells
    heading, quiz = cells[-2], cells[-1]
    assert heading.cell_type == "markdown" and heading.source.startswith("## Check yourself"), (
        f"{path.name}: the chapter must end with a '## Check yourself' section, then its quiz cell")
    assert quiz.cell_type == "code" and "remove-input" in quiz.metadata.get("tags", []), (
        f"{path.name}: the quiz cell must be a code cell tagged remove-input (its output is the quiz)")
    return quiz


def run_quiz_cell(source: str) -> object:
    """Run the cell in a fresh namespace (it must not rely on the chapter's other cells); its value."""
    tree = ast.parse(source)
    last = tree.body.pop()
    assert isinstance(last, ast.Expr), "the quiz cell must end with the expression that builds its Quiz"
    namespace: dict = {}
    exec(compile(tree, "quiz-cell", "exec"), namespace)  # noqa: S102 - the book's own cell
    return eval(compile(ast.Expression(last.value), "quiz-cell", "eval"), namespace)


def test_only_the_chapters_have_a_quiz():
    with pytest.raises(ValueError, match=r"chapters with a quiz are \[1, 2, 3, 4, 5, 6, 7, 8\], got 9"):
        chapter_quiz(9)


def test_every_chapter_is_found():
    assert [p.name[:2] for p in CHAPTERS] == [f"{n:02d}" for n in range(1, len(CHAPTERS) + 1)] and len(CHAPTERS) >= 8


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_ends_with_its_quiz_which_runs_on_its_own(path):
    quiz = run_quiz_cell(quiz_cell(path).source)
    assert isinstance(quiz, Quiz)
    assert quiz.name == f"ch{path.name[:2]}", "the quiz's name makes its ids unique; use the chapter's number"
    assert len(quiz.questions) >= MIN_QUESTIONS, f"{path.name}: {len(quiz.questions)} questions"
    choices = [q for q in quiz.questions if isinstance(q, ChoiceQuestion)]
    assert all(len(q.choices) >= 3 for q in choices), f"{path.name}: a multiple-choice question with two choices"
    rendered = parse(quiz._repr_html_())
    assert len(rendered.find_all("fieldset")) == len(quiz.questions)
