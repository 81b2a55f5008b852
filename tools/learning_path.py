"""Draw the book's learning path: chapters 1 to 7 and the package modules each one builds.

The figure on the intro page (``book/images/learning_path.svg``). One row per chapter: the
chapter, the modules of ``vit_tutorial`` it builds (filled) and those of earlier chapters it
uses (in grey); a last row for the exercises, which every chapter grades with
``vit_tutorial.exercises``. The rows come from :data:`CHAPTERS`; ``tests/test_learning_path.py``
checks them against ``_toc.yml`` and the chapters' imports, and that the committed file is what
this script draws. Regenerate it after changing :data:`CHAPTERS`::

    .venv/bin/python tools/learning_path.py            # writes book/images/learning_path.svg

The SVG is deterministic: a fixed ``svg.hashsalt``, no date in its metadata, and matplotlib's
default style whatever the caller's settings.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "images" / "learning_path.svg"


@dataclass(frozen=True)
class Chapter:
    """One row: the chapter's file in ``_toc.yml``, a short title, and modules of vit_tutorial."""

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
    Chapter("book/05_vision_transformer", "The Vision Transformer", ("vit", "interop")),
    Chapter(
        "book/06_training",
        "Training on digits",
        ("data", "engine", "losses", "recipes", "cli"),
        ("vit",),
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
)
EXERCISES = "exercises"  # the module every chapter's exercises import

# Sizes in inches (the figure is 6.9 in wide: the ~690-px column at 100 dpi) and points.
WIDTH, ROW, TOP = 6.9, 0.56, 0.42
CHAPTER_X, CHAPTER_W, CHIP_X = 0.04, 2.2, 2.62
CHAR_W, PAD, GAP = 0.076, 0.14, 0.08  # monospace 9.5 pt: ~0.6 em per character
FONT, SMALL = 10, 9
BLUE, BLUE_EDGE, CHIP, GREY = "#dbe8f6", "#4a7ab5", "#f6d7a7", "#595959"
RC = {"svg.hashsalt": "vit-tutorial-learning-path", "font.family": "DejaVu Sans"}


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


def _row(ax, y: float, label: str, builds: tuple[str, ...], uses: str, face: str) -> None:
    """One row: the box on the left, an arrow, the module chips, and the grey 'uses' line."""
    _box(ax, CHAPTER_X, y, CHAPTER_W, 0.34, face, BLUE_EDGE)
    ax.text(CHAPTER_X + 0.1, y, label, fontsize=FONT, va="center")
    top = y - (0.09 if uses else 0.0)  # the chips move up to make room for the grey line
    _arrow(ax, (CHAPTER_X + CHAPTER_W + 0.04, top), (CHIP_X - 0.06, top))
    x = CHIP_X
    for module in builds:
        w = CHAR_W * len(module) + 2 * PAD
        _box(ax, x, top, w, 0.24, CHIP, "#b07a2a")
        ax.text(x + w / 2, top, module, fontsize=9.5, family="monospace", ha="center", va="center")
        x += w + GAP
    if uses:
        ax.text(CHIP_X, y + 0.17, uses, fontsize=SMALL, color=GREY, va="center")


def draw() -> Figure:
    """The learning-path figure, 6.9 in wide, one row per chapter and one for the exercises."""
    height = TOP + ROW * (len(CHAPTERS) + 1) + 0.05
    fig = Figure(figsize=(WIDTH, height), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set(xlim=(0, WIDTH), ylim=(height, 0))
    ax.axis("off")
    ax.text(CHAPTER_X, 0.16, "chapter", fontsize=FONT, weight="bold", va="center")
    ax.text(
        CHIP_X,
        0.16,
        "modules of vit_tutorial it builds (in grey: uses)",
        fontsize=FONT,
        weight="bold",
        va="center",
    )
    for i, chapter in enumerate(CHAPTERS):
        y = TOP + ROW * (i + 0.5)
        uses = f"also uses {', '.join(chapter.uses)}" if chapter.uses else ""
        _row(ax, y, f"{i + 1}.  {chapter.title}", chapter.builds, uses, BLUE)
        if i + 1 < len(CHAPTERS):  # the path goes on to the next chapter
            _arrow(ax, (0.3, y + 0.17), (0.3, y + ROW - 0.17))
    y = TOP + ROW * (len(CHAPTERS) + 0.5)
    _row(
        ax, y, "Exercises, in every chapter", (EXERCISES,), "a checker for each exercise", "#eeeeee"
    )
    return fig


def write(path: Path = OUT) -> Path:
    """Draw the figure and save it as a deterministic SVG at ``path``; return ``path``."""
    with mpl.rc_context():
        mpl.rcdefaults()
        mpl.rcParams.update(RC)
        path.parent.mkdir(parents=True, exist_ok=True)
        draw().savefig(path, format="svg", metadata={"Date": None})
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    print(f"wrote {write(parser.parse_args().out)}")
