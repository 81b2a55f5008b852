"""Tests for vit_tutorial/recipes.py: the presets and train_recipe."""

import dataclasses
import re

import numpy as np
import pytest
import torch

import vit_tutorial.recipes as recipes
from vit_tutorial.recipes import RECIPES, recipe_datasets, train_recipe
from vit_tutorial.vit import VisionTransformer


def test_presets_build_valid_models():
    shapes = {"digits": (8, 1), "fashion-mnist": (28, 1), "cifar10": (32, 3)}
    for name, recipe in RECIPES.items():
        size, channels = shapes[recipe.dataset]
        model = VisionTransformer(
            image_size=size, in_channels=channels, num_classes=10, **recipe.model
        )
        assert model(torch.zeros(2, channels, size, size)).shape == (2, 10), name
    assert RECIPES["digits"].model["stem"] == "conv"  # the target recipe is the hybrid ViT


def test_seed_changes_the_run_and_repeats_it():
    a = train_recipe("digits-tiny", seed=0, epochs=1, progress=False)
    b = train_recipe("digits-tiny", seed=0, epochs=1, progress=False)
    c = train_recipe("digits-tiny", seed=1, epochs=1, progress=False)
    assert a.history["train_loss"] == b.history["train_loss"]
    assert a.history["train_loss"] != c.history["train_loss"]


def test_unknown_preset_in_python_raises():
    with pytest.raises(ValueError, match="unknown preset 'nope'; valid presets: .*'digits'"):
        train_recipe("nope")


@pytest.mark.parametrize(
    "override", [{"epochs": 0}, {"lr": 0.0}, {"batch_size": 0}, {"batch_size": -1}]
)
def test_zero_or_negative_overrides_are_refused_not_replaced_by_the_preset(override):
    ((name, value),) = override.items()
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got {value}"):
        train_recipe("digits-tiny", progress=False, **override)


def test_fashion_mnist_recipe_validates_on_its_own_split_without_augmentation():
    # no augmentation: in 13 epochs crops and flips cost accuracy (chapter 8's ablation)
    data = recipe_datasets(RECIPES["fashion-mnist"], seed=0)
    assert (len(data.train), len(data.val), len(data.test)) == (55000, 5000, 10000)
    assert data.train.transform is None and data.val.transform is None
    assert data.train_loader.batch_size == RECIPES["fashion-mnist"].batch_size


def test_an_unknown_dataset_is_named():
    with pytest.raises(ValueError, match="unknown dataset 'mnist'; valid: .'digits'"):
        dataclasses.replace(RECIPES["digits"], dataset="mnist")


@pytest.mark.parametrize(
    "override, error, message",
    [
        ({"seed": "0"}, TypeError, "seed must be an integer, got '0'"),
        ({"seed": 1.5}, TypeError, "seed must be an integer, got 1.5"),
        ({"seed": -1}, ValueError, "seed must be at least 0, got -1"),
        ({"lr": float("nan")}, ValueError, "lr must be positive, got nan"),
        ({"lr": np.float32("inf")}, ValueError, "lr must be positive, got inf"),
        ({"epochs": np.float64(2.0)}, TypeError, "epochs must be an integer, got"),
        ({"batch_size": 8.0}, TypeError, "batch_size must be an integer, got 8.0"),
    ],
)
def test_bad_seeds_and_overrides_are_refused_before_the_data_loads(
    override, error, message, monkeypatch
):
    monkeypatch.setattr(recipes, "recipe_datasets", lambda *a: pytest.fail("loaded the data"))
    with pytest.raises(error, match=re.escape(message)):
        train_recipe("digits-tiny", progress=False, **override)


def test_numpy_scalars_are_numbers_and_the_seed_is_kept_in_the_checkpoint(tmp_path):
    numbers = dict(
        seed=np.int64(1), epochs=np.int64(1), lr=np.float32(3e-3), batch_size=np.int8(64)
    )
    result = train_recipe(
        "digits-tiny", checkpoint_path=tmp_path / "r.pt", progress=False, **numbers
    )
    plain = train_recipe("digits-tiny", seed=1, epochs=1, lr=3e-3, progress=False)
    assert result.history["train_loss"] == pytest.approx(plain.history["train_loss"])
    assert torch.load(tmp_path / "r.pt", weights_only=True)["extra"]["seed"] == 1
