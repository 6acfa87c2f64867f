"""The book's architecture figures (vitref.diagrams): each draws, wide and narrow, renders to SVG with
its labels as text, keeps its labels apart and inside the canvas, reads at the page's width and on a
phone, and is shown by its chapter in a cell whose input is hidden, as one <picture> of both drawings
whose image carries the alt text, under a caption."""
import ast
import base64
import html
import itertools
import json
import re
from pathlib import Path

import pytest

from vitref import diagrams

BOOK = Path(__file__).resolve().parents[1] / "book"

# labels each diagram must show, written as the chapters write the symbols
LABELS = {
    "scaled_dot_product_attention_diagram": ["MatMul  Q Kᵀ", "Scale  ÷ √d_k", "Mask (optional)", "Softmax over S",
                                             "scores (B, T, S)", "weights (B, T, S)", "(B, T, d_k)", "(B, S, d_k)",
                                             "(B, S, d_v)", "output (B, T, d_v)"],
    "multi_head_attention_diagram": ["Linear  W_Q", "Linear  W_K", "Linear  W_V", "split into h heads",
                                     "Q (B, h, T, d_k)", "K (B, h, S, d_k)", "V (B, h, S, d_k)",
                                     "scores (B, h, T, S)", "weights (B, h, T, S)", "merge heads",
                                     "(B, T, h·d_k) = (B, T, D)", "Linear  W_O", "output (B, T, D)"],
    "encoder_block_diagram": ["Post-LN", "(original Transformer)", "Pre-LN", "(ViT, GPT-2)", "Multi-head attention",
                              "LayerNorm", "MLP", "× L", "(B, T, D)"],
    "vit_diagram": ["image (B, C, H, W)", "flattened patches (B, N, P²·C)", "Linear projection E  (P²·C → D)",
                    "CLS", "+ positions", "E_pos", "(B, N+1, D)", "Transformer encoder: L pre-LN blocks", "LayerNorm",
                    "token 0: (B, D)", "Linear head", "class scores (B, classes)"],
    "decoder_block_diagram": ["Masked multi-head attention", "Multi-head cross-attention", "encoder output",
                              "(B, S, D)", "keys, values", "weights (B, h, T, S)", "MLP", "× L", "(B, T, D)"],
    "kv_cache_diagram": ["step t = 1", "step t = 4", "W_Q  W_K  W_V", "q4", "k4", "v4", "k1", "(B, h, t, d_k)",
                         "(B, h, 1, t)", "(B, 1, D)", "token 5"],
}

# where each figure is shown
CHAPTERS = {
    "03_attention": ["scaled_dot_product_attention_diagram"],
    "04_multihead_attention": ["multi_head_attention_diagram"],
    "05_blocks": ["encoder_block_diagram"],
    "07_vit": ["vit_diagram"],
    "08_decoder": ["decoder_block_diagram", "kv_cache_diagram"],
}


def svg_texts(svg: str) -> list:
    """The text of every <text> element, XML entities decoded."""
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def test_every_diagram_is_listed_tested_and_shown():
    assert set(LABELS) == set(diagrams.DIAGRAMS)
    assert sorted(itertools.chain(*CHAPTERS.values())) == sorted(diagrams.DIAGRAMS)


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_diagram_renders_to_svg_with_its_labels_as_text(name):
    svg = diagrams.to_svg(diagrams.DIAGRAMS[name]())
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    texts = svg_texts(svg)
    missing = [label for label in LABELS[name] if not any(label in t for t in texts)]
    assert not missing, f"{name}: labels missing from the SVG's text: {missing}"
    assert svg == diagrams.to_svg(diagrams.DIAGRAMS[name]()), "two renderings differ: the build would not be stable"


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_narrow_drawing_has_the_wide_ones_labels(name):
    """The phone's drawing says what the page's says: each label, perhaps wrapped onto two lines."""
    fig = diagrams.DIAGRAMS[name](narrow=True)
    texts = [one_line(t.get_text()) for t in fig.axes[0].texts]
    missing = [label for label in LABELS[name] if not any(one_line(label) in t for t in texts)]
    assert not missing, f"{name}: labels missing from the narrow drawing: {missing}"
    assert one_line(diagrams.to_svg(fig)) != one_line(diagrams.to_svg(diagrams.DIAGRAMS[name]()))


@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_labels_do_not_overlap_and_stay_on_the_canvas(name, narrow):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = diagrams.DIAGRAMS[name](narrow=narrow)
    renderer = FigureCanvasAgg(fig).get_renderer()
    page = fig.bbox
    boxes = []
    for text in fig.axes[0].texts:
        if not text.get_text().strip():
            continue
        box = text.get_window_extent(renderer)
        assert (box.x0 >= page.x0 - 1 and box.y0 >= page.y0 - 1 and box.x1 <= page.x1 + 1
                and box.y1 <= page.y1 + 1), f"{name}: {text.get_text()!r} is cut off by the edge of the figure"
        boxes.append((text.get_text(), box.shrunk(0.97, 0.9)))
    assert len(boxes) >= 10
    clashes = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]
    assert not clashes, f"{name}: labels drawn over each other: {clashes[:5]}"


# The book shows each diagram as an <img> of its SVG, whose size is the figure's: figwidth x 72 pt, and
# 1 pt = 4/3 CSS px. The theme's `img {max-width: 100%}` scales a wider one down to the text column, never
# a narrower one up. The column is about 720 px wide in a 1280-px window. The page shows the wide drawing
# in a window wider than 600 px (diagrams.NARROW_MEDIA), whose column is 601 - 2 x 16 (the article's
# padding) - 2 x 8 (the figure's) = 553 px or more, and the narrow one below, where the figure has no
# padding (accessible_book.css): a column of 328 px in a 360-px window, 358 px in a 390-px one.
# tests/test_book.py checks in Chromium which drawing is shown and at what size.
PAGE_COLUMN, NARROWEST_WIDE_COLUMN = 720, 601 - 2 * 16 - 2 * 8
PHONE_COLUMNS = (360 - 2 * 16, 390 - 2 * 16)
MIN_LABEL_PX = 11


def smallest_label_px(figure, column: float) -> tuple[float, str]:
    """(the size in CSS px at which ``figure``'s smallest label is shown in a column ``column`` px wide,
    that label)."""
    natural = figure.get_figwidth() * 72 * 4 / 3                   # the SVG's width in px
    scale = min(1.0, column / natural)
    labels = [t for ax in figure.axes for t in ax.texts] + list(figure.texts)
    return min((t.get_fontsize() * 4 / 3 * scale, t.get_text()) for t in labels if t.get_text().strip())


def test_smallest_label_px_is_the_arithmetic_of_the_page():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 2))                                   # 960 px: scaled by 720 / 960 in the page
    fig.text(0.5, 0.5, "tiny", fontsize=9)
    fig.text(0.5, 0.2, "large", fontsize=14)
    assert smallest_label_px(fig, 720) == (9 * 4 / 3 * 0.75, "tiny")
    fig.set_figwidth(5)                                             # 480 px: shown at its own size
    assert smallest_label_px(fig, 720) == (12.0, "tiny")


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_every_label_reads_at_the_pages_width_and_on_a_phone(name):
    wide, narrow = diagrams.DIAGRAMS[name](), diagrams.DIAGRAMS[name](narrow=True)
    sizes = {f"wide, {column}-px column": smallest_label_px(wide, column)
             for column in (PAGE_COLUMN, NARROWEST_WIDE_COLUMN)}
    sizes |= {f"narrow, {column}-px column": smallest_label_px(narrow, column) for column in PHONE_COLUMNS}
    print(f"{name}: smallest label " + ", ".join(f"{px:.1f} px ({where})" for where, (px, _) in sizes.items()))
    small = {where: f"{label!r} at {px:.1f} px" for where, (px, label) in sizes.items() if px < MIN_LABEL_PX}
    assert not small, (
        f"{name}: labels under {MIN_LABEL_PX} px: {small}: enlarge the font or narrow the drawing "
        f"(wide {wide.get_figwidth():.2f} in, narrow {narrow.get_figwidth():.2f} in), with fewer or wrapped labels")


@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
def test_kv_cache_diagram_draws_the_steps_it_is_asked_for(narrow):
    texts = svg_texts(diagrams.to_svg(diagrams.kv_cache_diagram(steps=3, narrow=narrow)))
    assert "step t = 3" in texts and "k3" in texts and "step t = 4" not in texts and "k4" not in texts


def data_uri_svg(uri: str) -> str:
    prefix = "data:image/svg+xml;base64,"
    assert uri.startswith(prefix), uri[:60]
    return base64.b64decode(uri[len(prefix):]).decode("utf-8")


def test_show_is_one_picture_of_both_drawings_with_one_alt_text():
    shown = diagrams.show(diagrams.vit_diagram)._repr_html_()
    sources = re.findall(r'<source media="([^"]+)" srcset="([^"]+)">', shown)
    images = re.findall(r'<img src="([^"]+)" alt="([^"]*)">', shown)
    assert shown.startswith("<picture") and shown.endswith("</picture>")
    assert len(sources) == 1 and len(images) == 1, "one narrow source and one <img>: a screen reader reads one alt"
    assert sources[0][0] == diagrams.NARROW_MEDIA == "(max-width: 600px)"
    assert data_uri_svg(sources[0][1]) == diagrams.to_svg(diagrams.vit_diagram(narrow=True))
    assert data_uri_svg(images[0][0]) == diagrams.to_svg(diagrams.vit_diagram())
    assert html.unescape(images[0][1]) == diagrams.ALT_TEXT["vit_diagram"]
    quoted = diagrams.ResponsiveDiagram("<svg/>", "<svg/>", 'a "quoted" <b>alt</b> & more')._repr_html_()
    assert 'alt="a &quot;quoted&quot; &lt;b&gt;alt&lt;/b&gt; &amp; more"' in quoted


def test_show_takes_only_the_modules_drawings():
    for wrong in (diagrams.to_svg, lambda: None, "vit_diagram"):
        with pytest.raises(ValueError, match="drawing functions"):
            diagrams.show(wrong)


@pytest.mark.parametrize("name", sorted(diagrams.DIAGRAMS))
def test_alt_text_describes_the_figure(name):
    alt = diagrams.ALT_TEXT[name]
    assert len(alt) >= 150 and "(B, " in alt, f"{name}: alt text must describe the figure: {alt!r}"
    assert not re.search(r"side by side|\bLeft\b|\bRight\b", alt), (
        f"{name}: the alt text serves both drawings (wide and narrow): no words for one layout")


@pytest.mark.slow      # seconds of CPU: make test runs it, the fast loop does not
def test_diagrams_module_is_not_graded_and_not_imported_by_vitref():
    import subprocess
    import sys

    import vitref

    assert "diagrams" not in vitref.GRADED_MODULES
    loaded = subprocess.run([sys.executable, "-c", "import sys, vitref; print('vitref.diagrams' in sys.modules)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "False"


def figure_cells(chapter: str) -> dict:
    """``{diagram function: cell}`` for the cells of a chapter that name ``diagrams.<function>``."""
    nb = json.loads((BOOK / f"{chapter}.ipynb").read_text())
    found = {}
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        for name in re.findall(r"diagrams\.(\w+_diagram)\b", source):
            assert cell["cell_type"] == "code", f"{chapter}: {name} is named in a markdown cell"
            found[name] = cell
    return found


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_chapter_shows_its_diagrams_with_alt_text_and_caption(chapter):
    cells = figure_cells(chapter)
    assert sorted(cells) == sorted(CHAPTERS[chapter]), f"{chapter} shows {sorted(cells)}"
    for name, cell in cells.items():
        meta = cell["metadata"]
        assert "remove-input" in meta.get("tags", []), f"{chapter}/{name}: tag the cell remove-input"
        assert "image" not in meta.get("mystnb", {}), (
            f"{chapter}/{name}: no mystnb.image options: the alt text is diagrams.ALT_TEXT, set by diagrams.show")
        caption = meta.get("mystnb", {}).get("figure", {}).get("caption", "")
        assert caption.strip(), f"{chapter}/{name}: no caption"
        assert not cell["outputs"]
        # the cell runs and its last expression is the picture that the build shows
        tree = ast.parse("".join(cell["source"]))
        assert isinstance(tree.body[-1], ast.Expr)
        namespace: dict = {}
        exec(compile(ast.Module(tree.body[:-1], type_ignores=[]), chapter, "exec"), namespace)  # noqa: S102 - the book's own cell
        shown = eval(compile(ast.Expression(tree.body[-1].value), chapter, "eval"), namespace)
        assert shown == diagrams.show(diagrams.DIAGRAMS[name])
