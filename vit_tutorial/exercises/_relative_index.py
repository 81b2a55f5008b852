"""Why a learner's relative-position index is wrong: the diagnosis behind
:func:`vit_tutorial.exercises.positional.check_relative_position_index` (chapter 3, exercise 2).

An index of shape ``(N, N)`` must give one entry to each 2D offset (row, column) between two
patches of a row-major grid, and different entries to different offsets.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_one_entry_per_offset"]


def _depends_only_on(index: Tensor, key: Tensor) -> bool:
    """True when ``index[n, m]`` is a function of ``key[n, m]``: equal keys, equal entries."""
    pairs = torch.stack([key.flatten(), index.flatten().long()])
    return pairs.unique(dim=1).shape[1] == key.unique().numel()


def _column_major_offsets(grid_size: tuple[int, int]) -> Tensor:
    """``(N, N)``: one key per 2D offset when patch n is read at ``(n % Gh, n // Gh)``."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    rows, cols = n % gh, n // gh  # column-major coordinates
    d_rows, d_cols = rows[:, None] - rows[None], cols[:, None] - cols[None]
    return (d_rows + gh - 1) * (2 * gw - 1) + d_cols + gw - 1


def _offset_hint(
    index: Tensor, grid_size: tuple[int, int], other: tuple[int, int], offset: tuple[int, int]
) -> str:
    """What to fix in an ``index`` that gives the 2D offsets ``other`` and ``offset`` one entry."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    flattened = other[0] * gw + other[1] == offset[0] * gw + offset[1]
    if _depends_only_on(index, _column_major_offsets(grid_size)) and not _depends_only_on(
        index, n[:, None] - n[None]
    ):
        return (
            "your index follows the offsets of column-major coordinates, patch n at "
            "(n % Gh, n // Gh), as meshgrid(..., indexing='xy') gives them. Patches are "
            "numbered row-major, patch n at (n // Gw, n % Gw): on a square grid both give a "
            "valid index, on a non-square one only the row-major one does"
        )
    if flattened:
        return (
            "that is the offset n - m of the flattened indices, which mixes rows "
            "and columns; use the 2D offset (row, column)"
        )
    return (
        f"combine the shifted offsets as row·(2Gw-1) + column (the column "
        f"offset takes 2Gw-1 = {2 * gw - 1} values, not 2Gh-1 = {2 * gh - 1})"
    )


def check_one_entry_per_offset(index: Tensor, grid_size: tuple[int, int], what: str) -> None:
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
            hint = _offset_hint(index, grid_size, other, offset)
            raise AssertionError(
                f"{what}: offsets {other} and {offset} (row, column) share "
                f"entry {entry}, so the bias cannot tell them apart; {hint}"
            )
