"""Every argument is checked once, at the entry point that receives it (issue 23).

A config validates its fields in ``__post_init__`` and a layer called directly checks its
arguments in ``__init__``; the layers a model builds from its validated config are made with
:func:`vit_tutorial.validate.trusted` and check nothing again.
"""

import collections
import sys

import numpy as np
import pytest
import torch

import vit_tutorial  # noqa: F401  (imports every module whose checks are counted)
from vit_tutorial import validate
from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import AxialAttention, AxialEncoderBlock, AxialViT
from vit_tutorial.encoder import MLP, BlockOptions, DropPath, Encoder, EncoderBlock
from vit_tutorial.patches import ConvStem, PatchEmbedding
from vit_tutorial.positional import RelativePositionBias, SinusoidalEmbedding2D
from vit_tutorial.validate import check_bool, check_int, check_real, trusted
from vit_tutorial.vit import VisionTransformer, ViTConfig, create_vit

SMALL = dict(image_size=32, patch_size=4, dim=64, depth=3, num_heads=4, num_classes=10)


@pytest.fixture
def checked(monkeypatch):
    """A Counter of the argument names that check_int/check_real/check_bool receive."""
    names = collections.Counter()

    def counting(check):
        def wrapper(name, *args, **kwargs):
            names[name] += 1
            return check(name, *args, **kwargs)

        return wrapper

    checks = (validate.check_int, validate.check_real, validate.check_bool)
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("vit_tutorial"):
            for check in checks:
                if getattr(module, check.__name__, None) is check:
                    monkeypatch.setattr(module, check.__name__, counting(check))
    return names


def test_vit_b16_checks_each_argument_once(checked):
    with torch.device("meta"):
        create_vit("vit_base_patch16_224")
    assert sum(checked.values()) <= 60  # 173 before issue 23, 38 of them of dim
    twice = {name: n for name, n in checked.items() if n > 1}
    assert not twice, f"checked more than once: {twice}"
    assert {"dim", "num_heads", "depth", "mlp_ratio", "dropout", "drop_path"} <= set(checked)


@pytest.mark.parametrize(
    "build",
    [
        lambda: VisionTransformer(**SMALL, pos_embed="relative", drop_path=0.1),
        lambda: VisionTransformer(**SMALL, pos_embed="sincos2d", pool="mean", stem="conv"),
        lambda: VisionTransformer(**{**SMALL, "num_classes": 5}, distilled=True),
        lambda: AxialViT(**SMALL, pos_embed="sincos2d", drop_path=0.1),
        lambda: Encoder(64, 4, 8, 0.1, mlp_ratio=2.0),
        lambda: AxialEncoderBlock(64, 8, drop_path=0.1),
        lambda: AxialAttention(64, 8, "height", attn_dropout=0.1),
        lambda: MultiHeadSelfAttention(64, 8),
    ],
    ids=[
        "relative",
        "sincos-conv",
        "distilled",
        "axial",
        "encoder",
        "axial-block",
        "axial-attn",
        "mhsa",
    ],
)
def test_every_entry_point_checks_each_argument_once(checked, build):
    build()
    assert checked, "nothing was checked"
    assert max(checked.values()) == 1, f"checked more than once: {dict(checked)}"


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: ViTConfig(dim=64.0), TypeError, r"dim must be an integer, got 64\.0"),
        (lambda: create_vit("vit_tiny_patch16_224", dropout=1.0), ValueError, r"dropout.*1\.0"),
        (lambda: VisionTransformer(**{**SMALL, "num_heads": 5}), ValueError, r"num_heads \(5\)"),
        (
            lambda: AxialViT(**{**SMALL, "dim": 66, "num_heads": 3}, pos_embed="sincos2d"),
            ValueError,
            "dim=66",
        ),
        (
            lambda: VisionTransformer(image_size=30, patch_size=3, stem="conv"),
            ValueError,
            r"\(3, 3\)",
        ),
        (
            lambda: AxialViT(**{**SMALL, "mlp_ratio": 0}),
            ValueError,
            "mlp_ratio must be positive, got 0",
        ),
        (
            lambda: MultiHeadSelfAttention(64, 4, attn_dropout=1.5),
            ValueError,
            r"attn_dropout.*1\.5",
        ),
        (lambda: MultiHeadSelfAttention(64, 4, qkv_bias=None), TypeError, "qkv_bias.*None"),
        (lambda: EncoderBlock(64, 4, drop_path=1.0), ValueError, r"drop_path must be .*got 1\.0"),
        (lambda: EncoderBlock(64, 4, dropout=2), ValueError, r"dropout must be .*got 2\.0"),
        (lambda: Encoder(16, 0, 2), ValueError, "depth must be at least 1, got 0"),
        (
            lambda: BlockOptions(64, 4, norm_eps=0.0),
            ValueError,
            r"norm_eps must be positive, got 0\.0",
        ),
        (lambda: MLP(8, 0), ValueError, "hidden_dim must be at least 1, got 0"),
        (lambda: DropPath(-0.1), ValueError, r"got -0\.1"),
        (lambda: PatchEmbedding(32, 4, in_channels=0), ValueError, "in_channels.*got 0"),
        (lambda: ConvStem(224, 14), ValueError, r"power-of-2 patch size, got \(14, 14\)"),
        (lambda: AxialAttention(16, 4, "depth"), ValueError, "got 'depth'"),
        (lambda: AxialEncoderBlock(16, 4, qkv_bias=1), TypeError, "qkv_bias.*got 1"),
        (lambda: RelativePositionBias(4, 0), ValueError, "num_heads must be at least 1, got 0"),
        (lambda: SinusoidalEmbedding2D(4, 66), ValueError, "dim=66"),
    ],
)
def test_bad_values_are_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_model_validates_the_config_it_is_given_once_more(checked):
    config = ViTConfig(**SMALL)  # a dataclass: it may be changed before the model is built
    config.num_heads = 5
    with pytest.raises(ValueError, match=r"num_heads \(5\)"):
        VisionTransformer(config)
    config.num_heads = 4
    checked.clear()
    VisionTransformer(config, num_classes=5)
    assert max(checked.values()) == 1


def test_trusted_builds_the_same_layer_without_checking(checked):
    torch.manual_seed(0)
    direct = EncoderBlock(32, 4, drop_path=0.1, mlp_ratio=2.0)
    checked.clear()
    torch.manual_seed(0)
    built = trusted(EncoderBlock, BlockOptions(32, 4, mlp_ratio=2.0), 0.1)
    # BlockOptions checked its fields once each; trusted and the layers below it, nothing
    assert checked == {name: 1 for name in ("dim", "num_heads", "qkv_bias", "mlp_ratio")} | {
        name: 1 for name in ("dropout", "attn_dropout", "norm_eps", "qk_norm")
    }
    assert repr(built) == repr(direct)
    for (name, a), (_, b) in zip(direct.state_dict().items(), built.state_dict().items()):
        assert torch.equal(a, b), name
    assert trusted(DropPath, 0.3).p == 0.3 and trusted(DropPath, 0.3).training


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: check_int("depth", True),
            TypeError,
            r"depth must be an integer, got True \(bool\)",
        ),
        (lambda: check_int("val_size", -1, minimum=0), ValueError, "at least 0, got -1"),
        (
            lambda: check_real("lr", float("nan"), 0.0, low_open=True),
            ValueError,
            "positive, got nan",
        ),
        (lambda: check_real("p", "0.1", 0.0, 1.0), TypeError, "p must be a real number, got '0.1'"),
        (lambda: check_real("p", 1.0, 0.0, 1.0, high_open=True), ValueError, r"\[0, 1\), got 1\.0"),
        (lambda: check_bool("augment", 1), TypeError, "augment must be True or False, got 1"),
        (lambda: check_int("per_class", 5501, 1, 5500), ValueError, "at most 5500, got 5501"),
        (lambda: check_int("n", np.int64(0)), ValueError, "n must be at least 1, got 0"),
        (lambda: check_int("n", np.bool_(True)), TypeError, "n must be an integer, got"),
        (lambda: check_int("n", np.float64(2.0)), TypeError, "n must be an integer, got"),
        (lambda: check_real("x", np.float32("nan")), ValueError, r"\[-inf, inf\], got nan"),
        (lambda: check_real("x", np.inf, 0.0), ValueError, r"\[0, inf\], got inf"),
        (lambda: check_real("x", -np.inf), ValueError, "got -inf"),
    ],
)
def test_check_messages_name_the_argument_and_value(call, error, match):
    with pytest.raises(error, match=match):
        call()
    assert check_int("n", 3) == 3 and check_real("x", 2) == 2.0 and check_bool("b", False) is False


@pytest.mark.parametrize("value", [np.int64(1000), np.int32(1000), np.uint8(200)])
def test_check_int_takes_numpy_integers_as_plain_ints(value):
    checked = check_int("train_size", value, maximum=1000)
    assert checked == int(value) and type(checked) is int


@pytest.mark.parametrize("value", [np.float32(0.25), np.float64(0.25), np.int64(1)])
def test_check_real_takes_numpy_numbers_as_plain_floats(value):
    checked = check_real("dropout", value, 0.0, 1.0)
    assert checked == float(value) and type(checked) is float


def test_build_preset_builds_the_named_preset_overridden_or_lists_the_presets():
    presets = {"small": ViTConfig(**SMALL)}
    model = validate.build_preset(presets, VisionTransformer, "small", depth=1)
    assert type(model) is VisionTransformer and model.config.depth == 1
    assert model.config.dim == SMALL["dim"] and presets["small"].depth == SMALL["depth"]
    with pytest.raises(ValueError, match=r"^unknown preset 'big'; valid presets: \['small'\]$"):
        validate.build_preset(presets, VisionTransformer, "big")
    with pytest.raises(TypeError, match=r"unknown ViTConfig fields \['window'\]"):
        validate.build_preset(presets, VisionTransformer, "small", window=7)
