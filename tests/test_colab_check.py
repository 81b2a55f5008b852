"""Tests of tools/colab_check.py's comparison: what it takes from strict nbval, and glue."""

import copy
from pathlib import Path

import nbformat
import pytest

from colab_check import comparable, compare, foreign_cpu

ROOT = Path(__file__).resolve().parents[1]


def stream(text, name="stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def glue_display(name, value):
    """What myst-nb's glue stores (display=False): a display with its scrapbook name."""
    data = {"application/papermill.record/text/plain": repr(value)}
    return nbformat.v4.new_output(
        "display_data", data=data, metadata={"scrapbook": {"name": name, "mime_prefix": ""}}
    )


def notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)", outputs=list(o)) for o in cells]
    return nb


def test_the_same_outputs_pass_and_a_changed_one_is_named():
    stored = notebook([stream("a 1.00\nb 2\n")], [stream("same\n")])
    assert compare(stored, copy.deepcopy(stored)) == []
    ran = copy.deepcopy(stored)
    ran.cells[0].outputs = [stream("a 1.01\nb 2\n")]
    (difference,) = compare(stored, ran)
    assert difference.startswith("cell 0 (print(1)): stdout: line 1")
    assert "'a 1.00'" in difference and "'a 1.01'" in difference


def test_streams_are_merged_and_images_left_out_as_nbval_does():
    png = nbformat.v4.new_output("display_data", data={"image/png": "AAA", "text/plain": "<F>"})
    other = nbformat.v4.new_output("display_data", data={"image/png": "BBB", "text/plain": "<F>"})
    stored = notebook([stream("a\nb\n"), png])
    ran = notebook([stream("a\n"), stream("b\n"), other])
    assert compare(stored, ran) == []
    ran.cells[0].outputs[2].data["text/plain"] = "<G>"
    assert compare(stored, ran) != []


def test_glue_values_are_compared_as_printed_without_myst_nb():
    stored = notebook([stream("x = 3\n"), glue_display("gap", "0.25")])
    ran = notebook([stream("x = 3\ngap: 0.25\n")])  # glue without myst-nb prints
    assert compare(stored, ran) == []
    ran = notebook([stream("x = 3\ngap: 0.26\n")])  # another CPU's value
    (difference,) = compare(stored, ran)
    assert "glue 'gap': stored ['0.25'], ran ['0.26']" in difference
    assert compare(stored, notebook([stream("x = 3\n")])) != []  # not glued at all
    stored = notebook([stream("x = 3\n"), glue_display("ratio", 90.62858910644069)])
    assert compare(stored, notebook([stream("x = 3\nratio: 90.62858910644069\n")])) == []
    # a line of another name is output like any other
    ran = notebook([stream("x = 3\ngap: 0.25\nspread: 4\n")])
    assert compare(stored, ran) != []
    # a cell that glued nothing keeps every line
    stored = notebook([stream("x = 3\n")])
    ran = notebook([stream("x = 3\ngap: 0.25\n")])
    assert compare(stored, ran) != []


@pytest.mark.parametrize("tag", ["nbval-skip", "nbval-ignore-output"])
def test_cells_nbval_does_not_compare_are_not_compared(tag):
    stored = notebook([stream("live 1.0 s\n")])
    stored.cells[0].metadata["tags"] = [tag]
    assert compare(stored, notebook([stream("live 2.0 s\n")])) == []


def test_the_install_cell_is_not_compared():
    stored = notebook([])
    stored.cells[0].source = "# Colab only: installs vit_tutorial (from ...)\n%pip install x"
    ran = notebook([stream("Note: you may need to restart the kernel\n")])
    assert compare(stored, ran) == []


def test_a_missing_or_extra_output_is_named():
    stored = notebook([stream("a\n"), stream("warning\n", name="stderr")])
    (difference,) = compare(stored, notebook([stream("a\n")]))
    assert "missing ['stderr']" in difference


def test_every_stored_notebook_compares_equal_to_itself():
    for path in sorted(ROOT.glob("book/**/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert compare(nb, copy.deepcopy(nb)) == [], path
        for cell in nb.cells:
            if cell.cell_type == "code":
                comparable(cell.outputs, set())  # every stored output is understood


def test_the_foreign_cpu_is_the_one_make_foreign_cpu_sets():
    makefile = (ROOT / "Makefile").read_text()
    for name, value in foreign_cpu("avx2").items():
        assert f"{name}={'$(FOREIGN_CPU)' if value == 'avx2' else value}" in makefile
    assert foreign_cpu("native") == {"OMP_NUM_THREADS": "1"}
