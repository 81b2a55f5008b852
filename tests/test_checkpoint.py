"""Tests for vit_tutorial/checkpoint.py: round trip, RNG, config checks, atomic writes."""

import datetime
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import vit_tutorial.checkpoint as checkpoint
from vit_tutorial.checkpoint import _sha256, load_checkpoint, save_checkpoint

from tiny_models import tiny_vit


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_checkpoint_round_trip_with_weights_only(tmp_path):
    model = tiny_vit()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 1, 4, 4)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, model, optimizer=optimizer, epoch=3, history={"val_acc": [0.5]})
    raw = torch.load(path, weights_only=True)  # only tensors and plain containers inside
    assert raw["config"]["dim"] == 16 and raw["epoch"] == 3
    other = tiny_vit()
    other_optimizer = torch.optim.AdamW(other.parameters(), lr=0.1)
    torch.manual_seed(123)
    state = load_checkpoint(path, other, other_optimizer)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True)
    )
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
    with pytest.raises(
        ValueError,
        match=r"different model config: dim: checkpoint 16 vs model 32;"
        r" num_heads: checkpoint 2 vs model 4",
    ):
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


# --- integrity, unreadable files, extras, configs -----------------------------------------


def test_a_corrupted_weight_is_detected_naming_the_file(tmp_path):
    model = tiny_vit()
    path = tmp_path / "c.pt"
    save_checkpoint(path, model)
    weight = model.state_dict()["head.weight"]  # (3, 16) float32: 192 bytes
    raw = bytearray(path.read_bytes())
    start = raw.find(weight.numpy().tobytes())
    assert start > 0 and weight.numel() * 4 >= 128
    raw[start + 64 : start + 128] = bytes(b ^ 0xFF for b in raw[start + 64 : start + 128])
    path.write_bytes(raw)
    assert torch.load(path, weights_only=True)["epoch"] == 0  # torch itself notices nothing
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} is corrupted: .*SHA-256"):
        load_checkpoint(path, tiny_vit())


def _truncated(path, model):
    save_checkpoint(path, model)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "write, expected",
    [
        (_truncated, "cannot be read by torch.load"),
        (lambda path, model: path.write_bytes(b""), "is empty"),
        (lambda path, model: path.write_text("not a checkpoint"), "does not load safely"),
        (lambda path, model: torch.save({"a": datetime.date(2024, 1, 1)}, path), "does not load"),
        (
            lambda path, model: torch.save(model.state_dict(), path),
            r"is a plain state dict \(keys 'cls_token', .*\), not a checkpoint",
        ),
        (lambda path, model: torch.save([1, 2], path), "holds a list, not a checkpoint"),
        (
            lambda path, model: torch.save({"model": model.state_dict(), "epoch": 1}, path),
            r"lacks \['config', .*'sha256'\]",
        ),
    ],
)
def test_unreadable_files_raise_value_error_naming_the_file(tmp_path, write, expected):
    path = tmp_path / "c.pt"
    write(path, tiny_vit())
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} {expected}") as error:
        load_checkpoint(path, tiny_vit())
    assert "save_checkpoint" in str(error.value)  # what was expected
    shown = f"{error.value} {error.value.__cause__}"  # the message, and the cause a traceback shows
    assert "weights_only` set to `False" not in shown  # torch's advice to trust the file: never


def test_a_plain_state_dict_is_refused_with_safe_advice(tmp_path):
    torch.save(tiny_vit().state_dict(), tmp_path / "c.pt")
    with pytest.raises(
        ValueError, match=re.escape("load_state_dict(torch.load(path, weights_only")
    ):
        load_checkpoint(tmp_path / "c.pt", tiny_vit())


@pytest.mark.parametrize("epoch", [np.int64(2), 2])
def test_a_numpy_epoch_is_saved_as_an_int(tmp_path, epoch):
    save_checkpoint(tmp_path / "c.pt", tiny_vit(), epoch=epoch)
    assert type(load_checkpoint(tmp_path / "c.pt", tiny_vit())["epoch"]) is int


@pytest.mark.parametrize("epoch, error", [(-1, ValueError), (1.5, TypeError), ("1", TypeError)])
def test_a_bad_epoch_is_refused_before_writing(tmp_path, epoch, error):
    with pytest.raises(error, match=f"epoch must be .*, got {epoch!r}"):
        save_checkpoint(tmp_path / "c.pt", tiny_vit(), epoch=epoch)
    assert os.listdir(tmp_path) == []


def test_numpy_scalars_in_the_history_are_saved_as_python_numbers(tmp_path):
    path = tmp_path / "c.pt"
    history = {"val_acc": [np.float32(0.5), np.float64(0.25)], "epoch": [np.int64(1), 2]}
    save_checkpoint(
        path, tiny_vit(), history=history, extra={"best": np.array(0.75), "ok": np.bool_(True)}
    )
    state = torch.load(path, weights_only=True)
    assert state["history"] == {"val_acc": [0.5, 0.25], "epoch": [1, 2]}
    assert state["extra"] == {"best": 0.75, "ok": True}
    assert type(state["history"]["epoch"][0]) is int and type(state["extra"]["ok"]) is bool
    assert load_checkpoint(path, tiny_vit())["history"]["val_acc"] == [0.5, 0.25]


def test_subclasses_of_plain_types_are_saved_as_the_plain_types(tmp_path):
    """torch.__version__ is a str subclass, which weights_only=True would refuse to unpickle
    (found by a result file's provenance)."""
    import enum

    class Level(enum.IntEnum):
        HIGH = 2

    path = tmp_path / "c.pt"
    extra = {"torch": torch.__version__, "level": Level.HIGH, "half": 0.5}
    save_checkpoint(path, tiny_vit(), extra=extra)
    state = torch.load(path, weights_only=True)
    assert state["extra"] == {"torch": str(torch.__version__), "level": 2, "half": 0.5}
    assert type(state["extra"]["torch"]) is str and type(state["extra"]["level"]) is int


@pytest.mark.parametrize(
    "history, extra, where",
    [
        (None, {"started": datetime.datetime(2024, 1, 1)}, r"extra\['started'\] is a datetime"),
        ({"val_acc": [0.5, np.zeros(3)]}, None, r"history\['val_acc'\]\[1\] is a ndarray"),
        (None, {"path": Path("runs")}, r"extra\['path'\] is a \w*Path"),
    ],
)
def test_values_weights_only_cannot_load_are_refused(tmp_path, history, extra, where):
    path = tmp_path / "c.pt"
    with pytest.raises(TypeError, match=where + ".*weights_only=True"):
        save_checkpoint(path, tiny_vit(), history=history, extra=extra)
    assert os.listdir(tmp_path) == []  # nothing written


@pytest.mark.parametrize(
    "saved, loaded",
    [
        (dict(image_size=4, patch_size=2), dict(image_size=(4, 4), patch_size=(2, 2))),
        (dict(image_size=(4, 4), patch_size=(2, 2)), dict(image_size=4, patch_size=[2, 2])),
    ],
)
def test_an_int_and_its_pair_are_the_same_config(tmp_path, saved, loaded):
    model = tiny_vit(**saved)
    save_checkpoint(tmp_path / "c.pt", model)
    other = tiny_vit(**loaded)
    load_checkpoint(tmp_path / "c.pt", other)
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True)
    )


def test_a_config_stored_with_lists_matches_tuples(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, tiny_vit(image_size=(4, 4)))
    state = torch.load(path, weights_only=True)
    state["config"]["image_size"] = [4, 4]  # as another serialiser may write a tuple
    torch.save(state, path)
    load_checkpoint(path, tiny_vit(image_size=4))
    with pytest.raises(ValueError, match=r"image_size: checkpoint \[4, 4\] vs model \(4, 8\)"):
        load_checkpoint(path, tiny_vit(image_size=(4, 8)))


def test_a_field_added_since_the_checkpoint_counts_at_its_default(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, tiny_vit())
    state = torch.load(path, weights_only=True)
    del state["config"]["reg_tokens"]  # as written before chapter 11 added the fields
    del state["config"]["qk_norm"]
    state["sha256"] = _sha256(state)  # sealed again, as save_checkpoint seals
    torch.save(state, path)
    load_checkpoint(path, tiny_vit())  # the defaults: no registers, no QK-norm
    with pytest.raises(ValueError, match=r"qk_norm: checkpoint False vs model True"):
        load_checkpoint(path, tiny_vit(qk_norm=True))


def test_a_model_built_from_numpy_sizes_saves_a_checkpoint_that_loads(tmp_path):
    """NumPy numbers are sizes; the checkpoint stores them as Python numbers."""
    from vit_tutorial.finetune import load_pretrained

    numpy_sizes = dict(image_size=np.int64(4), dim=np.int64(16), mlp_ratio=np.float32(2.0))
    save_checkpoint(tmp_path / "c.pt", tiny_vit(**numpy_sizes))
    state = load_checkpoint(tmp_path / "c.pt", tiny_vit())
    assert type(state["config"]["dim"]) is int and type(state["config"]["mlp_ratio"]) is float
    assert load_pretrained(tmp_path / "c.pt")[0].config.dim == 16
