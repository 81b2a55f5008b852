"""Tests for vit_tutorial/data_efficiency.py: chapter 8's models, budget rule, augmentations
and runs."""

import math

import pytest
import torch
from torchvision.models import ResNet, resnet18

from vit_tutorial.data_efficiency import (
    AUGMENTATIONS,
    FULL_TRAIN_SIZE,
    STEPS,
    RunSpec,
    build_model,
    epochs_for,
    load_teacher,
    resnet18_greyscale,
    run,
)
from vit_tutorial.recipes import RECIPES
from vit_tutorial.vit import VisionTransformer


def test_greyscale_resnet_is_torchvisions_with_a_one_channel_stem():
    model = resnet18_greyscale(1, 10)
    reference = resnet18(num_classes=10)
    assert isinstance(model, ResNet)
    conv = model.conv1
    assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (1, 64, (7, 7))
    assert (conv.stride, conv.padding, conv.bias) == ((2, 2), (3, 3), None)
    ours = dict(model.named_parameters())
    theirs = dict(reference.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, p in ours.items():
        if name != "conv1.weight":
            assert p.shape == theirs[name].shape, name
    assert (
        sum(p.numel() for p in model.parameters())
        == sum(p.numel() for p in reference.parameters()) - 2 * 64 * 7 * 7
    )  # two input channels fewer in the stem
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    # torchvision's initialisation of convolutions: Kaiming normal, fan_out
    std = math.sqrt(2 / (64 * 7 * 7))
    assert conv.weight.std().item() == pytest.approx(std, rel=0.1)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1"])
def test_greyscale_resnet_rejects_bad_channels(value):
    with pytest.raises(ValueError, match=f"in_channels must be an integer >= 1, got {value!r}"):
        resnet18_greyscale(value)


def test_build_model_matches_the_cpu_recipe_and_the_stems():
    hybrid, vit = build_model("hybrid"), build_model("vit")
    assert isinstance(hybrid, VisionTransformer) and isinstance(vit, VisionTransformer)
    recipe = RECIPES["fashion-mnist"].model
    for field, value in recipe.items():  # the study's hybrid is the CPU recipe's model
        assert getattr(hybrid.config, field) == value, field
    assert vit.config.stem == "patch" and vit.config.patch_size == 4
    assert hybrid(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    student = build_model("vit", pool="cls", distilled=True)
    assert student.config.distilled and student.config.pool == "cls"
    assert build_model("hybrid", drop_path=0.1).config.drop_path == 0.1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="cnn"), "unknown model 'cnn'; expected one of"),
        (dict(name="resnet18", distilled=True), "apply to the ViTs, not to 'resnet18'"),
        (dict(name="resnet18", pool="cls"), "apply to the ViTs, not to 'resnet18'"),
        (dict(name="resnet18", drop_path=0.1), "apply to the ViTs, not to 'resnet18'"),
    ],
)
def test_build_model_errors(kwargs, message):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=message):
        build_model(name, **kwargs)


def test_the_budget_rule_gives_every_size_the_same_steps():
    assert STEPS == 13 * math.ceil(FULL_TRAIN_SIZE / 128) == 5590
    for n in (300, 1000, 4000, 15000, 55000):
        epochs = epochs_for(n, STEPS)
        steps_per_epoch = math.ceil(n / 128)
        assert epochs * steps_per_epoch >= STEPS > (epochs - 1) * steps_per_epoch
    assert epochs_for(55000, STEPS) == 13 and epochs_for(1000, STEPS) == 699


@pytest.mark.parametrize("name, value", [("train_size", 0), ("steps", True), ("batch_size", 1.0)])
def test_epochs_for_rejects_bad_numbers(name, value):
    args = {"train_size": 1000, "steps": 10, "batch_size": 128, name: value}
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1, got {name}={value!r}"):
        epochs_for(**args)


def test_run_spec_keys_and_teacher():
    spec = RunSpec("vit", 4000, 2, 100, pool="cls", distilled=True)
    assert spec.key == "vit-n4000-s2-none-t100-cls-distilled"
    assert spec.teacher == RunSpec("resnet18", 4000, 2, 100)
    assert RunSpec("hybrid", augmentation="erasing").key == "hybrid-n55000-s0-erasing-t5590"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(model="swin"), "unknown model 'swin'"),
        (dict(model="vit", augmentation="cutout"), "unknown augmentation 'cutout'"),
        (dict(model="vit", pool="max"), "pool must be 'mean' or 'cls', got 'max'"),
        (dict(model="vit", distilled=True), "a distilled run pools the class token"),
        (dict(model="resnet18", pool="cls"), "has no class token"),
        (dict(model="vit", train_size=0), "train_size must be an integer >= 1"),
    ],
)
def test_run_spec_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**kwargs)


@pytest.mark.parametrize("name", sorted(AUGMENTATIONS))
def test_each_augmentation_maps_a_uint8_image_to_a_uint8_image(name):
    augmentation = AUGMENTATIONS[name]
    image = torch.randint(0, 256, (1, 28, 28), dtype=torch.uint8)
    if augmentation.image is not None:
        torch.manual_seed(0)
        out = augmentation.image()(image)
        assert out.dtype == torch.uint8 and out.shape == (1, 28, 28)
    assert augmentation.drop_path in (0.0, 0.1)
    assert augmentation.description


def test_the_all_row_uses_every_lever():
    row = AUGMENTATIONS["all"]
    assert row.image is not None and row.batch and row.drop_path == 0.1
    names = [type(t).__name__ for t in row.image().transforms]
    assert names == ["RandomCrop", "RandomHorizontalFlip", "RandAugment", "RandomErasing"]


def test_a_distilled_run_needs_its_teacher():
    spec = RunSpec("vit", 300, 0, 5, pool="cls", distilled=True)
    with pytest.raises(ValueError, match="pass its teacher \\(resnet18-n300-s0-none-t5\\)"):
        run(spec, device="cpu")


def test_load_teacher_round_trip(tmp_path):
    model = resnet18_greyscale()
    path = tmp_path / "teacher.pt"
    torch.save(model.state_dict(), path)
    loaded = load_teacher(path)
    assert not loaded.training
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_short_run_on_the_real_data_saves_its_weights(tmp_path):
    path = tmp_path / "vit.pt"
    torch.manual_seed(0)
    result = run(RunSpec("vit", 300, 0, 6), device="cpu", save_to=path)
    assert result["epochs"] == 2 and result["optimizer_steps"] == 6
    assert result["key"] == "vit-n300-s0-none-t6"
    assert result["parameters"] == sum(p.numel() for p in build_model("vit").parameters())
    assert 0 <= result["test_accuracy"] <= 1 and 0 <= result["val_accuracy"] <= 1
    assert not list(tmp_path.glob("*.tmp"))
    saved = torch.load(path, weights_only=True)
    torch.manual_seed(0)
    initial = build_model("vit").state_dict()
    assert saved.keys() == initial.keys()
    assert not torch.equal(saved["head.weight"], initial["head.weight"])  # it trained
