"""Tests for vit_tutorial/interop.py: torchvision and timm weights give the same logits."""

import subprocess
import sys

import pytest
import timm
import torch
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torchvision.models import vit_b_16
from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT

from vit_tutorial.interop import (
    TIMM_KEYS,
    TORCHVISION_KEYS,
    from_timm,
    from_timm_eva,
    from_torchvision,
    load_converted,
    max_abs_logit_difference,
    ours_state_dict_to_timm,
    ours_state_dict_to_torchvision,
    timm_state_dict_to_ours,
    torchvision_state_dict_to_ours,
)
from vit_tutorial.vit import VisionTransformer

SMALL_TV = dict(
    image_size=32,
    patch_size=8,
    num_layers=2,
    num_heads=4,
    hidden_dim=64,
    mlp_dim=96,
    num_classes=10,
)
SMALL_TIMM = dict(
    img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=1.5, num_classes=10
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturb(model, std=0.02):
    """Random values for what starts constant: zero heads, biases and class tokens and
    unit LayerNorms would hide bugs (the other weights are random already)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() <= 1 or "head" in name or "token" in name:
                p.add_(std * torch.randn_like(p))
    return model.eval()


def assert_same_logits(ours, ref, images):
    with torch.no_grad():
        logits = ref(images)
    assert logits.abs().max() > 0.1  # a meaningful comparison
    assert max_abs_logit_difference(ours, ref, images) <= 1e-4


# --- torchvision -----------------------------------------------------------------------------


def test_torchvision_vit_b_16_same_logits():
    ref = perturb(vit_b_16(weights=None))
    ours = from_torchvision(ref)
    assert ours.config.dim == 768 and ours.config.depth == 12 and not ours.training
    assert_same_logits(ours, ref, torch.randn(1, 3, 224, 224))


def test_torchvision_small_same_logits():
    ref = perturb(TorchvisionViT(**SMALL_TV))
    ours = from_torchvision(ref)
    assert ours.config.mlp_ratio == 1.5 and ours.config.num_classes == 10
    assert_same_logits(ours, ref, torch.randn(3, 3, 32, 32))


def test_torchvision_keys_all_mapped():
    sd = TorchvisionViT(**SMALL_TV).state_dict()
    converted = torchvision_state_dict_to_ours(sd)
    ours = VisionTransformer(
        image_size=32, patch_size=8, depth=2, num_heads=4, dim=64, mlp_ratio=1.5, num_classes=10
    )
    assert set(converted) == set(ours.state_dict())
    assert (
        converted["encoder.blocks.1.attn.qkv.weight"]
        is sd["encoder.layers.encoder_layer_1.self_attention.in_proj_weight"]
    )
    assert "conv_proj.{p}" in TORCHVISION_KEYS


def test_torchvision_old_mlp_names_are_mapped():
    sd = {"encoder.layers.encoder_layer_3.mlp.linear_1.weight": torch.zeros(1)}
    assert list(torchvision_state_dict_to_ours(sd)) == ["encoder.blocks.3.mlp.fc1.weight"]


def test_torchvision_pre_logits_is_reported_as_unmatched():
    ref = TorchvisionViT(**SMALL_TV, representation_size=32)
    with pytest.raises(ValueError, match=r"2 torchvision keys.*'heads.pre_logits.weight'"):
        from_torchvision(ref)


def test_torchvision_conv_stem_is_refused():
    from torchvision.models.vision_transformer import ConvStemConfig

    ref = TorchvisionViT(**SMALL_TV, conv_stem_configs=[ConvStemConfig(16, 3, 2)])
    with pytest.raises(ValueError, match="conv_stem_configs"):
        from_torchvision(ref)


# --- timm ------------------------------------------------------------------------------------


def test_timm_vit_base_patch16_224_same_logits():
    ref = perturb(timm.create_model("vit_base_patch16_224", pretrained=False))
    ours = from_timm(ref)
    assert ours.config.image_size == 224 and ours.config.patch_size == 16
    assert_same_logits(ours, ref, torch.randn(1, 3, 224, 224))


def test_timm_small_same_logits():
    ref = perturb(timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL_TIMM))
    assert_same_logits(from_timm(ref), ref, torch.randn(3, 3, 32, 32))


def test_timm_average_pooling_same_logits():
    ref = perturb(
        timm.create_model(
            "vit_tiny_patch16_224",
            pretrained=False,
            **SMALL_TIMM,
            global_pool="avg",
            class_token=False,
            qkv_bias=False,
        )
    )
    ours = from_timm(ref)
    assert ours.config.pool == "mean" and not ours.config.qkv_bias and ours.cls_token is None
    assert_same_logits(ours, ref, torch.randn(3, 3, 32, 32))


def test_timm_names_are_ours_inside_the_encoder():
    sd = timm.create_model("vit_tiny_patch16_224", pretrained=False, **SMALL_TIMM).state_dict()
    converted = timm_state_dict_to_ours(sd)
    assert converted["encoder.blocks.0.mlp.fc2.bias"] is sd["blocks.0.mlp.fc2.bias"]
    assert converted["pos_embed.weight"] is sd["pos_embed"]
    assert "blocks.{i}.attn.qkv.{p}" in TIMM_KEYS


def test_timm_headless_model_gives_the_same_features():
    ref = timm.create_model("vit_tiny_patch16_224", **{**SMALL_TIMM, "num_classes": 0})
    ours = from_timm(perturb(ref))
    assert isinstance(ours.head, torch.nn.Identity) and ours.config.num_classes == 0
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        features = ref(images)
    assert features.shape == (2, 64)
    assert max_abs_logit_difference(ours, ref, images) <= 1e-4


def test_timm_unsupported_variants():
    cls_avg = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, **SMALL_TIMM, global_pool="avg"
    )
    with pytest.raises(ValueError, match="global_pool='avg' with class_token=True"):
        from_timm(cls_avg)
    gelu_gate = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, **SMALL_TIMM, mlp_layer=timm.layers.SwiGLU
    )  # chapter 11's registers, LayerScale ... load (tests/test_modern.py); a GELU gate not
    with pytest.raises(ValueError, match="SwiGLU with SiLU"):
        from_timm(gelu_gate)


# --- ours to theirs ---------------------------------------------------------------------------


def test_ours_to_torchvision_round_trip_same_logits():
    ours = perturb(small_ours())
    ref = TorchvisionViT(**{**SMALL_TV, "mlp_dim": 256})
    ref.load_state_dict(ours_state_dict_to_torchvision(ours.state_dict()))  # strict
    assert_same_logits(ours, ref.eval(), torch.randn(3, 3, 32, 32))
    back = torchvision_state_dict_to_ours(ours_state_dict_to_torchvision(ours.state_dict()))
    assert back.keys() == ours.state_dict().keys()


def test_ours_to_torchvision_uses_todays_mlp_names():
    keys = ours_state_dict_to_torchvision(small_ours().state_dict())
    assert "encoder.layers.encoder_layer_0.mlp.0.weight" in keys
    assert not any("linear_1" in k for k in keys)


def test_ours_to_timm_round_trip_same_logits():
    ours = perturb(small_ours())
    ref = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, **{**SMALL_TIMM, "mlp_ratio": 4}
    )
    ref.load_state_dict(ours_state_dict_to_timm(ours.state_dict()))  # strict
    assert_same_logits(ours, ref.eval(), torch.randn(3, 3, 32, 32))
    assert timm_state_dict_to_ours(ours_state_dict_to_timm(ours.state_dict())).keys() == (
        ours.state_dict().keys()
    )


def test_ours_to_torchvision_refuses_a_mean_pooled_model():
    mean = VisionTransformer(image_size=32, patch_size=8, depth=1, num_heads=4, dim=64, pool="mean")
    with pytest.raises(
        ValueError, match=r"2 vit_tutorial keys have no counterpart in torchvision.*fc_norm"
    ):
        ours_state_dict_to_torchvision(mean.state_dict())


def test_ours_to_timm_refuses_a_relative_position_bias():
    rel = VisionTransformer(
        image_size=32, patch_size=8, depth=1, num_heads=4, dim=64, pos_embed="relative"
    )
    with pytest.raises(ValueError, match="no counterpart in timm"):
        ours_state_dict_to_timm(rel.state_dict())


# --- checks on keys and shapes ---------------------------------------------------------------


def small_ours():
    return VisionTransformer(
        image_size=32, patch_size=8, depth=2, num_heads=4, dim=64, num_classes=10
    )


def test_load_converted_lists_missing_unexpected_and_shapes():
    model = small_ours()
    sd = dict(model.state_dict())
    del sd["head.bias"]
    sd["extra.weight"] = torch.zeros(1)
    sd["pos_embed.weight"] = torch.zeros(1, 5, 64)
    with pytest.raises(
        ValueError,
        match=r"missing keys \['head.bias'\], unexpected keys "
        r"\['extra.weight'\], shape mismatches \['pos_embed.weight: "
        r"got \(1, 5, 64\), expected \(1, 17, 64\)'\]",
    ):
        load_converted(model, sd)


def test_load_converted_loads_everything():
    source, target = small_ours(), small_ours()
    load_converted(target, source.state_dict())
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_unmatched_source_keys_are_all_listed():
    sd = {"cls_token": torch.zeros(1), "foo": torch.zeros(1), "blocks.0.bar.weight": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"2 timm keys .*\['foo', 'blocks.0.bar.weight'\]"):
        timm_state_dict_to_ours(sd)


def test_conversion_keeps_dtype_and_mode_and_copies():
    ref = TorchvisionViT(**SMALL_TV).double().train()
    ours = from_torchvision(ref)
    assert ours.training and next(ours.parameters()).dtype == torch.float64
    assert all(p.requires_grad for p in ours.parameters())
    with torch.no_grad():
        ours.head.weight.add_(1.0)  # a copy: the source is left alone
    assert not torch.equal(ours.head.weight, ref.heads.head.weight)


def test_max_abs_logit_difference_restores_modes():
    a, b = small_ours().train(), small_ours().eval()
    max_abs_logit_difference(a, b, torch.randn(1, 3, 32, 32))
    assert a.training and not b.training


def test_timm_is_not_a_runtime_dependency():
    code = "import sys, vit_tutorial, vit_tutorial.interop; assert 'timm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_from_timm_carries_its_regularisation_over():
    ref = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=10,
        attn_drop_rate=0.2,
        drop_path_rate=0.3,
        proj_drop_rate=0.1,
        pos_drop_rate=0.1,
        img_size=32,
        patch_size=8,
        depth=2,
    )
    config = from_timm(ref).config
    assert (config.dropout, config.attn_dropout, config.drop_path) == (0.1, 0.2, 0.3)
    ours = from_timm(ref)
    assert [round(b.drop_path1.p, 6) for b in ours.encoder.blocks] == [0.0, 0.3]


def test_from_timm_refuses_dropouts_it_cannot_express():
    ref = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        num_classes=10,
        drop_rate=0.1,
        img_size=32,
        patch_size=8,
        depth=2,
    )
    with pytest.raises(ValueError, match=r"head_drop 0.1 \(not 0\)"):
        from_timm(ref)


def test_from_timm_dropouts_draw_the_same_masks_as_timm():
    """Each dropout (patch dropout with registers too) carried over at its rate and place:
    in training, under one seed, the converted model computes timm's numbers."""
    rates = dict(attn_drop_rate=0.1, proj_drop_rate=0.2, pos_drop_rate=0.2, drop_path_rate=0.2)
    for extra in (dict(patch_drop_rate=0.25), dict(patch_drop_rate=0.5, reg_tokens=2)):
        ref = perturb(TimmViT(**SMALL_TIMM, **rates, **extra)).train()
        ours = from_timm(ref)
        assert ours.training and ours.config.patch_drop_rate == extra["patch_drop_rate"]
        images = torch.randn(4, 3, 32, 32)
        outputs = []
        for model in (ref, ours):
            torch.manual_seed(1)
            outputs.append(model(images))
        torch.manual_seed(2)  # other masks: the outputs differ, so dropout is on in both
        assert not torch.allclose(ours(images), outputs[1])
        torch.testing.assert_close(outputs[1], outputs[0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "options, named",
    [
        (dict(patch_drop_rate=0.0, proj_drop_rate=0.1), r"pos_drop 0 \(not 0.1\)"),
        (dict(attn_pool_drop=True), r"attn_pool.proj_drop 0.3 \(not 0\)"),
        (dict(drop_path_rate=0.2, path_schedule=True), r"blocks.0.drop_path1 0.1 \(not 0\)"),
        (dict(pre_norm=True), "pre_norm=True"),
        (dict(dynamic_img_pad=True), "dynamic_img_pad=True"),
        (dict(proj_bias=False), "proj_bias=False"),
        (dict(scale_attn_norm=True), "scale_attn_norm=True"),
        (dict(scale_mlp_norm=True), "scale_mlp_norm=True"),
        (dict(fc_norm=True), "final_norm=False, fc_norm=True"),
        (dict(final_norm=False), "final_norm=False, fc_norm=False"),
        (dict(global_pool="avg", class_token=False, fc_norm=False), "final_norm=True"),
        (dict(block_fn=timm.models.vision_transformer.ResPostBlock), "ResPostBlock"),
        (dict(block_fn=timm.models.vision_transformer.ParallelScalingBlock), "ParallelScaling"),
    ],
)
def test_from_timm_refuses_what_it_cannot_reproduce_by_name(options, named):
    """An option the package lacks is refused, naming it, never dropped (timm's eval-mode
    logits would agree for a dropout, so no logit check would notice)."""
    attn_pool_drop, schedule = options.pop("attn_pool_drop", False), options.pop("path_schedule", 0)
    if attn_pool_drop:
        options.update(global_pool="map", class_token=False)
    ref = TimmViT(**SMALL_TIMM, **options)
    if attn_pool_drop:
        ref.attn_pool.proj_drop.p = 0.3
    if schedule:  # the same rate in every block, not rising from 0
        for block in ref.blocks:
            block.drop_path1.drop_prob = block.drop_path2.drop_prob = 0.1
    with pytest.raises(ValueError, match=named):
        from_timm(ref)


def test_the_converters_read_every_block_not_the_first_alone():
    """A block changed by hand (its activation, its heads) is refused, not read as block 0."""
    gelu_tanh = TimmViT(**{**SMALL_TIMM, "depth": 3})
    gelu_tanh.blocks[2].mlp.act = torch.nn.GELU(approximate="tanh")
    with pytest.raises(ValueError, match=r"timm's blocks \[2\] differ from 0's"):
        from_timm(gelu_tanh)
    heads = TimmViT(**SMALL_TIMM)
    heads.blocks[1].attn.num_heads, heads.blocks[1].attn.head_dim = 8, 8
    with pytest.raises(ValueError, match=r"timm's blocks \[1\] differ from 0's"):
        from_timm(heads)
    for edit in ("heads", "eps", "relu", "dropout", "attention dropout"):
        layers = TorchvisionViT(**SMALL_TV)
        layer = layers.encoder.layers[1]
        if edit == "heads":
            layer.self_attention.num_heads = 8
        elif edit == "eps":
            layer.ln_1.eps = 1e-5
        elif edit == "relu":
            layer.mlp[1] = torch.nn.ReLU()
        elif edit == "dropout":
            layer.dropout.p = 0.3
        else:
            layer.self_attention.dropout = 0.3
        with pytest.raises(ValueError, match=r"LayerNorm and layers \[1\] unlike"):
            from_torchvision(layers)
    rms = TorchvisionViT(**SMALL_TV, norm_layer=torch.nn.RMSNorm)
    with pytest.raises(ValueError, match="not RMSNorm and layers"):
        from_torchvision(rms)


def test_the_converters_refuse_another_library_s_model_by_type():
    timm_vit, torchvision_vit = TimmViT(**SMALL_TIMM), TorchvisionViT(**SMALL_TV)
    with pytest.raises(TypeError, match="from_timm takes a timm VisionTransformer, got Vision"):
        from_timm(torchvision_vit)
    with pytest.raises(TypeError, match="from_torchvision takes a torchvision"):
        from_torchvision(timm_vit)
    with pytest.raises(TypeError, match="from_timm_eva takes a timm Eva, got VisionTransformer"):
        from_timm_eva(timm_vit)


def test_from_torchvision_accepts_any_mlp_width():
    ref = TorchvisionViT(
        image_size=16,
        patch_size=8,
        num_layers=1,
        num_heads=1,
        hidden_dim=7,
        mlp_dim=61,
        num_classes=3,
    ).eval()
    ours = from_torchvision(ref)
    assert ours.encoder.blocks[0].mlp.fc1.out_features == 61
    assert max_abs_logit_difference(ours, ref, torch.randn(2, 3, 16, 16)) < 1e-5
