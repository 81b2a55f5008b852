"""Tests for vit_tutorial/positional.py and its exercise checkers."""

import math

import numpy as np
import pytest
import torch
from einops import rearrange

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.exercises import (
    check_relative_position_index,
    check_resize_table,
    check_sinusoidal_2d,
)
from vit_tutorial.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    RotaryEmbedding2D,
    SinusoidalEmbedding2D,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)

from checker_messages import wrapped


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def grid_coords(gh, gw):
    """(row, column) of each row-major grid position."""
    n = torch.arange(gh * gw)
    return n // gw, n % gw


# --- learned ---------------------------------------------------------------------------------


def test_learned_init_and_forward():
    pos = LearnedPositionalEmbedding(197, 768)
    assert pos.weight.shape == (1, 197, 768) and pos.weight.requires_grad
    assert pos.weight.abs().max() <= 0.04  # truncated at ±2 std
    # std of a normal(0, 0.02) truncated at ±2 std is 0.02 · 0.8796
    assert abs(pos.weight.std().item() - 0.02 * 0.8796) < 2e-4
    x = torch.randn(2, 197, 768)
    torch.testing.assert_close(pos(x), x + pos.weight)


def test_learned_gradient():
    pos = LearnedPositionalEmbedding(5, 8)
    pos(torch.randn(3, 5, 8)).sum().backward()
    torch.testing.assert_close(pos.weight.grad, torch.full((1, 5, 8), 3.0))


def test_learned_errors():
    pos = LearnedPositionalEmbedding(197, 64)
    with pytest.raises(ValueError, match=r"\(B, 197, 64\), got \(2, 50, 64\).*resize_pos_embed"):
        pos(torch.randn(2, 50, 64))
    with pytest.raises(ValueError, match=r"got \(2, 197, 32\)"):
        pos(torch.randn(2, 197, 32))
    with pytest.raises(ValueError, match=r"got \(197, 64\)"):
        pos(torch.randn(197, 64))


def test_attention_needs_positions():
    attn = MultiHeadSelfAttention(32, 4).eval()
    tokens = torch.randn(1, 9, 32)
    perm = torch.randperm(9)
    # without positions a shuffled input gives the same output, shuffled
    torch.testing.assert_close(attn(tokens[:, perm]), attn(tokens)[:, perm], atol=1e-6, rtol=0)
    # with them, it does not
    pe = sinusoidal_2d(3, 32)
    assert not torch.allclose(attn(tokens[:, perm] + pe), attn(tokens + pe)[:, perm], atol=1e-3)


# --- sinusoidal 1D ------------------------------------------------------------------------------


def test_sinusoidal_1d_formula():
    pe = sinusoidal_1d(50, 16, temperature=100.0)
    for p in (0, 7, 49):
        for i in range(8):
            angle = p / 100.0 ** (2 * i / 16)
            assert math.isclose(pe[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    assert pe.dtype == torch.float32 and pe.shape == (50, 16)
    torch.testing.assert_close(pe.norm(dim=1), torch.full((50,), math.sqrt(8)))


def test_sinusoidal_1d_dot_product_depends_only_on_offset():
    pe = sinusoidal_1d(64, 32)
    gram = pe @ pe.T  # (N, N)
    for offset in (-9, 0, 1, 5, 30):
        diagonal = torch.diagonal(gram, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-4, rtol=0)


def test_sinusoidal_1d_prefix_property():
    # a longer table starts with the shorter one: codes do not depend on the length
    torch.testing.assert_close(sinusoidal_1d(500, 64)[:100], sinusoidal_1d(100, 64))


def test_sinusoidal_1d_errors():
    with pytest.raises(ValueError, match=r"even dim.*dim=15"):
        sinusoidal_1d(10, 15)
    with pytest.raises(ValueError, match=r"num_positions must be at least 1, got 0"):
        sinusoidal_1d(0, 16)


# --- sinusoidal 2D ------------------------------------------------------------------------------


def test_sinusoidal_2d_vit_b16_codes_are_distinct():
    pe = sinusoidal_2d(14, 768)
    assert pe.shape == (196, 768)
    distances = torch.cdist(pe, pe) + torch.eye(196) * 1e9
    assert distances.min() > 0.1
    assert torch.unique(pe, dim=0).shape[0] == 196


@pytest.mark.parametrize("grid", [(14, 14), (4, 7), (9, 2)])
def test_sinusoidal_2d_each_half_encodes_one_axis(grid):
    gh, gw = grid
    dim = 64
    pe = sinusoidal_2d(grid, dim).reshape(gh, gw, dim)
    rows, cols = pe[..., : dim // 2], pe[..., dim // 2 :]
    # changing only the column changes only the column half, and vice versa
    assert torch.equal(rows, rows[:, :1].expand_as(rows))
    assert torch.equal(cols, cols[:1].expand_as(cols))
    assert not torch.allclose(cols[:, 0], cols[:, 1])
    assert not torch.allclose(rows[0], rows[1])
    torch.testing.assert_close(rows[:, 0], sinusoidal_1d(gh, dim // 2))
    torch.testing.assert_close(cols[0], sinusoidal_1d(gw, dim // 2))


def test_sinusoidal_2d_dot_product_depends_only_on_2d_offset():
    gh, gw = 5, 6
    pe = sinusoidal_2d((gh, gw), 64)
    rows, cols = grid_coords(gh, gw)
    gram = pe @ pe.T
    by_offset = {}
    for n in range(gh * gw):
        for m in range(gh * gw):
            key = (rows[n] - rows[m]).item(), (cols[n] - cols[m]).item()
            by_offset.setdefault(key, gram[n, m].item())
            assert math.isclose(by_offset[key], gram[n, m].item(), abs_tol=1e-4)


def test_sinusoidal_2d_matches_timm_up_to_channel_order():
    sincos = pytest.importorskip("timm.layers.pos_embed_sincos")
    for grid in [(14, 14), (6, 10)]:
        ours = sinusoidal_2d(grid, 768)
        ref = sincos.build_sincos2d_pos_embed(list(grid), 768, interleave_sin_cos=True)
        # timm keeps [row: all sin, all cos | column: all sin, all cos]; we interleave sin, cos
        ref = rearrange(ref, "n (xy two k) -> n (xy k two)", xy=2, two=2)
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=0)


def test_sinusoidal_2d_errors():
    with pytest.raises(ValueError, match=r"divisible by 4.*dim=770.*768 and 772"):
        sinusoidal_2d(14, 770)
    with pytest.raises(ValueError, match=r"dim=2"):
        sinusoidal_2d(14, 2)
    with pytest.raises(ValueError, match=r"grid_size must be positive, got \(0, 4\)"):
        sinusoidal_2d((0, 4), 16)
    with pytest.raises(TypeError, match=r"\(14, 14, 1\)"):
        sinusoidal_2d((14, 14, 1), 16)


# --- relative position bias -------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_relative_bias_is_translation_invariant(grid):
    gh, gw = grid
    rpb = RelativePositionBias(grid, num_heads=3)
    assert rpb.table.shape == ((2 * gh - 1) * (2 * gw - 1), 3)
    bias = rpb()
    assert bias.shape == (3, gh * gw, gh * gw)
    rows, cols = grid_coords(gh, gw)
    by_offset = {}
    for n in range(gh * gw):
        for m in range(gh * gw):
            key = (rows[n] - rows[m]).item(), (cols[n] - cols[m]).item()
            torch.testing.assert_close(by_offset.setdefault(key, bias[:, n, m]), bias[:, n, m])
    assert len(by_offset) == (2 * gh - 1) * (2 * gw - 1)  # every entry used, none shared
    assert torch.unique(rpb.index).numel() == rpb.table.shape[0]


def test_relative_bias_prefix_tokens_have_their_own_entries():
    rpb = RelativePositionBias((3, 4), num_heads=2, num_prefix_tokens=2)
    num_offsets = 5 * 7
    assert rpb.table.shape == (num_offsets + 3, 2)
    with torch.no_grad():
        rpb.table[num_offsets:] = torch.tensor([[10.0, 11.0], [20.0, 21.0], [30.0, 31.0]])
    bias = rpb()
    assert bias.shape == (2, 14, 14)
    assert (bias[0, :2, 2:] == 10).all() and (bias[0, 2:, :2] == 20).all()  # cls->patch, patch->cls
    assert (bias[1, :2, :2] == 31).all()  # cls->cls
    assert (bias[:, 2:, 2:].abs() < 1).all()  # patches use the offset entries


def test_relative_bias_index_matches_timm_beit():
    beit = pytest.importorskip("timm.models.beit")
    for grid in [(7, 7), (4, 6)]:
        ref = beit.gen_relative_position_index(grid)  # with one class token
        assert torch.equal(RelativePositionBias(grid, 2, num_prefix_tokens=1).index, ref)
        assert torch.equal(RelativePositionBias(grid, 2).index, ref[1:, 1:])


def test_relative_bias_init_gradient_and_use_in_attention():
    rpb = RelativePositionBias(4, num_heads=4, num_prefix_tokens=1)
    assert rpb.table.abs().max() <= 0.04 and rpb.table.std() > 0.01
    attn = MultiHeadSelfAttention(32, 4)
    out = attn(torch.randn(2, 17, 32), attn_bias=rpb())
    out.square().sum().backward()
    assert rpb.table.grad is not None and (rpb.table.grad != 0).all()
    assert "index" not in rpb.state_dict()  # rebuilt from the grid, not saved


def test_relative_bias_errors():
    with pytest.raises(ValueError, match=r"grid \(0, 4\), num_heads=2"):
        RelativePositionBias((0, 4), 2)
    with pytest.raises(ValueError, match=r"num_heads must be at least 1, got 0"):
        RelativePositionBias(4, 0)  # num_heads=0
    with pytest.raises(ValueError, match=r"num_prefix_tokens must be at least 0, got -1"):
        RelativePositionBias(4, 2, num_prefix_tokens=-1)


# --- resizing -------------------------------------------------------------------------------------


def test_resize_returns_input_when_grids_equal():
    pe = torch.randn(1, 197, 16)
    assert resize_pos_embed(pe, 14, (14, 14)) is pe


@pytest.mark.parametrize(
    ("old", "new"), [((14, 14), (16, 16)), ((14, 14), (7, 9)), ((6, 8), (12, 5))]
)
def test_resize_matches_timm(old, new):
    pos_embed = pytest.importorskip("timm.layers.pos_embed")
    pe = torch.randn(1, 1 + old[0] * old[1], 16)
    ref = pos_embed.resample_abs_pos_embed(pe, list(new), list(old), num_prefix_tokens=1)
    torch.testing.assert_close(resize_pos_embed(pe, old, new), ref)


def test_resize_keeps_prefix_and_constants():
    pe = torch.cat([torch.randn(1, 2, 8), torch.ones(1, 20, 8) * 3.0], dim=1)
    out = resize_pos_embed(pe, (4, 5), (8, 3), num_prefix_tokens=2)
    assert out.shape == (1, 2 + 24, 8)
    assert torch.equal(out[:, :2], pe[:, :2])
    torch.testing.assert_close(out[:, 2:], torch.full((1, 24, 8), 3.0))
    assert resize_pos_embed(pe[:, 2:], (4, 5), 10, num_prefix_tokens=0).shape == (1, 100, 8)


def test_resize_keeps_the_grid_layout():
    # a table whose channel 0 is the row and channel 1 the column stays so after resizing
    rows, cols = grid_coords(4, 4)
    pe = torch.stack([rows, cols], -1).float()[None]
    out = resize_pos_embed(pe, 4, 8, num_prefix_tokens=0).reshape(8, 8, 2)
    assert (out[1:, :, 0] > out[:-1, :, 0]).all() and (out[:, 1:, 1] > out[:, :-1, 1]).all()
    torch.testing.assert_close(out[..., 0], out[..., 0][:, :1].expand(8, 8))


def test_resize_errors():
    with pytest.raises(
        ValueError, match=r"\(1, 50, 8\) does not match old_grid \(14, 14\).*\(1, 197, D\)"
    ):
        resize_pos_embed(torch.randn(1, 50, 8), 14, 16)
    with pytest.raises(ValueError, match=r"expected \(1, 196, D\)"):
        resize_pos_embed(torch.randn(1, 197, 8), 14, 16, num_prefix_tokens=0)
    with pytest.raises(ValueError, match=r"old_grid \(14, 14\) and new_grid \(0, 3\)"):
        resize_pos_embed(torch.randn(1, 197, 8), 14, (0, 3))
    with pytest.raises(ValueError, match=r"positive, got old_grid \(-4, 4\)"):
        resize_pos_embed(torch.randn(1, 17, 8), (-4, 4), 4)  # not "expected (1, -15, D)"
    with pytest.raises(TypeError, match="num_prefix_tokens must be an integer, got 1.0"):
        resize_pos_embed(torch.randn(1, 17, 8), 4, 8, num_prefix_tokens=1.0)
    # a NumPy integer is an integer: sizes read from an array work as ints do
    assert resize_pos_embed(torch.randn(1, 17, 8), np.int64(4), (np.int32(2), 8)).shape[1] == 17


# --- rotary ---------------------------------------------------------------------------------------


def heo_axial_reference(x, gh, gw, theta=100.0):
    """naver-ai/rope-vit's compute_axial_cis + apply_rotary_emb, in complex numbers."""
    d = x.shape[-1]
    freqs = 1.0 / theta ** (torch.arange(0, d, 4)[: d // 4].float() / d)
    t = torch.arange(gh * gw).float()
    t_x, t_y = t % gw, torch.div(t, gw, rounding_mode="floor")
    cis = torch.cat(
        [
            torch.polar(torch.ones(gh * gw, d // 4), torch.outer(t_x, freqs)),
            torch.polar(torch.ones(gh * gw, d // 4), torch.outer(t_y, freqs)),
        ],
        -1,
    )
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis).flatten(-2)


@pytest.mark.parametrize("mode", ["axial", "mixed"])
@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_rope_dot_product_depends_only_on_2d_offset(mode, grid):
    gh, gw = grid
    rope = RotaryEmbedding2D(16, grid, mode=mode, num_heads=2)
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 1, 16)  # one query, one key vector
    N = gh * gw
    rq, rk = rope(q.expand(1, 2, N, 16)), rope(k.expand(1, 2, N, 16))  # placed everywhere
    scores = rq @ rk.transpose(-2, -1)  # (1, h, N, N)
    rows, cols = grid_coords(gh, gw)
    by_offset = {}
    for n in range(N):
        for m in range(N):
            key = (rows[n] - rows[m]).item(), (cols[n] - cols[m]).item()
            torch.testing.assert_close(
                by_offset.setdefault(key, scores[0, :, n, m]), scores[0, :, n, m], atol=1e-5, rtol=0
            )
    assert len({round(v[0].item(), 4) for v in by_offset.values()}) > N  # not constant


def test_rope_axial_matches_heo_et_al():
    x = torch.randn(2, 3, 20, 32)
    torch.testing.assert_close(
        RotaryEmbedding2D(32, (4, 5))(x), heo_axial_reference(x, 4, 5), atol=1e-5, rtol=0
    )


def test_rope_mixed_matches_timm():
    sincos = pytest.importorskip("timm.layers.pos_embed_sincos")
    ref = sincos.RotaryEmbeddingMixed(dim=4 * 16, depth=1, num_heads=4, feat_shape=[3, 5])
    ours = RotaryEmbedding2D(16, (3, 5), mode="mixed", num_heads=4)
    with torch.no_grad():
        ours.freqs.copy_(ref.freqs[:, 0])
    x = torch.randn(2, 4, 15, 16)
    expected = sincos.apply_rot_embed_cat(x, ref.get_embed()[0])
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=0)


def test_rope_axial_is_mixed_with_axis_aligned_frequencies():
    axial = RotaryEmbedding2D(16, 4, num_prefix_tokens=1)
    mixed = RotaryEmbedding2D(
        16, 4, num_prefix_tokens=1, mode="mixed", num_heads=1, temperature=100.0
    )
    with torch.no_grad():
        mixed.freqs.copy_(axial.freqs)
    x = torch.randn(2, 1, 17, 16)
    torch.testing.assert_close(axial(x), mixed(x))
    # axial: the first d/4 pairs turn with the column only, the last d/4 with the row only
    angles = axial.angles().reshape(4, 4, 8)
    assert torch.equal(angles[..., :4], angles[:1, :, :4].expand(4, 4, 4))
    assert torch.equal(angles[..., 4:], angles[:, :1, 4:].expand(4, 4, 4))


def test_rope_keeps_norms_and_prefix_tokens():
    rope = RotaryEmbedding2D(32, (2, 3), num_prefix_tokens=1)
    x = torch.randn(2, 4, 7, 32)
    out = rope(x)
    assert torch.equal(out[:, :, 0], x[:, :, 0])
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    assert not torch.allclose(out[:, :, 2:], x[:, :, 2:])
    torch.testing.assert_close(out[:, :, 1], x[:, :, 1])  # grid position (0, 0): angle 0


def test_rope_in_attention_and_other_grids():
    attn = MultiHeadSelfAttention(64, 4).eval()
    rope = RotaryEmbedding2D(16, 3, num_prefix_tokens=1)
    x = torch.randn(2, 10, 64)
    fused = attn(x, rope=rope)
    explicit, _ = attn.forward_with_weights(x, rope=rope)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)
    assert not torch.allclose(fused, attn(x), atol=1e-3)
    # another grid on the fly: the angles of a 3×3 grid are the top-left corner of a 5×6 grid
    bigger = rope.angles((5, 6)).reshape(5, 6, 8)
    torch.testing.assert_close(bigger[:3, :3].reshape(9, 8), rope.angles()[0])
    assert rope(torch.randn(1, 4, 31, 16), grid_size=(5, 6)).shape == (1, 4, 31, 16)


def test_rope_mixed_frequencies_are_learned():
    rope = RotaryEmbedding2D(16, 4, mode="mixed", num_heads=2)
    assert rope.freqs.shape == (2, 2, 8) and rope.freqs.requires_grad
    assert rope.temperature == 10.0
    rope(torch.randn(1, 2, 16, 16)).square().sum().backward()
    assert rope.freqs.grad.abs().sum() > 0
    axial = RotaryEmbedding2D(16, 4)
    assert axial.temperature == 100.0 and list(axial.parameters()) == []


def test_rope_errors():
    with pytest.raises(ValueError, match=r"'axial' or 'mixed', got 'diagonal'"):
        RotaryEmbedding2D(16, 4, mode="diagonal")
    with pytest.raises(ValueError, match=r"divisible by 4, got 18"):
        RotaryEmbedding2D(18, 4)
    rope = RotaryEmbedding2D(16, (3, 4), num_prefix_tokens=1)
    with pytest.raises(
        ValueError, match=r"\(B, h, 13, 16\) for grid \(3, 4\) with 1 prefix.*\(2, 4, 12, 16\)"
    ):
        rope(torch.randn(2, 4, 12, 16))
    with pytest.raises(ValueError, match=r"got \(2, 4, 13, 32\)"):
        rope(torch.randn(2, 4, 13, 32))
    mixed = RotaryEmbedding2D(16, 2, mode="mixed", num_heads=4)
    with pytest.raises(ValueError, match=r"built for 4 heads, got 2"):
        mixed(torch.randn(1, 2, 4, 16))


# --- the exercise checkers ----------------------------------------------------------------------


def test_check_sinusoidal_2d_accepts_the_package(capsys):
    check_sinusoidal_2d(sinusoidal_2d)
    assert "Correct!" in capsys.readouterr().out


def rows_only(grid, dim):
    gh, gw = grid
    return sinusoidal_1d(gh, dim).repeat_interleave(gw, dim=0)


def columns_only(grid, dim):
    gh, gw = grid
    return sinusoidal_1d(gw, dim).repeat(gh, 1)


def repeats_swapped(grid, dim):
    gh, gw = grid
    first = sinusoidal_1d(gh, dim // 2).repeat(gw, 1)  # n % Gh: not the row
    return torch.cat([first, sinusoidal_1d(gw, dim // 2).repeat_interleave(gh, dim=0)], 1)


def repeats_swapped_halves_exchanged(grid, dim):
    """Right on a square grid only."""
    first, second = repeats_swapped(grid, dim).chunk(2, dim=1)
    return torch.cat([second, first], dim=1)


def crashes_on_square_grids(grid, dim):
    gh, gw = grid
    if gh == gw:
        raise RuntimeError("shape '[196, 384]' is invalid for input of size 5376")
    return sinusoidal_2d(grid, dim)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (rows_only, "encodes only the row"),
        (columns_only, "encodes only the column"),
        (lambda grid, dim: sinusoidal_1d(grid[0] * grid[1], dim), r"flattened index.*\(0, 4\)"),
        (
            lambda grid, dim: sinusoidal_2d(grid, dim).roll(grid[1] * 0 + dim // 2, dims=1),
            "column is in the first half",
        ),
        (
            lambda grid, dim: rearrange(
                sinusoidal_2d(grid, dim), "n (a k two) -> n (a two k)", a=2, two=2
            ),
            "sines of an axis come before",
        ),
        (crashes_on_square_grids, r"crashed on grid_size=\(14, 14\), dim=768.*RuntimeError"),
        (repeats_swapped, r"grid_size=\(3, 5\).*indexed with Gh where Gw"),
        (repeats_swapped_halves_exchanged, r"grid_size=\(3, 5\).*indexed with Gh where Gw"),
        (
            lambda grid, dim: sinusoidal_2d(grid, dim).reshape(*grid, dim),
            r"\(15, 16\).*\(3, 5, 16\)",
        ),
        (
            lambda grid, dim: sinusoidal_2d(grid, dim, temperature=100.0),
            "differs from sinusoidal_2d",
        ),
    ],
)
def test_check_sinusoidal_2d_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_sinusoidal_2d(wrong)


def package_index(grid):
    return RelativePositionBias(grid, num_heads=1).index


def test_check_relative_position_index_accepts_any_valid_numbering(capsys):
    check_relative_position_index(package_index)
    check_relative_position_index(lambda grid: package_index(grid).T)  # key - query offsets
    assert capsys.readouterr().out.count("Correct!") == 2


def unshifted(grid):
    gh, gw = grid
    rows, cols = grid_coords(gh, gw)
    return (rows[:, None] - rows[None]) * (2 * gw - 1) + (cols[:, None] - cols[None])


def wrong_multiplier(grid):
    gh, gw = grid
    rows, cols = grid_coords(gh, gw)
    return (rows[:, None] - rows[None] + gh - 1) * (2 * gh - 1) + (
        cols[:, None] - cols[None] + gw - 1
    )


def flattened_offset(grid):
    n = torch.arange(grid[0] * grid[1])
    return n[:, None] - n[None] + grid[0] * grid[1] - 1


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (unshifted, r"\[0, 25\).*shift the row offset"),
        (wrong_multiplier, r"grid_size=\(2, 4\).*share entry.*2Gw-1 = 7 values, not 2Gh-1 = 3"),
        (flattened_offset, r"share entry.*flattened indices"),
        (lambda grid: package_index(grid).float(), "integers"),
        (lambda grid: package_index(grid)[1:], r"shape \(N, N\) = \(9, 9\)"),
    ],
)
def test_check_relative_position_index_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_relative_position_index(wrong)


def interpolated(layout_in="(gh gw) d -> 1 d gh gw", layout_out="1 d gh gw -> (gh gw) d", **kw):
    """A resize_table answer that views the table with ``layout_in`` and F.interpolate(**kw)."""
    options = {"mode": "bicubic", "align_corners": False, "antialias": True} | kw

    def resize(table, old_grid, new_grid):
        image = rearrange(table, layout_in, gh=old_grid[0], gw=old_grid[1])
        return rearrange(torch.nn.functional.interpolate(image, new_grid, **options), layout_out)

    return resize


def resize_transposed_throughout(table, old_grid, new_grid):
    """Correct: the grid transposed, resized to the transposed size, and transposed back."""
    image = rearrange(table, "(gh gw) d -> 1 d gw gh", gh=old_grid[0])
    resized = torch.nn.functional.interpolate(image, new_grid[::-1], mode="bicubic", antialias=True)
    return rearrange(resized, "1 d gw gh -> (gh gw) d")


def test_check_resize_table_accepts_every_correct_answer(capsys):
    check_resize_table(lambda table, old, new: resize_pos_embed(table[None], old, new, 0)[0])
    check_resize_table(interpolated())
    check_resize_table(lambda table, old, new: interpolated()(table.double(), old, new))
    check_resize_table(resize_transposed_throughout)
    assert capsys.readouterr().out.count("Correct!") == 4


def reshaped_in(table, old_grid, new_grid):
    image = table.reshape(1, table.shape[1], *old_grid)
    return interpolated("1 d gh gw -> 1 d gh gw")(image, old_grid, new_grid)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (reshaped_in, "a reshape is not a transpose"),
        (interpolated(layout_out="1 d gh gw -> (gw gh) d"), "read or written column by column"),
        (interpolated("(gw gh) d -> 1 d gh gw"), "read or written column by column"),
        (lambda table, old, new: interpolated()(table, old, new[::-1]), r"taken as \(Gw, Gh\)"),
        (interpolated(align_corners=True), "align_corners=True pins the corner"),
        (interpolated(antialias=False), "antialias is off.*Keys' a=-0.5"),
        (interpolated(mode="bilinear"), "bilinear interpolation"),
        (interpolated(mode="nearest", align_corners=None, antialias=False), "nearest patch"),
        (lambda table, old, new: interpolated()(table, old, new)[None], r"\(12, 8\).*\(1, 12, 8\)"),
        (
            lambda table, old, new: 1.01 * interpolated()(table, old, new),
            "differs from resize_pos_embed",
        ),
    ],
)
def test_check_resize_table_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_resize_table(wrong)


def test_check_resize_table_starts_with_a_shrinking_non_square_grid():
    # the transposes and the antialias only show on a non-square grid that shrinks
    with pytest.raises(AssertionError, match=wrapped(r"old_grid=\(4, 6\), new_grid=\(3, 4\)")):
        check_resize_table(interpolated(antialias=False))


def test_grid_coordinates_are_row_major():
    from vit_tutorial.positional import grid_coordinates

    rows, cols = grid_coordinates((3, 4))
    assert torch.equal(rows * 4 + cols, torch.arange(12))
    with pytest.raises(ValueError, match=r"grid_size must be positive, got \(0, 2\)"):
        grid_coordinates((0, 2))


def test_sinusoidal_embedding_module_adds_the_table_and_follows_the_grid():
    from vit_tutorial.positional import SinusoidalEmbedding2D

    pos = SinusoidalEmbedding2D((2, 3), 8, num_prefix_tokens=1)
    assert pos.state_dict() == {}  # fixed, not stored
    x = torch.zeros(2, 7, 8)
    out = pos(x)
    assert torch.equal(out[:, 0], torch.zeros(2, 8))
    torch.testing.assert_close(out[0, 1:], sinusoidal_2d((2, 3), 8))
    torch.testing.assert_close(pos(torch.zeros(1, 13, 8), (3, 4))[0, 1:], sinusoidal_2d((3, 4), 8))
    with pytest.raises(ValueError, match=r"expected tokens of shape \(B, 7, 8\)"):
        pos(torch.zeros(1, 6, 8))


def test_learned_embedding_resamples_for_another_grid():
    torch.manual_seed(0)
    pos = LearnedPositionalEmbedding(1 + 4 * 4, 8, grid_size=4, num_prefix_tokens=1)
    out = pos(torch.zeros(1, 1 + 6 * 6, 8), (6, 6))
    torch.testing.assert_close(out, resize_pos_embed(pos.weight, 4, 6, 1))
    assert torch.equal(pos(torch.zeros(1, 17, 8), (4, 4)), pos.weight.detach().expand(1, 17, 8))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(grid_size=0),
        dict(grid_size=(4, -1)),
        dict(num_prefix_tokens=-1),
        dict(num_heads=0),
        dict(temperature=0.0),
    ],
)
def test_rope_refuses_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        RotaryEmbedding2D(**{"head_dim": 8, "grid_size": 4, **kwargs})


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_sinusoidal_tables_refuse_a_non_positive_temperature(temperature):
    with pytest.raises(ValueError, match=f"temperature must be positive, got {temperature}"):
        sinusoidal_1d(4, 8, temperature)
    with pytest.raises(ValueError, match=f"temperature must be positive, got {temperature}"):
        sinusoidal_2d(4, 8, temperature)


@pytest.mark.parametrize(
    "build, error, named",
    [
        (
            lambda: LearnedPositionalEmbedding(16.0, 8),
            TypeError,
            "num_positions must be an integer",
        ),
        (lambda: LearnedPositionalEmbedding(-1, 8), ValueError, "num_positions must be at least 1"),
        (lambda: LearnedPositionalEmbedding(10, 8, grid_size=4), ValueError, "must be 16 .*got 10"),
        (lambda: LearnedPositionalEmbedding(17, 8, 4, -2), ValueError, "num_prefix_tokens must be"),
        (lambda: SinusoidalEmbedding2D(4, 8, -1), ValueError, "num_prefix_tokens must be at least"),
    ],
)
def test_position_layers_refuse_bad_sizes_by_name(build, error, named):
    with pytest.raises(error, match=named):
        build()
