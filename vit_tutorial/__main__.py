"""``python -m vit_tutorial``: print an environment report to paste into a bug report;
``python -m vit_tutorial train ...`` and ``finetune ...`` are the command line's
(:mod:`vit_tutorial.cli`, ``vit-tutorial``).

The report names the package's version and location, Python and the platform, the versions
of the packages the book uses ("not installed" when one is missing), what torch can run on,
and whether the offline datasets are present. It imports nothing optional at import time,
and never fails because an optional package is missing.
"""

import importlib
import os
import platform
import sys
from pathlib import Path

__all__ = ["report", "main"]

# (name shown, module imported) for each package whose version the report names.
PACKAGES = [
    (name.replace("sklearn", "scikit-learn"), name)
    for name in ["torch", "torchvision", "timm", "numpy", "einops", "sklearn", "matplotlib"]
]
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
NOT_INSTALLED = "not installed"


def _module(name: str):
    """The module ``name``, or None when importing it raises (missing, blocked, broken)."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def report() -> str:
    """The environment report, one ``name: value`` line per fact, without a final newline."""
    import vit_tutorial

    rows = [
        ("vit_tutorial", vit_tutorial.__version__),
        ("location", str(Path(vit_tutorial.__file__).resolve().parent)),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", platform.platform()),
    ]
    for shown, name in PACKAGES:
        module = _module(name)
        version = NOT_INSTALLED if module is None else getattr(module, "__version__", "unknown")
        rows.append((shown, str(version)))
    torch = _module("torch")
    if torch is None:
        rows += [("torch threads", NOT_INSTALLED), ("CUDA available", NOT_INSTALLED)]
    else:
        cuda = torch.cuda.is_available()
        rows += [("torch threads", str(torch.get_num_threads())), ("CUDA available", str(cuda))]
        if cuda:
            rows.append(("CUDA device", torch.cuda.get_device_name(0)))
            rows.append(("CUDA bf16 supported", str(torch.cuda.is_bf16_supported())))
        mps = getattr(torch.backends, "mps", None)
        rows.append(("MPS available", str(mps is not None and mps.is_available())))
    datasets = _module("sklearn.datasets")
    has_digits = datasets is not None and hasattr(datasets, "load_digits")
    digits = "present (scikit-learn)" if has_digits else "absent (scikit-learn not installed)"
    try:
        fashion = FASHION_MNIST_DIR.is_dir() and any(FASHION_MNIST_DIR.iterdir())
    except OSError:  # unreadable: as good as absent
        fashion = False
    fashion_text = f"{'present' if fashion else 'absent'} ({FASHION_MNIST_DIR})"
    rows += [("digits dataset", digits), ("Fashion-MNIST files", fashion_text)]
    rows.append(("Colab", str("google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ)))
    width = max(len(name) for name, _ in rows) + 1
    return "\n".join(f"{name + ':':<{width}} {value}" for name, value in rows)


PROG = "python -m vit_tutorial"
HELP = f"""usage: {PROG} [-h] [COMMAND ...]

With no arguments, print a report of this environment (versions, devices, datasets) to
paste into a bug report. COMMAND is the command line's: train or finetune
(vit-tutorial COMMAND --help lists their options)."""


def main(argv: list[str] | None = None) -> int:
    """Print the environment report, or run ``train``/``finetune``; the exit status (2 for
    arguments it does not know, after one line naming them)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("train", "finetune"):
        from vit_tutorial.cli import main as cli_main  # torch: imported only to train

        cli_main(argv, name=PROG)
        return 0
    if argv in (["-h"], ["--help"]):
        print(HELP)
        return 0
    if argv:
        usage = HELP.split("\n")[0]
        print(f"{usage}\n{PROG}: error: unknown arguments {' '.join(argv)!r}", file=sys.stderr)
        return 2
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
