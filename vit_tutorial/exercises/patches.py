"""Checkers for chapter 2: cutting an image into patches and back, the conv as a linear map,
the class token and position table in front of the encoder, and a predicted token count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor, nn

from vit_tutorial.exercises._class_token import grade_forward, parameter_problem
from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    grade_prediction,
    passed,
    shape_of,
)
from vit_tutorial.patches import image_to_patches, pair, patch_grid

__all__ = [
    "check_class_token_and_position",
    "check_image_to_patches",
    "check_patch_embedding",
    "check_patches_to_image",
    "check_tokens_prediction",
]

_WRONG_PATCH_ORDERS = [
    (
        "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)",
        "each patch is flattened as (c p1 p2), all of the red channel first, which is the layout "
        "of a Conv2d weight (D, C, P, P); the convention here (timm, vit-pytorch) is (p1 p2 c), "
        "channel fastest. Both orders hold the same numbers, but a Linear that should equal the "
        "conv must see them in the same order as its weight",
    ),
    (
        "b c (gh p1) (gw p2) -> b (gw gh) (p1 p2 c)",
        "the patches are numbered column-major (down the first column, then the next); number "
        "them row-major, '(gh gw)', so that token n is grid row n // Gw and column n % Gw",
    ),
    (
        "b c (gh p1) (gw p2) -> b (gh gw) (p2 p1 c)",
        "each patch is transposed: flatten pixel rows first, '(p1 p2 c)', not '(p2 p1 c)'",
    ),
    (
        "b c (p1 gh) (p2 gw) -> b (gh gw) (p1 p2 c)",
        "your 'patches' are strided samples of the whole image (every Gh-th pixel row), not "
        "contiguous blocks: write the pixel axis as '(gh p1)', grid index outside, pixel inside",
    ),
]


@checker
def check_image_to_patches(fn: Callable[[Tensor, int | tuple[int, int]], Tensor]) -> None:
    """Grade a learner's ``fn(images, patch_size) -> patches``.

    ``images`` has shape ``(B, C, H, W)``; the answer must have shape ``(B, N, P_h·P_w·C)``
    with the patches numbered row-major and each flattened in ``(p1 p2 c)`` order, as
    :func:`vit_tutorial.patches.image_to_patches`.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_image_to_patches(image_to_patches)
        Correct! check_image_to_patches: row-major patches, (p1 p2 c) order, on 3 cases
        (square and non-square).
    """
    cases = [((2, 3, 8, 12), 4), ((1, 3, 12, 16), (4, 8)), ((2, 1, 6, 6), 3)]
    generator = torch.Generator().manual_seed(0)
    for shape, patch_size in cases:
        images = torch.randn(shape, generator=generator)
        try:
            with torch.no_grad():
                got = fn(images.clone(), patch_size)
        except Exception as error:  # reported to the learner
            raise AssertionError(
                f"fn crashed on images of shape {shape}, image size {shape[2:]}, patch size "
                f"{patch_size}: {type(error).__name__}: {error}. Non-square images and "
                f"patches must work too."
            ) from error
        want = image_to_patches(images, patch_size)
        if not isinstance(got, Tensor) or got.shape != want.shape:
            got_shape = shape_of(got)
            raise AssertionError(
                f"for images of shape {shape} and patch size {patch_size} the patches must have "
                f"shape {tuple(want.shape)} (B, N, P_h·P_w·C), got {got_shape}"
            )
        if close(got, want, atol=0.0):
            continue
        ph, pw = pair(patch_size)
        for pattern, explanation in _WRONG_PATCH_ORDERS:
            if close(got, rearrange(images, pattern, p1=ph, p2=pw), atol=0.0):
                raise AssertionError(f"images {shape}, patch size {patch_size}: {explanation}.")
        raise AssertionError(
            f"images {shape}, patch size {patch_size}: the patches hold the wrong numbers; "
            f"compare with 'b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)'"
        )
    passed(
        "check_image_to_patches",
        f"row-major patches, (p1 p2 c) order, on {len(cases)} cases (square and non-square).",
    )


@checker
def check_patch_embedding(fn: Callable[[nn.Conv2d], Tensor]) -> None:
    """Grade ``fn(conv) -> W``: the conv's weight as the matrix of an equivalent Linear.

    ``conv`` is a patch-embedding ``Conv2d(C, D, kernel_size=P, stride=P)``; ``W`` must
    have shape ``(D, P_h·P_w·C)`` such that ``image_to_patches(x, P) @ W.T + conv.bias``
    equals the convolution's tokens.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_patch_embedding(lambda conv: rearrange(conv.weight, "d c p1 p2 -> d (p1 p2 c)"))
        Correct! check_patch_embedding: image_to_patches(x) @ W.T + b equals the conv on 2 cases.
    """
    cases = [(3, 8, (4, 4), (8, 12)), (2, 6, (2, 4), (6, 8))]  # (C, D, P, image size)
    for C, D, patch_size, image_size in cases:
        torch.manual_seed(C)  # @checker restores the learner's random state afterwards
        conv = nn.Conv2d(C, D, patch_size, stride=patch_size)
        images = torch.randn(2, C, *image_size)
        W = call_safely(fn, (conv,), f"Conv2d({C}, {D}, kernel_size={patch_size})")
        with torch.no_grad():
            want = rearrange(conv(images), "b d gh gw -> b (gh gw) d")
        width = patch_size[0] * patch_size[1] * C
        if not isinstance(W, Tensor) or W.shape != (D, width):
            got_shape = shape_of(W)
            raise AssertionError(
                f"for Conv2d({C}, {D}, kernel_size={patch_size}) W must have "
                f"shape {(D, width)} (D, P_h·P_w·C), got {got_shape}"
            )
        # In float64, so that a W of any floating dtype is judged by its values.
        patches = image_to_patches(images, patch_size).double()  # (B, N, P_h·P_w·C)
        got = patches @ W.detach().double().T + conv.bias.detach().double()  # (B, N, D)
        if close(got, want, atol=1e-5):
            continue
        if close(W.detach(), conv.weight.detach().flatten(1)):
            raise AssertionError(
                "conv.weight.flatten(1) flattens each filter in (c p1 p2) order, the Conv2d "
                "layout (D, C, P_h, P_w), but image_to_patches flattens patches in (p1 p2 c) "
                "order: rearrange the weight 'd c p1 p2 -> d (p1 p2 c)' so both orders agree"
            )
        raise AssertionError(
            f"Conv2d({C}, {D}, kernel_size={patch_size}): patches @ W.T + b differs from the conv "
            f"by up to {(got - want).abs().max().item():.3g}; check the order of p1, p2 and c"
        )
    passed(
        "check_patch_embedding",
        f"image_to_patches(x) @ W.T + b equals the conv on {len(cases)} cases.",
    )


_WRONG_IMAGE_ORDERS = [
    (
        "b (gh gw) (c p1 p2) -> b c (gh p1) (gw p2)",
        "you read each patch as (c p1 p2), channel slowest, but image_to_patches flattens it "
        "as (p1 p2 c), channel fastest: R, G, B of a pixel are neighbours in the vector",
    ),
    (
        "b (gw gh) (p1 p2 c) -> b c (gh p1) (gw p2)",
        "you laid the patches out column-major (down the first column, then the next); "
        "patch n belongs in grid row n // Gw and column n % Gw: write '(gh gw)'",
    ),
    (
        "b (gh gw) (p2 p1 c) -> b c (gh p1) (gw p2)",
        "each patch comes back transposed: its vector holds pixel rows first, '(p1 p2 c)', "
        "not '(p2 p1 c)'",
    ),
    (
        "b (gh gw) (p1 p2 c) -> b c (p1 gh) (p2 gw)",
        "you interleaved the patches (grid index inside, pixel index outside): each patch "
        "is a contiguous block, so write the height as '(gh p1)' and the width as '(gw p2)'",
    ),
]


def _images_mistake(patches: Tensor, got: Tensor, sizes: tuple, shape: tuple) -> str | None:
    """The explanation of a wrong ``got``, rebuilt from ``patches``, or None."""
    (ph, pw), (H, W) = sizes
    gh, gw = H // ph, W // pw
    for pattern, explanation in _WRONG_IMAGE_ORDERS:
        if close(got, rearrange(patches, pattern, gh=gh, gw=gw, p1=ph, p2=pw), atol=0.0):
            return explanation
    if close(got, patches.reshape(shape), atol=0.0):
        return (
            "you reshaped the patches to (B, C, H, W): a reshape keeps the order of the "
            "numbers in memory, patch after patch, so it does not put a patch back as a "
            "block. Rearrange 'b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)'"
        )
    return None


@checker
def check_patches_to_image(
    fn: Callable[[Tensor, int | tuple[int, int], int | tuple[int, int]], Tensor],
) -> None:
    """Grade ``fn(patches, patch_size, image_size) -> images``, the inverse of cutting.

    ``patches`` has shape ``(B, N, P_h·P_w·C)`` in the layout of
    :func:`vit_tutorial.patches.image_to_patches` (row-major grid, ``(p1 p2 c)`` inside);
    the answer must be the images ``(B, C, H, W)`` they were cut from, for square and
    non-square images and patches, ``patch_size`` and ``image_size`` given as an int or
    an ``(height, width)`` pair.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

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
        got = call_safely(fn, (patches.clone(), patch_size, image_size), case)
        if not isinstance(got, Tensor) or got.shape != images.shape:
            got_shape = shape_of(got)
            raise AssertionError(
                f"{case}: the images must have shape {shape} (B, C, H, W), got {got_shape}"
            )
        if close(got, images, atol=0.0):
            continue
        sizes = (pair(patch_size), pair(image_size))
        explanation = _images_mistake(patches, got, sizes, shape) or (
            "the images hold the wrong numbers; undo image_to_patches with "
            "'b (gh gw) (p1 p2 c) -> b c (gh p1) (gw p2)'"
        )
        raise AssertionError(f"{case}: {explanation}.")
    passed(
        "check_patches_to_image",
        f"gives the images back exactly on {len(cases)} cases (square and non-square).",
    )


@checker
def check_class_token_and_position(fn: Callable[[int, int], nn.Module]) -> None:
    """Grade ``fn(num_patches, dim) -> module``: the class token and the position table.

    The module must hold two parameters, ``cls_token`` of shape ``(1, 1, D)`` and
    ``pos_embed`` of shape ``(1, N + 1, D)``, and its forward must turn ``(B, N, D)`` patch
    tokens into ``[cls; tokens] + pos_embed`` of shape ``(B, N + 1, D)``, for any batch size
    (equation (1) of the ViT paper). The checker copies known numbers into both parameters,
    runs batches of two sizes, and checks that gradients reach both. It names a class token
    with a batch dimension, a table of N rows, positions added before the concatenation,
    the class token put last, and torch.cat along the wrong axis; ``expand`` and ``repeat``
    both pass.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> class TokenInput(nn.Module):
        ...     def __init__(self, num_patches, dim):
        ...         super().__init__()
        ...         self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        ...         self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        ...     def forward(self, tokens):
        ...         cls = self.cls_token.expand(len(tokens), -1, -1)
        ...         return torch.cat([cls, tokens], dim=1) + self.pos_embed
        >>> check_class_token_and_position(TokenInput)
        Correct! check_class_token_and_position: one class token in front for any batch
        size, then the (1, N + 1, D) table added, on 2 sizes; gradients reach both.
    """
    generator = torch.Generator().manual_seed(0)
    for N, D in [(6, 8), (4, 12)]:
        what = f"fn(num_patches={N}, dim={D})"
        module = call_safely(fn, (N, D), what, grad=True)
        if not isinstance(module, nn.Module):
            raise AssertionError(f"{what} must return an nn.Module, got {type(module).__name__}")
        problem = parameter_problem(module, N, D)
        if problem is not None:
            raise AssertionError(f"{what}: {problem}")
        cls = torch.randn(1, 1, D, generator=generator)
        pos = torch.randn(1, N + 1, D, generator=generator)
        with torch.no_grad():
            module.cls_token.copy_(cls.reshape(module.cls_token.shape))
            module.pos_embed.copy_(pos.reshape(module.pos_embed.shape))
        for batch in (2, 3):
            grade_forward(module, torch.randn(batch, N, D, generator=generator), cls, pos, what)
    passed(
        "check_class_token_and_position",
        "one class token in front for any batch size, then the (1, N + 1, D) table added, "
        "on 2 sizes; gradients reach both.",
    )


@checker
def check_tokens_prediction(predicted_tokens: Any) -> None:
    """Grade a prediction: the tokens ViT-B/16 reads at 224×224 with its patch size halved to 8.

    The count is exact: ``N = (224 / 8)² = 784`` patches and the class token, 785 tokens. The
    prediction must be exact; the usual slips (the class token left out, the grid doubled
    instead of its two sides, the class token multiplied with the patches, the patch size
    thought not to matter) are named when the prediction is exactly theirs (784 and 788 are
    different slips, although both lie within 1% of 785).

    Raises:
        AssertionError: with the measured value, and the slip when one is recognised.

    Example:
        >>> check_tokens_prediction(785)
        Correct! check_tokens_prediction: you predicted 785 tokens; measured: 785
        (patch_grid(224, 8): 28×28 patches, plus the class token).
    """
    gh, gw = patch_grid(224, 8)
    N = gh * gw
    N_16 = patch_grid(224, 16)[0] ** 2  # 196, the chapter's ViT-B/16
    slips = {
        N: "You left out the class token: the encoder reads (N + 1) tokens.",
        2 * N_16 + 1: "Halving P halves both sides of the grid, 14 to 28 patches each: N "
        "grows 4×, not 2×.",
        4 * (N_16 + 1): "The class token is one token, however many patches: (4·196 + 1), "
        "not (4·197).",
        N_16 + 1: "The number of tokens depends on P: N = HW/P².",
        gh: f"That is the side of the grid, 224/8 = {gh}: N is Gh·Gw.",
    }
    grade_prediction(
        "check_tokens_prediction",
        "predicted_tokens",
        predicted_tokens,
        N + 1,
        what="tokens",
        tolerance=0,
        slips=[(why, count) for count, why in slips.items()],
        source=f"patch_grid(224, 8): {gh}×{gw} patches, plus the class token",
        otherwise="Count the patches, then the class token.",
    )
