"""Tests for vit_tutorial/checkpoint.py: round trip, RNG, config checks, atomic writes."""

import os

import pytest
import torch
from torch import nn

import vit_tutorial.checkpoint as checkpoint
from vit_tutorial.checkpoint import load_checkpoint, save_checkpoint
from vit_tutorial.vit import VisionTransformer


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny_vit(**fields):
    kwargs = dict(image_size=4, patch_size=2, in_channels=1, num_classes=3, dim=16, depth=1,
                  num_heads=2, mlp_ratio=2.0)
    return VisionTransformer(**{**kwargs, **fields})


def test_checkpoint_round_trip_with_weights_only(tmp_path):
    model = tiny_vit()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, optimizer, epoch=3, history={"val_acc": [0.5]})
    raw = torch.load(path, weights_only=True)  # only tensors and plain containers inside
    assert raw["config"]["dim"] == 16 and raw["epoch"] == 3
    other = tiny_vit()
    other_optimizer = torch.optim.AdamW(other.parameters(), lr=0.1)
    torch.manual_seed(123)
    state = load_checkpoint(path, other, other_optimizer)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 other.state_dict().values(), strict=True))
    assert other_optimizer.state_dict()["state"][0]["step"] == 1
    assert state["history"] == {"val_acc": [0.5]}


def test_checkpoint_restores_the_rng(tmp_path):
    torch.manual_seed(7)
    save_checkpoint(tmp_path / "c.pt", nn.Linear(2, 2))
    expected = torch.rand(3)
    torch.rand(100)
    load_checkpoint(tmp_path / "c.pt", nn.Linear(2, 2))
    assert torch.equal(torch.rand(3), expected)


def test_checkpoint_config_mismatch_names_the_fields(tmp_path):
    save_checkpoint(tmp_path / "c.pt", tiny_vit())
    with pytest.raises(ValueError, match=r"different model config: dim: checkpoint 16 vs model 32;"
                                         r" num_heads: checkpoint 2 vs model 4"):
        load_checkpoint(tmp_path / "c.pt", tiny_vit(dim=32, num_heads=4))


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    save_checkpoint(path, nn.Linear(2, 2), epoch=1)

    def crash(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, nn.Linear(2, 2), epoch=2)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["epoch"] == 1  # the old file is intact
    assert os.listdir(tmp_path) == ["c.pt"]  # and no temporary file is left
