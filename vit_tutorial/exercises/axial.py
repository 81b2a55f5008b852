"""Checkers for chapter 7: axial attention and what it costs."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import along_axis
from vit_tutorial.exercises._common import checker, close, passed

__all__ = ["check_axial_attention", "check_axial_scores"]

Attend = Callable[[Tensor], Tensor]


def _diagnose(got: Tensor, want: Tensor, x: Tensor, attend: Attend, axis: str) -> str:
    """Why ``got`` differs from ``want`` on the grid ``x`` of shape ``(B, Gh, Gw, D)``."""
    B, gh, gw, D = x.shape
    with torch.no_grad():
        other = along_axis(x, attend, "width" if axis == "height" else "height")
        folded_by_reshape = attend(x.reshape(-1, gh, D)).reshape(x.shape)
        full = attend(x.reshape(B, gh * gw, D)).reshape(x.shape)
    if close(got, other):
        line = "column" if axis == "height" else "row"
        return (
            f"you attended along the other axis; 'height' means each token attends "
            f"to the tokens above and below it (its column), 'width' to its row; here each "
            f"token must see its {line}"
        )
    if axis == "height" and close(got, folded_by_reshape):
        return (
            f"x.reshape(B·Gw, Gh, D) does not gather columns: in memory the grid is "
            f"row-major, so reshape cuts it into runs of {gh} consecutive tokens of a row. "
            f"Move the width axis next to the batch first: rearrange(x, 'b gh gw d -> "
            f"(b gw) gh d'), or x.transpose(1, 2).reshape(...)"
        )
    if close(got, full):
        return "every token attended to the whole grid; axial attention attends along one axis only"
    diff = (got - want).abs().max().item()
    return (
        f"the output differs from the reference by up to {diff:.3g}; check that the "
        f"fold and the unfold are inverse patterns (same order of b and the folded axis)"
    )


@checker
def check_axial_attention(fn: Callable[[Tensor, Attend, str], Tensor]) -> None:
    """Grade a learner's ``fn(x, attend, axis) -> out`` on grids ``x`` of shape ``(B, Gh, Gw, D)``.

    ``attend`` maps a batch of sequences ``(B', L, D)`` to ``(B', L, D)`` (for example a
    :class:`~vit_tutorial.attention.MultiHeadSelfAttention`). ``fn`` must apply it along
    the columns (``axis='height'``) or the rows (``axis='width'``) of the grid and return
    the result in the layout of ``x``.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

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
        if not isinstance(got, Tensor):
            raise AssertionError(f"fn must return a tensor, got {type(got).__name__}")
        if got.shape != x.shape:
            raise AssertionError(
                f"{case}: the output must keep the input's layout {tuple(x.shape)} = (B, Gh, Gw, "
                f"D), got {tuple(got.shape)}; unfold the columns or rows back onto the grid"
            )
        if close(got, want):
            continue
        raise AssertionError(f"{case}: {_diagnose(got, want, x, attend, axis)}")
    passed("check_axial_attention", f"matches the reference on {len(cases)} grids, square and not.")


@checker
def check_axial_scores(fn: Callable[[int, int], int]) -> None:
    """Grade ``fn(gh, gw) -> int``: the attention scores one axial layer computes.

    One axial layer is a height layer and a width layer. The answer counts the
    (query, key) scores of both, for one image and one head, on a ``Gh × Gw`` grid.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_axial_scores(lambda gh, gw: gh * gw * (gh + gw))
        Correct! check_axial_scores: N·(Gh + Gw) scores, against N² for full attention.
    """
    for gh, gw in [(3, 7), (4, 4), (16, 9), (1, 10)]:  # the first case tells mistakes apart
        n = gh * gw
        got = fn(gh, gw)
        want = n * (gh + gw)
        if got == want:
            continue
        case = f"grid {gh}×{gw} (N = {n})"
        mistakes = [
            (
                n * n,
                "that is N², the cost of full attention: in the height layer each of the N "
                "tokens scores only the Gh tokens of its column, in the width layer only "
                "the Gw tokens of its row",
            ),
            (n * gh, "you counted the height layer only; add the width layer's N·Gw scores"),
            (n * gw, "you counted the width layer only; add the height layer's N·Gh scores"),
            (2 * n * math.sqrt(n), "2·N·√N holds for square grids only; count N·Gh + N·Gw"),
            (
                gh * gh + gw * gw,
                "that is one column plus one row; every column and every row "
                "attends, N·Gh + N·Gw in all",
            ),
            (
                n * (gh + gw - 1),
                "that counts the distinct keys a token reaches; but each token "
                "scores itself in both layers, so the layers compute N·(Gh + Gw)",
            ),
        ]
        for value, explanation in mistakes:
            if isinstance(got, (int, float)) and abs(got - value) < 0.5:
                raise AssertionError(f"{case}: got {got}; {explanation}.")
        raise AssertionError(
            f"{case}: got {got}, expected {want} (height layer N·Gh = {n * gh}, "
            f"width layer N·Gw = {n * gw})"
        )
    passed("check_axial_scores", "N·(Gh + Gw) scores, against N² for full attention.")
