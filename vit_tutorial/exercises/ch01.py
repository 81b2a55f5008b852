"""Checkers for chapter 1: multi-head attention, masked attention, a stable softmax, and a
prediction of what the attention weights of a ViT-B/16 at 384×384 take in memory."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor

from vit_tutorial.attention import scaled_dot_product_attention
from vit_tutorial.exercises._common import checker, close, grade_tensor, passed
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.patches import patch_grid
from vit_tutorial.vit import PRESETS

__all__ = ["check_attention", "check_attention_memory_prediction", "check_masked_attention"]
__all__ += ["check_stable_softmax"]


def _multi_head(
    q: Tensor, k: Tensor, v: Tensor, num_heads: int, scale: float | None, softmax_dim: int = -1
) -> Tensor:
    """Split (B, T, D) into heads, attend with ``scale`` (None = 1/sqrt(d)), merge."""
    q, k, v = (rearrange(t, "b t (h d) -> b h t d", h=num_heads) for t in (q, k, v))
    if scale is None and softmax_dim == -1:
        out, _ = scaled_dot_product_attention(q, k, v)
    else:
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        out = (q @ k.transpose(-2, -1) * scale).softmax(dim=softmax_dim) @ v
    return rearrange(out, "b h t d -> b t (h d)")


def _slips(q: Tensor, k: Tensor, v: Tensor, num_heads: int) -> dict[str, Tensor]:
    """What the usual mistakes return on ``(B, T, D)`` inputs."""
    D, h = q.shape[-1], num_heads
    d = D // h
    return {
        f"you scaled by √D = √{D} (the model width) instead of √d = √{d}, the width of one "
        f"head (D / num_heads = {D} / {h}); each head is a separate "
        "attention of width d.": _multi_head(q, k, v, h, scale=1 / math.sqrt(D)),
        f"you multiplied the scores by √d = √{d} instead of dividing by it: the scale "
        f"is 1/√d, softmax(Q Kᵀ / √d) V.": _multi_head(q, k, v, h, scale=math.sqrt(d)),
        f"the scores are not scaled: divide Q Kᵀ by √d = √{d} before the softmax, or the "
        f"softmax saturates as d grows.": _multi_head(q, k, v, h, scale=1.0),
        "the softmax runs over the wrong axis: each query's row of scores (the last "
        "axis, over keys) must sum to 1, "
        "not each key's column.": _multi_head(q, k, v, h, None, softmax_dim=-2),
    }


@checker
def check_attention(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> None:
    """Grade a learner's ``fn(q, k, v, num_heads) -> out`` on ``(B, T, D)`` tensors.

    ``softmax(Q Kᵀ / √d) V`` in each of ``num_heads`` heads of width ``d = D // num_heads``,
    the heads merged back to ``(B, T, D)``.

    Example:
        >>> check_attention(lambda q, k, v, h: _multi_head(q, k, v, h, scale=None))
        Correct! check_attention: matches the reference on 4 cases (1 to 8 heads).
    """
    cases = [(2, 5, 8, 1), (2, 7, 16, 4), (1, 9, 32, 8), (3, 4, 12, 3)]  # (B, T, D, h)
    generator = torch.Generator().manual_seed(0)
    for B, T, D, h in cases:
        q, k, v = (3 * torch.randn(B, T, D, generator=generator) for _ in range(3))
        grade_tensor(
            fn,
            (q, k, v, h),
            _multi_head(q, k, v, h, None),
            f"case B={B}, T={T}, D={D}, num_heads={h}",
            _slips,
            not_tensor="fn must return a tensor, got {got}",
            expected=f"with q, k, v of shape {(B, T, D)} and num_heads={h}, the output must "
            f"have shape {(B, T, D)}, got {{got}}; did you merge the heads back?",
            otherwise="output differs from softmax(Q Kᵀ / √d) V by up to {diff}; check the "
            "head split 'b t (h d) -> b h t d' and the merge",
        )
    passed(f"matches the reference on {len(cases)} cases (1 to 8 heads).")


def _random_mask(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """A boolean mask ``(..., T, T)``: every query sees itself and misses at least one key.

    So the mask, its transpose and its inverse all leave every query at least one key, and
    each mistake below has a well-defined output to compare with.
    """
    mask = torch.rand(shape, generator=generator) > 0.5
    T = shape[-1]
    eye = torch.eye(T, dtype=torch.bool)
    mask = mask | eye
    full = mask.all(dim=-1)  # (..., T): queries that see every key
    other = (torch.arange(T) + 1) % T  # for query i, block key i + 1
    blocked = full.unsqueeze(-1) & (torch.arange(T) == other.unsqueeze(-1))  # (..., T, T)
    return mask & ~blocked


def _masked_slips(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> dict[str, Any]:
    """What the usual mistakes of masked attention return."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, T, T)
    return {
        "the mask is inverted: True means 'may attend' (as in PyTorch's "
        "F.scaled_dot_product_attention), so fill the scores with -inf where the mask "
        "is False (~mask).": scaled_dot_product_attention(q, k, v, ~mask)[0],
        "you masked after the softmax: zeroing the blocked weights leaves each query's "
        "weights summing to less than 1. Block the scores before the softmax, with -inf, "
        "so that the softmax shares the whole weight "
        "among the allowed keys.": scores.softmax(-1).masked_fill(~mask, 0.0) @ v,
        "you set the blocked scores to 0: exp(0) = 1, so a blocked key still gets as much "
        "weight as a key of score 0. Fill them with "
        "float('-inf') (exp(-inf) = 0).": scores.masked_fill(~mask, 0.0).softmax(-1) @ v,
        "you added the boolean mask to the scores as numbers (0 or 1): that nudges the "
        "allowed keys but blocks nothing; fill the "
        "blocked scores with -inf.": (scores + mask.to(scores.dtype)).softmax(-1) @ v,
        "the mask is transposed: mask[..., i, j] says whether query i (a row) may attend "
        "to key j (a column).": scaled_dot_product_attention(q, k, v, mask.transpose(-2, -1))[0],
        f"the scores are not scaled: divide Q Kᵀ by √d = √{q.shape[-1]} before masking.": (
            (scores * math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf")).softmax(-1) @ v
        ),
        "the output has nan or inf, yet every query here may attend to at least one key; "
        "block with -inf only where the mask is False": lambda got: not torch.isfinite(got).all(),
    }


def _check_fully_masked_row(fn: Callable, generator: torch.Generator) -> None:
    """The rule for a query that may attend to no key: zero weights, so an output of 0."""
    q, k, v = (torch.randn(2, 5, 8, generator=generator) for _ in range(3))
    mask = _random_mask((5, 5), generator)
    mask[1] = False  # query 1 may attend to no key
    case = "case B=2, T=5, d=8, query 1 may attend to no key"
    want = scaled_dot_product_attention(q, k, v, mask)[0]  # row 1 is 0
    rule = (
        "this book's rule (the package's, and PyTorch's fused kernel's) is that such a "
        "query gets zero weights, so its output is 0: e.g. turn its nan weights into 0 "
        "with torch.nan_to_num before multiplying by V"
    )

    def others_right(got: Tensor) -> bool:  # every row but query 1's
        return close(
            torch.cat([got[:, :1], got[:, 2:]], 1), torch.cat([want[:, :1], want[:, 2:]], 1)
        )

    slips = {
        f"its output is nan, the softmax of a row of -inf (0/0); {rule}.": (
            lambda got: others_right(got) and got[:, 1].double().isnan().any()
        ),
        "its output is the plain mean of the values, because every blocked score got the "
        "same finite value (a large negative number such as torch.finfo(dtype).min), and a "
        f"softmax of equal scores is uniform; {rule}.": (
            lambda got: others_right(got) and close(got[:, 1].double(), v.mean(dim=1))
        ),
        f"its output should be 0; {rule}.": others_right,
    }
    grade_tensor(
        fn,
        (q, k, v, mask),
        want,
        case,
        slips,
        not_tensor=f"{case}: fn must return a tensor, got {{got}}",
        expected=f"{case}: the output must have shape (2, 5, 8), got {{got}}",
        otherwise="the output differs from the reference, also for the queries that do see "
        f"keys; {rule}.",
    )


@checker
def check_masked_attention(fn: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]) -> None:
    """Grade ``fn(q, k, v, mask) -> out``: one head of attention with a boolean mask.

    ``q``, ``k``, ``v`` are ``(B, T, d)``; ``mask`` ``(T, T)`` or ``(B, T, T)`` is True where
    query i may attend to key j; a query that may attend to no key outputs 0.

    Example:
        >>> check_masked_attention(lambda q, k, v, mask: scaled_dot_product_attention(
        ...     q, k, v, mask)[0])
        Correct! check_masked_attention: matches the reference on 4 cases, a query that
        sees no key included.
    """
    cases = [(2, 5, 8, (5, 5)), (3, 7, 4, (3, 7, 7)), (1, 6, 16, (6, 6))]  # B, T, d, mask
    generator = torch.Generator().manual_seed(0)
    for B, T, d, mask_shape in cases:
        q, k, v = (2 * torch.randn(B, T, d, generator=generator) for _ in range(3))
        mask = _random_mask(mask_shape, generator)
        case = f"case B={B}, T={T}, d={d}, mask of shape {mask_shape}"
        grade_tensor(
            fn,
            (q, k, v, mask),
            scaled_dot_product_attention(q, k, v, mask)[0],
            case,
            _masked_slips,
            not_tensor=f"{case}: fn must return a tensor, got {{got}}",
            expected=f"{case}: the output must have shape {(B, T, d)}, got {{got}}",
            otherwise="output differs from softmax(Q Kᵀ / √d, blocked scores at -inf) V by up "
            "to {diff}",
        )
    _check_fully_masked_row(fn, generator)
    passed(f"matches the reference on {len(cases) + 1} cases, a query that sees no key included.")


# Float32 rounding of scores near 1000 (an ulp is 6e-5) reaches 1e-4 in a correct answer
# (one through logsumexp, say); a float16 output rounds by up to 2.4e-4.
_SOFTMAX_ATOL = 5e-4


def _softmax_cases(generator: torch.Generator) -> list[tuple[str, Tensor, int]]:
    """``(what, x, dim)``: ordinary scores first, then the ones a naive softmax fails on."""
    mixed = torch.randn(6, 2, generator=generator)
    mixed[:, 0] += 500  # one column near +500, the other near -500
    mixed[:, 1] -= 500
    masked = torch.randn(4, 6, generator=generator)
    masked[torch.tensor([0, 0, 2, 3]), torch.tensor([1, 4, 0, 5])] = float("-inf")
    return [
        ("small scores (4, 6), dim=-1", torch.randn(4, 6, generator=generator), -1),
        ("scores (3, 4, 5), dim=0", 2 * torch.randn(3, 4, 5, generator=generator), 0),
        ("scores (2, 5, 3), dim=1", 2 * torch.randn(2, 5, 3, generator=generator), 1),
        ("large scores, near +1000, dim=-1", 1000 + 3 * torch.randn(3, 8, generator=generator), -1),
        (
            "very negative scores, near -1000, dim=-1",
            3 * torch.randn(3, 8, generator=generator) - 1000,
            -1,
        ),
        ("columns near +500 and -500, dim=0", mixed, 0),
        ("scores with some -inf (masked keys), dim=-1", masked, -1),
    ]


def _softmax_slips(x: Tensor, dim: int) -> dict[str, Any]:
    """What the usual wrong softmaxes return, or a test that recognises them."""
    shifted = (x.double() - x.double().max()).exp()  # one max for the whole tensor
    one_max = shifted / shifted.sum(dim, keepdim=True)
    return {
        **{
            f"you normalised along dim={other}, not dim={dim}: the slices along dim "
            f"must sum to 1.": x.double().softmax(other)
            for other in range(x.dim())
            if other != dim % x.dim()
        },
        "you subtracted one maximum for the whole tensor: in a slice far below it "
        "every exp underflows to 0, and 0/0 = nan. Subtract the maximum of each "
        "slice along dim, x.max(dim, keepdim=True).values.": lambda got: (
            not torch.isfinite(got).all() and torch.allclose(got.double(), one_max, equal_nan=True)
        ),
        "your output has nan or inf: exp overflows for scores above about 88 in float32 "
        "(709 in float64), and underflows to 0 for very negative ones, so exp(x) / sum "
        "gives inf/inf or 0/0. Subtract the maximum along dim first: softmax(x) = "
        "softmax(x - max), and then the largest exp is "
        "exp(0) = 1.": lambda got: not torch.isfinite(got).all(),
    }


@checker
def check_stable_softmax(fn: Callable[[Tensor, int], Tensor]) -> None:
    """Grade ``fn(x, dim) -> softmax(x, dim)``, which must not overflow on large scores.

    The cases include scores near ±1000, slices at very different levels and ``-inf`` entries.

    Example:
        >>> check_stable_softmax(torch.softmax)
        Correct! check_stable_softmax: matches torch.softmax on 7 cases, scores near ±1000
        and -inf included.
    """
    cases = _softmax_cases(torch.Generator().manual_seed(0))
    for what, x, dim in cases:
        case = f"case {what}"
        grade_tensor(
            fn,
            (x, dim),
            x.double().softmax(dim),
            case,
            _softmax_slips,
            not_tensor=f"{case}: fn must return a tensor, got {{got}}",
            expected=f"{case}: the output must have shape {tuple(x.shape)}, got {{got}}",
            otherwise="the output differs from the softmax by up to {diff}; compute "
            "exp(x - max) / sum, both the max and the sum along dim with keepdim=True.",
            atol=_SOFTMAX_ATOL,
        )
    passed(f"matches torch.softmax on {len(cases)} cases, scores near ±1000 and -inf included.")


def _weights_mib(image_size: int, heads: bool = True, class_token: bool = True) -> float:
    """MiB of one layer's float32 attention weights ``(1, h, T, T)`` of ViT-B/16 at
    ``image_size``; ``heads`` or ``class_token`` False leave that factor out (a slip)."""
    config = dataclasses.replace(PRESETS["vit_base_patch16_224"], image_size=image_size)
    gh, gw = patch_grid(config.image_size, config.patch_size)
    tokens = gh * gw + int(class_token and config.class_token)
    float32_bytes = torch.empty((), dtype=torch.float32).element_size()
    return (config.num_heads if heads else 1) * tokens**2 * float32_bytes / 2**20


@checker
def check_attention_memory_prediction(predicted_mib: Any) -> None:
    """Grade a prediction: the MiB of one layer's attention weights, ViT-B/16 at 384×384.

    An exact count: a float32 ``(1, h, T, T)``, ``h = 12``, ``T = 24² + 1 = 577``; ±10% passes.

    Example:
        >>> check_attention_memory_prediction(15)
        Correct! check_attention_memory_prediction: you predicted 15 MiB; measured:
        15.2 (12 heads · 577² float32 entries).
    """
    actual, at_224 = _weights_mib(384), _weights_mib(224)
    h, p = PRESETS["vit_base_patch16_224"].num_heads, PRESETS["vit_base_patch16_224"].patch_size
    tokens = {size: patch_grid(size, p)[0] ** 2 + 1 for size in (224, 384)}
    growth = tokens[384] / tokens[224]
    slips = {
        f"you left out the heads: each of the {h} heads has its own T × T weights, so the "
        f"tensor is (1, {h}, T, T)": _weights_mib(384, heads=False),
        f"you scaled the 224×224 size ({at_224:.2f} MiB) with the number of tokens "
        f"(×{growth:.2f}); the weights are a T × T matrix, so they grow with the "
        f"square: ×{growth**2:.2f}": at_224 * growth,
        "you counted 2 bytes per entry (float16 or bfloat16); the question is about "
        "float32, 4 bytes": actual / 2,
        "that is two T × T tensors, the scaled scores and the weights, which the explicit "
        "path holds at once; the question asks for the weights alone": 2 * actual,
        "you counted bits: a float32 entry takes 4 bytes, not 32": actual * 8,
    }
    grade_prediction(
        "check_attention_memory_prediction",
        "predicted_mib",
        predicted_mib,
        actual,
        what="MiB",
        tolerance=0.1,
        slips=slips,
        source=f"{h} heads · {tokens[384]}² float32 entries",
    )
