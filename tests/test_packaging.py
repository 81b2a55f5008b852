"""The package installs alone: its wheel, built offline, holds the package and nothing else.

Built from a copy of the sources, so that the build leaves no ``build/`` or ``*.egg-info``
in the working tree; ``--no-build-isolation`` uses the setuptools of this environment, so
no network is needed.
"""

import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = {"torch", "einops", "numpy", "tqdm"}
EXTRAS = {"train", "book", "dev"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """Build the wheel offline from a copy of pyproject.toml, README.md and the package."""
    src = tmp_path_factory.mktemp("src")
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "vit_tutorial", src / "vit_tutorial", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "-q", "-w", str(out), str(src)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("vit_tutorial-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def _metadata(wheel: zipfile.ZipFile):
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode())


def test_runtime_dependencies_are_exactly_four_with_lower_bounds_only(wheel):
    requires = [r for r in _metadata(wheel).get_all("Requires-Dist") if ";" not in r]
    names = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requires}
    assert names == RUNTIME, requires
    for requirement in requires:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+>=[0-9][0-9.]*", requirement.replace(" ", "")), (
            f"{requirement}: runtime dependencies take lower bounds only (constraints.txt pins)"
        )


def test_declares_the_extras(wheel):
    assert set(_metadata(wheel).get_all("Provides-Extra")) == EXTRAS


def test_holds_the_package_and_its_subpackages_only(wheel):
    names = wheel.namelist()
    assert "vit_tutorial/__init__.py" in names
    assert "vit_tutorial/__main__.py" in names
    assert any(n.startswith("vit_tutorial/exercises/") for n in names), "exercises/ is missing"
    top = {n.split("/")[0] for n in names}
    assert not top & {"tests", "book", "benchmarks", "tools"}, sorted(top)
    assert top <= {"vit_tutorial"} | {n for n in top if n.endswith(".dist-info")}, sorted(top)
