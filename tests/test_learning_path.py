"""The intro's learning-path figure (tools/learning_path.py): up to date with the book."""

import importlib
import json
import re
from pathlib import Path

import learning_path
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "book" / "images" / "learning_path.svg"
REGENERATE = "run `python tools/learning_path.py`"
ROWS = (*learning_path.CHAPTERS, *learning_path.APPENDICES)


def test_committed_svg_is_what_the_script_draws(tmp_path):
    drawn = learning_path.write(tmp_path / "learning_path.svg").read_bytes()
    assert drawn == COMMITTED.read_bytes(), f"book/images/learning_path.svg is stale: {REGENERATE}"


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    first = learning_path.write(tmp_path / "a.svg").read_bytes()
    assert learning_path.write(tmp_path / "b.svg").read_bytes() == first


def test_every_chapter_and_appendix_of_the_toc_is_on_the_path_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    assert [c.file for c in learning_path.CHAPTERS] == parts["Chapters"], REGENERATE
    assert [a.file for a in learning_path.APPENDICES] == parts["Appendices"], REGENERATE


@pytest.mark.parametrize("chapter", ROWS, ids=lambda c: c.file)
def test_every_module_named_exists(chapter):
    for name in (*chapter.builds, *chapter.uses, learning_path.EXERCISES):
        importlib.import_module(f"vit_tutorial.{name}")
    assert not set(chapter.builds) & set(chapter.uses), "a module is built or used, not both"


def _related(a: str, b: str) -> bool:
    """Whether one module name is the other or a module inside it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


@pytest.mark.parametrize("chapter", ROWS, ids=lambda c: c.file)
def test_every_module_a_chapter_imports_is_on_its_row(chapter):
    notebook = json.loads((ROOT / f"{chapter.file}.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    imported = set(re.findall(r"^from vit_tutorial\.([\w.]+) import", code, re.MULTILINE))
    # vit_tutorial.notebook (glue, repository files) and vit_tutorial.figures (the map each
    # chapter opens with) are every chapter's plumbing, not a lesson
    shown = {
        *chapter.builds,
        *chapter.uses,
        learning_path.EXERCISES,
        "notebook",
        "figures",
        "figures_modern",
    }
    # a package and its modules show each other (experiments and experiments.ch08)
    missing = {m for m in imported if not any(_related(m, s) for s in shown)}
    assert not missing, f"{chapter.file} imports {sorted(missing)}: {REGENERATE}"


def test_figure_fits_the_column_and_its_text_is_legible():
    fig = learning_path.draw()
    width, _ = fig.get_size_inches()
    assert 6.5 <= width <= 6.9  # shown at 100% of a ~690-px column, not shrunk below 90%
    sizes = [text.get_fontsize() for text in fig.findobj(lambda o: hasattr(o, "get_fontsize"))]
    assert sizes and min(sizes) >= 9


def test_every_label_fits_its_box_and_no_text_overlaps_another_or_leaves_the_figure():
    """Measured with the renderer: a label inside a box stays 2 px clear of its edges; the
    headers and grey lines, in no box, cross none and stay on the page."""
    fig = learning_path.draw()
    (ax,) = fig.axes
    renderer = FigureCanvasAgg(fig).get_renderer()  # the extents as they are drawn
    boxes = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, FancyBboxPatch)]
    texts = [t for t in ax.texts if t.get_text()]
    extents = [t.get_window_extent(renderer) for t in texts]
    margin = 2  # pixels
    for text, extent in zip(texts, extents, strict=True):
        label = repr(text.get_text())
        anchor = ax.transData.transform(text.get_position())
        own = [b for b in boxes if b.contains(*anchor)]
        if own:
            (box,) = own
            assert box.x0 + margin <= extent.x0 and extent.x1 <= box.x1 - margin, label
            assert box.y0 + margin <= extent.y0 and extent.y1 <= box.y1 - margin, label
        else:
            assert not any(extent.overlaps(b) for b in boxes), f"{label} crosses a box"
        assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1, f"{label} leaves the page"
        assert fig.bbox.y0 <= extent.y0 and extent.y1 <= fig.bbox.y1, f"{label} leaves the page"
    for i, a in enumerate(extents):
        for j in range(i + 1, len(extents)):
            assert not a.overlaps(extents[j]), (texts[i].get_text(), texts[j].get_text())
