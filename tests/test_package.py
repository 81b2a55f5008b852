"""The package as a library: what importing it needs, and what it exports.

Every module is found by walking the package, so a new module is checked without being
listed here.
"""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import vit_tutorial

OPTIONAL = ["torchvision", "sklearn", "timm", "matplotlib", "skimage"]
MODULES = sorted(
    info.name for info in pkgutil.walk_packages(vit_tutorial.__path__, "vit_tutorial.")
)
# Private modules (``_common``) and ``__main__`` need no ``__all__``.
PUBLIC = [m for m in MODULES if not m.rpartition(".")[2].startswith("_")]


def test_the_walk_finds_the_modules():
    # Guards the walk itself: if it found nothing, every parametrized test would pass.
    for name in (
        "vit_tutorial.attention",
        "vit_tutorial.train",
        "vit_tutorial.exercises",
        "vit_tutorial.exercises.ch01",
        "vit_tutorial.exercises._common",
    ):
        assert name in MODULES
    assert "vit_tutorial.exercises._common" not in PUBLIC


@pytest.fixture(scope="module")
def import_errors() -> dict[str, str]:
    """Import every module in one subprocess where the optional packages are unimportable."""
    code = (
        "import importlib, json, sys, traceback\n"
        f"for name in {OPTIONAL!r}:\n"
        "    sys.modules[name] = None  # import name now raises ImportError\n"
        "errors = {}\n"
        f"for module in {MODULES!r}:\n"
        "    try:\n"
        "        importlib.import_module(module)\n"
        "    except Exception:\n"
        "        errors[module] = traceback.format_exc(limit=-3)\n"
        "print(json.dumps(errors))\n"
    )
    # The subprocess must import this copy of the package, not another installed one.
    here = str(Path(vit_tutorial.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", MODULES)
def test_imports_with_the_runtime_dependencies_only(module, import_errors):
    assert module not in import_errors, (
        f"{module} needs an optional package ({', '.join(OPTIONAL)}) at import time; import it "
        f"inside the function that uses it:\n{import_errors.get(module)}"
    )


@pytest.mark.parametrize("module", PUBLIC)
def test_declares_all_and_every_name_in_it_exists(module):
    mod = importlib.import_module(module)
    assert hasattr(mod, "__all__"), f"{module} has no __all__"
    names = list(mod.__all__)
    assert len(names) == len(set(names)), f"{module}.__all__ lists a name twice"
    for name in names:
        assert isinstance(name, str), f"{module}.__all__ holds {name!r}, not a name"
        assert hasattr(mod, name), f"{module}.{name} is in __all__ but missing"


def test_root_exports_only_names_that_a_module_declares():
    """The rule for the root: every name in ``vit_tutorial.__all__`` is importable from the
    root and is the very object that some submodule lists in its own ``__all__``."""
    declared: dict[str, list[object]] = {}
    for module in MODULES:
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", []):
            if hasattr(mod, name):  # a missing name fails the test above
                declared.setdefault(name, []).append(getattr(mod, name))
    assert len(vit_tutorial.__all__) == len(set(vit_tutorial.__all__))
    for name in vit_tutorial.__all__:
        assert hasattr(vit_tutorial, name), f"vit_tutorial.{name} is in __all__ but missing"
        assert name in declared, f"vit_tutorial.{name} is not in any submodule's __all__"
        assert any(getattr(vit_tutorial, name) is obj for obj in declared[name]), (
            f"vit_tutorial.{name} is not the object its submodule exports"
        )
