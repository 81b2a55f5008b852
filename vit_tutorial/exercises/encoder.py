"""Checkers for chapter 4: stochastic depth and the pre-norm encoder block."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from vit_tutorial.encoder import EncoderBlock
from vit_tutorial.exercises._common import call_safely, checker, close, passed

__all__ = ["check_drop_path", "check_block_forward"]


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
    per_sample = (got == 0).flatten(1)  # (B, N·D): which numbers of each sample are zero
    if not (per_sample.all(1) | ~per_sample.any(1)).all():
        raise AssertionError(
            "some samples are only partly zeroed: that is dropout. Drop path "
            "tosses one coin per sample, a mask of shape (B, 1, 1), so a dropped "
            "sample skips the whole residual branch"
        )
    if _one_coin(fn, x, p, per_sample.all(1)):
        raise AssertionError(
            "the whole batch is dropped or kept together: you tossed one coin "
            "for the whole batch. Toss one per sample: a mask of shape "
            "(B, 1, 1), e.g. torch.rand(B, 1, 1) >= p"
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

    In training, each sample (row of the batch) must be zeroed with probability ``p``
    and otherwise scaled by ``1 / (1 - p)``; at evaluation, or with ``p = 0``, ``x`` must
    come back unchanged.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> from vit_tutorial.encoder import drop_path
        >>> check_drop_path(drop_path)
        Correct! check_drop_path: whole samples dropped at rate p, survivors scaled by 1/(1-p), identity at eval.
    """
    generator = torch.Generator().manual_seed(0)
    # (B, N, D), all positive so that a zero means "dropped"
    x = torch.rand(2000, 4, 8, generator=generator) + 1.0
    _check_identity(fn, x)
    p = 0.3
    got = call_safely(fn, (x.clone(), p, True), f"training=True, p={p}")
    if not isinstance(got, Tensor) or got.shape != x.shape:
        shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
        raise AssertionError(
            f"the output must have the input's shape {tuple(x.shape)}, got {shape}"
        )
    kept = ~_dropped_samples(fn, x, p, got)
    if close(got[kept], x[kept]):
        raise AssertionError(
            f"the kept samples are not rescaled: divide them by 1 - p = {1 - p}, "
            "so that the expected output equals x and eval needs no change"
        )
    if not close(got[kept], x[kept] / (1 - p)):
        raise AssertionError(f"the kept samples must equal x / (1 - p) = x / {1 - p}")
    passed(
        "check_drop_path",
        "whole samples dropped at rate p, survivors scaled by 1/(1-p), identity at eval.",
    )


def _variants(block: EncoderBlock, x: Tensor) -> list[tuple[Tensor, str]]:
    """Outputs of the usual mistakes, each with its explanation."""
    ln1, ln2, attn, mlp = block.norm1, block.norm2, block.attn, block.mlp
    h = ln1(x)
    normed_stream = h + attn(h)
    normed_stream = ln2(normed_stream) + mlp(ln2(normed_stream))
    post = ln1(x + attn(x))
    post = ln2(post + mlp(post))
    no_residual = mlp(ln2(attn(ln1(x))))
    a = attn(ln1(x))
    no_attention_residual = a + mlp(ln2(a))
    no_mlp_residual = mlp(ln2(x + attn(ln1(x))))
    y = x + attn(ln1(x))
    shared = y + mlp(ln1(y))
    z = x + mlp(ln2(x))
    swapped = z + attn(ln1(z))
    return [
        (
            post,
            "this is post-norm, LN(x + f(x)), the original Transformer; ViT is pre-norm: "
            "x + f(LN(x)), the LayerNorm inside the branch",
        ),
        (
            normed_stream,
            "you added the branch to the normalised tokens (x = LN(x); x = x + f(x)); "
            "the residual stream must carry the un-normalised x: x = x + f(LN(x))",
        ),
        (
            no_residual,
            "the residual connections are missing: each branch's output is added to "
            "its input, x = x + f(LN(x))",
        ),
        (
            no_attention_residual,
            "the attention branch has no residual connection: write "
            "x = x + attn(norm1(x)), not x = attn(norm1(x))",
        ),
        (
            no_mlp_residual,
            "the MLP branch has no residual connection: write "
            "x = x + mlp(norm2(x)), not x = mlp(norm2(x))",
        ),
        (
            shared,
            "the MLP branch reused norm1; each branch has its own LayerNorm (norm2 for the MLP)",
        ),
        (swapped, "attention comes first, then the MLP"),
    ]


@checker
def check_block_forward(fn: Callable[[EncoderBlock, Tensor], Tensor]) -> None:
    """Grade a learner's ``fn(block, x) -> Tensor``, the forward pass of a pre-norm block.

    ``fn`` must use ``block.norm1``, ``block.attn``, ``block.norm2`` and ``block.mlp`` of an
    :class:`~vit_tutorial.encoder.EncoderBlock` to compute
    ``x = x + attn(norm1(x))`` then ``x = x + mlp(norm2(x))``.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_block_forward(lambda block, x: block(x))
        Correct! check_block_forward: pre-norm block matches on 2 cases.
    """
    generator = torch.Generator().manual_seed(0)
    cases = [(2, 5, 16, 2), (3, 9, 32, 4)]  # (B, N, D, h)
    for B, N, D, h in cases:
        torch.manual_seed(0)  # @checker restores the learner's random state afterwards
        block = EncoderBlock(D, h).eval()
        with torch.no_grad():
            for norm in (block.norm1, block.norm2):  # non-trivial affine LayerNorms
                norm.weight.copy_(1 + 0.5 * torch.randn(D, generator=generator))
                norm.bias.copy_(0.5 * torch.randn(D, generator=generator))
            x = 2 * torch.randn(B, N, D, generator=generator) + 1
            got = call_safely(fn, (block, x.clone()), f"case B={B}, N={N}, D={D}")
            if not isinstance(got, Tensor) or got.shape != x.shape:
                raise AssertionError(f"fn must return a tensor of the input's shape {(B, N, D)}")
            if close(got, block(x), atol=1e-5):
                continue
            for wrong, explanation in _variants(block, x):
                if close(got, wrong, atol=1e-5):
                    raise AssertionError(f"case B={B}, N={N}, D={D}: {explanation}.")
        raise AssertionError(
            f"case B={B}, N={N}, D={D}: the output differs from "
            "x = x + attn(norm1(x)); x = x + mlp(norm2(x))"
        )
    passed("check_block_forward", f"pre-norm block matches on {len(cases)} cases.")
