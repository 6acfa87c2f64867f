"""Accessibility fixes for the built book (loaded by _config.yml, ``sphinx.local_extensions``).

The browser test (tests/test_book.py) runs axe-core on every page; these are the fixes for
what it found in the theme's and myst-nb's HTML. The theme's own buttons are fixed by the
templates in book/_templates/.

* myst-nb names every "Show code cell source" toggle ``aria-label="Toggle hidden content"``,
  which hides its visible text from the accessible name (WCAG 2.5.3, label in name): a
  speech-input user saying "show code cell source" would not reach it. Without the label the
  toggle is named by what it shows.
"""
from __future__ import annotations

MYST_NB_TOGGLE = '<summary aria-label="Toggle hidden content">'


def _name_toggles_by_their_text(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if body and MYST_NB_TOGGLE in body:
        context["body"] = body.replace(MYST_NB_TOGGLE, "<summary>")


def setup(app):
    app.connect("html-page-context", _name_toggles_by_their_text)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
