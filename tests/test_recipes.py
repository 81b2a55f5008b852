"""Tests for vit_tutorial/recipes.py: the presets and train_recipe."""

import pytest
import torch

from vit_tutorial.recipes import RECIPES, train_recipe
from vit_tutorial.vit import VisionTransformer


def test_presets_build_valid_models():
    for name, recipe in RECIPES.items():
        size, channels = (8, 1) if recipe.dataset == "digits" else (32, 3)
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
    with pytest.raises(ValueError, match=rf"{name} must be .*, got {name}={value!r}"):
        train_recipe("digits-tiny", progress=False, **override)
