"""Checkers for chapter 7: axial attention, its mask, and what it costs."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import along_axis, attention_flops, axial_mask
from vit_tutorial.exercises._common import (
    as_mask,
    call_safely,
    checker,
    diagnose,
    expect_number,
    grade_answer,
    passed,
)
from vit_tutorial.exercises._predictions import grade_prediction

__all__ = ["check_axial_attention", "check_axial_flops_prediction", "check_axial_mask"]
__all__ += ["check_axial_scores"]

Attend = Callable[[Tensor], Tensor]


def _axial_slips(x: Tensor, attend: Attend, axis: str) -> dict[str, Tensor]:
    """What the usual wrong folds return on the grid ``x`` of shape ``(B, Gh, Gw, D)``."""
    B, gh, gw, D = x.shape
    line = "column" if axis == "height" else "row"
    with torch.no_grad():
        other = along_axis(x, attend, "width" if axis == "height" else "height")
        folded_by_reshape = attend(x.reshape(-1, gh, D)).reshape(x.shape)
        full = attend(x.reshape(B, gh * gw, D)).reshape(x.shape)
    reshaped = (
        f"x.reshape(B·Gw, Gh, D) does not gather columns: in memory the grid is "
        f"row-major, so reshape cuts it into runs of {gh} consecutive tokens of a row. "
        f"Move the width axis next to the batch first: rearrange(x, 'b gh gw d -> "
        f"(b gw) gh d'), or x.transpose(1, 2).reshape(...)"
    )
    return {
        f"you attended along the other axis; 'height' means each token attends "
        f"to the tokens above and below it (its column), 'width' to its row; here each "
        f"token must see its {line}": other,
        **({reshaped: folded_by_reshape} if axis == "height" else {}),
        "every token attended to the whole grid; axial attention attends along one axis only": full,
    }


@checker
def check_axial_attention(fn: Callable[[Tensor, Attend, str], Tensor]) -> None:
    """Grade a learner's ``fn(x, attend, axis) -> out`` on grids ``x`` of shape ``(B, Gh, Gw, D)``.

    ``fn`` applies ``attend`` (``(B', T, D) -> (B', T, D)``) along the columns (``'height'``)
    or the rows (``'width'``) and returns the result in the layout of ``x``.

    Example:
        >>> check_axial_attention(along_axis)
        Correct! check_axial_attention: matches the reference on 4 grids, square and not.
    """
    with torch.random.fork_rng():  # fixed weights, the learner's random state untouched
        torch.manual_seed(0)
        attend = MultiHeadSelfAttention(8, 2).eval()
    generator = torch.Generator().manual_seed(0)
    cases = [((3, 5), "height"), ((3, 5), "width"), ((4, 4), "height"), ((4, 4), "width")]
    for (gh, gw), axis in cases:
        x = torch.randn(2, gh, gw, 8, generator=generator)  # (B, Gh, Gw, D)
        with torch.no_grad():
            got = fn(x.clone(), attend, axis)
            want = along_axis(x, attend, axis)
        case = f"grid {gh}×{gw}, axis={axis!r}"
        grade_answer(
            got,
            want,
            case,
            functools.partial(_axial_slips, x, attend, axis),
            not_tensor="fn must return a tensor, got {got}",
            expected=f"{case}: the output must keep the input's layout {tuple(x.shape)} = (B, "
            "Gh, Gw, D), got {got}; unfold the columns or rows back onto the grid",
            otherwise="the output differs from the reference by up to {diff}; check that the "
            "fold and the unfold are inverse patterns (same order of b and the folded axis)",
        )
    passed(f"matches the reference on {len(cases)} grids, square and not.")


def _score_slips(gh: int, gw: int) -> list[tuple[str, Any]]:
    """Tests that recognise the usual wrong counts of the scores on a ``Gh × Gw`` grid."""
    n = gh * gw
    slips = {
        "that is N², the cost of full attention: in the height layer each of the N "
        "tokens scores only the Gh tokens of its column, in the width layer only "
        "the Gw tokens of its row": n * n,
        "you counted the height layer only; add the width layer's N·Gw scores": n * gh,
        "you counted the width layer only; add the height layer's N·Gh scores": n * gw,
        "2·N·√N holds for square grids only; count N·Gh + N·Gw": 2 * n * math.sqrt(n),
        "that is one column plus one row; every column and every row "
        "attends, N·Gh + N·Gw in all": gh * gh + gw * gw,
        "that counts the distinct keys a token reaches; but each token "
        "scores itself in both layers, so the layers compute N·(Gh + Gw)": n * (gh + gw - 1),
    }
    return [(why, functools.partial(_within_half, count)) for why, count in slips.items()]


def _within_half(count: float, got: float) -> bool:
    return abs(got - count) < 0.5


@checker
def check_axial_scores(fn: Callable[[int, int], int]) -> None:
    """Grade ``fn(gh, gw) -> int``: the attention scores one axial layer computes.

    One axial layer is a height layer and a width layer. The answer counts the
    (query, key) scores of both, for one image and one head, on a ``Gh × Gw`` grid.

    Example:
        >>> check_axial_scores(lambda gh, gw: gh * gw * (gh + gw))
        Correct! check_axial_scores: N·(Gh + Gw) scores, against N² for full attention.
    """
    for gh, gw in [(3, 7), (4, 4), (16, 9), (1, 10)]:  # the first case tells mistakes apart
        n = gh * gw
        want, case = n * (gh + gw), f"grid {gh}×{gw} (N = {n})"
        got = expect_number(fn(gh, gw), case)
        if got == want:
            continue
        if why := diagnose(got, _score_slips(gh, gw), ""):
            raise AssertionError(f"{case}: got {got}; {why}.")
        raise AssertionError(
            f"{case}: got {got}, expected {want} (height layer N·Gh = {n * gh}, "
            f"width layer N·Gw = {n * gw})"
        )
    passed("N·(Gh + Gw) scores, against N² for full attention.")


def _mask_slips(grid_size: tuple[int, int], axis: str) -> dict[str, Tensor]:
    """The masks of the usual mistakes on a ``Gh × Gw`` grid."""
    gh, gw = grid_size
    other = "width" if axis == "height" else "height"
    line = "column" if axis == "height" else "row"
    n = torch.arange(gh * gw)
    rows, cols = n % gh, n // gh  # the coordinates of token n, numbered column-major
    by_column_major = cols if axis == "height" else rows
    want = axial_mask(grid_size, axis)
    return {
        "the mask is inverted: True must mean 'may attend', for the tokens of the query's own "
        f"{line}, as attn_bias of MultiHeadSelfAttention reads a boolean mask": ~want,
        f"that is the {other!r} mask: 'height' lets a token attend to the tokens above "
        f"and below it (its column, the same column index), 'width' to those beside "
        f"it (its row); here each token must see its {line}": axial_mask(grid_size, other),
        f"you numbered the tokens column-major (n = column·Gh + row); the grid is "
        "flattened row-major, as PatchEmbedding and reshape do: token n is at row n // Gw and "
        f"column n % Gw, with Gw = {gw}": by_column_major[:, None] == by_column_major[None, :],
        "that is the union of both masks (same row or same column), the pattern of "
        "criss-cross attention; one axial layer "
        "attends along one axis only": want | axial_mask(grid_size, other),
        "every token may attend to every other one: that is full attention": torch.ones_like(want),
    }


def _mask_shape(what: str, N: int, got: Tensor) -> str:
    """Why ``got`` is no ``(N, N)`` mask."""
    flatten = "; flatten the grid's two axes into one, row-major" if got.numel() == N * N else ""
    return (
        f"{what}: the mask must have shape (N, N) = {(N, N)}, one row per query "
        f"token and one column per key token, got {tuple(got.shape)}{flatten}"
    )


def _wrong_entries(want: Tensor, gw: int, got: Tensor) -> str:
    """How many entries of the mask ``got`` are wrong, and the first of them."""
    n, m = (got != want).nonzero()[0].tolist()
    return (
        f"{int((got != want).sum())} of {want.numel()} entries are wrong, e.g. "
        f"mask[{n}, {m}] should be {bool(want[n, m])}: token {n} is at (row, column) "
        f"{(n // gw, n % gw)} and token {m} at {(m // gw, m % gw)}"
    )


_ADDITIVE = (
    lambda got: torch.isinf(got).any(),
    "that is an additive bias (0 where allowed, -inf where not); return "
    "a boolean mask, True where a token may attend",
)


@checker
def check_axial_mask(fn: Callable[[tuple[int, int], str], Tensor]) -> None:
    """Grade ``fn(grid_size, axis) -> mask``: who may attend to whom in one axial layer.

    ``mask`` ``(N, N)``, tokens row-major, is True where query and key share a column
    (``'height'``) or a row (``'width'``); booleans, or 1s and 0s.

    Example:
        >>> check_axial_mask(axial_mask)
        Correct! check_axial_mask: same as axial_mask on 3 grids and both axes.
    """
    grids = [(3, 5), (4, 4), (1, 6)]  # the first, not square, tells the mistakes apart
    for (gh, gw), axis in itertools.product(grids, ("height", "width")):
        what, N, want = (
            f"grid_size=({gh}, {gw}), axis={axis!r}",
            gh * gw,
            axial_mask((gh, gw), axis),
        )
        got = call_safely(fn, ((gh, gw), axis), what)
        if not isinstance(got, Tensor):
            try:
                got = torch.as_tensor(got)
            except (TypeError, ValueError, RuntimeError):
                raise AssertionError(f"{what}: return a tensor, got {type(got).__name__}") from None
        grade_answer(
            as_mask(got, (N, N), what, functools.partial(_mask_shape, what, N), _ADDITIVE),
            want,
            what,
            functools.partial(_mask_slips, (gh, gw), axis),
            otherwise=functools.partial(_wrong_entries, want, gw),
            atol=0.0,
        )
    passed(f"same as axial_mask on {len(grids)} grids and both axes.")


@checker
def check_axial_flops_prediction(predicted_ratio: Any) -> None:
    """Grade a prediction: full attention's FLOPs over axial attention's, ViT-B/16's grid.

    Exact, ``attention_flops`` on the 14×14 grid at ``D = 768``: 0.559; ±10% passes.

    Example:
        >>> check_axial_flops_prediction(0.55)
        Correct! check_axial_flops_prediction: you predicted 0.55 for full / axial;
        measured: 0.559 (attention_flops, 14×14 grid, D = 768).
    """
    grid, dim = 14, 768
    n = grid * grid
    full, axial = (attention_flops(grid, dim, kind) for kind in ("full", "axial"))
    slips = {
        f"you counted the scores alone, N² against N·(Gh + Gw), {n} / {2 * grid}: at "
        f"D = {dim} the projections dominate, 8·N·D² for full attention and 16·N·D² for "
        "the axial layer, which has two sets": n / (2 * grid),
        "close: you counted the projections alone, 8·N·D² against 16·N·D²; the scores "
        "add 4·N²·D to full attention and only 4·N·(Gh + Gw)·D to the axial layer": 0.5,
        "you gave the axial layer one set of projections; it is a height layer and a "
        "width layer, each with its own q, k, v and output "
        "projections: 16·N·D²": full / (8 * n * dim**2 + 4 * n * 2 * grid * dim),
        f"that is the ratio at D = 64, the width of the chapter's table; a ViT-B/16 has "
        f"D = {dim}, and the projections grow with D² while the scores grow with D": (
            attention_flops(grid, 64, "full") / attention_flops(grid, 64, "axial")
        ),
        "that is axial / full; the question asks for full / axial (below 1 when the "
        "axial layer costs more)": axial / full,
    }
    grade_prediction(
        "check_axial_flops_prediction",
        "predicted_ratio",
        predicted_ratio,
        full / axial,
        what="for full / axial",
        tolerance=0.1,
        slips=slips,
        source=f"attention_flops, {grid}×{grid} grid, D = {dim}",
    )
