"""Command line: train a ViT on digits (CPU) or CIFAR-10 (GPU), alone or under ``torchrun``.

.. code-block:: text

    python -m vit_tutorial.train --dataset digits              # the digits target recipe
    python -m vit_tutorial.train --preset digits-vit --epochs 10 --seed 1
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt  # Colab GPU
    python -m vit_tutorial.train --dataset cifar10 --checkpoint runs/c10.pt --resume
    torchrun --nproc_per_node=4 -m vit_tutorial.train --dataset cifar10   # 4 GPUs, DDP

A *preset* (:data:`RECIPES`) is a model configuration and its training hyperparameters.
Under ``torchrun`` (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set) every process joins a
process group (gloo on the CPU, nccl on GPUs), reads its shard of the data through the
loader's :class:`~torch.utils.data.DistributedSampler`, and :func:`~vit_tutorial.training.fit`
wraps the model in DistributedDataParallel; the batch size is per process, and only rank 0
prints and writes the checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from vit_tutorial.data import cifar10_datasets, digits_datasets
from vit_tutorial.training import evaluate, fit, resolve_device
from vit_tutorial.vit import VisionTransformer

__all__ = ["Recipe", "RECIPES", "TrainResult", "train_recipe", "main"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A dataset, a model and the hyperparameters of :func:`~vit_tutorial.training.fit`.

    Attributes:
        dataset: ``'digits'`` or ``'cifar10'``.
        model: :class:`~vit_tutorial.vit.ViTConfig` fields; ``image_size``, ``in_channels``
            and ``num_classes`` come from the dataset.
        epochs: passes over the training set.
        batch_size: per process.
        lr: peak learning rate.
        weight_decay: AdamW weight decay.
        warmup_epochs: linear warm-up length.
        label_smoothing: label smoothing.
        grad_clip: global gradient-norm clip, or ``None``.
    """

    dataset: str
    model: dict
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float = 0.05
    warmup_epochs: float = 5
    label_smoothing: float = 0.1
    grad_clip: float | None = None


_DIGITS_VIT = dict(patch_size=1, dim=64, depth=4, num_heads=4, mlp_ratio=2.0, pool="mean")

#: The presets. ``digits`` (the default for ``--dataset digits``) is the hybrid ViT of the
#: target: a convolutional stem, patch size 1 on the 8×8 digits, 4 blocks of width 64.
#: ``digits-vit`` is the paper's plain patch embedding with the patch size that suits it best
#: on digits (4, so 4 tokens), ``digits-tiny`` a smoke test, and
#: ``cifar10`` a hybrid ViT for CIFAR-10 on a GPU.
RECIPES: dict[str, Recipe] = {
    "digits": Recipe("digits", {**_DIGITS_VIT, "stem": "conv"}, epochs=20, batch_size=64,
                     lr=2e-3),
    "digits-vit": Recipe("digits", {**_DIGITS_VIT, "patch_size": 4, "stem": "patch"},
                         epochs=40, batch_size=64, lr=2e-3),
    "digits-tiny": Recipe("digits", dict(patch_size=4, dim=16, depth=1, num_heads=2,
                                         mlp_ratio=2.0, pool="mean"),
                          epochs=2, batch_size=64, lr=3e-3, warmup_epochs=0),
    "cifar10": Recipe("cifar10", dict(patch_size=4, dim=192, depth=6, num_heads=3,
                                      mlp_ratio=2.0, pool="mean", stem="conv", drop_path=0.1),
                      epochs=50, batch_size=256, lr=1e-3, warmup_epochs=5, grad_clip=1.0),
}
DEFAULT_PRESET = {"digits": "digits", "cifar10": "cifar10"}


@dataclasses.dataclass
class TrainResult:
    """What :func:`train_recipe` returns.

    Attributes:
        model: the trained model (unwrapped from DDP).
        history: per-epoch history from :func:`~vit_tutorial.training.fit`.
        test_accuracy: final accuracy on the test split (a fraction).
        train_seconds: seconds spent in training steps (per-epoch evaluation excluded).
    """

    model: nn.Module
    history: dict
    test_accuracy: float
    train_seconds: float


def train_recipe(preset: str = "digits", *, seed: int = 0, epochs: int | None = None,
                 lr: float | None = None, batch_size: int | None = None,
                 data_root: str | Path = "data", checkpoint_path: str | Path | None = None,
                 device: str = "auto", amp: str | None = "auto",
                 progress: bool = True) -> TrainResult:
    """Train preset ``preset`` with seed ``seed`` and evaluate it on the test split.

    The seed fixes the initial weights and the data order; the digits split is the same
    for every seed. ``epochs``, ``lr`` and ``batch_size`` override the preset's.
    """
    if preset not in RECIPES:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {sorted(RECIPES)}")
    recipe = RECIPES[preset]
    batch_size = batch_size or recipe.batch_size
    if recipe.dataset == "digits":
        data = digits_datasets(seed=seed, batch_size=batch_size)
    else:
        data = cifar10_datasets(data_root, seed=seed, batch_size=batch_size)
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = VisionTransformer(image_size=data.image_size, in_channels=data.in_channels,
                              num_classes=data.num_classes, **recipe.model)
    history = fit(model, data.train_loader, data.test_loader, epochs=epochs or recipe.epochs,
                  lr=lr or recipe.lr, weight_decay=recipe.weight_decay,
                  warmup_epochs=recipe.warmup_epochs, label_smoothing=recipe.label_smoothing,
                  grad_clip=recipe.grad_clip, device=device, amp=amp, progress=progress,
                  checkpoint_path=checkpoint_path)
    accuracy = evaluate(model, data.test_loader, device, amp)["accuracy"]
    return TrainResult(model, history, accuracy, sum(history["time"]))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m vit_tutorial.train",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=sorted(DEFAULT_PRESET), default=None,
                        help="dataset; picks its default preset (default: digits)")
    parser.add_argument("--preset", choices=sorted(RECIPES), default=None,
                        help="model and hyperparameters (default: the dataset's)")
    parser.add_argument("--epochs", type=int, help="override the preset's epochs")
    parser.add_argument("--lr", type=float, help="override the preset's peak learning rate")
    parser.add_argument("--batch-size", type=int, help="override the per-process batch size")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data order")
    parser.add_argument("--data-root", default="data", help="where CIFAR-10 is (downloaded)")
    parser.add_argument("--checkpoint", type=Path, help="save a checkpoint here every epoch")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ...")
    parser.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "none"])
    parser.add_argument("--no-progress", action="store_true", help="print nothing per epoch")
    return parser


def main(argv: list[str] | None = None) -> TrainResult:
    """Parse the command line, train, print the test accuracy and the training time."""
    parser = _parser()
    args = parser.parse_args(argv)
    preset = args.preset or DEFAULT_PRESET[args.dataset or "digits"]
    if args.dataset is not None and RECIPES[preset].dataset != args.dataset:
        parser.error(f"preset {preset!r} is for dataset {RECIPES[preset].dataset!r}, "
                     f"not {args.dataset!r}")
    if args.resume and args.checkpoint is None:
        parser.error("--resume needs --checkpoint PATH")
    if args.checkpoint is not None and args.checkpoint.exists() and not args.resume:
        parser.error(f"{args.checkpoint} exists: pass --resume to continue it, or delete it")
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    device = resolve_device(args.device)
    if distributed:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    try:
        tic = time.perf_counter()
        result = train_recipe(preset, seed=args.seed, epochs=args.epochs, lr=args.lr,
                              batch_size=args.batch_size, data_root=args.data_root,
                              checkpoint_path=args.checkpoint, device=device,
                              amp=None if args.amp == "none" else args.amp,
                              progress=not args.no_progress)
        if rank == 0:
            world = f", {dist.get_world_size()} processes" if distributed else ""
            print(f"preset {preset} (seed {args.seed}{world}): test accuracy "
                  f"{100 * result.test_accuracy:.2f}% | training time "
                  f"{result.train_seconds:.1f} s (wall {time.perf_counter() - tic:.1f} s)",
                  flush=True)
    finally:
        if distributed:
            dist.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
