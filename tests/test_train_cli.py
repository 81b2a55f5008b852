"""Tests for vit_tutorial/train.py: the command line, and 2-process DDP on the CPU."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from vit_tutorial.recipes import RECIPES
from vit_tutorial.train import main
from vit_tutorial.vit import VisionTransformer

TINY = ["--preset", "digits-tiny", "--no-progress"]


def test_main_trains_and_prints_the_test_accuracy(capsys):
    result = main(TINY)
    out = capsys.readouterr().out
    assert f"test accuracy {100 * result.test_accuracy:.2f}%" in out and "training time" in out
    assert result.test_accuracy > 0.3  # 2 epochs of a tiny model: far above chance (0.1)
    assert len(result.history["epoch"]) == 2
    assert result.train_seconds == pytest.approx(sum(result.history["time"]))


def test_fashion_mnist_from_the_command_line_validates_on_its_own_split(capsys):
    argv = ["--dataset", "fashion-mnist", "--preset", "fashion-mnist-tiny", "--no-progress"]
    result = main(argv)
    assert "preset fashion-mnist-tiny" in capsys.readouterr().out
    assert result.test_accuracy > 0.3  # one epoch of a tiny model: far above chance (0.1)
    assert 0.3 < result.history["val_acc"][-1] < 1  # the 5,000 held-out training images


def test_checkpoint_and_resume_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "run.pt"
    first = main([*TINY, "--checkpoint", str(path)])
    assert torch.load(path, weights_only=True)["epoch"] == 2
    with pytest.raises(SystemExit):
        main([*TINY, "--checkpoint", str(path)])
    assert "exists: pass --resume" in capsys.readouterr().err
    again = main([*TINY, "--checkpoint", str(path), "--resume"])  # finished: nothing to redo
    assert again.history == first.history
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            first.model.state_dict().values(), again.model.state_dict().values(), strict=True
        )
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dataset", "cifar10", "--preset", "digits"], "preset 'digits' is for dataset 'digits'"),
        (["--resume"], "--resume needs --checkpoint PATH"),
        (["--preset", "nope"], "invalid choice: 'nope'"),
    ],
)
def test_bad_command_lines_exit_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "argument --epochs: must be an integer >= 1, got '0'"),
        (["--epochs", "-2"], "argument --epochs: must be an integer >= 1, got '-2'"),
        (["--epochs", "1.5"], "argument --epochs: must be an integer >= 1, got '1.5'"),
        (["--batch-size", "0"], "argument --batch-size: must be an integer >= 1, got '0'"),
        (["--batch-size", "-8"], "argument --batch-size: must be an integer >= 1, got '-8'"),
        (["--lr", "0"], "argument --lr: must be a finite number > 0, got '0'"),
        (["--lr", "-0.5"], "argument --lr: must be a finite number > 0, got '-0.5'"),
        (["--lr=-1e-3"], "argument --lr: must be a finite number > 0, got '-1e-3'"),
        (["--lr", "nan"], "argument --lr: must be a finite number > 0, got 'nan'"),
        (["--device", "gpu"], "argument --device: unknown device 'gpu'"),
        (["--device", "cuda:x"], "argument --device: unknown device 'cuda:x'"),
        (["--amp", "fp16", "--device", "cpu"], "--amp fp16 needs a CUDA device, got --device cpu"),
    ],
)
def test_bad_values_are_one_line_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"python -m vit_tutorial.train: error: {message}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "--device cuda: CUDA is not available" in capsys.readouterr().err


def test_resume_from_a_missing_checkpoint_names_the_path(tmp_path, capsys):
    path = tmp_path / "missing.pt"
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, "--checkpoint", str(path), "--resume"])
    assert exit_info.value.code == 2
    assert f"--resume: {path} does not exist" in capsys.readouterr().err.splitlines()[-1]
    assert not path.exists()


def test_module_runs_as_a_script():
    out = subprocess.run(
        [sys.executable, "-m", "vit_tutorial.train", *TINY, "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "preset digits-tiny (seed 0): test accuracy" in out


def test_torchrun_two_processes_end_with_identical_weights(tmp_path):
    script = tmp_path / "run_rank.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        import torch
        from vit_tutorial.train import main
        result = main(sys.argv[2:])
        torch.save(result.model.state_dict(), os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.pt"))
    """)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(script),
        str(tmp_path),
        *TINY,
        "--epochs",
        "1",
        "--checkpoint",
        str(tmp_path / "ckpt.pt"),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    rank0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1.pt", weights_only=True)
    for name, weight in rank0.items():
        assert torch.equal(weight, rank1[name]), name  # DDP kept the replicas in step
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)  # written by rank 0 only
    assert all(torch.equal(saved["model"][k], v) for k, v in rank0.items())
    assert saved["history"]["epoch"] == [1]
    torch.manual_seed(0)  # the initial weights of seed 0: training moved them
    initial = VisionTransformer(
        image_size=8, in_channels=1, num_classes=10, **RECIPES["digits-tiny"].model
    ).state_dict()
    assert not torch.equal(initial["patch_embed.proj.weight"], rank0["patch_embed.proj.weight"])
    lines = [line for line in run.stdout.splitlines() if "test accuracy" in line]
    assert len(lines) == 1 and "2 processes" in lines[0]  # only rank 0 prints
