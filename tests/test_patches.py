"""Tests for vit_tutorial/patches.py and its exercise checkers."""

import numpy as np
import pytest
import torch
from einops import rearrange
from torch import nn

from vit_tutorial.exercises import (
    check_image_to_patches,
    check_patch_embedding,
    check_patches_to_image,
)
from vit_tutorial.patches import PatchEmbedding, image_to_patches, pair, patches_to_image

from checker_messages import wrapped


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- pair ------------------------------------------------------------------------------------


def test_pair():
    assert pair(16) == (16, 16)
    assert pair((12, 8)) == (12, 8)
    assert pair([3, 5]) == (3, 5)
    numpy_sizes = pair(np.int64(16)), pair((np.int32(12), np.uint8(8)))  # integers, as ints
    assert numpy_sizes == ((16, 16), (12, 8)) and type(numpy_sizes[1][1]) is int
    assert PatchEmbedding(np.int64(32), np.int64(8)).grid_size == (4, 4)


@pytest.mark.parametrize("bad", [1.5, (1, 2, 3), "16", (16, 8.0), True, (8, np.True_)])
def test_pair_rejects_non_ints(bad):
    with pytest.raises(TypeError, match="size must be an int or an"):
        pair(bad)
    with pytest.raises(TypeError, match="patch_size must be an int or an"):
        PatchEmbedding(32, bad)


# --- image_to_patches / patches_to_image --------------------------------------------------


def test_patch_order_is_row_major_and_channel_fastest():
    images = torch.arange(2 * 3 * 4 * 6.0).reshape(2, 3, 4, 6)  # B=2, C=3, H=4, W=6
    patches = image_to_patches(images, 2)  # grid 2×3, patch vectors of 2·2·3 = 12
    assert patches.shape == (2, 6, 12)
    for b in range(2):
        for n in range(6):
            r, c = divmod(n, 3)  # row-major: token n is grid row n // Gw, column n % Gw
            block = images[b, :, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2]  # (C, P, P)
            torch.testing.assert_close(patches[b, n], block.permute(1, 2, 0).flatten())
    # channel fastest: the first three numbers are R, G, B of the top-left pixel
    assert patches[0, 0, :3].tolist() == images[0, :, 0, 0].tolist()


def test_non_square_images_and_patches():
    images = torch.randn(2, 3, 12, 20)
    patches = image_to_patches(images, (4, 5))
    assert patches.shape == (2, 3 * 4, 4 * 5 * 3)
    torch.testing.assert_close(patches[0, 5], images[0, :, 4:8, 5:10].permute(1, 2, 0).flatten())
    assert torch.equal(patches_to_image(patches, (4, 5), (12, 20)), images)


def test_matches_torch_unfold_up_to_the_documented_order():
    images = torch.randn(2, 3, 32, 48)
    unfolded = nn.functional.unfold(images, kernel_size=16, stride=16)  # (B, C·P·P, N)
    ref = rearrange(unfolded, "b (c p1 p2) n -> b n (p1 p2 c)", c=3, p1=16)
    assert torch.equal(image_to_patches(images, 16), ref)


@pytest.mark.parametrize("size", [(8, 8), (8, 12), (16, 4)])
def test_round_trip(size):
    images = torch.randn(3, 2, *size)
    assert torch.equal(patches_to_image(image_to_patches(images, 4), 4, size), images)
    patches = torch.randn(3, (size[0] // 4) * (size[1] // 4), 4 * 4 * 2)
    assert torch.equal(image_to_patches(patches_to_image(patches, 4, size), 4), patches)


def test_image_to_patches_errors():
    with pytest.raises(
        ValueError,
        match=r"image size \(225, 224\) is not divisible by patch size "
        r"\(16, 16\).*225 / 16 = 14\.0625.*\(224, 224\)",
    ):
        image_to_patches(torch.randn(1, 3, 225, 224), 16)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\), got 3-D \(3, 32, 32\)"):
        image_to_patches(torch.randn(3, 32, 32), 16)
    with pytest.raises(
        ValueError, match=r"must be positive, got image_size=\(32, 32\) and patch_size=\(0, 16\)"
    ):
        image_to_patches(torch.randn(1, 3, 32, 32), (0, 16))


def test_patches_to_image_errors():
    with pytest.raises(
        ValueError, match=r"\(2, 5, 48\) do not fit image size \(8, 8\).*N = 2·2 = 4"
    ):
        patches_to_image(torch.randn(2, 5, 48), 4, 8)
    with pytest.raises(ValueError, match=r"width divisible by 4·4 = 16"):
        patches_to_image(torch.randn(2, 4, 40), 4, 8)
    with pytest.raises(ValueError, match=r"got 2-D \(4, 48\)"):
        patches_to_image(torch.randn(4, 48), 4, 8)
    with pytest.raises(ValueError, match=r"\(10, 8\) is not divisible by patch size \(4, 4\)"):
        patches_to_image(torch.randn(1, 4, 48), 4, (10, 8))


# --- PatchEmbedding ------------------------------------------------------------------------------


def test_attributes():
    embed = PatchEmbedding(image_size=(224, 160), patch_size=(16, 8), in_channels=1, dim=32)
    assert embed.image_size == (224, 160) and embed.patch_size == (16, 8)
    assert embed.grid_size == (14, 20) and embed.num_patches == 280
    assert embed.proj.weight.shape == (32, 1, 16, 8)
    assert embed.proj.stride == (16, 8) and embed.proj.kernel_size == (16, 8)
    assert embed(torch.randn(2, 1, 224, 160)).shape == (2, 280, 32)


@pytest.mark.parametrize(("image_size", "patch_size"), [(224, 16), (64, 32), ((48, 80), (16, 8))])
def test_conv_equals_cut_flatten_and_linear(image_size, patch_size):
    embed = PatchEmbedding(image_size, patch_size, in_channels=3, dim=24)
    linear = nn.Linear(embed.linear_weight().shape[1], 24)
    with torch.no_grad():
        linear.weight.copy_(embed.linear_weight())
        linear.bias.copy_(embed.proj.bias)
    images = torch.randn(2, 3, *pair(image_size))
    torch.testing.assert_close(
        embed(images), linear(image_to_patches(images, patch_size)), atol=1e-5, rtol=1e-5
    )


def test_matches_timm_patch_embed():
    timm_layers = pytest.importorskip("timm.layers")
    ours = PatchEmbedding(64, 16, in_channels=3, dim=48)
    ref = timm_layers.PatchEmbed(img_size=64, patch_size=16, in_chans=3, embed_dim=48)
    ref.load_state_dict(ours.state_dict())  # same keys: proj.weight, proj.bias
    images = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(ours(images), ref(images), atol=1e-6, rtol=0)
    assert ours.grid_size == tuple(ref.grid_size) and ours.num_patches == ref.num_patches


def test_no_bias():
    embed = PatchEmbedding(32, 16, dim=8, bias=False)
    assert embed.proj.bias is None
    assert sum(p.numel() for p in embed.parameters()) == 8 * 3 * 16 * 16


def test_gradients_reach_weights_and_pixels():
    embed = PatchEmbedding(32, 16, dim=8)
    images = torch.randn(2, 3, 32, 32, requires_grad=True)
    embed(images).square().sum().backward()
    assert embed.proj.weight.grad.abs().sum() > 0 and embed.proj.bias.grad.abs().sum() > 0
    assert (images.grad != 0).float().mean() > 0.99


def test_tokens_only_see_their_own_patch():
    embed = PatchEmbedding(32, 16, dim=8)
    images = torch.randn(1, 3, 32, 32)
    changed = images.clone()
    changed[..., 16:, :16] += 1.0  # only the bottom-left patch (token 2)
    moved = (embed(changed) - embed(images)).abs().amax(-1)[0]
    assert moved.nonzero().flatten().tolist() == [2]


def test_strict_and_dynamic_image_size():
    embed = PatchEmbedding(32, 8, dim=8)
    with pytest.raises(ValueError, match=r"got \(48, 32\).*pass strict_image_size=False \("):
        embed(torch.randn(1, 3, 48, 32))
    embed.strict_image_size = False
    assert embed(torch.randn(1, 3, 48, 32)).shape == (1, 24, 8)
    assert embed.grid_size_for((48, 32)) == (6, 4)
    with pytest.raises(ValueError, match=r"\(50, 32\) is not divisible by patch size \(8, 8\)"):
        embed(torch.randn(1, 3, 50, 32))  # non-divisible sizes always raise
    dynamic = PatchEmbedding(32, 8, dim=8, strict_image_size=False)
    assert dynamic(torch.randn(1, 3, 16, 64)).shape == (1, 16, 8)


def test_patch_embedding_errors():
    with pytest.raises(
        ValueError,
        match=r"image size \(224, 200\) is not divisible by patch size "
        r"\(16, 16\).*200 / 16 = 12\.5",
    ):
        PatchEmbedding((224, 200), 16)
    embed = PatchEmbedding(32, 16, in_channels=3, dim=8)
    with pytest.raises(ValueError, match=r"expected 3 input channels, got 1 .*\(2, 1, 32, 32\)"):
        embed(torch.randn(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"expected image size \(32, 32\), got \(64, 64\)"):
        embed(torch.randn(2, 3, 64, 64))
    with pytest.raises(ValueError, match=r"got 3-D \(3, 32, 32\)"):
        embed(torch.randn(3, 32, 32))


# --- the exercise checkers ------------------------------------------------------------------


def test_check_image_to_patches_accepts_the_package(capsys):
    check_image_to_patches(image_to_patches)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)", r"\(c p1 p2\).*channel"),
        ("b c (gh p1) (gw p2) -> b (gw gh) (p1 p2 c)", "column-major"),
        ("b c (gh p1) (gw p2) -> b (gh gw) (p2 p1 c)", r"transposed"),
        ("b c (p1 gh) (p2 gw) -> b (gh gw) (p1 p2 c)", "strided"),
    ],
)
def test_check_image_to_patches_explains_each_mistake(pattern, message):
    def wrong(images, patch_size):
        p1, p2 = pair(patch_size)
        return rearrange(images, pattern, p1=p1, p2=p2)

    with pytest.raises(AssertionError, match=wrapped(message)):
        check_image_to_patches(wrong)


def test_check_image_to_patches_other_mistakes():
    with pytest.raises(AssertionError, match=wrapped(r"must have shape \(2, 6, 48\)")):
        check_image_to_patches(lambda images, p: images.flatten(2))
    with pytest.raises(
        AssertionError, match=wrapped(r"crashed.*\(12, 16\), patch size \(4, 8\).*Zero")
    ):
        check_image_to_patches(
            lambda images, p: image_to_patches(images, p) if isinstance(p, int) else 1 / 0
        )  # fails on non-square patches


def test_check_patch_embedding_accepts_a_correct_solution(capsys):
    check_patch_embedding(lambda conv: rearrange(conv.weight, "d c p1 p2 -> d (p1 p2 c)"))
    assert "Correct!" in capsys.readouterr().out


def test_check_patch_embedding_explains_the_layout_mistake():
    with pytest.raises(AssertionError, match=wrapped(r"\(c p1 p2\)")):
        check_patch_embedding(lambda conv: conv.weight.flatten(1))
    with pytest.raises(AssertionError, match=wrapped(r"shape \(8, 48\)")):
        check_patch_embedding(lambda conv: conv.weight)


def unfold_back(patches, patch_size, image_size):
    """A learner's inverse through torch.nn.functional.fold, the inverse of unfold."""
    (p1, p2), size = pair(patch_size), pair(image_size)
    columns = rearrange(patches, "b n (p1 p2 c) -> b (c p1 p2) n", p1=p1, p2=p2)
    return nn.functional.fold(columns, size, kernel_size=(p1, p2), stride=(p1, p2))


@pytest.mark.parametrize(
    "answer",
    [patches_to_image, unfold_back, lambda p, ps, size: patches_to_image(p.double(), ps, size)],
    ids=["the package", "fold", "float64"],
)
def test_check_patches_to_image_accepts_correct_answers(answer, capsys):
    check_patches_to_image(answer)
    assert capsys.readouterr().out.startswith("Correct! check_patches_to_image")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("b (gh gw) (c p1 p2) -> b c (gh p1) (gw p2)", r"\(c p1 p2\), channel slowest"),
        ("b (gw gh) (p1 p2 c) -> b c (gh p1) (gw p2)", "column-major"),
        ("b (gh gw) (p2 p1 c) -> b c (gh p1) (gw p2)", "transposed"),
        ("b (gh gw) (p1 p2 c) -> b c (p1 gh) (p2 gw)", "interleaved"),
    ],
)
def test_check_patches_to_image_explains_each_mistake(pattern, message):
    def wrong(patches, patch_size, image_size):
        (p1, p2), (H, _) = pair(patch_size), pair(image_size)
        return rearrange(patches, pattern, gh=H // p1, p1=p1, p2=p2)

    with pytest.raises(AssertionError, match=wrapped(message)):
        check_patches_to_image(wrong)


def test_check_patches_to_image_other_mistakes():
    def reshaped(patches, patch_size, image_size):
        return patches.reshape(len(patches), -1, *pair(image_size))

    with pytest.raises(AssertionError, match=wrapped("you reshaped the patches")):
        check_patches_to_image(reshaped)
    with pytest.raises(AssertionError, match=wrapped(r"shape \(2, 3, 8, 12\).*got \(2, 6, 48\)")):
        check_patches_to_image(lambda patches, patch_size, image_size: patches)
    with pytest.raises(AssertionError, match=wrapped("the images hold the wrong numbers")):
        check_patches_to_image(lambda p, ps, size: patches_to_image(p, ps, size) + 1)


def test_patch_grid_is_the_one_geometry_check():
    from vit_tutorial.patches import patch_grid

    assert patch_grid(224, 16) == (14, 14) and patch_grid((32, 48), (8, 16)) == (4, 3)
    with pytest.raises(ValueError, match=r"\(30, 32\) is not divisible by patch size \(8, 8\)"):
        patch_grid((30, 32), 8)
    with pytest.raises(TypeError, match="pair of ints"):
        patch_grid(32.0, 8)


@pytest.mark.parametrize(
    "images, error",
    [
        (torch.zeros(1, 3, 8, 8, dtype=torch.uint8), TypeError),
        (torch.zeros(1, 3, 8, 8, dtype=torch.bool), TypeError),
        ([[0.0]], TypeError),
        (torch.zeros(3, 8, 8), ValueError),
    ],
)
def test_both_stems_and_image_to_patches_refuse_bad_images(images, error):
    from vit_tutorial.patches import ConvStem

    for fn in (
        PatchEmbedding(8, 4, dim=8),
        ConvStem(8, 4, dim=8),
        lambda x: image_to_patches(x, 4),
    ):
        with pytest.raises(error):
            fn(images)


def test_float64_images_are_cast_to_the_weights_dtype():
    torch.manual_seed(0)
    embed = PatchEmbedding(8, 4, dim=8)
    x = torch.randn(2, 3, 8, 8)
    out = embed(x.double())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, embed(x))


def test_stem_flags_are_booleans():
    with pytest.raises(TypeError, match="bias must be True or False, got 'no'"):
        PatchEmbedding(8, 4, bias="no")
    with pytest.raises(TypeError, match="strict_image_size must be True or False, got 0"):
        PatchEmbedding(8, 4, strict_image_size=0)
