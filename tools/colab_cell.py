"""The first cell of every chapter: on Colab it installs vit_tutorial, elsewhere it does nothing.

It installs ``vit_tutorial[book]`` from ``$VIT_TUTORIAL_INSTALL`` when that is set (any pip
requirement URL: ``tools/colab_check.py`` sets a ``file://`` wheel), otherwise from the
repository of ``_config.yml`` (the one place to change when publishing), as
``git+<url>@<branch>``. ``python tools/colab_cell.py --write book/*.ipynb``
(``make colab-cells``) rewrites the cell; ``tests/test_book.py`` fails when a chapter's cell
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


def write(path: Path) -> bool:
    """Rewrite the first cell of notebook ``path``; True when it changed."""
    nb = json.loads(path.read_text())
    cell = nb["cells"][0]
    if cell["cell_type"] != "code":
        raise ValueError(f"{path}: the first cell must be the Colab install cell (a code cell)")
    new = colab_cell_source()
    tags = cell.setdefault("metadata", {}).get("tags", [])
    if "".join(cell["source"]) == new and "remove-cell" in tags:
        return False
    cell["source"] = new.splitlines(keepends=True)
    # Colab shows the cell; the rendered book leaves it out (the intro explains it).
    cell["metadata"]["tags"] = sorted(set(tags) | {"remove-cell"})
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", nargs="+", type=Path, required=True, metavar="NOTEBOOK")
    for notebook in parser.parse_args().write:
        print(f"{notebook}: {'updated' if write(notebook) else 'already current'}")
