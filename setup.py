"""Build hook: write the commit the package is built from into the built package.

Everything else about the package is in ``pyproject.toml``. A wheel built from a git checkout
(``pip install "vit_tutorial @ git+..."`` clones one) gets ``vit_tutorial/_commit.txt`` with
``git rev-parse HEAD``, so that ``vit_tutorial.notebook.repository_file`` fetches the
repository's files from the very commit the package came from. A copy without ``.git``
takes the commit from ``$GIT_COMMIT`` (as ``benchmarks/_results.py`` does); with neither,
or in an editable install (which reads the checkout's files), no file is written.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
COMMIT_FILE = "_commit.txt"  # read by vit_tutorial/notebook.py


def source_commit() -> str | None:
    """``HEAD`` of the git checkout this file is the root of, else ``$GIT_COMMIT``."""
    try:
        top, commit = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        top = commit = None
    if top is None or Path(top).resolve() != HERE:  # not a checkout, or another one's folder
        commit = os.environ.get("GIT_COMMIT", "").strip() or None
    return commit if commit and re.fullmatch(r"[0-9a-f]{40}", commit) else None


class BuildPyWithCommit(build_py):
    """``build_py`` that also writes ``vit_tutorial/_commit.txt`` into the build."""

    def run(self) -> None:
        super().run()
        commit = None if getattr(self, "editable_mode", False) else source_commit()
        if commit is not None:
            target = Path(self.build_lib, "vit_tutorial", COMMIT_FILE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n")


setup(cmdclass={"build_py": BuildPyWithCommit})
