"""Command line: train a ViT on digits, Fashion-MNIST or CIFAR-10, or fine-tune one on your images.

.. code-block:: text

    python -m vit_tutorial.train --dataset digits              # the digits target recipe
    python -m vit_tutorial.train --dataset fashion-mnist       # chapter 8's hybrid ViT
    python -m vit_tutorial.train --preset digits-vit --epochs 10 --seed 1
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt  # Colab GPU
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt --resume
    torchrun --nproc_per_node=4 -m vit_tutorial.train --dataset cifar10   # 4 GPUs, DDP

Fine-tuning a pre-trained model on a folder of your images, one sub-folder per class
(``photos/cat/1.jpg``, ``photos/dog/2.png``, ...); 20 % of each class is held out unless
``--val-folder`` gives held-out images:

.. code-block:: text

    # online (downloads ViT-B/16's ImageNet weights), on a GPU:
    python -m vit_tutorial.train --finetune torchvision:vit_b_16 --image-folder photos \\
        --checkpoint runs/photos.pt
    # online: only the head trains; held-out images in a folder of their own
    python -m vit_tutorial.train --finetune timm:vit_small_patch16_224 --linear-probe \\
        --image-folder photos/train --val-folder photos/val
    # offline: continue from a checkpoint of an earlier run
    python -m vit_tutorial.train --finetune runs/photos.pt --image-folder more_photos
    # offline smoke test: ViT-Ti/16's architecture with random weights, 32×32 images
    python -m vit_tutorial.train --finetune timm:vit_tiny_patch16_224 --random-weights \\
        --image-size 32 --epochs 1 --image-folder photos

This module is only the command line (argparse and :func:`main`). The training loop lives
in :mod:`vit_tutorial.engine` (:func:`~vit_tutorial.engine.fit`), checkpoints in
:mod:`vit_tutorial.checkpoint`, the presets in :mod:`vit_tutorial.recipes`: a *preset*
(:data:`~vit_tutorial.recipes.RECIPES`) is a model configuration and its training
hyperparameters; and fine-tuning in :mod:`vit_tutorial.finetune`, whose
:data:`~vit_tutorial.finetune.FINETUNE_DEFAULTS` are the defaults of ``--finetune``.

Under ``torchrun`` (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set) every process joins a
process group (gloo on the CPU, nccl on GPUs), reads its shard of the data through the
loader's :class:`~torch.utils.data.DistributedSampler`, and :func:`~vit_tutorial.engine.fit`
wraps the model in DistributedDataParallel; the batch size is per process, and only rank 0
prints and writes the checkpoint.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from vit_tutorial.engine import resolve_device
from vit_tutorial.finetune import (
    FINETUNE_DEFAULTS,
    finetune,
    image_folder_datasets,
    load_pretrained,
    set_image_size,
)
from vit_tutorial.patches import pair
from vit_tutorial.recipes import DEFAULT_PRESET, RECIPES, TrainResult, train_recipe

__all__ = ["main"]


def _positive_int(text: str) -> int:
    """argparse type of ``--epochs`` and ``--batch-size``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    """argparse type of ``--lr``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _device(text: str) -> str:
    """argparse type of ``--device``: ``'auto'`` or a string that :class:`torch.device` reads."""
    if text != "auto":
        try:
            torch.device(text)
        except RuntimeError:
            raise argparse.ArgumentTypeError(
                f"unknown device {text!r}; expected 'auto', 'cpu', 'cuda', 'cuda:N', ..."
            ) from None
    return text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_tutorial.train", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--dataset",
        choices=sorted(DEFAULT_PRESET),
        default=None,
        help="dataset; picks its default preset (default: digits)",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(RECIPES),
        default=None,
        help="model and hyperparameters (default: the dataset's)",
    )
    parser.add_argument(
        "--epochs", type=_positive_int, help="override the preset's (or fine-tuning's) epochs"
    )
    parser.add_argument(
        "--lr", type=_positive_float, help="override the preset's (or fine-tuning's) peak rate"
    )
    parser.add_argument(
        "--batch-size", type=_positive_int, help="override the per-process batch size"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data order")
    parser.add_argument(
        "--data-root",
        default=None,
        help="where the datasets go (default: ./data for CIFAR-10, ~/.cache/vit_tutorial "
        "or $VIT_TUTORIAL_DATA for Fashion-MNIST)",
    )
    parser.add_argument("--checkpoint", type=Path, help="save a checkpoint here every epoch")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--device", type=_device, default="auto", help="'auto', 'cpu', 'cuda', ...")
    parser.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "none"])
    parser.add_argument("--no-progress", action="store_true", help="print nothing per epoch")
    _add_finetune_arguments(parser)
    return parser


def _add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``--finetune`` (:mod:`vit_tutorial.finetune`), in a group of their own."""
    group = parser.add_argument_group(
        "fine-tuning",
        f"a pre-trained model on your images; defaults: epochs {FINETUNE_DEFAULTS.epochs}, "
        f"lr {FINETUNE_DEFAULTS.lr:g} ({FINETUNE_DEFAULTS.linear_probe_lr:g} with "
        f"--linear-probe), batch size {FINETUNE_DEFAULTS.batch_size}",
    )
    group.add_argument(
        "--finetune",
        metavar="SOURCE",
        help="the model to start from: torchvision:NAME (vit_b_16, ...), timm:NAME "
        "(vit_small_patch16_224, ...) or the path of a checkpoint",
    )
    group.add_argument(
        "--image-folder", type=Path, metavar="DIR", help="training images, DIR/<class>/<image>"
    )
    group.add_argument(
        "--val-folder",
        type=Path,
        metavar="DIR",
        help="held-out images, same classes (default: 20%% of --image-folder)",
    )
    group.add_argument("--linear-probe", action="store_true", help="train only the new head")
    group.add_argument(
        "--random-weights",
        action="store_true",
        help="SOURCE's architecture with random weights, no download (offline runs, tests)",
    )
    group.add_argument(
        "--image-size", type=_positive_int, help="image side (default: the model's own)"
    )


_FINETUNE_ONLY = ("image_folder", "val_folder", "linear_probe", "random_weights", "image_size")


def _check_preset(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The preset to train; a usage error for fine-tuning options without ``--finetune``."""
    for name in _FINETUNE_ONLY:
        if getattr(args, name) not in (None, False):
            parser.error(f"--{name.replace('_', '-')} needs --finetune SOURCE")
    preset = args.preset or DEFAULT_PRESET[args.dataset or "digits"]
    if args.dataset is not None and RECIPES[preset].dataset != args.dataset:
        parser.error(
            f"preset {preset!r} is for dataset {RECIPES[preset].dataset!r}, not {args.dataset!r}"
        )
    return preset


def _check_finetune(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for what ``--finetune`` cannot run with."""
    for flag, value in [
        ("--dataset", args.dataset),
        ("--preset", args.preset),
        ("--data-root", args.data_root),
    ]:
        if value is not None:
            parser.error(f"--finetune trains on --image-folder DIR; {flag} does not apply")
    if args.image_folder is None:
        parser.error("--finetune needs --image-folder DIR (one sub-folder of images per class)")
    for flag, folder in [("--image-folder", args.image_folder), ("--val-folder", args.val_folder)]:
        if folder is not None and not folder.is_dir():
            parser.error(f"{flag} {folder} is not a folder")


def _check(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[str | None, torch.device]:
    """The preset (``None`` to fine-tune) and the device; a usage error (exit 2) for what
    cannot run together."""
    preset = None
    if args.finetune is not None:
        _check_finetune(parser, args)
    else:
        preset = _check_preset(parser, args)
    if args.resume and args.checkpoint is None:
        parser.error("--resume needs --checkpoint PATH")
    if args.resume and not args.checkpoint.exists():
        parser.error(f"--resume: {args.checkpoint} does not exist")
    if args.checkpoint is not None and args.checkpoint.exists() and not args.resume:
        parser.error(f"{args.checkpoint} exists: pass --resume to continue it, or delete it")
    device = resolve_device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available on this machine")
    if args.amp == "fp16" and device.type != "cuda":
        shown = f"{args.device} ({device})" if args.device == "auto" else args.device
        parser.error(f"--amp fp16 needs a CUDA device, got --device {shown}")
    return preset, device


def _train_preset(args: argparse.Namespace, preset: str, device: torch.device) -> TrainResult:
    """Train ``preset`` as the command line asks."""
    return train_recipe(
        preset,
        seed=args.seed,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=args.batch_size,
        data_root=args.data_root,
        checkpoint_path=args.checkpoint,
        device=device,
        amp=None if args.amp == "none" else args.amp,
        progress=not args.no_progress,
    )


def _finetune(
    parser: argparse.ArgumentParser, args: argparse.Namespace, device: torch.device
) -> TrainResult:
    """Load ``--finetune``'s model and ``--image-folder``'s images, and fine-tune.

    A model or a folder that cannot be used is a usage error, as a bad option is.
    """
    torch.manual_seed(args.seed)  # --random-weights: the same weights on every rank
    try:
        model, mean, std = load_pretrained(args.finetune, pretrained=not args.random_weights)
        height, width = pair(model.config.image_size)
        if args.image_size is None and height != width:
            raise ValueError(f"the model takes {height}×{width} images; pass --image-size N")
        image_size = args.image_size or height
        model = set_image_size(model, image_size)
        if model.config.in_channels != 3:
            raise ValueError(f"the model takes {model.config.in_channels} channels, not RGB")
        data = image_folder_datasets(
            args.image_folder,
            val_dir=args.val_folder,
            image_size=image_size,
            mean=mean,
            std=std,
            batch_size=args.batch_size or FINETUNE_DEFAULTS.batch_size,
            seed=args.seed,
        )
    except (ValueError, ImportError) as error:
        parser.error(f"--finetune {args.finetune}: {error}")
    return finetune(
        model,
        data,
        linear_probe=args.linear_probe,
        epochs=args.epochs,
        lr=args.lr,
        checkpoint_path=args.checkpoint,
        device=device,
        amp=None if args.amp == "none" else args.amp,
        progress=not args.no_progress,
    )


def main(argv: list[str] | None = None) -> TrainResult:
    """Parse the command line, train, print the test accuracy and the training time.

    With ``--finetune``, the accuracy is that of the held-out images (``--val-folder``, or
    the share of ``--image-folder`` held out).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    preset, device = _check(parser, args)
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if distributed:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    try:
        tic = time.perf_counter()
        if preset is None:
            result = _finetune(parser, args, device)
            mode = "linear probe" if args.linear_probe else "full"
            run, split = f"finetune {args.finetune} ({mode}, seed {args.seed}", "validation"
        else:
            result = _train_preset(args, preset, device)
            run, split = f"preset {preset} (seed {args.seed}", "test"
        if rank == 0:
            world = f", {dist.get_world_size()} processes" if distributed else ""
            print(
                f"{run}{world}): {split} accuracy {100 * result.test_accuracy:.2f}% | "
                f"training time {result.train_seconds:.1f} s "
                f"(wall {time.perf_counter() - tic:.1f} s)",
                flush=True,
            )
    finally:
        if distributed:
            dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
