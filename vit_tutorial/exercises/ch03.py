"""Checkers for chapter 3: the 2D sinusoidal table, the relative-position index, the
resizing of a learned table to a new grid, and a predicted size of a relative bias table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from vit_tutorial.exercises._common import call_safely, checker, expect_tensor, grade_tensor, passed
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.positional import (
    RelativePositionBias,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)

__all__ = ["check_bias_table_prediction", "check_relative_position_index", "check_resize_table"]
__all__ += ["check_sinusoidal_2d"]


def _table_slips(grid_size: tuple[int, int], dim: int) -> dict[str, Any]:
    """What the usual wrong tables are, or a test that recognises them."""
    (gh, gw), want = grid_size, sinusoidal_2d(grid_size, dim)
    num_patches, half = gh * gw, dim // 2
    pairs = rearrange(want, "n (k two) -> n k two", two=2)  # (N, D/2, 2): (sin, cos)
    n = torch.arange(num_patches)
    by_gh = [sinusoidal_1d(gh, half)[n % gh], sinusoidal_1d(gw, half)[n // gh]]
    wrong_side = (
        "the codes are indexed with Gh where Gw belongs: patch n sits at (row, column) = (n // Gw, "
        "n % Gw), but this table uses (n % Gh, n // Gh), the same only on a square grid (are "
        "repeat and repeat_interleave swapped?). Repeat each row's code Gw times in a row "
        "(repeat_interleave), and tile the Gw column codes Gh times (repeat)"
    )

    def grid(got: Tensor) -> Tensor:  # (Gh, Gw, D)
        return got.float().reshape(gh, gw, dim)

    return {
        "patches in the same row but different columns get the "
        "same code: the table encodes only the row, not the column": (
            lambda got: gw > 1 and torch.allclose(grid(got)[:, 0], grid(got)[:, 1], atol=1e-6)
        ),
        "patches in the same column but different rows get the "
        "same code: the table encodes only the column, not the row": (
            lambda got: gh > 1 and torch.allclose(grid(got)[0], grid(got)[1], atol=1e-6)
        ),
        f"this is the 1D code of the flattened index n = row·Gw + column, so the "
        f"table knows one axis only: patch (0, {gw - 1}) and patch (1, 0) are neighbours "
        f"in it although they sit at opposite ends of the image. Encode the row with half "
        f"the channels and the column with the other half": sinusoidal_1d(num_patches, dim),
        "the column is in the first half and the row in the second (swapping repeat "
        "and repeat_interleave gives this table on a square grid); a valid code, but "
        "the package puts the row first": torch.cat([want[:, half:], want[:, :half]], 1),
        "sin and cos are swapped: each pair of channels is (sin, cos) of one angle, sin on "
        "even channels and cos on odd "
        "ones, as in sinusoidal_1d": rearrange(pairs.flip(-1), "n k two -> n (k two)"),
        "all sines of an axis come before its cosines (MAE's layout); a valid code, but "
        "sinusoidal_1d interleaves them: sin on even channels and cos on odd ones": (
            rearrange(want, "n (xy k two) -> n (xy two k)", xy=2, two=2)
        ),
        wrong_side: [torch.cat(by_gh, 1), torch.cat(by_gh[::-1], 1)],
    }


@checker
def check_sinusoidal_2d(fn: Callable[[tuple[int, int], int], Tensor]) -> None:
    """Grade a learner's ``fn(grid_size, dim) -> table`` against :func:`sinusoidal_2d`.

    ``(Gh·Gw, D)``, rows row-major, the first D/2 channels the 1D code of the patch's row and
    the rest that of its column; the cases include ViT-B/16's 14×14 grid.

    Example:
        >>> check_sinusoidal_2d(lambda grid_size, dim: sinusoidal_2d(grid_size, dim))
        Correct! check_sinusoidal_2d: 3 grids (14×14 with D=768, and non-square), both axes encoded.
    """
    # non-square grids first: on a square one, swapped halves and a grid read column by
    # column give the same table, and only a non-square grid tells the two bugs apart
    for gh, gw, dim in [(3, 5, 16), (4, 2, 8), (14, 14, 768)]:
        what = f"grid_size=({gh}, {gw}), dim={dim}"
        grade_tensor(
            fn,
            ((gh, gw), dim),
            sinusoidal_2d((gh, gw), dim),
            what,
            _table_slips,
            expected=f"{what}: the table must have shape (Gh·Gw, D) = {(gh * gw, dim)}, one "
            "row per patch, got {got}; flatten the grid row-major",
            otherwise="differs from sinusoidal_2d by up to {diff}; check the frequencies "
            "10000^(-2i/(D/2)) of each half",
        )
    passed("3 grids (14×14 with D=768, and non-square), both axes encoded.")


def _column_major_offsets(grid_size: tuple[int, int]) -> Tensor:
    """``(N, N)``: one key per 2D offset when patch n is read at ``(n % Gh, n // Gh)``."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    rows, cols = n % gh, n // gh  # column-major coordinates
    d_rows, d_cols = rows[:, None] - rows[None], cols[:, None] - cols[None]
    return (d_rows + gh - 1) * (2 * gw - 1) + d_cols + gw - 1


def _depends_only_on(index: Tensor, key: Tensor) -> bool:
    """True when ``index[n, m]`` is a function of ``key[n, m]``: equal keys, equal entries."""
    pairs = torch.stack([key.flatten(), index.flatten().long()])
    return pairs.unique(dim=1).shape[1] == key.unique().numel()


def _offset_hint(index: Tensor, grid_size: tuple[int, int], other: tuple, offset: tuple) -> str:
    """What to fix in an ``index`` that gives the 2D offsets ``other`` and ``offset`` one entry."""
    gh, gw = grid_size
    n = torch.arange(gh * gw)
    column_major = _depends_only_on(index, _column_major_offsets(grid_size))
    if column_major and not _depends_only_on(index, n[:, None] - n[None]):
        return (
            "your index follows the offsets of column-major coordinates, patch n at "
            "(n % Gh, n // Gh), as meshgrid(..., indexing='xy') gives them. Patches are "
            "numbered row-major, patch n at (n // Gw, n % Gw): on a square grid both give a "
            "valid index, on a non-square one only the row-major one does"
        )
    if other[0] * gw + other[1] == offset[0] * gw + offset[1]:
        return (
            "that is the offset n - m of the flattened indices, which mixes rows "
            "and columns; use the 2D offset (row, column)"
        )
    return (
        f"combine the shifted offsets as row·(2Gw-1) + column (the column "
        f"offset takes 2Gw-1 = {2 * gw - 1} values, not 2Gh-1 = {2 * gh - 1})"
    )


def _check_one_entry_per_offset(index: Tensor, grid_size: tuple[int, int], what: str) -> None:
    """Check that no entry of ``index`` serves two 2D offsets, and name the bug if one does."""
    gh, gw = grid_size
    rows, cols = torch.arange(gh * gw) // gw, torch.arange(gh * gw) % gw
    offsets = torch.stack([rows[:, None] - rows[None], cols[:, None] - cols[None]], -1)
    seen: dict[int, tuple[int, int]] = {}
    for offset, entry in zip(map(tuple, offsets.flatten(0, 1).tolist()), index.flatten().tolist()):
        other = seen.setdefault(int(entry), offset)  # (n, m) in row-major order
        if other != offset:
            raise AssertionError(
                f"{what}: offsets {other} and {offset} (row, column) share entry {int(entry)}, "
                "so the bias cannot tell them apart; "
                + _offset_hint(index, grid_size, other, offset)
            )


@checker
def check_relative_position_index(fn: Callable[[tuple[int, int]], Tensor]) -> None:
    """Grade ``fn(grid_size) -> index``, the lookup of a relative position bias table.

    ``index`` ``(N, N)`` holds integers in ``[0, (2Gh-1)(2Gw-1))``, equal exactly where the 2D
    offsets between the patches are: any such numbering of the offsets passes.

    Example:
        >>> from vit_tutorial.positional import RelativePositionBias
        >>> check_relative_position_index(lambda g: RelativePositionBias(g, num_heads=1).index)
        Correct! check_relative_position_index: one entry per 2D offset on 3 grids
        (square and non-square).
    """
    for gh, gw in [(3, 3), (2, 4), (5, 3)]:
        what, N, size = f"grid_size=({gh}, {gw})", gh * gw, (2 * gh - 1) * (2 * gw - 1)
        index = call_safely(fn, ((gh, gw),), what)
        expect_tensor(
            index, (N, N), f"{what}: the index must have shape (N, N) = {(N, N)}, got {{got}}"
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
    passed("one entry per 2D offset on 3 grids (square and non-square).")


# How a (Gh·Gw, D) table becomes a (1, D, Gh, Gw) image for F.interpolate, and back.
_READ = {
    "row-major": lambda table, gh, gw: rearrange(table, "(gh gw) d -> 1 d gh gw", gh=gh, gw=gw),
    "column-major": lambda table, gh, gw: rearrange(table, "(gw gh) d -> 1 d gh gw", gh=gh, gw=gw),
    "reshape": lambda table, gh, gw: table.reshape(1, -1, gh, gw),
}
_RIGHT = ("row-major", "row-major")  # how resize_pos_embed reads the table, and writes it
_WRITE = {
    "row-major": lambda image: rearrange(image, "1 d gh gw -> (gh gw) d"),
    "column-major": lambda image: rearrange(image, "1 d gh gw -> (gw gh) d"),
    "reshape": lambda image: image.reshape(-1, image.shape[1]),
}


def _resized(
    table: Tensor, old_grid: tuple, new_grid: tuple, layout: tuple = _RIGHT, **options: object
) -> Tensor:
    """``table`` resized by ``F.interpolate(**options)``, read and written as ``layout`` says;
    the defaults are the right answer, :func:`resize_pos_embed`'s."""
    options = {"mode": "bicubic", "antialias": True, "align_corners": False} | options
    if options["mode"] == "nearest":
        options = {"mode": "nearest"}
    image = _READ[layout[0]](table.float(), *old_grid)  # (1, D, Gh, Gw)
    return _WRITE[layout[1]](F.interpolate(image, size=new_grid, **options))


_SWAPPED = (
    "the grid is taken as (Gw, Gh): a grid size is (Gh, Gw), rows then columns, and patch "
    "(r, c) is row r·Gw + c of the table"
)
_COLUMN_MAJOR = (
    "the table is read or written column by column; it is row-major, patch (r, c) in row "
    "r·Gw + c: rearrange '(gh gw) d -> 1 d gh gw', and back"
)
_RESHAPED = (
    "a reshape is not a transpose: table.reshape(1, D, Gh, Gw), or a reshape back to "
    "(Gh'·Gw', D), keeps the memory order, so each channel of the image mixes numbers of "
    "different patches. Move the channel axis instead: permute, or rearrange "
    "'(gh gw) d -> 1 d gh gw' and '1 d gh gw -> (gh gw) d'"
)
_BICUBIC = "resize_pos_embed is bicubic, like timm and DeiT: mode='bicubic'"


def _resize_slips(
    table: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int]
) -> list[tuple[str, Tensor]]:
    """What the usual mistakes of ``resize_table`` return."""
    old_t, new_t = old_grid[::-1], new_grid[::-1]
    layouts = [(r, w) for r in _READ for w in _WRITE if (r, w) != _RIGHT]
    return [
        *[(_SWAPPED, _resized(table, *grids)) for grids in [(old_t, new_grid), (old_grid, new_t)]],
        (_SWAPPED, _resized(table, old_t, new_t)),
        *[
            (
                _RESHAPED if "reshape" in layout else _COLUMN_MAJOR,
                _resized(table, old_grid, new_grid, layout),
            )
            for layout in layouts
        ],
        (
            "align_corners=True pins the corner patches to the corners of the new grid; "
            "resize_pos_embed, like timm, uses align_corners=False, which treats each patch "
            "as a cell and lines up the edges of the grids",
            _resized(table, old_grid, new_grid, align_corners=True),
        ),
        (
            "antialias is off: pass antialias=True, as resize_pos_embed and timm do. When "
            "the grid shrinks, it averages over the area each new patch covers instead of "
            "sampling one point, which would fold detail finer than the new grid into false "
            "slow patterns. It also switches PyTorch's cubic kernel from a=-0.75 to Keys' "
            "a=-0.5 (as PIL), so the numbers differ when the grid grows too",
            _resized(table, old_grid, new_grid, antialias=False),
        ),
        *[
            (
                "this is bilinear interpolation, as in the reference ViT code (a linear "
                f"zoom); {_BICUBIC}",
                _resized(table, old_grid, new_grid, mode="bilinear", antialias=antialias),
            )
            for antialias in (True, False)
        ],
        (
            "this copies the nearest patch (mode='nearest'), so the table changes in "
            f"steps; {_BICUBIC}",
            _resized(table, old_grid, new_grid, mode="nearest"),
        ),
    ]


@checker
def check_resize_table(fn: Callable[[Tensor, tuple[int, int], tuple[int, int]], Tensor]) -> None:
    """Grade ``fn(table, old_grid, new_grid)``, a learned table resampled to a new grid.

    ``table`` ``(Gh·Gw, D)`` is row-major; the answer ``(Gh'·Gw', D)`` must equal
    :func:`~vit_tutorial.positional.resize_pos_embed` without prefix tokens (bicubic,
    ``align_corners=False``, ``antialias=True``), on grids shrunk, grown and 14×14 to 24×24.

    Example:
        >>> check_resize_table(lambda t, old, new: resize_pos_embed(t[None], old, new, 0)[0])
        Correct! check_resize_table: 3 resizes (shrinking, growing, 14×14 to 24×24) match
        resize_pos_embed.
    """
    generator = torch.Generator().manual_seed(0)
    for old, new, dim in [((4, 6), (3, 4), 8), ((3, 5), (7, 6), 8), ((14, 14), (24, 24), 16)]:
        what = f"old_grid={old}, new_grid={new}, D={dim}"
        table = torch.randn(old[0] * old[1], dim, generator=generator)
        grade_tensor(
            fn,
            (table, old, new),
            resize_pos_embed(table[None], old, new, num_prefix_tokens=0)[0],
            what,
            _resize_slips,
            expected=f"{what}: the table must have shape (Gh'·Gw', D) = {(new[0] * new[1], dim)}, "
            "one row per patch of the new grid, got {got}; flatten the grid back row-major",
            otherwise="differs from resize_pos_embed by up to {diff}; view the table as "
            "(1, D, Gh, Gw), resize with mode='bicubic', align_corners=False and "
            "antialias=True, and flatten it back row-major",
        )
    passed("3 resizes (shrinking, growing, 14×14 to 24×24) match resize_pos_embed.")


@checker
def check_bias_table_prediction(predicted_bias_table: Any) -> None:
    """Grade a prediction: the size of the relative bias table of ViT-B/16 at 384×384.

    Exact: ``(2·24 - 1)²`` offsets and 3 class-token entries per head, 12 heads, 26,544; a
    slip is named only when the prediction is exactly its number.

    Example:
        >>> check_bias_table_prediction(26544)
        Correct! check_bias_table_prediction: you predicted 26,544 numbers; measured:
        26,544 (RelativePositionBias(24, num_heads=12, num_prefix_tokens=1)).
    """
    G, h = 24, 12
    actual = RelativePositionBias(G, num_heads=h, num_prefix_tokens=1).table.numel()
    offsets = (2 * G - 1) ** 2  # 47² = 2,209
    position = "A table entry is an offset, not a position"
    slips = {
        "You left out the class token's 3 entries per head (class token to "
        "patch, patch to class token, class token to class token).": offsets * h,
        f"That is one head's table; each of the {h} heads has its own.": offsets + 3,
        f"That is one head's table without the class token's 3 entries; there are {h}.": offsets,
        f"{position}: along a {G}-patch axis offsets run from -{G - 1} to {G - 1}, "
        f"(2G - 1) of them, so (2G - 1)² per head.": (G * G + 3) * h,
        f"{position}: (2G - 1)² per head, not G².": G * G * h,
        f"Offsets run from -{G - 1} to {G - 1}: (2G - 1) per axis, not 2G.": ((2 * G) ** 2 + 3) * h,
        "That is the table of the 14×14 grid at 224×224; this one spans the whole grid "
        "(BEiT's kind), so it grows with the image.": ((2 * 14 - 1) ** 2 + 3) * h,
        "That is the (h, T, T) bias that the index reads out of the "
        "table; the table holds one entry per offset.": (G * G + 1) ** 2 * h,
    }
    grade_prediction(
        "check_bias_table_prediction",
        "predicted_bias_table",
        predicted_bias_table,
        actual,
        what="numbers",
        tolerance=0,
        slips=slips,
        source="RelativePositionBias(24, num_heads=12, num_prefix_tokens=1)",
        otherwise="Count the 2D offsets of the grid per head, then the class token's entries.",
    )
