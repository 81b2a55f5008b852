"""Chapter 11's parts, each against timm: LayerScale, registers, QK-norm, RMSNorm, SwiGLU, RoPE in
the whole model, the MAP head, patch dropout, no QKV bias; the named timm models; their pitfalls.

Each option is tested alone against a timm ``VisionTransformer`` built with that flag only, then
the named targets on their default architecture (at a small image size) and on an odd one.
"""

import math

import pytest
import timm
import torch
from timm.layers import GluMlp, RmsNorm, SwiGLU
from timm.layers.attention_pool import AttentionPoolLatent
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torch import nn

from vit_tutorial.encoder import MLP, Encoder, EncoderBlock, LayerScale
from vit_tutorial.encoder import SwiGLU as OurSwiGLU
from vit_tutorial.interop import EVA_KEYS, TIMM_KEYS, from_timm, from_timm_eva
from vit_tutorial.modern import AttentionPool, PatchDropout, patch_dropout
from vit_tutorial.vit import VisionTransformer, ViTConfig, vit_flops

SMALL = dict(img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=4, num_classes=5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturb(model, std=0.05):
    """Every parameter moved: constant starts (LayerScale's γ, SwiGLU's near-zero gate, unit
    norms, zero heads) would hide a swapped or missing tensor."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(std * torch.randn_like(p))
    return model.eval()


def assert_exact(ours, theirs, images, rtol=1e-4):
    """Logits (or features, for a model without a head) within ``rtol`` of the largest."""
    ours.eval(), theirs.eval()
    with torch.no_grad():
        expected, got = theirs(images), ours(images)
    assert got.shape == expected.shape
    assert expected.abs().max() > 0.05  # a meaningful comparison
    assert (got - expected).abs().max() <= rtol * expected.abs().max()


# --- each option alone ------------------------------------------------------------------------

ALONE = {
    "layerscale": dict(init_values=1e-5),
    "registers": dict(reg_tokens=3),
    "registers-no-embed-class": dict(reg_tokens=2, no_embed_class=True),
    "qk-norm": dict(qk_norm=True),
    "rmsnorm": dict(norm_layer="rmsnorm"),
    "rmsnorm-qk-norm": dict(norm_layer="rmsnorm", qk_norm=True),
    "swiglu": dict(mlp_layer=SwiGLU, act_layer=nn.SiLU),
    "map": dict(global_pool="map", class_token=False),
    "map-with-prefix": dict(
        global_pool="map", class_token=False, reg_tokens=1, pool_include_prefix=True
    ),
    "mean-registers": dict(global_pool="avg", class_token=False, reg_tokens=2),
    "no-qkv-bias": dict(qkv_bias=False),
}


@pytest.mark.parametrize("flags", ALONE.values(), ids=ALONE.keys())
def test_each_option_alone_equals_timm(flags):
    theirs = perturb(TimmViT(**{**SMALL, **flags}))
    ours = from_timm(theirs)
    assert_exact(ours, theirs, torch.randn(2, 3, 32, 32))
    assert ours.num_prefix_tokens == theirs.num_prefix_tokens


def test_options_are_read_from_timm():
    theirs = TimmViT(
        **SMALL, init_values=1e-5, reg_tokens=2, no_embed_class=True, qk_norm=True, qkv_bias=False
    )
    c = from_timm(theirs).config
    assert (c.init_values, c.reg_tokens, c.no_embed_class, c.qk_norm, c.qkv_bias) == (
        1e-5,
        2,
        True,
        True,
        False,
    )


# --- the named targets --------------------------------------------------------------------------

TARGETS = {  # name: (default at a small size, an odd configuration, the image of the odd one)
    "deit3_small_patch16_224": (dict(img_size=64), dict(img_size=(48, 80)), (48, 80)),
    "vit_small_patch14_reg4_dinov2": (
        dict(img_size=56),
        dict(img_size=(42, 70), reg_tokens=2),
        (42, 70),
    ),
    "vit_wee_patch16_reg1_gap_256": (dict(img_size=64), dict(img_size=64, depth=3), (64, 64)),
    "test_vit3": (dict(), dict(img_size=(48, 96), reg_tokens=3), (48, 96)),
    "test_vit4": (dict(), dict(depth=2), (48, 80)),  # dynamic image size: another input
}


@pytest.mark.parametrize("name", TARGETS)
def test_named_targets_equal_timm(name):
    default, odd, odd_image = TARGETS[name]
    for kwargs, image in [(default, None), (odd, odd_image)]:
        theirs = perturb(timm.create_model(name, pretrained=False, **kwargs))
        image = image or theirs.patch_embed.img_size
        assert_exact(from_timm(theirs), theirs, torch.randn(2, 3, *image))


def test_full_size_targets_equal_timm():
    """The ViT-B targets, built once each: SigLIP's MAP head, and the RoPE ViTs (timm's Eva)."""
    for name, convert in [
        ("vit_base_patch16_siglip_224", from_timm),
        ("vit_base_patch16_rope_224", from_timm_eva),
        ("vit_base_patch16_rope_mixed_224", from_timm_eva),
    ]:
        theirs = timm.create_model(name, pretrained=False).eval()
        with torch.no_grad():  # move every tensor of the first and last block, the head
            for key, p in theirs.named_parameters():
                if key.startswith(("blocks.0.", "blocks.11.", "head", "attn_pool", "rope")):
                    p.add_(0.05 * torch.randn_like(p))
        ours = convert(theirs)
        assert ours.config.dim == 768 and ours.config.depth == 12
        assert_exact(ours, theirs, torch.randn(1, 3, 224, 224))


@pytest.mark.parametrize("rope_type", ["axial", "mixed"])
def test_rope_models_on_an_odd_configuration(rope_type):
    name = (
        "vit_base_patch16_rope_224" if rope_type == "axial" else "vit_base_patch16_rope_mixed_224"
    )
    odd = dict(img_size=(32, 48), embed_dim=64, depth=3, num_heads=4, num_classes=7)
    theirs = perturb(timm.create_model(name, pretrained=False, **odd))
    ours = from_timm_eva(theirs)
    assert ours.config.rope == rope_type
    assert_exact(ours, theirs, torch.randn(2, 3, 32, 48))


# --- pitfalls ---------------------------------------------------------------------------------


def test_layer_scale_keys_differ_between_timms_vit_and_eva():
    assert TIMM_KEYS["blocks.{i}.ls1.gamma"] == EVA_KEYS["blocks.{i}.gamma_1"]
    assert "blocks.{i}.ls1.gamma" not in EVA_KEYS
    eva = timm.create_model(
        "vit_base_patch16_rope_224", pretrained=False, embed_dim=32, depth=1, num_heads=2
    )
    with pytest.raises(ValueError, match=r"an Eva model .* from_timm_eva"):
        from_timm(eva)  # timm's ViT key map does not know Eva's names
    assert "encoder.blocks.0.ls1.gamma" in from_timm_eva(eva).state_dict()


def test_xy_grid_order_matters_for_rope():
    """Eva built with 'ij' indexing rotates rows where the checkpoints rotate columns."""
    odd = dict(img_size=(32, 48), embed_dim=64, depth=1, num_heads=4)
    xy = perturb(timm.create_model("vit_base_patch16_rope_224", pretrained=False, **odd))
    ij = timm.create_model(
        "vit_base_patch16_rope_224", pretrained=False, rope_grid_indexing="ij", **odd
    )
    ij.load_state_dict(xy.state_dict())
    images = torch.randn(1, 3, 32, 48)
    with torch.no_grad():
        assert not torch.allclose(ij.eval()(images), xy(images), atol=1e-3)
    with pytest.raises(ValueError, match=r"grid_indexing='ij' \(not 'xy'\)"):
        from_timm_eva(ij)
    eva02 = timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=1)
    with pytest.raises(ValueError, match="rescaled to ref_feat_shape"):
        from_timm_eva(eva02)


@pytest.mark.parametrize(
    "option, named",
    [
        (dict(rope_grid_offset=1.0), "rope_grid_offset"),
        (dict(rope_shift_coords=1.0), "RoPE coordinate augmentation"),
        (dict(rope_jitter_coords=1.1), "RoPE coordinate augmentation"),
        (dict(rope_rescale_coords=1.5), "RoPE coordinate augmentation"),
        (dict(qkv_fused=False), "qkv_fused=False"),
    ],
)
def test_from_timm_eva_refuses_what_the_package_cannot_reproduce(option, named):
    """Each moves the logits (the augmentations in training only) and is refused by name."""
    small = dict(img_size=32, embed_dim=32, depth=1, num_heads=2)
    eva = timm.create_model("vit_base_patch16_rope_224", pretrained=False, **small, **option)
    with pytest.raises(ValueError, match=named):
        from_timm_eva(eva)


def test_from_timm_eva_keeps_the_size_option_and_the_device():
    odd = dict(img_size=32, embed_dim=64, depth=2, num_heads=4, dynamic_img_size=True)
    theirs = perturb(timm.create_model("vit_base_patch16_rope_224", pretrained=False, **odd))
    ours = from_timm_eva(theirs)
    assert ours.config.dynamic_image_size
    assert_exact(ours, theirs, torch.randn(2, 3, 48, 32))  # another size, as timm takes it
    with torch.device("meta"):
        on_meta = timm.create_model("vit_base_patch16_rope_224", pretrained=False, **odd)
    assert {t.device.type for t in from_timm_eva(on_meta).state_dict().values()} == {"meta"}


def test_from_timm_names_norms_and_stems_it_cannot_reproduce():
    other_eps = TimmViT(**SMALL)
    other_eps.norm.eps = 1e-5  # the final norm unlike the blocks'
    with pytest.raises(ValueError, match=r"norms of several eps \[1e-06, 1e-05\]"):
        from_timm(other_eps)
    padded = TimmViT(**SMALL)
    padded.patch_embed.proj.padding = (1, 1)
    with pytest.raises(ValueError, match="a patch projection other than a stride-P"):
        from_timm(padded)
    beit = timm.create_model("beit_base_patch16_224", pretrained=False, depth=1, img_size=32)
    with pytest.raises(TypeError, match="from_timm takes a timm VisionTransformer, got Beit"):
        from_timm(beit)


def test_intermediates_drop_every_prefix_token_as_timms():
    theirs = perturb(TimmViT(**SMALL, reg_tokens=4, init_values=1e-5))
    ours = from_timm(theirs)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = theirs.forward_intermediates(x, return_prefix_tokens=True)[1]
        got = ours.forward_intermediates(x, return_prefix_tokens=True)[1]
    for (grid, prefix), (their_grid, their_prefix) in zip(got, expected, strict=True):
        assert grid.shape == (2, 48, 4, 4) and prefix.shape == (2, 5, 48)
        torch.testing.assert_close(grid, their_grid, atol=1e-5, rtol=0)
        torch.testing.assert_close(prefix, their_prefix, atol=1e-5, rtol=0)


def test_registers_are_prefix_tokens():
    model = VisionTransformer(
        image_size=32, patch_size=8, dim=32, depth=1, num_heads=2, reg_tokens=4, num_classes=3
    )
    assert model.num_prefix_tokens == 5 and model.reg_token.shape == (1, 4, 32)
    assert "reg_token" in model.no_weight_decay()
    assert model.attention_maps(torch.randn(1, 3, 32, 32))[0].shape == (1, 2, 21, 21)
    table = VisionTransformer(model.config, no_embed_class=True).pos_embed.weight
    assert table.shape == (1, 16, 32)  # the patches only


# --- the parts, module by module -------------------------------------------------------------


def test_swiglu_equals_timms_separate_and_packed_layouts():
    ours = perturb(OurSwiGLU(dim=16, hidden_dim=24))
    separate = SwiGLU(16, 24)
    separate.load_state_dict(ours.state_dict())
    packed = GluMlp(16, 48, act_layer=nn.SiLU, gate_last=False)  # fc1 packs gate, then value
    with torch.no_grad():
        packed.fc1.weight.copy_(torch.cat([ours.fc1_g.weight, ours.fc1_x.weight]))
        packed.fc1.bias.copy_(torch.cat([ours.fc1_g.bias, ours.fc1_x.bias]))
        packed.fc2.load_state_dict(ours.fc2.state_dict())
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(ours(x), separate.eval()(x))
    torch.testing.assert_close(ours(x), packed.eval()(x))


def test_swiglu_matches_the_mlps_weights_at_two_thirds_of_its_width():
    def count(m):
        return sum(p.numel() for n, p in m.named_parameters() if n.endswith("weight"))

    D = 96
    assert count(OurSwiGLU(D, 4 * D * 2 // 3)) == count(MLP(D, 4 * D)) == 8 * D * D
    assert count(OurSwiGLU(D, 4 * D)) == 12 * D * D  # the same width costs half as much again


def test_swiglu_starts_as_timms():
    block = VisionTransformer(
        image_size=16, patch_size=8, dim=16, depth=1, num_heads=2, mlp="swiglu", num_classes=2
    ).encoder.blocks[0]
    assert torch.equal(block.mlp.fc1_g.bias, torch.ones(64))
    assert block.mlp.fc1_g.weight.abs().max() < 1e-5


def test_rmsnorm_is_timms_and_the_formula():
    x = torch.randn(4, 7, 12)
    ours = EncoderBlock(12, 2, norm="rmsnorm").norm1
    theirs = RmsNorm(12)
    with torch.no_grad():
        ours.weight.normal_(), theirs.weight.copy_(ours.weight)
    by_hand = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * ours.weight
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours(x), by_hand)


def test_layer_scale_adds_two_vectors_per_block():
    plain, scaled = EncoderBlock(32, 4), EncoderBlock(32, 4, init_values=1e-6)

    def count(m):
        return sum(p.numel() for p in m.parameters())

    assert count(scaled) - count(plain) == 2 * 32
    assert torch.equal(scaled.ls1.gamma, torch.full((32,), 1e-6))
    x = torch.randn(2, 5, 32)
    assert (scaled(x) - x).abs().max() < 1e-3  # each block starts close to the identity


def test_attention_pool_equals_timms_attention_pool_latent():
    theirs = AttentionPoolLatent(32, num_heads=4, mlp_ratio=2.0, norm_layer=nn.LayerNorm)
    ours = AttentionPool(32, num_heads=4, mlp_ratio=2.0, norm_eps=1e-5)  # nn.LayerNorm's
    ours.load_state_dict(perturb(theirs).state_dict())
    x = torch.randn(3, 10, 32)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)
    weights = ours.weights(x)
    assert weights.shape == (3, 4, 1, 10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 1))


def test_patch_dropout_is_timms_and_keeps_the_prefix():
    x = torch.randn(2, 1 + 16, 8)
    torch.manual_seed(3)
    ours = patch_dropout(x, 0.5, num_prefix_tokens=1)
    torch.manual_seed(3)
    theirs = patch_dropout_forward(x, 0.5, 1, False, True)[0]
    torch.testing.assert_close(ours, theirs)
    assert ours.shape == (2, 9, 8) and torch.equal(ours[:, 0], x[:, 0])
    layer = PatchDropout(0.5, 1)
    assert layer.eval()(x) is x and layer.train()(x).shape == (2, 9, 8)
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\), got 1.0"):
        patch_dropout(x, 1.0)
    with pytest.raises(ValueError, match="num_prefix_tokens must be at most 16, got 17"):
        patch_dropout(x, 0.5, num_prefix_tokens=17)  # no patch left to drop or keep
    with pytest.raises(ValueError, match=r"x must be tokens \(B, T, D\), got torch.Size"):
        patch_dropout(x[0], 0.5)


def test_patch_dropout_in_the_model_trains_on_fewer_tokens():
    model = VisionTransformer(
        image_size=32, patch_size=8, dim=32, depth=1, num_heads=2, patch_drop_rate=0.75
    )
    x = torch.randn(2, 3, 32, 32)
    assert model.train()._tokens(x)[0].shape == (2, 1 + 4, 32)
    assert model.eval()._tokens(x)[0].shape == (2, 1 + 16, 32)


def test_rope_in_every_block_and_one_per_block_when_mixed():
    base = dict(image_size=32, patch_size=8, dim=32, depth=3, num_heads=2, num_classes=2)
    axial, mixed = VisionTransformer(**base, rope="axial"), VisionTransformer(**base, rope="mixed")
    assert len(mixed.rope) == 3 and not isinstance(axial.rope, nn.ModuleList)
    x = torch.randn(1, 3, 32, 32)
    plain = VisionTransformer(**base)
    plain.load_state_dict(axial.state_dict())  # the same weights, no rotation
    assert not torch.allclose(plain.forward_features(x), axial.forward_features(x))
    mixed.prune_intermediate_layers([1])
    assert len(mixed.rope) == 2
    wide = torch.randn(1, 3, 32, 48)  # RoPE takes another grid without a table
    dynamic = VisionTransformer(**base, rope="axial", pos_embed="none", dynamic_image_size=True)
    assert dynamic(wide).shape == (1, 2)


def test_encoder_takes_one_rope_per_block():
    encoder, x = Encoder(dim=16, depth=2, num_heads=2), torch.randn(1, 3, 16)
    with pytest.raises(ValueError, match=r"one rope per block \(2\), got 3"):
        encoder(x, rope=[None] * 3)
    torch.testing.assert_close(encoder(x, rope=lambda t: t), encoder(x))


def test_flops_of_the_modern_parts_equal_the_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    base = dict(image_size=32, patch_size=8, dim=32, depth=2, num_heads=2, num_classes=7)
    for fields in [
        dict(reg_tokens=3),
        dict(mlp="swiglu", mlp_ratio=8 / 3),
        dict(pool="map"),
        dict(pool="map", reg_tokens=2, pool_include_prefix=True),
    ]:
        config = ViTConfig(**base, **fields)
        with torch.device("meta"):
            model = VisionTransformer(config)
            for block in model.encoder.blocks:
                block.attn.fused = False  # the counter sees the explicit matmuls
            with FlopCounterMode(display=False) as counter:
                model(torch.empty(1, 3, 32, 32))
        assert vit_flops(config) == counter.get_total_flops(), fields


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, error, message",
    [
        (dict(rope="xy"), ValueError, r"rope must be 'none', 'axial' or 'mixed', got 'xy'"),
        (dict(rope="axial", dim=36, num_heads=6), ValueError, r"divisible by 4, got .* = 6"),
        (dict(patch_drop_rate=0.5, rope="axial"), ValueError, "patch_drop_rate needs positions"),
        (dict(norm="batchnorm"), ValueError, r"norm must be one of \('layernorm', 'rmsnorm'\)"),
        (dict(mlp="relu"), ValueError, r"mlp must be one of \('gelu', 'swiglu'\), got 'relu'"),
        (dict(init_values=0.0), ValueError, "init_values must be positive, got 0.0"),
        (dict(reg_tokens=-1), ValueError, "reg_tokens must be at least 0, got -1"),
        (dict(qk_norm="yes"), TypeError, "qk_norm must be True or False, got 'yes'"),
        (dict(patch_drop_rate=1.0), ValueError, r"patch_drop_rate must be in \[0, 1\)"),
        (dict(pool="max"), ValueError, r"pool must be one of \('cls', 'mean', 'map'\)"),
    ],
)
def test_bad_modern_options(fields, error, message):
    with pytest.raises(error, match=message):
        ViTConfig(**{"dim": 32, "num_heads": 4, **fields})


def test_bad_layers():
    with pytest.raises(ValueError, match="init_values must be positive, got -1.0"):
        LayerScale(8, -1.0)
    with pytest.raises(ValueError, match=r"norm must be one of .*got 'batch'"):
        AttentionPool(8, 2, norm="batch")
    with pytest.raises(ValueError, match=r"expected tokens \(B, T, 8\), got \(2, 8\)"):
        AttentionPool(8, 2)(torch.randn(2, 8))
    from vit_tutorial.attention import MultiHeadSelfAttention

    with pytest.raises(ValueError, match=r"qk_norm must be None or one of .*got True"):
        MultiHeadSelfAttention(8, 2, qk_norm=True)


def test_unsupported_timm_variants_are_refused():
    gelu_gate = TimmViT(**SMALL, mlp_layer=SwiGLU)  # timm's ViT passes its GELU to the gate
    with pytest.raises(ValueError, match="SwiGLU with SiLU"):
        from_timm(gelu_gate)
    eva02 = timm.create_model("eva02_tiny_patch14_224", pretrained=False, depth=1)
    with pytest.raises(ValueError, match="only timm's naver RoPE ViTs"):
        from_timm_eva(eva02)  # its separate q, v biases, its rescaled positions


def test_init_values_read_from_a_fresh_model():
    assert math.isclose(from_timm(TimmViT(**SMALL, init_values=0.5)).config.init_values, 0.5)
