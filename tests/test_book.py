"""The book: every chapter notebook runs top to bottom (nbval), and the built HTML works in a
real browser (Debian's headless Chromium, driven over the DevTools protocol), where axe-core
(installed by `make setup` with npm, package.json) checks every page's accessibility.

Both parts run with ``VITREF_FAST=1``, which shrinks the chapters' training runs to seconds.
The book is built into a temporary copy of the repository, so the execution cache of the real
``make book`` (``_build/.jupyter_cache``) never receives these shortened runs.
"""
from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from test_diagrams import CHAPTERS as DIAGRAM_CHAPTERS

from vitref import diagrams

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHROMIUM = Path("/usr/bin/chromium")
# axe-core, the accessibility engine, from npm (package.json, package-lock.json): `make setup`
AXE_JS = ROOT / "node_modules" / "axe-core" / "axe.min.js"
# WCAG 2.1 A/AA and axe's best practices; a page fails on a violation of these impacts
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
AXE_FAILING_IMPACTS = ("critical", "serious")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic", "--window-size=1280,900",
]


def toc_pages() -> list[str]:
    """Document names listed in _toc.yml (root first), e.g. ['book/intro', 'book/01_tokens', ...]."""
    text = (ROOT / "_toc.yml").read_text()
    pages = re.findall(r"^\s*(?:root|-\s*file)\s*:\s*(\S+)\s*$", text, flags=re.M)
    assert pages, "no pages found in _toc.yml"
    return pages


CHAPTERS = [p for p in toc_pages() if re.search(r"/\d\d_", p)]
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def fast_env() -> dict:
    return dict(os.environ, VITREF_FAST="1")


def test_every_toc_page_exists_and_every_notebook_is_listed():
    pages = toc_pages()
    for page in pages:
        assert (ROOT / f"{page}.md").exists() or (ROOT / f"{page}.ipynb").exists(), f"{page} in _toc.yml has no file"
    listed = {ROOT / f"{page}.ipynb" for page in pages}
    unlisted = [nb.name for nb in NOTEBOOKS if nb not in listed]
    assert not unlisted, f"notebooks in book/ missing from _toc.yml: {unlisted}"
    assert len([p for p in pages if re.search(r"/\d\d_", p)]) == 8, f"expected 8 chapters, got {pages}"


def test_notebooks_are_stored_without_outputs():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, (
                    f"{path.name} cell {i} has stored outputs; clear them (the build executes the notebooks)"
                )


# --------------------------------------------------------------------------- (a) nbval


@pytest.mark.slow   # a chapter under nbval
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_under_nbval(notebook):
    """Each chapter runs top to bottom in a fresh kernel (nbval, lax: outputs are not compared)."""
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=600",
           "--nbval-kernel-startup-timeout=300", "-p", "no:cacheprovider", "-q", "--rootdir", str(BOOK), str(notebook)]
    result = subprocess.run(cmd, cwd=BOOK, env=fast_env(), capture_output=True, text=True, timeout=900)
    summary = result.stdout.strip().splitlines()[-1:] or [""]
    assert result.returncode == 0, f"nbval failed on {notebook.name}:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    assert re.search(r"\b\d+ passed\b", summary[0]) and "failed" not in summary[0], summary[0]


# --------------------------------------------------------------------------- (b) build + browser


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    """Build the book (VITREF_FAST=1) from a copy of the repository; return the html folder."""
    copy = tmp_path_factory.mktemp("book-build")
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "_build", "*.pyc")
    for name in ("book", "vitref"):                      # chapters include vitref's source (literalinclude)
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(ROOT / name, copy / name)
    if (ROOT / "node_modules").is_dir():                 # onnxruntime-web, which the build copies into the site
        (copy / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run([str(jupyter_book), "build", str(copy)], cwd=copy, env=fast_env(),
                            capture_output=True, text=True, timeout=1200)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"jupyter-book build failed:\n{log[-6000:]}"
    html = copy / "_build" / "html"
    reports = sorted((html / "reports").glob("**/*.log")) if (html / "reports").exists() else []
    assert not reports, "notebook execution failed during the build:\n" + "\n".join(
        f"{r.name}:\n{r.read_text()[-3000:]}" for r in reports)
    # Sphinx warnings point at broken references, unreadable images, failed executions...;
    # the only accepted ones are myst-nb's notes that a cell wrote to stderr (hidden by config)
    warnings = [line for line in log.splitlines() if ": WARNING:" in line and "[mystnb.stderr]" not in line]
    assert not warnings, "warnings in the book build:\n" + "\n".join(warnings[:30])
    # MathJax must come from the site itself, never from a CDN (the test machine is offline)
    index = (html / "book" / "intro.html").read_text()
    scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', index, flags=re.I)
    assert scripts and all("://" not in s for s in scripts), f"MathJax not served locally: {scripts}"
    return html


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(built_book):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=built_book))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class Browser:
    """Minimal Chrome DevTools Protocol client: one page target, navigate and evaluate."""

    def __init__(self, websocket_url: str):
        import websocket  # websocket-client (a dependency of jupyter_server, installed with the book tools)

        self.ws = websocket.create_connection(websocket_url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, timeout: float = 60.0):
        self.call("Page.navigate", url=url)
        deadline = time.time() + timeout
        time.sleep(0.2)
        while time.time() < deadline:
            if self.evaluate("document.readyState") == "complete" and self.evaluate("location.href") == url:
                return
            time.sleep(0.1)
        raise TimeoutError(f"{url} did not finish loading in {timeout} s")

    def screenshot(self, path: Path):
        import base64

        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    assert CHROMIUM.exists(), "Debian's chromium is not installed at /usr/bin/chromium (run `make setup`)"
    profile = tmp_path_factory.mktemp("chromium-profile")
    proc = subprocess.Popen([str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                             "--remote-debugging-port=0", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.time() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None, f"chromium exited: {proc.stderr.read().decode()[-2000:]}"
            assert time.time() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        page = next(t for t in targets if t["type"] == "page")
        client = Browser(page["webSocketDebuggerUrl"])
        yield client
        try:
            client.call("Browser.close")
        except Exception:  # noqa: BLE001 - the browser may be gone already
            pass
        client.ws.close()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# Runs in the page after load: waits for MathJax and for every image, then reports what it found.
PAGE_REPORT_JS = r"""
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const images = [...document.images];
  images.forEach(img => { img.loading = 'eager'; });
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => { img.addEventListener('load', done); img.addEventListener('error', done); })));
  // raw TeX left in visible text: outside code, scripts and rendered math
  const walker = document.createTreeWalker(document.querySelector('main') || document.body, NodeFilter.SHOW_TEXT);
  const rawMath = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('pre, code, script, style, mjx-container, textarea, .highlight')) continue;
    const text = node.textContent;
    if (/\$\$|\\\(|\\\[|\\begin\{|\$[^$\s][^$]*\$/.test(text)) rawMath.push(text.trim().slice(0, 120));
  }
  return {
    title: document.title,
    mathjax: !!(window.MathJax && MathJax.startup),
    mjx: document.querySelectorAll('mjx-container').length,
    mathSource: document.querySelectorAll('.math, span.math, div.math').length,
    rawMath: rawMath,
    images: images.map(img => {
      const paragraph = img.closest('a') ? null : img.parentElement.closest('p');
      return {src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0,
              output: !!img.closest('.cell_output'), alt: img.getAttribute('alt'), link: !!img.closest('a'),
              // a figure: a cell's output, a <figure>, or an image alone in its paragraph
              figure: !!img.closest('.cell_output, figure') || (!!paragraph && !paragraph.innerText.trim()),
              decorative: img.getAttribute('aria-hidden') === 'true' ||
                          ['presentation', 'none'].includes(img.getAttribute('role'))};
    }),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    traceback: document.body.innerText.includes('Traceback (most recent call last)'),
  };
})()
"""


# Runs axe-core in the page (after PAGE_REPORT_JS waited for MathJax and the images): the
# violations of AXE_TAGS, each with its impact and the elements where it was found.
AXE_RUN_JS = r"""
(async () => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: %s}, resultTypes: ['violations']});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
      nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 240),
                                summary: (n.failureSummary || '').slice(0, 400)}))}));
})()
"""


def axe_source() -> str:
    """axe-core's script; fails (never skips) with what to do when `make setup` could not install it."""
    assert AXE_JS.is_file(), (
        f"axe-core is not installed ({AXE_JS.relative_to(ROOT)} is missing): run `make setup`, which installs it "
        "with `npm ci` from package-lock.json (it needs Node.js and npm: `apt-get install nodejs npm`)")
    return AXE_JS.read_text()


def axe_violations(browser: "Browser", source: str) -> list[dict]:
    """The accessibility violations of the page open in ``browser`` (axe-core injected once per page)."""
    if not browser.evaluate("typeof window.axe === 'object'"):
        browser.evaluate(source + "\n;true")
    return browser.evaluate(AXE_RUN_JS % json.dumps(AXE_TAGS))


def axe_counts(violations: list[dict]) -> dict:
    """Elements in violation per impact, e.g. {'critical': 0, 'serious': 3, 'moderate': 1, 'minor': 0}."""
    counts = dict.fromkeys(("critical", "serious", "moderate", "minor"), 0)
    for v in violations:
        counts[v["impact"] or "minor"] += len(v["nodes"])
    return counts


def format_axe(page: str, violations: list[dict], nodes_shown: int = 5) -> str:
    """axe's report of one page: each rule broken, its impact, help page and the elements."""
    lines = []
    for v in sorted(violations, key=lambda v: AXE_FAILING_IMPACTS[::-1].index(v["impact"])
                    if v["impact"] in AXE_FAILING_IMPACTS else -1, reverse=True):
        lines.append(f"{page}: [{v['impact']}] {v['id']}: {v['help']} ({len(v['nodes'])} element(s); {v['helpUrl']})")
        for node in v["nodes"][:nodes_shown]:
            lines.append(f"    {node['target']}: {node['html']}")
            lines.append("      " + node["summary"].replace("\n", "\n      "))
        if len(v["nodes"]) > nodes_shown:
            lines.append(f"    ... and {len(v['nodes']) - nodes_shown} more")
    return "\n".join(lines)


# What an image's alt text must not be: missing, empty, or the file's own name (Sphinx's
# default for an image without alt text), which a screen reader would read out.
# A figure (a plot or a diagram: a cell's output, a <figure>, an image alone in its paragraph)
# needs a sentence that says what it shows; an icon in a link or in the text, a non-empty name.
def alt_text_problem(image: dict) -> str:
    alt = (image.get("alt") or "").strip()
    name = urllib.parse.unquote(image["src"].rsplit("/", 1)[-1])
    if image.get("decorative"):
        return ""
    if not alt:
        return "no alt text"
    if alt.rsplit("/", 1)[-1] == name or re.fullmatch(r"[\w./-]+\.(png|svg|jpe?g|gif)", alt):
        return f"alt text is a file name ({alt!r})"
    if image.get("figure") and len(alt.split()) < 5:
        return f"alt text too short to say what the figure shows ({alt!r})"
    return ""


@pytest.mark.slow   # builds the book, then Chromium
def test_book_pages_in_chromium(built_book, server, browser, tmp_path):
    html = built_book
    pages = toc_pages()
    axe = axe_source()                      # before the build's minutes are spent: fails at once without it
    reports, problems, axe_reports, axe_summary = {}, [], [], []
    for page in pages:
        url = f"{server}/{page}.html"
        browser.open(url)
        report = browser.evaluate(PAGE_REPORT_JS)
        reports[page] = report
        where = page.split("/")[-1]
        # accessibility: axe-core's WCAG 2.1 A/AA and best-practice rules on the loaded page
        violations = axe_violations(browser, axe)
        counts = axe_counts(violations)
        axe_summary.append(f"{where}: " + ", ".join(f"{n} {impact}" for impact, n in counts.items()))
        failing = [v for v in violations if v["impact"] in AXE_FAILING_IMPACTS]
        if failing:
            problems.append(f"{where}: {len(failing)} critical or serious accessibility violation(s) (axe-core)")
            axe_reports.append(format_axe(where, failing))
        no_alt = [f"{urllib.parse.unquote(img['src'].rsplit('/', 1)[-1])[:40]}: {alt_text_problem(img)}"
                  for img in report["images"] if alt_text_problem(img)]
        if no_alt:
            problems.append(f"{where}: images without an alt text that says what they show: {no_alt}")
        if report["traceback"]:
            problems.append(f"{where}: a Python traceback is shown on the page")
        if report["mathSource"]:
            if not report["mathjax"]:
                problems.append(f"{where}: has formulas but MathJax did not load")
            elif report["mjx"] == 0:
                problems.append(f"{where}: MathJax rendered no formula")
        if report["rawMath"]:
            problems.append(f"{where}: raw TeX left in the text: {report['rawMath'][:3]}")
        broken = [img["src"] for img in report["images"] if not img["ok"]]
        if broken:
            problems.append(f"{where}: images that did not load: {broken}")
        if page in CHAPTERS:
            figures = sum(img["output"] for img in report["images"])
            if figures < 2:
                problems.append(f"{where}: {figures} figure(s) produced by code, expected at least 2")
    # internal links: the target file exists and, for #anchors, the anchor exists on that page
    ids_by_path: dict[str, set] = {}
    for page, report in reports.items():
        ids_by_path[f"/{page}.html"] = set(report["ids"])
    checked = 0
    for page, report in reports.items():
        for href in report["links"]:
            parsed = urllib.parse.urlparse(href)
            if f"{parsed.scheme}://{parsed.netloc}" != server:
                continue
            path = urllib.parse.unquote(parsed.path)
            target = html / path.lstrip("/")
            if target.is_dir():
                target, path = target / "index.html", path.rstrip("/") + "/index.html"
            checked += 1
            if not target.is_file():
                problems.append(f"{page}: broken link {href}")
                continue
            if parsed.fragment:
                if path not in ids_by_path:
                    text = target.read_text(errors="replace")
                    ids_by_path[path] = set(re.findall(r'\bid="([^"]+)"', text))
                if parsed.fragment not in ids_by_path[path]:
                    problems.append(f"{page}: link to a missing anchor {href}")
    browser.open(f"{server}/{CHAPTERS[-1]}.html")
    browser.screenshot(tmp_path / "last-chapter.png")
    assert checked > 20, f"only {checked} internal links found: is the navigation there?"
    assert sum(r["mjx"] for r in reports.values()) > 50, "suspiciously few rendered formulas in the whole book"
    print("axe-core, elements in violation per page:\n" + "\n".join(axe_summary))
    assert not problems, "\n".join(problems + ["", "axe-core's report:"] + axe_reports)



# --------------------------------------------------------------------------- (c) quizzes, narrow screens

MIN_QUIZ_QUESTIONS = 3     # every chapter ends with at least this many self-check questions (vitref.quiz)
NARROW_WIDTH = 390         # a phone's CSS width: no page may scroll sideways at it

# The quiz questions of the page open in the browser: each group's accessible name (its legend, as the
# accessibility tree computes it), its controls, and what its data says the right answer is.
QUIZ_REPORT_JS = r"""
(() => {
  const text = markup => new DOMParser().parseFromString(markup || '', 'text/html').body.textContent;
  const labelOf = input => (document.querySelector('label[for="' + input.id + '"]') || {}).textContent || '';
  return [...document.querySelectorAll('form.vitref-quiz-question')].map(form => {
    const group = form.querySelector('fieldset');
    const first = group && group.firstElementChild;
    const field = form.querySelector('input.vitref-quiz-number');
    return {
      id: form.id, kind: form.dataset.kind,
      legend: first && first.tagName === 'LEGEND' ? first.textContent.trim() : '',
      live: form.querySelectorAll('[aria-live="polite"]').length,
      button: (form.querySelector('button[type="submit"]') || {}).textContent || '',
      choices: [...form.querySelectorAll('input[type="radio"]')].map(radio => (
        {id: radio.id, right: radio.dataset.right === '1', why: text(radio.dataset.why), label: labelOf(radio)})),
      field: field ? field.id : null, fieldLabel: field ? labelOf(field) : '',
      answer: form.dataset.answer || null,
      mistakes: JSON.parse(form.dataset.mistakes || '[]').map(([value, why]) => [value, text(why)]),
      whyRight: text(form.dataset.whyRight), whyWrong: text(form.dataset.whyWrong),
    };
  });
})()
"""

# Scripts the page loaded (in the HTML or added since) from another origin than the site's own.
FOREIGN_SCRIPTS_JS = ("[...document.scripts].filter(s => s.src && new URL(s.src).origin !== location.origin)"
                      ".map(s => s.src)")

# How wide the page is at the current viewport, and the widest elements that stick out of it
# (outside any box that scrolls sideways on its own), to say what to fix.
WIDTH_REPORT_JS = r"""
(() => {
  const width = document.documentElement.clientWidth;
  const scrollsOnItsOwn = el => {
    for (let up = el.parentElement; up; up = up.parentElement) {
      const overflow = getComputedStyle(up).overflowX;
      if (overflow === 'auto' || overflow === 'scroll' || overflow === 'hidden') return true;
    }
    return false;
  };
  const wide = [...document.body.querySelectorAll('*')]
    .filter(el => el.getBoundingClientRect().right > width + 1 && !scrollsOnItsOwn(el))
    .map(el => ({tag: el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
                   ? '.' + el.className.trim().split(/\s+/).join('.') : ''),
                 right: Math.round(el.getBoundingClientRect().right),
                 text: (el.textContent || '').trim().slice(0, 60)}))
    .sort((a, b) => b.right - a.right);
  return {scrollWidth: document.documentElement.scrollWidth, clientWidth: width, widest: wide.slice(0, 4)};
})()
"""

KEYS = {  # what Chromium needs to see a real key press (DevTools Input.dispatchKeyEvent)
    "Tab": dict(key="Tab", code="Tab", windowsVirtualKeyCode=9),
    "Space": dict(key=" ", code="Space", windowsVirtualKeyCode=32, text=" "),
    "Enter": dict(key="Enter", code="Enter", windowsVirtualKeyCode=13, text="\r"),
}


def press(browser: "Browser", name: str) -> None:
    """One key press, down and up, on whatever has the focus (as a keyboard user does it)."""
    browser.call("Input.dispatchKeyEvent", type="keyDown", **KEYS[name])
    up = {k: v for k, v in KEYS[name].items() if k != "text"}
    browser.call("Input.dispatchKeyEvent", type="keyUp", **up)


def feedback(browser: "Browser", form_id: str) -> str:
    return browser.evaluate(f"document.getElementById({json.dumps(form_id)})"
                            ".querySelector('[aria-live=\"polite\"]').textContent.trim()")


def focused_id(browser: "Browser") -> str:
    return browser.evaluate("(document.activeElement.id || document.activeElement.className || '') + ''")


def answer_choice_by_keyboard(browser: "Browser", form_id: str, choice_id: str) -> str:
    """Focus a radio button, select it with Space, Tab to Check, press Enter: the live region's text."""
    browser.evaluate(f"document.getElementById({json.dumps(choice_id)}).focus()")
    press(browser, "Space")
    assert browser.evaluate(f"document.getElementById({json.dumps(choice_id)}).checked"), (
        f"{choice_id}: Space on the focused radio button did not select it")
    press(browser, "Tab")
    assert focused_id(browser) == "vitref-quiz-check", f"{form_id}: Tab from a choice should reach Check"
    press(browser, "Enter")
    return feedback(browser, form_id)


def answer_number_by_keyboard(browser: "Browser", form_id: str, field_id: str, text: str) -> str:
    """Focus the number field, type into it, press Enter: the live region's text."""
    browser.evaluate(f"(f => {{ f.value = ''; f.focus(); }})(document.getElementById({json.dumps(field_id)}))")
    browser.call("Input.insertText", text=text)
    press(browser, "Enter")
    return feedback(browser, form_id)


def choice_problems(browser: "Browser", name: str, q: dict) -> list[str]:
    """A wrong choice and the right one, each chosen by keyboard: the verdict and that choice's sentence."""
    right = [c for c in q["choices"] if c["right"]]
    if len(q["choices"]) < 2 or not all(c["label"].strip() for c in q["choices"]) or len(right) != 1:
        return [f"{name}: choices must be labelled, exactly one right: {q['choices']}"]
    wrong = next(c for c in q["choices"] if not c["right"])
    problems = []
    for choice, verdict in [(wrong, "Not quite."), (right[0], "Right.")]:
        said = answer_choice_by_keyboard(browser, q["id"], choice["id"])
        if not (said.startswith(verdict) and choice["why"].strip() in said):
            problems.append(f"{name}: choosing {choice['label']!r} should say {verdict!r} and why; said {said!r}")
    return problems


def accessible_group(browser: "Browser", form_id: str) -> tuple[str, str]:
    """(role, name) of a question's fieldset in Chromium's accessibility tree: what a screen reader announces."""
    found = browser.call("Runtime.evaluate",
                         expression=f"document.getElementById({json.dumps(form_id)}).querySelector('fieldset')")
    node = browser.call("Accessibility.getPartialAXTree", objectId=found["result"]["objectId"],
                        fetchRelatives=False)["nodes"][0]
    return node.get("role", {}).get("value", ""), node.get("name", {}).get("value", "")


def quiz_problems(browser: "Browser", where: str) -> tuple[int, list[str]]:
    """Check every quiz question of the open page by keyboard: a group named by its question, a wrong
    answer that shows its own explanation, a right one that says so. Returns (questions, problems)."""
    questions, problems = browser.evaluate(QUIZ_REPORT_JS), []
    for q in questions:
        name = f"{where} {q['id']}"
        role, group_name = accessible_group(browser, q["id"])
        if role != "group" or not q["legend"] or group_name.strip() != q["legend"]:
            problems.append(f"{name}: the question must be a group named by its legend; "
                            f"got role {role!r}, name {group_name!r}")
        if q["live"] != 1 or q["button"].strip() != "Check":
            problems.append(f"{name}: needs one live region and a Check button: {q}")
            continue
        if q["kind"] == "choice":
            problems += choice_problems(browser, name, q)
        else:
            if not q["fieldLabel"].strip():
                problems.append(f"{name}: the number field has no label")
            wrong_value, wrong_why = (q["mistakes"][0] if q["mistakes"] else (float(q["answer"]) + 1000, q["whyWrong"]))
            for typed, verdict, why in [(str(wrong_value), "Not quite.", wrong_why),
                                        (q["answer"], "Right.", q["whyRight"])]:
                said = answer_number_by_keyboard(browser, q["id"], q["field"], typed)
                if not (said.startswith(verdict) and why.strip() in said):
                    problems.append(f"{name}: typing {typed} should say {verdict!r} and why; said {said!r}")
    return len(questions), problems


@pytest.mark.slow   # builds the book (shared with the test above), then Chromium
def test_quizzes_scripts_and_narrow_screens_in_chromium(built_book, server, browser):
    """Every chapter's quiz answers and explains, operated by keyboard; no page loads a script from
    another site; at a phone's width (390 CSS pixels) no page scrolls sideways."""
    problems, counts = [], {}
    for page in toc_pages():
        where = page.split("/")[-1]
        browser.open(f"{server}/{page}.html")
        browser.evaluate(PAGE_REPORT_JS)                     # waits for MathJax and the images
        foreign = browser.evaluate(FOREIGN_SCRIPTS_JS)
        if foreign:
            problems.append(f"{where}: scripts loaded from another site: {foreign}")
        counts[where], quiz_errors = quiz_problems(browser, where)
        problems += quiz_errors
        if page in CHAPTERS and counts[where] < MIN_QUIZ_QUESTIONS:
            problems.append(f"{where}: {counts[where]} quiz questions, expected at least {MIN_QUIZ_QUESTIONS}")
    browser.call("Emulation.setDeviceMetricsOverride", width=NARROW_WIDTH, height=844, deviceScaleFactor=1,
                 mobile=True)
    try:
        for page in toc_pages():
            browser.open(f"{server}/{page}.html")
            browser.evaluate(PAGE_REPORT_JS)
            report = browser.evaluate(WIDTH_REPORT_JS)
            if report["scrollWidth"] > NARROW_WIDTH:
                problems.append(f"{page.split('/')[-1]}: {report['scrollWidth']} px wide at {NARROW_WIDTH} px, "
                                f"scrolls sideways; widest: {report['widest']}")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    print("quiz questions per page:", counts)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- (d) the live ViT of chapter 7

EXPLORER_PAGE = "book/07b_what_vit_learns"
EXPLORER_KEYS = {"ArrowRight": dict(key="ArrowRight", code="ArrowRight", windowsVirtualKeyCode=39)}

# What the explorer shows once its first prediction is made (or why it failed), with the build's data.
EXPLORER_REPORT_JS = r"""
(async () => {
  const deadline = performance.now() + 60000;
  while (!window.vitExplorer && performance.now() < deadline) await new Promise(r => setTimeout(r, 50));
  await window.vitExplorer.ready;
  const data = await (await fetch('../_static/explorer/explorer.json')).json();
  const s = window.vitExplorer.state;
  return {error: window.vitExplorer.error || null, live: document.getElementById('vit-explorer-live').textContent,
          liveCount: document.querySelectorAll('#vit-explorer [aria-live="polite"]').length,
          predicted: s.probabilities ? s.probabilities.indexOf(Math.max(...s.probabilities)) : null,
          probabilities: s.probabilities, rollout: s.rollout, first: data.first, classes: data.classes,
          images: data.images.length, updates: window.vitExplorer.updates,
          maps: document.querySelectorAll('#vit-explorer-maps canvas').length,
          map: document.getElementById('vit-explorer-map-0-0').toDataURL(),
          files: performance.getEntriesByType('resource').map(e => e.name)};
})()
"""


def explorer_problems(browser: "Browser", server: str) -> tuple[list[str], float]:
    """The explorer on its page: it loads from the site's own files, predicts what PyTorch predicted for the
    first image, draws the rollout vitref computes, and a keyboard occlusion updates the maps and the live
    region. Returns (problems, the page's update time in ms)."""
    browser.open(f"{server}/{EXPLORER_PAGE}.html")
    before = browser.evaluate(EXPLORER_REPORT_JS)
    if before["error"] or before["probabilities"] is None:
        return [f"the explorer did not load: {before['error']}"], float("nan")
    problems = []
    foreign = [f for f in before["files"] if not f.startswith(server)]
    if foreign:
        problems.append(f"the explorer fetched files from another site: {foreign}")
    for name in ("vit.onnx", "ort.wasm.min.js", "ort-wasm-simd-threaded.wasm"):
        if not any(f.endswith("/_static/explorer/" + name) for f in before["files"]):
            problems.append(f"{name} was not loaded from the site's _static/explorer/: {before['files']}")
    expected = before["first"]["predicted"]
    if before["predicted"] != expected:
        problems.append(f"first image: the page predicts class {before['predicted']}, PyTorch {expected}")
    largest = max(abs(a - b) for a, b in zip(before["probabilities"], before["first"]["probabilities"]))
    rollout_gap = max(abs(a - b) for a, b in zip(before["rollout"], before["first"]["rollout"]))
    if largest > 1e-4 or rollout_gap > 1e-4 or len(before["rollout"]) != len(before["first"]["rollout"]):
        problems.append(f"the page's probabilities or rollout differ from vitref's: {largest:.2e}, {rollout_gap:.2e}")
    if before["liveCount"] != 1 or not before["live"].startswith(f"Predicted: {before['classes'][expected]} ("):
        problems.append(f"the live region should announce the prediction: {before['live']!r}")
    browser.evaluate("document.getElementById('vit-explorer-image').focus()")
    for event in ("keyDown", "keyUp"):                       # the patch cursor one patch right, then Space
        browser.call("Input.dispatchKeyEvent", type=event, **EXPLORER_KEYS["ArrowRight"])
    press(browser, "Space")
    after = browser.evaluate("(async () => { const d = performance.now() + 10000;"
                             f" while (window.vitExplorer.updates <= {before['updates']} && performance.now() < d)"
                             " await new Promise(r => setTimeout(r, 20));"
                             " return {live: document.getElementById('vit-explorer-live').textContent,"
                             " map: document.getElementById('vit-explorer-map-0-0').toDataURL(),"
                             " cursor: document.getElementById('vit-explorer-cursor').textContent,"
                             " ms: window.vitExplorer.lastUpdateMs}; })()")
    if "1 patch occluded" not in after["live"] or after["live"] == before["live"]:
        problems.append(f"Space on a patch should occlude it and announce it: {before['live']!r} -> {after['live']!r}")
    if after["map"] == before["map"]:
        problems.append("occluding a patch did not change the attention map of block 1, head 1")
    if "row 1, column 2 (occluded)" not in after["cursor"]:
        problems.append(f"ArrowRight then Space should occlude the patch in row 1, column 2: {after['cursor']!r}")
    return problems, after["ms"]


@pytest.mark.slow   # builds the book (shared with the tests above), then Chromium
def test_live_vit_explorer_in_chromium(built_book, server, browser):
    """Chapter 7's live ViT: onnxruntime-web and the ONNX model are served by the site (sizes printed), the
    page's prediction and rollout equal PyTorch's, and a keyboard occlusion updates maps and live region."""
    folder = built_book / "_static" / "explorer"
    sizes = {path.name: path.stat().st_size for path in sorted(folder.iterdir())}
    print("_static/explorer:", ", ".join(f"{name} {size / 1e3:,.0f} kB" for name, size in sizes.items()))
    assert sizes.get("vit.onnx", 0) + sizes.get("explorer.json", 0) <= 2_000_000, sizes
    problems, milliseconds = explorer_problems(browser, server)
    print(f"explorer update after an occlusion (model + rollout + maps): {milliseconds:.0f} ms in Chromium "
          "(a loaded machine)")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- (e) keyboard: Tab order, drawing

EXPLORER_KEYS["ArrowLeft"] = dict(key="ArrowLeft", code="ArrowLeft", windowsVirtualKeyCode=37)


def press_explorer_key(browser: "Browser", name: str) -> None:
    for event in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=event, **EXPLORER_KEYS[name])


def tab_order(browser: "Browser", first_id: str, presses: int) -> list[str]:
    """Focus ``first_id``, then press Tab ``presses`` times: the id (or tag) of each element focused."""
    browser.evaluate(f"document.getElementById({json.dumps(first_id)}).focus()")
    order = [focused_id(browser)]
    for _ in range(presses):
        press(browser, "Tab")
        order.append(browser.evaluate("document.activeElement.id || document.activeElement.tagName"))
    return order


# The ViT explorer's controls in the order Tab must reach them (a radio group is one stop: the checked one).
VIT_TAB_ORDER = ["vit-explorer-choice", "vit-explorer-clear", "vit-explorer-restore", "vit-explorer-occlude",
                 "vit-explorer-image"]

WAIT_FOR_UPDATE_JS = ("(async () => {{ const d = performance.now() + 10000;"
                      " while (window.vitExplorer.updates <= {updates} && performance.now() < d)"
                      " await new Promise(r => setTimeout(r, 20));"
                      " const s = window.vitExplorer.state;"
                      " return {{updates: window.vitExplorer.updates, ink: s.pixels.reduce((a, b) => a + b, 0),"
                      " cursor: document.getElementById('vit-explorer-cursor').textContent,"
                      " live: document.getElementById('vit-explorer-live').textContent}}; }})()")


def vit_keyboard_problems(browser: "Browser", server: str) -> list[str]:
    """Tab from the top of the ViT explorer reaches its controls in order and then leaves it; in draw mode
    the arrows move the pen and Space paints a brush the model then sees."""
    browser.open(f"{server}/{EXPLORER_PAGE}.html")
    browser.evaluate(EXPLORER_REPORT_JS)
    problems = []
    order = tab_order(browser, VIT_TAB_ORDER[0], len(VIT_TAB_ORDER))
    if order[:-1] != VIT_TAB_ORDER or order[-1].startswith("vit-explorer"):
        problems.append(f"Tab order in the ViT explorer: expected {VIT_TAB_ORDER} then out, got {order}")
    updates = browser.evaluate("window.vitExplorer.updates")
    browser.evaluate("document.getElementById('vit-explorer-clear').click()")   # blank canvas, draw mode
    before = browser.evaluate(WAIT_FOR_UPDATE_JS.format(updates=updates))
    browser.evaluate("document.getElementById('vit-explorer-image').focus()")
    press_explorer_key(browser, "ArrowRight")
    press(browser, "Space")
    after = browser.evaluate(WAIT_FOR_UPDATE_JS.format(updates=before["updates"]))
    if before["ink"] != 0 or after["ink"] <= 0 or after["updates"] != before["updates"] + 1:
        problems.append(f"Space in draw mode should paint ink and run the model: {before} -> {after}")
    if "Pen: row 15, column 16" not in after["cursor"] or "Space erases" not in after["cursor"]:
        problems.append(f"ArrowRight should move the pen from the centre one pixel right: {after['cursor']!r}")
    return problems


TEXT_EXPLORER_PAGE = "book/08_decoder"

# The text explorer after its first run, the build's data and, with `text` typed, what the page computed.
TEXT_EXPLORER_JS = r"""
(async () => {
  const deadline = performance.now() + 60000;
  while (!window.textExplorer && performance.now() < deadline) await new Promise(r => setTimeout(r, 50));
  await window.textExplorer.ready;
  const api = window.textExplorer;
  if (api.error) return {error: api.error};
  const data = await (await fetch('../_static/explorer/charlm.json')).json();
  const check = data.checks.find(c => c.attention);
  await api.setText(check.text);
  return {error: null, data, check, top: api.topNext(check.text.length - 1),
          tokens: document.querySelectorAll('#text-explorer-tokens button').length,
          files: performance.getEntriesByType('resource').map(e => e.name)};
})()
"""

# Where a token button is on the screen (to move the mouse over it), and what the page shows now.
TEXT_STATE_JS = r"""
(() => {
  const api = window.textExplorer, s = api.state, d = s.data, rows = [];
  for (let l = 0; l < d.depth; l++) for (let h = 0; h < d.heads; h++) rows.push(api.attentionRow(l, h, s.query));
  const strip = document.getElementById('text-explorer-map-0-0');
  const context = strip.getContext('2d'), T = s.ids.length, cell = strip.width / T;
  const pixel = s => Array.from(context.getImageData(Math.floor((s + 0.5) * cell), 12, 1, 1).data.slice(0, 3));
  return {query: s.query, rows, live: document.getElementById('text-explorer-live').textContent,
          focused: document.activeElement.getAttribute('aria-label'), ms: api.lastDrawMs,
          blocked: s.query + 1 < T ? pixel(T - 1) : null, legend: !!document.querySelector('.text-explorer-legend'),
          message: document.getElementById('text-explorer-message').textContent};
})()
"""


def hover_token(browser: "Browser", index: int) -> None:
    box = browser.evaluate(f"(b => {{ const r = b.getBoundingClientRect(); b.scrollIntoView({{block: 'center'}});"
                           f" const q = b.getBoundingClientRect(); return [q.x + q.width / 2, q.y + q.height / 2]; }})"
                           f"(document.querySelectorAll('#text-explorer-tokens button')[{index}])")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])


def text_explorer_problems(browser: "Browser", server: str) -> tuple[list[str], float]:
    """Chapter 8's explorer: the page's next character and attention rows equal vitref's (in the build's
    JSON) for a typed text, later characters are drawn blocked, the arrow keys move the chosen character
    and update the live region, unknown characters are named, and Tab reaches every control in order.
    Returns (problems, the update time in ms after a hover)."""
    browser.open(f"{server}/{TEXT_EXPLORER_PAGE}.html")
    report = browser.evaluate(TEXT_EXPLORER_JS)
    if report["error"]:
        return [f"the text explorer did not load: {report['error']}"], float("nan")
    problems, check, data = [], report["check"], report["data"]
    foreign = [f for f in report["files"] if not f.startswith(server)]
    if foreign or not any(f.endswith("/_static/explorer/charlm.onnx") for f in report["files"]):
        problems.append(f"charlm.onnx should come from the site's _static/explorer/ only: {report['files']}")
    if report["tokens"] != len(check["text"]) or [t["id"] for t in report["top"]] != check["top"]:
        problems.append(f"after {check['text']!r} the page's next characters {report['top']} differ from vitref's "
                        f"{check['top']} (or not one button per character: {report['tokens']})")
    query, T = 3, len(check["text"])
    hover_token(browser, query)
    shown = browser.evaluate(TEXT_STATE_JS)
    expected = [check["attention"][((row * T) + query) * T:((row * T) + query + 1) * T]
                for row in range(data["depth"] * data["heads"])]
    gap = max(abs(a - b) for got, want in zip(shown["rows"], expected) for a, b in zip(got, want))
    if shown["query"] != query or gap > 1e-4 or len(shown["rows"]) != len(expected):
        problems.append(f"hovering character {query + 1}: query {shown['query']}, attention rows differ from "
                        f"vitref's by {gap:.2e}")
    if not shown["legend"] or shown["blocked"] is None or max(shown["blocked"]) > 200 or \
            max(shown["blocked"]) - min(shown["blocked"]) > 10:
        problems.append(f"a later character should be drawn blocked (grey hatching, with a legend): {shown}")
    browser.evaluate("document.querySelector('#text-explorer-tokens button[tabindex=\"0\"]').focus()")
    press_explorer_key(browser, "ArrowLeft")
    moved = browser.evaluate(TEXT_STATE_JS)
    if moved["query"] != query - 1 or not (moved["focused"] or "").startswith(f"character {query} of") or \
            moved["live"] == shown["live"] or not moved["live"].startswith(f"Character {query} of {T}"):
        problems.append(f"ArrowLeft should move the chosen character and the focus one left and update the live "
                        f"region: {shown['live']!r} -> {moved['live']!r}, focus {moved['focused']!r}")
    order = tab_order(browser, "text-explorer-input", 3)
    expected_order = ["text-explorer-input", "text-explorer-full", ""]
    chosen = browser.evaluate("document.querySelector('#text-explorer-tokens button[tabindex=\"0\"]') !== null")
    if order[:2] != expected_order[:2] or order[2] != "BUTTON" or not chosen or order[3].startswith("text-explorer"):
        problems.append(f"Tab order in the text explorer: the text, the checkbox, the chosen character, then out; "
                        f"got {order}")
    browser.evaluate("window.textExplorer.setText('caf\\u00e9 \\u20ac')")
    message = browser.evaluate(TEXT_STATE_JS)["message"]
    if "\u201c\u00e9\u201d" not in message or "\u201c\u20ac\u201d" not in message:
        problems.append(f"characters outside the vocabulary should be named: {message!r}")
    return problems, shown["ms"]


@pytest.mark.slow   # builds the book (shared with the tests above), then Chromium
def test_live_text_explorer_in_chromium(built_book, server, browser):
    """Chapter 8's live GPT: served by the site (all explorer files within 2 MB), its outputs equal vitref's,
    the causal mask shows, and it works by keyboard; the ViT explorer's Tab order and keyboard drawing."""
    folder = built_book / "_static" / "explorer"
    sizes = {path.name: path.stat().st_size for path in sorted(folder.iterdir())}
    models = ("vit.onnx", "explorer.json", "charlm.onnx", "charlm.json")
    print("explorer files:", ", ".join(f"{name} {sizes.get(name, 0) / 1e3:,.0f} kB" for name in models))
    assert all(name in sizes for name in models) and sum(sizes[name] for name in models) <= 2_000_000, sizes
    problems, milliseconds = text_explorer_problems(browser, server)
    print(f"text explorer update after a hover (8 maps + live region): {milliseconds:.1f} ms in Chromium "
          "(a loaded machine)")
    problems += vit_keyboard_problems(browser, server)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- (f) diagrams at any width

# window widths (CSS px) at which each architecture diagram must be the right drawing at a readable size:
# a phone, the widest window that gets the narrow drawing, the narrowest that gets the wide one, a
# tablet, a laptop and the width of the other tests
DIAGRAM_WINDOWS = (360, 390, 600, 601, 768, 1024, 1280)
MIN_LABEL_PX = 11          # tests/test_diagrams.py: the smallest label of every drawing, in CSS px

# Each diagram's <picture> on the open page: which drawing the browser chose (its <source> for narrow
# windows, its <img> otherwise), at what width it is shown, and whether it is the only image there.
DIAGRAM_REPORT_JS = r"""
(() => [...document.querySelectorAll('picture.vitref-diagram')].map(picture => {
  const img = picture.querySelector('img'), source = picture.querySelector('source');
  const rect = img.getBoundingClientRect();
  return {drawing: img.currentSrc === source.srcset ? 'narrow' : img.currentSrc === img.src ? 'wide' : 'none',
          shown: rect.width, natural: img.naturalWidth, images: picture.querySelectorAll('img').length,
          visible: getComputedStyle(img).display !== 'none' && rect.width > 0, alt: img.alt};
}))()
"""

# Scrolls the page's first diagram, with its caption, into view and returns its box in the viewport.
DIAGRAM_BOX_JS = r"""
(() => {
  const figure = document.querySelector('picture.vitref-diagram').closest('figure');
  figure.scrollIntoView({block: 'start', behavior: 'instant'});
  const rect = figure.getBoundingClientRect();
  return {x: rect.left + scrollX, y: rect.top + scrollY, width: rect.width,
          height: Math.min(rect.height, innerHeight - rect.top)};
})()
"""


def diagram_pages() -> dict[str, list[str]]:
    """{page: its diagrams' names in page order}, from tests/test_diagrams.py."""
    return {f"book/{chapter}": names for chapter, names in DIAGRAM_CHAPTERS.items()}


def smallest_label_natural_px(name: str, drawing: str) -> float:
    """The smallest label of a diagram's drawing, in CSS px, when the drawing is shown at its own size."""
    figure = diagrams.DIAGRAMS[name](narrow=drawing == "narrow")
    return min(t.get_fontsize() for t in figure.axes[0].texts if t.get_text().strip()) * 4 / 3


def diagram_problems(browser: "Browser", server: str, width: int, shots: Path | None = None) -> tuple[list, list]:
    """At a window ``width`` px wide: every diagram page shows, per diagram, one image, the drawing meant for
    that width, its smallest label at least MIN_LABEL_PX, and does not scroll sideways. Returns (problems,
    measurements); with ``shots``, a screenshot of each page's first diagram there."""
    expected = "narrow" if width <= 600 else "wide"
    assert diagrams.NARROW_MEDIA == "(max-width: 600px)", "update `expected` above with the breakpoint"
    browser.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1,
                 mobile=width < 768)
    problems, measured = [], []
    for page, names in diagram_pages().items():
        where = f"{page.split('/')[-1]} at {width} px"
        browser.open(f"{server}/{page}.html")
        browser.evaluate(PAGE_REPORT_JS)                     # waits for the images
        shown = browser.evaluate(DIAGRAM_REPORT_JS)
        if len(shown) != len(names):
            problems.append(f"{where}: {len(shown)} diagram pictures, expected {len(names)} ({names})")
            continue
        for name, picture in zip(names, shown):
            px = smallest_label_natural_px(name, picture["drawing"]) * picture["shown"] / max(picture["natural"], 1)
            measured.append((name, width, picture["drawing"], round(px, 1)))
            if picture["drawing"] != expected or picture["images"] != 1 or not picture["visible"]:
                problems.append(f"{where}: {name} shows {picture['drawing']!r} (expected {expected!r}) in "
                                f"{picture['images']} image(s), visible: {picture['visible']}")
            if px < MIN_LABEL_PX or picture["alt"] != diagrams.ALT_TEXT[name]:
                problems.append(f"{where}: {name}'s smallest label is {px:.1f} px, or its alt text is not ALT_TEXT")
        report = browser.evaluate(WIDTH_REPORT_JS)
        if report["scrollWidth"] > width:
            problems.append(f"{where}: {report['scrollWidth']} px wide, scrolls sideways; {report['widest']}")
        if shots is not None:
            clip = dict(browser.evaluate(DIAGRAM_BOX_JS), scale=1)
            data = browser.call("Page.captureScreenshot", format="png", clip=clip)
            (shots / f"{page.split('/')[-1]}-{width}.png").write_bytes(base64.b64decode(data["data"]))
    return problems, measured


@pytest.mark.slow   # builds the book (shared with the tests above), then Chromium
def test_diagrams_fit_the_window_in_chromium(built_book, server, browser, tmp_path):
    """Each architecture diagram is one <picture>: a phone gets the narrow drawing, a wide window the wide
    one, each with every label at least 11 px, and no page scrolls sideways (screenshots in tmp_path)."""
    problems, measured = [], []
    try:
        for width in DIAGRAM_WINDOWS:
            found, sizes = diagram_problems(browser, server, width, tmp_path if width in (390, 1280) else None)
            problems += found
            measured += sizes
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    print("smallest label (diagram, window px, drawing, px):", measured)
    assert len(measured) == len(DIAGRAM_WINDOWS) * sum(map(len, diagram_pages().values()))
    assert not problems, "\n".join(problems)
