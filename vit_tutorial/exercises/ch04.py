"""Checkers for chapter 4: the pre-norm encoder block, stochastic depth and LayerNorm, and
a prediction of how many parameters one block holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from vit_tutorial.encoder import EncoderBlock
from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    expect_tensor,
    grade_tensor,
    passed,
)
from vit_tutorial.exercises._predictions import grade_prediction

__all__ = ["check_drop_path", "check_block_forward", "check_layer_norm"]
__all__ += ["check_block_params_prediction"]


def _one_coin(
    fn: Callable[[Tensor, float, bool], Tensor], x: Tensor, p: float, dropped: Tensor
) -> bool:
    """Whether ``fn`` drops all samples or none, together, as one coin for the batch would.

    ``dropped`` says which samples a first call dropped. If it kept them all, a few more
    calls tell a batch-wide coin (which some call drops entirely) from a drop path that
    never drops (which the rate checks explain).
    """
    if dropped.all():
        return True
    if dropped.any():
        return False
    for _ in range(20):  # P(one coin keeps the batch 20 times) = 0.7²⁰ < 0.1%
        with torch.no_grad():
            again = (fn(x.clone(), p, True) == 0).flatten(1).all(1)
        if again.all():
            return True
        if again.any():
            return False
    return False


def _check_identity(fn: Callable[[Tensor, float, bool], Tensor], x: Tensor) -> None:
    """Check that ``fn`` returns ``x`` unchanged at evaluation, and in training with ``p = 0``."""
    for p in (0.0, 0.3):
        got = call_safely(fn, (x.clone(), p, False), f"training=False, p={p}")
        if not (isinstance(got, Tensor) and close(got, x, atol=0.0)):
            raise AssertionError(
                f"with training=False (p={p}) drop path must return x unchanged: "
                "it is only active in training, like dropout"
            )
    if not close(call_safely(fn, (x.clone(), 0.0, True), "training=True, p=0"), x, atol=0.0):
        raise AssertionError("with p=0 nothing may be dropped or rescaled")


def _dropped_samples(
    fn: Callable[[Tensor, float, bool], Tensor], x: Tensor, p: float, got: Tensor
) -> Tensor:
    """Which samples ``got = fn(x, p, True)`` dropped, a ``(B,)`` mask, once it is checked that
    each sample is dropped whole, by a coin of its own, at rate ``p``."""
    per_sample = (got == 0).flatten(1)  # (B, T·D): which numbers of each sample are zero
    if not (per_sample.all(1) | ~per_sample.any(1)).all():
        raise AssertionError(
            "some samples are only partly zeroed: that is dropout. Drop path tosses one coin per "
            "sample, a mask of shape (B, 1, 1), so a dropped sample skips the whole residual branch"
        )
    if _one_coin(fn, x, p, per_sample.all(1)):
        raise AssertionError(
            "the whole batch is dropped or kept together: you tossed one coin for the whole batch. "
            "Toss one per sample: a mask of shape (B, 1, 1), e.g. torch.rand(B, 1, 1) >= p"
        )
    rate = per_sample.all(1).float().mean().item()
    if abs(rate - (1 - p)) < 0.05:
        raise AssertionError(
            f"with p={p} you dropped {rate:.0%} of the samples: p is the "
            "probability of dropping, so the keep probability is 1 - p"
        )
    if abs(rate - p) > 0.05:
        raise AssertionError(
            f"with p={p} you dropped {rate:.0%} of the samples, expected about {p:.0%}"
        )
    return per_sample.all(1)


@checker
def check_drop_path(fn: Callable[[Tensor, float, bool], Tensor]) -> None:
    """Grade a learner's ``fn(x, p, training) -> Tensor``, stochastic depth.

    In training each sample is zeroed with probability ``p``, else scaled by ``1 / (1 - p)``;
    at evaluation, or with ``p = 0``, ``x`` comes back unchanged.

    Example:
        >>> from vit_tutorial.encoder import drop_path
        >>> check_drop_path(drop_path)
        Correct! check_drop_path: whole samples dropped at rate p, survivors scaled by
        1/(1-p), identity at eval.
    """
    generator = torch.Generator().manual_seed(0)
    # (B, T, D), all positive so that a zero means "dropped"
    x = torch.rand(2000, 4, 8, generator=generator) + 1.0
    _check_identity(fn, x)
    p = 0.3
    got = call_safely(fn, (x.clone(), p, True), f"training=True, p={p}")
    expect_tensor(
        got, x.shape, f"the output must have the input's shape {tuple(x.shape)}, got {{got}}"
    )
    kept = ~_dropped_samples(fn, x, p, got)
    if close(got[kept], x[kept]):
        raise AssertionError(
            f"the kept samples are not rescaled: divide them by 1 - p = {1 - p}, "
            "so that the expected output equals x and eval needs no change"
        )
    if not close(got[kept], x[kept] / (1 - p)):
        raise AssertionError(f"the kept samples must equal x / (1 - p) = x / {1 - p}")
    passed("whole samples dropped at rate p, survivors scaled by 1/(1-p), identity at eval.")


def _block_slips(block: EncoderBlock, x: Tensor) -> dict[str, Tensor]:
    """What the usual wrong forwards return."""
    ln1, ln2, attn, mlp = block.norm1, block.norm2, block.attn, block.mlp
    h = ln1(x)
    normed_stream = h + attn(h)
    normed_stream = ln2(normed_stream) + mlp(ln2(normed_stream))
    post = ln1(x + attn(x))
    a, y, z = attn(ln1(x)), x + attn(ln1(x)), x + mlp(ln2(x))
    return {
        "this is post-norm, LN(x + f(x)), the original Transformer; ViT is pre-norm: "
        "x + f(LN(x)), the LayerNorm inside the branch.": ln2(post + mlp(post)),
        "you added the branch to the normalised tokens (x = LN(x); x = x + f(x)); "
        "the residual stream must carry the un-normalised x: x = x + f(LN(x)).": normed_stream,
        "the residual connections are missing: each branch's output is added to "
        "its input, x = x + f(LN(x)).": mlp(ln2(attn(ln1(x)))),
        "the attention branch has no residual connection: write "
        "x = x + attn(norm1(x)), not x = attn(norm1(x)).": a + mlp(ln2(a)),
        "the MLP branch has no residual connection: write "
        "x = x + mlp(norm2(x)), not x = mlp(norm2(x)).": mlp(ln2(y)),
        "the MLP branch reused norm1; each branch has its own LayerNorm (norm2 for the MLP).": (
            y + mlp(ln1(y))
        ),
        "attention comes first, then the MLP.": z + attn(ln1(z)),
    }


@checker
def check_block_forward(fn: Callable[[EncoderBlock, Tensor], Tensor]) -> None:
    """Grade a learner's ``fn(block, x) -> Tensor``, the forward pass of a pre-norm block.

    With the parts of an :class:`~vit_tutorial.encoder.EncoderBlock`:
    ``x = x + attn(norm1(x))`` then ``x = x + mlp(norm2(x))``.

    Example:
        >>> check_block_forward(lambda block, x: block(x))
        Correct! check_block_forward: pre-norm block matches on 2 cases.
    """
    generator = torch.Generator().manual_seed(0)
    cases = [(2, 5, 16, 2), (3, 9, 32, 4)]  # (B, T, D, h)
    for B, T, D, h in cases:
        torch.manual_seed(0)  # @checker restores the learner's random state afterwards
        block = EncoderBlock(D, h).eval()
        with torch.no_grad():
            for norm in (block.norm1, block.norm2):  # non-trivial affine LayerNorms
                norm.weight.copy_(1 + 0.5 * torch.randn(D, generator=generator))
                norm.bias.copy_(0.5 * torch.randn(D, generator=generator))
            x = 2 * torch.randn(B, T, D, generator=generator) + 1
            want = block(x)
        grade_tensor(
            fn,
            (block, x),
            want,
            f"case B={B}, T={T}, D={D}",
            _block_slips,
            expected=f"fn must return a tensor of the input's shape {(B, T, D)}",
            otherwise="the output differs from x = x + attn(norm1(x)); x = x + mlp(norm2(x))",
        )
    passed(f"pre-norm block matches on {len(cases)} cases.")


_BIASED = "x.var(-1, unbiased=False) or ((x - mean)**2).mean(-1)"
_LAST_AXIS = "LayerNorm normalises each token over its D features, the last axis"


def _variance_slips(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> dict[str, Tensor]:
    """What the usual slips of a hand-written LayerNorm in its variance and ``eps`` return."""
    D = x.shape[-1]
    centred = x - x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)  # the right, biased, variance
    unbiased = x.var(-1, keepdim=True)  # divides by D - 1
    return {
        f"the variance divides by (D - 1) = {D - 1}, torch.var's default (unbiased); "
        f"LayerNorm uses the biased variance, which divides by D: "
        f"{_BIASED}": weight * centred / torch.sqrt(unbiased + eps) + bias,
        f"two slips: the variance divides by D - 1 (torch.std's default) instead of D, "
        f"and eps is added to the standard deviation instead of the variance; write "
        f"(x - mean)/sqrt(var + eps) with the biased variance, "
        f"{_BIASED}": weight * centred / (unbiased.sqrt() + eps) + bias,
        "eps is added outside the square root, to the standard deviation; it belongs "
        "inside, with the variance: (x - mean)/sqrt(var + eps). The two differ when a "
        "token's variance is as small as eps": weight * centred / (var.sqrt() + eps) + bias,
        **{
            f"you used eps={fixed:g} ({whose}), not the eps argument, eps={eps:g}": (
                F.layer_norm(x, (D,), weight, bias, fixed)
            )
            for fixed, whose in [(1e-5, "PyTorch's default"), (1e-6, "ViT's value")]
        },
        "the eps argument is not used: it keeps the division safe for a token of "
        "small variance, (x - mean)/sqrt(var + eps)": weight * centred / var.sqrt() + bias,
    }


def _axis_slips(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> dict[str, Tensor]:
    """What a LayerNorm over the wrong axes, or with the wrong affine part, returns."""

    def standardised(dims: tuple[int, ...]) -> Tensor:  # (x - mean)/sqrt(var + eps)
        mu, var = x.mean(dims, keepdim=True), x.var(dims, unbiased=False, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps)

    return {
        f"the statistics are taken over the tokens (axis -2); {_LAST_AXIS}: mean(-1), var(-1)": (
            weight * standardised((-2,)) + bias
        ),
        "the statistics are taken over all the tokens and features of a sequence, "
        f"(T, D) at once; {_LAST_AXIS}: mean(-1), var(-1)": weight * standardised((-2, -1)) + bias,
        "the statistics are taken over the first axis, the batch: that is batch "
        f"normalisation; {_LAST_AXIS}: mean(-1), var(-1)": weight * standardised((0,)) + bias,
        "weight and bias are not applied: weight·(x - mean)/sqrt(var + eps) + bias": (
            standardised((-1,))
        ),
        "weight and bias are swapped: the weight (γ) scales, the bias (β) shifts": (
            bias * standardised((-1,)) + weight
        ),
    }


@checker
def check_layer_norm(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> None:
    """Grade a learner's ``fn(x, weight, bias, eps) -> Tensor``, LayerNorm written by hand.

    The answer must equal ``F.layer_norm(x, (D,), weight, bias, eps)``, on tokens of variance
    close to ``eps``, spread-out tokens, and a ``(T, D)`` sequence with a large ``eps``.

    Example:
        >>> check_layer_norm(lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps))
        Correct! check_layer_norm: 3 cases, small variances included, match F.layer_norm.
    """
    generator = torch.Generator().manual_seed(0)
    # (shape, scale, offset, eps): tokens of variance 1e-6, as small as eps, first, so that
    # the eps slips show; then spread-out tokens, and a (T, D) sequence with a large eps
    cases = [((2, 4, 16), 1e-3, 0.0, 1e-6), ((2, 5, 8), 3.0, 1.0, 1e-6), ((6, 12), 1.0, 0.0, 0.25)]
    for shape, scale, offset, eps in cases:
        D = shape[-1]
        x = scale * torch.randn(shape, generator=generator) + offset
        weight = 1 + 0.5 * torch.randn(D, generator=generator)
        bias = 0.5 * torch.randn(D, generator=generator)
        what = f"x of shape {shape}, eps={eps:g}"
        grade_tensor(
            fn,
            (x, weight, bias, eps),
            F.layer_norm(x, (D,), weight, bias, eps),
            what,
            lambda *args: _variance_slips(*args) | _axis_slips(*args),
            expected=f"{what}: the output must have the input's shape, got {{got}}",
            otherwise="the output differs from F.layer_norm(x, (D,), weight, bias, eps); "
            "compute weight·(x - mean)/sqrt(var + eps) + bias per token, over the last axis",
        )
    passed("3 cases, small variances included, match F.layer_norm.")


@checker
def check_block_params_prediction(predicted_block_params: Any) -> None:
    """Grade a prediction: the parameters of ``EncoderBlock(dim=192, num_heads=3)``, ViT-Ti's.

    Exact, ``12D² + 13D`` (``mlp_ratio=4``, ``qkv_bias=True``); ±5% passes (``12D²`` does).

    Example:
        >>> check_block_params_prediction(12 * 192**2)
        Correct! check_block_params_prediction: you predicted 442,368 parameters;
        measured: 444,864 (EncoderBlock(192, 3): attention 4D² + 4D, MLP 8D² + 5D, two
        LayerNorms 2D each).
    """
    D, h = 192, 3
    with torch.device("meta"):  # shapes only
        actual = sum(p.numel() for p in EncoderBlock(dim=D, num_heads=h).parameters())
    attention, mlp = 4 * D * D + 4 * D, 8 * D * D + 5 * D
    slips = {
        "That is the attention alone (4D² + 4D): the MLP adds 8D² + 5D.": attention,
        "That is the MLP alone (D → 4D → D: 8D² + 5D): attention adds 4D² + 4D.": mlp,
        "q, k and v have a D×D matrix each, the output projection a fourth.": 10 * D * D,
        "The attention's output projection (D² + D) is missing.": 11 * D * D,
        "The MLP widens each token to rD = 4D: its two matrices hold 8D², not 2D².": 6 * D * D,
        "The heads split D (each of width D/h = 64): their number changes no weight.": (
            h * 4 * D * D + 8 * D * D
        ),
    }
    grade_prediction(
        "check_block_params_prediction",
        "predicted_block_params",
        predicted_block_params,
        actual,
        what="parameters",
        tolerance=0.05,
        slips=slips,
        source=f"EncoderBlock({D}, {h}): attention 4D² + 4D, MLP 8D² + 5D, two LayerNorms 2D each",
    )
