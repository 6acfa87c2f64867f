"""The book's self-check questions, rendered as HTML that works on a static page.

Every chapter ends with a "Check yourself" cell whose value is a :class:`Quiz` (the chapter's
questions are in :mod:`vitref.quizzes`); IPython shows it through ``_repr_html_``, so the book
build (myst-nb) stores the HTML in the page, and the numbers in the questions are whatever
``vitref`` computed during that build. The HTML needs
no kernel and loads nothing from another site: each question is a ``<form>`` whose
``<fieldset>`` is named by its ``<legend>`` (the prompt), with native radio buttons or a text
field (reachable with Tab, chosen with the arrow keys or Space) and a Check button; the verdict
and the sentence explaining it appear in an ``aria-live="polite"`` element. One small inline
script (the same on every page, run once) and one inline style sheet come with each quiz, so the
questions also work in Jupyter and Colab.

The right choice is marked only in a ``data-`` attribute that the script reads; every choice
carries its own explanation, the right one included. Text is plain: ``code`` in backticks
becomes ``<code>``, everything else is escaped (write maths in Unicode: ×, ², √, ≤).

Not imported by ``import vitref`` and not graded (it is not in :data:`vitref.GRADED_MODULES`):
``from vitref.quiz import Choice, ChoiceQuestion, NumberQuestion, Quiz``.
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

QUIZ_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True)
class Choice:
    """One answer of a multiple-choice question and the sentence saying why it is right or wrong."""

    text: str
    why: str
    right: bool = False


@dataclass(frozen=True)
class ChoiceQuestion:
    """A prompt and its choices, exactly one of them right. ``code``: a snippet shown under the prompt."""

    prompt: str
    choices: Sequence[Choice]
    code: str = ""

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))
        _check_text("the prompt", self.prompt)
        if len(self.choices) < 2 or not all(isinstance(c, Choice) for c in self.choices):
            raise ValueError(f"question {self.prompt!r}: expected at least two Choice objects, got {self.choices!r}")
        right = [c.text for c in self.choices if c.right]
        if len(right) != 1:
            raise ValueError(f"question {self.prompt!r}: expected exactly one choice with right=True, got {right}")
        texts = [c.text for c in self.choices]
        if len(set(texts)) != len(texts):
            raise ValueError(f"question {self.prompt!r}: two choices have the same text: {texts}")
        for choice in self.choices:
            _check_text(f"choice {choice.text!r}", choice.text)
            _check_text(f"the explanation of choice {choice.text!r}", choice.why)


@dataclass(frozen=True)
class NumberQuestion:
    """A prompt whose answer is a number, right within ``tolerance`` (absolute).

    ``why``: said when the number is right (how it comes about); ``wrong``: said for any other
    number (how to get there, without giving the number away); ``mistakes``: numbers a common
    mistake gives, each with the sentence naming that mistake.
    """

    prompt: str
    answer: float
    why: str
    wrong: str
    mistakes: Mapping[float, str] = field(default_factory=dict)
    tolerance: float = 0.0
    code: str = ""

    def __post_init__(self):
        object.__setattr__(self, "mistakes", dict(self.mistakes))
        _check_text("the prompt", self.prompt)
        _check_text(f"the explanation of the answer to {self.prompt!r}", self.why)
        _check_text(f"the explanation of a wrong answer to {self.prompt!r}", self.wrong)
        if not _is_finite_number(self.answer):
            raise ValueError(f"question {self.prompt!r}: the answer must be a finite number, got {self.answer!r}")
        if not _is_finite_number(self.tolerance) or self.tolerance < 0:
            raise ValueError(f"question {self.prompt!r}: the tolerance must be a number >= 0, got {self.tolerance!r}")
        for value, why in self.mistakes.items():
            if not _is_finite_number(value):
                raise ValueError(f"question {self.prompt!r}: a mistake's value must be a finite number, got {value!r}")
            if _near(value, self.answer, self.tolerance):
                raise ValueError(f"question {self.prompt!r}: the mistake {value!r} is within the tolerance "
                                 f"{self.tolerance!r} of the answer {self.answer!r}, so it would be graded right")
            _check_text(f"the explanation of the mistake {value!r}", why)


Question = Union[ChoiceQuestion, NumberQuestion]


class Quiz:
    """The self-check questions of one chapter; ``name`` (e.g. ``"ch03"``) makes the ids unique on the page."""

    def __init__(self, name: str, questions: Sequence[Question]):
        if not isinstance(name, str) or not QUIZ_NAME.fullmatch(name):
            raise ValueError(f"a quiz name is lower-case letters, digits and '-' (e.g. 'ch03'), got {name!r}")
        questions = tuple(questions)
        if not questions:
            raise ValueError(f"quiz {name!r}: expected at least one question")
        for question in questions:
            if not isinstance(question, (ChoiceQuestion, NumberQuestion)):
                raise TypeError(f"quiz {name!r}: expected ChoiceQuestion or NumberQuestion, "
                                f"got {type(question).__name__}")
        self.name = name
        self.questions = questions

    def _repr_html_(self) -> str:
        return quiz_html(self)

    def __repr__(self) -> str:
        return f"Quiz({self.name!r}, {len(self.questions)} questions)"


def quiz_html(quiz: Quiz) -> str:
    """The quiz as one self-contained HTML fragment: style, one form per question, the script."""
    forms = [_question_html(f"quiz-{quiz.name}-{number}", number, question)
             for number, question in enumerate(quiz.questions, start=1)]
    return (f'<div class="vitref-quiz" id="quiz-{quiz.name}">\n<style>{QUIZ_CSS}</style>\n'
            + "\n".join(forms) + f"\n<script>{QUIZ_JS}</script>\n</div>")


def inline_html(text: str) -> str:
    """Plain text made safe for HTML, with `code` in backticks as <code>."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        raise ValueError(f"unbalanced backticks in {text!r}: write `code` between a pair of them")
    return "".join(f"<code>{html.escape(part)}</code>" if index % 2 else html.escape(part)
                   for index, part in enumerate(parts))


def _question_html(qid: str, number: int, question: Question) -> str:
    code = (f'<pre class="vitref-quiz-code"><code>{html.escape(question.code)}</code></pre>\n'
            if question.code else "")
    legend = (f'<legend><span class="vitref-quiz-index">Question {number}.</span> '
              f'{inline_html(question.prompt)}</legend>')
    if isinstance(question, ChoiceQuestion):
        kind, data, body = "choice", "", _choices_html(qid, question)
    else:
        kind, data, body = "number", _number_data(question), _number_html(qid)
    return (f'<form class="vitref-quiz-question" id="{qid}" data-kind="{kind}"{data}>\n<fieldset>\n'
            f'{legend}\n{code}{body}\n'
            '<button type="submit" class="vitref-quiz-check">Check</button>\n'
            '<p class="vitref-quiz-feedback" aria-live="polite"></p>\n</fieldset>\n</form>')


def _choices_html(qid: str, question: ChoiceQuestion) -> str:
    rows = []
    for index, choice in enumerate(question.choices):
        cid = f"{qid}-{index}"
        rows.append(f'<div class="vitref-quiz-choice"><input type="radio" name="{qid}" id="{cid}" value="{index}" '
                    f'data-right="{int(choice.right)}" data-why="{html.escape(inline_html(choice.why))}">'
                    f'<label for="{cid}">{inline_html(choice.text)}</label></div>')
    return "\n".join(rows)


def _number_html(qid: str) -> str:
    return (f'<div class="vitref-quiz-answer"><label for="{qid}-answer">Your answer</label> '
            f'<input type="text" inputmode="decimal" autocomplete="off" id="{qid}-answer" '
            'class="vitref-quiz-number"></div>')


def _number_data(question: NumberQuestion) -> str:
    mistakes = [[value, inline_html(why)] for value, why in question.mistakes.items()]
    attributes = {"answer": json.dumps(question.answer), "tolerance": json.dumps(question.tolerance),
                  "why-right": inline_html(question.why), "why-wrong": inline_html(question.wrong),
                  "mistakes": json.dumps(mistakes, ensure_ascii=False)}
    return "".join(f' data-{name}="{html.escape(value)}"' for name, value in attributes.items())


def _check_text(what: str, text) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} must be a non-empty string, got {text!r}")
    inline_html(text)   # raises on unbalanced backticks


def _near(value: float, target: float, tolerance: float) -> bool:
    """The script's test of a typed number (QUIZ_JS, ``near``): within the tolerance, plus rounding."""
    return abs(value - target) <= tolerance + 1e-9 * abs(target)


def _is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# The page's colours come from the book's theme (pydata-sphinx-theme's variables, light and dark),
# with fallbacks for Jupyter. `min-width: 0`: a fieldset is otherwise as wide as its widest line.
# The legend's size is set here: the theme's Bootstrap styles legends as headings.
QUIZ_CSS = """
.vitref-quiz-question { margin: 1rem 0; }
.vitref-quiz-question fieldset { min-width: 0; margin: 0; padding: 0.4rem 1rem 0.8rem;
  border: 1px solid var(--pst-color-border, #c0c0c0); border-left: 4px solid var(--pst-color-border, #c0c0c0);
  border-radius: 4px; }
.vitref-quiz-question[data-state="right"] fieldset { border-left-color: var(--pst-color-success, #2e7d32); }
.vitref-quiz-question[data-state="wrong"] fieldset { border-left-color: var(--pst-color-danger, #c62828); }
.vitref-quiz-question legend { margin-bottom: 0.4rem; padding: 0 0.3rem; font-size: 1rem; line-height: 1.5;
  font-weight: 600; overflow-wrap: anywhere; }
.vitref-quiz-choice { display: flex; align-items: baseline; gap: 0.5rem; margin: 0.35rem 0; }
.vitref-quiz-choice input { flex: none; }
.vitref-quiz-choice label, .vitref-quiz-feedback { overflow-wrap: anywhere; }
.vitref-quiz-code { overflow-x: auto; }
.vitref-quiz-number { max-width: 12rem; padding: 0.2rem 0.4rem; }
.vitref-quiz-check { margin-top: 0.5rem; padding: 0.25rem 1rem; border: 1px solid currentColor;
  border-radius: 4px; background: transparent; color: inherit; cursor: pointer; }
.vitref-quiz-feedback { margin: 0.5rem 0 0; }
"""

# One listener for every quiz on the page (installed once). Reads only the page's own data-
# attributes; the explanations are HTML that quiz_html escaped.
QUIZ_JS = """
(() => {
  if (window.vitrefQuiz) return;
  window.vitrefQuiz = true;
  const toNumber = text => {
    const cleaned = text.trim().replace(/[\\s,_]/g, '').replace(/\\u2212/g, '-');
    return cleaned === '' ? NaN : Number(cleaned);
  };
  const say = (form, verdict, why) => {
    form.dataset.state = verdict ? 'right' : 'wrong';
    form.querySelector('.vitref-quiz-feedback').innerHTML =
      '<strong>' + (verdict ? 'Right.' : 'Not quite.') + '</strong> ' + why;
  };
  const ask = (form, text) => {
    delete form.dataset.state;
    form.querySelector('.vitref-quiz-feedback').textContent = text;
  };
  document.addEventListener('submit', event => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.classList.contains('vitref-quiz-question')) return;
    event.preventDefault();
    if (form.dataset.kind === 'choice') {
      const picked = form.querySelector('input[type="radio"]:checked');
      if (!picked) return ask(form, 'Choose an answer first.');
      return say(form, picked.dataset.right === '1', picked.dataset.why);
    }
    const value = toNumber(form.querySelector('input.vitref-quiz-number').value);
    if (!Number.isFinite(value)) return ask(form, 'Type a number, for example 42 or 0.5.');
    const tolerance = Number(form.dataset.tolerance);
    const near = target => Math.abs(value - target) <= tolerance + 1e-9 * Math.abs(target);
    if (near(Number(form.dataset.answer))) return say(form, true, form.dataset.whyRight);
    const known = JSON.parse(form.dataset.mistakes).find(([wrong]) => near(wrong));
    say(form, false, known ? known[1] : form.dataset.whyWrong);
  });
})();
"""
