"""The book's architecture figures, drawn by code: boxes, arrows and labels on a matplotlib canvas.

Each ``*_diagram()`` function returns a :class:`matplotlib.figure.Figure` (made without pyplot, so
drawing one changes no global state); :func:`to_svg` renders it with its text kept as text, so the
labels can be searched, selected and read by a screen reader. Each draws two layouts: the page's
(wide) and, with ``narrow=True``, a phone's. The chapters show both with :func:`show`, in cells whose
input is hidden: one HTML ``<picture>`` from which the browser takes the drawing that fits the
window; the test ``tests/test_diagrams.py`` checks their labels.

Every label is set at :data:`SMALL` points or more. The book shows a drawing at its own size
(1 pt = 4/3 CSS px) or scaled down to the text column. A wide drawing is at most about 7.3 inches wide,
so every label is at least 11 px in the page's 720-px column; a narrow one is at most 4.5 inches wide,
so every label is at least 11 px on a 360-px phone (``tests/test_diagrams.py`` measures both, and
``tests/test_book.py`` in Chromium). Fewer, larger labels: a long one is wrapped, not shrunk.

Shapes are written with the chapters' symbols: ``B`` batch, ``T`` queries (tokens), ``S`` keys,
``D`` model width, ``h`` heads, ``d_k`` width per head, ``N`` patches, ``P`` patch size, ``C``
channels, ``L`` blocks. Every diagram flows from the bottom up, as in the Transformer and ViT
papers, and red lines are residual connections.

Not imported by ``import vitref`` and not graded (it is not in :data:`vitref.GRADED_MODULES`):
``from vitref import diagrams``.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from dataclasses import dataclass

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

# One colour per kind of box, the same in every diagram.
COLORS = {
    "attention": "#f6c28b",   # attention of any kind
    "norm": "#f7e6a1",        # LayerNorm
    "mlp": "#a8d1f0",         # feed-forward block, heads
    "linear": "#cfe4f6",      # linear maps (projections)
    "op": "#dcd0ef",          # matrix products, scaling, softmax, reshapes
    "mask": "#f2b8b5",        # masks
    "embed": "#bfe3b4",       # patches, tokens, embeddings
    "tensor": "#ffffff",      # data: inputs, outputs, caches
    "cache": "#e6e6e6",       # values read from a cache
    "group": "#f7f7f7",       # the background of a repeated block
}
# The ViT figure's patches, in reading order.
PATCH_SHADES = ["#7fa7c9", "#9dbdd6", "#bcd3e3", "#86b08b", "#a7c9a4", "#c8dfc3", "#d9a38b", "#e6bca7",
                "#f0d4c6"]
RESIDUAL = "#c0392b"          # residual connections
LINE = "#333333"              # data flow
SHAPE = "#555555"             # shape labels
FONT = 12                     # box labels
SMALL = 11                    # shape labels and notes: the smallest type of every diagram
TITLE = 13                    # a diagram's title


@dataclass
class Box:
    """A placed box: centre ``(cx, cy)``, width ``w`` and height ``h``, in inches."""

    cx: float
    cy: float
    w: float
    h: float

    @property
    def top(self) -> tuple[float, float]:
        return (self.cx, self.cy + self.h / 2)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.cx, self.cy - self.h / 2)

    @property
    def left(self) -> tuple[float, float]:
        return (self.cx - self.w / 2, self.cy)

    @property
    def right(self) -> tuple[float, float]:
        return (self.cx + self.w / 2, self.cy)

    def at(self, fx: float, fy: float) -> tuple[float, float]:
        """The point at fractions ``(fx, fy)`` of the box, from its bottom-left corner."""
        return (self.cx - self.w / 2 + fx * self.w, self.cy - self.h / 2 + fy * self.h)


class Canvas:
    """A figure of ``width`` x ``height`` inches whose coordinates are inches from the bottom left."""

    def __init__(self, width: float, height: float):
        self.figure = Figure(figsize=(width, height))
        self.ax = self.figure.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()

    def box(self, cx: float, cy: float, w: float, h: float, text: str = "", kind: str = "tensor",
            fontsize: float = FONT, rounded: bool = True, dashed: bool = False, bold: bool = False,
            edge: str = LINE) -> Box:
        """A box of one of :data:`COLORS`' kinds with ``text`` in its centre."""
        style = "round,pad=0,rounding_size=0.08" if rounded else "square,pad=0"
        self.ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle=style, fc=COLORS[kind],
                                         ec=edge, lw=1.0, ls="--" if dashed else "-", zorder=2))
        if text:
            self.text(cx, cy, text, fontsize=fontsize, weight="bold" if bold else "normal", zorder=3)
        return Box(cx, cy, w, h)

    def plus(self, cx: float, cy: float, r: float = 0.15) -> Box:
        """The circled plus of a residual connection."""
        self.ax.add_patch(Circle((cx, cy), r, fc="white", ec=LINE, lw=1.0, zorder=2))
        self.ax.plot([cx - 0.6 * r, cx + 0.6 * r], [cy, cy], color=LINE, lw=1.0, zorder=3)
        self.ax.plot([cx, cx], [cy - 0.6 * r, cy + 0.6 * r], color=LINE, lw=1.0, zorder=3)
        return Box(cx, cy, 2 * r, 2 * r)

    def arrow(self, start, end, color: str = LINE, lw: float = 1.2, label: str = "", side: str = "right",
              head: bool = True, offset: float = 0.08) -> None:
        """A straight arrow from ``start`` to ``end``; ``label`` (a shape) beside its middle."""
        self.ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>" if head else "-", mutation_scale=11,
                                          color=color, lw=lw, shrinkA=0, shrinkB=0, zorder=1))
        if label:
            mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
            self.shape(mx + (offset if side == "right" else -offset), my, label,
                       ha="left" if side == "right" else "right")

    def path(self, points, color: str = LINE, lw: float = 1.2, head: bool = True) -> None:
        """A polyline through ``points``, with an arrow head at the last one."""
        xs, ys = zip(*points[:-1])
        self.ax.plot(xs, ys, color=color, lw=lw, solid_capstyle="butt", zorder=1)
        self.arrow(points[-2], points[-1], color=color, lw=lw, head=head)

    def dot(self, x: float, y: float, color: str = RESIDUAL) -> None:
        """A branch point."""
        self.ax.add_patch(Circle((x, y), 0.04, fc=color, ec=color, zorder=3))

    def text(self, x: float, y: float, text: str, fontsize: float = FONT, ha: str = "center", va: str = "center",
             color: str = "black", **kwargs) -> None:
        """Text at ``(x, y)``."""
        kwargs.setdefault("zorder", 3)
        self.ax.text(x, y, text, fontsize=fontsize, ha=ha, va=va, color=color, **kwargs)

    def shape(self, x: float, y: float, text: str, ha: str = "left", va: str = "center") -> None:
        """A tensor's shape, in the small grey type of every shape label."""
        self.text(x, y, text, fontsize=SMALL, ha=ha, va=va, color=SHAPE, style="italic")

    def title(self, x: float, y: float, text: str, fontsize: float = TITLE) -> None:
        self.text(x, y, text, fontsize=fontsize, weight="bold")

    def residual(self, start, end, x: float) -> None:
        """A residual connection: from the branch point ``start`` on the trunk, out to ``x``, up, and
        into ``end`` (the left or right side of a circled plus)."""
        self.dot(*start)
        self.path([start, (x, start[1]), (x, end[1]), end], color=RESIDUAL)


def to_svg(figure: Figure) -> str:
    """The figure as SVG text, its labels kept as ``<text>`` elements and its ids reproducible."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "vitref"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _stack(c: Canvas, cx: float, y0: float, steps, residuals, width: float = 2.6, height: float = 0.42,
           gap: float = 0.26, shape: str = "(B, T, D)"):
    """A vertical block from ``y0`` up: ``steps`` are ``(text, kind)`` or ``"+"``; each residual
    ``(i, j)`` branches off the trunk just below step ``i`` and joins the ``"+"`` of step ``j``.
    The input arrow starts 0.55 below ``y0``, the output arrow ends 0.5 above the last step.
    Returns the boxes and the output arrow's end."""
    boxes, y = [], y0
    c.shape(cx + 0.08, y0 - 0.45, shape)
    prev_top = (cx, y0 - 0.55)
    for step in steps:
        if step == "+":
            r = 0.15
            box = c.plus(cx, y + r, r)
            y += 2 * r
        else:
            text, kind = step
            box = c.box(cx, y + height / 2, width, height, text, kind)
            y += height
        c.arrow(prev_top, box.bottom)
        boxes.append(box)
        prev_top = box.top
        y += gap
    out = (cx, prev_top[1] + 0.5)
    c.arrow(prev_top, out)
    c.shape(cx + 0.08, out[1] - 0.1, shape)
    side = cx - width / 2 - 0.3
    for i, j in residuals:
        below = boxes[i].bottom[1] - gap / 2
        c.residual((cx, below), boxes[j].left, side)
    return boxes, out


def _group(c: Canvas, left: float, bottom: float, right: float, top: float, label: str = "× L") -> None:
    """The dashed background of a block that is repeated, with its count in the bottom-right corner."""
    c.ax.add_patch(FancyBboxPatch((left, bottom), right - left, top - bottom,
                                  boxstyle="round,pad=0,rounding_size=0.12",
                                  fc=COLORS["group"], ec="#999999", lw=0.8, ls="--", zorder=0))
    c.text(right - 0.12, bottom + 0.2, label, fontsize=FONT + 1, ha="right", color="#666666")


def encoder_block_diagram(narrow: bool = False) -> Figure:
    """Chapter 5: the encoder block, post-LN (original Transformer) and pre-LN (ViT), side by side, or
    (``narrow``) post-LN above pre-LN."""
    c = Canvas(3.6, 11.9) if narrow else Canvas(6.5, 6.3)
    places = [(1.85, 6.75), (1.85, 1.15)] if narrow else [(1.7, 1.15), (4.85, 1.15)]
    post = [("Multi-head attention", "attention"), "+", ("LayerNorm", "norm"),
            ("MLP", "mlp"), "+", ("LayerNorm", "norm")]
    pre = [("LayerNorm", "norm"), ("Multi-head attention", "attention"), "+",
           ("LayerNorm", "norm"), ("MLP", "mlp"), "+"]
    blocks = [("Post-LN\n(original Transformer)", post, [(0, 1), (3, 4)]),
              ("Pre-LN\n(ViT, GPT-2)", pre, [(0, 2), (3, 5)])]
    for (cx, y0), (title, steps, residuals) in zip(places, blocks):
        boxes, out = _stack(c, cx, y0, steps, residuals, width=2.2)
        _group(c, cx - 1.55, y0 - 0.3, cx + 1.5, boxes[-1].top[1] + 0.13)
        c.title(cx, out[1] + 0.4, title)
    note = "red: residual connections" + ("\n" if narrow else " ") + "(the identity path)"
    c.text(c.figure.get_figwidth() / 2, 0.1, note, fontsize=SMALL, color=SHAPE, va="bottom")
    return c.figure


def scaled_dot_product_attention_diagram(narrow: bool = False) -> Figure:
    """Chapter 3: softmax(Q Kᵀ / √d_k + mask) V, with the shape after each step. ``narrow``: V's
    column moved in, for a phone's column (the same steps and labels)."""
    c = Canvas(4.5 if narrow else 5.6, 6.4)
    cx, w, h = 2.15 if narrow else 2.3, 2.5, 0.46  # the column of steps; inputs enter at +-0.6 of its centre
    q = c.box(cx - 0.6, 0.45, 1.0, 0.42, "Q", "tensor", bold=True)
    k = c.box(cx + 0.6, 0.45, 1.0, 0.42, "K", "tensor", bold=True)
    v = c.box(3.9 if narrow else 4.5, 0.45, 1.0, 0.42, "V", "tensor", bold=True)
    for box, shape in ((q, "(B, T, d_k)"), (k, "(B, S, d_k)"), (v, "(B, S, d_v)")):
        c.shape(box.cx, 0.08, shape, ha="center")
    mm1 = c.box(cx, 1.45, w, h, "MatMul  Q Kᵀ", "op")
    c.arrow(q.top, (q.cx, mm1.bottom[1]))
    c.arrow(k.top, (k.cx, mm1.bottom[1]))
    scale = c.box(cx, 2.35, w, h, "Scale  ÷ √d_k", "op")
    c.arrow(mm1.top, scale.bottom, label="scores (B, T, S)")
    mask = c.box(cx, 3.25, w, h, "Mask (optional)", "mask", dashed=True)
    c.arrow(scale.top, mask.bottom, label="(B, T, S)")
    c.text(mask.cx - w / 2 - 0.1, mask.cy, "blocked\nscores\n→ −∞", fontsize=SMALL, ha="right", color=SHAPE)
    soft = c.box(cx, 4.15, w, h, "Softmax over S", "op")
    c.arrow(mask.top, soft.bottom, label="(B, T, S)")
    mm2 = c.box(cx + 0.6, 5.15, w, h, "MatMul  weights · V", "op")
    c.arrow(soft.top, (soft.cx, mm2.bottom[1]), label="weights (B, T, S)", side="left")
    c.path([v.top, (v.cx, 4.7), (mm2.cx + 0.6, 4.7), (mm2.cx + 0.6, mm2.bottom[1])])
    c.arrow(mm2.top, (mm2.cx, 5.85), label="output (B, T, d_v)")
    c.text(0.15, 6.22, "Scaled dot-product attention", fontsize=TITLE, weight="bold", ha="left")
    return c.figure


def multi_head_attention_diagram(narrow: bool = False) -> Figure:
    """Chapter 4: multi-head attention's data flow, with the tensor shapes between the steps.
    ``narrow``: the three lanes closer together, one box splitting all three into heads."""
    if narrow:
        return _multi_head_attention_narrow()
    c = Canvas(7.1, 7.35)
    lanes = {"Q": 1.25, "K": 3.45, "V": 5.65}
    w, h, kind_in = 1.95, 0.44, {"Q": "(B, T, D)", "K": "(B, S, D)", "V": "(B, S, D)"}
    x_in = c.box(lanes["Q"], 0.42, 1.3, 0.42, "x", "tensor", bold=True)
    c.shape(x_in.right[0] + 0.1, x_in.cy, "(B, T, D)")
    ctx = c.box(4.55, 0.42, 1.3, 0.42, "context", "tensor", bold=True)
    c.shape(ctx.right[0] + 0.1, ctx.cy, "(B, S, D)")
    c.text(ctx.cx, 0.0, "self-attention: context = x, S = T", fontsize=SMALL, color=SHAPE, va="bottom")
    proj, split = {}, {}
    for name, x in lanes.items():
        proj[name] = c.box(x, 1.3, w, h, f"Linear  W_{name}", "linear")
        split[name] = c.box(x, 2.15, w, h, "split into h heads", "op")
        c.arrow(proj[name].top, split[name].bottom, label=kind_in[name])
    c.arrow(x_in.top, proj["Q"].bottom)
    for name in ("K", "V"):
        c.path([ctx.top, (ctx.cx, 0.86), (lanes[name], 0.86), proj[name].bottom])
    scores = c.box(2.35, 3.1, 3.0, h, "Q Kᵀ / √d_k", "op")
    c.arrow(split["Q"].top, (lanes["Q"], scores.bottom[1]), label="Q (B, h, T, d_k)")
    c.arrow(split["K"].top, (lanes["K"], scores.bottom[1]), label="K (B, h, S, d_k)")
    soft = c.box(2.35, 3.95, 3.0, h, "softmax over S (+ mask)", "op")
    c.arrow(scores.top, soft.bottom, label="scores (B, h, T, S)")
    mix = c.box(4.0, 4.8, 3.7, h, "weights · V", "op")
    c.arrow(soft.top, (soft.cx, mix.bottom[1]), label="weights (B, h, T, S)", side="left")
    c.path([split["V"].top, (lanes["V"], mix.bottom[1])])
    c.shape(lanes["V"] - 0.08, 3.95, "V (B, h, S, d_k)", ha="right")
    merge = c.box(4.0, 5.65, 2.2, h, "merge heads", "op")
    c.arrow(mix.top, merge.bottom, label="(B, h, T, d_k)")
    out = c.box(4.0, 6.5, 2.2, h, "Linear  W_O", "linear")
    c.arrow(merge.top, out.bottom, label="(B, T, h·d_k) = (B, T, D)")
    c.arrow(out.top, (out.cx, 7.3), label="output (B, T, D)")
    c.text(0.1, 7.05, "Multi-head attention", fontsize=TITLE, weight="bold", ha="left")
    c.text(0.1, 6.75, "h heads of width\nd_k = D / h,\nall at once", fontsize=SMALL, ha="left", va="top", color=SHAPE)
    return c.figure


def _multi_head_attention_narrow() -> Figure:
    """:func:`multi_head_attention_diagram` for a phone's column: lanes 1.5 in apart, the shapes of the
    projections given at the inputs (a linear map keeps them)."""
    c = Canvas(4.5, 8.0)
    lanes = {"Q": 0.75, "K": 2.25, "V": 3.75}
    w, h = 1.4, 0.44
    x_in = c.box(lanes["Q"], 0.8, 1.0, 0.42, "x", "tensor", bold=True)
    c.shape(x_in.cx, x_in.bottom[1] - 0.17, "(B, T, D)", ha="center")
    ctx = c.box(3.0, 0.8, 1.3, 0.42, "context", "tensor", bold=True)
    c.shape(ctx.cx, ctx.bottom[1] - 0.17, "(B, S, D)", ha="center")
    c.text(2.25, 0.0, "self-attention: context = x, S = T", fontsize=SMALL, color=SHAPE, va="bottom")
    proj = {name: c.box(x, 1.75, w, h, f"Linear  W_{name}", "linear") for name, x in lanes.items()}
    c.arrow(x_in.top, proj["Q"].bottom)
    for name in ("K", "V"):
        c.path([ctx.top, (ctx.cx, 1.27), (lanes[name], 1.27), proj[name].bottom])
    split = c.box(2.25, 2.6, 4.3, h, "split into h heads", "op")
    for x in lanes.values():
        c.arrow((x, proj["Q"].top[1]), (x, split.bottom[1]))
    scores = c.box(1.3, 3.75, 2.1, h, "Q Kᵀ / √d_k", "op")
    c.arrow((lanes["Q"], split.top[1]), (lanes["Q"], scores.bottom[1]), label="Q (B, h, T, d_k)")
    c.arrow((lanes["K"], split.top[1]), (lanes["K"], scores.bottom[1]), label="K (B, h, S, d_k)")
    soft = c.box(1.3, 4.75, 2.1, 0.6, "softmax over S\n(+ mask)", "op")
    c.arrow(scores.top, soft.bottom, label="scores (B, h, T, S)")
    mix = c.box(2.45, 5.75, 3.4, h, "weights · V", "op")
    c.arrow(soft.top, (soft.cx, mix.bottom[1]), label="weights (B, h, T, S)")
    c.arrow((lanes["V"], split.top[1]), (lanes["V"], mix.bottom[1]))
    c.shape(lanes["V"] - 0.08, scores.cy, "V\n(B, h, S, d_k)", ha="right")
    merge = c.box(2.45, 6.55, 2.2, h, "merge heads", "op")
    c.arrow(mix.top, merge.bottom, label="(B, h, T, d_k)")
    out = c.box(2.45, 7.35, 2.2, h, "Linear  W_O", "linear")
    c.arrow(merge.top, out.bottom, label="(B, T, h·d_k)\n= (B, T, D)")
    c.arrow(out.top, (out.cx, 7.95), label="output (B, T, D)")
    c.text(0.05, 7.85, "Multi-head\nattention", fontsize=TITLE, weight="bold", ha="left", va="top")
    c.text(0.05, 7.2, "h heads of width\nd_k = D / h,\nall at once", fontsize=SMALL, ha="left", va="top",
           color=SHAPE)
    return c.figure


def _image_grid(c: Canvas, g: int, side: float, x0: float, y0: float) -> None:
    """An image ``side`` inches square, its bottom-left corner at ``(x0, y0)``, cut into g x g patches
    shaded as :data:`PATCH_SHADES` in reading order."""
    cell = side / g
    for i in range(g):
        for j in range(g):
            c.ax.add_patch(Rectangle((x0 + j * cell, y0 + (g - 1 - i) * cell), cell, cell,
                                     fc=PATCH_SHADES[i * g + j], ec="white", lw=1.5, zorder=2))


def vit_diagram(narrow: bool = False) -> Figure:
    """Chapters 6 and 7: image -> patches -> linear projection -> class token and positions ->
    L encoder blocks -> LayerNorm -> head on the class token. ``narrow``: four patches, not nine."""
    if narrow:
        return _vit_narrow()
    c = Canvas(7.3, 6.6)
    # the image, cut into a 3 x 3 grid of patches (the figure's stand-in for N patches)
    g, side, x0, y0 = 3, 1.2, 0.1, 0.35
    shades = PATCH_SHADES
    _image_grid(c, g, side, x0, y0)
    c.shape(x0, y0 + side + 0.2, "image (B, C, H, W)")
    # one column per token: the class token's, then (a little apart) the N patches' in reading order
    pw, pitch, cls_x = 0.4, 0.5, 2.25
    patch_x = [cls_x + 0.75 + k * pitch for k in range(g * g)]
    token_x = [cls_x, *patch_x]
    left, right = cls_x - pw / 2, patch_x[-1] + pw / 2
    c.arrow((x0 + side + 0.05, 0.55), (patch_x[0] - pw / 2 - 0.05, 0.55))
    c.text((x0 + side + patch_x[0] - pw / 2) / 2, 1.0, "N = HW/P²\npatches", fontsize=SMALL, color=SHAPE)
    for k, x in enumerate(patch_x):
        c.ax.add_patch(Rectangle((x - pw / 2, 0.35), pw, 0.4, fc=shades[k], ec=LINE, lw=0.8, zorder=2))
        c.text(x, 0.55, str(k + 1), fontsize=SMALL)
    c.shape(patch_x[0] - pw / 2, 0.12, "flattened patches (B, N, P²·C)")
    proj = c.box((patch_x[0] + patch_x[-1]) / 2, 1.41, patch_x[-1] - patch_x[0] + pw + 0.1, 0.42,
                 "Linear projection E  (P²·C → D)", "linear")
    for x in patch_x:
        c.arrow((x, 0.75), (x, proj.bottom[1]), lw=0.9)
    # tokens, each plus its row of the position table
    ty, py = 2.45, 3.15
    _token_rows(c, token_x, pw, ty, py, proj.top[1])
    enc = c.box((left + right) / 2, 4.1, right - left, 0.7, "", "attention")
    _encoder_and_head(c, enc, token_x, pw, py, _WIDE_HEAD)
    return c.figure


@dataclass(frozen=True)
class _HeadLayout:
    """Where :func:`_encoder_and_head` writes its labels, one instance per width of :func:`vit_diagram`."""
    label_dy: tuple[float, float]     # the encoder's two lines of text, above and below its centre
    blocks: str                       # the encoder's second line: what one block does
    shape_between: bool               # the tokens' shape between the tokens and the encoder, else at its centre
    note_xy: tuple[float, float]      # right end of "patch outputs: not used" (wide: the last patch's right
    #                                   edge), its height above the encoder
    note: str
    norm_y: float                     # the heights of the LayerNorm's and the head's boxes
    head_y: float
    scores_dx: tuple[float, float]    # the scores' arrow length and the gap to their label
    scores: str
    title_xy: tuple[float, float]     # the figure's title, right-aligned


_WIDE_HEAD = _HeadLayout((0.12, -0.17), "(LayerNorm, attention, +, LayerNorm, MLP, +)", False,
                         (7.2, 0.33), "patch outputs: not used by the head", 5.2, 6.05, (0.5, 0.6),
                         "class scores (B, classes)", (7.15, 6.45))
_NARROW_HEAD = _HeadLayout((0.2, -0.18), "(LayerNorm, attention, +,\nLayerNorm, MLP, +)", True,
                           (4.45, 0.5), "patch outputs:\nnot used\nby the head", 5.75, 6.5, (0.35, 0.4),
                           "class scores\n(B, classes)", (4.45, 6.85))


def _encoder_and_head(c: Canvas, enc, token_x: list, pw: float, py: float, at: _HeadLayout) -> None:
    """The encoder box ``enc`` fed by every token (boxes ``pw`` wide, the position row at ``py``), then the
    head, which reads the class token only (the first of ``token_x``): LayerNorm, linear head, class scores."""
    cls_x, patch_x = token_x[0], token_x[1:]
    c.text(enc.cx, enc.cy + at.label_dy[0], "Transformer encoder: L pre-LN blocks", fontsize=FONT, weight="bold")
    c.text(enc.cx, enc.cy + at.label_dy[1], at.blocks, fontsize=SMALL)
    for x in token_x:
        c.arrow((x, py + 0.15), (x, enc.bottom[1]), lw=0.9)
    shape_y = (py + 0.15 + enc.bottom[1]) / 2 if at.shape_between else enc.cy
    c.shape(cls_x - pw / 2 - 0.12, shape_y, "(B, N+1, D)", ha="right")
    for x in patch_x:
        c.ax.plot([x, x], [enc.top[1], enc.top[1] + 0.16], color="#999999", lw=0.9, zorder=1)
    c.text(at.note_xy[0], enc.top[1] + at.note_xy[1], at.note, fontsize=SMALL, color="#666666", ha="right")
    norm = c.box(cls_x, at.norm_y, 1.5, 0.42, "LayerNorm", "norm")
    c.arrow((cls_x, enc.top[1]), norm.bottom)
    c.shape(cls_x - 0.1, (enc.top[1] + norm.bottom[1]) / 2, "token 0: (B, D)", ha="right")
    head = c.box(cls_x, at.head_y, 1.5, 0.42, "Linear head", "mlp")
    c.arrow(norm.top, head.bottom)
    c.arrow(head.right, (head.right[0] + at.scores_dx[0], head.cy))
    c.shape(head.right[0] + at.scores_dx[1], head.cy, at.scores)
    c.text(*at.title_xy, "Vision Transformer (ViT)", fontsize=TITLE, weight="bold", ha="right")


def _token_rows(c: Canvas, token_x: list, pw: float, ty: float, py: float, projection_top: float) -> None:
    """The ViT's token row (the class token first) at height ``ty``, each plus its row of the position
    table at ``py``, the patch tokens fed by the projection's top edge."""
    for k, x in enumerate(token_x):
        c.box(x, ty, pw, 0.38, "CLS" if k == 0 else "", "attention" if k == 0 else "embed", fontsize=SMALL,
              rounded=False)
        c.text(x, (ty + py) / 2 - 0.01, "+", fontsize=FONT)
        c.box(x, py, pw, 0.3, str(k), "norm", fontsize=SMALL, rounded=False)
        if k:
            c.arrow((x, projection_top), (x, ty - 0.19), lw=0.9)
    left = token_x[0] - pw / 2
    c.text(token_x[0], ty - 0.28, "learned\nclass token", fontsize=SMALL, color=SHAPE, va="top")
    c.text(left - 0.12, ty, "tokens", fontsize=SMALL, ha="right", color=SHAPE)
    c.text(left - 0.12, py, "+ positions\nE_pos", fontsize=SMALL, ha="right", color=SHAPE)


def _vit_narrow() -> Figure:
    """:func:`vit_diagram` for a phone's column: a 2 x 2 grid of patches, the long labels wrapped."""
    c = Canvas(4.5, 7.0)
    g, side, x0, y0 = 2, 0.9, 0.1, 0.35
    _image_grid(c, g, side, x0, y0)
    c.shape(x0, y0 + side + 0.35, "image\n(B, C, H, W)")
    pw, pitch, cls_x = 0.4, 0.55, 1.55
    patch_x = [cls_x + 0.85 + k * pitch for k in range(g * g)]
    token_x = [cls_x, *patch_x]
    c.arrow((x0 + side + 0.05, 0.55), (patch_x[0] - pw / 2 - 0.05, 0.55))
    c.text((x0 + side + patch_x[0] - pw / 2) / 2, 1.0, "N = HW/P²\npatches", fontsize=SMALL, color=SHAPE)
    for k, x in enumerate(patch_x):
        c.ax.add_patch(Rectangle((x - pw / 2, 0.35), pw, 0.4, fc=PATCH_SHADES[k], ec=LINE, lw=0.8, zorder=2))
        c.text(x, 0.55, str(k + 1), fontsize=SMALL)
    c.shape(x0 + side + 0.1, 0.12, "flattened patches (B, N, P²·C)")
    proj = c.box((patch_x[0] + patch_x[-1]) / 2, 1.5, 2.3, 0.6, "Linear projection E\n(P²·C → D)", "linear")
    for x in patch_x:
        c.arrow((x, 0.75), (x, proj.bottom[1]), lw=0.9)
    ty, py = 2.65, 3.35
    _token_rows(c, token_x, pw, ty, py, proj.top[1])
    enc = c.box(2.25, 4.5, 4.3, 0.85, "", "attention")
    _encoder_and_head(c, enc, token_x, pw, py, _NARROW_HEAD)
    return c.figure


def decoder_block_diagram(narrow: bool = False) -> Figure:
    """Chapter 8: a pre-LN decoder block, masked self-attention then cross-attention to the encoder.
    ``narrow``: narrower boxes, their long names on two lines."""
    c = Canvas(4.5, 7.95) if narrow else Canvas(7.0, 7.2)
    cx, enc_x, width, height = (1.55, 3.7, 1.9, 0.56) if narrow else (2.9, 6.0, 2.9, 0.4)
    wrap = "\n" if narrow else " "
    steps = [("LayerNorm", "norm"), (f"Masked multi-head{wrap}attention", "attention"), "+",
             ("LayerNorm", "norm"), (f"Multi-head{wrap}cross-attention", "attention"), "+",
             ("LayerNorm", "norm"), ("MLP", "mlp"), "+"]
    boxes, out = _stack(c, cx, 0.95, steps, [(0, 2), (3, 5), (6, 8)], width=width, height=height, gap=0.2)
    _group(c, cx - width / 2 - 0.5, 0.68, cx + width / 2 + 0.3, boxes[-1].top[1] + 0.12)
    cross = boxes[4]
    enc = c.box(enc_x, cross.cy - 0.8, 1.4 if narrow else 1.6, 0.5, f"encoder{wrap}output",
                "tensor", bold=True)
    c.shape(enc.cx, enc.bottom[1] - 0.16, "(B, S, D)", ha="center")
    c.path([enc.top, (enc.cx, cross.cy), cross.right])
    c.text((cross.right[0] + enc.cx) / 2 + 0.1, cross.cy + 0.18, "keys, values", fontsize=SMALL, color=SHAPE)
    c.shape(cross.right[0] + 0.1, cross.cy - 0.2 - 0.1 * narrow, f"weights{wrap}(B, h, T, S)")
    c.text(boxes[1].right[0] + 0.12, boxes[1].cy, "causal: token t sees\ntokens 0 … t only", fontsize=SMALL,
           ha="left", color=SHAPE)
    c.title(cx, out[1] + 0.3, "Decoder block (pre-LN)")
    return c.figure


KV_PITCH, KV_FIRST, KV_ROW = 1.5, 1.95, 5.3   # steps' distance; the first step's K column; a row's height


def kv_cache_diagram(steps: int = 4, narrow: bool = False) -> Figure:
    """Chapter 8: generation with a KV cache. Each step computes the new token's query, key and value,
    appends the key and value to the cache, and attends from one query over all cached keys. The steps
    side by side, or (``narrow``) two to a row, the first row on top."""
    per_row = 2 if narrow else steps
    rows = -(-steps // per_row)
    lift = 0.2 if narrow else 0.0                   # room for the three-line legend below
    c = Canvas(KV_FIRST + KV_PITCH * (per_row - 1) + 0.85, 5.9 + lift + KV_ROW * (rows - 1))
    row_dy = [lift + KV_ROW * (rows - 1 - r) for r in range(rows)]
    for s in range(steps):
        _kv_step(c, s, KV_FIRST + KV_PITCH * (s % per_row), row_dy[s // per_row], steps)
    for dy in row_dy:
        _kv_row_labels(c, dy, steps)
    legend = ("grey: keys and values read\nfrom the cache (earlier steps)\n" if narrow
              else "grey: keys and values read from the cache (earlier steps)\n")
    c.text(c.figure.get_figwidth() / 2, 0.04, legend + "orange: computed at this step", fontsize=SMALL,
           color=SHAPE, va="bottom")
    return c.figure


def _kv_step(c: Canvas, s: int, x: float, dy: float, steps: int) -> None:
    """Step ``s`` (from 0) of :func:`kv_cache_diagram`: its K column at ``x``, raised by ``dy``."""
    cw, ch, base = 0.36, 0.28, 2.1 + dy             # a cache row's width and height; the caches' bottom
    t, mid = s + 1, x + 0.1                         # V at x + 0.44, the query at x - 0.5
    c.title(mid, 5.6 + dy, f"step t = {t}", fontsize=FONT)
    tok = c.box(mid, 0.75 + dy, 1.1, 0.38, f"token {t}", "embed")
    proj = c.box(mid, 1.5 + dy, 1.3, 0.38, "W_Q  W_K  W_V", "linear", fontsize=SMALL)
    c.arrow(tok.top, proj.bottom)
    top = base + steps * ch                          # the caches hang from here, the newest row lowest
    for col, name in ((x, "K"), (x + 0.44, "V")):
        for i in range(t):
            c.box(col, top - (i + 0.5) * ch, cw, ch, f"{name.lower()}{i + 1}",
                  "attention" if i == t - 1 else "cache", fontsize=SMALL, rounded=False)
        c.arrow((col, proj.top[1]), (col, top - t * ch), lw=0.9)
        c.arrow((col, top), (col, 3.6 + dy), lw=0.9)
    q = c.box(x - 0.5, top - (t - 0.5) * ch, cw, ch, f"q{t}", "attention", fontsize=SMALL, rounded=False)
    c.arrow((q.cx, proj.top[1]), q.bottom, lw=0.9)
    att = c.box(mid, 3.85 + dy, 1.3, 0.5, "attend over\nt keys", "op", fontsize=SMALL)
    c.arrow(q.top, (q.cx, att.bottom[1]), lw=0.9)
    out = c.box(mid, 4.85 + dy, 1.1, 0.38, f"token {t + 1}", "embed")
    c.arrow(att.top, out.bottom)


def _kv_row_labels(c: Canvas, dy: float, steps: int) -> None:
    """The names of a row of :func:`kv_cache_diagram`'s steps, at its left."""
    middle = 2.1 + steps * 0.28 / 2                  # the caches' middle
    for y, text in [(0.75, "new token\n(B, 1, D)"), (1.5, "projections"),
                    (middle, "query, and\nthe cache\nK, V:\n(B, h, t, d_k)"),
                    (3.85, "scores\n(B, h, 1, t)"), (4.85, "next token")]:
        c.text(0.08, y + dy, text, fontsize=SMALL, ha="left", color=SHAPE)


# What each diagram shows, in words: the alt text of its image in the book, the same for both drawings.
ALT_TEXT = {
    "scaled_dot_product_attention_diagram": (
        "Flow chart of scaled dot-product attention, read from the bottom up: Q of shape (B, T, d_k) and K "
        "of shape (B, S, d_k) enter a matrix product Q times K transposed, giving scores of shape (B, T, "
        "S); the scores are divided by the square root of d_k, an optional mask sets blocked scores to "
        "minus infinity, and a softmax over S turns them into weights of shape (B, T, S); a second matrix "
        "product of the weights with V, of shape (B, S, d_v), gives the output of shape (B, T, d_v)."
    ),
    "multi_head_attention_diagram": (
        "Flow chart of multi-head attention, read from the bottom up: the input x of shape (B, T, D) goes "
        "through the linear map W_Q, and the context of shape (B, S, D), which is x itself in "
        "self-attention, through W_K and W_V; each result is split into h heads, giving Q (B, h, T, d_k), K "
        "(B, h, S, d_k) and V (B, h, S, d_k); Q times K transposed over the square root of d_k gives scores "
        "(B, h, T, S); a softmax over S, with an optional mask, gives the weights; the weights times V give "
        "(B, h, T, d_k); merging the heads gives (B, T, h times d_k), which is (B, T, D); the linear map "
        "W_O gives the output (B, T, D)."
    ),
    "encoder_block_diagram": (
        "Two encoder blocks, read from the bottom up, each repeated L times, with input and output of shape "
        "(B, T, D). First, post-LN as in the original Transformer: multi-head attention, add the residual, "
        "LayerNorm, MLP, add the residual, LayerNorm; both LayerNorms sit on the main path. Then pre-LN as "
        "in ViT and GPT-2: LayerNorm, multi-head attention, add the residual, LayerNorm, MLP, add the "
        "residual; the red residual lines bypass the LayerNorms, so the identity path runs uninterrupted "
        "from input to output."
    ),
    "vit_diagram": (
        "The Vision Transformer, read from the bottom up: an image of shape (B, C, H, W) is cut into N = "
        "HW/P² patches, nine or four in the drawing; the flattened patches (B, N, P²·C) go through one "
        "shared linear projection E to width D; a learned class token is put in front, and each of the N+1 "
        "tokens is added to its row, 0 to N, of the position table E_pos, giving (B, N+1, D); the "
        "Transformer encoder of L pre-LN blocks keeps that shape; only the class token's output, token 0 of "
        "shape (B, D), goes through a final LayerNorm and a linear head to the class scores (B, classes); "
        "the patch tokens' outputs are not used by the classifier."
    ),
    "decoder_block_diagram": (
        "A pre-LN decoder block, read from the bottom up and repeated L times, with input and output of "
        "shape (B, T, D): LayerNorm, masked multi-head self-attention (causal: token t sees tokens 0 to t "
        "only), add the residual; LayerNorm, multi-head cross-attention whose queries come from the decoder "
        "and whose keys and values come from the encoder output of shape (B, S, D), with weights (B, h, T, "
        "S), add the residual; LayerNorm, MLP, add the residual. Red lines are the three residual "
        "connections."
    ),
    "kv_cache_diagram": (
        "Four generation steps with a KV cache. At step t one new token of shape (B, 1, D) goes through "
        "W_Q, W_K and W_V, giving one query q_t, one key k_t and one value v_t; k_t and v_t are appended to "
        "the cache, which then holds t keys and t values of shape (B, h, t, d_k) each, drawn in grey where "
        "they were computed at earlier steps and read back, in orange where computed at this step. The "
        "query attends over the t keys, scores of shape (B, h, 1, t), and the result predicts token t+1, "
        "the input of the next step."
    ),
}


# Every diagram, by name: what the chapters and tests/test_diagrams.py use.
DIAGRAMS = {
    "scaled_dot_product_attention_diagram": scaled_dot_product_attention_diagram,
    "multi_head_attention_diagram": multi_head_attention_diagram,
    "encoder_block_diagram": encoder_block_diagram,
    "vit_diagram": vit_diagram,
    "decoder_block_diagram": decoder_block_diagram,
    "kv_cache_diagram": kv_cache_diagram,
}


# The page shows a diagram's narrow drawing in a window at most this wide (CSS px), its wide one above.
# The narrow drawings are at most 4.5 in (432 px) wide, so their labels (11 pt and up) keep at least 11 px
# in the 328-px column of a 360-px phone; the wide ones, at most 7.3 in (701 px), keep 11 px in a column
# of 525 px or more, which a window wider than 600 px has (tests/test_book.py measures both in Chromium).
NARROW_MEDIA = "(max-width: 600px)"


def _data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


@dataclass(frozen=True)
class ResponsiveDiagram:
    """A diagram drawn twice, for the page's column and for a phone's, shown as one HTML ``<picture>``:
    the browser picks the drawing by the window's width (:data:`NARROW_MEDIA`), with no script, and
    the one ``<img>`` carries the alt text, so a screen reader reads it once."""

    wide_svg: str
    narrow_svg: str
    alt: str

    def _repr_html_(self) -> str:
        return (f'<picture class="vitref-diagram"><source media="{NARROW_MEDIA}" '
                f'srcset="{_data_uri(self.narrow_svg)}">'
                f'<img src="{_data_uri(self.wide_svg)}" alt="{html.escape(self.alt, quote=True)}"></picture>')


def show(draw: Callable[..., Figure]) -> ResponsiveDiagram:
    """What a chapter's figure cell ends with: ``draw`` (one of :data:`DIAGRAMS`) drawn wide and narrow,
    with its :data:`ALT_TEXT`."""
    name = getattr(draw, "__name__", "")
    if DIAGRAMS.get(name) is not draw:
        raise ValueError(f"show() takes one of vitref.diagrams' drawing functions ({', '.join(DIAGRAMS)}); "
                         f"got {draw!r}")
    return ResponsiveDiagram(to_svg(draw()), to_svg(draw(narrow=True)), ALT_TEXT[name])


__all__ = ["ALT_TEXT", "Box", "Canvas", "COLORS", "DIAGRAMS", "NARROW_MEDIA", "ResponsiveDiagram", "show", "to_svg",
           *DIAGRAMS]
