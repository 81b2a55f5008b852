"""Tests for vit_tutorial/finetune.py: pre-trained sources, new heads, frozen encoders, folders.

Offline: torchvision and timm models are built with random weights (``pretrained=False``),
which takes the same path as their downloaded weights.
"""

import dataclasses
import math
import sys

import numpy as np
import pytest
import timm
import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT

from vit_tutorial.checkpoint import save_checkpoint
from vit_tutorial.data import image_folder_datasets
from vit_tutorial.engine import fit
from vit_tutorial.finetune import (
    FINETUNE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    LINEAR_PROBE,
    finetune,
    freeze_for_linear_probe,
    load_pretrained,
    replace_head,
    set_image_size,
)
from vit_tutorial.interop import max_abs_logit_difference
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.positional import resize_pos_embed
from vit_tutorial.vit import VisionTransformer

from tiny_models import blobs, tiny_vit, write_image_folder

SMALL = dict(image_size=32, patch_size=8, dim=16, depth=1, num_heads=2, num_classes=5)
MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturbed(model):
    """``model`` with a random head: a zero head gives zero logits, which hide differences."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


# --- load_pretrained -----------------------------------------------------------------------


@pytest.mark.parametrize("pretrained", [False, True])
def test_timm_source_gives_the_same_logits_and_timm_normalisation(pretrained, monkeypatch):
    calls = []
    create = timm.create_model

    def offline(name, pretrained):  # the real model, never downloaded
        calls.append((name, pretrained))
        return create(name, pretrained=False)

    monkeypatch.setattr(timm, "create_model", offline)
    ours, mean, std = load_pretrained("timm:vit_tiny_patch16_224", pretrained=pretrained)
    assert calls == [("vit_tiny_patch16_224", pretrained)]
    torch.manual_seed(0)
    reference = create("vit_tiny_patch16_224", pretrained=False)  # the same random weights
    assert isinstance(ours, VisionTransformer) and ours.config.dim == 192
    assert (mean, std) == ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # timm's augreg ViTs
    assert max_abs_logit_difference(ours, reference, torch.randn(2, 3, 224, 224)) <= 1e-4


@pytest.mark.parametrize("pretrained", [False, True])
def test_torchvision_source_converts_what_get_model_returns(pretrained, monkeypatch):
    reference = perturbed(TorchvisionViT(32, 8, 1, 2, 16, 32, num_classes=4))
    calls = []

    def get_model(name, weights):  # offline: a small ViT instead of the download
        calls.append((name, weights))
        return reference

    monkeypatch.setattr(torchvision.models, "get_model", get_model)
    ours, mean, std = load_pretrained("torchvision:vit_b_16", pretrained=pretrained)
    weights = torchvision.models.ViT_B_16_Weights.IMAGENET1K_V1 if pretrained else None
    assert calls == [("vit_b_16", weights)]
    assert (mean, std) == (IMAGENET_MEAN, IMAGENET_STD)
    assert max_abs_logit_difference(ours, reference, torch.randn(3, 3, 32, 32)) <= 1e-4


def test_checkpoint_source_round_trips_with_its_normalisation(tmp_path):
    model = perturbed(VisionTransformer(**SMALL, pool="mean"))
    save_checkpoint(tmp_path / "a.pt", model, extra={"mean": MEAN, "std": STD})
    save_checkpoint(tmp_path / "b.pt", model)
    loaded, mean, std = load_pretrained(str(tmp_path / "a.pt"))
    assert (mean, std) == (MEAN, STD)
    assert loaded.config == model.config
    assert max_abs_logit_difference(loaded, model, torch.randn(2, 3, 32, 32)) == 0
    assert load_pretrained(tmp_path / "b.pt")[1:] == (IMAGENET_MEAN, IMAGENET_STD)


def test_reading_a_checkpoint_source_does_not_restore_its_rng(tmp_path):
    save_checkpoint(tmp_path / "a.pt", VisionTransformer(**SMALL))
    saved = torch.load(tmp_path / "a.pt", weights_only=True)["rng"]["cpu"]
    torch.manual_seed(123)
    load_pretrained(tmp_path / "a.pt")
    assert not torch.equal(torch.get_rng_state(), saved)  # load_checkpoint would restore it


@pytest.mark.parametrize(
    "source, message",
    [
        ("nope", "nope does not exist: expected 'torchvision:NAME'"),
        ("runs/p.pt", "runs/p.pt does not exist: expected .*'timm:NAME'.* or the path of a"),
        ("mystery:x", "mystery:x does not exist"),
        ("torchvision:", "unknown source 'torchvision:'"),
        ("torchvision:resnet18", "unknown torchvision ViT 'resnet18'; expected one of ['vit_b_16'"),
        ("timm:vit_nope", "unknown timm model 'vit_nope'"),
        ("timm:resnet18", "timm model 'resnet18' is a ResNet, not a timm VisionTransformer"),
    ],
)
def test_unknown_sources_are_value_errors_naming_them(source, message):
    with pytest.raises(ValueError, match="^" + message.replace("[", r"\[").replace("(", r"\(")):
        load_pretrained(source, pretrained=False)


def test_a_timm_rope_vit_loads_through_the_eva_converter():
    model, mean, std = load_pretrained("timm:vit_small_patch16_rope_224", pretrained=False)
    assert model.config.rope == "axial" and model.config.dim == 384 and len(mean) == 3


def test_files_that_are_not_vit_checkpoints_are_value_errors_naming_them(tmp_path):
    garbage, plain, linear = tmp_path / "garbage.pt", tmp_path / "plain.pt", tmp_path / "linear.pt"
    garbage.write_bytes(b"not a checkpoint")
    torch.save(VisionTransformer(**SMALL).state_dict(), plain)
    save_checkpoint(linear, torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=f"{garbage} does not load safely: it is not a checkpoint"):
        load_pretrained(garbage)
    with pytest.raises(ValueError, match=f"{tmp_path} is a folder: expected 'torchvision:NAME'"):
        load_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"{plain} is a plain state dict"):
        load_pretrained(plain)
    with pytest.raises(ValueError, match=f"{linear} holds no VisionTransformer config"):
        load_pretrained(linear)


def test_an_axial_vit_checkpoint_is_refused_by_its_weights(tmp_path):
    """AxialViTConfig's fields are all ViTConfig's: the weights tell the models apart."""
    from vit_tutorial.axial import AxialViT

    path = tmp_path / "axial.pt"
    save_checkpoint(path, AxialViT(image_size=8, patch_size=2, dim=16, depth=1, num_heads=2))
    with pytest.raises(ValueError, match=f"{path} holds the weights of another model than a Vis"):
        load_pretrained(path)


def test_a_corrupted_checkpoint_source_is_refused(tmp_path):
    path = tmp_path / "a.pt"
    save_checkpoint(path, VisionTransformer(**SMALL))
    state = torch.load(path, weights_only=True)
    state["model"]["head.bias"] += 1
    torch.save(state, path)
    with pytest.raises(ValueError, match="is corrupted"):
        load_pretrained(path)


def test_a_hostile_pickle_is_refused_without_torchs_advice(tmp_path):
    torch.save({"model": perturbed}, tmp_path / "evil.pt")  # a function
    with pytest.raises(ValueError, match=f"{tmp_path / 'evil.pt'} does not load safely") as error:
        load_pretrained(tmp_path / "evil.pt")
    assert "weights_only` set to `False" not in f"{error.value} {error.value.__cause__}"


def test_the_hash_is_checked_before_the_stored_config_builds_a_model(tmp_path, monkeypatch):
    path = tmp_path / "a.pt"
    save_checkpoint(path, VisionTransformer(**SMALL))
    state = torch.load(path, weights_only=True)
    state["config"]["dim"] = 2**20  # a huge model, were it built
    torch.save(state, path)
    monkeypatch.setattr(VisionTransformer, "__init__", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(ValueError, match="is corrupted"):
        load_pretrained(path)


def test_a_masked_autoencoder_checkpoint_gives_its_encoder_as_to_vit_does(tmp_path):
    mae = MaskedAutoencoder(**SMALL, pool="mean", decoder_dim=8, decoder_depth=2, decoder_heads=2)
    perturbed(mae)
    save_checkpoint(tmp_path / "mae.pt", mae, extra={"mean": MEAN, "std": STD})
    model, mean, std = load_pretrained(tmp_path / "mae.pt")
    expected = mae.to_vit(SMALL["num_classes"])
    assert (mean, std) == (MEAN, STD) and model.config == expected.config
    assert all(torch.equal(v, expected.state_dict()[k]) for k, v in model.state_dict().items())


def test_bad_argument_types_and_missing_timm(monkeypatch):
    with pytest.raises(TypeError, match="source must be a string or a path, got int"):
        load_pretrained(3)
    with pytest.raises(TypeError, match="pretrained must be True or False, got 'no'"):
        load_pretrained("timm:vit_tiny_patch16_224", pretrained="no")
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ImportError, match="'timm:vit_tiny_patch16_224' needs timm: pip install"):
        load_pretrained("timm:vit_tiny_patch16_224", pretrained=False)


# --- set_image_size, replace_head, freeze_for_linear_probe ----------------------------------


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_set_image_size_resamples_the_table_and_copies_the_rest(pool):
    model = perturbed(VisionTransformer(**SMALL, pool=pool))
    bigger = set_image_size(model, 48)
    prefix = model.num_prefix_tokens
    assert bigger.config.image_size == 48 and bigger.grid_size == (6, 6)
    assert bigger.pos_embed.weight.shape == (1, prefix + 36, 16)
    expected = resize_pos_embed(model.pos_embed.weight, (4, 4), (6, 6), prefix)
    assert torch.equal(bigger.pos_embed.weight, expected)
    for name, value in model.state_dict().items():
        if name != "pos_embed.weight":
            assert torch.equal(bigger.state_dict()[name], value), name
    assert torch.isfinite(bigger(torch.randn(2, 3, 48, 48))).all()
    assert not bigger.training
    assert set_image_size(model, 32) is model and set_image_size(model, (32, 32)) is model


def test_set_image_size_of_a_sinusoidal_model_recomputes_its_table():
    model = perturbed(VisionTransformer(**SMALL, pos_embed="sincos2d"))
    wide = set_image_size(model, (32, 64))
    assert wide.pos_embed.table.shape == (1, 1 + 4 * 8, 16)
    assert torch.isfinite(wide(torch.randn(1, 3, 32, 64))).all()


def test_set_image_size_errors():
    with pytest.raises(ValueError, match=r"image size \(36, 36\) is not divisible by patch size"):
        set_image_size(VisionTransformer(**SMALL), 36)
    with pytest.raises(ValueError, match="pos_embed='relative'.*got image_size=48"):
        set_image_size(VisionTransformer(**SMALL, pos_embed="relative"), 48)
    with pytest.raises(TypeError, match="image_size must be an int or an"):
        set_image_size(VisionTransformer(**SMALL), "48")
    with pytest.raises(TypeError, match="model must be a vit_tutorial VisionTransformer"):
        set_image_size(torch.nn.Linear(2, 2), 48)


def test_replace_head_is_zero_and_the_config_rebuilds(tmp_path):
    model = perturbed(VisionTransformer(**SMALL)).double()
    assert replace_head(model, 3) is model
    assert model.head.weight.shape == (3, 16) and model.head.weight.dtype == torch.float64
    assert not model.head.weight.any() and not model.head.bias.any()
    assert model.config.num_classes == 3
    save_checkpoint(tmp_path / "ft.pt", model.float())
    assert load_pretrained(tmp_path / "ft.pt")[0].config == model.config


def test_replace_head_errors():
    with pytest.raises(ValueError, match="num_classes must be at least 1, got 0"):
        replace_head(VisionTransformer(**SMALL), 0)
    with pytest.raises(TypeError, match="num_classes must be an integer, got 2.5"):
        replace_head(VisionTransformer(**SMALL), 2.5)
    model = replace_head(VisionTransformer(**SMALL), np.int64(3))  # a NumPy integer is one
    assert type(model.config.num_classes) is int and model.head.out_features == 3
    with pytest.raises(ValueError, match="does not handle distilled models"):
        replace_head(VisionTransformer(**SMALL, distilled=True), 3)
    with pytest.raises(TypeError, match="model must be a vit_tutorial VisionTransformer"):
        replace_head(torch.nn.Linear(2, 2), 3)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_a_linear_probe_changes_the_head_and_nothing_else(pool):
    model = tiny_vit(pool=pool)
    assert freeze_for_linear_probe(model) == ["head.weight", "head.bias"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    loader = DataLoader(blobs(48), batch_size=16, shuffle=True)
    fit(model, loader, None, epochs=2, lr=1e-2, weight_decay=0.05, device="cpu", progress=False)
    for name, value in model.state_dict().items():
        changed = not torch.equal(value, before[name])
        assert changed == name.startswith("head."), name  # frozen: bit-identical, decay too


def test_freeze_refuses_other_models():
    with pytest.raises(
        TypeError, match="model must be a vit_tutorial VisionTransformer, got Linear"
    ):
        freeze_for_linear_probe(torch.nn.Linear(2, 2))


# --- finetune --------------------------------------------------------------------------------


ONE_EPOCH = dict(device="cpu", progress=False)


def test_finetune_replaces_the_head_and_uses_the_defaults(tmp_path):
    data = image_folder_datasets(
        write_image_folder(tmp_path / "photos"), image_size=32, mean=MEAN, std=STD, batch_size=8
    )
    # 14 training images in batches of 8: 2 steps, a 1-step warm-up, the last step at the peak.
    one_epoch = dataclasses.replace(FINETUNE, epochs=1)
    result = finetune(VisionTransformer(**SMALL), data, one_epoch, **ONE_EPOCH)
    assert result.model.config.num_classes == 3 and result.history["epoch"] == [1]
    assert result.history["lr"] == [pytest.approx(FINETUNE.lr)]
    assert not math.isnan(result.history["val_acc"][0])  # validated after every epoch
    model = VisionTransformer(**SMALL)
    encoder = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    probe = finetune(
        model, data, dataclasses.replace(LINEAR_PROBE, epochs=1), linear_probe=True, **ONE_EPOCH
    )
    assert probe.history["lr"] == [pytest.approx(LINEAR_PROBE.lr)] and LINEAR_PROBE.lr > FINETUNE.lr
    assert all(torch.equal(v, encoder[k]) for k, v in model.encoder.state_dict().items())
    assert model.head.weight.any()


def test_finetune_keeps_the_head_when_asked_and_its_checkpoint_carries_the_data(tmp_path):
    data = image_folder_datasets(
        write_image_folder(tmp_path / "photos"), image_size=32, mean=MEAN, std=STD, batch_size=8
    )
    model = VisionTransformer(**{**SMALL, "num_classes": 3})
    torch.nn.init.normal_(model.head.weight)  # not the zero head replace_head gives
    settings, path = dataclasses.replace(FINETUNE, epochs=1), tmp_path / "run.pt"
    result = finetune(
        model, data, settings, new_head=False, validate=False, checkpoint_path=path,
        extra={"seed": 7}, **ONE_EPOCH
    )  # fmt: skip
    assert math.isnan(result.history["val_acc"][0]) and model.head.weight.abs().max() > 0.5
    loaded, mean, std = load_pretrained(path)  # one checkpoint, written by fit, with extra
    assert (mean, std) == (MEAN, STD) and loaded.config == model.config
    assert torch.load(path, weights_only=True)["extra"]["seed"] == 7  # with the caller's extra


def test_finetune_refuses_data_with_other_channels(tmp_path):
    data = image_folder_datasets(
        write_image_folder(tmp_path / "photos"), image_size=32, mean=MEAN, std=STD
    )
    with pytest.raises(ValueError, match="the model takes 1 channels, the data has 3"):
        finetune(VisionTransformer(**SMALL, in_channels=1), data, device="cpu")
    with pytest.raises(TypeError, match="model must be a vit_tutorial VisionTransformer"):
        finetune(torch.nn.Linear(2, 2), data, device="cpu")
