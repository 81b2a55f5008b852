"""Sphinx extension: serve MathJax from the built site instead of a CDN.

The MathJax 3 files come from the ``django-static-mathjax`` wheel (installed by
``requirements.txt``). At the end of an HTML build its ``es5`` folder is copied to
``_static/mathjax``, which is where ``mathjax_path: mathjax/tex-chtml.js`` in
``_config.yml`` points.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError


def mathjax_source() -> Path:
    """The folder holding MathJax's ``tex-chtml.js`` inside the installed wheel."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "MathJax is not installed: run `pip install django-static-mathjax` (make does this)"
        )
    es5 = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if not (es5 / "tex-chtml.js").is_file():
        raise ExtensionError(f"no tex-chtml.js in {es5}; is django-static-mathjax complete?")
    return es5


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "mathjax"
    if not (target / "tex-chtml.js").is_file():
        shutil.copytree(mathjax_source(), target, dirs_exist_ok=True)


def setup(app: Sphinx) -> dict:
    mathjax_source()  # fail early, before a long build, if MathJax is missing
    app.connect("build-finished", copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
