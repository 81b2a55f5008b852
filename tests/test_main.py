"""``python -m vit_tutorial``: the environment report readers paste into bug reports."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import vit_tutorial
from vit_tutorial import __main__ as env_report

ROOT = Path(vit_tutorial.__file__).resolve().parents[1]
OPTIONAL = ["torchvision", "sklearn", "timm", "matplotlib", "skimage"]
KEYS = [
    "vit_tutorial:",
    "location:",
    "Python:",
    "platform:",
    "torch:",
    "numpy:",
    "torch threads:",
    "CUDA available:",
    "MPS available:",
    "digits dataset:",
    "Fashion-MNIST files:",
    "Colab:",
]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    """Run this Python on ``args`` with this copy of the package first on the path.

    In ``ROOT``, since ``-m`` and ``-c`` put the working directory before ``PYTHONPATH``: from
    a checkout, an installed copy (``make old-torch``) would lose to the checkout's.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def _lines(stdout: str) -> dict[str, str]:
    """Parse ``name: value`` lines into a dict."""
    return dict(
        (name.strip(), value.strip())
        for name, _, value in (ln.partition(":") for ln in stdout.splitlines())
    )


@pytest.mark.slow
def test_prints_the_report_and_exits_0():
    result = _run(["-m", "vit_tutorial"])
    assert result.returncode == 0, result.stderr
    for key in KEYS:
        assert any(line.startswith(key) for line in result.stdout.splitlines()), key
    lines = _lines(result.stdout)
    assert lines["vit_tutorial"] == vit_tutorial.__version__
    assert lines["location"] == str(ROOT / "vit_tutorial")


def test_reports_missing_optional_packages_as_not_installed():
    code = (
        "import runpy, sys\n"
        f"for name in {OPTIONAL!r}:\n"
        "    sys.modules[name] = None  # import name now raises ImportError\n"
        "runpy.run_module('vit_tutorial', run_name='__main__')\n"
    )
    result = _run(["-c", code])
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    for name in ["torchvision", "timm", "scikit-learn", "matplotlib"]:
        assert lines[name] == "not installed", result.stdout
    assert lines["digits dataset"].startswith("absent"), result.stdout
    assert lines["torch"] not in ("", "not installed")


def test_reports_fashion_mnist_files_when_present(tmp_path, monkeypatch):
    monkeypatch.setattr(env_report, "FASHION_MNIST_DIR", tmp_path)
    assert "Fashion-MNIST files: absent" in env_report.report()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    assert "Fashion-MNIST files: present" in env_report.report()


def test_help_describes_the_report_and_names_the_commands(capsys):
    assert env_report.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m vit_tutorial") and "train or finetune" in out
    assert "vit_tutorial:" not in out  # the help, not the report


def test_unknown_arguments_are_one_line_and_exit_2(capsys):
    assert env_report.main(["trian", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "python -m vit_tutorial: error: unknown arguments 'trian --epochs 1'"


def test_train_and_finetune_run_the_command_line(capsys, monkeypatch):
    """``python -m vit_tutorial train ...`` trains (here: its usage error names itself)."""
    monkeypatch.setattr("vit_tutorial.cli.train_recipe", lambda *a, **k: pytest.fail("trained"))
    for command in (["train"], ["finetune", "timm:x", "--image-folder", "."]):
        with pytest.raises(SystemExit) as exit_info:
            env_report.main([*command, "--seed", "-1"])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith(f"python -m vit_tutorial {command[0]}: error: argument --seed")
