"""Threat: a student's markdown (or message) runs script in the instructor's browser.

``nbgrader formgrader`` renders ROOT/autograded/<student>/<a>/<a>.ipynb with nbconvert's
``markdown2html``, which passes raw HTML through and allows ``javascript:`` links, on the
Jupyter server's origin; the grader's own pages (feedback.html/.md, report.html) carry the
student's exception messages. A student notebook with every usual payload is graded, then
the pages are rendered as formgrader (and nbconvert's lab and classic templates) would, and
parsed: no script, handler, ``javascript:`` URL, frame or style trick of the student's is
left, and the student's text is still there, as text.
"""
from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser

import nbformat
import pytest

import grading_students as S

pytestmark = pytest.mark.slow   # grades a class with `python -m autograder grade`

A = "02_positional_encoding"

MARKDOWN = [
    "## My derivation\n\nThe encoding uses $\\sin(p / n^{2i/d})$ for even *i*.",
    "<script>alert(101)</script>",
    "<img src=x onerror=alert(102)>",
    "[click me](javascript:alert(103))",
    '<a href="javascript:alert(104)">link</a> and <a href=" JaVaScRiPt:alert(104)">link</a>',
    "<svg onload=alert(105)><circle r=1 /></svg>",
    '<iframe src="https://example.org/alert106"></iframe><object data="x106"></object><embed src="x106">',
    '<div style="position:fixed;top:0;left:0;width:100%;height:100%;background:white">style107</div>'
    "<style>body { display: none } .marker108 {}</style>",
    "```\nnot a link: [x](javascript:alert(109))\n\nstill code <script>alert(109)</script>\n```",
    "[ref]\n\n[ref]: javascript:alert(110)",
    "<details open ontoggle=alert(111)><summary>s</summary></details>",
    '<form action="javascript:alert(112)"><button formaction="javascript:alert(112)">b</button></form>',
    '<math><maction actiontype="statusline" xlink:href="javascript:alert(113)">m</maction></math>',
]
CODE = "# <script>alert(201)</script> stays code\nshown = '<img src=x onerror=alert(202)>'"
RAW = "<script>alert(301)</script>"
MESSAGE = "<script>alert(401)</script><img src=x onerror=alert(402)> [x](javascript:alert(403))"


class _Page(HTMLParser):
    """Elements, attributes and text of a page, as a browser would parse them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._in: str | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, {k.lower(): (v or "") for k, v in attrs}))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, {k.lower(): (v or "") for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)


def assert_inert(html_text: str, where: str) -> _Page:
    """Nothing the student wrote is active in the page (markers: alert(N), style107, marker108)."""
    page = _Page(html_text)
    for tag, attrs in page.tags:
        if tag == "script":
            assert "alert" not in attrs.get("src", ""), (where, attrs)
        assert tag not in ("iframe", "object", "embed", "form"), (where, tag, attrs)
        for name, value in attrs.items():
            assert not (name.startswith("on") and "alert" in value), (where, tag, name, value)
            compact = "".join(value.split()).lower()
            assert not compact.startswith(("javascript:", "vbscript:")), (where, tag, name, value)
            assert not (name == "style" and "fixed" in compact and "style107" in html_text), (where, tag, value)
    for script in page.scripts:
        assert "alert(" not in script, (where, script[:200])
    for style in page.styles:
        assert "marker108" not in style, (where, style[:200])
    return page


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("xss") / "course"
    nb = S.replace_definition(S.load(A), "getPositionEncoding",
                              "def getPositionEncoding(seq_len, d, n=10000):\n"
                              f"    raise ValueError({MESSAGE!r})")
    nb.cells[1:1] = [nbformat.v4.new_markdown_cell(m) for m in MARKDOWN]
    code = nbformat.v4.new_code_cell(CODE)
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<script>alert(501)</script>"})]
    nb.cells.insert(2, code)
    nb.cells.insert(3, nbformat.v4.new_raw_cell(RAW, metadata={"raw_mimetype": "text/html"}))
    S.write(nb, root, "mallory", A)
    S.write(S.load(A), root, "ann", A)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(root), "--jobs", "2",
                           "--no-progress", "--timeout", "20"], capture_output=True, text=True,
                          timeout=600, cwd=S.REPO, env=dict(os.environ, AUTOGRADER_GRADER_VERSION="v1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def _export(nb, template: str) -> str:
    from nbconvert import HTMLExporter
    from traitlets.config import Config
    config = Config()
    resources = {}
    if template == "formgrade":       # what nbgrader's formgrader handler passes
        from nbgrader.server_extensions.formgrader import handlers
        config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
        resources = {"assignment_id": A, "notebook_id": A, "submission_id": "s", "index": 0, "total": 1,
                     "base_url": "", "student": "mallory", "last_name": None, "first_name": None,
                     "notebook_path": "autograded/mallory"}
    config.HTMLExporter.template_name = template
    body, _ = HTMLExporter(config=config).from_notebook_node(nb, resources=resources)
    return body


@pytest.mark.parametrize("template", ["formgrade", "lab", "classic"])
def test_the_autograded_notebook_renders_inert(graded, template):
    nb = nbformat.read(graded / "autograded" / "mallory" / A / f"{A}.ipynb", as_version=4)
    page = assert_inert(_export(nb, template), f"autograded notebook ({template})")
    text = "".join(page.text)
    assert "My derivation" in text and "sin(p / n^{2i/d})" in text       # the prose is still shown
    assert "h2" in [tag for tag, _ in page.tags]                          # a heading stays a heading
    assert "not a link: [x](javascript:alert(109))" in text              # code in markdown, as text
    assert "<script>alert(201)</script> stays code" in text              # the code cell, as text
    assert "alert(501)" not in "".join(page.text) + "".join(page.scripts)  # the student's outputs are gone
    assert "ValueError" in text                                          # the grader's verdict is shown
    assert not any(tag == "a" and "alert(10" in str(attrs) for tag, attrs in page.tags)


def test_the_autograded_notebook_markdown_passes_a_second_rendering_unchanged(graded):
    """What is stored is already clean HTML that markdown renders verbatim."""
    from autograder.batch import sanitize
    nb = nbformat.read(graded / "autograded" / "mallory" / A / f"{A}.ipynb", as_version=4)
    stored = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert len(stored) >= len(MARKDOWN)
    for source in stored:
        assert "\n" not in source and sanitize.render(source).strip() == source
        assert_inert(source, "stored markdown")
    assert not any(c.cell_type == "raw" and "alert(301)" in c.source and c.metadata.get("raw_mimetype")
                   for c in nb.cells)


def test_the_feedback_pages_and_the_report_are_inert(graded):
    from autograder.batch import sanitize
    folder = graded / "autograder-feedback" / "mallory" / A
    page = assert_inert((folder / "feedback.html").read_text(), "feedback.html")
    assert "alert(401)" in "".join(page.text)        # the message is shown, as text
    markdown = (folder / "feedback.md").read_text()
    page = assert_inert(sanitize.render(markdown), "feedback.md rendered")
    assert "alert(401)" in "".join(page.text) and "[x](javascript:alert(403))" in "".join(page.text)
    assert_inert((graded / "report.html").read_text(), "report.html")
    scores = {k[0]: v[0] for k, v in S.read_csv(graded).items() if k[2] == "q1"}
    assert scores == {"ann": 2.0, "mallory": 0.0}
