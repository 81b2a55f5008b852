"""Tests for the command line: vit_tutorial/cli.py (``train``, ``finetune``, 2-process DDP on
the CPU) and vit_tutorial/train.py, its older spelling without subcommands."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from vit_tutorial import train
from vit_tutorial.axial import AxialViT
from vit_tutorial.checkpoint import save_checkpoint
from vit_tutorial.cli import DESCRIPTION, main
from vit_tutorial.finetune import load_pretrained
from vit_tutorial.interop import max_abs_logit_difference
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.recipes import RECIPES
from vit_tutorial.validate import MAX_SEED
from vit_tutorial.vit import VisionTransformer

TINY = ["--preset", "digits-tiny", "--no-progress"]
USAGE = "python -m vit_tutorial.cli {}: error: "  # the subcommand's usage errors
LEGACY = "python -m vit_tutorial.train: error: "


def last_error_line(capsys, exit_info) -> str:
    """The last line of stderr of a usage error: exit status 2, no traceback."""
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_train_prints_the_test_accuracy(capsys):
    result = main(["train", *TINY])
    out = capsys.readouterr().out
    assert f"test accuracy {100 * result.test_accuracy:.2f}%" in out and "training time" in out
    assert result.test_accuracy > 0.3  # 2 epochs of a tiny model: far above chance (0.1)
    assert len(result.history["epoch"]) == 2
    assert result.train_seconds == pytest.approx(sum(result.history["time"]))


@pytest.mark.slow
def test_fashion_mnist_validates_on_its_own_split(capsys):
    argv = ["train", "--dataset", "fashion-mnist", "--preset", "fashion-mnist-tiny"]
    result = main([*argv, "--no-progress"])
    assert "preset fashion-mnist-tiny" in capsys.readouterr().out
    assert result.test_accuracy > 0.3  # one epoch of a tiny model: far above chance (0.1)
    assert 0.3 < result.history["val_acc"][-1] < 1  # the 5,000 held-out training images


def test_checkpoint_and_resume(tmp_path, capsys):
    path = tmp_path / "run.pt"
    first = main(["train", *TINY, "--checkpoint", str(path)])
    assert torch.load(path, weights_only=True)["epoch"] == 2
    with pytest.raises(SystemExit):
        main(["train", *TINY, "--checkpoint", str(path)])
    assert "exists: pass --resume" in capsys.readouterr().err
    again = main(["train", *TINY, "--checkpoint", str(path), "--resume"])  # nothing to redo
    assert again.history == first.history
    for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dataset", "cifar10", "--preset", "digits"], "preset 'digits' is for dataset 'digits'"),
        (["--resume"], "--resume needs --checkpoint PATH"),
        (["--preset", "nope"], "argument --preset: invalid choice: 'nope'"),
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
def test_bad_train_command_lines_are_one_line_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, *argv])
    assert last_error_line(capsys, exit_info).startswith(USAGE.format("train") + message)


def test_a_subcommand_is_needed_and_help_lists_both(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "train" in out and "finetune" in out
    description = " ".join(out.split("\n\n")[1].split())  # for a terminal: no markup, whole
    assert description == DESCRIPTION and description.endswith(".") and "``" not in out


@pytest.mark.parametrize(
    "argv, unrecognized",
    [
        (["train", "--image-folder", "x"], "--image-folder x"),
        (["finetune", "timm:x", "--image-folder", ".", "--preset=x"], "--preset=x"),
    ],
)
def test_options_of_the_other_subcommand_are_unrecognized(argv, unrecognized, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    line = last_error_line(capsys, exit_info)
    assert line == f"python -m vit_tutorial.cli: error: unrecognized arguments: {unrecognized}"


ABSENT = ["xla", "hpu", "cuda:9"] + ["cuda"] * (not torch.cuda.is_available())
ABSENT += ["mps"] * (not torch.backends.mps.is_available())


@pytest.mark.parametrize("device", ABSENT)
@pytest.mark.parametrize("command", ["train", "finetune"])
def test_a_device_this_machine_lacks_is_a_usage_error_before_any_data(
    device, command, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("vit_tutorial.cli.train_recipe", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr("vit_tutorial.cli.load_pretrained", lambda *a, **k: pytest.fail("load"))
    args = [*TINY] if command == "train" else ["timm:x", "--image-folder", str(tmp_path)]
    for where, message in [(device, "is not on this machine (it has cpu"), ("meta", "no data")]:
        with pytest.raises(SystemExit) as exit_info:
            main([command, *args, "--device", where])
        line = last_error_line(capsys, exit_info)
        assert line.startswith(USAGE.format(command) + f"argument --device: device '{where}'")
        assert message in line


def test_resume_from_a_missing_checkpoint_names_the_path(tmp_path, capsys):
    path = tmp_path / "missing.pt"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, "--checkpoint", str(path), "--resume"])
    assert f"--resume: {path} does not exist" in last_error_line(capsys, exit_info)
    assert not path.exists()


@pytest.fixture(scope="module")
def run_pt(tmp_path_factory):
    """The checkpoint of one epoch of digits-tiny, seed 0."""
    path = tmp_path_factory.mktemp("run") / "run.pt"
    main(["train", *TINY, "--epochs", "1", "--checkpoint", str(path)])
    return path


def _truncate(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize(
    "argv, change, message",
    [
        (["--preset", "digits-vit"], None, "was saved from a different model config: "),
        (["--epochs", "2"], None, "it was trained with epochs=1, not epochs=2"),
        (["--lr", "0.5"], None, "it was trained with lr=0.003, not lr=0.5"),
        (["--seed", "1"], None, "--resume: RUN has --seed 0, not 1"),
        ([], _truncate, "RUN cannot be read by torch.load(weights_only=True): it is truncated"),
    ],
)
def test_a_resume_that_cannot_continue_is_refused_before_training(
    argv, change, message, run_pt, tmp_path, capsys
):
    path = tmp_path / "run.pt"
    path.write_bytes(run_pt.read_bytes())
    (change or bool)(path)
    saved = path.read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY, "--epochs", "1", *argv, "--checkpoint", str(path), "--resume"])
    assert message.replace("RUN", str(path)) in last_error_line(capsys, exit_info)
    assert path.read_bytes() == saved  # no epoch ran, none was saved


def test_resuming_with_the_seed_it_was_trained_with_continues(run_pt, tmp_path, capsys):
    path = tmp_path / "run.pt"
    path.write_bytes(run_pt.read_bytes())
    argv = ["--epochs", "1", "--seed", "0", "--checkpoint", str(path), "--resume"]
    assert main(["train", *TINY, *argv]).history["epoch"] == [1]  # done: nothing to redo


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--checkpoint", "FILE/run.pt"], "argument --checkpoint: FILE/run.pt: FILE is a file, "),
        (["--checkpoint", "DIR"], "argument --checkpoint: DIR is not a file"),
        (["--checkpoint", "DIR", "--resume"], "argument --checkpoint: DIR is not a file"),
        (["--data-root", "FILE"], "argument --data-root: FILE is not a folder"),
        (["--data-root", "FILE/data"], "argument --data-root: FILE/data: FILE is a file, not a"),
        (["--seed", "-1"], f"argument --seed: must be an integer from 0 to {MAX_SEED}, got '-1'"),
        (["--seed", "1.5"], "argument --seed: must be an integer from 0 to 9223372036854775807"),
        (["--seed", str(2**70)], f"argument --seed: must be an integer from 0 to {2**63 - 1}, got"),
    ],
)
def test_paths_and_seeds_are_checked_before_any_training(
    argv, message, tmp_path, capsys, monkeypatch
):
    (tmp_path / "file").write_text("a file")
    names = {"FILE": str(tmp_path / "file"), "DIR": str(tmp_path)}
    monkeypatch.setattr("vit_tutorial.cli.train_recipe", lambda *a, **k: pytest.fail("trained"))
    for command in (["train", *TINY], ["finetune", "timm:x", "--image-folder", str(tmp_path)]):
        if "--data-root" in argv and command[0] == "finetune":
            continue  # an option of train's alone
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    *command,
                    *[a.replace("FILE", names["FILE"]).replace("DIR", names["DIR"]) for a in argv],
                ]
            )
        expected = message.replace("FILE", names["FILE"]).replace("DIR", names["DIR"])
        assert expected in last_error_line(capsys, exit_info)


def test_errors_the_package_raises_are_one_line_and_bugs_keep_their_traceback(capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("data_root x is a file,\n not a folder")

    monkeypatch.setattr("vit_tutorial.cli.train_recipe", refuse)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *TINY])
    assert last_error_line(capsys, exit_info) == USAGE.format("train") + (
        "data_root x is a file, not a folder"
    )
    monkeypatch.setattr("vit_tutorial.cli.train_recipe", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["train", *TINY])


def test_a_checkpoint_under_a_file_fails_at_once_from_the_command_line(tmp_path):
    """End to end, as a user runs it: exit status 2, one error line, no traceback, no epoch."""
    (tmp_path / "file").write_text("a file")
    argv = [*TINY, "--epochs", "1", "--checkpoint", str(tmp_path / "file" / "run.pt")]
    run = subprocess.run(
        [sys.executable, "-m", "vit_tutorial.train", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr and not run.stdout
    assert run.stderr.splitlines()[-1].startswith(LEGACY + "argument --checkpoint: ")


def test_the_console_script_is_the_cli():
    """As installed: the entry point pyproject.toml declares (tomllib is Python 3.11+)."""
    from importlib.metadata import entry_points

    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("vit-tutorial") == "vit_tutorial.cli:command"


@pytest.mark.slow
@pytest.mark.parametrize("module", ["vit_tutorial.cli", "vit_tutorial.train"])
def test_modules_run_as_scripts(module):
    argv = ["train", *TINY] if module == "vit_tutorial.cli" else TINY  # train: the old spelling
    out = subprocess.run(
        [sys.executable, "-m", module, *argv, "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "preset digits-tiny (seed 0): test accuracy" in out


@pytest.mark.slow
def test_torchrun_two_processes_end_with_identical_weights(tmp_path):
    script = tmp_path / "run_rank.py"
    script.write_text(
        textwrap.dedent("""
        import os, sys
        import torch
        from vit_tutorial.cli import main
        result = main(sys.argv[2:])
        path = os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.pt")
        torch.save(result.model.state_dict(), path)
    """)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += [str(script), str(tmp_path), "train", *TINY, "--epochs", "1"]
    command += ["--checkpoint", str(tmp_path / "ckpt.pt")]
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


# --- finetune SOURCE --image-folder DIR -------------------------------------------------------

# ViT-Ti/16's architecture with random weights (offline) at 32×32: 4 patches, a fast run.
SMOKE = ["--random-weights", "--image-size", "32", "--epochs", "1", "--batch-size", "4"]
FINETUNE = ["finetune", "timm:vit_tiny_patch16_224", *SMOKE, "--no-progress"]


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
    argv = ["finetune", str(path), "--linear-probe", "--epochs", "1", "--no-progress"]
    result = main([*argv, "--image-folder", str(photos), "--val-folder", str(photos)])
    assert f"finetune {path} (linear probe, seed 0): validation accuracy" in capsys.readouterr().out
    assert result.history["lr"] == [pytest.approx(1e-3)]  # the linear probe's default
    for name, value in result.model.state_dict().items():
        assert torch.equal(value, start[name]) != name.startswith("head."), name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["timm:x"], "the following arguments are required: --image-folder"),
        (
            ["timm:x", "--image-folder", "MISSING"],
            "argument --image-folder: MISSING is not a folder",
        ),
        (["timm:x", "--image-folder", "PHOTOS", "--image-size", "0"], "argument --image-size: "),
        (["nope", "--image-folder", "PHOTOS"], "nope: nope does not exist: expected"),
        (["timm:vit_nope", "--image-folder", "PHOTOS"], "timm:vit_nope: unknown timm model"),
        (
            ["timm:vit_tiny_patch16_224", *SMOKE, "--image-size", "40", "--image-folder", "PHOTOS"],
            "timm:vit_tiny_patch16_224: image size (40, 40) is not divisible by patch size",
        ),
    ],
)
def test_bad_finetune_command_lines_are_one_line_usage_errors(argv, message, photos, capsys):
    argv = [{"PHOTOS": str(photos), "MISSING": str(photos / "missing")}.get(a, a) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", *argv])
    line = last_error_line(capsys, exit_info)
    expected = USAGE.format("finetune") + message.replace("MISSING", str(photos / "missing"))
    assert line.startswith(expected), line


def test_finetune_from_a_masked_autoencoder_checkpoint_trains_its_encoder(photos, tmp_path):
    mae = MaskedAutoencoder(image_size=32, patch_size=16, dim=16, depth=1, num_heads=2)
    save_checkpoint(tmp_path / "mae.pt", mae)
    argv = ["finetune", str(tmp_path / "mae.pt"), *SMOKE[1:], "--no-progress"]
    result = main([*argv, "--image-folder", str(photos)])
    assert result.model.config.num_classes == 3 and result.history["epoch"] == [1]


def test_finetune_from_a_distilled_axial_or_hostile_file_is_one_line(photos, tmp_path, capsys):
    distilled, hostile = tmp_path / "distilled.pt", tmp_path / "hostile.pt"
    config = dict(image_size=32, patch_size=16, dim=16, depth=1, num_heads=2)
    save_checkpoint(distilled, VisionTransformer(**config, distilled=True))
    save_checkpoint(axial := tmp_path / "axial.pt", AxialViT(**config))
    torch.save({"model": last_error_line}, hostile)  # a function: torch.load refuses it
    for path, message in [
        (distilled, "a distilled ViT (DeiT's distillation token): fine-tune one without"),
        (axial, "holds the weights of another model than a VisionTransformer: state dict"),
        (hostile, "does not load safely: it is not a checkpoint written by"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            train.main(["--finetune", str(path), "--image-folder", str(photos)])
        line = last_error_line(capsys, exit_info)
        assert line.startswith(f"{LEGACY}{path}: ") and message in line
        assert "weights_only=False" not in line and "weights_only` set to" not in line


# --- python -m vit_tutorial.train: the older spelling, which the book uses -------------------


def test_the_old_spelling_trains_a_preset(capsys):
    result = train.main(TINY)
    assert f"preset digits-tiny (seed 0): test accuracy {100 * result.test_accuracy:.2f}%" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "spelling",
    [["--finetune", "timm:vit_tiny_patch16_224"], ["--finetune=timm:vit_tiny_patch16_224"]],
)
def test_the_old_spelling_finetunes(spelling, photos, capsys):
    result = train.main([*SMOKE, "--no-progress", *spelling, "--image-folder", str(photos)])
    assert (
        "finetune timm:vit_tiny_patch16_224 (full, seed 0): validation" in capsys.readouterr().out
    )
    assert result.model.config.num_classes == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--epochs", "0"], "argument --epochs: must be an integer >= 1, got '0'"),
        (["--image-folder", "PHOTOS"], "unrecognized arguments: --image-folder"),
        (["--finetune", "timm:x"], "the following arguments are required: --image-folder"),
        (
            ["--finetune", "timm:x", "--image-folder", "PHOTOS", "--preset", "digits"],
            "unrecognized arguments: --preset digits",
        ),
        (["--finetune", "nope", "--image-folder", "PHOTOS"], "nope: nope does not exist"),
    ],
)
def test_the_old_spelling_names_itself_in_usage_errors(argv, message, photos, capsys):
    argv = [str(photos) if a == "PHOTOS" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        train.main(argv)
    assert last_error_line(capsys, exit_info).startswith(LEGACY + message)
