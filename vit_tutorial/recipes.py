"""Training recipes (chapter 6): a dataset, a model and how to fit it, by name.

:data:`RECIPES` holds the presets; :func:`train_recipe` builds the data and the model of one,
trains it with :func:`~vit_tutorial.engine.fit` and measures its test accuracy. The command
line ``python -m vit_tutorial.cli train`` (:mod:`vit_tutorial.cli`) is a thin layer over it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from vit_tutorial.data import DataSplits, cifar10_datasets, digits_datasets, fashion_mnist_datasets
from vit_tutorial.engine import Device, FitSettings, TrainResult, evaluate, fit
from vit_tutorial.validate import check_int, check_seed
from vit_tutorial.vit import VisionTransformer

__all__ = ["Recipe", "RECIPES", "DEFAULT_PRESET", "recipe_datasets", "train_recipe"]

DATASETS = ("digits", "fashion-mnist", "cifar10")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A dataset, a model, a batch size, and how to fit it.

    Attributes:
        dataset: ``'digits'``, ``'fashion-mnist'`` or ``'cifar10'``.
        model: :class:`~vit_tutorial.vit.ViTConfig` fields; ``image_size``, ``in_channels``
            and ``num_classes`` come from the dataset.
        batch_size: per process.
        fit: the :class:`~vit_tutorial.engine.FitSettings` (epochs, learning rate, ...).
    """

    dataset: str
    model: dict
    batch_size: int
    fit: FitSettings

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; valid: {DATASETS}")
        check_int("batch_size", self.batch_size)
        if not isinstance(self.fit, FitSettings):
            raise TypeError(f"fit must be a FitSettings, got {type(self.fit).__name__}")


def _vit(patch_size: int, dim: int, depth: int, num_heads: int, stem: str = "patch", **kw) -> dict:
    """A preset's model: an MLP of width 2·D and average pooling (no class token)."""
    shape = dict(patch_size=patch_size, dim=dim, depth=depth, num_heads=num_heads, stem=stem)
    return dict(shape, mlp_ratio=2.0, pool="mean", **kw)


def _fit(epochs: int, lr: float, warmup_epochs: float = 0, **options) -> FitSettings:
    """A preset's fit: DeiT's weight decay (0.05, the default) and label smoothing (0.1)."""
    return FitSettings(epochs, lr, warmup_epochs=warmup_epochs, label_smoothing=0.1, **options)


#: The presets. ``digits`` (the default for ``--dataset digits``) is the hybrid ViT of the
#: target: a convolutional stem, patch size 1 on the 8×8 digits, 4 blocks of width 64.
#: ``digits-vit`` is the paper's plain patch embedding with the patch size that suits it best on
#: digits (4, so 4 tokens), ``digits-tiny`` a smoke test, and ``cifar10`` a hybrid ViT for
#: CIFAR-10 on a GPU. ``fashion-mnist`` is chapter 8's hybrid ViT (a convolutional stem to a 7×7
#: grid, 4 blocks of width 64), 13 epochs without augmentation, both chosen on seed 0's test
#: accuracy, as chapter 8 says; ``fashion-mnist-tiny`` a smoke test.
RECIPES: dict[str, Recipe] = {
    "digits": Recipe("digits", _vit(1, 64, 4, 4, "conv"), 64, _fit(20, 2e-3, 5)),
    "digits-vit": Recipe("digits", _vit(4, 64, 4, 4), 64, _fit(40, 2e-3, 5)),
    "digits-tiny": Recipe("digits", _vit(4, 16, 1, 2), 64, _fit(2, 3e-3)),
    "fashion-mnist": Recipe("fashion-mnist", _vit(4, 64, 4, 4, "conv"), 128, _fit(13, 2e-3, 1)),
    "fashion-mnist-tiny": Recipe("fashion-mnist", _vit(7, 16, 1, 2), 256, _fit(1, 3e-3)),
    "cifar10": Recipe(
        "cifar10", _vit(4, 192, 6, 3, "conv", drop_path=0.1), 256, _fit(50, 1e-3, 5, grad_clip=1.0)
    ),
}
#: The preset ``--dataset`` picks when ``--preset`` is not given.
DEFAULT_PRESET = {"digits": "digits", "fashion-mnist": "fashion-mnist", "cifar10": "cifar10"}


def recipe_datasets(
    recipe: Recipe, seed: int = 0, data_root: str | Path | None = None
) -> DataSplits:
    """The data of ``recipe``: its dataset, its batch size, the loader shuffled by ``seed``.
    ``data_root`` is where CIFAR-10 is (or is downloaded to), and where Fashion-MNIST's files
    are looked for (default: :func:`~vit_tutorial.data.data_root`)."""
    if recipe.dataset == "digits":
        return digits_datasets(seed=seed, batch_size=recipe.batch_size)
    if recipe.dataset == "fashion-mnist":
        return fashion_mnist_datasets(data_root, seed=seed, batch_size=recipe.batch_size)
    return cifar10_datasets(data_root or "data", seed=seed, batch_size=recipe.batch_size)


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

    The seed fixes the initial weights and the data order; the digits split is the same for
    every seed. ``epochs``, ``lr`` and ``batch_size``, when not ``None``, override the preset's
    (and are checked there: ``epochs=0`` is a ``ValueError``, not ignored, as is an unknown
    preset). ``device``, ``amp`` and ``compile`` are :func:`~vit_tutorial.engine.fit`'s.
    """
    if preset not in RECIPES:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {sorted(RECIPES)}")
    seed = check_seed(seed)
    recipe = RECIPES[preset]
    given = {k: v for k, v in {"epochs": epochs, "lr": lr}.items() if v is not None}
    batch_size = recipe.batch_size if batch_size is None else batch_size
    settings = dataclasses.replace(recipe.fit, **given)
    recipe = dataclasses.replace(recipe, fit=settings, batch_size=batch_size)
    data = recipe_datasets(recipe, seed, data_root)
    torch.manual_seed(seed)  # the same initial weights on every rank
    shape = dict(image_size=data.image_size, in_channels=data.in_channels)
    model = VisionTransformer(**shape, num_classes=data.num_classes, **recipe.model)
    options = dict(device=device, amp=amp, progress=progress, checkpoint_path=checkpoint_path)
    held_out = data.val_loader or data.test_loader  # digits and CIFAR-10 have no validation split
    options.update(compile=compile, extra={"seed": seed})  # the CLI resumes only this seed
    history = fit(model, data.train_loader, held_out, recipe.fit, **options)
    accuracy = evaluate(model, data.test_loader, device, amp)["accuracy"]
    return TrainResult(model, history, accuracy, sum(history["time"]))
