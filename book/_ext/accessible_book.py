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

It also serves the live ViT of chapter 7 (07b, ``vitref.explorer``) from the site itself: after
the build, the model and images the chapter wrote into ``_build/explorer/`` and onnxruntime-web's
single-threaded WebAssembly build (npm, package-lock.json) are copied into ``_static/explorer/``,
beside the page's script (``static/explorer/vit-explorer.js``). Chapter 8's character GPT
(``vitref.text_explorer``, ``text-explorer.js``) is served the same way; the code both share is
``common.js``. Nothing is loaded from a CDN.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"

# onnxruntime-web's files the explorer needs: the WebAssembly-only bundle (global `ort`), its loader
# module and the one .wasm (SIMD; run on one thread, so no SharedArrayBuffer is needed)
ORT_WEB_FILES = ("ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
# vitref.explorer.MODEL_FILE, DATA_FILE (07b) and CHAR_MODEL_FILE, CHAR_DATA_FILE (08)
EXPLORER_FILES = ("vit.onnx", "explorer.json", "charlm.onnx", "charlm.json")

MYST_NB_TOGGLE = '<summary aria-label="Toggle hidden content">'


def _name_toggles_by_their_text(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if body and MYST_NB_TOGGLE in body:
        context["body"] = body.replace(MYST_NB_TOGGLE, "<summary>")


def _add_static_folder(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def _copy_explorer_files(app, exception) -> None:
    """Copy the chapters' models and data and onnxruntime-web's files into ``_static/explorer/``."""
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "explorer"
    target.mkdir(parents=True, exist_ok=True)
    written = Path(app.outdir).parent / "explorer"                       # where 07b and 08 write them
    ort_dist = Path(app.srcdir) / "node_modules" / "onnxruntime-web" / "dist"
    sources = [written / name for name in EXPLORER_FILES] + [ort_dist / name for name in ORT_WEB_FILES]
    missing = [str(path) for path in sources if not path.is_file()]
    if missing:
        logger.warning("the live models of chapters 7 and 8 will say they cannot load: missing %s (the model files "
                       "come from running book/07b_what_vit_learns.ipynb and book/08_decoder.ipynb; "
                       "onnxruntime-web from `make setup`, npm ci)",
                       ", ".join(missing))
    for path in sources:
        if path.is_file():
            shutil.copy2(path, target / path.name)


def setup(app):
    app.connect("config-inited", _add_static_folder)
    app.add_css_file("accessible_book.css")
    app.add_css_file("explorer/explorer.css")
    app.connect("html-page-context", _name_toggles_by_their_text)
    app.connect("build-finished", _copy_explorer_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
