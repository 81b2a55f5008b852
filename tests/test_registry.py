"""Tests for vit_tutorial/registry.py: every family's presets by name, as timm's registry."""

import dataclasses

import pytest
import torch

import vit_tutorial
from vit_tutorial.axial import AXIAL_PRESETS, AxialViT
from vit_tutorial.registry import FAMILIES, create_model, list_models
from vit_tutorial.swin import SWIN_PRESETS, SwinTransformer, create_swin
from vit_tutorial.vit import PRESETS, VisionTransformer, create_vit

#: Written out here, not read from FAMILIES, so that a family the registry drops fails.
EXPECTED = [(PRESETS, VisionTransformer), (SWIN_PRESETS, SwinTransformer)]
EXPECTED += [(AXIAL_PRESETS, AxialViT)]
ALL = [(name, presets, cls) for presets, cls in EXPECTED for name in presets]
#: One small version of each family, for a real forward pass.
SMALL = {
    "vit_tiny_patch16_224": dict(image_size=32, depth=1),
    "axial_vit_tiny_patch16_224": dict(image_size=32, depth=1),
    "swin_fashion": {},
}


@pytest.mark.parametrize(("name", "presets", "cls"), ALL, ids=[name for name, *_ in ALL])
def test_every_preset_of_every_family_builds_with_its_class_and_config(name, presets, cls):
    with torch.device("meta"):  # allocates nothing: ViT-H/14 builds in a moment
        model = create_model(name)
    assert type(model) is cls
    assert model.config == presets[name]
    assert all(p.is_meta for p in model.parameters())


def test_the_names_are_every_family_s_presets_each_once():
    names = [name for name, *_ in ALL]
    assert list_models() == sorted(names)
    assert len(set(names)) == len(names), "two families share a name"
    assert [cls for _, cls in FAMILIES.values()] == [cls for _, cls in EXPECTED]


def test_list_models_filters_with_a_pattern_as_timm():
    assert list_models("swin_*") == sorted(SWIN_PRESETS)
    assert list_models("vit_*") == sorted(PRESETS)  # not the axial ones
    assert list_models("axial_*") == sorted(AXIAL_PRESETS)
    assert list_models("*_patch32_*") == ["vit_base_patch32_224"]
    assert list_models("resnet*") == []


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("swin_fashion", dict(num_classes=3)),
        ("swin_tiny_patch4_window7_224", dict(drop_path=0.1, window_size=8)),
        ("vit_small_patch16_224", dict(num_classes=10, depth=2, pool="mean")),
        ("axial_vit_base_patch16_224", dict(image_size=64, pos_embed="sincos2d")),
    ],
)
def test_overrides_apply_and_leave_the_preset_alone(name, overrides):
    preset = next(presets[name] for presets, _ in EXPECTED if name in presets)
    before = dataclasses.asdict(preset)
    with torch.device("meta"):
        model = create_model(name, **overrides)
    assert model.config == dataclasses.replace(preset, **overrides)
    assert dataclasses.asdict(preset) == before


@pytest.mark.parametrize("name", sorted(SMALL))
def test_num_classes_zero_gives_the_pooled_features_in_every_family(name):
    model = create_model(name, num_classes=0, **SMALL[name])
    assert isinstance(model.head, torch.nn.Identity)
    size = model.config.image_size
    images = torch.randn(2, model.config.in_channels, size, size)
    assert model(images).shape == (2, model.num_features)


@pytest.mark.parametrize(
    ("name", "close"),
    [
        ("vit_tiny_patch16", ["axial_vit_tiny_patch16_224", "vit_tiny_patch16_224"]),
        ("swin_t", ["swin_tiny_patch4_window7_224"]),  # a prefix: difflib alone finds nothing
        ("swin_fashon", ["swin_fashion"]),  # a typo: difflib finds it
        ("resnet50", []),
    ],
)
def test_an_unknown_name_lists_the_close_ones(name, close):
    with pytest.raises(ValueError) as error:
        create_model(name)
    message = f"unknown model {name!r}; close: {close}; list_models() lists them all"
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("name", "field", "config", "valid"),
    [
        ("swin_fashion", "pool", "SwinConfig", "window_size"),
        ("vit_tiny_patch16_224", "window_size", "ViTConfig", "pool"),
        ("axial_vit_tiny_patch16_224", "pool", "AxialViTConfig", "pos_embed"),
    ],
)
def test_an_unknown_override_names_the_field_and_the_family_s_fields(name, field, config, valid):
    with pytest.raises(TypeError, match=rf"unknown {config} fields \['{field}'\]; valid fields: "):
        create_model(name, **{field: 1})
    with pytest.raises(TypeError, match=rf"valid fields: \[.*'{valid}'.*\]$"):
        create_model(name, **{field: 1})


def test_create_vit_and_create_swin_build_their_own_family_only():
    for name in PRESETS:
        with torch.device("meta"):
            assert create_vit(name, depth=2).config == create_model(name, depth=2).config
    assert create_swin("swin_fashion").config == create_model("swin_fashion").config
    for create, own in [(create_vit, PRESETS), (create_swin, SWIN_PRESETS)]:
        for other in ["swin_fashion", "vit_tiny_patch16_224", "axial_vit_tiny_patch16_224"]:
            if other not in own:
                match = rf"unknown preset '{other}'; valid presets: \[.*'{sorted(own)[0]}'"
                with pytest.raises(ValueError, match=match):
                    create(other)


def test_the_root_exports_the_registry():
    assert vit_tutorial.create_model is create_model
    assert vit_tutorial.list_models is list_models
