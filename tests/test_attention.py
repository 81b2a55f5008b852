"""Tests for vit_tutorial/attention.py and its exercise checker."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vit_tutorial.attention import (
    MultiHeadSelfAttention,
    attention_weights,
    scaled_dot_product_attention,
)
from vit_tutorial.exercises import check_attention, check_masked_attention, check_stable_softmax
from vit_tutorial.exercises.ch01 import _multi_head

from checker_messages import wrapped


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def qkv(*shape):
    return torch.randn(*shape), torch.randn(*shape), torch.randn(*shape)


# --- the explicit function ---------------------------------------------------------------


def test_explicit_equals_torch_sdpa_without_mask():
    q, k, v = qkv(2, 3, 7, 16)
    out, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=0)


def test_explicit_equals_torch_sdpa_with_boolean_mask():
    q, k, v = qkv(2, 3, 7, 16)
    mask = torch.rand(7, 7) > 0.4
    mask.fill_diagonal_(True)  # every query may attend somewhere
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    assert (weights[..., ~mask] == 0).all()


def test_explicit_equals_torch_sdpa_with_additive_mask():
    q, k, v = qkv(2, 3, 7, 16)
    bias = torch.randn(3, 7, 7)
    out, _ = scaled_dot_product_attention(q, k, v, bias)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


def test_explicit_handles_cross_attention_shapes():
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 4, 5) and weights.shape == (2, 4, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=0)


def test_scale_is_one_over_sqrt_head_width():
    q, k = torch.randn(5, 32), torch.randn(5, 32)
    expected = (q @ k.T / math.sqrt(32)).softmax(-1)
    torch.testing.assert_close(attention_weights(q, k), expected)


def test_attention_rows_sum_to_one():
    q, k, v = qkv(2, 4, 9, 8)
    _, weights = scaled_dot_product_attention(q, k, v, torch.randn(9, 9))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 9))
    attn = MultiHeadSelfAttention(32, 4)
    _, weights = attn.forward_with_weights(torch.randn(3, 9, 32))
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 9))


def test_explicit_rejects_mismatched_shapes_and_mask_dtype():
    with pytest.raises(ValueError, match=r"same head width d.*\(4, 8\).*\(4, 6\)"):
        attention_weights(torch.randn(4, 8), torch.randn(4, 6))
    with pytest.raises(ValueError, match="same number of tokens"):
        scaled_dot_product_attention(torch.randn(4, 8), torch.randn(4, 8), torch.randn(5, 8))
    with pytest.raises(TypeError, match="torch.int64"):
        attention_weights(torch.randn(4, 8), torch.randn(4, 8), torch.ones(4, 4, dtype=torch.long))


# --- the module ---------------------------------------------------------------------------


def test_module_equals_torch_multihead_attention():
    dim, heads = 64, 8
    ours = MultiHeadSelfAttention(dim, heads).eval()
    ref = nn.MultiheadAttention(dim, heads, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.proj.weight)
        ref.out_proj.bias.copy_(ours.proj.bias)
    x = torch.randn(3, 11, dim)
    out, weights = ours.forward_with_weights(x)
    ref_out, ref_weights = ref(x, x, x, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours(x), ref_out, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias_shape", [None, (11, 11), (4, 11, 11), (3, 4, 11, 11)])
def test_fused_and_explicit_paths_agree(bias_shape):
    attn = MultiHeadSelfAttention(32, 4).eval()
    x = torch.randn(3, 11, 32)
    bias = None if bias_shape is None else torch.randn(bias_shape)
    fused = attn(x, attn_bias=bias)
    explicit, _ = attn.forward_with_weights(x, attn_bias=bias)
    attn.fused = False
    unfused = attn(x, attn_bias=bias)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=0)
    torch.testing.assert_close(unfused, explicit, atol=0, rtol=0)


def test_attn_bias_changes_the_output():
    attn = MultiHeadSelfAttention(16, 2).eval()
    x = torch.randn(1, 5, 16)
    blocked = torch.zeros(5, 5)
    blocked[:, 1:] = float("-inf")  # every token may only look at token 0
    out, weights = attn.forward_with_weights(x, attn_bias=blocked)
    assert (weights[..., 0] == 1).all()
    assert not torch.allclose(out, attn(x))


def test_permuting_tokens_permutes_the_output():
    attn = MultiHeadSelfAttention(32, 4).eval()
    x = torch.randn(2, 10, 32)
    perm = torch.randperm(10)
    torch.testing.assert_close(attn(x[:, perm]), attn(x)[:, perm], atol=1e-6, rtol=0)


def test_gradients_reach_every_parameter():
    attn = MultiHeadSelfAttention(32, 4, qkv_bias=True)
    x = torch.randn(2, 6, 32, requires_grad=True)
    attn(x).square().sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0


def test_no_qkv_bias():
    attn = MultiHeadSelfAttention(32, 4, qkv_bias=False)
    assert attn.qkv.bias is None
    assert sum(p.numel() for p in attn.parameters()) == 32 * 96 + 32 * 32 + 32


def test_rope_hook_is_applied_to_queries_and_keys():
    attn = MultiHeadSelfAttention(16, 2).eval()
    x = torch.randn(1, 4, 16)
    torch.testing.assert_close(attn(x, rope=lambda t: t), attn(x))
    # Negating both q and k leaves every q·k unchanged; scaling both changes the scores.
    torch.testing.assert_close(attn(x, rope=lambda t: -t), attn(x), atol=1e-6, rtol=0)
    assert not torch.allclose(attn(x, rope=lambda t: 3 * t), attn(x))


def test_dropout_only_in_training():
    attn = MultiHeadSelfAttention(32, 4, attn_dropout=0.5, proj_dropout=0.5)
    x = torch.randn(2, 6, 32)
    attn.eval()
    torch.testing.assert_close(attn(x), attn(x))
    attn.train()
    assert not torch.allclose(attn(x), attn(x))


# --- bad input ------------------------------------------------------------------------------


def test_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"dim \(100\) must be divisible by num_heads \(3\)"):
        MultiHeadSelfAttention(100, 3)
    with pytest.raises(ValueError, match=r"num_heads must be at least 1, got 0"):
        MultiHeadSelfAttention(64, 0)


def test_input_not_3d():
    attn = MultiHeadSelfAttention(32, 4)
    with pytest.raises(ValueError, match=r"\(B, T, D\).*2-D \(6, 32\)"):
        attn(torch.randn(6, 32))
    with pytest.raises(ValueError, match=r"4-D"):
        attn(torch.randn(1, 2, 6, 32))


def test_wrong_last_dimension():
    attn = MultiHeadSelfAttention(32, 4)
    with pytest.raises(ValueError, match=r"dim=32, got 48"):
        attn(torch.randn(2, 6, 48))


# --- the exercise checker ----------------------------------------------------------------


def reference(q, k, v, h):
    return _multi_head(q, k, v, h, scale=None)


def test_checker_accepts_a_correct_solution(capsys):
    check_attention(reference)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda q, k, v, h: _multi_head(q, k, v, h, scale=1 / math.sqrt(q.shape[-1])), "√D"),
        (lambda q, k, v, h: _multi_head(q, k, v, h, scale=1.0), "not scaled"),
        (lambda q, k, v, h: _multi_head(q, k, v, h, scale=None, softmax_dim=-2), "wrong axis"),
        (lambda q, k, v, h: q, "differs"),
        (lambda q, k, v, h: q[:, 0], "must have shape"),
    ],
)
def test_checker_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_attention(wrong)


# --- the checker of masked attention ---------------------------------------------------------


def explicit_masked(q, k, v, mask):
    """A learner's answer: -inf on the blocked scores, and nan rows (no key at all) made 0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.nan_to_num(weights) @ v


@pytest.mark.parametrize(
    "answer",
    [
        explicit_masked,
        lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        lambda q, k, v, mask: scaled_dot_product_attention(q, k, v, mask)[0],
        # Zeroing after the softmax is right when the weights are renormalised.
        lambda q, k, v, mask: (
            torch.nan_to_num(
                (w := (q @ k.mT / math.sqrt(q.shape[-1])).softmax(-1) * mask)
                / w.sum(-1, keepdim=True)
            )
            @ v
        ),
    ],
    ids=["masked_fill and nan_to_num", "torch SDPA", "the package", "renormalised"],
)
def test_masked_attention_checker_accepts_correct_answers(answer, capsys):
    check_masked_attention(answer)
    assert capsys.readouterr().out.startswith("Correct! check_masked_attention")


def test_masked_attention_checker_reports_a_wrong_shape_and_a_nan_it_cannot_name():
    with pytest.raises(AssertionError, match=wrapped(r"must have shape \(2, 5, 8\), got \(2, 5\)")):
        check_masked_attention(lambda q, k, v, mask: q.sum(-1))
    with pytest.raises(AssertionError, match=wrapped("has nan or inf")):
        check_masked_attention(lambda q, k, v, mask: q * float("nan"))


# --- the checker of the stable softmax -----------------------------------------------------


def subtract_max(x, dim):
    e = (x - x.max(dim, keepdim=True).values).exp()
    return e / e.sum(dim, keepdim=True)


@pytest.mark.parametrize(
    "answer",
    [
        subtract_max,
        torch.softmax,
        lambda x, dim: (x - torch.logsumexp(x, dim, keepdim=True)).exp(),
        lambda x, dim: torch.softmax(x, dim).half(),
        lambda x, dim: subtract_max(x.double(), dim),
    ],
    ids=["max subtracted", "torch.softmax", "logsumexp", "float16 output", "float64"],
)
def test_stable_softmax_checker_accepts_correct_answers(answer, capsys):
    check_stable_softmax(answer)
    assert capsys.readouterr().out.startswith("Correct! check_stable_softmax")


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda x, dim: x.exp() / x.exp().sum(dim, keepdim=True), r"near \+1000.*nan or inf"),
        (lambda x, dim: torch.softmax(x, 0), "normalised along dim=0, not dim=-1"),
        (lambda x, dim: torch.softmax(x, dim) + 1e-3, "differs from the softmax"),
        (lambda x, dim: torch.softmax(x, dim)[..., :1], "output must have shape"),
    ],
)
def test_stable_softmax_checker_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_stable_softmax(wrong)


def test_fully_masked_query_gives_zeros_on_both_paths():
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    for blocked in (torch.ones(5, 5, dtype=torch.bool), torch.zeros(5, 5)):
        if blocked.dtype == torch.bool:
            blocked[1] = False  # query 1 may attend to nothing
        else:
            blocked[1] = float("-inf")
        fused = attn(x, attn_bias=blocked)
        explicit, weights = attn.forward_with_weights(x, attn_bias=blocked)
        assert torch.isfinite(explicit).all()
        assert torch.equal(weights[:, :, 1], torch.zeros(2, 2, 5))
        torch.testing.assert_close(explicit, fused, atol=1e-6, rtol=0)


def test_float16_large_scores_do_not_overflow():
    torch.manual_seed(0)
    q = k = v = (torch.randn(1, 1, 4, 64) * 40).half()  # q·k reaches ~1e5 > fp16 max
    assert torch.isinf(q @ k.transpose(-2, -1)).any()  # scaling after the product overflows
    out, _ = scaled_dot_product_attention(q, k, v)
    fused = F.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), fused.float(), atol=2e-2, rtol=0)


@pytest.mark.parametrize(
    "mask, error",
    [
        (torch.ones(4, 4, dtype=torch.long), TypeError),
        (torch.ones(3, 3, dtype=torch.bool), ValueError),
        (torch.zeros(2, 5, 4, 4), ValueError),
        ([[True]], TypeError),
    ],
)
def test_bad_masks_are_refused_on_both_paths(mask, error):
    attn = MultiHeadSelfAttention(8, 2)
    x = torch.randn(2, 4, 8)
    with pytest.raises(error, match="mask"):
        attn(x, attn_bias=mask)
    with pytest.raises(error, match="mask"):
        attn.forward_with_weights(x, attn_bias=mask)


def test_forward_and_forward_with_weights_agree_and_fused_switch():
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)
    fused = attn(x)
    explicit, _ = attn.forward_with_weights(x)
    attn.fused = False
    torch.testing.assert_close(attn(x), explicit, atol=0, rtol=0)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=0)
