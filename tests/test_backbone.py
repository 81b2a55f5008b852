"""The model interface every family shares (vit_tutorial/backbone.py), and against timm.

For the same weights (loaded through the package's interop), every intermediate of
``forward_intermediates`` equals timm's to 1e-5 of the reference's largest magnitude.
"""

import numpy as np
import pytest
import timm
import torch

from vit_tutorial.axial import AxialViT
from vit_tutorial.backbone import take_indices
from vit_tutorial.interop import from_timm
from vit_tutorial.mae import MaskedAutoencoder
from vit_tutorial.swin import SwinTransformer
from vit_tutorial.swin_interop import swin_from_timm
from vit_tutorial.vit import VisionTransformer


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def perturb(model):
    """Random biases, norms, tokens and tables: constants would hide a wrong placement."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_position_bias" in name:
                p.normal_(0.0, 1.0)
            elif p.dim() <= 1 or "token" in name or "head" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


# --- against timm ---------------------------------------------------------------------------

VIT = dict(img_size=(32, 48), patch_size=8, embed_dim=32, depth=3, num_heads=4, num_classes=5)
SWIN = dict(
    img_size=(64, 128), window_size=4, depths=(2, 2, 2), num_heads=(2, 4, 8),
    embed_dim=16, num_classes=5,
)  # fmt: skip


def timm_pair(kind):
    """A timm model and ours with its weights; images of their non-square size."""
    if kind == "swin":
        ref = perturb(timm.create_model("swin_tiny_patch4_window7_224", **SWIN))
        return ref, swin_from_timm(ref).eval(), torch.randn(2, 3, 64, 128)
    pool = dict(global_pool="avg", class_token=False) if kind == "vit_mean" else {}
    ref = perturb(timm.create_model("vit_tiny_patch16_224", **VIT, **pool))
    return ref, from_timm(ref).eval(), torch.randn(2, 3, 32, 48)


def assert_close_to(ours, ref):
    assert ours.shape == ref.shape
    scale = ref.abs().max()
    assert scale > 0.1  # a meaningful comparison
    assert (ours - ref).abs().max() <= 1e-5 * scale


INDICES = [None, 2, [0, -1], [-2]]


@pytest.mark.parametrize("kind", ["vit", "vit_mean", "swin"])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("indices", INDICES, ids=str)
def test_intermediates_equal_timms(kind, norm, indices):
    ref, ours, images = timm_pair(kind)
    with torch.no_grad():
        x_ref, theirs = ref.forward_intermediates(images, indices=indices, norm=norm)
        x, mine = ours.forward_intermediates(images, indices=indices, norm=norm)
        nlc = ours.forward_intermediates(
            images, indices=indices, norm=norm, output_fmt="NLC", intermediates_only=True
        )
        if kind != "swin":  # timm's Swin has NCHW only: compare with its flattened grid
            flat = ref.forward_intermediates(
                images, indices=indices, norm=norm, output_fmt="NLC", intermediates_only=True
            )
        else:
            flat = [t.flatten(2).transpose(1, 2) for t in theirs]
    assert len(mine) == len(theirs) == len(take_indices(3, indices)[0])
    for a, b, c, d in zip(mine, theirs, nlc, flat, strict=True):
        assert_close_to(a, b)
        assert_close_to(c, d)
    assert_close_to(x, x_ref)


def test_norm_in_timms_meaning_per_family():
    """Every intermediate for a ViT with a final norm; the last stage alone for Swin; nothing
    for a mean-pooled ViT, whose norm follows the pooling."""
    for kind, changed in [("vit", [True] * 3), ("swin", [False, False, True])]:
        _, ours, images = timm_pair(kind)
        with torch.no_grad():
            plain = ours.forward_intermediates(images, intermediates_only=True)
            normed = ours.forward_intermediates(images, norm=True, intermediates_only=True)
        assert [not torch.equal(a, b) for a, b in zip(plain, normed)] == changed
    _, ours, images = timm_pair("vit_mean")
    with torch.no_grad():
        a = ours.forward_intermediates(images, intermediates_only=True)
        b = ours.forward_intermediates(images, norm=True, intermediates_only=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_prefix_tokens_and_stop_early_equal_timms():
    ref, ours, images = timm_pair("vit")
    with torch.no_grad():
        kw = dict(indices=[0, 1], return_prefix_tokens=True, stop_early=True)
        x_ref, theirs = ref.forward_intermediates(images, **kw)
        x, mine = ours.forward_intermediates(images, **kw)
    for (a, pa), (b, pb) in zip(mine, theirs, strict=True):
        assert_close_to(a, b)
        assert_close_to(pa, pb)
        assert pa.shape == (2, 1, 32)
    assert_close_to(x, x_ref)  # after block 1 of 3: stopped early
    ref, ours, images = timm_pair("swin")
    with torch.no_grad():
        x_ref, _ = ref.forward_intermediates(images, indices=[0], stop_early=True)
        x, _ = ours.forward_intermediates(images, indices=[0], stop_early=True)
    assert_close_to(x, x_ref)  # not normalised: the last stage did not run


@pytest.mark.parametrize("kind", ["vit", "swin"])
@pytest.mark.parametrize("indices", [4, 0, [3], [-4], [0, 5]], ids=str)
def test_out_of_range_indices_are_refused_as_timm_refuses_them(kind, indices):
    ref, ours, images = timm_pair(kind)
    with pytest.raises(AssertionError):
        ref.forward_intermediates(images, indices=indices)
    with pytest.raises(ValueError, match="out of range"):
        ours.forward_intermediates(images, indices=indices)


@pytest.mark.parametrize("kind", ["vit", "swin"])
def test_pruned_models_give_timms_intermediates(kind):
    ref, ours, images = timm_pair(kind)
    assert ref.prune_intermediate_layers([0, 1]) == ours.prune_intermediate_layers([0, 1])
    assert ours.num_features == ref.num_features
    with torch.no_grad():
        theirs = ref.forward_intermediates(images, intermediates_only=True)
        mine = ours.forward_intermediates(images, intermediates_only=True)
    assert len(mine) == len(theirs) == 2
    for a, b in zip(mine, theirs, strict=True):
        assert_close_to(a, b)
    with torch.no_grad():  # no pooling left, as timm's reset_classifier(0, ''): every token
        assert_close_to(ours(images), ref(images))


@pytest.mark.parametrize("kind", ["vit", "vit_mean", "swin"])
def test_reset_classifier_takes_timms_global_pool(kind):
    ref, ours, images = timm_pair(kind)
    for model in (ref, ours):
        model.reset_classifier(0, "")
    with torch.no_grad():
        assert_close_to(ours(images), ref(images))  # unpooled: (B, T, D) or (B, h, w, C)
    pool = "avg" if kind != "vit" else "token"
    ours.reset_classifier(3, pool)
    with torch.no_grad():
        assert ours(images).shape == (2, 3)
    with pytest.raises(ValueError, match="global_pool must be None"):
        ours.reset_classifier(3, "max")


def test_bad_arguments_are_refused():
    _, ours, images = timm_pair("vit")
    with pytest.raises(ValueError, match="output_fmt must be 'NCHW' or 'NLC', got 'NHWC'"):
        ours.forward_intermediates(images, output_fmt="NHWC")
    with pytest.raises(TypeError, match="indices must be None, an int"):
        ours.forward_intermediates(images, indices=1.5)
    with pytest.raises(TypeError, match="indices must hold ints"):
        ours.forward_intermediates(images, indices=[0, "1"])
    with pytest.raises(ValueError, match="empty"):
        ours.forward_intermediates(images, indices=[])
    # NumPy integers are indices, as ints are
    assert take_indices(4, np.int64(2)) == ([2, 3], 3)
    assert take_indices(4, [np.int64(0), np.int32(-1)]) == ([0, 3], 3)
    assert (
        len(ours.forward_intermediates(images, indices=np.int64(1), intermediates_only=True)) == 1
    )
    with pytest.raises(ValueError, match="num_classes must be at least 0"):
        ours.reset_classifier(-1)


# --- every family, every preset kind ----------------------------------------------------------

TINY = dict(image_size=(16, 24), patch_size=4, dim=16, depth=2, num_heads=2, num_classes=3)
FAMILIES = {
    "vit_cls": lambda: VisionTransformer(**TINY),
    "vit_mean": lambda: VisionTransformer(**TINY, pool="mean"),
    "vit_distilled": lambda: VisionTransformer(**TINY, distilled=True),
    "vit_relative": lambda: VisionTransformer(**TINY, pos_embed="relative"),
    "vit_conv_stem": lambda: VisionTransformer(**TINY, stem="conv", pos_embed="sincos2d"),
    "axial": lambda: AxialViT(**TINY),
    "swin": lambda: SwinTransformer(
        image_size=(16, 24),
        patch_size=2,
        dim=8,
        depths=(2, 1),
        num_heads=(1, 2),
        window_size=4,
        num_classes=3,
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", FAMILIES)
def test_the_whole_interface(name):
    model = perturb(FAMILIES[name]())
    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        features = model.forward_features(images)
        logits = model(images)
        torch.testing.assert_close(model.forward_head(features), logits)
        pooled = model.forward_head(features, pre_logits=True)
        assert pooled.shape == (2, model.num_features)
        final, inter = model.forward_intermediates(images)
        torch.testing.assert_close(final, features)
        layers = len(inter)
        assert layers == (2 if name != "swin" else 2)
        assert all(t.dim() == 4 and t.shape[1] <= model.num_features for t in inter)
        early = model.forward_intermediates(images, indices=[0], stop_early=True)[1]
        torch.testing.assert_close(early[0], inter[0])
    assert set(model.no_weight_decay()) <= {n for n, _ in model.named_parameters()}
    model.reset_classifier(7)
    assert model(images).shape == (2, 7) and model.config.num_classes == 7
    model.reset_classifier(0)
    with torch.no_grad():
        torch.testing.assert_close(model(images), pooled)
    assert model.prune_intermediate_layers([0]) == [0]
    with torch.no_grad():
        assert len(model.forward_intermediates(images, intermediates_only=True)) == 1


def test_num_classes_zero_builds_a_feature_extractor():
    for build in FAMILIES.values():
        model = type(build())(build().config, num_classes=0)
        assert isinstance(model.head, torch.nn.Identity)


def test_the_mae_encoder_gives_its_vits_intermediates():
    mae = MaskedAutoencoder(
        image_size=16, patch_size=4, dim=16, depth=2, num_heads=2, decoder_dim=8,
        decoder_depth=1, decoder_heads=2,
    ).eval()  # fmt: skip
    vit = mae.to_vit(num_classes=3).eval()
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ours = mae.forward_intermediates(images, output_fmt="NLC", intermediates_only=True)
        theirs = vit.forward_intermediates(images, output_fmt="NLC", intermediates_only=True)
        normed = mae.forward_intermediates(images, norm=True, intermediates_only=True)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)
    assert ours[0].shape == (2, 16, 16) and normed[0].shape == (2, 16, 4, 4)
    assert mae.no_weight_decay() == set()


# --- attention maps, every family -----------------------------------------------------------


def test_attention_maps_of_every_family_and_where_rollout_applies():
    from vit_tutorial.axial import axial_mask
    from vit_tutorial.vit import attention_rollout
    from vit_tutorial.windows import block_diagonal_mask

    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        vit = FAMILIES["vit_cls"]().eval()
        maps = vit.attention_maps(images)
        assert [tuple(m.shape) for m in maps] == [(2, 2, 25, 25)] * 2
        assert attention_rollout(maps).shape == (2, 25, 25)
        axial = perturb(FAMILIES["axial"]())
        maps = axial.attention_maps(images)  # (height, width) per block, on the 4×6 grid
        assert [tuple(m.shape) for m in maps] == [(2, 2, 24, 24)] * 4
        for m, axis in zip(maps, ["height", "width"] * 2, strict=True):
            assert m[:, :, ~axial_mask((4, 6), axis)].abs().max() == 0
            torch.testing.assert_close(m.sum(-1), torch.ones(2, 2, 24))
        assert attention_rollout(maps).shape == (2, 24, 24)
        swin = perturb(FAMILIES["swin"]())  # grids 8×12 (windows of 4), then 4×6
        maps = swin.attention_maps(images)
        assert [tuple(m.shape) for m in maps] == [(2, 1, 96, 96)] * 2 + [(2, 2, 24, 24)]
        allowed = [block_diagonal_mask(8, 12, 4, s) for s in (0, 2)]
        for m, a in zip(maps[:2], allowed, strict=True):
            assert m[:, :, ~a].abs().max() == 0
            torch.testing.assert_close(m.sum(-1), torch.ones(2, 1, 96))
    with pytest.raises(ValueError, match=r"same tokens; got maps over \[96, 24\] tokens"):
        attention_rollout(maps)


def test_axial_maps_equal_the_explicit_masked_attention():
    from vit_tutorial.attention import attention_weights
    from vit_tutorial.axial import axial_mask

    model = perturb(FAMILIES["axial"]())
    images = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        maps = model.attention_maps(images)
        block = model.blocks[0]
        tokens = block.norm1(model._grid(images)).flatten(1, 2)  # (B, 24, D)
        q, k, _ = block.attn_height.attn._heads(tokens, None)
        expected = attention_weights(q, k, axial_mask((4, 6), "height"))
    torch.testing.assert_close(maps[0], expected)
