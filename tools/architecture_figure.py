"""Draw the intro's map of the Vision Transformer: ``book/images/vit_architecture.svg``.

The figure is :func:`vit_tutorial.figures.draw_vit_map` with nothing highlighted: every part
of the ViT in the colour of the chapter that builds it. The chapters draw the same map in a
code cell (a notebook opened alone has no ``book/images/``); the intro, a Markdown page,
includes this file. ``tests/test_figures.py`` checks that the committed file is what this
script draws. Regenerate it after changing the drawing::

    .venv/bin/python tools/architecture_figure.py      # writes book/images/vit_architecture.svg

The SVG is deterministic: a fixed ``svg.hashsalt``, no date in its metadata, and matplotlib's
default style whatever the caller's settings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # a script: draw off screen

import matplotlib.pyplot as plt  # noqa: E402

from vit_tutorial.figures import draw_vit_map  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "images" / "vit_architecture.svg"
RC = {"svg.hashsalt": "vit-tutorial-architecture", "font.family": "DejaVu Sans"}


def write(path: Path = OUT) -> Path:
    """Draw the map and save it as a deterministic SVG at ``path``; return ``path``."""
    with mpl.rc_context():
        mpl.rcdefaults()
        mpl.rcParams.update(RC)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig = draw_vit_map(highlight=None)
        try:
            fig.savefig(path, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT}")
    print(f"wrote {write(parser.parse_args().out)}")
