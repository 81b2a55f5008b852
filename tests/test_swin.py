"""Tests for vit_tutorial/swin.py: the Swin Transformer, its presets and its cost."""

import dataclasses

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from vit_tutorial.swin import SWIN_PRESETS, SwinConfig, SwinTransformer, create_swin, swin_flops
from vit_tutorial.windows import PatchMerging, SwinBlock

SMALL = dict(image_size=(32, 48), patch_size=4, dim=16, depths=(2, 1), num_heads=(2, 4))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def parameters(model):
    return sum(p.numel() for p in model.parameters())


def measured_flops(model, image):
    """FlopCounterMode's counts for one image on the teaching path: every matrix product, and
    those of the Linear layers and convolutions alone. The second is chapter 8's count, whose
    fused attention the counter does not see on the CPU (the same on any torch version)."""
    for module in model.modules():
        if hasattr(module, "fused"):
            module.fused = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(image)
    ops = counter.get_flop_counts()["Global"]
    layers = sum(
        n for op, n in ops.items() if str(op) in ("aten.addmm", "aten.mm", "aten.convolution")
    )
    return counter.get_total_flops(), layers


def test_stages_shapes_and_shifts():
    model = SwinTransformer(**SMALL, window_size=4, num_classes=7)
    shapes = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape)))
        for m in (model.stages[0], model.stages[1].downsample, model.stages[1])
    ]
    assert model(torch.randn(2, 3, 32, 48)).shape == (2, 7)
    for hook in hooks:
        hook.remove()
    assert shapes == [(2, 8, 12, 16), (2, 4, 6, 32), (2, 4, 6, 32)]
    assert model.stages[0].downsample is None and isinstance(
        model.stages[1].downsample, PatchMerging
    )
    assert [b.shift_size for b in model.stages[0].blocks] == [0, 2]
    assert all(isinstance(b, SwinBlock) for s in model.stages for b in s.blocks)


def test_odd_grids_are_halved_rounding_up():
    config = SwinConfig(image_size=(28, 36), patch_size=4, depths=(1, 1, 1), num_heads=(1, 2, 4))
    assert config.stage_grids() == [(7, 9), (4, 5), (2, 3)]
    model = SwinTransformer(config, dim=8, window_size=3, num_classes=3)
    assert model(torch.randn(1, 3, 28, 36)).shape == (1, 3)


def test_drop_path_rises_linearly_over_all_blocks():
    model = SwinTransformer(**SMALL, drop_path=0.3)
    rates = [b.drop_path1.p for s in model.stages for b in s.blocks]
    assert rates == pytest.approx([0.0, 0.15, 0.3])


@pytest.mark.parametrize("name", sorted(SWIN_PRESETS))
def test_presets_build(name):
    with torch.device("meta"):  # allocates nothing
        model = create_swin(name, num_classes=5)
    assert model.config == dataclasses.replace(SWIN_PRESETS[name], num_classes=5)


@pytest.mark.parametrize("name", ["swin_tiny_patch4_window7_224", "swin_fashion"])
def test_presets_classify_small_images(name):
    size = 32 if name != "swin_fashion" else 28  # Swin-T at 224: the interop tests
    model = create_swin(name, image_size=size, num_classes=5)
    images = torch.randn(2, model.config.in_channels, size, size)
    assert model(images).shape == (2, 5)


def test_swin_fashion_matches_chapter_8s_vit():
    from vit_tutorial.experiments.ch08 import build_model

    vit, swin = build_model("vit"), create_swin("swin_fashion")
    image = torch.zeros(1, 1, 28, 28)
    assert swin.config.stage_grids() == [(14, 14), (7, 7), (4, 4)]
    assert [swin.config.stage_window(s) for s in range(3)] == [7, 7, 4]  # 4×4: one window
    assert abs(parameters(swin) / parameters(vit) - 1) <= 0.10
    (vit_all, vit_layers), (swin_all, swin_layers) = (measured_flops(m, image) for m in (vit, swin))
    assert vit_all == 15_405_312  # with the products inside attention
    assert vit_layers == 12_946_688  # the Linear layers and the convolution alone
    assert abs(swin_all / vit_all - 1) <= 0.10
    # SWIN_PRESETS' comment, number for number
    assert (parameters(vit), parameters(swin), swin_all) == (138_890, 146_844, 14_834_688)
    gains = [round(100 * (a / b - 1), 1) for a, b in [(146_844, 138_890), (swin_all, vit_all)]]
    assert gains == [5.7, -3.7]
    config = swin.config
    assert (config.patch_size, config.in_channels, config.num_classes) == (2, 1, 10)
    assert [o.dim for o in config.stage_options] == [16, 32, 64] and config.depths == (2, 6, 1)
    assert {o.dim // o.num_heads for o in config.stage_options} == {16}
    assert (config.mlp_ratio, config.drop_path) == (4.0, 0.0)
    assert [b.shift_size for b in swin.stages[0].blocks] == [0, 3]  # then shifted
    grids = config.stage_grids()
    shifts = [swin.stages[s].blocks[0].shifts(*grids[s]) for s in (1, 2)]
    assert shifts == [(0, 0), (0, 0)]  # one window: no shift


@pytest.mark.parametrize(
    "config",
    [
        SWIN_PRESETS["swin_fashion"],
        SwinConfig(**SMALL, window_size=4, num_classes=3),  # 8×12 grid, then 4×6: padded
        SwinConfig(**SMALL, window_size=5, mlp_ratio=2.5, in_channels=2),  # padded both stages
    ],
)
def test_swin_flops_counts_every_matrix_product(config):
    model = SwinTransformer(config)
    image = torch.zeros(1, config.in_channels, *model.patch_embed.image_size)
    assert swin_flops(config) == measured_flops(model, image)[0]


def test_window_attention_is_linear_in_the_grid():
    small, large = (SwinConfig(image_size=s, depths=(2,), num_heads=(3,)) for s in (112, 224))
    assert swin_flops(large) / swin_flops(small) == pytest.approx(4, rel=0.01)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        (dict(depths=(2, 2), num_heads=(3,)), ValueError, "differ in length"),
        (dict(depths=(2, 0)), ValueError, r"depths\[1\] must be at least 1"),
        (dict(depths=2), TypeError, "one int per stage"),
        (dict(num_heads=(3, 5, 12, 24)), ValueError, r"dim \(192\) must be divisible"),
        (dict(image_size=30), ValueError, "not divisible by patch size"),
        (dict(window_size=0), ValueError, "window_size must be at least 1"),
        (dict(window_size=(7, 7)), ValueError, r"and window_size \(7, 7\) differ in length"),
        (dict(window_size=(7, 7, 0, 7)), ValueError, r"window_size\[2\] must be at least 1"),
        (dict(window_size="7"), TypeError, "window_size"),
        (dict(drop_path=1.0), ValueError, "drop_path"),
        (dict(mlp_ratio=0), ValueError, "mlp_ratio"),
        (dict(qkv_bias=1), TypeError, "qkv_bias"),
    ],
)
def test_bad_configs_are_refused(fields, error, message):
    with pytest.raises(error, match=message):
        SwinConfig(**fields)


def test_numpy_integers_are_stored_as_ints():
    i = np.int64
    sizes = dict(dim=i(16), depths=(i(2), i(1)), num_heads=[i(2), i(4)], window_size=i(4))
    config = SwinConfig(**{**SMALL, **sizes}, in_channels=i(3), num_classes=i(5))
    fields = [config.window_size, config.in_channels, config.num_classes, config.dim]
    assert fields == [4, 3, 5, 16] and all(type(v) is int for v in fields + [*config.depths])
    assert SwinTransformer(config)(torch.randn(1, 3, 32, 48)).shape == (1, 5)


def test_a_window_per_stage():
    model = SwinTransformer(**SMALL, window_size=[4, 2])  # grids 8×12 and 4×6
    assert model.config.window_size == (4, 2)
    windows = [[b.attn.window_size for b in stage.blocks] for stage in model.stages]
    assert windows == [[4, 4], [2]]
    assert model(torch.randn(1, 3, 32, 48)).shape == (1, 1000)
    assert swin_flops(model.config) == measured_flops(model, torch.zeros(1, 3, 32, 48))[0]


def test_bad_images_and_arguments_are_refused():
    model = SwinTransformer(**SMALL, window_size=4)
    with pytest.raises(ValueError, match=r"expected image size \(32, 48\), got \(32, 32\)"):
        model(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="expected 3 input channels, got 1"):
        model(torch.randn(1, 1, 32, 48))
    with pytest.raises(TypeError, match="config must be a SwinConfig"):
        SwinTransformer(dict(SMALL))
    with pytest.raises(ValueError, match="unknown preset 'swin_t'"):
        create_swin("swin_t")


def test_swin_flops_match_the_papers_table_1():
    """Table 1 of Liu et al. counts multiply-adds: 4.5G, 8.7G and 15.4G at 224×224."""
    paper = {"tiny": 4.5, "small": 8.7, "base": 15.4}
    for size, gmacs in paper.items():
        config = SWIN_PRESETS[f"swin_{size}_patch4_window7_224"]
        assert round(swin_flops(config) / 2e9, 1) == gmacs


def test_fast_and_teaching_paths_give_the_same_logits():
    model = SwinTransformer(**SMALL, window_size=4).eval()
    images = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        fast = model(images)
        for module in model.modules():
            if hasattr(module, "fused"):
                module.fused = False
        torch.testing.assert_close(model(images), fast, atol=1e-5, rtol=1e-5)
