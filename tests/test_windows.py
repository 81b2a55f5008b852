"""Tests for vit_tutorial/windows.py: windows, shifted windows, their masks and layers."""

import numpy as np
import pytest
import torch
from einops import rearrange
from torch.autograd.functional import jacobian

from vit_tutorial.attention import MultiHeadSelfAttention, attention_weights
from vit_tutorial.measure import peak_memory
from vit_tutorial.positional import RelativePositionBias
from vit_tutorial.windows import (
    PatchMerging,
    SwinBlock,
    WindowAttention,
    block_diagonal_mask,
    relative_position_index,
    shifted_window_mask,
    window_partition,
    window_reverse,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- partition and reverse -----------------------------------------------------------------


@pytest.mark.parametrize(("H", "W", "M"), [(4, 4, 2), (6, 9, 3), (7, 14, 7), (5, 5, 1)])
def test_partition_and_reverse_are_inverse(H, W, M):
    x = torch.randn(2, H, W, 3)
    windows = window_partition(x, M)
    assert windows.shape == (2 * (H // M) * (W // M), M * M, 3)
    assert torch.equal(window_reverse(windows, M, H, W), x)


def test_partition_orders_windows_and_tokens_row_major():
    H, W, M = 4, 6, 2
    x = torch.randn(2, H, W, 3)
    windows = window_partition(x, M)
    for b in range(2):
        for wr in range(H // M):
            for wc in range(W // M):
                window = windows[b * (H // M) * (W // M) + wr * (W // M) + wc]
                block = x[b, wr * M : (wr + 1) * M, wc * M : (wc + 1) * M]  # (M, M, C)
                assert torch.equal(window, block.reshape(M * M, 3))


# --- relative position index ---------------------------------------------------------------


@pytest.mark.parametrize("M", [1, 2, 3, 7])
def test_relative_index_range_symmetry_and_diagonal(M):
    index = relative_position_index(M)
    centre = (M - 1) * (2 * M - 1) + (M - 1)  # the offset (0, 0)
    assert index.shape == (M * M, M * M) and index.dtype == torch.long
    assert index.min() == 0 and index.max() == (2 * M - 1) ** 2 - 1
    assert set(index.flatten().tolist()) == set(range((2 * M - 1) ** 2))  # every offset used
    assert torch.equal(index + index.T, torch.full_like(index, 2 * centre))  # Δ and -Δ
    assert torch.equal(index.diagonal(), torch.full((M * M,), centre))


def test_relative_index_is_chapter_3s_and_the_references():
    timm_swin = pytest.importorskip("timm.models.swin_transformer")
    from torchvision.models.swin_transformer import ShiftedWindowAttention

    index = relative_position_index(7)
    assert torch.equal(index, RelativePositionBias(7, 3).index)
    assert torch.equal(index, timm_swin.get_relative_position_index(7, 7))
    tv = ShiftedWindowAttention(32, [7, 7], [0, 0], num_heads=2)
    assert torch.equal(index.flatten(), tv.relative_position_index)


# --- masks ----------------------------------------------------------------------------------


def test_no_shift_needs_no_mask():
    assert shifted_window_mask(8, 12, 4, 0).all()
    assert shifted_window_mask(8, 12, 4, 0).shape == (6, 16, 16)


@pytest.mark.parametrize(("H", "W", "M", "s"), [(8, 8, 4, 2), (14, 14, 7, 3), (6, 9, 3, 1)])
def test_shift_mask_properties(H, W, M, s):
    mask = shifted_window_mask(H, W, M, s).view(H // M, W // M, M * M, M * M)
    assert mask[:-1, :-1].all()  # windows inside the image see each other fully
    assert not mask[-1].all() and not mask[:, -1].all()  # the last row and column do not
    assert torch.equal(mask, mask.transpose(-1, -2))  # symmetric
    assert mask.diagonal(dim1=-2, dim2=-1).all()  # every token sees itself
    corner = mask[-1, -1]  # four regions of sizes (M-s)², (M-s)s, s(M-s), s²
    sizes = sorted(int(n) for n in corner.sum(dim=1).unique())
    assert sizes == sorted({(M - s) ** 2, (M - s) * s, s * s})


def test_shift_along_one_axis():
    mask = shifted_window_mask(4, 8, 4, (0, 2))  # a 4×8 grid: two windows side by side
    assert mask[0].all() and not mask[1].all()


def test_block_diagonal_mask_is_window_membership():
    H, W, M = 6, 9, 3
    mask = block_diagonal_mask(H, W, M)
    rows, cols = torch.arange(H * W) // W, torch.arange(H * W) % W
    window = (rows // M) * (W // M) + cols // M
    assert torch.equal(mask, window[:, None] == window[None, :])


def test_shifted_block_mask_counts():
    H, W, M, s = 8, 8, 4, 2
    mask = block_diagonal_mask(H, W, M, s)
    assert torch.equal(mask, mask.T) and mask.diagonal().all()
    assert mask.sum() == shifted_window_mask(H, W, M, s).sum()  # the same pairs, reordered
    assert mask[0, 1] and not mask[0, H * W - 1]  # (0, 0) and (7, 7) are in different regions


# --- attention in windows equals full attention under a mask -------------------------------


def full_bias(attn: WindowAttention, H: int, W: int) -> torch.Tensor:
    """The window's relative position bias for any two grid tokens less than M apart."""
    M = attn.window_size
    rows, cols = torch.arange(H * W) // W, torch.arange(H * W) % W
    dr = (rows[:, None] - rows[None, :]).clamp(-(M - 1), M - 1)
    dc = (cols[:, None] - cols[None, :]).clamp(-(M - 1), M - 1)
    index = (dr + M - 1) * (2 * M - 1) + (dc + M - 1)
    return attn.relative_position_bias.table[index].permute(2, 0, 1)  # (h, HW, HW)


def full_attention(attn, tokens, bias):
    """Full attention ``(B, HW, C)`` with ``attn``'s weights and the additive ``bias``."""
    if attn.fused:
        return MultiHeadSelfAttention.forward(attn, tokens, bias)
    return MultiHeadSelfAttention.forward_with_weights(attn, tokens, bias)[0]


def windowed(attn, x, M, s):
    """Shifted window attention on a grid, as SwinBlock does it (without padding)."""
    B, H, W, C = x.shape
    mask = shifted_window_mask(H, W, M, s) if s else None
    shifted = torch.roll(x, (-s, -s), dims=(1, 2))
    out = window_reverse(attn(window_partition(shifted, M), mask), M, H, W)
    return torch.roll(out, (s, s), dims=(1, 2))


@pytest.mark.parametrize("s", [0, 2])
@pytest.mark.parametrize("fused", [True, False])
def test_window_attention_is_full_attention_under_the_mask(s, fused):
    H, W, M = 8, 12, 4
    attn = WindowAttention(32, M, 4).eval()
    attn.fused = fused
    with torch.no_grad():
        attn.relative_position_bias.table.normal_(0, 1)  # a bias that matters
    x = torch.randn(2, H, W, 32)
    allowed = block_diagonal_mask(H, W, M, s)  # (HW, HW), row-major order of the grid
    bias = full_bias(attn, H, W).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        full = full_attention(attn, x.flatten(1, 2), bias)  # (B, HW, C)
        ours = windowed(attn, x, M, s).flatten(1, 2)
        unmasked = full_attention(attn, x.flatten(1, 2), full_bias(attn, H, W))
    torch.testing.assert_close(ours, full, atol=1e-5, rtol=1e-5)
    assert (ours - unmasked).abs().max() > 1e-2  # the mask matters


def test_forgetting_the_mask_after_the_shift_changes_the_output():
    attn = WindowAttention(16, 4, 2).eval()
    x = torch.randn(1, 8, 8, 16)
    shifted = window_partition(torch.roll(x, (-2, -2), dims=(1, 2)), 4)
    with torch.no_grad():
        masked, unmasked = attn(shifted, shifted_window_mask(8, 8, 4, 2)), attn(shifted)
    assert (masked - unmasked).abs().max() > 1e-3


def test_fast_and_teaching_paths_agree_and_weights_are_zero_where_masked():
    attn = WindowAttention(32, 4, 2).eval()
    x, mask = torch.randn(8, 16, 32), shifted_window_mask(8, 8, 4, 2)
    with torch.no_grad():
        out, weights = attn.forward_with_weights(x, mask)
        torch.testing.assert_close(attn(x, mask), out, atol=1e-5, rtol=1e-5)
    assert weights.shape == (8, 2, 16, 16)
    blocked = ~mask.repeat(2, 1, 1)[:, None].expand_as(weights)
    assert weights[blocked].abs().max() == 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(8, 2, 16))


def repeated_bias(attn, mask, images):
    """The per-window bias as the layer built it before issue 34: ``(B·nW, h, N, N)``."""
    bias = attn.relative_position_bias().masked_fill(~mask[:, None], float("-inf"))
    return bias.repeat(images, 1, 1, 1)  # (nW, h, N, N) once per image


@pytest.mark.parametrize("qkv_bias", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_folded_windows_equal_the_bias_repeated_per_image(fused, qkv_bias):
    attn = WindowAttention(32, 4, 2, qkv_bias=qkv_bias).eval()
    attn.fused = fused
    with torch.no_grad():
        attn.relative_position_bias.table.normal_(0, 1)
    x, mask = torch.randn(3 * 4, 16, 32), shifted_window_mask(8, 8, 4, 2)  # 3 images
    with torch.no_grad():
        expected = full_attention(attn, x, repeated_bias(attn, mask, 3))
        out, weights = attn.forward_with_weights(x, attn_bias=mask)
        _, expected_weights = MultiHeadSelfAttention.forward_with_weights(
            attn, x, repeated_bias(attn, mask, 3)
        )
        torch.testing.assert_close(attn(x, attn_bias=mask), expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_an_additive_mask_equals_the_boolean_one(fused):
    attn = WindowAttention(32, 4, 2).eval()
    attn.fused = fused
    x, mask = torch.randn(8, 16, 32), shifted_window_mask(8, 8, 4, 2)
    minus_inf = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    minus_100 = (~mask).float() * -100.0  # as timm and torchvision add it
    with torch.no_grad():
        boolean = attn(x, mask)
        torch.testing.assert_close(attn(x, minus_inf), boolean, atol=0, rtol=0)
        torch.testing.assert_close(attn(x, minus_100), boolean, atol=1e-6, rtol=0)
        assert (attn(x, -minus_100) - boolean).abs().max() > 1e-2  # the sign matters


def test_the_mask_is_not_copied_for_every_image():
    # many narrow heads: the bias (B·nW, h, N, N) of the old layer dwarfs the tokens
    attn = WindowAttention(dim=8, window_size=7, num_heads=8).eval()
    B, mask = 16, shifted_window_mask(14, 14, 7, 3)  # 4 windows of N = 49 tokens per image
    x = torch.randn(B * 4, 49, 8)  # (B·nW, N, D)
    repeated = B * 4 * 8 * 49 * 49 * 4  # bytes of a float32 (B·nW, h, N, N): 4.9 MB
    with torch.inference_mode():
        rest = peak_memory(lambda: attn(x))  # the same layer, its bias (1, h, N, N) broadcast
        masked = peak_memory(lambda: attn(x, mask))
    assert masked < rest + repeated / 2, f"{masked} bytes, {rest} without a mask"


# --- SwinBlock and PatchMerging --------------------------------------------------------------


def dependence(fn, x):
    """``dep[i, j, k, l]``: does output token (i, j) depend on input token (k, l)? (B = 1)."""
    jac = jacobian(fn, x)  # (1, H, W, C, 1, H, W, C)
    return jac.abs().sum(dim=(0, 3, 4, 7)) > 0


def test_block_receptive_fields_stay_in_windows_and_cross_them_after_a_shift():
    plain = SwinBlock(8, 2, window_size=4).eval()
    shifted = SwinBlock(8, 2, window_size=4, shift_size=2).eval()
    x = torch.randn(1, 8, 8, 8)
    dep = dependence(plain, x)
    assert torch.equal(dep.flatten(2).flatten(0, 1), block_diagonal_mask(8, 8, 4))
    dep = dependence(shifted, x)
    assert torch.equal(dep.flatten(2).flatten(0, 1), block_diagonal_mask(8, 8, 4, 2))
    both = dependence(lambda t: shifted(plain(t)), x)  # two blocks: beyond one window
    assert both[0, 0].sum() > dep[0, 0].sum()


def test_block_pads_a_grid_the_window_does_not_divide():
    block = SwinBlock(16, 2, window_size=4, shift_size=2)
    out = block(torch.randn(2, 6, 9, 16))
    assert out.shape == (2, 6, 9, 16)
    assert block.shifts(6, 9) == (2, 2) and block.shifts(4, 9) == (0, 2)  # 4 rows: one window
    assert block.shifts(3, 2) == (0, 0)  # a grid smaller than the window: padded, no shift
    assert SwinBlock(16, 2, window_size=7).shifts(3, 2) == (0, 0)


def test_block_gradients_reach_every_parameter():
    block = SwinBlock(16, 2, window_size=4, shift_size=2)
    block(torch.randn(2, 8, 8, 16)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in block.parameters())


def explicit_maps(block, x):
    """Full attention of the block's tokens ``(B, h, HW, HW)`` under its block-diagonal mask."""
    (B, H, W, _), attn = x.shape, block.attn
    tokens = block.norm1(x).flatten(1, 2)  # (B, HW, C)
    q, k, _ = attn.qkv(tokens).view(B, H * W, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    allowed = block_diagonal_mask(H, W, block.window_size, block.shifts(H, W))  # (HW, HW)
    bias = full_bias(attn, H, W).masked_fill(~allowed, float("-inf"))
    return attention_weights(q, k, bias), allowed


@pytest.mark.parametrize("s", [0, 2])
def test_block_maps_are_full_attention_under_the_block_diagonal_mask(s):
    block = SwinBlock(32, 4, window_size=4, shift_size=s).eval()
    with torch.no_grad():
        block.attn.relative_position_bias.table.normal_(0, 1)
    x = torch.randn(2, 8, 12, 32)
    with torch.no_grad():
        out, maps = block.forward_with_weights(x)
        expected, allowed = explicit_maps(block, x)
        torch.testing.assert_close(out, block(x), atol=1e-5, rtol=1e-5)
    assert maps.shape == (2, 4, 96, 96)
    torch.testing.assert_close(maps, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 4, 96))
    assert maps[..., ~allowed].abs().max() == 0 and (maps[..., allowed] > 0).all()


@pytest.mark.parametrize(
    ("H", "W", "s", "short_rows"),
    [(6, 10, 0, 28), (6, 10, 2, 0), (5, 9, 2, 33)],  # 6×10 shifted: the padding wraps, kept apart
)
def test_block_maps_drop_the_padding(H, W, s, short_rows):
    block = SwinBlock(16, 2, window_size=4, shift_size=s).eval()
    x = torch.randn(2, H, W, 16)  # padded to 8×12
    with torch.no_grad():
        out, maps = block.forward_with_weights(x)
        torch.testing.assert_close(out, block(x), atol=1e-5, rtol=1e-5)
    assert maps.shape == (2, 2, H * W, H * W)
    real = ((torch.arange(8)[:, None] < H) & (torch.arange(12) < W)).flatten()  # (96,)
    padded = block_diagonal_mask(8, 12, 4, block.shifts(H, W))  # (96, 96) on the padded grid
    allowed = padded[real][:, real]  # (HW, HW)
    assert maps[..., ~allowed].abs().max() == 0 and (maps[..., allowed] > 0).all()
    sums, short = maps.sum(-1), padded[real][:, ~real].any(-1)  # (2, 2, HW); (HW,)
    assert short.sum() == short_rows  # the queries whose window held padding
    torch.testing.assert_close(sums[..., ~short], torch.ones(2, 2, H * W - short_rows))
    assert (sums[..., short] < 1 - 1e-3).all()


def test_patch_merging_concatenates_in_the_references_order():
    merge = PatchMerging(3)
    x = torch.randn(2, 6, 4, 3)
    x0, x1, x2, x3 = x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]
    expected = merge.reduction(merge.norm(torch.cat([x0, x1, x2, x3], dim=-1)))
    torch.testing.assert_close(merge(x), expected)
    assert merge(torch.randn(2, 7, 5, 3)).shape == (2, 4, 3, 6)  # odd grids padded
    assert merge.reduction.bias is None and merge.norm.normalized_shape == (12,)
    natural = rearrange(x, "b (h dr) (w dc) c -> b h w (dr dc c)", dr=2, dc=2)  # row-major
    assert not torch.allclose(merge(x), merge.reduction(merge.norm(natural)))


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: window_partition(torch.zeros(1, 6, 8, 2), 4), ValueError, r"6×8 .* M = 4"),
        (lambda: window_partition(torch.zeros(6, 8, 2), 2), ValueError, r"\(B, H, W, C\)"),
        (lambda: window_partition(torch.zeros(1, 4, 4, 2), 0), ValueError, "window_size"),
        (lambda: window_reverse(torch.zeros(3, 4, 2), 2, 4, 4), ValueError, r"\(B·4, 4, C\)"),
        (lambda: relative_position_index(2.0), TypeError, "window_size must be an integer"),
        (lambda: shifted_window_mask(8, 8, 4, 4), ValueError, r"shift_size must be in \[0, 4\)"),
        (lambda: block_diagonal_mask(8, 6, 4), ValueError, "8×6"),
        (lambda: WindowAttention(30, 4, 4), ValueError, "divisible by num_heads"),
        (lambda: SwinBlock(32, 2, window_size=4, shift_size=4), ValueError, "below window_size"),
        (lambda: SwinBlock(32, 2, window_size=0), ValueError, "window_size must be at least 1"),
        (lambda: SwinBlock(32, 2, drop_path=1.0), ValueError, "drop_path"),
        (lambda: SwinBlock(32, 2)(torch.zeros(1, 7, 7, 16)), ValueError, r"\(B, H, W, 32\)"),
        (
            lambda: SwinBlock(32, 2).forward_with_weights(torch.zeros(7, 7, 32)),
            ValueError,
            r"\(B, H, W, 32\)",
        ),
        (lambda: PatchMerging(8)(torch.zeros(1, 16, 8)), ValueError, r"\(B, H, W, 8\)"),
        # sizes are checked before torch.arange, view or einops sees them
        (lambda: shifted_window_mask(-4, 4, 2, 1), ValueError, "height must be at least 1, got -4"),
        (lambda: shifted_window_mask(4, 0, 2, 0), ValueError, "width must be at least 1, got 0"),
        (lambda: window_reverse(torch.zeros(0, 4, 2), 2, 0, 0), ValueError, "height .* got 0"),
        (lambda: window_reverse(torch.zeros(2, 4, 2), 2, 4, -8), ValueError, "width .* got -8"),
        (lambda: window_reverse(torch.zeros(2, 4, 2), 2, 4.0, 4), TypeError, "height .* got 4.0"),
        (lambda: shifted_window_mask(4, 4.0, 2, 1), TypeError, "width must be an integer, got 4.0"),
        (lambda: block_diagonal_mask(4.0, 4, 2), TypeError, "height must be an integer, got 4.0"),
        (lambda: block_diagonal_mask(4, 4, 2.0), TypeError, "window_size must be an integer"),
        (lambda: shifted_window_mask(True, 4, 1, 0), TypeError, "height .* got True"),
        (lambda: shifted_window_mask(4, 4, 2, 1.0), TypeError, "shift_size .* got 1.0"),
        (lambda: block_diagonal_mask(4, 4, 2, (0, -1)), ValueError, "shift_size .* got -1"),
        (lambda: block_diagonal_mask(4, 4, 2, (1, 1, 1)), TypeError, r"shift_size .* \(1, 1, 1\)"),
        (lambda: shifted_window_mask(4, 4, 2, (0, 2)), ValueError, r"got \(0, 2\)"),
    ],
)
def test_bad_input_is_refused(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("method", ["forward", "forward_with_weights"])
@pytest.mark.parametrize(
    ("x", "kwargs", "error", "message"),
    [
        ((8, 4, 16), {"attn_bias": torch.ones(4, 4, 4, dtype=torch.long)}, TypeError, "int64"),
        ((8, 4, 16), {"attn_bias": [[True]]}, TypeError, "bool .* or float, got list"),
        ((8, 4, 16), {"attn_bias": torch.ones(4, 3, 3).bool()}, ValueError, r"\(nW, 4, 4\)"),
        ((8, 4, 16), {"attn_bias": torch.ones(4, 4).bool()}, ValueError, r"got \(4, 4\)"),
        ((8, 4, 16), {"attn_bias": torch.ones(3, 4, 4).bool()}, ValueError, "dividing the 8"),
        ((8, 4, 16), {"attn_bias": torch.ones(0, 4, 4)}, ValueError, r"got \(0, 4, 4\)"),
        ((8, 4, 16), {"rope": lambda t: t}, ValueError, "no rope"),
        ((8, 9, 16), {}, ValueError, r"windows \(B·nW, 4, 16\), got \(8, 9, 16\)"),
        ((4, 16), {}, ValueError, r"windows \(B·nW, 4, 16\)"),
    ],
)
def test_bad_windows_masks_and_ropes_are_refused(method, x, kwargs, error, message):
    attn = WindowAttention(16, 2, 2)
    with pytest.raises(error, match=message):
        getattr(attn, method)(torch.randn(x), **kwargs)


def test_a_refused_float_size_leaves_later_calls_of_that_shape_working():
    """einops caches a recipe by its sizes, and 4.0 == 4: a float that reached it once broke every
    later call of that shape until Python restarted. The shapes are this test's alone."""
    windows = torch.randn(20, 9, 5)  # two 6×15 grids of 3×3 windows
    with pytest.raises(TypeError, match="height must be an integer, got 6.0"):
        window_reverse(windows, 3, 6.0, 15)
    grid = window_reverse(windows, 3, 6, 15)
    assert grid.shape == (2, 6, 15, 5) and torch.equal(window_partition(grid, 3), windows)


def test_numpy_integers_are_sizes():
    i = np.int64
    assert torch.equal(
        window_reverse(torch.ones(4, 4, 2), i(2), i(4), i(4)), torch.ones(1, 4, 4, 2)
    )
    assert torch.equal(
        shifted_window_mask(i(8), 8, 4, (i(2), i(0))), shifted_window_mask(8, 8, 4, (2, 0))
    )
    assert torch.equal(block_diagonal_mask(4, i(4), 2, i(1)), block_diagonal_mask(4, 4, 2, 1))
    attn = WindowAttention(i(16), i(2), i(2))
    assert attn.window_size == 2 and type(attn.window_size) is int
    block = SwinBlock(i(16), i(2), window_size=i(4), shift_size=i(2))
    assert (block.window_size, block.shift_size) == (4, 2) and type(block.shift_size) is int
    assert block(torch.randn(1, 6, 6, 16)).shape == (1, 6, 6, 16)  # padded, shifted, masked
    assert type(PatchMerging(i(8)).dim) is int


def test_what_is_not_a_tensor_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="x must be a grid tensor .*got list"):
        window_partition([[1]], 2)
    with pytest.raises(TypeError, match="windows must be a tensor .*got str"):
        window_reverse("x", 2, 4, 4)
