"""Tests for vit_tutorial/swin_interop.py: timm and torchvision Swin weights, the same logits."""

import pytest
import timm
import torch
import torchvision.models as tvm
from torchvision.models.swin_transformer import SwinTransformer as TorchvisionSwin

import vit_tutorial.windows
from vit_tutorial.interop import max_abs_logit_difference
from vit_tutorial.swin import SwinTransformer, create_swin
from vit_tutorial.swin_interop import (
    swin_from_timm,
    swin_from_torchvision,
    swin_state_dict_from,
    swin_to_timm,
    swin_to_torchvision,
    timm_key,
    torchvision_key,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturb(model):
    """Values that expose a wrong conversion: bias tables of std 1 (a wrong index or mask shows),
    Linear weights of std 1/√fan-in (not 0.02: attention must matter to the logits), random
    LayerNorms and biases."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_position_bias" in name:
                p.normal_(0.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            elif p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def assert_same_logits(ours, ref, images):
    with torch.no_grad():
        logits = ref(images)
    assert logits.abs().max() > 0.1  # a meaningful comparison
    diff = max_abs_logit_difference(ours, ref, images)
    assert diff <= 1e-4, diff
    return diff


def timm_swin(**kwargs):
    return perturb(timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **kwargs))


def tv_swin(depths=(2, 2), num_heads=(2, 4), window_size=4, **kwargs):
    args = dict(patch_size=[4, 4], embed_dim=16, num_classes=10, window_size=[window_size] * 2)
    return perturb(
        TorchvisionSwin(depths=list(depths), num_heads=list(num_heads), **args, **kwargs)
    )


SMALL_TIMM = dict(embed_dim=16, num_classes=10)

# --- Swin-T at 224 ---------------------------------------------------------------------------


@pytest.mark.slow
def test_timm_swin_t_same_logits():
    ref = timm_swin()
    ours = swin_from_timm(ref)
    assert ours.config == create_swin("swin_tiny_patch4_window7_224", drop_path=0.1).config
    assert not ours.training
    assert_same_logits(ours, ref, torch.randn(1, 3, 224, 224))


@pytest.mark.slow
def test_torchvision_swin_t_same_logits():
    ref = perturb(tvm.swin_t(weights=None))
    ours = swin_from_torchvision(ref)
    assert ours.config == create_swin("swin_tiny_patch4_window7_224").config  # drop path 0.2
    assert_same_logits(ours, ref, torch.randn(1, 3, 224, 224))


# --- odd configurations ----------------------------------------------------------------------


def test_non_square_images():
    images = torch.randn(2, 3, 64, 128)  # grids 16×32, 8×16, 4×8: 4 rows, one window, no shift
    kwargs = dict(img_size=(64, 128), window_size=4, depths=(2, 2, 2), num_heads=(2, 4, 8))
    assert_same_logits(swin_from_timm(ref := timm_swin(**kwargs, **SMALL_TIMM)), ref, images)
    ref = tv_swin(depths=(2, 2, 2), num_heads=(2, 4, 8))
    assert_same_logits(swin_from_torchvision(ref, (64, 128)), ref, images)


def test_torchvision_grid_not_divisible_by_the_window():
    images = torch.randn(2, 3, 64, 96)  # grids 16×24, 8×12, 4×6: the last padded to 4×8
    ref = tv_swin(depths=(2, 2, 2), num_heads=(2, 4, 8))
    assert_same_logits(swin_from_torchvision(ref, (64, 96)), ref, images)


def test_timm_grid_not_divisible_without_a_shift():
    kwargs = dict(img_size=(64, 96), window_size=4, depths=(1, 1, 1), num_heads=(2, 4, 8))
    ref = timm_swin(**kwargs, **SMALL_TIMM)
    assert_same_logits(swin_from_timm(ref), ref, torch.randn(2, 3, 64, 96))


def test_timm_shift_on_a_padded_grid_is_refused():
    kwargs = dict(img_size=(64, 96), window_size=4, depths=(2, 2, 2), num_heads=(2, 4, 8))
    with pytest.raises(ValueError, match=r"stage 2, block 1, on a 4×6 grid shifts by \(0, 2\)"):
        swin_from_timm(timm_swin(**kwargs, **SMALL_TIMM))


def test_grid_smaller_than_the_window():
    images = torch.randn(2, 3, 32, 32)  # grids 8×8 (padded to 14×14) and 4×4 (to 7×7)
    ref = tv_swin(depths=(1, 3), window_size=7)
    assert_same_logits(swin_from_torchvision(ref, 32), ref, images)
    # timm shrinks the window of a stage whose grid is smaller: ours takes one per stage
    ref = timm_swin(img_size=16, depths=(2, 2), num_heads=(2, 4), **SMALL_TIMM)  # 4×4, 2×2
    ours = swin_from_timm(ref)
    assert ours.config.window_size == (4, 2)
    assert_same_logits(ours, ref, torch.randn(2, 3, 16, 16))
    ref = timm_swin(img_size=16, depths=(3,), num_heads=(2,), **SMALL_TIMM)  # window 7 -> 4
    ours = swin_from_timm(ref)
    assert ours.config.window_size == 4
    assert_same_logits(ours, ref, torch.randn(2, 3, 16, 16))


def test_other_depths_and_widths():
    images = torch.randn(2, 3, 56, 56)  # grids 14×14 and 7×7, window 7
    kwargs = dict(img_size=56, depths=(1, 3), num_heads=(1, 2), mlp_ratio=2.5, qkv_bias=False)
    ref = timm_swin(**kwargs, **SMALL_TIMM)
    ours = swin_from_timm(ref)
    assert not ours.config.qkv_bias and ours.config.mlp_ratio == 2.5
    assert_same_logits(ours, ref, images)
    ref = tv_swin(depths=(1, 3), num_heads=(1, 2), window_size=7, mlp_ratio=2.5)
    assert_same_logits(swin_from_torchvision(ref, 56), ref, images)


def test_mlp_ratio_whose_widths_round_differently_per_stage():
    """int(16 · 2.3), int(32 · 2.3), int(64 · 2.3) = 36, 73, 147: 36 / 16 = 2.25 gives 72, not 73."""
    images = torch.randn(2, 3, 64, 64)  # grids 16×16, 8×8, 4×4, window 4
    kwargs = dict(img_size=64, window_size=4, depths=(2, 1, 1), num_heads=(2, 4, 8), mlp_ratio=2.3)
    ref = timm_swin(**kwargs, **SMALL_TIMM)
    ours = swin_from_timm(ref)
    assert ours.config.mlp_ratio == 2.3
    assert [s.blocks[0].mlp.fc1.out_features for s in ours.stages] == [36, 73, 147]
    assert_same_logits(ours, ref, images)
    ref = tv_swin(depths=(2, 1, 1), num_heads=(2, 4, 8), mlp_ratio=2.3)
    ours = swin_from_torchvision(ref, 64)
    assert ours.config.mlp_ratio == 2.3
    assert_same_logits(ours, ref, images)


def test_a_window_per_stage_from_torchvision():
    """torchvision's blocks hold their own window: a model with another per stage converts."""
    ref, other = tv_swin(window_size=4), tv_swin(window_size=2)  # grids 8×8 and 4×4
    ref.features[3] = other.features[3]
    ours = swin_from_torchvision(ref, 32)
    assert ours.config.window_size == (4, 2)
    assert_same_logits(ours, ref, torch.randn(2, 3, 32, 32))


# --- the tests can fail ----------------------------------------------------------------------


def small_pair():
    ref = tv_swin(depths=(2, 2), window_size=4)
    return swin_from_torchvision(ref, 32), ref, torch.randn(2, 3, 32, 32)


def test_the_other_merge_order_fails():
    ours, ref, images = small_pair()
    weight = ours.stages[1].downsample.reduction.weight  # (2C, 4C): x0 x1 x2 x3
    norm = ours.stages[1].downsample.norm
    with torch.no_grad():
        for p in (weight, norm.weight, norm.bias):  # as if ordered x0 x2 x1 x3 (row-major)
            x0, x1, x2, x3 = p.chunk(4, dim=-1)
            p.copy_(torch.cat([x0, x2, x1, x3], dim=-1))
    assert max_abs_logit_difference(ours, ref, images) > 1e-2


def test_no_mask_or_a_wrong_bias_index_fails(monkeypatch):
    ours, ref, images = small_pair()
    assert max_abs_logit_difference(ours, ref, images) <= 1e-4
    rpb = ours.stages[0].blocks[1].attn.relative_position_bias
    rpb.index = rpb.index.T.contiguous()  # key - query instead of query - key, in one block
    assert max_abs_logit_difference(ours, ref, images) > 1e-2
    rpb.index = rpb.index.T.contiguous()

    def no_mask(height, width, window_size, shift_size):  # the mask forgotten after the shift
        nW, N = height * width // window_size**2, window_size**2
        return torch.ones(nW, N, N, dtype=torch.bool)

    monkeypatch.setattr(vit_tutorial.windows, "shifted_window_mask", no_mask)
    assert max_abs_logit_difference(ours, ref, images) > 1e-2


# --- parameter counts, keys, round trips -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "torchvision_builder"),
    [
        ("swin_tiny_patch4_window7_224", tvm.swin_t),
        ("swin_small_patch4_window7_224", tvm.swin_s),
        ("swin_base_patch4_window7_224", tvm.swin_b),
    ],
)
def test_parameter_counts_equal_both_references(name, torchvision_builder):
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    with torch.device("meta"):
        ours, theirs = create_swin(name), timm.create_model(name, pretrained=False)
        assert count(ours) == count(theirs) == count(torchvision_builder(weights=None))


def test_keys_map_both_ways():
    assert timm_key("patch_norm.weight") == "patch_embed.norm.weight"
    assert timm_key("head.bias") == "head.fc.bias"
    assert torchvision_key("stages.0.blocks.1.attn.qkv.weight") == "features.1.1.attn.qkv.weight"
    assert torchvision_key("stages.3.downsample.norm.bias") == "features.6.norm.bias"
    assert torchvision_key("patch_embed.proj.weight") == "features.0.0.weight"


def test_ours_to_both_references_round_trip():
    ours = perturb(
        SwinTransformer(
            image_size=32, dim=16, depths=(2, 2), num_heads=(2, 4), window_size=4, num_classes=10
        )
    )
    images = torch.randn(2, 3, 32, 32)
    ref = timm.create_model(
        "swin_tiny_patch4_window7_224",
        pretrained=False,
        img_size=32,
        window_size=4,
        depths=(2, 2),
        num_heads=(2, 4),
        **SMALL_TIMM,
    )
    ref.load_state_dict(swin_to_timm(ours.state_dict()))  # strict
    assert_same_logits(ours, ref.eval(), images)
    ref = TorchvisionSwin([4, 4], 16, [2, 2], [2, 4], [4, 4], num_classes=10)
    ref.load_state_dict(swin_to_torchvision(ours.state_dict()))  # strict, index buffers too
    assert_same_logits(ours, ref.eval(), images)


def test_conversion_keeps_dtype_and_mode_and_copies():
    ref = tv_swin().double().train()
    ours = swin_from_torchvision(ref, 32)
    assert ours.training and next(ours.parameters()).dtype == torch.float64
    with torch.no_grad():
        ours.head.weight.add_(1.0)
    assert not torch.equal(ours.head.weight, ref.head.weight)


# --- refusals --------------------------------------------------------------------------------


def test_other_models_are_refused():
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1)
    with pytest.raises(TypeError, match="expected a timm Swin Transformer"):
        swin_from_timm(vit)
    with pytest.raises(TypeError, match="expected a torchvision Swin Transformer"):
        swin_from_torchvision(vit)
    with pytest.raises(TypeError, match="expected a timm Swin Transformer"):
        swin_from_timm(tv_swin())
    from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformerBlockV2

    v2 = TorchvisionSwin(
        [4, 4],
        16,
        [1, 1],
        [2, 4],
        [4, 4],
        block=SwinTransformerBlockV2,
        downsample_layer=PatchMergingV2,
    )
    with pytest.raises(TypeError, match="Swin Transformer V1"):
        swin_from_torchvision(v2)


def test_dropout_and_other_heads_are_refused():
    with pytest.raises(ValueError, match="no dropout"):
        swin_from_timm(
            timm_swin(img_size=32, depths=(1,), num_heads=(2,), proj_drop_rate=0.1, **SMALL_TIMM)
        )
    with pytest.raises(ValueError, match="no dropout"):
        swin_from_torchvision(tv_swin(dropout=0.1), 32)
    with pytest.raises(ValueError, match="global_pool='max'"):
        swin_from_timm(
            timm_swin(img_size=32, depths=(1,), num_heads=(2,), global_pool="max", **SMALL_TIMM)
        )


def test_timm_stages_and_blocks_the_first_does_not_describe_are_refused():
    small = dict(img_size=32, window_size=4, depths=(1, 2), num_heads=(2, 4), **SMALL_TIMM)
    with pytest.raises(ValueError, match=r"stage 1 has an MLP of width 64 at width 32"):
        swin_from_timm(timm_swin(**small, mlp_ratio=(4.0, 2.0)))  # timm: one ratio per stage
    ref = timm_swin(**small)
    ref.layers[1].blocks[1].mlp.drop2.p = 0.1
    with pytest.raises(ValueError, match=r"no dropout.*'layers.1.blocks.1.mlp.drop2.p': 0.1"):
        swin_from_timm(ref)
    ref = timm_swin(**small)
    ref.layers[1].blocks[0].norm1.eps = 1e-6
    with pytest.raises(ValueError, match=r"LayerNorms differ in eps \[1e-06, 1e-05\]"):
        swin_from_timm(ref)
    ref = timm_swin(**small)
    ref.layers[1].blocks[0].attn.qkv.bias = None  # a bias flag: the keys tell
    with pytest.raises(
        ValueError, match=r"ours without a value \['stages.1.blocks.0.attn.qkv.bias'\]"
    ):
        swin_from_timm(ref)


def test_torchvision_blocks_the_first_does_not_describe_are_refused():
    ref = tv_swin()
    ref.features[3][1].attn.attention_dropout = 0.1
    with pytest.raises(ValueError, match=r"no dropout.*features.3.1.attn.attention_dropout"):
        swin_from_torchvision(ref, 32)
    ref = tv_swin(dropout=0.1)  # every block: the message shows three
    with pytest.raises(
        ValueError, match=r"no dropout, the torchvision model has 12 rates, first \{'features"
    ):
        swin_from_torchvision(ref, 32)
    ref = tv_swin()
    ref.features[3][1].attn.shift_size = [0, 0]  # a block that forgets to shift
    with pytest.raises(
        ValueError, match=r"stage 1, block 1 has window \[4, 4\] and shift \[0, 0\]"
    ):
        swin_from_torchvision(ref, 32)
    ref = tv_swin()
    ref.features[1][0].attn.window_size = [4, 2]
    with pytest.raises(ValueError, match=r"stage 0, block 0 has window \[4, 2\]"):
        swin_from_torchvision(ref, 32)


def test_unmatched_keys_are_all_listed():
    model = SwinTransformer(image_size=32, dim=16, depths=(1,), num_heads=(2,), window_size=4)
    state = swin_to_timm(model.state_dict())
    del state["head.fc.bias"]
    state["layers.0.blocks.0.ls1.gamma"] = torch.zeros(16)
    with pytest.raises(
        ValueError,
        match=r"without a counterpart \['layers.0.blocks.0.ls1.gamma'\], "
        r"ours without a value \['head.bias'\]",
    ):
        swin_state_dict_from(state, model, "timm")
    with pytest.raises(ValueError, match="library must be 'timm' or 'torchvision'"):
        swin_state_dict_from(state, model, "keras")


def test_a_headless_timm_swin_gives_the_same_features():
    """num_classes=0 (timm's head an nn.Identity): the pooled features, as our headless Swin."""
    kwargs = dict(img_size=56, depths=(1, 1), num_heads=(1, 2), embed_dim=16, num_classes=0)
    ref = timm_swin(**kwargs)
    ours = swin_from_timm(ref)
    assert ours.config.num_classes == 0
    images = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        assert ref(images).shape == (2, 32)
    assert max_abs_logit_difference(ours, ref, images) <= 1e-4


def test_an_mlp_activation_other_than_the_exact_gelu_is_refused_in_any_block():
    kwargs = dict(img_size=56, depths=(1, 2), num_heads=(1, 2), embed_dim=16, num_classes=3)
    timm_model = timm_swin(**kwargs)
    timm_model.layers[1].blocks[1].mlp.act = torch.nn.GELU(approximate="tanh")
    with pytest.raises(ValueError, match="exact GELU; the timm one .*tanh"):
        swin_from_timm(timm_model)
    tv_model = tv_swin()
    tv_model.features[3][1].mlp[1] = torch.nn.ReLU()
    with pytest.raises(ValueError, match="exact GELU; the torchvision one .*ReLU"):
        swin_from_torchvision(tv_model, 32)
