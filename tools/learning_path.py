"""Draw the book's learning path: chapters 1 to 11, the appendix and the modules each builds.

The figure on the intro page (``book/images/learning_path.svg``). One row per chapter and per
appendix, in the order of ``_toc.yml``: its number and title, the modules of ``vit_tutorial`` it
builds (filled) and those of other chapters it uses (in grey; earlier ones, but for chapter
5's look at chapter 9's encoder); a last row for the exercises,
which every chapter grades with ``vit_tutorial.exercises``. The rows come from :data:`CHAPTERS`
and :data:`APPENDICES`; ``tests/test_learning_path.py`` checks them against ``_toc.yml`` and the
pages' imports, that every label fits its box, and that the committed file is what this script
draws. Regenerate it after changing a row::

    .venv/bin/python tools/learning_path.py            # writes book/images/learning_path.svg

The boxes are sized from the text extents that matplotlib's renderer measures, not from a
guessed width per character. The SVG is deterministic: a fixed ``svg.hashsalt``, no date in its
metadata, and matplotlib's default style whatever the caller's settings.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "images" / "learning_path.svg"


@dataclass(frozen=True)
class Chapter:
    """One row: the page's file in ``_toc.yml``, a short title, and modules of vit_tutorial."""

    file: str
    title: str
    builds: tuple[str, ...]
    uses: tuple[str, ...] = ()


CHAPTERS = (
    Chapter("book/01_attention", "Attention", ("attention", "measure")),
    Chapter("book/02_patch_embedding", "Patch embedding", ("patches",)),
    Chapter(
        "book/03_positional_encodings",
        "Positional encodings",
        ("positional",),
        ("patches", "attention"),
    ),
    Chapter("book/04_encoder", "The encoder block", ("encoder",)),
    Chapter(
        "book/05_vision_transformer",
        "The Vision Transformer",
        ("vit", "interop"),
        ("patches", "data", "mae", "experiments.ch09"),  # the backbone section's MAE
    ),
    Chapter(
        "book/06_training",
        "Training on digits",
        ("data", "engine", "losses", "recipes", "cli", "experiments"),
        ("vit", "positional"),
    ),
    Chapter(
        "book/07_axial_attention",
        "Axial attention",
        ("axial",),
        ("attention", "measure", "vit", "data", "engine"),
    ),
    Chapter(
        "book/08_data_and_inductive_bias",
        "Data and inductive bias",
        ("experiments.ch08",),
        ("data", "vit"),
    ),
    Chapter(
        "book/09_pretraining",
        "Pre-training and fine-tuning",
        ("mae", "experiments.ch09", "finetune"),
        ("data", "losses", "patches", "positional", "vit", "interop"),
    ),
    Chapter(
        "book/10_windowed_attention",
        "Attention in windows (Swin)",
        ("windows", "swin", "swin_interop"),
        ("attention", "axial", "measure", "positional", "experiments"),
    ),
    Chapter(
        "book/11_modern_vit",
        "The ViT of the mid-2020s",
        ("modern", "encoder", "experiments.ch11"),  # LayerScale, SwiGLU in encoder
        ("attention", "vit", "interop", "measure", "experiments"),
    ),
)
# The appendices, lettered A, B, ...: they build no module, they time those of the chapters.
APPENDICES = (
    Chapter(
        "book/appendix_performance",
        "Making a ViT fast",
        (),
        ("attention", "measure", "vit", "interop", "experiments"),
    ),
)
EXERCISES = "exercises"  # the module every chapter's exercises import

# Sizes in inches (the figure is 6.9 in wide: the ~690-px column at 100 dpi) and points.
WIDTH, DPI, ROW, TOP = 6.9, 100, 0.56, 0.42
CHAPTER_X, BOX_H, CHIP_H = 0.04, 0.34, 0.24
TEXT_PAD, CHIP_PAD, GAP, ARROW = 0.1, 0.07, 0.06, 0.3  # text to box edge, chip gap, arrow length
FONT, CHIP_FONT, SMALL = 10, 9.5, 9
BLUE, BLUE_EDGE, CHIP, CHIP_EDGE, GREY = "#dbe8f6", "#4a7ab5", "#f6d7a7", "#b07a2a", "#595959"
RC = {"svg.hashsalt": "vit-tutorial-learning-path", "font.family": "DejaVu Sans"}


@contextmanager
def _style() -> Iterator[None]:
    """Matplotlib's defaults plus :data:`RC`, whatever the caller's settings."""
    with mpl.rc_context():
        mpl.rcdefaults()
        mpl.rcParams.update(RC)
        yield


def _box(ax, x: float, y: float, w: float, h: float, face: str, edge: str) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.06",
            facecolor=face,
            edgecolor=edge,
            linewidth=1.0,
        )
    )


def _arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, color=GREY, lw=1.0)
    )


def _width(fig: Figure, text: str, **style) -> float:
    """How wide ``text`` is drawn, in inches, as the figure's renderer measures it."""
    probe = fig.text(0, 0, text, **style)
    width = probe.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
    probe.remove()
    return width


def _rows() -> list[tuple[str, Chapter | None]]:
    """The label of every row and its chapter or appendix (``None`` for the exercises)."""
    rows = [(f"{i + 1}.  {c.title}", c) for i, c in enumerate(CHAPTERS)]
    rows += [(f"{chr(ord('A') + i)}.  {a.title}", a) for i, a in enumerate(APPENDICES)]
    return [*rows, ("Exercises, in every chapter", None)]


def draw() -> Figure:
    """The learning-path figure, 6.9 in wide: a row per chapter and appendix, one for exercises."""
    rows = _rows()
    height = TOP + ROW * len(rows) + 0.05
    with _style():
        fig = Figure(figsize=(WIDTH, height), dpi=DPI)
        FigureCanvasAgg(fig)  # a renderer to measure the text with
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set(xlim=(0, WIDTH), ylim=(height, 0))
        ax.axis("off")
        box_w = max(_width(fig, label, fontsize=FONT) for label, _ in rows) + 2 * TEXT_PAD
        chip_x = CHAPTER_X + box_w + ARROW
        ax.text(CHAPTER_X, 0.16, "chapter", fontsize=FONT, weight="bold", va="center")
        header = "modules of vit_tutorial it builds (in grey: uses)"
        ax.text(chip_x, 0.16, header, fontsize=FONT, weight="bold", va="center")
        for i, (label, chapter) in enumerate(rows):
            y = TOP + ROW * (i + 0.5)
            if chapter is None:
                builds, uses, face = (EXERCISES,), "a checker for each exercise", "#eeeeee"
            else:
                builds, face = chapter.builds, BLUE
                uses = f"{'also uses' if builds else 'only uses'} {', '.join(chapter.uses)}"
                uses = uses if chapter.uses else ""
            _box(ax, CHAPTER_X, y, box_w, BOX_H, face, BLUE_EDGE)
            ax.text(CHAPTER_X + TEXT_PAD, y, label, fontsize=FONT, va="center")
            if i + 2 < len(rows):  # the path goes on to the next chapter or appendix
                _arrow(ax, (0.3, y + BOX_H / 2), (0.3, y + ROW - BOX_H / 2))
            line = y - (0.09 if uses and builds else 0.0)  # chips move up for the grey line
            _arrow(ax, (CHAPTER_X + box_w + 0.04, line), (chip_x - 0.06, line))
            x = chip_x
            for module in builds:
                w = _width(fig, module, fontsize=CHIP_FONT, family="monospace") + 2 * CHIP_PAD
                _box(ax, x, line, w, CHIP_H, CHIP, CHIP_EDGE)
                style = {"fontsize": CHIP_FONT, "family": "monospace"}
                ax.text(x + w / 2, line, module, ha="center", va="center", **style)
                x += w + GAP
            if uses:
                grey_y = y + 0.17 if builds else y
                ax.text(chip_x, grey_y, uses, fontsize=SMALL, color=GREY, va="center")
    return fig


def write(path: Path = OUT) -> Path:
    """Draw the figure and save it as a deterministic SVG at ``path``; return ``path``."""
    with _style():
        path.parent.mkdir(parents=True, exist_ok=True)
        draw().savefig(path, format="svg", metadata={"Date": None})
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    print(f"wrote {write(parser.parse_args().out)}")
