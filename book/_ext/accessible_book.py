"""Accessibility fixes for the built book (loaded by _config.yml, ``sphinx.local_extensions``).

The browser test (tests/test_book.py) runs axe-core on every page; these are the fixes for
what it found in the theme's and myst-nb's HTML. The theme's own buttons are fixed by the
templates in book/_templates/.

* myst-nb names every "Show code cell source" toggle ``aria-label="Toggle hidden content"``,
  which hides its visible text from the accessible name (WCAG 2.5.3, label in name): a
  speech-input user saying "show code cell source" would not reach it. Without the label the
  toggle is named by what it shows.
* At a phone's width (390 CSS pixels) no page may scroll sideways: ``static/accessible_book.css``
  lets long inline code wrap (Sphinx keeps each of its words on one line) and gives wide blocks
  a scroll bar of their own (WCAG 1.4.10, reflow).
"""
from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"

MYST_NB_TOGGLE = '<summary aria-label="Toggle hidden content">'


def _name_toggles_by_their_text(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if body and MYST_NB_TOGGLE in body:
        context["body"] = body.replace(MYST_NB_TOGGLE, "<summary>")


def _add_static_folder(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("config-inited", _add_static_folder)
    app.add_css_file("accessible_book.css")
    app.connect("html-page-context", _name_toggles_by_their_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
