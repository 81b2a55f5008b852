"""The package installs alone: its wheel, built offline, holds the package and nothing else.

Built from a copy of the sources, so that the build leaves no ``build/`` or ``*.egg-info``
in the working tree; ``--no-build-isolation`` uses the setuptools of this environment, so
no network is needed. ``setup.py`` writes the commit the wheel is built from into it
(``vit_tutorial/_commit.txt``, read by ``vit_tutorial.notebook``).
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = {"torch", "einops", "numpy"}
EXTRAS = {"train", "book", "dev"}


def copy_sources(src: Path) -> Path:
    """pyproject.toml, setup.py, README.md and the package, copied into ``src``."""
    src.mkdir(parents=True, exist_ok=True)
    for name in ["pyproject.toml", "setup.py", "README.md"]:
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "vit_tutorial", src / "vit_tutorial", ignore=shutil.ignore_patterns("__pycache__")
    )
    return src


def build_wheel(src: Path, out: Path, git_commit: str | None = None) -> Path:
    """Build the wheel of ``src`` offline into ``out``, with ``$GIT_COMMIT`` as given."""
    env = {k: v for k, v in os.environ.items() if k != "GIT_COMMIT"}
    if git_commit is not None:
        env["GIT_COMMIT"] = git_commit
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "-q", "-w", str(out), str(src)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("vit_tutorial-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """Build the wheel offline from a copy of the sources."""
    src = copy_sources(tmp_path_factory.mktemp("src"))
    with zipfile.ZipFile(build_wheel(src, tmp_path_factory.mktemp("wheel"))) as archive:
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


COMMIT_FILE = "vit_tutorial/_commit.txt"


def test_a_wheel_built_in_a_checkout_records_its_commit(tmp_path):
    src = copy_sources(tmp_path / "src")
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "sources"]):
        subprocess.run(git + command, cwd=src, check=True, capture_output=True, timeout=60)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=src, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = build_wheel(src, tmp_path / "wheel", git_commit="f" * 40)  # git comes first
    with zipfile.ZipFile(path) as archive:
        assert archive.read(COMMIT_FILE).decode().strip() == head
        archive.extractall(tmp_path / "installed")
    # what vit_tutorial.notebook downloads from, where this wheel is installed
    code = "from vit_tutorial.notebook import package_commit; print(package_commit())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == head


@pytest.mark.parametrize("git_commit", [None, "0123456789abcdef0123456789abcdef01234567"])
def test_a_copy_without_git_records_git_commit_or_nothing(tmp_path, git_commit):
    path = build_wheel(copy_sources(tmp_path / "src"), tmp_path / "wheel", git_commit)
    with zipfile.ZipFile(path) as archive:
        if git_commit is None:
            assert COMMIT_FILE not in archive.namelist()
        else:
            assert archive.read(COMMIT_FILE).decode().strip() == git_commit


def _bounds(requirements: list[str], operator: str) -> dict[str, str]:
    """``{name: version}`` of the ``name<operator>version`` requirements among ``requirements``."""
    found = {}
    for line in requirements:
        requirement = line.split("#")[0].replace(" ", "")
        match = re.fullmatch(rf"([A-Za-z0-9_.-]+){re.escape(operator)}([0-9][0-9.]*)", requirement)
        if match:
            found[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return found


def test_the_old_torch_check_installs_exactly_the_floors_that_the_metadata_states():
    """`make old-torch` installs constraints-oldest.txt: it must pin each floor of pyproject.toml
    (runtime dependencies and `train` extra), which requirements.txt must state too."""
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml: Python 3.11+")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = _bounds(project["dependencies"] + project["optional-dependencies"]["train"], ">=")
    assert set(floors) == RUNTIME | {"torchvision", "scikit-learn"}, floors
    pinned = _bounds((ROOT / "constraints-oldest.txt").read_text().splitlines(), "==")
    required = _bounds((ROOT / "requirements.txt").read_text().splitlines(), ">=")
    for name, floor in floors.items():
        assert name in pinned and Version(pinned[name]) == Version(floor), (
            f"pyproject.toml has {name}>={floor} but constraints-oldest.txt pins "
            f"{name}=={pinned.get(name)}: make old-torch must install the floor"
        )
        assert name in required and Version(required[name]) == Version(floor), (
            f"pyproject.toml has {name}>={floor} but requirements.txt {name}>={required.get(name)}"
        )
    import old_torch  # tools/old_torch.py reads the same files

    assert old_torch.floors() == floors and old_torch.pins() == pinned
    assert old_torch.drift(floors, pinned) == []
