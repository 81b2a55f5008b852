"""Tests for vit_tutorial/vit.py and its exercise checkers."""

import dataclasses
import io

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn
from torchvision.models import vit_h_14

from vit_tutorial.exercises import check_param_count, check_pooling, check_predict
from vit_tutorial.exercises.ch05 import _pool
from vit_tutorial.patches import ConvStem
from vit_tutorial.positional import sinusoidal_2d
from vit_tutorial.vit import PRESETS, VisionTransformer, ViTConfig, create_vit

from checker_messages import wrapped

SMALL = dict(image_size=32, patch_size=8, dim=64, depth=2, num_heads=4, num_classes=10)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def small(**overrides):
    return VisionTransformer(**{**SMALL, **overrides})


def with_random_head(model):
    nn.init.normal_(model.head.weight, std=0.5)  # the zero head makes every logit 0
    return model


# --- parameter counts and presets -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("vit_base_patch16_224", 86_567_656),
        ("vit_base_patch32_224", 88_224_232),
        ("vit_large_patch16_224", 304_326_632),
        ("vit_tiny_patch16_224", 5_717_416),  # timm's and DeiT's counts
        ("vit_small_patch16_224", 22_050_664),
    ],
)
def test_parameter_counts_equal_torchvision_and_timm(name, count):
    with torch.device("meta"):
        assert n_params(create_vit(name)) == count


def test_huge_count_equals_torchvision_on_meta():
    with torch.device("meta"):
        ours, ref = create_vit("vit_huge_patch14_224"), vit_h_14()
    assert n_params(ours) == n_params(ref) == 632_045_800


def test_presets_are_the_papers_table():
    assert sorted(PRESETS) == sorted(
        [
            "vit_tiny_patch16_224",
            "vit_small_patch16_224",
            "vit_base_patch16_224",
            "vit_base_patch32_224",
            "vit_large_patch16_224",
            "vit_huge_patch14_224",
        ]
    )
    table = {name: (c.dim, c.depth, c.num_heads, c.patch_size) for name, c in PRESETS.items()}
    assert table["vit_base_patch16_224"] == (768, 12, 12, 16)
    assert table["vit_large_patch16_224"] == (1024, 24, 16, 16)
    assert table["vit_huge_patch14_224"] == (1280, 32, 16, 14)


def test_create_vit_overrides_and_leaves_presets_alone():
    model = create_vit("vit_tiny_patch16_224", num_classes=10, depth=2)
    assert model.config.num_classes == 10 and len(model.encoder.blocks) == 2
    assert PRESETS["vit_tiny_patch16_224"].num_classes == 1000
    assert model(torch.randn(1, 3, 224, 224)).shape == (1, 10)


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown preset 'vit_gigantic'.*vit_base_patch16_224"):
        create_vit("vit_gigantic")


def test_unknown_field_lists_the_valid_ones():
    with pytest.raises(TypeError, match=r"unknown ViTConfig fields \['embed_dim'\].*'dim'"):
        VisionTransformer(embed_dim=64)


# --- configuration --------------------------------------------------------------------------


def test_config_round_trips_through_a_checkpoint():
    model = small(pos_embed="sincos2d", pool="mean", drop_path=0.1).eval()
    buffer = io.BytesIO()
    torch.save({"config": dataclasses.asdict(model.config), "model": model.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    rebuilt = VisionTransformer(ViTConfig(**checkpoint["config"])).eval()
    rebuilt.load_state_dict(checkpoint["model"])
    assert rebuilt.config == model.config
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(rebuilt(x), model(x))


def test_config_and_fields_combine():
    model = VisionTransformer(ViTConfig(**SMALL), depth=3)
    assert model.config.depth == 3 and model.config.dim == 64
    with pytest.raises(TypeError, match=r"got dict; rebuild it: ViTConfig\(\*\*config\)"):
        VisionTransformer(dict(SMALL))
    with pytest.raises(TypeError, match="got str"):
        VisionTransformer("vit_base_patch16_224")
    assert ViTConfig().class_token and not ViTConfig(pool="mean").class_token


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pool": "max"}, r"pool must be one of \('cls', 'mean', 'map'\), got 'max'"),
        ({"pos_embed": "rope"}, r"pos_embed must be one of .*'sincos2d'.*got 'rope'"),
        ({"stem": "resnet"}, r"stem must be one of \('patch', 'conv'\), got 'resnet'"),
        ({"num_classes": -1}, "num_classes must be at least 0, got -1"),
        ({"depth": 0}, "depth must be at least 1, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"drop_path": -0.1}, r"drop_path must be in \[0, 1\), got -0.1"),
        ({"pos_embed": "relative", "dynamic_image_size": True}, "dynamic_image_size"),
    ],
)
def test_bad_config_values(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**fields)
    with pytest.raises(ValueError, match=message):
        small(**fields)


def test_bad_sizes():
    with pytest.raises(ValueError, match=r"not divisible by patch size \(7, 7\)"):
        small(patch_size=7)
    with pytest.raises(TypeError, match="got 'big'"):
        ViTConfig(image_size="big")
    with pytest.raises(ValueError, match=r"num_heads \(5\)"):
        small(num_heads=5)


# --- initialisation --------------------------------------------------------------------------


def test_initialisation_as_in_the_paper_and_timm():
    model = create_vit("vit_small_patch16_224")
    assert torch.equal(model.head.weight, torch.zeros_like(model.head.weight))
    assert torch.equal(model.head.bias, torch.zeros_like(model.head.bias))
    fc1 = torch.cat([b.mlp.fc1.weight.flatten() for b in model.encoder.blocks])
    # std 0.02 truncated at ±2 std leaves a std of 0.02 · 0.88
    assert abs(fc1.std().item() - 0.0176) < 5e-4 and fc1.abs().max() <= 0.04
    assert all((b.attn.qkv.bias == 0).all() for b in model.encoder.blocks)
    assert abs(model.pos_embed.weight.std().item() - 0.0176) < 2e-3
    assert 0 < model.cls_token.std().item() < 0.03
    assert (model.norm.weight == 1).all() and (model.norm.bias == 0).all()


def test_every_variant_builds_on_the_meta_device():
    for pos_embed in ("learned", "sincos2d", "relative", "none"):
        for stem in ("patch", "conv"):
            with torch.device("meta"):
                model = small(pos_embed=pos_embed, stem=stem)
            assert all(p.is_meta for p in model.parameters())


# --- forward -----------------------------------------------------------------------------


@pytest.mark.parametrize("pos_embed", ["learned", "sincos2d", "relative", "none"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_every_variant_runs_and_shapes(pos_embed, pool):
    model = small(pos_embed=pos_embed, pool=pool)
    x = torch.randn(2, 3, 32, 32)
    n = 16 + (pool == "cls")
    assert model.forward_features(x).shape == (2, n, 64)
    assert model(x).shape == (2, 10)
    maps = model.attention_maps(x)
    assert len(maps) == 2 and all(m.shape == (2, 4, n, n) for m in maps)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 4, n))


def test_forward_is_features_then_head():
    model = with_random_head(small()).eval()
    x = torch.randn(2, 3, 32, 32)
    tokens = model.forward_features(x)
    torch.testing.assert_close(model(x), model.head(tokens[:, 0]))
    mean = with_random_head(small(pool="mean")).eval()
    tokens = mean.forward_features(x)
    torch.testing.assert_close(mean(x), mean.head(mean.fc_norm(tokens.mean(1))))
    assert isinstance(mean.norm, nn.Identity) and mean.cls_token is None


def test_cls_features_are_layer_normalised():
    model = small()
    with torch.no_grad():
        tokens = model.forward_features(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(tokens.mean(-1), torch.zeros(2, 17), atol=1e-5, rtol=0)


def test_sincos_table_is_fixed_and_zero_for_the_class_token():
    model = small(pos_embed="sincos2d")
    assert not any(key.startswith("pos_embed") for key in model.state_dict())
    assert torch.equal(model.pos_embed.table[0, 0], torch.zeros(64))
    torch.testing.assert_close(model.pos_embed.table[0, 1:], sinusoidal_2d((4, 4), 64))


def test_relative_bias_one_table_per_block_and_no_weight_decay():
    model = small(pos_embed="relative")
    assert len(model.pos_embed) == 2 and model.pos_embed[0].table is not model.pos_embed[1].table
    assert model.no_weight_decay() == {"cls_token", "pos_embed.0.table", "pos_embed.1.table"}
    assert small().no_weight_decay() == {"cls_token", "pos_embed.weight"}
    assert small(pool="mean", pos_embed="none").no_weight_decay() == set()
    names = dict(small(pos_embed="relative").named_parameters())
    assert small(pos_embed="relative").no_weight_decay() <= set(names)


def test_relative_bias_reaches_the_attention():
    model = small(pos_embed="relative").eval()
    x = torch.randn(1, 3, 32, 32)
    before = model.attention_maps(x)[0]
    with torch.no_grad():
        model.pos_embed[0].table.add_(torch.randn_like(model.pos_embed[0].table))
    assert not torch.allclose(model.attention_maps(x)[0], before)


def test_without_position_and_class_token_the_model_ignores_patch_order():
    model = with_random_head(small(pos_embed="none", pool="mean")).eval()
    images = torch.randn(2, 3, 32, 32)
    patches = rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) c p1 p2", p1=8, p2=8)
    shuffled = rearrange(
        patches[:, torch.randperm(16)], "b (gh gw) c p1 p2 -> b c (gh p1) (gw p2)", gh=4
    )
    torch.testing.assert_close(model(shuffled), model(images), atol=1e-5, rtol=0)
    learned = with_random_head(small(pool="mean")).eval()
    assert not torch.allclose(learned(shuffled), learned(images), atol=1e-4)


def test_gradients_reach_every_parameter():
    for pos_embed in ("learned", "relative"):
        model = with_random_head(small(pos_embed=pos_embed, stem="conv"))
        model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dropout_only_in_training():
    model = with_random_head(small(dropout=0.2, drop_path=0.2))
    x = torch.randn(2, 3, 32, 32)
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


# --- image size ------------------------------------------------------------------------------


def test_wrong_image_size_names_both_sizes():
    with pytest.raises(
        ValueError, match=r"expected image size \(32, 32\), got \(48, 32\).*dynamic_image_size=True"
    ):
        small()(torch.randn(1, 3, 48, 32))


def test_wrong_channel_count():
    with pytest.raises(ValueError, match=r"expected 3 input channels, got 1"):
        small()(torch.randn(1, 1, 32, 32))
    with pytest.raises(ValueError, match=r"expected 1 input channels, got 3"):
        small(in_channels=1, stem="conv")(torch.randn(1, 3, 32, 32))


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\), got 3-D \(3, 32, 32\)"):
        small()(torch.randn(3, 32, 32))


@pytest.mark.parametrize("pos_embed", ["learned", "sincos2d"])
def test_dynamic_image_size_resamples_the_position_embedding(pos_embed):
    fixed = small(pos_embed=pos_embed).eval()
    dynamic = small(pos_embed=pos_embed, dynamic_image_size=True).eval()
    dynamic.load_state_dict(fixed.state_dict())
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(dynamic(x), fixed(x))  # native size: unchanged
    assert dynamic.forward_features(torch.randn(2, 3, 48, 64)).shape == (2, 1 + 6 * 8, 64)
    assert len(dynamic.attention_maps(torch.randn(1, 3, 16, 40))) == 2
    with pytest.raises(ValueError, match=r"not divisible by patch size \(8, 8\)"):
        dynamic(torch.randn(1, 3, 36, 32))


# --- convolutional stem ----------------------------------------------------------------------


@pytest.mark.parametrize("patch_size", [1, 2, 4])
def test_conv_stem_on_tiny_digits(patch_size):
    model = VisionTransformer(
        image_size=8,
        patch_size=patch_size,
        in_channels=1,
        dim=32,
        depth=1,
        num_heads=2,
        num_classes=10,
        stem="conv",
    )
    grid = 8 // patch_size
    assert model.grid_size == (grid, grid)
    assert model.patch_embed(torch.randn(3, 1, 8, 8)).shape == (3, grid * grid, 32)
    assert model(torch.randn(3, 1, 8, 8)).shape == (3, 10)


def test_conv_stem_total_stride_is_the_patch_size():
    stem = ConvStem(image_size=224, patch_size=16, dim=768)
    convs = [m for m in stem.modules() if isinstance(m, nn.Conv2d)]
    strides = [m.stride[0] for m in convs]
    assert strides == [2, 2, 2, 2, 1] and convs[-1].kernel_size == (1, 1)
    assert [m.out_channels for m in convs] == [48, 96, 192, 384, 768]  # Xiao et al.'s widths
    assert stem(torch.randn(1, 3, 224, 224)).shape == (1, 196, 768)
    tiny = [m.stride[0] for m in ConvStem(8, 1, 1, 16).modules() if isinstance(m, nn.Conv2d)]
    assert tiny == [1, 1, 1]  # patch size 1: two stride-1 3×3 blocks, then the 1×1 projection


def test_conv_stem_bad_patch_sizes():
    with pytest.raises(ValueError, match=r"power-of-2 patch size, got \(14, 14\)"):
        ConvStem(224, 14)
    with pytest.raises(ValueError, match=r"power-of-2 patch size, got \(4, 8\)"):
        ConvStem(32, (4, 8))
    with pytest.raises(ValueError, match=r"\(12, 12\) is not divisible by patch size \(8, 8\)"):
        ConvStem(12, 8)


# --- exercise checkers -----------------------------------------------------------------------


def formula(c, class_token=True, biases=True, norms=True, qkv=3):
    D, L, K, r = c.dim, c.depth, c.num_classes, int(c.dim * c.mlp_ratio)
    N = (c.image_size // c.patch_size) ** 2
    count = c.in_channels * c.patch_size**2 * D + D * biases  # patch embedding
    count += D * class_token + (N + class_token) * D  # class token, position table
    block = qkv * (D * D + D * biases) + D * D + D * biases + 2 * D * r + (r + D) * biases
    count += L * (block + 4 * D * norms) + 2 * D * norms + D * K + K * biases
    return count


def test_check_param_count_accepts_the_formula(capsys):
    check_param_count(formula)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda c: formula(c, class_token=False), "2·D numbers are missing.*class token"),
        (lambda c: formula(c) - c.dim, "one D-vector is missing"),
        (lambda c: formula(c, biases=False), "biases"),
        (lambda c: formula(c, norms=False), "LayerNorms"),
        (lambda c: formula(c, qkv=1), "3·D²"),
        (lambda c: formula(c) + 1, r"\+1\)"),
    ],
)
def test_check_param_count_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_param_count(wrong)


def predict(model, images, k):
    model.eval()
    with torch.no_grad():
        return model(images).softmax(dim=-1).topk(k, dim=-1)


def no_eval(model, images, k):
    with torch.no_grad():
        return model(images).softmax(dim=-1).topk(k, dim=-1)


def no_grad_missing(model, images, k):
    model.eval()
    return model(images).softmax(dim=-1).topk(k, dim=-1)


def logits_only(model, images, k):
    model.eval()
    with torch.no_grad():
        return model(images).topk(k, dim=-1)


def softmax_over_batch(model, images, k):
    model.eval()
    with torch.no_grad():
        return model(images).softmax(dim=0).topk(k, dim=-1)


def test_check_predict_accepts_a_correct_solution(capsys):
    check_predict(predict)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (no_eval, "ran in training mode"),
        (no_grad_missing, "autograd graph"),
        (logits_only, "logits, not probabilities"),
        (softmax_over_batch, "over the batch"),
        (lambda m, x, k: predict(m, x, k + 1), r"shape \(4, 3\)"),
        (lambda m, x, k: predict(m, x, k).values, "tuple"),
    ],
)
def test_check_predict_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_predict(wrong)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_pooling_reference_is_what_the_model_does(pool):
    """The checker's convention: ``head(fc_norm(pool(forward_features(x))))`` is the model."""
    model = VisionTransformer(**SMALL, pool=pool).eval()
    nn.init.normal_(model.head.weight, std=0.5)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.forward_features(x)
        pooled = _pool(tokens, pool, model.num_prefix_tokens)
        assert torch.allclose(model.head(model.fc_norm(pooled)), model(x), atol=1e-6)


def pool_by_einsum(tokens, pool, num_prefix_tokens):
    """Another correct answer: a weighted sum over the tokens."""
    weights = torch.zeros(tokens.shape[1], dtype=tokens.dtype)
    if pool == "cls":
        weights[0] = 1
    else:
        weights[num_prefix_tokens:] = 1 / (tokens.shape[1] - num_prefix_tokens)
    return torch.einsum("btd,t->bd", tokens, weights)


def test_check_pooling_accepts_another_method(capsys):
    check_pooling(pool_by_einsum)
    assert capsys.readouterr().out.startswith("Correct! check_pooling")


def _by_pool(cls, mean):
    return lambda x, pool, k: cls(x, k) if pool == "cls" else mean(x, k)


def _first(x, k):
    return x[:, 0]


def _pool_mean(x, k):
    return x[:, k:].mean(1)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (_by_pool(_first, lambda x, k: x.mean(1)), r"averaged the class token in.*tokens\[:, 1:\]"),
        (_by_pool(lambda x, k: x[:, -1], lambda x, k: x[:, k:].mean(1)), "the last token"),
        (_by_pool(lambda x, k: x.mean(1), lambda x, k: x[:, k:].mean(1)), "not an average"),
        (_by_pool(_first, lambda x, k: x[:, k:].mean(0)), r"batch axis \(dim=0\)"),
        (_by_pool(_first, lambda x, k: x[0]), "indexed the batch axis"),
        (_by_pool(_first, lambda x, k: x[:, k:].mean(-1)), r"feature axis \(dim=-1\)"),
        (_by_pool(_first, lambda x, k: x[:, 1:].mean(1)), "skipped token 0"),
        (_by_pool(_first, lambda x, k: x[:, k:].sum(1)), "summed the patch tokens"),
        (_by_pool(_first, lambda x, k: x[:, :1]), "token axis is still there"),
        (
            _by_pool(lambda x, k: F.layer_norm(x[:, 0], x.shape[-1:]), _pool_mean),
            "you normalised the pooled vector",
        ),
        (_by_pool(_first, lambda x, k: x[:, k:].mean(1).tolist()), "return a tensor, got list"),
    ],
)
def test_check_pooling_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_pooling(wrong)


def test_check_pooling_names_the_prefix_tokens_when_one_is_skipped_of_two():
    with pytest.raises(AssertionError, match=wrapped(r"num_prefix_tokens=2 prefix tokens")):
        check_pooling(_by_pool(_first, lambda x, k: x[:, min(k, 1) :].mean(1)))


def test_vit_flops_equals_flop_counter_on_the_meta_device():
    from torch.utils.flop_counter import FlopCounterMode

    from vit_tutorial.vit import vit_flops

    configs = [
        PRESETS["vit_base_patch32_224"],
        ViTConfig(**SMALL),
        ViTConfig(**{**SMALL, "pool": "mean"}),
        ViTConfig(**{**SMALL, "distilled": True}),
        ViTConfig(
            image_size=(32, 48),
            patch_size=(8, 16),
            dim=32,
            depth=2,
            num_heads=2,
            num_classes=7,
            mlp_ratio=3.0,
        ),
    ]
    for config in configs:
        with torch.device("meta"):
            model = VisionTransformer(config)
            for block in model.encoder.blocks:
                block.attn.fused = False  # the counter sees the explicit matmuls
            H, W = model.patch_embed.image_size
            with FlopCounterMode(display=False) as counter:
                model(torch.empty(1, config.in_channels, H, W))
        assert vit_flops(config) == counter.get_total_flops(), config
    with pytest.raises(ValueError, match="patch stem only"):
        vit_flops(ViTConfig(**{**SMALL, "stem": "conv"}))


def test_attention_rollout_matches_a_loop_and_checks_arguments():
    from vit_tutorial.vit import attention_rollout

    torch.manual_seed(0)
    maps = [torch.rand(2, 3, 5, 5).softmax(-1) for _ in range(4)]
    rolled = attention_rollout(maps)
    for b in range(2):
        want = torch.eye(5)
        for a in maps:
            a = 0.5 * a[b].mean(0) + 0.5 * torch.eye(5)
            want = (a / a.sum(-1, keepdim=True)) @ want
        torch.testing.assert_close(rolled[b], want)
    torch.testing.assert_close(rolled.sum(-1), torch.ones(2, 5))  # rows stay distributions
    torch.testing.assert_close(attention_rollout(maps, residual=1.0), torch.eye(5).expand(2, 5, 5))
    with pytest.raises(ValueError, match="at least one block"):
        attention_rollout([])
    with pytest.raises(ValueError, match=r"residual must be in \[0, 1\], got 2"):
        attention_rollout(maps, residual=2)


def test_position_encoding_is_one_attribute_per_option():
    from vit_tutorial.positional import LearnedPositionalEmbedding, SinusoidalEmbedding2D

    kinds = {
        "learned": LearnedPositionalEmbedding,
        "sincos2d": SinusoidalEmbedding2D,
        "relative": nn.ModuleList,
        "none": type(None),
    }
    for pos_embed, kind in kinds.items():
        model = VisionTransformer(**{**SMALL, "pos_embed": pos_embed})
        assert isinstance(model.pos_embed, kind)
        names = {n.split(".")[0] for n, _ in model.named_modules()}
        assert not names & {"pos_sincos", "rel_pos"}


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("dim", 64.0, TypeError),
        ("depth", "2", TypeError),
        ("num_classes", True, TypeError),
        ("norm_eps", -1e-6, ValueError),
        ("mlp_ratio", 0.001, ValueError),
        ("num_heads", 3, ValueError),
        ("image_size", (32, 30), ValueError),
    ],
)
def test_config_refuses_bad_values_naming_the_field(field, value, error):
    with pytest.raises(error, match=field.split("_")[0] if field != "num_heads" else "num_heads"):
        ViTConfig(**{**SMALL, field: value})


@pytest.mark.parametrize(
    "images, error, match",
    [
        (
            torch.zeros(1, 3, 32, 32, dtype=torch.uint8),
            TypeError,
            "floating point, got torch.uint8",
        ),
        (torch.zeros(1, 3, 32, 32, dtype=torch.bool), TypeError, "floating point, got torch.bool"),
        (torch.zeros(1, 3, 32, 32, dtype=torch.long), TypeError, "floating point, got torch.int64"),
    ],
)
def test_bad_image_dtypes_are_refused(images, error, match):
    with pytest.raises(error, match=match):
        VisionTransformer(**SMALL)(images)


def test_numpy_images_are_refused_and_float64_images_work():
    import numpy as np

    model = VisionTransformer(**SMALL).eval()
    with pytest.raises(TypeError, match="torch.Tensor.*got ndarray"):
        model(np.zeros((1, 3, 32, 32), dtype=np.float32))
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x.double()), model(x))


# --- DeiT's distillation token ------------------------------------------------------------


def test_distillation_token_adds_a_token_a_position_and_a_head():
    plain, distilled = VisionTransformer(**SMALL), VisionTransformer(**SMALL, distilled=True)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    D, K = SMALL["dim"], SMALL["num_classes"]
    assert count(distilled) - count(plain) == D + D + (D * K + K)  # token, position, head
    assert distilled.num_prefix_tokens == 2 and distilled.pos_embed.weight.shape[1] == 16 + 2
    assert "dist_token" in distilled.no_weight_decay()


def test_distillation_token_sits_after_the_class_token():
    model = VisionTransformer(**SMALL, distilled=True, pos_embed="none").eval()
    with torch.no_grad():
        model.dist_token.fill_(7.0)
        tokens, _ = model._tokens(torch.randn(2, 3, 32, 32))
    assert tokens.shape == (2, 1 + 1 + 16, 64)
    assert torch.equal(tokens[:, 0], model.cls_token[0].expand(2, -1))
    assert (tokens[:, 1] == 7.0).all()


def test_both_heads_in_training_and_their_mean_in_eval():
    model = VisionTransformer(**SMALL, distilled=True)
    nn.init.normal_(model.head.weight)
    nn.init.normal_(model.head_dist.weight)
    images = torch.randn(3, 3, 32, 32)
    cls_logits, dist_logits = model.train()(images)  # no dropout here: deterministic
    assert cls_logits.shape == dist_logits.shape == (3, 10)
    tokens = model.forward_features(images)
    assert torch.allclose(cls_logits, model.head(tokens[:, 0]), atol=1e-6)
    assert torch.allclose(dist_logits, model.head_dist(tokens[:, 1]), atol=1e-6)
    assert torch.allclose(model.eval()(images), (cls_logits + dist_logits) / 2, atol=1e-6)


def test_without_the_option_the_model_is_the_plain_one():
    torch.manual_seed(3)
    a = VisionTransformer(**SMALL)
    torch.manual_seed(3)
    b = VisionTransformer(**SMALL, distilled=False)
    assert a.dist_token is None and a.head_dist is None and a.num_prefix_tokens == 1
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


def test_distilled_model_matches_timms_deit_number_for_number():
    timm = pytest.importorskip("timm")
    from vit_tutorial.interop import from_timm

    theirs = timm.create_model(
        "deit_tiny_distilled_patch16_224", img_size=32, patch_size=8, num_classes=10
    )
    ours = from_timm(theirs.eval())
    assert ours.config.distilled
    images = torch.randn(2, 3, 32, 32)
    assert torch.equal(ours(images), theirs(images))
    theirs.train().set_distilled_training(True)
    for a, b in zip(ours.train()(images), theirs(images), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "fields, error, phrase",
    [
        ({"distilled": True, "pool": "mean"}, ValueError, "distilled=True needs pool='cls'"),
        ({"distilled": 1}, TypeError, "distilled must be"),
    ],
)
def test_distilled_config_errors_name_the_value(fields, error, phrase):
    with pytest.raises(error, match=phrase):
        ViTConfig(**{**SMALL, **fields})
