"""Checker for chapter 1: multi-head scaled dot-product attention."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from einops import rearrange
from torch import Tensor

from vit_tutorial.attention import scaled_dot_product_attention
from vit_tutorial.exercises._common import call_safely, checker, close, passed

__all__ = ["check_attention"]


def _multi_head(
    q: Tensor, k: Tensor, v: Tensor, num_heads: int, scale: float | None, softmax_dim: int = -1
) -> Tensor:
    """Split (B, N, D) into heads, attend with ``scale`` (None = 1/sqrt(d)), merge."""
    q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=num_heads) for t in (q, k, v))
    if scale is None and softmax_dim == -1:
        out, _ = scaled_dot_product_attention(q, k, v)
    else:
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        out = (q @ k.transpose(-2, -1) * scale).softmax(dim=softmax_dim) @ v
    return rearrange(out, "b h n d -> b n (h d)")


def _mistakes(q: Tensor, k: Tensor, v: Tensor, num_heads: int) -> list[tuple[Tensor, str]]:
    """Outputs of the usual mistakes on ``(B, N, D)`` inputs, each with its explanation."""
    D, h = q.shape[-1], num_heads
    d = D // h
    return [
        (
            _multi_head(q, k, v, h, scale=1 / math.sqrt(D)),
            f"you scaled by √D = √{D} (the model width) instead of √d = √{d}, the width of "
            f"one head (D / num_heads = {D} / {h}); each head is a separate attention of width d",
        ),
        (
            _multi_head(q, k, v, h, scale=math.sqrt(d)),
            f"you multiplied the scores by √d = √{d} instead of dividing by it: the scale "
            f"is 1/√d, softmax(Q Kᵀ / √d) V",
        ),
        (
            _multi_head(q, k, v, h, scale=1.0),
            f"the scores are not scaled: divide Q Kᵀ by √d = √{d} before the softmax, or the "
            f"softmax saturates as d grows",
        ),
        (
            _multi_head(q, k, v, h, scale=None, softmax_dim=-2),
            "the softmax runs over the wrong axis: each query's row of scores (the last "
            "axis, over keys) must sum to 1, not each key's column",
        ),
    ]


@checker
def check_attention(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> None:
    """Grade a learner's ``fn(q, k, v, num_heads) -> out`` on ``(B, N, D)`` tensors.

    The function must split the width D into ``num_heads`` heads of width
    ``d = D // num_heads``, apply ``softmax(Q Kᵀ / √d) V`` in each head, and merge the
    heads back to ``(B, N, D)``.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> from vit_tutorial.exercises.attention import _multi_head
        >>> check_attention(lambda q, k, v, h: _multi_head(q, k, v, h, scale=None))
        Correct! check_attention: matches the reference on 4 cases (1 to 8 heads).
    """
    cases = [(2, 5, 8, 1), (2, 7, 16, 4), (1, 9, 32, 8), (3, 4, 12, 3)]  # (B, N, D, h)
    generator = torch.Generator().manual_seed(0)
    for B, N, D, h in cases:
        q, k, v = (3 * torch.randn(B, N, D, generator=generator) for _ in range(3))
        case = f"case B={B}, N={N}, D={D}, num_heads={h}"
        got = call_safely(fn, (q.clone(), k.clone(), v.clone(), h), case)
        if not isinstance(got, Tensor):
            raise AssertionError(f"fn must return a tensor, got {type(got).__name__}")
        if got.shape != (B, N, D):
            raise AssertionError(
                f"with q, k, v of shape {(B, N, D)} and num_heads={h}, the output must have "
                f"shape {(B, N, D)}, got {tuple(got.shape)}; did you merge the heads back?"
            )
        want = _multi_head(q, k, v, h, scale=None)
        if close(got, want):
            continue
        for wrong, explanation in _mistakes(q, k, v, h):
            if close(got, wrong):
                raise AssertionError(f"{case}: {explanation}.")
        diff = (got - want).abs().max().item()
        raise AssertionError(
            f"{case}: output differs from softmax(Q Kᵀ / √d) V "
            f"by up to {diff:.3g}; check the head split 'b n (h d) -> b h n d' and the merge"
        )
    passed("check_attention", f"matches the reference on {len(cases)} cases (1 to 8 heads).")
