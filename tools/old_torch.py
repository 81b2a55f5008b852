"""The unit tests and doctests under the oldest versions the metadata allows (`make old-torch`).

pyproject.toml and requirements.txt give lower bounds only, so that Colab's torch is kept; a
lower bound that no test runs is a guess. This check runs them: in a throwaway virtualenv with
the oldest Python of ``requires-python`` it installs ``constraints-oldest.txt`` (the floors of
the runtime dependencies and of the ``train`` extra, pinned exactly, and the test tools),
then the package itself from the working tree (a wheel, ``--no-deps``), prints the versions,
runs the unit tests and the doctests against that install (two processes of one thread each,
as ``make test`` runs them), and deletes the virtualenv, also
when something fails. The chapters are not run: they are pinned to constraints.txt.

PyPI's Linux torch is a CUDA build: each run downloads about 3 GB (torch and its nvidia-*
libraries) and unpacks 5.7 GB into the temporary folder. pip's cache is off
(``PIP_NO_CACHE_DIR``), so nothing is left behind, and each run downloads again. On a 2-core
machine installing takes 1 to 2 minutes and the tests 3 (idle) to 11 (shared) minutes.

    python tools/old_torch.py                                   # what `make old-torch` runs
    python tools/old_torch.py --pin torch==2.4.1 --pin torchvision==0.19.1  # try other versions
    python tools/old_torch.py -- -x tests/test_attention.py     # pytest arguments after --

The oldest Python is looked for as ``$OLD_PYTHON``, ``pythonX.Y`` on the PATH, then pyenv's
``versions/X.Y.*``. Without one the check warns and runs under this Python instead; under
``CI=true`` it fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINS = ROOT / "constraints-oldest.txt"
# What the wheel is built from (those present).
SOURCES = ["pyproject.toml", "setup.py", "README.md", "vit_tutorial"]
# Tests of the book rather than the package (its notebooks, its figure, its Colab check), which
# need the book's own pinned environment.
BOOK_TESTS = [
    "tests/test_book.py",
    "tests/test_colab_check.py",
    "tests/test_learning_path.py",
    "tests/test_stored_outputs.py",
]
# The test processes (pytest-xdist), one thread each.
WORKERS = 2
# pip prints one harmless line per package about the local mirror's layout.
PIP_NOISE = "is ignored: it is neither a file nor a directory"
# Run by the virtualenv's Python: the versions of its arguments, and what else is installed.
REPORT = """
import importlib.metadata as m, platform, re, sys
import vit_tutorial
print(f"{'Python':<14}{platform.python_version()}")
for name in sys.argv[1:]:
    print(f"{name:<14}{m.version(name)}")
print(f"{'vit_tutorial':<14}{vit_tutorial.__version__} from {vit_tutorial.__path__[0]}")
shown = set(sys.argv[1:]) | {"vit-tutorial"}
others = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in m.distributions()}
others = [f"{n}=={v}" for n, v in sorted(others.items()) if n not in shown and "nvidia" not in n]
print("also installed:", ", ".join(others))
"""


def canonical(name: str) -> str:
    """The normalised name of a distribution (PEP 503): ``Scikit_Learn`` -> ``scikit-learn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """``"2.5"`` and ``"2.5.0"`` alike, as ``(2, 5)``: a version with its trailing zeros cut."""
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def floors(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``{name: version}``: the ``>=`` of the runtime dependencies and of the ``train`` extra."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found = {}
    for requirement in project["dependencies"] + project["optional-dependencies"]["train"]:
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)\s*", requirement)
        if match is None:
            raise ValueError(f"{pyproject.name}: {requirement!r} is not of the form name>=version")
        found[canonical(match[1])] = match[2]
    return found


def oldest_python(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``"3.10"`` for ``requires-python = ">=3.10"``."""
    spec = tomllib.loads(pyproject.read_text())["project"]["requires-python"]
    match = re.fullmatch(r"\s*>=\s*(\d+\.\d+)\s*", spec)
    if match is None:
        raise ValueError(f"requires-python {spec!r} is not of the form >=X.Y")
    return match[1]


def pins(path: Path = PINS) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of ``path``."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                raise ValueError(f"{path.name}: {line!r} is not of the form name==version")
            found[canonical(name.strip())] = version.strip()
    return found


def drift(floors: dict[str, str], pins: dict[str, str]) -> list[str]:
    """Each floor that ``pins`` does not pin at exactly that version, in words."""
    problems = []
    for name, floor in floors.items():
        if name not in pins:
            problems.append(f"{name}>={floor} is not pinned in {PINS.name}")
        elif release(pins[name]) != release(floor):
            problems.append(f"{name}>={floor} but {PINS.name} pins {name}=={pins[name]}")
    return problems


def find_python(version: str) -> str | None:
    """A Python ``version`` (``"3.10"``): ``$OLD_PYTHON``, on the PATH, or pyenv's."""
    candidates = [os.environ.get("OLD_PYTHON", ""), shutil.which(f"python{version}") or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += [str(p) for p in sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}"))]
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"]
        try:
            result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if result.returncode == 0 and result.stdout.strip() == version:  # not a pyenv shim
            return candidate
    return None


def run(command: list[str], **kwargs) -> None:
    """Run ``command``; print its output less pip's noise; raise when it fails."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    output = "".join(
        line
        for line in (result.stdout + result.stderr).splitlines(keepends=True)
        if PIP_NOISE not in line
    )
    print(output, end="", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"old-torch: failed ({result.returncode}): {' '.join(command)}")


def size_of(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def check(python: str, versions: dict[str, str], pytest_args: list[str], tmp: Path) -> int:
    """Install ``versions`` and the package into a virtualenv in ``tmp``, run the tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp / "venv"
    bin_dir = venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    start = time.monotonic()
    run([python, "-m", "venv", str(venv)], env=env)
    requirements = tmp / "requirements.txt"
    requirements.write_text("".join(f"{name}=={v}\n" for name, v in versions.items()))
    print(f"Installing {len(versions)} pinned packages (with torch's CUDA libraries, ~3 GB)...")
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "-r", str(requirements)], env=env)

    # The package: a wheel built offline from a copy of the working tree (no build/ or
    # *.egg-info left here), by this environment's setuptools; installed without dependencies.
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
    wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    run([*wheel, "--no-index", "-w", str(tmp / "wheel"), str(src)], env=env)
    (built,) = (tmp / "wheel").glob("vit_tutorial-*.whl")
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", str(built)], env=env)
    installed = time.monotonic() - start

    print("Versions used:")
    report = [str(bin_dir / "python"), "-c", REPORT, *versions]
    run(report, env=env, cwd=tmp)  # cwd: not the checkout, whose vit_tutorial/ would come first
    package = subprocess.run(
        [str(bin_dir / "python"), "-c", "import vit_tutorial; print(vit_tutorial.__path__[0])"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        check=True,
    ).stdout.strip()

    # bin/pytest, not `python -m pytest`: the checkout must not come first on sys.path, so that
    # the tests and the doctests import the installed package.
    # Two processes of one thread each (pytest-xdist), the tests dealt out one by one (not file
    # by file, as `make test` deals its notebooks): the study's quick test, minutes long, then
    # runs beside the others.
    env["OMP_NUM_THREADS"] = "1"
    command = [str(bin_dir / "pytest"), "-c", "pyproject.toml", "--rootdir", "."]
    command += ["-p", "no:cacheprovider", "-p", "no:nbval", "-o", "addopts=--doctest-modules"]
    command += ["-n", str(WORKERS), "--dist", "load"]
    command += ["-q", "tests", package, *[f"--ignore={t}" for t in BOOK_TESTS], *pytest_args]
    print("$", " ".join(command), flush=True)
    tests = time.monotonic()
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    print(
        f"old-torch: installing took {installed / 60:.1f} min, the tests "
        f"{(time.monotonic() - tests) / 60:.1f} min; the virtualenv holds "
        f"{size_of(venv) / 1e9:.1f} GB (deleted now)"
    )
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="NAME==VERSION",
        help="install this version instead of constraints-oldest.txt's (to try another floor)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)

    wanted = floors()
    versions = pins()
    problems = drift(wanted, versions)
    if problems:
        print(
            "old-torch: constraints-oldest.txt and pyproject.toml disagree:", *problems, sep="\n  "
        )
        return 1
    for pin in args.pin:
        name, sep, version = pin.partition("==")
        if not sep:
            parser.error(f"--pin {pin!r} is not of the form NAME==VERSION")
        versions[canonical(name)] = version

    version = oldest_python()
    python = find_python(version)
    if python is None:
        message = f"no Python {version} here (requires-python) and OLD_PYTHON is not set"
        if os.environ.get("CI") == "true":
            print(f"old-torch: {message}", file=sys.stderr)
            return 1
        python, version = sys.executable, "{}.{}".format(*sys.version_info[:2])
        print(f"WARNING: {message}: requires-python is NOT checked; running under {python}")

    # A `kill` or Ctrl-C still deletes the virtualenv: SIGTERM becomes an exception too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="old-torch-"))
    try:
        code = check(python, versions, args.pytest_args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pinned = ", ".join(f"{name} {v}" for name, v in versions.items() if name in wanted)
    verdict = "passed" if code == 0 else f"FAILED (pytest exit {code})"
    print(
        f"old-torch: {verdict} under Python {version} with {pinned}, "
        f"in {(time.monotonic() - start) / 60:.1f} min"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
