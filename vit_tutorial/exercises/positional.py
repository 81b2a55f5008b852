"""Checkers for chapter 3: the 2D sinusoidal table, the relative-position index, the
resizing of a learned table to a new grid, and a predicted size of a relative bias table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    grade_prediction,
    passed,
    shape_of,
)
from vit_tutorial.exercises._relative_index import check_one_entry_per_offset
from vit_tutorial.positional import (
    RelativePositionBias,
    resize_pos_embed,
    sinusoidal_1d,
    sinusoidal_2d,
)

__all__ = [
    "check_bias_table_prediction",
    "check_relative_position_index",
    "check_resize_table",
    "check_sinusoidal_2d",
]


def _mistakes(want: Tensor, grid_size: tuple[int, int]) -> list[tuple[Tensor, str]]:
    """Tables of the usual mistakes, from the right table ``want``, each with its explanation."""
    gh, gw = grid_size
    num_patches, dim = want.shape
    half = dim // 2
    pairs = rearrange(want, "n (k two) -> n k two", two=2)  # (N, D/2, 2): (sin, cos)
    n = torch.arange(num_patches)
    by_gh = [sinusoidal_1d(gh, half)[n % gh], sinusoidal_1d(gw, half)[n // gh]]
    wrong_side = (
        "the codes are indexed with Gh where Gw belongs: patch n sits at (row, column) = "
        "(n // Gw, n % Gw), but this table uses (n % Gh, n // Gh), the same only on a "
        "square grid (are repeat and repeat_interleave swapped?). Repeat each row's code "
        "Gw times in a row (repeat_interleave), and tile the Gw column codes Gh times "
        "(repeat)"
    )
    return [
        (
            sinusoidal_1d(num_patches, dim),
            f"this is the 1D code of the flattened index n = row·Gw + column, so the "
            f"table knows one axis only: patch (0, {gw - 1}) and patch (1, 0) are neighbours "
            f"in it although they sit at opposite ends of the image. Encode the row with half "
            f"the channels and the column with the other half",
        ),
        (
            torch.cat([want[:, half:], want[:, :half]], 1),
            "the column is in the first half and the row in the second (swapping repeat "
            "and repeat_interleave gives this table on a square grid); a valid code, but "
            "the package puts the row first",
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
        (torch.cat(by_gh, 1), wrong_side),
        (torch.cat(by_gh[::-1], 1), wrong_side),
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
        f"10000^(-2i/(D/2)) of each half"
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
    # non-square grids first: on a square one, swapped halves and a grid read column by
    # column give the same table, and only a non-square grid tells the two bugs apart
    for gh, gw, dim in [(3, 5, 16), (4, 2, 8), (14, 14, 768)]:
        what = f"grid_size=({gh}, {gw}), dim={dim}"
        got = call_safely(fn, ((gh, gw), dim), what)
        N = gh * gw
        if not isinstance(got, Tensor) or tuple(got.shape) != (N, dim):
            shape = shape_of(got)
            raise AssertionError(
                f"{what}: the table must have shape (Gh·Gw, D) = {(N, dim)}, one "
                f"row per patch, got {shape}; flatten the grid row-major"
            )
        want = sinusoidal_2d((gh, gw), dim)
        if close(got, want):
            continue
        raise AssertionError(f"{what}: {_diagnose_table(got, want, (gh, gw))}")
    passed("check_sinusoidal_2d", "3 grids (14×14 with D=768, and non-square), both axes encoded.")


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
        Correct! check_relative_position_index: one entry per 2D offset on 3 grids
        (square and non-square).
    """
    for gh, gw in [(3, 3), (2, 4), (5, 3)]:
        what = f"grid_size=({gh}, {gw})"
        index = call_safely(fn, ((gh, gw),), what)
        N, size = gh * gw, (2 * gh - 1) * (2 * gw - 1)
        if not isinstance(index, Tensor) or tuple(index.shape) != (N, N):
            shape = shape_of(index)
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
        check_one_entry_per_offset(index, (gh, gw), what)
        # Entries lie in [0, size) and no entry serves two offsets, so by pigeonhole each of the
        # (2Gh-1)(2Gw-1) offsets has exactly one entry: the index is translation invariant.
    passed(
        "check_relative_position_index",
        "one entry per 2D offset on 3 grids (square and non-square).",
    )


# How a (Gh·Gw, D) table becomes a (1, D, Gh, Gw) image for F.interpolate, and back: the
# right way (row-major) and two wrong ones.
_READ = {
    "row-major": lambda table, gh, gw: rearrange(table, "(gh gw) d -> 1 d gh gw", gh=gh, gw=gw),
    "column-major": lambda table, gh, gw: rearrange(table, "(gw gh) d -> 1 d gh gw", gh=gh, gw=gw),
    "reshape": lambda table, gh, gw: table.reshape(1, -1, gh, gw),
}
_WRITE = {
    "row-major": lambda image: rearrange(image, "1 d gh gw -> (gh gw) d"),
    "column-major": lambda image: rearrange(image, "1 d gh gw -> (gw gh) d"),
    "reshape": lambda image: image.reshape(-1, image.shape[1]),
}


def _resized(
    table: Tensor,
    old_grid: tuple[int, int],
    new_grid: tuple[int, int],
    layout: tuple[str, str] = ("row-major", "row-major"),
    **options: object,
) -> Tensor:
    """``table`` resized by ``F.interpolate(**options)``, read and written as ``layout`` says.

    The defaults are the right answer, :func:`resize_pos_embed`'s options.
    """
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


def _resize_mistakes(
    table: Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int]
) -> list[tuple[Tensor, str]]:
    """Tables of the usual mistakes of ``resize_table``, each with its explanation."""
    old_t, new_t = old_grid[::-1], new_grid[::-1]
    layouts = [(r, w) for r in _READ for w in _WRITE if (r, w) != ("row-major", "row-major")]
    return [
        *[(_resized(table, *grids), _SWAPPED) for grids in [(old_t, new_grid), (old_grid, new_t)]],
        (_resized(table, old_t, new_t), _SWAPPED),
        *[
            (
                _resized(table, old_grid, new_grid, layout),
                _RESHAPED if "reshape" in layout else _COLUMN_MAJOR,
            )
            for layout in layouts
        ],
        (
            _resized(table, old_grid, new_grid, align_corners=True),
            "align_corners=True pins the corner patches to the corners of the new grid; "
            "resize_pos_embed, like timm, uses align_corners=False, which treats each patch "
            "as a cell and lines up the edges of the grids",
        ),
        (
            _resized(table, old_grid, new_grid, antialias=False),
            "antialias is off: pass antialias=True, as resize_pos_embed and timm do. When "
            "the grid shrinks, it averages over the area each new patch covers instead of "
            "sampling one point, which would fold detail finer than the new grid into false "
            "slow patterns. It also switches PyTorch's cubic kernel from a=-0.75 to Keys' "
            "a=-0.5 (as PIL), so the numbers differ when the grid grows too",
        ),
        *[
            (
                _resized(table, old_grid, new_grid, mode="bilinear", antialias=antialias),
                "this is bilinear interpolation, as in the reference ViT code (a linear "
                "zoom); resize_pos_embed is bicubic, like timm and DeiT: mode='bicubic'",
            )
            for antialias in (True, False)
        ],
        (
            _resized(table, old_grid, new_grid, mode="nearest"),
            "this copies the nearest patch (mode='nearest'), so the table changes in "
            "steps; resize_pos_embed is bicubic, like timm and DeiT: mode='bicubic'",
        ),
    ]


@checker
def check_resize_table(fn: Callable[[Tensor, tuple[int, int], tuple[int, int]], Tensor]) -> None:
    """Grade ``fn(table, old_grid, new_grid)``, a learned table resampled to a new grid.

    ``table`` has shape ``(Gh·Gw, D)``, one row per patch of ``old_grid = (Gh, Gw)`` in
    row-major order; the answer must have shape ``(Gh'·Gw', D)`` for ``new_grid`` and equal
    :func:`~vit_tutorial.positional.resize_pos_embed` without prefix tokens: the table
    viewed as a D-channel image, resized bicubically with ``align_corners=False`` and
    ``antialias=True``. The checker shrinks and grows non-square grids and resizes
    14×14 to 24×24; it names a grid read in the wrong order, a reshape that mixes
    channels and patches, ``align_corners=True``, a missing antialias and another mode.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_resize_table(lambda t, old, new: resize_pos_embed(t[None], old, new, 0)[0])
        Correct! check_resize_table: 3 resizes (shrinking, growing, 14×14 to 24×24) match
        resize_pos_embed.
    """
    generator = torch.Generator().manual_seed(0)
    for old, new, dim in [((4, 6), (3, 4), 8), ((3, 5), (7, 6), 8), ((14, 14), (24, 24), 16)]:
        what = f"old_grid={old}, new_grid={new}, D={dim}"
        table = torch.randn(old[0] * old[1], dim, generator=generator)
        got = call_safely(fn, (table.clone(), old, new), what)
        shape = (new[0] * new[1], dim)
        if not isinstance(got, Tensor) or tuple(got.shape) != shape:
            found = shape_of(got)
            raise AssertionError(
                f"{what}: the table must have shape (Gh'·Gw', D) = {shape}, one row per "
                f"patch of the new grid, got {found}; flatten the grid back row-major"
            )
        want = resize_pos_embed(table[None], old, new, num_prefix_tokens=0)[0]
        if close(got, want):
            continue
        for wrong, explanation in _resize_mistakes(table, old, new):
            if close(got, wrong):
                raise AssertionError(f"{what}: {explanation}")
        raise AssertionError(
            f"{what}: differs from resize_pos_embed by up to "
            f"{(got.double() - want.double()).abs().max().item():.3g}; view the table as "
            "(1, D, Gh, Gw), resize with mode='bicubic', align_corners=False and "
            "antialias=True, and flatten it back row-major"
        )
    passed(
        "check_resize_table",
        "3 resizes (shrinking, growing, 14×14 to 24×24) match resize_pos_embed.",
    )


@checker
def check_bias_table_prediction(predicted_bias_table: Any) -> None:
    """Grade a prediction: the size of the relative bias table of ViT-B/16 at 384×384.

    The package's :class:`~vit_tutorial.positional.RelativePositionBias` (BEiT's kind, over
    the whole grid) on the 24×24 grid, with 12 heads and the class token: ``(2·24 - 1)²``
    offsets and 3 entries for the class token, per head, 26,544 numbers, an exact count. The
    prediction must be exact; the usual slips (positions counted instead of offsets, 2G
    instead of 2G - 1, one head, no class-token entries, the 14×14 table of 224×224, the
    ``(h, T, T)`` bias it produces) are named when the prediction is exactly theirs.

    Raises:
        AssertionError: with the measured value, and the slip when one is recognised.

    Example:
        >>> check_bias_table_prediction(26544)
        Correct! check_bias_table_prediction: you predicted 26,544 numbers; measured:
        26,544 (RelativePositionBias(24, num_heads=12, num_prefix_tokens=1)).
    """
    G, h = 24, 12
    actual = RelativePositionBias(G, num_heads=h, num_prefix_tokens=1).table.numel()
    offsets = (2 * G - 1) ** 2  # 47² = 2,209
    slips = {
        offsets * h: "You left out the class token's 3 entries per head (class token to "
        "patch, patch to class token, class token to class token).",
        offsets + 3: f"That is one head's table; each of the {h} heads has its own.",
        offsets: f"That is one head's table without the class token's 3 entries; there are {h}.",
        (G * G + 3) * h: f"A table entry is an offset, not a position: along a {G}-patch axis "
        f"offsets run from -{G - 1} to {G - 1}, (2G - 1) of them, so (2G - 1)² per head.",
        G * G * h: "A table entry is an offset, not a position: (2G - 1)² per head, not G².",
        ((2 * G) ** 2 + 3) * h: f"Offsets run from -{G - 1} to {G - 1}: (2G - 1) per axis, not 2G.",
        ((2 * 14 - 1) ** 2 + 3) * h: "That is the table of the 14×14 grid at 224×224; this "
        "one spans the whole grid (BEiT's kind), so it grows with the image.",
        (G * G + 1) ** 2 * h: "That is the (h, T, T) bias that the index reads out of the "
        "table; the table holds one entry per offset.",
    }
    grade_prediction(
        "check_bias_table_prediction",
        "predicted_bias_table",
        predicted_bias_table,
        actual,
        what="numbers",
        tolerance=0,
        slips=[(why, count) for count, why in slips.items()],
        source="RelativePositionBias(24, num_heads=12, num_prefix_tokens=1)",
        otherwise="Count the 2D offsets of the grid per head, then the class token's entries.",
    )
