"""The package as a library: what importing it needs, and what it exports."""

import subprocess
import sys

import vit_tutorial
import vit_tutorial.exercises

OPTIONAL = ["torchvision", "sklearn", "timm", "matplotlib", "skimage"]


def test_import_needs_only_the_runtime_dependencies():
    # Make the optional packages unimportable, then import everything public.
    code = (
        "import sys\n"
        f"for name in {OPTIONAL!r}:\n"
        "    sys.modules[name] = None\n"
        "import vit_tutorial, vit_tutorial.exercises, vit_tutorial.train\n"
        "print(len(vit_tutorial.__all__))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 0


def test_every_exported_name_exists_and_is_unique():
    for module in (vit_tutorial, vit_tutorial.exercises):
        assert len(module.__all__) == len(set(module.__all__))
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"


# Public in their module, deliberately not at the root: helpers a reader does not import.
MODULE_ONLY = {"engine": {"resolve_device"}, "checkpoint": {"unwrap_model"}}


def test_each_module_exports_all_it_declares():
    import importlib

    for name in ["attention", "patches", "positional", "encoder", "vit", "interop", "data",
                 "engine", "checkpoint", "axial", "measure"]:
        module = importlib.import_module(f"vit_tutorial.{name}")
        for public in set(module.__all__) - MODULE_ONLY.get(name, set()):
            assert public in vit_tutorial.__all__, f"{name}.{public} is not re-exported"
        for private in MODULE_ONLY.get(name, set()):
            assert private in module.__all__ and private not in vit_tutorial.__all__
