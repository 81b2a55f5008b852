"""The map chapter 11 opens with: the encoder block of 2020 beside the ViT of the mid-2020s.

:func:`draw_modern_block` draws chapter 4's pre-norm block (Dosovitskiy et al. 2021) and the
block of the ViTs trained since (DeiT III, EVA-02, SigLIP, DINOv2) in one layout, slot for
slot, with the tokens that enter the stack and the head that reads it: what the mid-2020s
changed in the colour :data:`~vit_tutorial.figures.HIGHLIGHT`, what they kept in
:data:`~vit_tutorial.figures.GREY`. It paints with the helpers of :mod:`vit_tutorial.figures`,
into a figure 7 in wide (a ~690-px column at 100 dpi), no text under 9 pt.
"""

from __future__ import annotations

from typing import Any

from vit_tutorial.figures import GREY, HIGHLIGHT, Painter, drawing_axes

__all__ = ["draw_modern_block"]

_FONT, _SMALL = 10, 9
_SIZE = (7.0, 5.6)  # inches
_NEW, _OLD = ("new",), ("2020",)  # a patch's gid: "map:new" or "map:2020"
# The block's slots from the bottom, (name, height): both columns share them, so the empty
# slots of 2020 (no LayerScale) stand where the modern block inserts a part.
_SLOTS = (("norm1", 0.26), ("attn", 0.56), ("ls1", 0.22), ("sum1", 0.2),
          ("norm2", 0.26), ("mlp", 0.42), ("ls2", 0.22), ("sum2", 0.2))  # fmt: skip
_GAP, _FLOOR, _WIDTH = 0.1, 1.1, 1.5  # between slots; the frame's bottom; a box's width
_SPINE, _RESIDUAL = _WIDTH / 2, _WIDTH + 0.25  # from a column's left edge
_BLOCKS = {
    False: {"norm1": ("LayerNorm", _OLD), "norm2": ("LayerNorm", _OLD),
            "mlp": ("MLP\nLinear, GELU, Linear", _OLD)},
    True: {"norm1": ("RMSNorm", _NEW), "norm2": ("RMSNorm", _NEW),
           "mlp": ("SwiGLU\nSiLU($xW_g$) ⊙ $xW_x$", _NEW),
           "ls1": ("LayerScale γ ·", _NEW), "ls2": ("LayerScale γ ·", _NEW)},
}  # fmt: skip
# What each new part does, beside its slot in the modern column.
_NOTES = {
    "norm1": "x / rms(x) · g: no mean,\nno shift; the final norm too",
    "attn": "QK-norm: RMSNorm on q, k;\n2D RoPE rotates q, k by row\nand column (not the prefix);\nq, k, v bias optional",
    "ls1": "γ per channel, starting near 0",
    "mlp": "then Linear $W_2$; width 8D/3\nkeeps the MLP's weight count",
    "head": "as in SigLIP; DINOv2 reads\nthe class token instead",
}  # fmt: skip


def _slots() -> dict[str, tuple[float, float]]:
    """``{slot: (bottom, height)}``, stacked upwards from the frame's floor."""
    y, where = _FLOOR + 0.15, {}
    for name, height in _SLOTS:
        where[name] = (y, height)
        y += height + _GAP
    where["head"] = (y + 0.5, 0.42)  # above the final norm, outside the frame
    return where


def _draw_block(p: Painter, left: float, modern: bool) -> float:
    """One block, its spine and boxes on the left, residuals on the right; returns its top."""
    slots, spine = _slots(), left + _SPINE
    top = slots["sum2"][0] + slots["sum2"][1] + 0.12
    p.box(left - 0.1, _FLOOR, _RESIDUAL + 0.3, top - _FLOOR, _OLD)  # the stack: as in 2020
    p.ax.patches[-1].set(facecolor="none", gid="frame:" + ("new" if modern else "2020"))
    p.label(left + _RESIDUAL + 0.2, top + 0.03, "× L", ha="right", va="bottom")
    y = _FLOOR
    for name, height in _SLOTS:
        bottom = slots[name][0]
        p.arrow((spine, y), (spine, bottom))
        if name.startswith("sum"):
            p.plus(spine, bottom + 0.1, _OLD)
        elif name == "attn":
            _draw_attention(p, left, bottom, height, modern)
        elif name in _BLOCKS[modern]:
            text, parts = _BLOCKS[modern][name]
            p.box(left, bottom, _WIDTH, height, parts, text, size=_SMALL if "\n" in text else _FONT)
        else:  # 2020 has no LayerScale: the branch goes straight on
            p.arrow((spine, bottom), (spine, bottom + height), arrowstyle="-")
        y = bottom + height
    p.arrow((spine, y), (spine, top))
    for start, end in (("norm1", "sum1"), ("norm2", "sum2")):  # the residual paths
        below, sum_y = slots[start][0] - _GAP / 2 - 0.02, slots[end][0] + 0.1
        p.path([(spine, below), (left + _RESIDUAL, below), (left + _RESIDUAL, sum_y),
                (spine + 0.1, sum_y)])  # fmt: skip
    return top


def _draw_attention(p: Painter, left: float, bottom: float, height: float, modern: bool) -> None:
    """Multi-head attention; the modern one with QK-norm and RoPE on its queries and keys."""
    p.box(left, bottom, _WIDTH, height, _OLD)
    p.label(left + _SPINE, bottom + height - 0.15, "multi-head attention", _OLD, ha="center",
            va="center")  # fmt: skip
    if modern:
        p.box(left + 0.06, bottom + 0.05, _WIDTH - 0.12, 0.25, _NEW, "QK-norm, RoPE",
              size=_SMALL)  # fmt: skip
    else:
        p.label(left + _SPINE, bottom + 0.17, "q, k, v (with bias)", _OLD, ha="center",
                va="center")  # fmt: skip


def _draw_tokens(p: Painter, left: float, modern: bool) -> None:
    """The tokens entering the stack: class token (registers), patches, the position table."""
    kinds = ["cls"] + ["reg"] * (4 if modern else 0) + ["patch"] * (5 if modern else 6)
    for i, kind in enumerate(kinds):
        x = left + 0.25 * i
        text = {"cls": "*", "reg": "r", "patch": ""}[kind]
        p.box(x, 0.45, 0.2, 0.2, _NEW if kind == "reg" else _OLD, text, size=_SMALL)
        if kind == "patch" or not modern:  # modern: the table covers the patches only
            p.box(x - 0.01, 0.72, 0.22, 0.22, _OLD)
        p.arrow((x + 0.1, 0.94 if kind == "patch" or not modern else 0.65), (x + 0.1, _FLOOR),
                mutation_scale=6)  # fmt: skip
    caption = (
        "class token *, 4 registers r, patches;\n+ position table on the patches only"
        if modern
        else "class token *, patches;\n+ position table on all tokens"
    )
    p.label(left - 0.1, 0.38, caption, _NEW if modern else _OLD, va="top")


def _draw_head(p: Painter, left: float, top: float, modern: bool) -> None:
    """The final norm, and the head: class token (2020) or a MAP head (the mid-2020s)."""
    spine, (bottom, height) = left + _SPINE, _slots()["head"]
    norm = bottom - 0.12 - 0.26
    p.arrow((spine, top), (spine, norm))
    p.box(left, norm, _WIDTH, 0.26, _NEW if modern else _OLD, "RMSNorm" if modern else "LayerNorm")
    p.arrow((spine, norm + 0.26), (spine, bottom))
    text = "MAP head: a learned\nquery attends to all" if modern else "MLP head on the\nclass token"
    p.box(left, bottom, _WIDTH, height, _NEW if modern else _OLD, text, size=_SMALL)
    p.arrow((left + _WIDTH, bottom + height / 2), (left + _WIDTH + 0.2, bottom + height / 2))
    p.label(left + _WIDTH + 0.25, bottom + height / 2, "class", va="center", fontsize=_FONT)


def _draw_notes(p: Painter, left: float) -> None:
    """Beside the modern block: what each new part does."""
    for name, text in _NOTES.items():
        bottom, height = _slots()[name]
        x = left + (0.2 if name == "head" else 0)  # right of "class"
        p.label(x, bottom + height / 2, text, _NEW, va="center", linespacing=1.15)


def _legend(p: Painter) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=HIGHLIGHT[0], edgecolor=HIGHLIGHT[1], label="new in the mid-2020s"),
               Patch(facecolor=GREY[0], edgecolor=GREY[1], label="as in 2020")]  # fmt: skip
    p.ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 0.0), ncol=1,
                fontsize=_SMALL, frameon=False, handlelength=1.2, handletextpad=0.4,
                borderaxespad=0.1)  # fmt: skip


def draw_modern_block(ax: Any = None) -> Any:
    """The ViT block of 2020 (chapter 4) beside the ViT block of the mid-2020s (chapter 11).

    Both drawn slot for slot, bottom to top. Left, the ViT paper's pre-norm block: LayerNorm →
    multi-head attention (``q, k, v`` with bias) → + → LayerNorm → MLP (Linear, GELU, Linear)
    → +, on ``[class token, patches]`` plus a position table, then LayerNorm and the head on
    the class token. Right, what the mid-2020s changed, in :data:`~vit_tutorial.figures.HIGHLIGHT`:
    RMSNorm for every LayerNorm, the final one too; QK-norm on each head's queries and keys and
    2D RoPE rotating them by the patch's row and column (prefix tokens unrotated); LayerScale
    (``γ ·``) on each residual branch before its sum; SwiGLU (``SiLU(x W_g) ⊙ x W_x``, then
    ``W_2``) for the MLP; four register tokens after the class token, the position table on
    the patches only (DeiT III, timm's ``no_embed_class``); and the MAP head of SigLIP, one
    learned query attending over the tokens, in place of the class token's. What they kept is
    grey: attention itself, the residual sums, the stack of ``L`` blocks.

    Args:
        ax: the axes to draw into, about 7 × 5.6 inches; ``None`` makes a new pyplot figure.

    Returns:
        The matplotlib figure (show it with ``plt.show()``).

    Example:
        In a notebook cell, ``draw_modern_block(); plt.show()``.
    """
    fig, ax = drawing_axes(ax, _SIZE)
    p = Painter(ax, "new")
    for left, modern, title in ((0.3, False, "ViT, 2020 (chapter 4)"),
                                (2.85, True, "ViT of the mid-2020s (chapter 11)")):  # fmt: skip
        _draw_tokens(p, left, modern)
        _draw_head(p, left, _draw_block(p, left, modern), modern)
        p.label(left - 0.1, _SIZE[1] - 0.12, title, va="center", fontsize=_FONT)
    _draw_notes(p, 4.95)
    _legend(p)
    return fig
