"""Teaching drawings the chapters open with: the map of the ViT and the encoder block.

:func:`draw_vit_map` draws the whole Vision Transformer as the ViT paper describes it
(Dosovitskiy et al. 2021, Section 3.1 and Figure 1), in a drawing of its own: image, patches,
the linear projection, the class token and the position embedding, ``L`` encoder blocks, and
the head that reads the class token. Each chapter opens with it, the part it builds in colour
and the rest in grey. :func:`draw_encoder_block` draws chapter 4's pre-norm block with its
shapes and the names of the modules of :class:`vit_tutorial.encoder.EncoderBlock`.

Both draw with matplotlib patches into a figure 7 in wide (a ~690-px column at 100 dpi), no
text under 9 pt; matplotlib is imported inside them, so the package imports without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PARTS", "HIGHLIGHT", "GREY", "draw_vit_map", "draw_encoder_block", "draw_swin_map"]
__all__ += ["Painter", "drawing_axes"]  # chapter 11's map paints with them (figures_modern)

#: The parts :func:`draw_vit_map` can highlight, and the chapter that builds each.
PARTS: dict[str, str] = {
    "attention": "chapter 1: attention",
    "patches": "chapter 2: patch embedding and class token",
    "positions": "chapter 3: position embedding",
    "block": "chapter 4: the encoder block",
    "model": "chapter 5: the whole model",
}
#: Face and edge colour of a highlighted part, and of the parts in grey.
HIGHLIGHT = ("#f5a54a", "#9c4a00")
GREY = ("#e8e8e8", "#a6a6a6")
# With nothing highlighted, each part in its chapter's colour (the head: chapter 5's).
_COLOURS = {
    "attention": ("#bcd5f0", "#2f5f99"),
    "patches": ("#f7d3a6", "#a85c14"),
    "positions": ("#cbe8c4", "#2f7a2c"),
    "block": ("#dccdee", "#5e3f8c"),
    "model": ("#f4c7c9", "#9c3338"),
}
_INK, _FADED, _ARROW = "#1a1a1a", "#6e6e6e", "#595959"
_FONT, _SMALL = 10, 9
_MAP_SIZE, _BLOCK_SIZE, _SWIN_SIZE = (7.0, 4.4), (7.0, 2.9), (7.0, 3.4)  # inches


def drawing_axes(ax: Any, size: tuple[float, float]) -> tuple[Any, Any]:
    """The figure and axes to draw into: ``ax``'s, or a new pyplot figure of ``size`` inches.

    The axes' data units are inches of the default size (x from 0 to ``size[0]``)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=size, dpi=100)
        fig.subplots_adjust(0, 0, 1, 1)
    ax.set(xlim=(0, size[0]), ylim=(0, size[1]), aspect="equal")
    ax.axis("off")
    return ax.figure, ax


class Painter:
    """Draws boxes, arrows and labels into ``ax``, coloured by the part they belong to."""

    def __init__(self, ax: Any, highlight: str | None) -> None:
        self.ax, self.highlight = ax, highlight

    def colours(self, parts: tuple[str, ...]) -> tuple[str, str, str]:
        """Face, edge and text colour of an element of ``parts``."""
        if self.highlight is None:
            return (*_COLOURS[parts[0]], _INK)
        if self.highlight == "model" or self.highlight in parts:
            return (*HIGHLIGHT, _INK)
        return (*GREY, _FADED)

    def box(self, x: float, y: float, w: float, h: float, parts: tuple[str, ...],
            text: str = "", size: float = _FONT, rounded: bool = True) -> None:  # fmt: skip
        """A box with lower-left corner ``(x, y)``, centred ``text`` in it; gid ``map:parts``."""
        from matplotlib.patches import FancyBboxPatch

        face, edge, ink = self.colours(parts)
        style = "round,pad=0,rounding_size=0.05" if rounded else "square,pad=0"
        patch = FancyBboxPatch((x, y), w, h, boxstyle=style, facecolor=face, edgecolor=edge)
        patch.set_gid("map:" + ",".join(parts))
        self.ax.add_patch(patch)
        if text:
            self.ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size,
                         color=ink)  # fmt: skip

    def plus(self, x: float, y: float, parts: tuple[str, ...]) -> None:
        """A residual sum: a circle with a plus sign, centred at ``(x, y)``."""
        from matplotlib.patches import Circle

        face, edge, ink = self.colours(parts)
        patch = Circle((x, y), 0.1, facecolor=face, edgecolor=edge)
        patch.set_gid("map:" + ",".join(parts))
        self.ax.add_patch(patch)
        self.ax.text(x, y, "+", ha="center", va="center", fontsize=_FONT, color=ink)

    def arrow(self, start: tuple[float, float], end: tuple[float, float], **style: Any) -> None:
        """An arrow (or, with ``arrowstyle="-"``, a line) from ``start`` to ``end``."""
        from matplotlib.patches import FancyArrowPatch

        style = {"arrowstyle": "-|>", "mutation_scale": 9, "color": _ARROW, "lw": 1.0} | style
        self.ax.add_patch(FancyArrowPatch(start, end, shrinkA=0, shrinkB=0, **style))

    def path(self, points: list[tuple[float, float]]) -> None:
        """A polyline through ``points`` whose last segment ends in an arrow head."""
        for a, b in zip(points[:-2], points[1:-1]):
            self.arrow(a, b, arrowstyle="-")
        self.arrow(points[-2], points[-1])

    def label(self, x: float, y: float, text: str, parts: tuple[str, ...] = (), **kw: Any) -> None:
        """Text at ``(x, y)``, faded when its ``parts`` are greyed out."""
        ink = self.colours(parts)[2] if parts else _INK
        self.ax.text(x, y, text, fontsize=kw.pop("fontsize", _SMALL), color=ink, **kw)


def _check_highlight(highlight: str | None) -> None:
    if highlight is not None and highlight not in PARTS:
        names = ", ".join(repr(name) for name in PARTS)
        raise ValueError(f"highlight must be None or one of {names}; got {highlight!r}")


def _draw_inputs(p: Painter) -> None:
    """Image, its nine patches in a row, and the linear projection (chapter 2)."""
    for i in range(3):  # the image: a 3×3 grid of patches
        for j in range(3):
            p.box(0.15 + 0.2 * j, 0.35 + 0.2 * (2 - i), 0.2, 0.2, ("patches",), rounded=False)
    p.label(0.45, 0.18, "image", ("patches",), ha="center", va="center")
    p.arrow((0.8, 0.65), (1.15, 0.65))
    for i in range(9):  # the patches, flattened into a sequence
        p.box(1.25 + 0.3 * i, 0.55, 0.2, 0.2, ("patches",), rounded=False)
    p.label(2.6, 0.35, "N patches, each flattened", ("patches",), ha="center", va="center")
    p.box(1.15, 0.95, 2.8, 0.32, ("patches",), "linear projection (patch embedding)")
    for i in range(9):
        p.arrow((1.35 + 0.3 * i, 0.75), (1.35 + 0.3 * i, 0.95), mutation_scale=6)


def _draw_tokens(p: Painter) -> None:
    """The class token and N tokens, with a position embedding added to each (chapters 2, 3)."""
    for i in range(10):  # token 0 is the class token
        x = 1.05 + 0.3 * i
        if i:
            p.arrow((x, 1.27), (x, 1.45), mutation_scale=6)
        p.box(x - 0.1, 1.45, 0.2, 0.2, ("patches",), "*" if i == 0 else "")
        p.box(x - 0.12, 1.72, 0.24, 0.24, ("positions",), str(i), size=_SMALL)
        p.arrow((x, 1.96), (x, 2.2), mutation_scale=6)
    p.label(0.05, 1.55, "class token", ("patches",), va="center")
    p.label(0.05, 1.84, "+ position", ("positions",), va="center")


def _draw_stack_and_head(p: Painter) -> None:
    """The L encoder blocks, and the head reading the class token's output (chapters 4, 5)."""
    p.box(0.9, 2.2, 3.05, 0.5, ("block",), "Transformer encoder: L × encoder block")
    p.arrow((1.05, 2.7), (1.05, 3.0))
    p.box(0.6, 3.0, 1.5, 0.34, ("model",), "MLP head")
    p.arrow((2.1, 3.17), (2.55, 3.17))
    p.label(2.62, 3.17, "class", ("model",), va="center", fontsize=_FONT)
    p.label(0.05, 2.85, "class token's output", ("model",), va="center")


def _draw_block_detail(p: Painter) -> None:
    """One pre-norm encoder block, zoomed out of the encoder (chapter 4; attention: ch. 1)."""
    block, attention = ("block",), ("attention", "block")
    p.box(4.55, 0.45, 2.35, 3.35, block)
    frame = p.ax.patches[-1]
    frame.set(facecolor="none", gid="frame:block")  # an outline, not a part's box
    p.label(5.72, 3.92, "encoder block (× L)", block, ha="center", va="center", fontsize=_FONT)
    for corner_y, frame_y in ((2.2, 0.45), (2.7, 3.8)):  # the zoom, from the stack
        p.arrow((3.95, corner_y), (4.55, frame_y), arrowstyle="-", linestyle=":")
    spine = 5.45
    p.arrow((spine, 0.15), (spine, 0.75))
    p.label(spine + 0.08, 0.22, "(B, T, D)", block, va="center")
    p.box(4.8, 0.75, 1.3, 0.28, block, "LayerNorm")
    p.arrow((spine, 1.03), (spine, 1.2))
    p.box(4.8, 1.2, 1.3, 0.42, attention, "multi-head\nattention")
    p.arrow((spine, 1.62), (spine, 1.8))
    p.plus(spine, 1.9, block)
    p.arrow((spine, 2.0), (spine, 2.15))
    p.box(4.8, 2.15, 1.3, 0.28, block, "LayerNorm")
    p.arrow((spine, 2.43), (spine, 2.6))
    p.box(4.8, 2.6, 1.3, 0.34, block, "MLP")
    p.arrow((spine, 2.94), (spine, 3.1))
    p.plus(spine, 3.2, block)
    p.arrow((spine, 3.3), (spine, 3.8))
    p.path([(spine, 0.6), (6.55, 0.6), (6.55, 1.9), (spine + 0.1, 1.9)])  # the residuals
    p.path([(spine, 2.07), (6.55, 2.07), (6.55, 3.2), (spine + 0.1, 3.2)])


def _key(patch: Any, colours: tuple[str, str], label: str) -> Any:
    return patch(facecolor=colours[0], edgecolor=colours[1], label=label)


def _legend(p: Painter) -> None:
    """The key at the top: the chapter that builds each colour, or what is highlighted."""
    from matplotlib.patches import Patch

    if p.highlight is None:
        names = {"attention": "1 attention", "patches": "2 patches, class token",
                 "positions": "3 positions", "block": "4 block", "model": "5 head, model"}  # fmt: skip
        handles = [_key(Patch, _COLOURS[part], name) for part, name in names.items()]
    else:
        handles = [_key(Patch, HIGHLIGHT, PARTS[p.highlight]), _key(Patch, GREY, "the rest")]
    p.ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, 1.0), ncol=5,
                fontsize=_SMALL, frameon=False,
                handlelength=1.2, columnspacing=0.8, handletextpad=0.4, borderaxespad=0.1)  # fmt: skip


def draw_vit_map(highlight: str | None = None, ax: Any = None) -> Any:
    """The map of the Vision Transformer, the part a chapter builds highlighted.

    Image → patches → linear projection (patch embedding) → class token prepended and position
    embedding added → ``L`` pre-norm encoder blocks (LayerNorm, multi-head attention, +,
    LayerNorm, MLP, +) → the class token's output → MLP head → class: the model of the ViT
    paper's Section 3.1, drawn afresh. On the right, one encoder block zoomed out of the stack.

    Args:
        highlight: ``None`` colours each part by the chapter that builds it (the key says
            which); one of :data:`PARTS` (``"attention"``, ``"patches"``, ``"positions"``,
            ``"block"``, ``"model"``) draws that part in the colour :data:`HIGHLIGHT` and the
            rest in grey (``"model"``: all of it).
        ax: the axes to draw into, about 7 × 4.4 inches; ``None`` makes a new pyplot figure.

    Returns:
        The matplotlib figure (show it with ``plt.show()``).

    Raises:
        ValueError: ``highlight`` is none of the names of :data:`PARTS`.

    Example:
        In a notebook cell, ``draw_vit_map(highlight="block"); plt.show()`` (matplotlib is
        imported inside: it is in the ``book`` extra, not a runtime dependency). A wrong name
        is refused before anything is drawn:

        >>> draw_vit_map(highlight="head")
        Traceback (most recent call last):
        ...
        ValueError: highlight must be None or one of 'attention', 'patches', 'positions', \
'block', 'model'; got 'head'
    """
    _check_highlight(highlight)
    fig, ax = drawing_axes(ax, _MAP_SIZE)
    p = Painter(ax, highlight)
    _draw_inputs(p)
    _draw_tokens(p)
    _draw_stack_and_head(p)
    _draw_block_detail(p)
    _legend(p)
    return fig


def draw_encoder_block(ax: Any = None) -> Any:
    """Chapter 4's pre-norm encoder block, with its shapes and the package's module names.

    ``x`` ``(B, T, D)`` → ``norm1`` (LayerNorm) → ``attn`` (multi-head attention) → + ``x``
    (``drop_path1``, then the residual sum) → ``norm2`` → ``mlp`` (Linear D→rD, GELU, Linear
    rD→D) → + (``drop_path2``), the names of :class:`vit_tutorial.encoder.EncoderBlock`.

    Args:
        ax: the axes to draw into, about 7 × 2.9 inches; ``None`` makes a new pyplot figure.

    Returns:
        The matplotlib figure (show it with ``plt.show()``).

    Example:
        In a notebook cell, ``draw_encoder_block(); plt.show()``.
    """
    fig, ax = drawing_axes(ax, _BLOCK_SIZE)
    p = Painter(ax, "block")
    _draw_block_row(p)
    _draw_block_notes(p)
    return fig


def _draw_block_row(p: Painter) -> None:
    """The block left to right: boxes, sums, the two residual paths above them."""
    y, h = 1.55, 0.5
    p.label(0.05, y, "x", fontsize=_FONT, va="center")
    p.arrow((0.2, y), (0.75, y))
    p.box(0.75, y - h / 2, 0.95, h, ("block",), "LayerNorm")
    p.arrow((1.7, y), (1.95, y))
    p.box(1.95, y - h / 2, 1.2, h, ("attention", "block"), "multi-head\nattention")
    p.arrow((3.15, y), (3.45, y))
    p.plus(3.55, y, ("block",))
    p.arrow((3.65, y), (3.95, y))
    p.box(3.95, y - h / 2, 0.95, h, ("block",), "LayerNorm")
    p.arrow((4.9, y), (5.15, y))
    p.box(5.15, y - h / 2, 0.8, h, ("block",), "MLP")
    p.arrow((5.95, y), (6.2, y))
    p.plus(6.3, y, ("block",))
    p.arrow((6.4, y), (6.95, y))
    top = y + 0.55
    p.path([(0.45, y), (0.45, top), (3.55, top), (3.55, y + 0.1)])
    p.path([(3.8, y), (3.8, top), (6.3, top), (6.3, y + 0.1)])
    p.label(2.0, top + 0.1, "residual: x + attn(norm1(x))", va="bottom", ha="center")
    p.label(5.05, top + 0.1, "residual: x + mlp(norm2(x))", va="bottom", ha="center")


def _draw_block_notes(p: Painter) -> None:
    """Shapes and the package's names under the row; the MLP's insides."""
    y = 1.05
    mono = {"family": "monospace", "ha": "center", "va": "center"}
    for x, name in ((1.22, "norm1"), (2.55, "attn"), (4.42, "norm2"), (5.55, "mlp")):
        p.label(x, y, name, **mono)
    p.label(0.05, 1.25, "(B, T, D)", va="center")
    p.label(6.95, 1.25, "(B, T, D)", va="center", ha="right")
    p.label(2.55, 0.75, "h heads of width d = D / h", ha="center", va="center")
    p.label(5.55, 0.75, "Linear D → rD, GELU,", ha="center", va="center")
    p.label(5.55, 0.5, "Linear rD → D", ha="center", va="center")
    p.label(5.55, 0.25, "(B, T, rD) inside", ha="center", va="center")
    title = "EncoderBlock (vit_tutorial/encoder.py), pre-norm; r = mlp_ratio, B batch, T tokens"
    p.label(3.5, 2.72, title, ha="center", va="center")


# Swin-T at 224×224 (Liu et al. 2021, Section 3.3): grid side, width C, blocks, windows per side
_SWIN_T = [(56, 96, 2, 8), (28, 192, 2, 4), (14, 384, 6, 2), (7, 768, 2, 1)]
_COLUMNS, _SIDES = (2.2, 3.55, 4.8, 6.05), (0.9, 0.66, 0.5, 0.38)


def _grid_square(ax: Any, x: float, y: float, side: float, cuts: int, gid: str,
                 colours: tuple[str, str], lw: float) -> None:  # fmt: skip
    """A square feature map with lower-left corner ``(x, y)``, cut by ``cuts - 1`` lines."""
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), side, side, facecolor=colours[0], edgecolor=colours[1],
                           lw=1.6, gid=gid))  # fmt: skip
    for k in range(1, cuts):
        t = k * side / cuts
        ax.plot([x + t, x + t], [y, y + side], color=colours[1], lw=lw)
        ax.plot([x, x + side], [y + t, y + t], color=colours[1], lw=lw)


def _swin_row(p: Painter, y: float, swin: bool) -> None:
    """One row: an image, then four feature maps with their labels and arrows."""
    colours = HIGHLIGHT if swin else _COLOURS["model"]
    p.box(0.35, y, 0.5, 0.5, ("patches",), "", rounded=False)
    p.label(0.6, y - 0.08, "image\n224×224", ha="center", va="top")
    for i, (cx, side) in enumerate(zip(_COLUMNS, _SIDES if swin else (0.66,) * 4)):
        grid, C, depth, windows = _SWIN_T[i] if swin else (14, 768, 3, 1)
        _grid_square(p.ax, cx - side / 2, y, side, windows if swin else 14,
                     f"{'swin' if swin else 'vit'}:{i}", colours, 1.2 if swin else 0.3)  # fmt: skip
        blocks = f"stage {i + 1}: {depth} blocks" if swin else f"blocks {3 * i + 1}–{3 * i + 3}"
        width = f"C = {C}" if swin else f"D = {C}"
        p.label(cx, y - 0.08, f"{blocks}\n{grid}×{grid}, {width}", ha="center", va="top")
        left = 0.9 if i == 0 else _COLUMNS[i - 1] + (_SIDES[i - 1] if swin else 0.66) / 2 + 0.05
        p.arrow((left, y + 0.25), (cx - side / 2 - 0.05, y + 0.25))
        text = ("patch 4×4" if swin else "patch 16×16") if i == 0 else "merge" if swin else ""
        if text:
            p.label((left + cx - side / 2) / 2, y + 0.32, text, ha="center")


def draw_swin_map(ax: Any = None) -> Any:
    """Swin-T's four stages (chapter 10) beside ViT-B/16's one resolution (chapter 5).

    Top, ViT-B/16 at 224×224: 16×16 patches, then 12 blocks on the same 14×14 grid of width
    768, each attending over all 196 tokens (one window, thin lines: tokens). Bottom, Swin-T
    (Liu et al. 2021, Section 3.1 and 3.3): 4×4 patches, then four stages of 2, 2, 6 and 2
    blocks on grids of 56, 28, 14 and 7 tokens a side and widths 96 to 768, patch merging
    between stages; thick lines cut each grid into the 7×7-token windows attention stays in.

    Args:
        ax: the axes to draw into, about 7 × 3.4 inches; ``None`` makes a new pyplot figure.

    Returns:
        The matplotlib figure (show it with ``plt.show()``).

    Example:
        In a notebook cell, ``draw_swin_map(); plt.show()``.
    """
    fig, ax = drawing_axes(ax, _SWIN_SIZE)
    p = Painter(ax, None)
    _swin_row(p, 2.35, swin=False)
    _swin_row(p, 0.7, swin=True)
    p.label(0.05, 3.2, "ViT-B/16 (chapter 5): one grid, global attention", va="center",
            fontsize=_FONT)  # fmt: skip
    p.label(0.05, 1.72, "Swin-T (chapter 10)", va="center", fontsize=_FONT)
    p.label(6.95, 1.72, "thick lines: 7×7 windows", ha="right", va="center")
    return fig
