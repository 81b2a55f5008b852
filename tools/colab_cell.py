"""The first two cells of every notebook: a Colab badge, and the cell that installs vit_tutorial.

The badge is a markdown cell of its own tagged ``remove-cell``: GitHub and Jupyter show it,
and the rendered book, which loads nothing from the network, leaves it out (its pages have
Jupyter Book's own launch button). The second cell, on Colab, installs vit_tutorial;
elsewhere it does nothing. It installs ``vit_tutorial[book]`` from ``$VIT_TUTORIAL_INSTALL`` when that is set (any pip
requirement URL: ``tools/colab_check.py`` sets a ``file://`` wheel), otherwise from the
repository of ``_config.yml`` (the one place to change when publishing), as
``git+<url>@<branch>``. ``python tools/colab_cell.py --write book/*.ipynb``
(``make colab-cells``) rewrites both cells; ``tests/test_book.py`` fails when a chapter's cell
has drifted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def repository() -> tuple[str, str]:
    """``(url, branch)`` of the repository named in ``_config.yml``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return config["repository"]["url"], config["repository"].get("branch", "main")


def colab_cell_source() -> str:
    url, branch = repository()
    return (
        "# Colab only: installs vit_tutorial (from $VIT_TUTORIAL_INSTALL if set,\n"
        "# else from GitHub); elsewhere it does nothing.\n"
        "import os\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    github = "{url}@{branch}"\n'
        '    source = os.environ.get("VIT_TUTORIAL_INSTALL", f"git+{github}")\n'
        '    %pip install -q "vit_tutorial[book] @ {source}"'
    )


BADGE_ID = "colab-badge"  # the badge cell's id: the same in every notebook


def badge_cell_source(path: Path) -> str:
    """The "Open in Colab" badge of notebook ``path``, linking its file in the repository."""
    url, branch = repository()
    github = url.removeprefix("https://github.com/")
    relative = path.resolve().relative_to(ROOT).as_posix()
    return (
        "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{github}/blob/{branch}/{relative})"
    )


def _set(cell: dict, source: str) -> bool:
    """Give ``cell`` this source and the ``remove-cell`` tag; True when that changed it."""
    tags = cell.setdefault("metadata", {}).get("tags", [])
    if "".join(cell["source"]) == source and "remove-cell" in tags:
        return False
    cell["source"] = source.splitlines(keepends=True)
    # Colab shows the cell; the rendered book leaves it out (the intro explains it).
    cell["metadata"]["tags"] = sorted(set(tags) | {"remove-cell"})
    return True


def write(path: Path) -> bool:
    """Rewrite the badge and the install cell of notebook ``path``; True when it changed."""
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    inserted = cells[0]["cell_type"] == "code"  # the install cell comes first: no badge yet
    if inserted:
        cells.insert(0, {"cell_type": "markdown", "id": BADGE_ID, "metadata": {}, "source": []})
    if cells[0]["cell_type"] != "markdown" or cells[1]["cell_type"] != "code":
        raise ValueError(
            f"{path}: the first cells must be the Colab badge (markdown) and the Colab "
            f"install cell (code), got {cells[0]['cell_type']} and {cells[1]['cell_type']}"
        )
    changed = _set(cells[0], badge_cell_source(path))
    changed = _set(cells[1], colab_cell_source()) or changed
    if inserted or changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return inserted or changed


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", nargs="+", type=Path, required=True, metavar="NOTEBOOK")
    for notebook in parser.parse_args().write:
        print(f"{notebook}: {'updated' if write(notebook) else 'already current'}")
