"""Command line: train a ViT on digits or Fashion-MNIST (CPU) or CIFAR-10 (GPU), or under ``torchrun``.

.. code-block:: text

    python -m vit_tutorial.train --dataset digits              # the digits target recipe
    python -m vit_tutorial.train --dataset fashion-mnist       # chapter 8's hybrid ViT
    python -m vit_tutorial.train --preset digits-vit --epochs 10 --seed 1
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt  # Colab GPU
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt --resume
    torchrun --nproc_per_node=4 -m vit_tutorial.train --dataset cifar10   # 4 GPUs, DDP

This module is only the command line (argparse and :func:`main`). The training loop lives
in :mod:`vit_tutorial.engine` (:func:`~vit_tutorial.engine.fit`), checkpoints in
:mod:`vit_tutorial.checkpoint`, and the presets in :mod:`vit_tutorial.recipes`: a *preset*
(:data:`~vit_tutorial.recipes.RECIPES`) is a model configuration and its training
hyperparameters. Under ``torchrun`` (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set) every
process joins a process group (gloo on the CPU, nccl on GPUs), reads its shard of the data
through the loader's :class:`~torch.utils.data.DistributedSampler`, and
:func:`~vit_tutorial.engine.fit` wraps the model in DistributedDataParallel; the batch size is
per process, and only rank 0 prints and writes the checkpoint.
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
    parser.add_argument("--epochs", type=_positive_int, help="override the preset's epochs")
    parser.add_argument(
        "--lr", type=_positive_float, help="override the preset's peak learning rate"
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
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, torch.device]:
    """The preset and the device; a usage error (exit 2) for what cannot run together."""
    preset = args.preset or DEFAULT_PRESET[args.dataset or "digits"]
    if args.dataset is not None and RECIPES[preset].dataset != args.dataset:
        parser.error(
            f"preset {preset!r} is for dataset {RECIPES[preset].dataset!r}, not {args.dataset!r}"
        )
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


def main(argv: list[str] | None = None) -> TrainResult:
    """Parse the command line, train, print the test accuracy and the training time."""
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
        result = train_recipe(
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
        if rank == 0:
            world = f", {dist.get_world_size()} processes" if distributed else ""
            print(
                f"preset {preset} (seed {args.seed}{world}): test accuracy "
                f"{100 * result.test_accuracy:.2f}% | training time "
                f"{result.train_seconds:.1f} s (wall {time.perf_counter() - tic:.1f} s)",
                flush=True,
            )
    finally:
        if distributed:
            dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
