"""Command line: ``train`` a preset on digits, Fashion-MNIST or CIFAR-10, or ``finetune`` a
pre-trained ViT on your images.

.. code-block:: text

    vit-tutorial train --dataset digits               # the digits target recipe
    vit-tutorial train --preset digits-vit --epochs 10 --seed 1
    vit-tutorial train --dataset cifar10 --checkpoint runs/c10.pt [--resume]  # Colab GPU
    torchrun --nproc_per_node=4 -m vit_tutorial.cli train --dataset cifar10  # 4 GPUs, DDP
    # your images, one sub-folder per class (photos/cat/1.jpg, ...); 20 % of each class
    # held out unless --val-folder gives held-out images; online unless noted
    vit-tutorial finetune torchvision:vit_b_16 --image-folder photos --checkpoint runs/p.pt
    vit-tutorial finetune timm:vit_small_patch16_224 --linear-probe \\
        --image-folder photos/train --val-folder photos/val     # train the head only
    vit-tutorial finetune runs/p.pt --image-folder more_photos  # offline: a checkpoint
    vit-tutorial finetune timm:vit_tiny_patch16_224 --random-weights --image-size 32 \\
        --epochs 1 --image-folder photos                        # offline smoke test

``vit-tutorial`` is ``python -m vit_tutorial.cli``; :mod:`vit_tutorial.train` takes the older
spelling. Options are checked here, once (a bad one: exit status 2); the work is done by
:func:`~vit_tutorial.recipes.train_recipe` and :mod:`vit_tutorial.finetune`. Under ``torchrun``
each process joins a process group (gloo on CPUs, nccl on GPUs) and trains with DDP; the batch
size is per process, and rank 0 alone prints and writes the checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from vit_tutorial.checkpoint import read_checkpoint
from vit_tutorial.data import image_folder_datasets
from vit_tutorial.engine import TrainResult, resolve_device
from vit_tutorial.finetune import (
    FINETUNE,
    FINETUNE_BATCH_SIZE,
    LINEAR_PROBE,
    finetune,
    load_pretrained,
    set_image_size,
)
from vit_tutorial.patches import pair
from vit_tutorial.recipes import DEFAULT_PRESET, RECIPES, train_recipe
from vit_tutorial.validate import MAX_SEED

__all__ = ["main", "command"]

#: ``--help``'s description, written for a terminal (the module's docstring is for the docs).
DESCRIPTION = (
    "Train a preset ViT on digits, Fashion-MNIST or CIFAR-10 (train), or fine-tune a "
    "pre-trained ViT on a folder of your images (finetune). COMMAND --help lists its options."
)


def _positive(kind: type, low: int = 0, high: float = math.inf) -> Callable[[str], int | float]:
    """argparse type: an integer from ``low + 1`` to ``high`` (``kind`` int) or a finite
    number > 0 (float)."""
    expected = f"an integer >= {low + 1}" if kind is int else "a finite number > 0"
    expected = f"an integer from {low + 1} to {high}" if high < math.inf else expected

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = low
        if not (low < value < math.inf and value <= high):  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    return parse


def _device(text: str) -> torch.device:
    """argparse type of ``--device``: the device, resolved here once ('auto': a GPU if any),
    and one this machine has, before any data loads."""
    try:
        return resolve_device(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _path(kind: str, exists: bool = False) -> Callable[[str], Path]:
    """argparse type of a ``kind`` ('file' or 'folder') path, which need not exist unless
    ``exists``: checked before a model is downloaded or trained."""

    def parse(text: str) -> Path:
        path = Path(text)
        if under := next((p for p in path.parents if p.exists() and not p.is_dir()), None):
            raise argparse.ArgumentTypeError(f"{text}: {under} is a file, not a folder")
        if (exists or path.exists()) and path.is_dir() != (kind == "folder"):
            raise argparse.ArgumentTypeError(f"{text} is not a {kind}")
        return path

    return parse


def _parser(prog: str, subcommand_prog: str | None) -> argparse.ArgumentParser:
    """``train`` and ``finetune``, with the options they share."""
    shared = argparse.ArgumentParser(add_help=False)
    add = shared.add_argument
    add("--epochs", type=_positive(int), help="override the default number of epochs")
    add("--lr", type=_positive(float), help="override the default peak learning rate")
    add("--batch-size", type=_positive(int), help="override the per-process batch size")
    seed = _positive(int, -1, MAX_SEED)
    add("--seed", type=seed, default=0, help="seed of the weights and the data order")
    add("--checkpoint", type=_path("file"), help="save a checkpoint here every epoch")
    add("--resume", action="store_true", help="continue from --checkpoint")
    add("--device", type=_device, default="auto", help="'auto', 'cpu', 'cuda', 'cuda:N', ...")
    add("--amp", default="auto", choices=["auto", "bf16", "fp16", "none"])
    add("--no-progress", action="store_true", help="print nothing per epoch")
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subcommand = functools.partial(commands.add_parser, parents=[shared], prog=subcommand_prog)
    train = subcommand("train", help="train a preset from scratch")
    add = train.add_argument
    add("--dataset", choices=sorted(DEFAULT_PRESET), help="default: digits")
    add("--preset", choices=sorted(RECIPES), help="default: the dataset's")
    add("--data-root", type=_path("folder"), help="$VIT_TUTORIAL_DATA or ~/.cache/vit_tutorial")
    train.set_defaults(run=_train, error=train.error)
    defaults = (
        f"defaults: epochs {FINETUNE.epochs}, lr {FINETUNE.lr:g} ({LINEAR_PROBE.lr:g} with "
        f"--linear-probe), batch size {FINETUNE_BATCH_SIZE}"
    )
    about = "fine-tune a pre-trained model on a folder of images"
    tune = subcommand("finetune", help=about, description=defaults)
    add = tune.add_argument
    add("source", metavar="SOURCE", help="torchvision:NAME, timm:NAME or a checkpoint path")
    folder = _path("folder", exists=True)
    add("--image-folder", type=folder, required=True, metavar="DIR", help="DIR/CLASS/IMAGE")
    add("--val-folder", type=folder, metavar="DIR", help="default: 20%% of --image-folder")
    add("--linear-probe", action="store_true", help="train only the new head")
    add("--random-weights", action="store_true", help="no download: random weights")
    add("--image-size", type=_positive(int), help="default: the model's own")
    tune.set_defaults(run=_finetune, error=tune.error)
    return parser


def _check(args: argparse.Namespace) -> None:
    """A usage error (exit 2) for what the options cannot do together."""
    if args.resume and args.checkpoint is None:
        args.error("--resume needs --checkpoint PATH")
    if args.resume and not args.checkpoint.exists():
        args.error(f"--resume: {args.checkpoint} does not exist")
    saved = read_checkpoint(args.checkpoint)["extra"] if args.resume else {}  # before the data
    if saved.get("seed", args.seed) != args.seed:
        args.error(f"--resume: {args.checkpoint} has --seed {saved['seed']}, not {args.seed}")
    if args.checkpoint is not None and args.checkpoint.exists() and not args.resume:
        args.error(f"{args.checkpoint} exists: pass --resume to continue it, or delete it")
    if args.amp == "fp16" and args.device.type != "cuda":
        args.error(f"--amp fp16 needs a CUDA device, got --device {args.device}")
    args.amp = None if args.amp == "none" else args.amp
    if args.command == "train":
        args.preset = args.preset or DEFAULT_PRESET[args.dataset or "digits"]
        dataset = RECIPES[args.preset].dataset
        if args.dataset is not None and dataset != args.dataset:
            args.error(f"preset {args.preset!r} is for dataset {dataset!r}, not {args.dataset!r}")


def _train(args: argparse.Namespace, options: dict) -> tuple[TrainResult, str, str]:
    """Train the preset; the result, the run and the split for the printed line."""
    given = {name: getattr(args, name) for name in ("epochs", "lr", "batch_size", "data_root")}
    result = train_recipe(args.preset, seed=args.seed, **given, **options)
    return result, f"preset {args.preset} (seed {args.seed}", "test"


def _finetune(args: argparse.Namespace, options: dict) -> tuple[TrainResult, str, str]:
    """Load SOURCE and the images, and fine-tune; a model or a folder that cannot be used is
    a usage error, as a bad option is."""
    torch.manual_seed(args.seed)  # --random-weights: the same weights on every rank
    try:
        model, mean, std = load_pretrained(args.source, pretrained=not args.random_weights)
        if model.config.distilled:  # replace_head refuses it too, but after the images load
            raise ValueError("a distilled ViT (DeiT's distillation token): fine-tune one without")
        height, width = pair(model.config.image_size)
        if args.image_size is None and height != width:
            raise ValueError(f"the model takes {height}×{width} images; pass --image-size N")
        image_size = args.image_size or height
        model = set_image_size(model, image_size)
        if model.config.in_channels != 3:
            raise ValueError(f"the model takes {model.config.in_channels} channels, not RGB")
        batch = dict(batch_size=args.batch_size or FINETUNE_BATCH_SIZE, seed=args.seed)
        folders = dict(val_dir=args.val_folder, image_size=image_size, mean=mean, std=std)
        data = image_folder_datasets(args.image_folder, **folders, **batch)
    except (ValueError, ImportError) as error:
        args.error(f"{args.source}: {error}")
    given = {k: v for k, v in (("epochs", args.epochs), ("lr", args.lr)) if v is not None}
    settings = dataclasses.replace(LINEAR_PROBE if args.linear_probe else FINETUNE, **given)
    options.update(linear_probe=args.linear_probe, extra={"seed": args.seed})
    result = finetune(model, data, settings, **options)
    mode = "linear probe" if args.linear_probe else "full"
    return result, f"finetune {args.source} ({mode}, seed {args.seed}", "validation"


def main(
    argv: list[str] | None = None, *, prog: str | None = None, name: str | None = None
) -> TrainResult:
    """Parse the command line, train, print the accuracy on the held-out images and the
    training time; return the result. ``prog`` (``python -m vit_tutorial.train``'s) names the
    command and its subcommands in messages, ``name`` (``python -m vit_tutorial``'s) the
    command alone."""
    default = "vit-tutorial" if Path(sys.argv[0]).name == "vit-tutorial" else None
    args = _parser(prog or name or default or "python -m vit_tutorial.cli", prog).parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    try:
        _check(args)
        if distributed:
            if args.device.type == "cuda":
                torch.cuda.set_device(args.device)
            dist.init_process_group("nccl" if args.device.type == "cuda" else "gloo")
        tic = time.perf_counter()
        options = {"checkpoint_path": args.checkpoint, "device": args.device, "amp": args.amp}
        result, run, split = args.run(args, {**options, "progress": not args.no_progress})
        if not distributed or dist.get_rank() == 0:
            world = f", {dist.get_world_size()} processes" if distributed else ""
            wall = time.perf_counter() - tic
            accuracy = f"{split} accuracy {100 * result.test_accuracy:.2f}%"
            times = f"training time {result.train_seconds:.1f} s (wall {wall:.1f} s)"
            print(f"{run}{world}): {accuracy} | {times}", flush=True)
    except (ValueError, TypeError, FileNotFoundError) as error:  # input the package refused
        args.error(" ".join(str(error).split()))  # one line, exit status 2
    finally:
        if distributed and dist.is_initialized():
            dist.destroy_process_group()
    return result


def command() -> None:
    """The console script ``vit-tutorial``: :func:`main`, exit status 0 when it trains."""
    main()


if __name__ == "__main__":
    main()
