"""The intro's learning-path figure (tools/learning_path.py): up to date with the book."""

import importlib
import json
import re
from pathlib import Path

import learning_path
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "book" / "images" / "learning_path.svg"
REGENERATE = "run `python tools/learning_path.py`"


def test_committed_svg_is_what_the_script_draws(tmp_path):
    drawn = learning_path.write(tmp_path / "learning_path.svg").read_bytes()
    assert drawn == COMMITTED.read_bytes(), f"book/images/learning_path.svg is stale: {REGENERATE}"


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    first = learning_path.write(tmp_path / "a.svg").read_bytes()
    assert learning_path.write(tmp_path / "b.svg").read_bytes() == first


def test_every_chapter_of_the_toc_is_on_the_path_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    chapters = [entry for entry in listed if re.fullmatch(r"book/\d\d_\w+", entry)]
    assert [c.file for c in learning_path.CHAPTERS] == chapters, REGENERATE


@pytest.mark.parametrize("chapter", learning_path.CHAPTERS, ids=lambda c: c.file)
def test_every_module_named_exists(chapter):
    for name in (*chapter.builds, *chapter.uses, learning_path.EXERCISES):
        importlib.import_module(f"vit_tutorial.{name}")
    assert not set(chapter.builds) & set(chapter.uses), "a module is built or used, not both"


def _related(a: str, b: str) -> bool:
    """Whether one module name is the other or a module inside it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


@pytest.mark.parametrize("chapter", learning_path.CHAPTERS, ids=lambda c: c.file)
def test_every_module_a_chapter_imports_is_on_its_row(chapter):
    notebook = json.loads((ROOT / f"{chapter.file}.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    imported = set(re.findall(r"^from vit_tutorial\.([\w.]+) import", code, re.MULTILINE))
    # vit_tutorial.notebook (glue, repository files) is every chapter's plumbing, not a lesson
    shown = {*chapter.builds, *chapter.uses, learning_path.EXERCISES, "notebook"}
    # a package and its modules show each other (experiments and experiments.ch08)
    missing = {m for m in imported if not any(_related(m, s) for s in shown)}
    assert not missing, f"{chapter.file} imports {sorted(missing)}: {REGENERATE}"


def test_figure_fits_the_column_and_its_text_is_legible():
    fig = learning_path.draw()
    width, _ = fig.get_size_inches()
    assert 6.5 <= width <= 6.9  # shown at 100% of a ~690-px column, not shrunk below 90%
    sizes = [text.get_fontsize() for text in fig.findobj(lambda o: hasattr(o, "get_fontsize"))]
    assert sizes and min(sizes) >= 9
