"""Checker for chapter 9's random masking: each image keeps a random subset of its tokens,
as :func:`~vit_tutorial.mae.random_masking` chooses them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    dtype_name,
    expect_tensor,
    grade_answer,
    passed,
    refuse,
    shape_of,
)
from vit_tutorial.mae import num_visible

__all__ = ["check_random_masking"]


def _kept_count_hint(n: int, ratio: float, kept: int) -> str:
    """Why keeping ``kept`` of ``n`` tokens is wrong: the package keeps int(n·(1 - ratio))."""
    keep = num_visible(n, ratio)
    others = {  # what a usual formula keeps, by its name
        "hiding int(N·mask_ratio)": n - int(n * ratio),
        "hiding round(N·mask_ratio)": n - round(n * ratio),
        "keeping round(N·(1 - mask_ratio))": round(n * (1 - ratio)),
        "hiding int(N·mask_ratio + 0.5), halves rounded up": n - int(n * ratio + 0.5),
    }
    yours = [name for name, k in others.items() if k == kept]
    which = f" Your N_keep comes from {'; or '.join(yours)}." if yours else ""
    return (
        f"you keep {kept} tokens per image ({n - kept} hidden); keep N_keep = "
        f"int(N·(1 - mask_ratio)) = int({n * (1 - ratio):g}) = {keep}, as MAE's code "
        f"(len_keep in models_mae.py) and the package do.{which}"
    )


def _masking_output(out: Any, b: int, n: int, d: int, keep: int, ratio: float, where: str):
    """``(visible, mask, ids_restore)`` of the right shapes; an AssertionError otherwise."""
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise AssertionError(
            f"for {where}: return three tensors, (visible, mask, ids_restore), got "
            f"{type(out).__name__}"
        )
    visible, mask, ids_restore = out
    if not isinstance(visible, Tensor) or visible.ndim != 3 or shape_of(visible)[::2] != (b, d):
        raise AssertionError(
            f"for {where}: visible must be (B, N_keep, D) = ({b}, {keep}, {d}), the kept tokens "
            f"of each image, got {shape_of(visible)}"
        )
    if visible.shape[1] != keep:
        raise AssertionError(f"for {where}: {_kept_count_hint(n, ratio, visible.shape[1])}")
    for what, value in [("mask", mask), ("ids_restore", ids_restore)]:
        expected = f"{what} must be (B, N) = ({b}, {n}), one entry per token in the original order"
        expect_tensor(value, (b, n), f"for {where}: {expected}, got {{got}}")
    return visible, mask, ids_restore


def _kept_positions(visible: Tensor, tokens: Tensor, where: str) -> list[list[int]]:
    """For each image, which of its tokens each row of ``visible`` is."""
    # (B, N_keep, B', N, D): each kept row against each token of each image
    exact = visible.double()[:, :, None, None] == tokens.double()[None, None]
    hits = exact.all(-1)  # (B, N_keep, B', N): row k of image b is token n of image b'
    positions = []
    for b, rows in enumerate(hits):
        found = []
        for k, row in enumerate(rows):
            if not row[b].any():
                elsewhere = row.any(-1).nonzero().flatten().tolist()
                source = f" (it is a token of image {elsewhere[0]})" if elsewhere else ""
                raise AssertionError(
                    f"for {where}: visible[{b}, {k}] is not one of image {b}'s tokens{source}: "
                    "each row of visible must be a whole token of its own image, "
                    "tokens.gather(1, ids_keep[..., None].expand(-1, -1, D))"
                )
            found.append(int(row[b].nonzero()[0]))
        twice = sorted({n for n in found if found.count(n) > 1})
        if twice:
            raise AssertionError(
                f"for {where}: image {b} keeps token {twice[0]} twice: keep N_keep distinct "
                "tokens, the first N_keep of a random permutation (noise.argsort(dim=1))"
            )
        positions.append(found)
    return positions


def _check_random_choice(positions: list[list[int]], n: int, where: str) -> None:
    """Not the first N_keep tokens, and not one subset for the whole batch."""
    b, keep = len(positions), len(positions[0])
    if keep == n:
        return
    first = all(sorted(p) == list(range(keep)) for p in positions)
    same = all(sorted(p) == sorted(positions[0]) for p in positions)
    chance = math.comb(n, keep) ** (b - 1)  # 1 in `chance` to draw one subset for all
    slips = {
        f"you keep the first N_keep = {keep} tokens of every image; keep a random subset instead: "
        "the N_keep tokens with the smallest of B×N uniform noises": first,
        "every image hides the same tokens, the same mask for the whole batch: draw the noise with "
        "shape (B, N), one row per image, so that each image gets its own random subset": (
            chance >= 10**6 and same
        ),
    }
    refuse(slips, f"for {where}")


def _check_mask(mask: Tensor, positions: list[list[int]], n: int, where: str) -> None:
    """``mask`` is 0.0 at the kept tokens and 1.0 elsewhere, in the original order."""
    if not mask.is_floating_point():
        raise AssertionError(
            f"for {where}: the mask must be float, 1.0 = hidden and 0.0 = visible, got "
            f"{dtype_name(mask.dtype)}; the loss multiplies by it (mask.float())"
        )
    want = torch.ones(len(positions), n, dtype=torch.float64)
    for b, kept in enumerate(positions):
        want[b, kept] = 0.0
    keep = len(positions[0])
    shuffled = torch.cat([torch.zeros(keep), torch.ones(n - keep)]).expand_as(want)
    slips = {
        "the mask is inverted: 1.0 marks a hidden token, 0.0 a visible one": 1 - want,
        "the mask is in shuffled order (its first N_keep entries are 0): put it back in the "
        "original order with mask.gather(1, ids_restore), so that mask[b, n] is about "
        "token n": shuffled,
    }
    hint = "mask[b, n] must be 0.0 where token n was kept, 1.0 where it was hidden"
    grade_answer(mask, want, f"for {where}", slips, otherwise=hint, atol=0.0)


def _check_ids_restore(ids: Tensor, positions: list[list[int]], n: int, where: str) -> None:
    """Row k of ``[visible, hidden]`` goes back to token ``positions[b][k]``."""
    if ids.dtype != torch.long:
        raise AssertionError(
            f"for {where}: ids_restore must hold int64 indices (for gather), got "
            f"{dtype_name(ids.dtype)}"
        )
    keep = len(positions[0])
    for b, kept in enumerate(positions):
        row = ids[b].tolist()
        if [row[p] for p in kept] == list(range(keep)) and sorted(row) == list(range(n)):
            continue
        if row[:keep] == kept and sorted(row) == list(range(n)):
            hint = (
                "that is ids_shuffle (where each shuffled token comes from); ids_restore "
                "is its inverse, ids_shuffle.argsort(dim=1)"
            )
        else:
            hint = (
                "ids_restore must put [visible, hidden] back in order: "
                "x.gather(1, ids_restore[..., None].expand(-1, -1, D)) with "
                "x = cat([visible, hidden], dim=1) gives the tokens in their places"
            )
        raise AssertionError(f"for {where}: for image {b}, {hint}")


def _check_generator(fn: Callable) -> None:
    """A seed gives one mask, another seed another: the noise comes from ``generator``."""
    tokens, ratio = torch.randn(2, 49, 8), 0.75
    where = "B=2 images, N=49 tokens, mask_ratio=0.75"
    masks = [
        call_safely(fn, (tokens.clone(), ratio, torch.Generator().manual_seed(s)), where)[1]
        for s in (7, 7, 8)
    ]
    slips = {
        "two calls with generators of the same seed hid different tokens: draw the noise from the "
        "generator passed in, torch.rand(B, N, generator=generator), not from torch's global one": (
            not torch.equal(masks[0], masks[1])
        ),
        "two calls with generators of different seeds hid the same tokens: draw new noise from the "
        "generator passed in on every call": torch.equal(masks[0], masks[2]),
    }
    refuse(slips, f"for {where}")


@checker
def check_random_masking(fn: Callable[[Tensor, float, torch.Generator], tuple]) -> None:
    """Grade a learner's ``fn(tokens, mask_ratio, generator) -> (visible, mask,
    ids_restore)``, MAE's per-image random masking.

    Each image keeps ``int(N·(1 - mask_ratio))`` of its ``(B, N, D)`` tokens, drawn from
    ``generator``; ``mask`` ``(B, N)`` is 1.0 where hidden, and ``ids_restore`` ``(B, N)`` puts
    ``cat([visible, hidden], dim=1)`` back in order.

    Example:
        >>> from vit_tutorial.mae import random_masking
        >>> check_random_masking(random_masking)
        Correct! check_random_masking: N_keep = int(N·(1 - mask_ratio)) tokens kept, a
        random subset for each image and seed, mask and ids_restore in the original order,
        on 7 cases.
    """
    cases = [  # B, N, D, mask_ratio, dtype: sizes where the usual counts disagree
        (4, 10, 3, 0.75, torch.float32),
        (2, 16, 3, 0.9, torch.float32),  # int(1.6) = 1 kept; rounding 14.4 keeps 2
        (3, 10, 4, 0.25, torch.float32),
        (4, 9, 3, 0.5, torch.float64),
        (2, 49, 8, 0.75, torch.float32),
        (3, 8, 2, 0.875, torch.float32),  # one token left
        (3, 6, 2, 0.0, torch.float32),
    ]
    for b, n, d, ratio, dtype in cases:
        tokens = torch.randn(b, n, d, dtype=dtype)
        keep = num_visible(n, ratio)
        where = f"B={b} images, N={n} tokens, mask_ratio={ratio}"
        out = call_safely(fn, (tokens.clone(), ratio, torch.Generator().manual_seed(n)), where)
        visible, mask, ids_restore = _masking_output(out, b, n, d, keep, ratio, where)
        positions = _kept_positions(visible, tokens, where)
        _check_random_choice(positions, n, where)
        _check_mask(mask, positions, n, where)
        _check_ids_restore(ids_restore, positions, n, where)
    _check_generator(fn)
    passed(
        "N_keep = int(N·(1 - mask_ratio)) tokens kept, a random subset for each image and seed, "
        f"mask and ids_restore in the original order, on {len(cases)} cases."
    )
