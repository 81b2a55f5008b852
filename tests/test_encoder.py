"""Tests for vit_tutorial/encoder.py and its exercise checkers."""

import collections

import pytest
import timm.models.vision_transformer as timm_vit
import torch
from torch import nn
from torchvision.models.vision_transformer import EncoderBlock as TorchvisionBlock

from vit_tutorial import attention, encoder
from vit_tutorial.encoder import (
    MLP,
    BlockOptions,
    DropPath,
    Encoder,
    EncoderBlock,
    PostNormBlock,
    SwiGLU,
    drop_path,
)
from vit_tutorial.exercises import check_block_forward, check_drop_path, check_layer_norm
from vit_tutorial.validate import trusted

from checker_messages import wrapped


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def randomise_norms(module):
    """LayerNorms start at γ=1, β=0; random values make comparisons meaningful."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)
    return module


# --- MLP -------------------------------------------------------------------------------------


def test_mlp_is_linear_gelu_linear():
    mlp = MLP(16, 64)
    x = torch.randn(2, 5, 16)
    expected = mlp.fc2(nn.functional.gelu(mlp.fc1(x)))
    torch.testing.assert_close(mlp(x), expected)
    assert mlp.fc1.weight.shape == (64, 16) and mlp.fc2.weight.shape == (16, 64)


def test_mlp_acts_on_each_token_independently():
    mlp = MLP(8, 32).eval()
    x = torch.randn(1, 6, 8)
    torch.testing.assert_close(mlp(x)[:, 2], mlp(x[:, 2:3])[:, 0])


# --- DropPath --------------------------------------------------------------------------------


def test_drop_path_is_identity_at_eval_and_with_p_zero():
    x = torch.randn(8, 4, 3)
    assert torch.equal(drop_path(x, 0.5, training=False), x)
    assert torch.equal(drop_path(x, 0.0, training=True), x)
    module = DropPath(0.5).eval()
    assert torch.equal(module(x), x)


def test_drop_path_drops_whole_samples_and_rescales():
    x = torch.rand(4000, 3, 5) + 1
    out = drop_path(x, 0.25, training=True)
    dropped = (out == 0).flatten(1)
    assert (dropped.all(1) | ~dropped.any(1)).all()  # all or nothing per sample
    assert abs(dropped.all(1).float().mean().item() - 0.25) < 0.03
    kept = ~dropped.all(1)
    torch.testing.assert_close(out[kept], x[kept] / 0.75)


def test_drop_path_keeps_the_expected_value():
    x = torch.ones(20000, 2)
    assert abs(drop_path(x, 0.3, training=True).mean().item() - 1.0) < 0.03


def test_drop_path_gradient_is_the_mask():
    x = torch.randn(64, 4, requires_grad=True)
    out = drop_path(x, 0.5, training=True)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() * 2)


def test_drop_path_rejects_bad_probability():
    with pytest.raises(ValueError, match=r"\[0, 1\), got 1.0"):
        DropPath(1.0)
    with pytest.raises(ValueError, match=r"got -0.1"):
        DropPath(-0.1)


# --- EncoderBlock ----------------------------------------------------------------------------


def copy_into_torch_layer(block, layer):
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(block.attn.qkv.weight)
        layer.self_attn.in_proj_bias.copy_(block.attn.qkv.bias)
        layer.self_attn.out_proj.load_state_dict(block.attn.proj.state_dict())
        layer.linear1.load_state_dict(block.mlp.fc1.state_dict())
        layer.linear2.load_state_dict(block.mlp.fc2.state_dict())
        layer.norm1.load_state_dict(block.norm1.state_dict())
        layer.norm2.load_state_dict(block.norm2.state_dict())


@pytest.mark.parametrize("norm_first", [True, False])
def test_block_equals_torch_transformer_encoder_layer(norm_first):
    block = randomise_norms(EncoderBlock(32, 4, mlp_ratio=2.0, norm_first=norm_first)).eval()
    layer = nn.TransformerEncoderLayer(
        32,
        4,
        dim_feedforward=64,
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=1e-6,
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    copy_into_torch_layer(block, layer)
    x = torch.randn(3, 7, 32)
    torch.testing.assert_close(block(x), layer(x), atol=1e-5, rtol=0)


def test_block_equals_timm_block():
    block = randomise_norms(EncoderBlock(48, 3)).eval()
    ref = timm_vit.Block(48, 3, mlp_ratio=4.0, qkv_bias=True).eval()
    ref.load_state_dict(block.state_dict())  # same names: norm1, attn.qkv, attn.proj, mlp.fc1...
    x = torch.randn(2, 9, 48)
    torch.testing.assert_close(block(x), ref(x), atol=1e-5, rtol=0)


def test_block_equals_torchvision_block():
    block = randomise_norms(EncoderBlock(32, 4)).eval()
    ref = TorchvisionBlock(4, 32, 128, 0.0, 0.0, norm_layer=lambda d: nn.LayerNorm(d, eps=1e-6))
    ref.eval()
    copy_into_torch_layer(block, _TorchvisionAdapter(ref))
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(block(x), ref(x), atol=1e-5, rtol=0)


class _TorchvisionAdapter:
    """torchvision's block under nn.TransformerEncoderLayer's attribute names."""

    def __init__(self, ref):
        self.self_attn, self.norm1, self.norm2 = ref.self_attention, ref.ln_1, ref.ln_2
        self.linear1, self.linear2 = ref.mlp[0], ref.mlp[3]


def test_block_returns_the_weights_of_its_attention():
    block = EncoderBlock(32, 4).eval()
    x = torch.randn(2, 6, 32)
    out, weights = block.forward_with_weights(x)
    torch.testing.assert_close(out, block(x), atol=1e-6, rtol=0)
    _, expected = block.attn.forward_with_weights(block.norm1(x))
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6))


def test_block_passes_attn_bias_through():
    block = EncoderBlock(16, 2).eval()
    x = torch.randn(1, 5, 16)
    bias = torch.zeros(5, 5)
    bias[:, 1:] = float("-inf")  # every query may look at token 0 only
    out, weights = block.forward_with_weights(x, attn_bias=bias)
    assert (weights[..., 0] == 1).all()
    assert not torch.allclose(out, block(x))
    torch.testing.assert_close(block(x, attn_bias=bias), out, atol=1e-6, rtol=0)


@pytest.mark.parametrize("norm_first", [True, False])
def test_fused_and_teaching_paths_agree_with_an_attention_bias(norm_first):
    block = randomise_norms(EncoderBlock(32, 4, mlp_ratio=2.0, norm_first=norm_first)).eval()
    x, bias = torch.randn(2, 7, 32), 2 * torch.randn(4, 7, 7)  # a bias per head
    fused = block(x, bias)
    assert not torch.allclose(fused, block(x), atol=1e-3)  # the bias reaches the attention
    out, weights = block.forward_with_weights(x, bias)
    torch.testing.assert_close(out, fused, atol=1e-5, rtol=0)
    _, expected = block.attn.forward_with_weights(block.norm1(x) if norm_first else x, bias)
    torch.testing.assert_close(weights, expected)
    block.attn.fused = False  # the explicit softmax inside forward itself
    torch.testing.assert_close(block(x, bias), fused, atol=1e-5, rtol=0)


def test_norm_first_false_is_a_post_norm_block():
    pre = EncoderBlock(32, 4)
    post = randomise_norms(EncoderBlock(32, 4, norm_first=False)).eval()
    assert type(pre) is EncoderBlock and type(post) is PostNormBlock
    assert isinstance(post, EncoderBlock)
    assert list(post.state_dict()) == list(pre.state_dict())  # timm's names, for interop
    x, bias = torch.randn(2, 6, 32), torch.randn(6, 6)
    h = post.norm1(x + post.attn(x, bias))  # LN(x + Attention(x))
    expected = post.norm2(h + post.mlp(h))  # LN(h + MLP(h))
    torch.testing.assert_close(post(x, bias), expected)
    assert not torch.allclose(post(x, bias), pre_norm(post, x, bias), atol=1e-2)


def test_post_norm_block_built_directly_and_trusted():
    torch.manual_seed(0)
    direct = PostNormBlock(32, 4, drop_path=0.1, mlp_ratio=2.0)
    torch.manual_seed(0)
    built = trusted(PostNormBlock, BlockOptions(32, 4, mlp_ratio=2.0), 0.1)
    assert type(direct) is type(built) is PostNormBlock and repr(direct) == repr(built)
    for (name, a), (_, b) in zip(direct.state_dict().items(), built.state_dict().items()):
        assert torch.equal(a, b), name
    torch.manual_seed(0)
    via_flag = EncoderBlock(32, 4, drop_path=0.1, mlp_ratio=2.0, norm_first=False)
    assert repr(via_flag) == repr(direct)
    assert all(torch.equal(via_flag.state_dict()[k], v) for k, v in direct.state_dict().items())


@pytest.fixture
def checked(monkeypatch):
    """A Counter of the names the encoder's and the attention's checks receive."""
    names = collections.Counter()
    for module in (encoder, attention):
        for check in ("check_int", "check_real", "check_bool"):
            original = getattr(module, check)

            def counting(name, *args, _check=original, **kwargs):
                names[name] += 1
                return _check(name, *args, **kwargs)

            monkeypatch.setattr(module, check, counting)
    return names


@pytest.mark.parametrize("norm_first", [True, False])
def test_a_block_checks_each_argument_once(checked, norm_first):
    EncoderBlock(32, 4, drop_path=0.1, norm_first=norm_first)
    assert checked["norm_first"] == checked["drop_path"] == checked["dim"] == 1
    assert max(checked.values()) == 1, dict(checked)


def test_blocks_built_from_checked_options_check_nothing(checked):
    options = BlockOptions(32, 4)
    assert checked  # the options check their fields, once each
    checked.clear()
    trusted(EncoderBlock, options, 0.1)
    trusted(PostNormBlock, options, 0.1)
    assert not checked, dict(checked)
    Encoder(32, depth=3, num_heads=4, drop_path=0.1)
    assert max(checked.values()) == 1 and "norm_first" not in checked, dict(checked)


@pytest.mark.parametrize("norm_first", [1, 0, None, "no"])
def test_norm_first_must_be_a_bool(norm_first):
    with pytest.raises(TypeError, match=f"norm_first must be True or False, got {norm_first!r}"):
        EncoderBlock(32, 4, norm_first=norm_first)


def test_block_gradients_reach_every_parameter():
    block = EncoderBlock(16, 2, drop_path=0.1)
    x = torch.randn(4, 5, 16, requires_grad=True)
    block(x).square().sum().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_block_dropout_and_drop_path_only_in_training():
    block = EncoderBlock(16, 2, dropout=0.3, attn_dropout=0.3, drop_path=0.3)
    x = torch.randn(4, 5, 16)
    block.eval()
    assert torch.equal(block(x), block(x))
    block.train()
    assert not torch.equal(block(x), block(x))


def test_block_hidden_width_and_bad_ratio():
    assert EncoderBlock(64, 4, mlp_ratio=2.5).mlp.fc1.out_features == 160
    with pytest.raises(ValueError, match="mlp_ratio must be positive, got 0"):
        EncoderBlock(64, 4, mlp_ratio=0)
    with pytest.raises(ValueError, match="at least one hidden unit, got hidden_dim=0"):
        EncoderBlock(64, 4, mlp_ratio=0.01)
    with pytest.raises(ValueError, match=r"dim \(64\) must be divisible by num_heads \(5\)"):
        EncoderBlock(64, 5)


# --- Encoder ---------------------------------------------------------------------------------


def test_encoder_drop_path_rises_linearly():
    encoder = Encoder(16, depth=5, num_heads=2, drop_path=0.4)
    rates = [b.drop_path1.p for b in encoder.blocks]
    assert rates == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert [b.drop_path2.p for b in encoder.blocks] == rates
    assert [b.drop_path1.p for b in Encoder(16, 1, 2, drop_path=0.4).blocks] == [0.0]


def test_encoder_is_the_blocks_in_order():
    encoder = Encoder(16, depth=3, num_heads=2).eval()
    x = torch.randn(2, 4, 16)
    y = x
    for block in encoder.blocks:
        y = block(y)
    torch.testing.assert_close(encoder(x), y)
    out, maps = encoder.forward_with_weights(x)
    torch.testing.assert_close(out, y, atol=1e-6, rtol=0)
    assert len(maps) == 3 and all(m.shape == (2, 2, 4, 4) for m in maps)


def test_encoder_shared_and_per_block_biases():
    encoder = Encoder(16, depth=2, num_heads=2).eval()
    x = torch.randn(1, 4, 16)
    bias = torch.randn(2, 4, 4)
    torch.testing.assert_close(encoder(x, bias), encoder(x, [bias, bias]))
    assert not torch.allclose(encoder(x, [bias, None]), encoder(x, bias))
    with pytest.raises(ValueError, match=r"one attention bias per block \(2\), got 3"):
        encoder(x, [bias] * 3)


def test_encoder_rejects_zero_depth():
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        Encoder(16, depth=0, num_heads=2)


# --- exercise checkers -----------------------------------------------------------------------


def test_check_drop_path_accepts_the_package_function(capsys):
    check_drop_path(drop_path)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (lambda x, p, t: nn.functional.dropout(x, p, t), "that is dropout"),
        (lambda x, p, t: x * (torch.rand(x.shape[0], 1, 1) > p) if t else x, "not rescaled"),
        (lambda x, p, t: drop_path(x, p, True), "training=False"),
        (lambda x, p, t: drop_path(x, 1 - p, t) if p else x, "keep probability is 1 - p"),
        (lambda x, p, t: drop_path(x, p, t)[:1] if t and p else x, "input's shape"),
    ],
)
def test_check_drop_path_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_drop_path(wrong)


def pre_norm(b, x, attn_bias=None):
    x = x + b.attn(b.norm1(x), attn_bias)
    return x + b.mlp(b.norm2(x))


def post_norm(b, x):
    x = b.norm1(x + b.attn(x))
    return b.norm2(x + b.mlp(x))


def normalised_stream(b, x):
    x = b.norm1(x)
    x = x + b.attn(x)
    x = b.norm2(x)
    return x + b.mlp(x)


def shared_norm(b, x):
    x = x + b.attn(b.norm1(x))
    return x + b.mlp(b.norm1(x))


def test_check_block_forward_accepts_a_correct_solution(capsys):
    check_block_forward(pre_norm)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (post_norm, "post-norm"),
        (normalised_stream, "normalised tokens"),
        (shared_norm, "reused norm1"),
        (lambda b, x: b.mlp(b.norm2(b.attn(b.norm1(x)))), "residual connections are missing"),
        (lambda b, x: x + b.attn(b.norm1(x)), "differs"),
        (lambda b, x: x[:, 0], "input's shape"),
    ],
)
def test_check_block_forward_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_block_forward(wrong)


def layer_norm_from(var=None, eps_outside=False, dims=-1, affine=True):
    """A hand-written LayerNorm; the defaults make the right one."""
    var = var or (lambda x, dims: x.var(dims, unbiased=False, keepdim=True))

    def norm(x, weight, bias, eps):
        centred = x - x.mean(dims, keepdim=True)
        std = var(x, dims).sqrt() + eps if eps_outside else (var(x, dims) + eps).sqrt()
        return weight * centred / std + bias if affine else centred / std

    return norm


def test_check_layer_norm_accepts_every_correct_answer(capsys):
    check_layer_norm(layer_norm_from())
    check_layer_norm(lambda x, w, b, eps: nn.functional.layer_norm(x, x.shape[-1:], w, b, eps))
    check_layer_norm(lambda x, w, b, eps: layer_norm_from()(x.double(), w, b, eps))

    def var_mean_rsqrt(x, weight, bias, eps):
        var, mean = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + eps) * weight + bias

    check_layer_norm(var_mean_rsqrt)
    assert capsys.readouterr().out.count("Correct!") == 4


def unbiased(x, dims):
    return x.var(dims, keepdim=True)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (layer_norm_from(var=unbiased), r"divides by \(D - 1\) = 15"),
        (layer_norm_from(var=unbiased, eps_outside=True), "two slips"),
        (layer_norm_from(eps_outside=True), "eps is added outside the square root"),
        (lambda x, w, b, eps: layer_norm_from()(x, w, b, 0.0), "eps argument is not used"),
        (lambda x, w, b, eps: layer_norm_from()(x, w, b, 1e-5), r"eps=1e-05 \(PyTorch's default\)"),
        (lambda x, w, b, eps: layer_norm_from()(x, w, b, 1e-6), r"eps=1e-06 \(ViT's value\)"),
        (layer_norm_from(dims=-2), r"over the tokens \(axis -2\)"),
        (layer_norm_from(dims=(-2, -1)), "all the tokens and features"),
        (layer_norm_from(dims=0), "batch normalisation"),
        (layer_norm_from(affine=False), "weight and bias are not applied"),
        (lambda x, w, b, eps: layer_norm_from()(x, b, w, eps), "weight and bias are swapped"),
        (lambda x, w, b, eps: layer_norm_from()(x, w, b, eps)[..., 0], "input's shape"),
        (lambda x, w, b, eps: 1.01 * layer_norm_from()(x, w, b, eps), "differs from F.layer_norm"),
        (layer_norm_from(dims=2), r"crashed on x of shape \(6, 12\).*IndexError"),
    ],
)
def test_check_layer_norm_explains_each_mistake(wrong, message):
    with pytest.raises(AssertionError, match=wrapped(message)):
        check_layer_norm(wrong)


def test_init_weights_is_timms_scheme():
    from vit_tutorial.encoder import init_weights

    torch.manual_seed(0)
    layer = nn.Linear(512, 512).apply(init_weights)
    assert layer.weight.abs().max() <= 0.04 and torch.equal(layer.bias, torch.zeros(512))
    assert abs(layer.weight.std().item() - 0.0176) < 1e-3  # 0.02 truncated at ±2σ
    norm = nn.LayerNorm(8)
    before = norm.weight.clone()
    norm.apply(init_weights)
    assert torch.equal(norm.weight, before)  # other modules are left alone


def test_drop_path_rates_rise_linearly():
    from vit_tutorial.encoder import drop_path_rates

    assert drop_path_rates(0.0, 3) == [0.0, 0.0, 0.0]
    assert [round(r, 6) for r in drop_path_rates(0.3, 4)] == [0.0, 0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        drop_path_rates(0.1, 0)


@pytest.mark.parametrize("p", [-0.5, 1.0, 1.5])
def test_drop_path_names_the_probability_it_was_given(p):
    with pytest.raises(ValueError, match=rf"in \[0, 1\), got {p}"):
        drop_path(torch.ones(2, 3), p, training=True)
    with pytest.raises(ValueError, match=rf"in \[0, 1\), got {p}"):
        DropPath(p)


def test_the_feed_forward_layers_and_drop_path_refuse_bad_arguments_by_name():
    for layer in (MLP, SwiGLU):
        with pytest.raises(TypeError, match="dropout must be a real number, got 'a'"):
            layer(8, 16, dropout="a")
    with pytest.raises(TypeError, match="training must be True or False, got 'yes'"):
        drop_path(torch.ones(2, 3), 0.5, training="yes")
