"""Training recipes (chapter 6): a dataset, a model and its hyperparameters, by name.

:data:`RECIPES` holds the presets; :func:`train_recipe` builds the data and the model of
one, trains it with :func:`~vit_tutorial.engine.fit` and measures its test accuracy. The
command line ``python -m vit_tutorial.train`` (:mod:`vit_tutorial.train`) is a thin layer
over :func:`train_recipe`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vit_tutorial.data import DataSplits, cifar10_datasets, digits_datasets, fashion_mnist_datasets
from vit_tutorial.engine import Device, evaluate, fit
from vit_tutorial.vit import VisionTransformer

__all__ = ["Recipe", "RECIPES", "TrainResult", "train_recipe"]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A dataset, a model and the hyperparameters of :func:`~vit_tutorial.engine.fit`.

    Attributes:
        dataset: ``'digits'``, ``'fashion-mnist'`` or ``'cifar10'``.
        model: :class:`~vit_tutorial.vit.ViTConfig` fields; ``image_size``, ``in_channels``
            and ``num_classes`` come from the dataset.
        epochs: passes over the training set.
        batch_size: per process.
        lr: peak learning rate.
        weight_decay: AdamW weight decay.
        warmup_epochs: linear warm-up length.
        label_smoothing: label smoothing.
        grad_clip: global gradient-norm clip, or ``None``.

    Raises:
        ValueError: ``epochs`` or ``batch_size`` is not an integer >= 1, or ``lr`` is not a
            finite number > 0 (the other fields are checked by :func:`~vit_tutorial.engine.fit`).
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

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}")
        if (
            isinstance(self.lr, bool)
            or not isinstance(self.lr, numbers.Real)
            or not (0 < self.lr < math.inf)
        ):
            raise ValueError(f"lr must be a finite number > 0, got lr={self.lr!r}")

    def fit_options(self) -> dict[str, Any]:
        """The keywords of :func:`~vit_tutorial.engine.fit` that the recipe fixes."""
        names = ("epochs", "lr", "weight_decay", "warmup_epochs", "label_smoothing", "grad_clip")
        return {name: getattr(self, name) for name in names}


# What every preset's model shares: an MLP of width 2·D and average pooling (no class token).
_SMALL_VIT = dict(mlp_ratio=2.0, pool="mean")
_DIGITS_VIT = dict(patch_size=1, dim=64, depth=4, num_heads=4, **_SMALL_VIT)

#: The presets. ``digits`` (the default for ``--dataset digits``) is the hybrid ViT of the
#: target: a convolutional stem, patch size 1 on the 8×8 digits, 4 blocks of width 64.
#: ``digits-vit`` is the paper's plain patch embedding with the patch size that suits it best
#: on digits (4, so 4 tokens), ``digits-tiny`` a smoke test, and
#: ``cifar10`` a hybrid ViT for CIFAR-10 on a GPU. ``fashion-mnist`` is chapter 8's hybrid
#: ViT (a convolutional stem to a 7×7 grid, 4 blocks of width 64), trained without
#: augmentation: in 13 epochs crops and flips cost more than they give (chapter 8);
#: ``fashion-mnist-tiny`` a smoke test.
RECIPES: dict[str, Recipe] = {
    "digits": Recipe("digits", {**_DIGITS_VIT, "stem": "conv"}, epochs=20, batch_size=64, lr=2e-3),
    "digits-vit": Recipe(
        "digits",
        {**_DIGITS_VIT, "patch_size": 4, "stem": "patch"},
        epochs=40,
        batch_size=64,
        lr=2e-3,
    ),
    "digits-tiny": Recipe(
        "digits",
        dict(patch_size=4, dim=16, depth=1, num_heads=2, **_SMALL_VIT),
        epochs=2,
        batch_size=64,
        lr=3e-3,
        warmup_epochs=0,
    ),
    "fashion-mnist": Recipe(
        "fashion-mnist",
        dict(patch_size=4, dim=64, depth=4, num_heads=4, stem="conv", **_SMALL_VIT),
        epochs=13,
        batch_size=128,
        lr=2e-3,
        warmup_epochs=1,
    ),
    "fashion-mnist-tiny": Recipe(
        "fashion-mnist",
        dict(patch_size=7, dim=16, depth=1, num_heads=2, **_SMALL_VIT),
        epochs=1,
        batch_size=256,
        lr=3e-3,
        warmup_epochs=0,
    ),
    "cifar10": Recipe(
        "cifar10",
        dict(patch_size=4, dim=192, depth=6, num_heads=3, stem="conv", drop_path=0.1, **_SMALL_VIT),
        epochs=50,
        batch_size=256,
        lr=1e-3,
        warmup_epochs=5,
        grad_clip=1.0,
    ),
}
DEFAULT_PRESET = {"digits": "digits", "fashion-mnist": "fashion-mnist", "cifar10": "cifar10"}


def recipe_datasets(
    recipe: Recipe, seed: int = 0, data_root: str | Path | None = None
) -> DataSplits:
    """The data of ``recipe``: its dataset, its batch size, the loader shuffled by ``seed``.

    ``data_root`` is where CIFAR-10 is (or is downloaded to), and where Fashion-MNIST's
    files are put (default: :func:`~vit_tutorial.data.data_root`).
    """
    if recipe.dataset == "digits":
        return digits_datasets(seed=seed, batch_size=recipe.batch_size)
    if recipe.dataset == "fashion-mnist":
        return fashion_mnist_datasets(data_root, seed=seed, batch_size=recipe.batch_size)
    if recipe.dataset == "cifar10":
        return cifar10_datasets(data_root or "data", seed=seed, batch_size=recipe.batch_size)
    raise ValueError(
        f"unknown dataset {recipe.dataset!r}; valid: 'digits', 'fashion-mnist', 'cifar10'"
    )


@dataclasses.dataclass
class TrainResult:
    """What :func:`train_recipe` returns.

    Attributes:
        model: the trained model (unwrapped from DDP).
        history: per-epoch history from :func:`~vit_tutorial.engine.fit`.
        test_accuracy: final accuracy on the test split (a fraction).
        train_seconds: seconds spent in training steps (per-epoch evaluation excluded).
    """

    model: nn.Module
    history: dict
    test_accuracy: float
    train_seconds: float


def train_recipe(
    preset: str = "digits",
    *,
    seed: int = 0,
    epochs: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    data_root: str | Path | None = None,
    checkpoint_path: str | Path | None = None,
    device: Device = "auto",
    amp: str | None = "auto",
    progress: bool = True,
    compile: bool = False,
) -> TrainResult:
    """Train preset ``preset`` with seed ``seed`` and evaluate it on the test split.

    The seed fixes the initial weights and the data order; the digits split is the same
    for every seed. ``epochs``, ``lr`` and ``batch_size``, when not ``None``, override the
    preset's. ``device``, ``amp`` and ``compile`` are :func:`~vit_tutorial.engine.fit`'s.

    Raises:
        ValueError: an unknown preset, or an override out of range (``epochs=0``, say).
    """
    if preset not in RECIPES:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {sorted(RECIPES)}")
    overrides = {"epochs": epochs, "lr": lr, "batch_size": batch_size}
    recipe = dataclasses.replace(
        RECIPES[preset],  # validated again: 0 is refused, not ignored
        **{k: v for k, v in overrides.items() if v is not None},
    )
    data = recipe_datasets(recipe, seed, data_root)
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = VisionTransformer(
        image_size=data.image_size,
        in_channels=data.in_channels,
        num_classes=data.num_classes,
        **recipe.model,
    )
    history = fit(
        model,
        data.train_loader,
        data.val_loader or data.test_loader,  # digits and CIFAR-10 have no validation split
        **recipe.fit_options(),
        device=device,
        amp=amp,
        progress=progress,
        checkpoint_path=checkpoint_path,
        compile=compile,
    )
    accuracy = evaluate(model, data.test_loader, device, amp)["accuracy"]
    return TrainResult(model, history, accuracy, sum(history["time"]))
