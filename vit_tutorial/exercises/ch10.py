"""Checkers for chapter 10: window partition, the shifted-window mask, a window's relative
index, and what window attention costs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor

from vit_tutorial.exercises._common import (
    as_mask,
    call_safely,
    checker,
    expect_tensor,
    grade_answer,
    grade_tensor,
    passed,
    shape_of,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.windows import relative_position_index, shifted_window_mask, window_partition

__all__ = ["check_window_partition", "check_shift_mask", "check_window_relative_index"]
__all__ += ["check_window_flops_prediction"]


def _partition_slips(x: Tensor, M: int) -> dict[str, Tensor]:
    """What the usual wrong partitions of the grid ``x`` ``(B, H, W, C)`` return."""
    C = x.shape[-1]
    pattern = "b (nh m1) (nw m2) c -> {}"
    return {
        "x.reshape(-1, M·M, C) cuts the row-major grid into runs of M·M consecutive "
        "tokens, pieces of rows, not windows. Split each axis into (windows, M), move the "
        "two window axes before the two in-window axes, then flatten: rearrange(x, "
        "'b (nh m1) (nw m2) c -> (b nh nw) (m1 m2) c'), or view, permute(0, 1, 3, 2, 4, "
        "5), reshape, as the official code does": x.reshape(-1, M * M, C),
        "your windows come column by column; window_reverse and the shift mask number "
        "them row-major, along the top row of windows first: "
        "(b nh nw), not (b nw nh)": rearrange(x, pattern.format("(b nw nh) (m1 m2) c"), m1=M, m2=M),
        "inside each window your tokens are column-major; the relative index numbers "
        "them row-major, token i at row i // M and column i % M: "
        "(m1 m2), not (m2 m1)": rearrange(x, pattern.format("(b nh nw) (m2 m1) c"), m1=M, m2=M),
        "the batch must be the outer axis: window w of image b is row b·nW + w, "
        "(b nh nw), so that a mask of nW windows "
        "repeats for every image": rearrange(x, pattern.format("(nh nw b) (m1 m2) c"), m1=M, m2=M),
    }


def _partition_shape(what: str, want: Tensor, got: Any) -> str:
    """Why ``got`` does not have the shape of the windows ``want``."""
    hint = ""
    if isinstance(got, Tensor) and got.numel() == want.numel() and got.dim() != 3:
        hint = (
            "; flatten each window's M×M tokens into one axis of M·M, and fold the "
            "images and their windows into one batch axis"
        )
    return f"{what}: expected (B·nW, M·M, C) = {tuple(want.shape)}, got {shape_of(got)}{hint}"


@checker
def check_window_partition(fn: Callable[[Tensor, int], Tensor]) -> None:
    """Grade ``fn(x, window_size) -> windows``: a grid ``(B, H, W, C)`` cut into M×M windows.

    ``(B·nW, M·M, C)``, image by image, windows and their tokens row-major, as
    :func:`~vit_tutorial.windows.window_partition` and the official code order them.

    Example:
        >>> check_window_partition(window_partition)
        Correct! check_window_partition: windows row-major, tokens row-major in each,
        on 3 grids, square and not.
    """
    generator = torch.Generator().manual_seed(0)
    cases = [(2, 4, 6, 3, 2), (1, 6, 6, 2, 3), (3, 8, 4, 5, 4)]  # B, H, W, C, M
    for B, H, W, C, M in cases:
        x = torch.randn(B, H, W, C, generator=generator)
        what, want = f"x of shape {(B, H, W, C)}, window_size={M}", window_partition(x, M)
        grade_tensor(
            fn,
            (x, M),
            want,
            what,
            _partition_slips,
            not_tensor=f"{what}: return a tensor, got {{got}}",
            expected=functools.partial(_partition_shape, what, want),
            otherwise="the shape is right but the tokens are not where window_partition "
            f"puts them; window 0 must hold x[0, :{M}, :{M}], row by row",
            atol=0.0,
        )
    passed(f"windows row-major, tokens row-major in each, on {len(cases)} grids, square and not.")


def _regions(height: int, width: int, M: int, first: tuple[int, int]) -> Tensor:
    """Region labels ``(nW, M²)`` when the rows ``< first[0]`` and columns ``< first[1]`` are
    taken for the wrapped ones (unrolled); ``first = (H - s, W - s)`` with ``>=`` is right."""
    rows = (torch.arange(height) < first[0]).long()
    cols = (torch.arange(width) < first[1]).long()
    grid = (2 * rows[:, None] + cols[None, :]).view(1, height, width, 1)
    return window_partition(grid, M)[..., 0]


def _mask_slips(height: int, width: int, M: int, s: int) -> dict[str, Tensor]:
    """Masks ``(nW, M², M²)`` of the usual mistakes, each with its explanation."""
    want = shifted_window_mask(height, width, M, s)
    first = _regions(height, width, M, (s, s))
    return {
        "every entry is True: without a mask, a window at the bottom or the right attends across "
        "the wrap, between tokens from opposite edges of the image": torch.ones_like(want),
        "the mask is inverted: True must mean 'may attend', for two tokens of the same "
        "region (the official code puts -100 where the labels differ)": ~want,
        f"you separated the first {s} rows and columns: that is where the wrapped "
        f"tokens were before the roll, or where a roll the other way, by +s, puts "
        f"them. After torch.roll(x, (-s, -s)), up and left as Swin rolls, they are "
        f"the last s: rows and columns from H - s on": first[:, :, None] == first[:, None, :],
        "you separated the wrapped rows only; the columns wrap too": (
            shifted_window_mask(height, width, M, (s, 0))
        ),
        "you separated the wrapped columns only; the rows wrap too": (
            shifted_window_mask(height, width, M, (0, s))
        ),
    }


def _mask_shape(what: str, shape: tuple[int, ...], got: Tensor) -> str:
    """Why ``got`` is no mask of ``shape``, one per window."""
    hint = ""
    if got.dim() == 2 and got.shape[0] == shape[0] * shape[1]:
        hint = (
            "; that is one mask over the whole grid: return one per window, as the "
            "windows of window_partition come"
        )
    return f"{what}: the mask must have shape (nW, M², M²) = {shape}, got {tuple(got.shape)}{hint}"


def _wrong_entries(want: Tensor, got: Tensor) -> str:
    """How many entries of the mask ``got`` are wrong, and the first of them."""
    w, i, j = (got != want).nonzero()[0].tolist()
    return (
        f"{int((got != want).sum())} entries are wrong, e.g. window {w}, query "
        f"{i}, key {j} should be {bool(want[w, i, j])}"
    )


_ADDITIVE = (
    lambda got: (got < 0).any(),
    "that is an additive mask (0 where allowed, -100 or -inf where not), as the official "
    "code adds it; return a boolean mask, True where two tokens may attend",
)


@checker
def check_shift_mask(fn: Callable[[int, int, int, int], Tensor]) -> None:
    """Grade ``fn(height, width, window_size, shift_size) -> mask``: SW-MSA's mask.

    ``(nW, M², M²)``, True where two tokens of a window of the grid rolled by ``(-s, -s)``
    lie in the same region of the official code's ``img_mask``; booleans, or 1/0.

    Example:
        >>> check_shift_mask(shifted_window_mask)
        Correct! check_shift_mask: the regions of the wrapped rows and columns are kept
        apart on 3 grids.
    """
    cases = [(8, 12, 4, 2), (8, 8, 4, 1), (6, 9, 3, 1)]  # H, W, M, s
    for H, W, M, s in cases:
        what = f"height={H}, width={W}, window_size={M}, shift_size={s}"
        want = shifted_window_mask(H, W, M, s)
        shape = tuple(want.shape)
        got = call_safely(fn, (H, W, M, s), what)
        grade_answer(
            as_mask(got, shape, what, functools.partial(_mask_shape, what, shape), _ADDITIVE),
            want,
            what,
            functools.partial(_mask_slips, H, W, M, s),
            otherwise=functools.partial(_wrong_entries, want),
            atol=0.0,
        )
    passed(f"the regions of the wrapped rows and columns are kept apart on {len(cases)} grids.")


def _offsets(M: int) -> tuple[Tensor, Tensor]:
    """Row and column offsets, query minus key, of the M² row-major tokens: ``(M², M²)``."""
    r, c = torch.arange(M * M) // M, torch.arange(M * M) % M
    return r[:, None] - r[None, :], c[:, None] - c[None, :]


def _index_slips(M: int) -> dict[str, Tensor]:
    """The indices of the usual mistakes."""
    dr, dc = _offsets(M)
    n = torch.arange(M * M)
    return {
        f"you multiplied the row by 2M + 1 = {2 * M + 1}; a shifted column offset takes 2M - 1 "
        f"= {2 * M - 1} values (from 0 to 2M - 2), and the "
        "table has (2M - 1)² rows": (dr + M - 1) * (2 * M + 1) + dc + M - 1,
        f"you multiplied the row by M = {M}; a shifted column offset takes 2M - 1 = "
        f"{2 * M - 1} values, so offsets that differ share an entry": (dr + M - 1) * M + dc + M - 1,
        "you forgot to add M - 1 to the offsets: they run from -(M - 1) to M - 1, and "
        "a negative index reads the table from its end": dr * (2 * M - 1) + dc,
        "that is key minus query: a valid one-to-one index, but the official code and "
        "timm compute query minus key (coords[:, :, None] - coords[:, None, :]), and a "
        "pretrained table is laid out for it": (-dr + M - 1) * (2 * M - 1) - dc + M - 1,
        "you swapped rows and columns: the row offset is the one multiplied by 2M - 1": (
            (dc + M - 1) * (2 * M - 1) + dr + M - 1
        ),
        "that is the offset n - m of the flattened tokens, which mixes rows and "
        "columns; use the 2D offset (row, column)": n[:, None] - n[None, :] + M * M - 1,
    }


def _wrong_entry(M: int, want: Tensor, got: Tensor) -> str:
    """The first wrong entry of the index ``got``, and where its query and key are."""
    i, j = (got != want).nonzero()[0].tolist()
    return (
        f"index[{i}, {j}] should be {int(want[i, j])}, got {int(got[i, j])}: "
        f"query {i} is at (row, column) {(i // M, i % M)}, key {j} at {(j // M, j % M)}"
    )


@checker
def check_window_relative_index(fn: Callable[[int], Tensor]) -> None:
    """Grade ``fn(window_size) -> index``: Swin's relative position index of one window.

    ``index`` ``(M², M²)``, integers: for query ``i`` and key ``j`` of an M×M window (tokens
    row-major), the row of the ``(2M-1)²`` table of their offset ``(Δr, Δc)`` = query - key:
    ``(Δr + M - 1)(2M - 1) + (Δc + M - 1)``, as the official code and timm compute it.

    Example:
        >>> check_window_relative_index(relative_position_index)
        Correct! check_window_relative_index: one row of the (2M - 1)² table per
        offset, laid out as the official code's, for M = 2, 3 and 7.
    """
    for M in (3, 2, 7):  # the first tells the mistakes apart
        what, want = f"window_size={M}", relative_position_index(M)
        got = expect_tensor(
            call_safely(fn, (M,), what),
            tuple(want.shape),
            f"{what}: expected (M², M²) = {tuple(want.shape)}, one row per query and "
            "one column per key, got {got}",
            not_tensor=f"{what}: return a tensor, got {{got}}",
        )
        if got.is_floating_point() or got.dtype == torch.bool:
            raise AssertionError(
                f"{what}: an index must hold integers (torch.long) to index the table, "
                f"got {got.dtype}"
            )
        grade_answer(
            got.long(),
            want,
            what,
            functools.partial(_index_slips, M),
            otherwise=functools.partial(_wrong_entry, M, want),
            atol=0.0,
        )
    passed(
        "one row of the (2M - 1)² table per offset, laid out as the official code's, "
        "for M = 2, 3 and 7."
    )


def _fraction(side: int, C: int, M: int) -> float:
    """Ω(W-MSA) / Ω(MSA) by the paper's equations 1 and 2 on a ``side × side`` grid."""
    hw = side * side
    return (4 * hw * C**2 + 2 * M**2 * hw * C) / (4 * hw * C**2 + 2 * hw**2 * C)


@checker
def check_window_flops_prediction(predicted_fraction: Any) -> None:
    """Grade a prediction: W-MSA's FLOPs as a fraction of global MSA's, Swin-T's first stage.

    By the paper's equations 1 and 2, ``(4C + 2M²) / (4C + 2hw)`` = 482 / 6656; ±10% passes.

    Example:
        >>> check_window_flops_prediction(0.07)
        Correct! check_window_flops_prediction: you predicted 0.07 of global MSA's
        FLOPs; measured: 0.0724 (equations 1 and 2, 56×56, C = 96, M = 7).
    """
    side, C, M = 56, 96, 7
    hw, actual = side * side, _fraction(side, C, M)
    slips = {
        f"you compared the scores alone, M²/hw = {M * M}/{hw}: the projections, "
        f"4hwC², are the same in both and dominate W-MSA at C = {C}": M * M / hw,
        "that is MSA / W-MSA; the question asks for the fraction W-MSA / MSA": 1 / actual,
        f"that is the fraction at C = 64, the width of the chapter's table; Swin-T's "
        f"first stage has C = {C}": _fraction(side, 64, M),
        "you wrote M for M²: a window holds M² = 49 tokens, and each scores all of them": (
            (4 * C + 2 * M) / (4 * C + 2 * hw)
        ),
        f"you put the side of the grid, {side}, for hw; the grid holds hw = {hw} tokens": (
            (4 * C + 2 * M * M) / (4 * C + 2 * side)
        ),
        "you counted the projections alone (4hwC² in both, a fraction of 1); the "
        "scores add 2(hw)²C to global MSA and only 2M²hwC to W-MSA": 1.0,
    }
    grade_prediction(
        "check_window_flops_prediction",
        "predicted_fraction",
        predicted_fraction,
        actual,
        what="of global MSA's FLOPs",
        tolerance=0.1,
        slips=slips,
        source=f"equations 1 and 2, {side}×{side}, C = {C}, M = {M}",
    )
