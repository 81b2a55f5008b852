"""Checkers for chapter 3: the 2D sinusoidal table and the relative-position index."""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import rearrange
from torch import Tensor

from vit_tutorial.exercises._common import call_safely, checker, close, passed
from vit_tutorial.positional import sinusoidal_1d, sinusoidal_2d

__all__ = ["check_relative_position_index", "check_sinusoidal_2d"]


def _mistakes(want: Tensor, grid_size: tuple[int, int]) -> list[tuple[Tensor, str]]:
    """Tables of the usual mistakes, from the right table ``want``, each with its explanation."""
    gw = grid_size[1]
    N, dim = want.shape
    half = dim // 2
    pairs = rearrange(want, "n (k two) -> n k two", two=2)  # (N, D/2, 2): (sin, cos)
    return [
        (
            sinusoidal_1d(N, dim),
            f"this is the 1D code of the flattened index n = row·Gw + column, so the "
            f"table knows one axis only: patch (0, {gw - 1}) and patch (1, 0) are neighbours "
            f"in it although they sit at opposite ends of the image. Encode the row with half "
            f"the channels and the column with the other half",
        ),
        (
            torch.cat([want[:, half:], want[:, :half]], 1),
            "the column is in the first half and the row in the "
            "second; a valid code, but the package puts the row first",
        ),
        (
            rearrange(pairs.flip(-1), "n k two -> n (k two)"),
            "sin and cos are swapped: each pair of channels is "
            "(sin, cos) of one angle, sin on even channels and cos on odd "
            "ones, as in sinusoidal_1d",
        ),
        (
            rearrange(want, "n (xy k two) -> n (xy two k)", xy=2, two=2),
            "all sines of an axis come before its cosines (MAE's "
            "layout); a valid code, but sinusoidal_1d interleaves them: sin "
            "on even channels and cos on odd ones",
        ),
    ]


def _diagnose_table(got: Tensor, want: Tensor, grid_size: tuple[int, int]) -> str:
    """Why a table ``got`` of the right shape differs from ``want``, the right one."""
    gh, gw = grid_size
    got = got.float()
    grid = got.reshape(gh, gw, want.shape[1])
    if gw > 1 and torch.allclose(grid[:, 0], grid[:, 1], atol=1e-6):
        return (
            "patches in the same row but different columns get the "
            "same code: the table encodes only the row, not the column"
        )
    if gh > 1 and torch.allclose(grid[0], grid[1], atol=1e-6):
        return (
            "patches in the same column but different rows get the "
            "same code: the table encodes only the column, not the row"
        )
    for wrong, explanation in _mistakes(want, grid_size):
        if close(got, wrong):
            return explanation
    return (
        f"differs from sinusoidal_2d by up to "
        f"{(got - want).abs().max().item():.3g}; check the frequencies "
        f"T^(-2i/(D/2)) of each half"
    )


@checker
def check_sinusoidal_2d(fn: Callable[[tuple[int, int], int], Tensor]) -> None:
    """Grade a learner's ``fn(grid_size, dim) -> table`` against :func:`sinusoidal_2d`.

    The table must have shape ``(Gh·Gw, D)``, rows in row-major grid order, the first half
    of the channels the 1D code (:func:`sinusoidal_1d` of width D/2) of the patch's row
    and the second half that of its column. Besides wrong numbers, the checker names the
    two classic bugs: a table that encodes only one axis, and code that crashes or returns
    the wrong shape on the 14×14 grid of ViT-B/16.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_sinusoidal_2d(lambda grid_size, dim: sinusoidal_2d(grid_size, dim))
        Correct! check_sinusoidal_2d: 3 grids (14×14 with D=768, and non-square), both axes encoded.
    """
    for gh, gw, dim in [(14, 14, 768), (3, 5, 16), (4, 2, 8)]:
        what = f"grid_size=({gh}, {gw}), dim={dim}"
        got = call_safely(fn, ((gh, gw), dim), what)
        N = gh * gw
        if not isinstance(got, Tensor) or tuple(got.shape) != (N, dim):
            shape = tuple(got.shape) if isinstance(got, Tensor) else type(got).__name__
            raise AssertionError(
                f"{what}: the table must have shape (Gh·Gw, D) = {(N, dim)}, one "
                f"row per patch, got {shape}; flatten the grid row-major"
            )
        want = sinusoidal_2d((gh, gw), dim)
        if close(got, want):
            continue
        raise AssertionError(f"{what}: {_diagnose_table(got, want, (gh, gw))}")
    passed("check_sinusoidal_2d", "3 grids (14×14 with D=768, and non-square), both axes encoded.")


def _check_one_entry_per_offset(index: Tensor, grid_size: tuple[int, int], what: str) -> None:
    """Check that no entry of ``index`` serves two 2D offsets, and name the bug if one does."""
    gh, gw = grid_size
    N = gh * gw
    rows, cols = torch.arange(N) // gw, torch.arange(N) % gw
    offsets = torch.stack([rows[:, None] - rows[None], cols[:, None] - cols[None]], -1)
    seen: dict[int, tuple[int, int]] = {}
    for n in range(N):
        for m in range(N):
            offset, entry = tuple(offsets[n, m].tolist()), int(index[n, m])
            other = seen.setdefault(entry, offset)
            if other == offset:
                continue
            if other[0] * gw + other[1] == offset[0] * gw + offset[1]:
                hint = (
                    "that is the offset n - m of the flattened indices, which mixes rows "
                    "and columns; use the 2D offset (row, column)"
                )
            else:
                hint = (
                    f"combine the shifted offsets as row·(2Gw-1) + column (the column "
                    f"offset takes 2Gw-1 = {2 * gw - 1} values, not 2Gh-1 = {2 * gh - 1})"
                )
            raise AssertionError(
                f"{what}: offsets {other} and {offset} (row, column) share "
                f"entry {entry}, so the bias cannot tell them apart; {hint}"
            )


@checker
def check_relative_position_index(fn: Callable[[tuple[int, int]], Tensor]) -> None:
    """Grade ``fn(grid_size) -> index``, the lookup of a relative position bias table.

    For a ``Gh × Gw`` grid, ``index`` has shape ``(N, N)`` with ``N = Gh·Gw`` and integer
    entries in ``[0, (2Gh-1)(2Gw-1))``; ``index[n, m]`` must depend only on the 2D offset
    between patch n and patch m, and different offsets must get different entries. Any
    numbering of the offsets with that property passes.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> from vit_tutorial.positional import RelativePositionBias
        >>> check_relative_position_index(lambda g: RelativePositionBias(g, num_heads=1).index)
        Correct! check_relative_position_index: one entry per 2D offset on 3 grids (square and non-square).
    """
    for gh, gw in [(3, 3), (2, 4), (5, 3)]:
        what = f"grid_size=({gh}, {gw})"
        index = call_safely(fn, ((gh, gw),), what)
        N, size = gh * gw, (2 * gh - 1) * (2 * gw - 1)
        if not isinstance(index, Tensor) or tuple(index.shape) != (N, N):
            shape = tuple(index.shape) if isinstance(index, Tensor) else type(index).__name__
            raise AssertionError(
                f"{what}: the index must have shape (N, N) = {(N, N)}, got {shape}"
            )
        if index.is_floating_point():
            raise AssertionError(f"{what}: the index must hold integers, got {index.dtype}")
        if index.min() < 0 or index.max() >= size:
            raise AssertionError(
                f"{what}: entries must lie in [0, (2Gh-1)(2Gw-1)) = [0, {size}), got "
                f"[{index.min().item()}, {index.max().item()}]; shift the row offset by Gh-1 and "
                f"the column offset by Gw-1 so they are non-negative, then combine them as "
                f"row·(2Gw-1) + column"
            )
        _check_one_entry_per_offset(index, (gh, gw), what)
        # Entries lie in [0, size) and no entry serves two offsets, so by pigeonhole each of the
        # (2Gh-1)(2Gw-1) offsets has exactly one entry: the index is translation invariant.
    passed(
        "check_relative_position_index",
        "one entry per 2D offset on 3 grids (square and non-square).",
    )
