"""Nothing in the book scrolls sideways at the width the browser check uses (1280 px).

Code cells fit: their lines have at most 75 characters (``book/ruff.toml``), what the
text column holds in its 14-px monospace. What cannot be made to fit wraps instead, through
``static/page_width.css``: a notebook's printed output, and on a page of API reference
(one that holds autodoc entries) every code block and doctest of the docstrings, and any
signature or value longer than the column (long signatures are also split one parameter a
line by ``maximum_signature_line_length`` in ``_config.yml``). ``tools/check_built_book.py``
fails on any block still wider than its column.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

STATIC = Path(__file__).resolve().parent / "static"
WRAP = "page-width-wrap"  # the class page_width.css wraps


def _add_static_path(app: Sphinx, config) -> None:
    config.html_static_path.append(str(STATIC))


def _wrap_docstring_code(app: Sphinx, doctree: nodes.document) -> None:
    """On a page of API reference, mark every code block and doctest to wrap: they come
    from the package's docstrings (module docstrings included), not from a code cell."""
    if next(iter(doctree.findall(addnodes.desc)), None) is None:
        return
    for node in doctree.findall(lambda n: isinstance(n, nodes.literal_block | nodes.doctest_block)):
        node["classes"].append(WRAP)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _add_static_path)
    app.connect("doctree-read", _wrap_docstring_code)
    app.add_css_file("page_width.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
