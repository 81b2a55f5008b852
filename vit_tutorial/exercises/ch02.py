"""Checkers for chapter 2: cutting an image into patches and back, the conv as a linear map,
and a predicted token count. (The class token and position table in front of the encoder
are graded by :mod:`vit_tutorial.exercises.ch02_class_token`.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    expect_tensor,
    grade_answer,
    grade_tensor,
    passed,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.patches import image_to_patches, pair, patch_grid

__all__ = ["check_image_to_patches", "check_patch_embedding", "check_patches_to_image"]
__all__ += ["check_tokens_prediction"]

#: The usual wrong cuts: what each means for image_to_patches, then for its inverse (the
#: pattern read backwards), then the pattern.
_WRONG_ORDERS = [
    (
        "each patch is flattened as (c p1 p2), all of the red channel first, which is the layout "
        "of a Conv2d weight (D, C, P, P); the convention here (timm, vit-pytorch) is (p1 p2 c), "
        "channel fastest. Both orders hold the same numbers, but a Linear that should equal the "
        "conv must see them in the same order as its weight.",
        "you read each patch as (c p1 p2), channel slowest, but image_to_patches flattens it "
        "as (p1 p2 c), channel fastest: R, G, B of a pixel are neighbours in the vector.",
        "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)",
    ),
    (
        "the patches are numbered column-major (down the first column, then the next); number "
        "them row-major, '(gh gw)', so that token n is grid row n // Gw and column n % Gw.",
        "you laid the patches out column-major (down the first column, then the next); "
        "patch n belongs in grid row n // Gw and column n % Gw: write '(gh gw)'.",
        "b c (gh p1) (gw p2) -> b (gw gh) (p1 p2 c)",
    ),
    (
        "each patch is transposed: flatten pixel rows first, '(p1 p2 c)', not '(p2 p1 c)'.",
        "each patch comes back transposed: its vector holds pixel rows first, '(p1 p2 c)', "
        "not '(p2 p1 c)'.",
        "b c (gh p1) (gw p2) -> b (gh gw) (p2 p1 c)",
    ),
    (
        "your 'patches' are strided samples of the whole image (every Gh-th pixel row), not "
        "contiguous blocks: write the pixel axis as '(gh p1)', grid index outside, pixel inside.",
        "you interleaved the patches (grid index inside, pixel index outside): each patch "
        "is a contiguous block, so write the height as '(gh p1)' and the width as '(gw p2)'.",
        "b c (p1 gh) (p2 gw) -> b (gh gw) (p1 p2 c)",
    ),
]


def _patch_slips(images: Tensor, patch_size: int | tuple[int, int]) -> list[tuple[str, Tensor]]:
    """What the usual wrong cuts return."""
    ph, pw = pair(patch_size)
    return [(why, rearrange(images, pattern, p1=ph, p2=pw)) for why, _, pattern in _WRONG_ORDERS]


@checker
def check_image_to_patches(fn: Callable[[Tensor, int | tuple[int, int]], Tensor]) -> None:
    """Grade a learner's ``fn(images, patch_size) -> patches``.

    ``(B, C, H, W)`` to ``(B, N, P_h·P_w·C)``, patches row-major and each flattened in
    ``(p1 p2 c)`` order, as :func:`vit_tutorial.patches.image_to_patches`.

    Example:
        >>> check_image_to_patches(image_to_patches)
        Correct! check_image_to_patches: row-major patches, (p1 p2 c) order, on 3 cases
        (square and non-square).
    """
    cases = [((2, 3, 8, 12), 4), ((1, 3, 12, 16), (4, 8)), ((2, 1, 6, 6), 3)]
    generator = torch.Generator().manual_seed(0)
    for shape, patch_size in cases:
        images = torch.randn(shape, generator=generator)
        want = image_to_patches(images, patch_size)
        grade_tensor(
            fn,
            (images, patch_size),
            want,
            f"images {shape}, patch size {patch_size}",
            _patch_slips,
            call=f"images of shape {shape}, image size {shape[2:]}, patch size {patch_size}",
            crash=". Non-square images and patches must work too.",
            expected=f"for images of shape {shape} and patch size {patch_size} the patches must "
            f"have shape {tuple(want.shape)} (B, N, P_h·P_w·C), got {{got}}",
            otherwise="the patches hold the wrong numbers; compare with "
            "'b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)'",
            atol=0.0,
        )
    passed(f"row-major patches, (p1 p2 c) order, on {len(cases)} cases (square and non-square).")


@checker
def check_patch_embedding(fn: Callable[[nn.Conv2d], Tensor]) -> None:
    """Grade ``fn(conv) -> W``: the conv's weight as the matrix of an equivalent Linear.

    ``W`` ``(D, P_h·P_w·C)``: ``image_to_patches(x, P) @ W.T + conv.bias`` equals the tokens
    of the patch-embedding ``conv``.

    Example:
        >>> check_patch_embedding(lambda conv: rearrange(conv.weight, "d c p1 p2 -> d (p1 p2 c)"))
        Correct! check_patch_embedding: image_to_patches(x) @ W.T + b equals the conv on 2 cases.
    """
    cases = [(3, 8, (4, 4), (8, 12)), (2, 6, (2, 4), (6, 8))]  # (C, D, P, image size)
    for C, D, patch_size, image_size in cases:
        torch.manual_seed(C)  # @checker restores the learner's random state afterwards
        conv = nn.Conv2d(C, D, patch_size, stride=patch_size)
        images = torch.randn(2, C, *image_size)
        what = f"Conv2d({C}, {D}, kernel_size={patch_size})"
        shape = (D, C * patch_size[0] * patch_size[1])
        W = call_safely(fn, (conv,), what)
        expect_tensor(W, shape, f"for {what} W must have shape {shape} (D, P_h·P_w·C), got {{got}}")
        with torch.no_grad():
            want = rearrange(conv(images), "b d gh gw -> b (gh gw) d")
        # In float64, so that a W of any floating dtype is judged by its values.
        patches = image_to_patches(images, patch_size).double()  # (B, N, P_h·P_w·C)
        flattened = (
            "conv.weight.flatten(1) flattens each filter in (c p1 p2) order, the Conv2d "
            "layout (D, C, P_h, P_w), but image_to_patches flattens patches in (p1 p2 c) "
            "order: rearrange the weight 'd c p1 p2 -> d (p1 p2 c)' so both orders agree",
            close(W.detach(), conv.weight.detach().flatten(1)),
        )
        grade_answer(  # no prefix: the messages name the conv themselves
            patches @ W.detach().double().T + conv.bias.detach().double(),  # (B, N, D)
            want,
            "",
            [flattened],
            otherwise=f"{what}: patches @ W.T + b differs from the conv by up to {{diff}}; "
            "check the order of p1, p2 and c",
        )
    passed(f"image_to_patches(x) @ W.T + b equals the conv on {len(cases)} cases.")


def _image_slips(
    patches: Tensor, patch_size: int | tuple[int, int], image_size: int | tuple[int, int]
) -> list[tuple[str, Tensor]]:
    """What the usual wrong ways back to images return."""
    (ph, pw), (H, W) = pair(patch_size), pair(image_size)
    sizes = dict(gh=H // ph, gw=W // pw, p1=ph, p2=pw)
    B, C = len(patches), patches.shape[-1] // (ph * pw)
    return [
        *[
            (why, rearrange(patches, " -> ".join(pattern.split(" -> ")[::-1]), **sizes))
            for _, why, pattern in _WRONG_ORDERS
        ],
        (
            "you reshaped the patches to (B, C, H, W): a reshape keeps the order of the "
            "numbers in memory, patch after patch, so it does not put a patch back as a "
            "block. Rearrange 'b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)'.",
            patches.reshape(B, C, H, W),
        ),
    ]


@checker
def check_patches_to_image(
    fn: Callable[[Tensor, int | tuple[int, int], int | tuple[int, int]], Tensor],
) -> None:
    """Grade ``fn(patches, patch_size, image_size) -> images``, the inverse of cutting.

    ``patches`` ``(B, N, P_h·P_w·C)`` are laid out as ``image_to_patches`` lays them out; the
    answer is the images ``(B, C, H, W)``; sizes are ints or ``(height, width)`` pairs.

    Example:
        >>> from vit_tutorial.patches import patches_to_image
        >>> check_patches_to_image(patches_to_image)
        Correct! check_patches_to_image: gives the images back exactly on 4 cases
        (square and non-square).
    """
    cases = [  # (images shape, patch_size, image_size)
        ((2, 3, 8, 12), 4, (8, 12)),
        ((1, 3, 12, 16), (4, 8), (12, 16)),
        ((2, 1, 6, 6), 3, 6),
        ((1, 2, 4, 10), (2, 5), (4, 10)),
    ]
    generator = torch.Generator().manual_seed(0)
    for shape, patch_size, image_size in cases:
        images = torch.randn(shape, generator=generator)
        patches = image_to_patches(images, patch_size)  # (B, N, P_h·P_w·C)
        case = (
            f"patches of shape {tuple(patches.shape)}, patch size {patch_size}, "
            f"image size {image_size}"
        )
        grade_tensor(
            fn,
            (patches, patch_size, image_size),
            images,
            case,
            _image_slips,
            expected=f"{case}: the images must have shape {shape} (B, C, H, W), got {{got}}",
            otherwise="the images hold the wrong numbers; undo image_to_patches with "
            "'b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)'.",
            atol=0.0,
        )
    passed(f"gives the images back exactly on {len(cases)} cases (square and non-square).")


@checker
def check_tokens_prediction(predicted_tokens: Any) -> None:
    """Grade a prediction: the tokens ViT-B/16 reads at 224×224 with its patch size halved to 8.

    Exact: ``(224 / 8)² = 784`` patches and the class token, 785; a slip is named only when
    the prediction is exactly its number (784 and 788 both lie within 1% of 785).

    Example:
        >>> check_tokens_prediction(785)
        Correct! check_tokens_prediction: you predicted 785 tokens; measured: 785
        (patch_grid(224, 8): 28×28 patches, plus the class token).
    """
    gh, gw = patch_grid(224, 8)
    N = gh * gw
    N_16 = patch_grid(224, 16)[0] ** 2  # 196, the chapter's ViT-B/16
    slips = {
        "You left out the class token: the encoder reads (N + 1) tokens.": N,
        "Halving P halves both sides of the grid, 14 to 28 patches each: N grows 4×, not 2×.": (
            2 * N_16 + 1
        ),
        "The class token is one token, however many patches: (4·196 + 1), not (4·197).": (
            4 * (N_16 + 1)
        ),
        "The number of tokens depends on P: N = HW/P².": N_16 + 1,
        f"That is the side of the grid, 224/8 = {gh}: N is Gh·Gw.": gh,
    }
    grade_prediction(
        "check_tokens_prediction",
        "predicted_tokens",
        predicted_tokens,
        N + 1,
        what="tokens",
        tolerance=0,
        slips=slips,
        source=f"patch_grid(224, 8): {gh}×{gw} patches, plus the class token",
        otherwise="Count the patches, then the class token.",
    )
