"""Tests of the book's structure: what nbval does not check by re-executing the chapters."""

import ast
import functools
import json
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from colab_cell import badge_cell_source, colab_cell_source

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS_DIR = ROOT / "book" / "solutions"
SOLUTIONS = sorted(SOLUTIONS_DIR.glob("[0-9][0-9]_*.ipynb"))
APPENDICES = sorted((ROOT / "book").glob("appendix_*.ipynb"))
NOTEBOOKS = CHAPTERS + APPENDICES + SOLUTIONS  # every notebook of the book


def name(path: Path) -> str:
    return str(path.relative_to(ROOT / "book"))


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
    for chapter in CHAPTERS + APPENDICES:
        assert f"book/{chapter.stem}" in listed, f"{chapter.name} is missing from _toc.yml"
    chapter_entries = [e for e in listed if re.match(r"book/\d\d_", e)]
    assert chapter_entries == sorted(chapter_entries), "chapters must appear in order"


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
def test_first_cell_is_a_colab_badge_that_the_book_leaves_out(chapter):
    badge = load(chapter)["cells"][0]
    assert badge["cell_type"] == "markdown", "run `make colab-cells`"
    assert source(badge) == badge_cell_source(chapter), "run `make colab-cells`"
    assert f"/blob/main/{chapter.relative_to(ROOT).as_posix()})" in source(badge)
    # GitHub and Jupyter show it; the rendered page loads nothing from the network
    assert "remove-cell" in badge["metadata"].get("tags", []), "run `make colab-cells`"


def test_make_colab_cells_adds_the_badge_once(tmp_path, monkeypatch):
    import colab_cell

    monkeypatch.setattr(colab_cell, "ROOT", tmp_path)
    monkeypatch.setattr(colab_cell, "repository", lambda: ("https://github.com/o/r", "dev"))
    path = tmp_path / "book" / "01_x.ipynb"
    path.parent.mkdir()
    install = {"cell_type": "code", "id": "i", "metadata": {}, "source": [], "outputs": []}
    title = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# 1. X"]}
    path.write_text(json.dumps({"cells": [install, title], "metadata": {}, "nbformat": 4}))
    assert colab_cell.write(path) and not colab_cell.write(path)  # the second run: no change
    cells = json.loads(path.read_text())["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "markdown"]
    assert source(cells[0]).endswith("/github/o/r/blob/dev/book/01_x.ipynb)")
    assert source(cells[1]) == colab_cell.colab_cell_source()
    assert all("remove-cell" in c["metadata"]["tags"] for c in cells[:2])


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
def test_second_cell_installs_from_the_configured_repository(chapter):
    first = load(chapter)["cells"][1]
    assert first["cell_type"] == "code"
    assert source(first) == colab_cell_source(), "run `make colab-cells`"
    assert first.get("outputs") == [], "the Colab cell must print nothing outside Colab"
    assert "remove-cell" in first["metadata"].get("tags", []), "run `make colab-cells`"


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
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


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
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


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
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


# ---------------------------------------------------------------------------------------
# Exercises: graded in the chapter, solved in the solutions notebook

NOT_ATTEMPTED = "not attempted yet: fill in `{}` above and re-run\n"
CHECK_CALL = re.compile(r"^(check_\w+)\((\w+)\)\s*$", re.MULTILINE)  # at the top level


def text_output(cell: dict) -> str:
    return "".join(
        "".join(out.get("text", "")) for out in cell["outputs"] if out["output_type"] == "stream"
    )


def checker_cells(path: Path) -> list[tuple[str, str, dict]]:
    """(checker, answer, cell) for each cell that calls a checker at its top level."""
    found = []
    for cell in code_cells(path):
        calls = CHECK_CALL.findall(source(cell))
        found += [(checker, answer, cell) for checker, answer in calls]
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_ends_with_at_least_three_graded_exercises_left_to_the_learner(chapter):
    graded = checker_cells(chapter)
    assert len({checker for checker, _, _ in graded}) >= 3, "at least 3 graded exercises"
    code = "\n".join(source(c) for c in code_cells(chapter))
    for checker, answer, cell in graded:
        assert len(CHECK_CALL.findall(source(cell))) == 1, "one checker call per cell"
        assert text_output(cell) == NOT_ATTEMPTED.format(answer), (
            f"{checker}({answer}) must meet the untouched stub in the chapter: solutions "
            f"belong in book/solutions/{chapter.name}"
        )
        # the def up to the next top-level line (a wrapped signature's closing "):" aside)
        stub = re.search(rf"^def {answer}\(.*?(?=^[^\s)]|\Z)", code, re.MULTILINE | re.DOTALL)
        prediction = re.search(rf"^{answer} = \.\.\.", code, re.MULTILINE)  # predict, then measure
        assert (stub and "raise NotImplementedError" in stub.group()) or prediction, (
            f"the attempt cell must define {answer} as a stub that raises NotImplementedError, "
            f"or, for a prediction, as `{answer} = ...`"
        )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_solutions_notebook_passes_every_exercise_and_answers_more_to_try(chapter):
    solutions = SOLUTIONS_DIR / chapter.name
    assert solutions.is_file(), f"book/solutions/{chapter.name} is missing"
    passed = {
        checker
        for checker, _, cell in checker_cells(solutions)
        if text_output(cell).startswith(f"Correct! {checker}")
    }
    for checker, _, _ in checker_cells(chapter):
        assert checker in passed, f"{checker} is not passed by the solutions notebook"
    markdown = "\n".join(
        source(c) for c in load(solutions)["cells"] if c["cell_type"] == "markdown"
    )
    assert "More to try" in markdown, "answer the chapter's 'More to try' items"


def test_appendices_have_their_own_part_after_the_chapters():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = {p["caption"]: [c["file"] for c in p["chapters"]] for p in toc["parts"]}
    assert APPENDICES, "the performance appendix is missing"
    assert parts.get("Appendices") == [f"book/{a.stem}" for a in APPENDICES]
    captions = [p["caption"] for p in toc["parts"]]
    assert captions.index("Chapters") < captions.index("Appendices") < captions.index("Solutions")


def test_solutions_have_their_own_part_in_the_toc_in_chapter_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    assert parts.get("Solutions") == [f"book/solutions/{c.stem}" for c in CHAPTERS]
    assert [p.name for p in SOLUTIONS] == [c.name for c in CHAPTERS], "one per chapter"


# ---------------------------------------------------------------------------------------
# Colab: every notebook runs where only vit_tutorial[book] is installed, alone in a folder
# (tools/colab_check.py runs them so; these static checks fail fast in `make test`)

MAGIC = re.compile(r"^(\s*)[%!].*$", re.MULTILINE)
# What a Jupyter kernel brings besides the standard library, whatever is installed.
KERNEL_MODULES = {"IPython"}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception"}


def parse(code: str) -> ast.Module:
    """A code cell's syntax tree, its IPython magics (``%pip``, ``!ls``) read as ``pass``."""
    return ast.parse(MAGIC.sub(r"\1pass", code))


@functools.cache
def book_extra_modules() -> frozenset[str]:
    """Top-level modules that ``pip install vit_tutorial[book]`` makes importable: those of
    the package's dependencies, its ``book`` extra (with the extras it names) and all that
    they depend on, as installed in this environment."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = canonicalize_name(project["name"])
    queue = [*project["dependencies"], f"{project['name']}[book]"]
    wanted: set[str] = set()
    while queue:
        requirement = Requirement(queue.pop())
        name = canonicalize_name(requirement.name)
        if name == own:
            for extra in requirement.extras:
                queue += project["optional-dependencies"][extra]
            continue
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        if name not in wanted:
            wanted.add(name)
            queue += metadata.requires(name) or []  # PackageNotFoundError: run `make setup`
    return frozenset(
        module
        for module, names in metadata.packages_distributions().items()
        if any(canonicalize_name(n) in wanted for n in names)
    )


def catches_import_errors(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in IMPORT_ERRORS for t in types)


def calls(node: ast.AST, function: str) -> bool:
    """Whether ``node`` calls ``function`` (``f(...)`` or ``x.f(...)``) anywhere inside."""
    return any(
        isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == function or getattr(n.func, "attr", None) == function)
        for n in ast.walk(node)
    )


def unguarded_imports(tree: ast.AST, guarded: bool = False) -> list[str]:
    """Top-level names of the modules ``tree`` imports outside a guard: a ``try`` that
    catches ImportError, or an ``if`` that asks ``importlib.util.find_spec`` first."""
    if isinstance(tree, ast.Import) and not guarded:
        return [alias.name.split(".")[0] for alias in tree.names]
    if isinstance(tree, ast.ImportFrom) and not guarded and tree.level == 0:
        return [tree.module.split(".")[0]]
    found = []
    for field, value in ast.iter_fields(tree):
        inner = guarded
        if isinstance(tree, ast.Try) and field == "body":
            inner = guarded or any(catches_import_errors(h) for h in tree.handlers)
        if isinstance(tree, ast.If) and field in ("body", "orelse"):
            inner = guarded or calls(tree.test, "find_spec")
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                found += unguarded_imports(child, inner)
    return found


def stray_paths(tree: ast.AST, in_repository_file: bool = False) -> list[str]:
    """Strings that name a repository file relative to the notebook's folder: any ``..``
    path, and ``benchmarks/...`` outside a ``repository_file(...)`` call. Alone in a
    folder (Colab), neither exists; ``repository_file`` finds or downloads the file."""
    if isinstance(tree, ast.Constant) and isinstance(tree.value, str):
        text = tree.value
        climbs = ".." in re.split(r"[/\\]", text) and ("/" in text or text == "..")
        into_benchmarks = text.startswith("benchmarks/") and not in_repository_file
        return [text] if climbs or into_benchmarks else []
    if isinstance(tree, ast.Call) and calls(ast.Call(tree.func, [], []), "repository_file"):
        in_repository_file = True
    return [
        found
        for child in ast.iter_child_nodes(tree)
        for found in stray_paths(child, in_repository_file)
    ]


def test_the_colab_checks_can_fail():
    planted = parse(
        "import os, pytest\nfrom myst_nb import glue\nimport timm.layers\n"
        "try:\n    import wandb\nexcept ImportError:\n    pass\n"
        "if find_spec('accimage'):\n    import accimage\nelse:\n    import PIL\n"
        "if x:\n    %pip install nothing\n"
    )
    assert unguarded_imports(planted) == ["os", "pytest", "myst_nb", "timm"]
    planted = parse(
        'Path("..", "benchmarks")\nPath("../benchmarks/results")\nopen("a/../../b.json")\n'
        'json.loads(Path("benchmarks/results/a.json").read_text())\n'
        'repository_file("benchmarks/results/a.json")\n'
        'repository_file(f"benchmarks/results/{name}")\nprint("...", "(..., N, N)")\n'
    )
    assert stray_paths(planted) == [
        "..",
        "../benchmarks/results",
        "a/../../b.json",
        "benchmarks/results/a.json",
    ]


def test_the_book_extra_is_resolved_from_the_metadata():
    modules = book_extra_modules()
    assert {"torch", "torchvision", "sklearn", "skimage", "matplotlib", "einops"} <= modules
    assert {"numpy", "PIL", "scipy"} <= modules  # dependencies of dependencies
    assert not {"myst_nb", "pytest", "nbval", "vit_tutorial"} & modules


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
def test_imports_only_what_the_book_extra_installs(chapter):
    allowed = book_extra_modules() | set(sys.stdlib_module_names) | KERNEL_MODULES
    for cell in code_cells(chapter):
        missing = [m for m in unguarded_imports(parse(source(cell))) if m not in allowed]
        missing = [m for m in missing if m != "vit_tutorial"]
        assert not missing, (
            f"{', '.join(missing)} is not installed by vit_tutorial[book] (Colab has nothing "
            "else for sure): add it to the extra in pyproject.toml, or guard the import "
            "(chapter 5 does, for timm); for myst_nb's glue use vit_tutorial.notebook's\n"
            + source(cell)[:300]
        )


@pytest.mark.parametrize("chapter", NOTEBOOKS, ids=name)
def test_reads_repository_files_through_repository_file(chapter):
    for cell in code_cells(chapter):
        stray = stray_paths(parse(source(cell)))
        assert not stray, (
            f"{stray}: a notebook on Colab has no repository around it; read repository "
            'files as repository_file("benchmarks/results/...") (vit_tutorial.notebook)\n'
            + source(cell)[:300]
        )


def test_the_colab_cell_installs_from_the_setting_or_the_configured_repository():
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    cell = colab_cell_source()
    assert 'os.environ.get("VIT_TUTORIAL_INSTALL", f"git+{github}")' in cell
    assert f'github = "{repository["url"]}@{repository.get("branch", "main")}"' in cell
    assert '%pip install -q "vit_tutorial[book] @ {source}"' in cell
    assert max(len(line) for line in cell.splitlines()) <= 75
