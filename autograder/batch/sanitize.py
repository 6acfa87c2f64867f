"""Student markdown made safe for the pages instructors open.

The autograded notebook (:mod:`autograder.batch.formgrader`) keeps every markdown cell of
the submission. ``nbgrader formgrader`` and ``generate_feedback`` render it with nbconvert's
``markdown2html`` (mistune, raw HTML passed through, ``javascript:`` links allowed) and no
sanitiser: a student's ``<script>``, ``<img onerror=...>`` or ``[x](javascript:...)`` would
run in the instructor's browser, on the Jupyter server's origin.

So each markdown cell is stored already rendered and cleaned:

1. rendered to HTML with nbconvert's own ``markdown2html`` (what formgrader would show);
2. cleaned with nh3 (the Python binding of the Rust sanitiser ammonia, maintained; bleach is
   deprecated): an allow-list of tags and attributes, so no ``<script>``, ``<iframe>``,
   ``<object>``, ``<embed>``, ``<svg>``, ``<style>``, ``style=``/``class=``/``id=``, no
   ``on*=`` handler; and **no URL at all** but a link to a place in the page itself
   (``href="#..."``): the page is opened on the instructor's Jupyter server, logged in, so an
   image or a link with a root-relative (``<img src="/logout">``, ``<a href="/api/contents">``),
   relative, protocol-relative (``//evil``) or foreign (``https://...``) URL would make the
   instructor's browser call that server or another one (a request the student chose, or
   the fact and time of the instructor's reading). So no ``<img>`` (nor ``<map>``/``<area>``),
   no ``src``/``cite``/... attribute, and an ``href`` only when it starts with ``#``; the
   link's text stays;
3. put on one line (newlines as ``&#10;``) inside a ``<div>``: a markdown renderer takes a
   line that starts with ``<div>`` and has no blank line after it as one raw HTML block and
   passes it through unchanged, so nothing in the text is read as markdown a second time
   (a ``[x](javascript:...)`` shown as code would otherwise become a link again).
   :func:`markdown_cell_source` renders the result once more and checks it comes back
   unchanged; if not, the cell's text is shown escaped instead.

Math (``$...$``) stays text, typeset by MathJax as before.
"""
from __future__ import annotations

import functools
import html

WRAPPER = '<div class="autograder-student-markdown">{}</div>'
UNSHOWABLE = WRAPPER.format("<p>(this markdown cell could not be shown safely)</p>")


def render(source: str) -> str:
    """Markdown to HTML exactly as nbconvert's templates (and so formgrader) render it."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune
    return markdown2html_mistune(source)


_NO_TAGS = {"img", "map", "area"}                   # images and image maps: URLs only
_URL_ATTRIBUTES = {"href", "src", "cite", "longdesc", "usemap", "action", "formaction", "background",
                   "poster", "srcset", "data", "codebase", "ping", "xlink:href"}


def _keep_fragment_links(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: an ``href`` survives only as a link within the page (``#...``)."""
    if attribute in _URL_ATTRIBUTES:
        return value if attribute == "href" and tag == "a" and value.startswith("#") else None
    return value


def clean(fragment: str) -> str:
    """An HTML fragment with only safe tags and attributes left (nh3's allow-lists) and no URL
    but links to a place in the page (``#...``): no image, nothing the browser would fetch."""
    import nh3
    tags = set(nh3.ALLOWED_TAGS) - _NO_TAGS
    attributes = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items() if tag in tags}
    return nh3.clean(fragment, tags=tags, attributes=attributes, attribute_filter=_keep_fragment_links)


def _one_line(fragment: str) -> str:
    return fragment.replace("\r", "&#13;").replace("\n", "&#10;")


def _passes_through(block: str) -> bool:
    try:
        return render(block).strip() == block
    except Exception:  # noqa: BLE001 - a renderer failure means we cannot vouch for the block
        return False


_CACHED_SOURCE_CHARS = 20_000     # longer cells are sanitised each time (rare; the cache stays small)


def markdown_cell_source(source: str) -> str:
    """The source of a markdown cell that renders as ``source`` does, minus anything active. (A
    notebook's given text is the same in every student's copy: each distinct cell is sanitised once
    per grading job.)"""
    return _sanitised(source) if len(source) <= _CACHED_SOURCE_CHARS else _sanitise(source)


@functools.lru_cache(maxsize=4096)
def _sanitised(source: str) -> str:
    return _sanitise(source)


def _sanitise(source: str) -> str:
    try:
        block = WRAPPER.format(_one_line(clean(render(source))))
    except Exception:  # noqa: BLE001 - mistune on odd input: show the text instead
        block = ""
    if block and _passes_through(block):
        return block
    escaped = WRAPPER.format(_one_line("<pre>" + html.escape(source) + "</pre>"))
    return escaped if _passes_through(escaped) else UNSHOWABLE
