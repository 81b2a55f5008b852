"""Tests for vit_tutorial/train.py: the command line, fine-tuning from it, and 2-process DDP on
the CPU."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from vit_tutorial.finetune import load_pretrained
from vit_tutorial.interop import max_abs_logit_difference
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


# --- fine-tuning: --finetune SOURCE --image-folder DIR ----------------------------------------

# ViT-Ti/16's architecture with random weights (offline) at 32×32: 4 patches, a fast run.
FINETUNE = [
    "--finetune",
    "timm:vit_tiny_patch16_224",
    "--random-weights",
    "--image-size",
    "32",
    "--epochs",
    "1",
    "--batch-size",
    "4",
    "--no-progress",
]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """3 classes × 6 PNG images of 20×24 pixels, one uniform colour each; one greyscale."""
    from PIL import Image

    root = tmp_path_factory.mktemp("photos")
    for c, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        (root / f"class{c}").mkdir()
        for i in range(6):
            mode, value = ("L", 90) if (c, i) == (0, 0) else ("RGB", colour)
            Image.new(mode, (24, 20), value).save(root / f"class{c}" / f"{i}.png")
    return root


def test_finetune_trains_prints_and_saves_a_reloadable_checkpoint(photos, tmp_path, capsys):
    path = tmp_path / "ft.pt"
    result = main([*FINETUNE, "--image-folder", str(photos), "--checkpoint", str(path)])
    out = capsys.readouterr().out
    assert "finetune timm:vit_tiny_patch16_224 (full, seed 0): validation accuracy" in out
    assert f"validation accuracy {100 * result.test_accuracy:.2f}%" in out
    assert result.model.config.image_size == 32 and result.model.config.num_classes == 3
    assert result.history["epoch"] == [1] and result.history["lr"] == [pytest.approx(1e-4)]
    model, mean, std = load_pretrained(path)  # the checkpoint rebuilds, with timm's 0.5s
    assert (mean, std) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert torch.load(path, weights_only=True)["extra"]["classes"] == ["class0", "class1", "class2"]
    assert max_abs_logit_difference(model, result.model, torch.randn(2, 3, 32, 32)) == 0


def test_finetune_a_checkpoint_with_a_linear_probe(photos, tmp_path, capsys):
    path = tmp_path / "ft.pt"
    main([*FINETUNE, "--image-folder", str(photos), "--checkpoint", str(path)])
    start = load_pretrained(path)[0].state_dict()
    argv = ["--finetune", str(path), "--linear-probe", "--epochs", "1", "--no-progress"]
    result = main([*argv, "--image-folder", str(photos), "--val-folder", str(photos)])
    assert f"finetune {path} (linear probe, seed 0): validation accuracy" in capsys.readouterr().out
    assert result.history["lr"] == [pytest.approx(1e-3)]  # the linear probe's default
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, start[name]) != name.startswith("head."), name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--finetune", "timm:x"], "--finetune needs --image-folder DIR"),
        (
            ["--finetune", "timm:x", "--dataset", "digits"],
            "--finetune trains on --image-folder DIR; --dataset does not apply",
        ),
        (
            ["--finetune", "timm:x", "--preset", "digits"],
            "--finetune trains on --image-folder DIR; --preset does not apply",
        ),
        (["--image-folder", "PHOTOS"], "--image-folder needs --finetune SOURCE"),
        (["--linear-probe"], "--linear-probe needs --finetune SOURCE"),
        (["--random-weights"], "--random-weights needs --finetune SOURCE"),
        (["--image-size", "32"], "--image-size needs --finetune SOURCE"),
        (["--image-size", "0"], "argument --image-size: must be an integer >= 1, got '0'"),
        (
            ["--finetune", "timm:x", "--image-folder", "MISSING"],
            "--image-folder MISSING is not a folder",
        ),
        (
            ["--finetune", "nope", "--image-folder", "PHOTOS"],
            "--finetune nope: unknown source 'nope': expected 'torchvision:NAME'",
        ),
        (
            ["--finetune", "timm:vit_nope", "--image-folder", "PHOTOS"],
            "--finetune timm:vit_nope: unknown timm model 'vit_nope'",
        ),
        (
            [*FINETUNE, "--image-folder", "PHOTOS", "--image-size", "40"],
            "--finetune timm:vit_tiny_patch16_224: image size (40, 40) is not divisible by patch size (16, 16)",
        ),
    ],
)
def test_bad_finetune_command_lines_are_one_line_usage_errors(argv, message, photos, capsys):
    argv = [{"PHOTOS": str(photos), "MISSING": str(photos / "missing")}.get(a, a) for a in argv]
    message = message.replace("MISSING", str(photos / "missing"))
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"python -m vit_tutorial.train: error: {message}")
