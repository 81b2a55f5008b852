"""Tests for vit_tutorial/axial.py and its exercise checkers."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn
from torch.autograd.functional import jacobian
from torch.utils.data import TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import (
    AxialAttention,
    AxialEncoderBlock,
    AxialViT,
    AxialViTConfig,
    along_axis,
    attention_flops,
    axial_mask,
)
from vit_tutorial.checkpoint import load_checkpoint
from vit_tutorial.data import make_loader
from vit_tutorial.engine import fit, param_groups
from vit_tutorial.exercises import check_axial_attention, check_axial_mask, check_axial_scores
from vit_tutorial.measure import median_seconds, peak_memory

from checker_messages import wrapped


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def full_twin(axial: AxialAttention) -> MultiHeadSelfAttention:
    """Full attention with the same weights as ``axial``."""
    full = MultiHeadSelfAttention(axial.attn.dim, axial.attn.num_heads).eval()
    full.load_state_dict(axial.attn.state_dict())
    return full


def dependence(fn, x: torch.Tensor) -> torch.Tensor:
    """``dep[i, j, k, l]``: does output token (i, j) depend on input token (k, l)? (B = 1)."""
    jac = jacobian(fn, x)  # (1, Gh, Gw, D, 1, Gh, Gw, D)
    return jac.abs().sum(dim=(0, 3, 4, 7)) > 0  # (Gh, Gw, Gh, Gw)


# --- AxialAttention ----------------------------------------------------------------------


@pytest.mark.parametrize("axis", ["height", "width"])
@pytest.mark.parametrize("fused", [True, False])
def test_equals_full_attention_with_the_axial_mask(axis, fused):
    axial = AxialAttention(16, 4, axis).eval()
    axial.fused = fused
    full = full_twin(axial)
    x = torch.randn(2, 3, 5, 16)  # (B, Gh, Gw, D), not square
    want = full(x.reshape(2, 15, 16), attn_bias=axial_mask((3, 5), axis)).reshape(x.shape)
    torch.testing.assert_close(axial(x), want, atol=1e-5, rtol=0)
    # and not equal to unmasked full attention
    assert not torch.allclose(axial(x), full(x.reshape(2, 15, 16)).reshape(x.shape), atol=1e-3)


def test_axial_mask_by_hand():
    # a 2×3 grid, tokens row-major: 0 1 2 / 3 4 5; columns are {0, 3}, {1, 4}, {2, 5}
    mask = axial_mask((2, 3), "height")
    assert mask.dtype == torch.bool and mask.shape == (6, 6)
    assert mask[0].nonzero().flatten().tolist() == [0, 3]
    assert mask[4].nonzero().flatten().tolist() == [1, 4]
    assert axial_mask((2, 3), "width")[4].nonzero().flatten().tolist() == [3, 4, 5]
    assert axial_mask(4, "width").sum().item() == 16 * 4


@pytest.mark.parametrize("grid", [(3, 5), (5, 3), (1, 4), (4, 4)])
def test_layout_is_restored_each_column_or_row_attends_alone(grid):
    gh, gw = grid
    x = torch.randn(2, gh, gw, 8)
    for axis in ("height", "width"):
        axial = AxialAttention(8, 2, axis).eval()
        full = full_twin(axial)
        out = axial(x)
        assert out.shape == x.shape
        for j in range(gw if axis == "height" else gh):
            line = x[:, :, j] if axis == "height" else x[:, j]  # (B, Gh, D) or (B, Gw, D)
            got = out[:, :, j] if axis == "height" else out[:, j]
            torch.testing.assert_close(got, full(line), atol=1e-6, rtol=0)


def test_permuting_rows_and_columns_permutes_the_output():
    x = torch.randn(2, 4, 6, 16)
    rows, cols = torch.randperm(4), torch.randperm(6)
    for axis in ("height", "width"):
        axial = AxialAttention(16, 4, axis).eval()
        torch.testing.assert_close(
            axial(x[:, rows][:, :, cols]), axial(x)[:, rows][:, :, cols], atol=1e-6, rtol=0
        )


def test_forward_with_weights_gives_one_matrix_per_column_or_row():
    x = torch.randn(2, 3, 5, 16)
    height = AxialAttention(16, 4, "height").eval()
    out, weights = height.forward_with_weights(x)
    assert weights.shape == (2, 5, 4, 3, 3)  # (B, Gw, h, Gh, Gh)
    torch.testing.assert_close(out, height(x), atol=1e-6, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5, 4, 3))
    _, column_1 = full_twin(height).forward_with_weights(x[:, :, 1])
    torch.testing.assert_close(weights[:, 1], column_1, atol=1e-6, rtol=0)
    _, weights = AxialAttention(16, 4, "width").eval().forward_with_weights(x)
    assert weights.shape == (2, 3, 4, 5, 5)  # (B, Gh, h, Gw, Gw)


@pytest.mark.parametrize("axis", ["height", "width"])
def test_one_axial_layer_sees_only_its_column_or_row(axis):
    layer = AxialAttention(8, 2, axis).eval()
    dep = dependence(layer, torch.randn(1, 3, 4, 8))  # (Gh, Gw, Gh, Gw)
    assert torch.equal(dep.reshape(12, 12), axial_mask((3, 4), axis))


def test_height_then_width_sees_every_token():
    layers = nn.Sequential(AxialAttention(8, 2, "height"), AxialAttention(8, 2, "width")).eval()
    assert dependence(layers, torch.randn(1, 3, 4, 8)).all()
    block = AxialEncoderBlock(8, 2).eval()
    assert dependence(block, torch.randn(1, 3, 4, 8)).all()


def test_gradients_reach_every_parameter_of_the_block():
    block = AxialEncoderBlock(16, 4)
    x = torch.randn(2, 3, 4, 16, requires_grad=True)
    block(x).square().sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_block_is_three_pre_norm_residual_branches():
    block = AxialEncoderBlock(16, 4, mlp_ratio=2.0).eval()
    x = torch.randn(2, 3, 4, 16)
    h = x + block.attn_height(block.norm1(x))
    h = h + block.attn_width(block.norm2(h))
    h = h + block.mlp(block.norm3(h))
    torch.testing.assert_close(block(x), h)
    assert block.mlp.fc1.out_features == 32


def test_drop_path_only_in_training():
    block = AxialEncoderBlock(16, 4, drop_path=0.5)
    x = torch.randn(8, 2, 2, 16)
    block.eval()
    torch.testing.assert_close(block(x), block(x))
    block.train()
    assert not torch.allclose(block(x), block(x))


# --- AxialViT ----------------------------------------------------------------------------


def tiny(**fields) -> AxialViT:
    kw = dict(
        image_size=8, patch_size=2, in_channels=1, num_classes=3, dim=16, depth=2, num_heads=2
    )
    return AxialViT(**{**kw, **fields})


@pytest.mark.parametrize("pos_embed", ["learned", "sincos2d"])
def test_axial_vit_shapes_and_config(pos_embed):
    model = tiny(pos_embed=pos_embed, image_size=(8, 12))
    assert model.grid_size == (4, 6)
    assert model(torch.randn(5, 1, 8, 12)).shape == (5, 3)
    assert model.forward_features(torch.randn(5, 1, 8, 12)).shape == (5, 4, 6, 16)
    assert dataclasses.asdict(model.config)["pos_embed"] == pos_embed
    assert AxialViT(model.config).config == model.config
    assert len(model.blocks) == 2
    assert [round(b.drop_path1.p, 2) for b in tiny(depth=3, drop_path=0.2).blocks] == [0, 0.1, 0.2]


def test_axial_vit_is_mean_pooled_and_sees_the_whole_image():
    model = tiny(depth=1).eval()
    nn.init.normal_(model.head.weight)  # the head starts at zero
    images = torch.randn(1, 1, 8, 8, requires_grad=True)
    model(images)[0, 0].backward()
    assert (images.grad.abs() > 0).all()  # every pixel reaches the logit after one block
    x = model.forward_features(images)
    torch.testing.assert_close(model(images), model.head(model.fc_norm(x.mean(dim=(1, 2)))))


def test_no_weight_decay_names_the_position_table():
    model = tiny()
    assert model.no_weight_decay() == {"pos_embed.weight"}
    assert tiny(pos_embed="sincos2d").no_weight_decay() == set()
    decay, no_decay = param_groups(model, 0.05)
    assert any(p is model.pos_embed.weight for p in no_decay["params"])
    assert not any(p is model.pos_embed.weight for p in decay["params"])


def test_axial_vit_trains_with_fit_and_checkpoints(tmp_path):
    images = torch.randn(48, 1, 8, 8)
    labels = (images[:, 0, :4].mean(dim=(1, 2)) > 0).long()  # learnable: top half brighter
    data = TensorDataset(images, labels)
    model = tiny(num_classes=2)
    path = tmp_path / "axial.pt"
    history = fit(
        model,
        make_loader(data, 16, shuffle=True),
        make_loader(data, 48, shuffle=False),
        epochs=8,
        lr=3e-3,
        device="cpu",
        progress=False,
        checkpoint_path=path,
    )
    assert history["train_loss"][-1] < history["train_loss"][0]
    state = load_checkpoint(path, tiny(num_classes=2))
    assert state["config"] == dataclasses.asdict(model.config)
    with pytest.raises(ValueError, match="depth: checkpoint 2 vs model 3"):
        load_checkpoint(path, tiny(num_classes=2, depth=3))


# --- cost: FLOPs, memory, time -----------------------------------------------------------


@pytest.mark.parametrize("grid", [(4, 4), (3, 5), (8, 8)])
def test_attention_flops_match_torch_flop_counter(grid):
    gh, gw = grid
    dim = 16
    full = MultiHeadSelfAttention(dim, 4).eval()
    full.fused = False
    axial = nn.Sequential(AxialAttention(dim, 4, "height"), AxialAttention(dim, 4, "width"))
    for layer in axial:
        layer.fused = False  # the counter sees the explicit matmuls
    x = torch.randn(1, gh, gw, dim)
    for kind, run in (
        ("full", lambda: full(x.reshape(1, gh * gw, dim))),
        ("axial", lambda: axial.eval()(x)),
    ):
        with FlopCounterMode(display=False) as counter:
            run()
        assert attention_flops(grid, dim, kind) == counter.get_total_flops(), kind


def test_axial_is_cheaper_only_on_large_grids():
    assert attention_flops(2, 64, "axial") > attention_flops(2, 64, "full")
    assert attention_flops(64, 64, "axial") * 10 < attention_flops(64, 64, "full")


def test_peak_memory_counts_what_is_alive_at_once():
    assert peak_memory(lambda: torch.empty(256, 1024)) == 256 * 1024 * 4
    # a temporary freed before the next allocation does not add up
    assert peak_memory(lambda: [torch.empty(1000).sum() for _ in range(10)]) < 2 * 4000 + 64
    a = torch.randn(1000)
    assert peak_memory(lambda: a) == 0  # live before the call: not counted


def test_peak_memory_of_explicit_attention_holds_the_n_by_n_matrix():
    h, n, d = 2, 1024, 16
    q, k, v = (torch.randn(1, h, n, d) for _ in range(3))
    scores = h * n * n * 4  # bytes of one (1, h, N, N) float32 tensor
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the fused kernel has scratch buffers per thread
    try:
        with torch.inference_mode():
            explicit = peak_memory(lambda: (q @ k.transpose(-2, -1) / 4).softmax(-1) @ v)
            fused = peak_memory(lambda: F.scaled_dot_product_attention(q, k, v))
    finally:
        torch.set_num_threads(threads)
    assert 2 * scores <= explicit < 3 * scores  # scores and their softmax, alive together
    assert fused < scores / 4  # the fused kernel works in blocks


def test_median_seconds_runs_warmup_plus_repeats():
    calls = []
    seconds = median_seconds(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and 0 <= seconds < 1


# --- bad input ---------------------------------------------------------------------------


def test_bad_axis():
    with pytest.raises(ValueError, match=r"'height'.*'width'.*got 'depth'"):
        AxialAttention(16, 4, "depth")
    with pytest.raises(ValueError, match=r"got 'row'"):
        axial_mask(4, "row")


def test_bad_input_shapes():
    attn = AxialAttention(16, 4, "height")
    with pytest.raises(ValueError, match=r"\(B, Gh, Gw, D\).*3-D \(2, 9, 16\)"):
        attn(torch.randn(2, 9, 16))
    with pytest.raises(ValueError, match=r"5-D"):
        attn(torch.randn(1, 2, 3, 3, 16))
    with pytest.raises(ValueError, match=r"dim=16, got 12 \(x is \(2, 3, 3, 12\)\)"):
        attn(torch.randn(2, 3, 3, 12))
    with pytest.raises(ValueError, match=r"dim \(16\) must be divisible by num_heads \(3\)"):
        AxialAttention(16, 3, "width")
    with pytest.raises(ValueError, match=r"\(B, Gh, Gw, D\).*3-D"):
        AxialEncoderBlock(16, 4)(torch.randn(2, 9, 16))


def test_bad_config_and_images():
    with pytest.raises(
        ValueError, match=r"pos_embed must be one of \('learned', 'sincos2d'\), got 'rope'"
    ):
        AxialViTConfig(pos_embed="rope")
    with pytest.raises(ValueError, match=r"depth must be at least 1, got 0"):
        tiny(depth=0)
    with pytest.raises(ValueError, match=r"drop_path must be in \[0, 1\), got 1.0"):
        tiny(drop_path=1.0)
    with pytest.raises(ValueError, match=r"mlp_ratio must be positive, got 0"):
        AxialEncoderBlock(16, 4, mlp_ratio=0)  # checked by BlockOptions, as for EncoderBlock
    with pytest.raises(ValueError, match=r"at least one hidden unit, got hidden_dim=0"):
        AxialEncoderBlock(16, 4, mlp_ratio=0.01)
    with pytest.raises(TypeError, match=r"unknown AxialViTConfig fields \['pool'\]"):
        tiny(pool="cls")
    with pytest.raises(ValueError, match=r"expected image size \(8, 8\), got \(16, 16\)") as e:
        tiny()(torch.randn(1, 1, 16, 16))
    assert str(e.value).endswith("image_size=(16, 16)")  # no option it lacks is advised
    with pytest.raises(ValueError, match=r"kind must be 'full' or 'axial', got 'sparse'"):
        attention_flops(8, 64, "sparse")
    with pytest.raises(ValueError, match=r"repeats must be at least 1, got 0"):
        median_seconds(lambda: None, repeats=0)


# --- the exercise checkers ---------------------------------------------------------------


def test_axial_checker_accepts_correct_solutions(capsys):
    check_axial_attention(along_axis)

    def with_permute(x, attend, axis):  # another correct way: permute, reshape, and back
        B, gh, gw, D = x.shape
        if axis == "width":
            return attend(x.reshape(B * gh, gw, D)).reshape(B, gh, gw, D)
        cols = x.permute(0, 2, 1, 3).reshape(B * gw, gh, D)
        return attend(cols).reshape(B, gw, gh, D).permute(0, 2, 1, 3)

    check_axial_attention(with_permute)
    assert capsys.readouterr().out.count("Correct!") == 2


def _reshape_fold(x, attend, axis):
    B, gh, gw, D = x.shape
    n = gh if axis == "height" else gw
    return attend(x.reshape(-1, n, D)).reshape(x.shape)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (
            lambda x, attend, axis: along_axis(
                x, attend, "width" if axis == "height" else "height"
            ),
            "other axis",
        ),
        (_reshape_fold, "does not gather columns"),
        (lambda x, attend, axis: attend(x.flatten(1, 2)).reshape(x.shape), "whole grid"),
        (
            lambda x, attend, axis: rearrange(along_axis(x, attend, axis), "b h w d -> b w h d"),
            "layout",
        ),
        (lambda x, attend, axis: x, "differs"),
        (lambda x, attend, axis: x.tolist(), "must return a tensor"),
    ],
)
def test_axial_checker_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_axial_attention(wrong)


def test_scores_checker(capsys):
    check_axial_scores(lambda gh, gw: gh * gw * gh + gh * gw * gw)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda gh, gw: (gh * gw) ** 2, "N²"),
        (lambda gh, gw: gh * gw * gh, "height layer only"),
        (lambda gh, gw: gh * gw * gw, "width layer only"),
        (lambda gh, gw: 2 * (gh * gw) ** 1.5, "square grids only"),
        (lambda gh, gw: gh**2 + gw**2, "one column plus one row"),
        (lambda gh, gw: gh * gw * (gh + gw - 1), "scores itself in both layers"),
        (lambda gh, gw: 0, "expected 210"),
    ],
)
def test_scores_checker_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_axial_scores(wrong)


def mask_by_hand(grid_size, axis):
    """A correct answer written with loops over (row, column) pairs, as a list of lists."""
    gh, gw = grid_size
    where = [(n // gw, n % gw) for n in range(gh * gw)]  # row-major: token n = row·Gw + col
    same = 1 if axis == "height" else 0  # compare columns for 'height', rows for 'width'
    return [[int(a[same] == b[same]) for b in where] for a in where]


@pytest.mark.parametrize(
    "answer",
    [
        axial_mask,
        mask_by_hand,
        lambda grid_size, axis: torch.tensor(mask_by_hand(grid_size, axis), dtype=torch.float64),
        lambda grid_size, axis: axial_mask(grid_size, axis).numpy(),
    ],
    ids=["package", "list of 0/1", "float64", "numpy"],
)
def test_mask_checker_accepts_correct_answers(answer, capsys):
    check_axial_mask(answer)
    assert capsys.readouterr().out.startswith("Correct! check_axial_mask")


def column_major(grid_size, axis):
    """The right rule on tokens numbered down the columns: token n = column·Gh + row."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    line = n // gh if axis == "height" else n % gh  # the column, or the row, of token n
    return line[:, None] == line[None, :]


def other_axis(axis):
    return "width" if axis == "height" else "height"


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda g, axis: axial_mask(g, other_axis(axis)), "that is the 'width' mask"),
        (column_major, "numbered the tokens column-major"),
        (lambda g, axis: ~axial_mask(g, axis), "inverted"),
        (lambda g, axis: axial_mask(g, "height") | axial_mask(g, "width"), "union"),
        (lambda g, axis: torch.ones(g[0] * g[1], g[0] * g[1]), "full attention"),
        (
            lambda g, axis: torch.zeros(g[0] * g[1], g[0] * g[1]).masked_fill(
                ~axial_mask(g, axis), float("-inf")
            ),
            "additive bias",
        ),
        (lambda g, axis: axial_mask(g, axis).reshape(*g, *g), r"\(15, 15\).*row-major"),
        (lambda g, axis: axial_mask(g, axis) * 0.5, "True/False"),
        (lambda g, axis: None, "return a tensor, got NoneType"),
        (
            lambda g, axis: axial_mask(g, axis) & torch.eye(g[0] * g[1], dtype=torch.bool),
            r"30 of 225 entries are wrong, e.g. mask\[0, 5\] should be True.*\(1, 0\)",
        ),
    ],
    ids=[
        "swapped",
        "column-major",
        "inverted",
        "union",
        "full",
        "bias",
        "shape",
        "0.5",
        "None",
        "diagonal",
    ],
)
def test_mask_checker_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_axial_mask(wrong)


def test_along_axis_folds_columns_or_rows():
    x = torch.arange(2 * 3 * 4 * 1.0).reshape(2, 3, 4, 1)
    assert torch.equal(along_axis(x, lambda s: s.cumsum(1), "height"), x.cumsum(1))
    assert torch.equal(along_axis(x, lambda s: s.cumsum(1), "width"), x.cumsum(2))
    with pytest.raises(ValueError, match="axis must be 'height'"):
        along_axis(x, lambda s: s, "depth")


def test_fused_switch_reaches_the_inner_attention():
    axial = AxialAttention(16, 4, "width")
    axial.fused = False
    assert axial.attn.fused is False and axial.fused is False


def test_axial_models_share_the_vit_config_fields():
    from vit_tutorial.config import TransformerConfig, ViTConfig

    shared = {f.name for f in dataclasses.fields(TransformerConfig)}
    assert {f.name for f in dataclasses.fields(AxialViTConfig)} == shared
    assert shared < {f.name for f in dataclasses.fields(ViTConfig)}
    with pytest.raises(TypeError, match=r"got dict; rebuild it: AxialViTConfig\(\*\*config\)"):
        AxialViT({"dim": 16})


def test_empty_batch_passes_through():
    model = tiny()
    assert model(torch.zeros(0, 1, 8, 8)).shape == (0, model.config.num_classes)
    out, weights = AxialAttention(16, 2, "height").forward_with_weights(torch.zeros(0, 3, 5, 16))
    assert out.shape == (0, 3, 5, 16) and weights.shape == (0, 5, 2, 3, 3)
