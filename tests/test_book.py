"""Tests of the book's structure: what nbval does not check by re-executing the chapters."""

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from colab_cell import colab_cell_source

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def source(cell: dict) -> str:
    return "".join(cell["source"])


def code_cells(path: Path) -> list[dict]:
    return [c for c in load(path)["cells"] if c["cell_type"] == "code" and source(c).strip()]


def test_there_are_chapters():
    assert CHAPTERS, "no chapter found in book/"


def test_every_chapter_is_in_the_toc_and_every_toc_entry_exists():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").is_file() for ext in (".md", ".ipynb")), entry
    for chapter in CHAPTERS:
        assert f"book/{chapter.stem}" in listed, f"{chapter.name} is missing from _toc.yml"
    chapter_entries = [e for e in listed if re.match(r"book/\d\d_", e)]
    assert chapter_entries == sorted(chapter_entries), "chapters must appear in order"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_first_cell_installs_from_the_configured_repository(chapter):
    first = load(chapter)["cells"][0]
    assert first["cell_type"] == "code"
    assert source(first) == colab_cell_source(), "run `make colab-cells`"
    assert first.get("outputs") == [], "the Colab cell must print nothing outside Colab"
    assert "remove-cell" in first["metadata"].get("tags", []), "run `make colab-cells`"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_executed_top_to_bottom_without_errors(chapter):
    counts = [c["execution_count"] for c in code_cells(chapter)]
    assert counts == list(range(1, len(counts) + 1)), "run `make notebooks NB=...`"
    for cell in code_cells(chapter):
        for out in cell["outputs"]:
            assert out["output_type"] != "error", source(cell)[:80]
            text = "".join(out.get("data", {}).get("text/plain", ""))
            assert " at 0x" not in text, f"a memory address in an output: {text[:80]}"


def markers(cell: dict) -> set[str]:
    """nbval's markers of a cell, given as cell tags (``nbval-skip``, ``nbval-ignore-output``)."""
    tags = {tag.upper().replace("-", "_") for tag in cell["metadata"].get("tags", [])}
    return tags & {"NBVAL_SKIP", "NBVAL_IGNORE_OUTPUT"}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_nbval_markers_are_used_as_the_rules_say(chapter):
    for cell in code_cells(chapter):
        text = source(cell)
        # A "# NBVAL_..." comment works, but it shows in the book: use the cell tags.
        assert "NBVAL_" not in text, f"use the cell tag, not a comment: {text[:80]}"
        found = markers(cell)
        if "NBVAL_SKIP" in found:
            assert not cell["outputs"], (
                f"a skipped (online-only) cell has invented outputs: {text[:80]}"
            )
            assert re.search(r"online|GPU", text, re.IGNORECASE), "say why the cell is skipped"
        if "NBVAL_IGNORE_OUTPUT" in found:
            assert re.search(r"^\s*assert\b", text, re.MULTILINE), (
                f"a cell whose output is ignored must assert its claim: {text[:80]}"
            )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_imports_the_package(chapter):
    code = "\n".join(source(c) for c in code_cells(chapter))
    assert re.search(r"^from vit_tutorial[.\w]* import", code, re.MULTILINE)


def test_nbval_is_strict_and_one_run_covers_everything():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--nbval" in options["addopts"].split()
    assert "--nbval-lax" not in options["addopts"]
    assert "--doctest-modules" in options["addopts"].split()
    assert set(options["testpaths"]) == {"tests", "vit_tutorial", "book"}


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_requirements_have_lower_bounds_only_and_constraints_pin():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        assert "==" not in line, f"requirements.txt must not pin exactly: {line}"
    pins = (ROOT / "constraints.txt").read_text()
    for pin in ("torch==2.14.1", "torchvision==0.29.1", "jupyter-book==1.0.4"):
        assert pin in pins
