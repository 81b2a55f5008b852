"""Checkers for chapter 9: MAE's loss on normalised hidden patches, and the decoder's input
with mask tokens, as :mod:`vit_tutorial.mae` computes them, and a prediction of what MAE
pre-training adds with 100 labels per class, graded against the committed runs. (The random
masking's checker is in :mod:`vit_tutorial.exercises.ch09_masking`.)"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import torch
from einops import rearrange
from torch import Tensor

from vit_tutorial.exercises._common import (
    checker,
    dtype_name,
    grade_loss,
    grade_tensor,
    passed,
    shape_of,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.losses import masked_patch_loss
from vit_tutorial.mae import normalized_patches
from vit_tutorial.notebook import repository_file
from vit_tutorial.patches import image_to_patches

__all__ = ["check_mae_loss", "check_decoder_tokens", "check_mae_gain_prediction"]


def _mae_loss(pred: Tensor, images: Tensor, mask: Tensor, patch_size: int) -> Tensor:
    """The reference: the package's loss on the package's targets."""
    return masked_patch_loss(pred, normalized_patches(images, patch_size), mask)


def _normalised(x: Tensor, dims: tuple[int, ...], unbiased: bool = True) -> Tensor:
    mean, var = x.mean(dims, keepdim=True), x.var(dims, keepdim=True, unbiased=unbiased)
    return (x - mean) / (var + 1e-6).sqrt()


def _wrong_targets(images: Tensor, p: int) -> dict[str, Tensor | list[Tensor]]:
    """The targets ``(B, N, L)`` that each usual mistake makes, with its explanation."""
    patches = image_to_patches(images, p)  # (B, N, L)
    centred = patches - patches.mean(-1, keepdim=True)
    own = "normalise each patch by its own mean and variance (over its last axis)"
    image, batch = (1, 2), (0, 1, 2)  # the axes of (B, N, L) of one image, of the batch
    layout = "cut them as image_to_patches does, 'b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)'"

    def cut(pattern: str) -> Tensor:
        return _normalised(rearrange(images, pattern, p1=p, p2=p), (-1,))

    return {
        "the per-patch normalisation is missing: the target is each patch minus its "
        "mean, over sqrt(var + 1e-6), not the raw pixels": patches,
        **{
            f"the target is normalised over {over}: {own}": [
                _normalised(patches, dims, unbiased) for unbiased in (True, False)
            ]
            for over, dims in [("each whole image", image), ("the whole batch", batch)]
        },
        f"the variance is the biased one (divided by L = {patches.shape[-1]}): MAE, "
        "like torch.var by default, divides by L - 1 "
        "(unbiased=True)": _normalised(patches, (-1,), unbiased=False),
        "you divided by the variance: divide by its square root, sqrt(var + 1e-6)": (
            centred / (patches.var(-1, keepdim=True) + 1e-6)
        ),
        f"the patches are flattened in (c p1 p2) order: {layout}": cut(
            "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)"
        ),
        f"the patches are numbered column-major: {layout}": cut(
            "b c (gh p1) (gw p2) -> b (gw gh) (p1 p2 c)"
        ),
    }


def _loss_slips(pred: Tensor, images: Tensor, mask: Tensor, p: int) -> dict[str, Any]:
    """The loss that each usual mistake computes."""
    pred, images, mask = pred.double(), images.double(), mask.double()
    target = normalized_patches(images, p)
    squared = (pred - target).pow(2)  # (B, N, L)
    hidden = (squared.mean(-1) * mask).sum()

    def loss(wrong: Tensor | list[Tensor]) -> Tensor | list[Tensor]:  # on a slip's targets
        if isinstance(wrong, list):
            return [masked_patch_loss(pred, t, mask) for t in wrong]
        return masked_patch_loss(pred, wrong, mask)

    return {
        "the loss is over all patches: average over the hidden ones only (mask == 1), "
        "the ones the encoder did not see": squared.mean(),
        "the loss is over the visible patches: mask is 1.0 on the hidden ones, the "
        "ones to average over": masked_patch_loss(pred, target, 1 - mask),
        "you divided by the number of all patches: divide by the number of hidden "
        "ones, mask.sum()": hidden / mask.numel(),
        "you summed the squared errors over each patch's pixels: take their mean, the "
        "per-patch MSE": (squared.sum(-1) * mask).sum() / mask.sum(),
        "you summed over the hidden patches: divide by their number, mask.sum()": hidden,
        **{why: loss(wrong) for why, wrong in _wrong_targets(images, p).items()},
    }


def _loss_case(b: int, c: int, h: int, w: int, p: int, hidden: int, dtype: torch.dtype):
    """Predictions, images (patch 0 of image 0 blank and hidden) and a mask hiding
    ``hidden`` patches of each image."""
    n = (h // p) * (w // p)
    pred = torch.randn(b, n, p * p * c, dtype=dtype)
    images = 2 * torch.randn(b, c, h, w, dtype=dtype) + torch.randn(b, 1, 1, 1, dtype=dtype)
    images[0, :, :p, :p] = 0.0  # a blank patch, as Fashion-MNIST's background: variance 0
    order = torch.rand(b, n).argsort(dim=1)
    order[0] = torch.cat([torch.tensor([0]), order[0][order[0] != 0]])  # patch 0 hidden
    mask = torch.zeros(b, n, dtype=dtype).scatter_(1, order[:, :hidden], 1.0)
    return pred, images, mask


@checker
def check_mae_loss(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> None:
    """Grade a learner's ``fn(pred, images, mask, patch_size) -> loss``, MAE's loss.

    ``pred`` ``(B, N, P·P·C)``, ``mask`` ``(B, N)`` 1.0 on the hidden patches: the loss equals
    :func:`~vit_tutorial.losses.masked_patch_loss` on
    :func:`~vit_tutorial.mae.normalized_patches`; float32 and float64, one patch blank.

    Example:
        >>> check_mae_loss(_mae_loss)
        Correct! check_mae_loss: the mean squared error on the hidden patches, each
        normalised by its own mean and variance, on 3 cases (float32 and float64).
    """
    cases = [  # B, C, H, W, P, hidden patches per image, dtype
        (4, 1, 4, 6, 2, 4, torch.float32),
        (2, 3, 4, 4, 2, 3, torch.float32),
        (3, 1, 8, 12, 4, 4, torch.float64),
    ]
    for b, c, h, w, p, hidden, dtype in cases:
        pred, images, mask = _loss_case(b, c, h, w, p, hidden, dtype)
        grade_loss(
            fn,
            (pred, images, mask, p),
            _mae_loss(pred, images, mask, p),
            f"B={b}, C={c}, {h}×{w} images, P={p}, {dtype_name(dtype)}",
            _loss_slips,
            per_image="average the per-patch errors of all the hidden patches into one number",
            otherwise="compare with the mean over hidden patches of ((pred - target)²).mean(-1), "
            "target = (p - mean) / sqrt(var + 1e-6) for each patch p of image_to_patches",
            atol=1e-4,
            not_finite="a blank patch (Fashion-MNIST's background) has variance 0, so put the "
            "eps under the square root: (p - mean) / sqrt(var + 1e-6)",
        )
    passed(
        "the mean squared error on the hidden patches, each normalised by its own mean and "
        f"variance, on {len(cases)} cases (float32 and float64)."
    )


_ONE_IMAGE = (
    "; it worked for one image: the mask tokens must be copied for every "
    "image, mask_token.expand(B, N - N_keep, -1), mask_token being (1, 1, D')"
)


def _decoder_tokens(latent: Tensor, mask_token: Tensor, ids_restore: Tensor) -> Tensor:
    """The reference, as :meth:`~vit_tutorial.mae.MaskedAutoencoder.forward_decoder`."""
    b, k, d = latent.shape
    hidden = mask_token.expand(b, ids_restore.shape[1] - k, -1)  # (B, N - N_keep, D')
    x = torch.cat([latent, hidden], dim=1)  # [visible, hidden], in shuffled order
    return x.gather(1, ids_restore[:, :, None].expand(-1, -1, d))  # original order


def _decoder_slips(latent: Tensor, mask_token: Tensor, ids_restore: Tensor) -> dict[str, Tensor]:
    """The tokens that each usual mistake makes."""
    b, k, d = latent.shape
    hidden = mask_token.expand(b, ids_restore.shape[1] - k, -1)  # (B, N - N_keep, D')
    index = ids_restore[:, :, None].expand(-1, -1, d)
    shuffled = torch.cat([latent, hidden], dim=1)
    ids_shuffle = ids_restore.argsort(dim=1)
    return {
        "the tokens are left in shuffled order, [visible, hidden]: unshuffle them "
        "with x.gather(1, ids_restore[..., None].expand(-1, -1, D'))": shuffled,
        "you unshuffled with ids_shuffle = ids_restore.argsort(dim=1), which shuffles again: "
        "gather with ids_restore itself": _decoder_tokens(latent, mask_token, ids_shuffle),
        "you put the mask tokens first: append them after the visible tokens, "
        "cat([latent, mask_tokens], dim=1), the "
        "order ids_restore undoes": torch.cat([hidden, latent], dim=1).gather(1, index),
        "you gathered along the features (dim 2): gather along the tokens, dim 1, "
        "with the index expanded over the features": shuffled.gather(2, index),
        "the hidden places hold zeros: fill them with copies of mask_token, "
        "mask_token.expand(B, N - N_keep, -1)": (
            _decoder_tokens(latent, torch.zeros_like(mask_token), ids_restore)
        ),
    }


def _decoder_shape(where: str, shape: tuple, got: Any) -> str:
    """Why ``got`` is not the decoder's tokens, of ``shape``."""
    if isinstance(got, Tensor) and got.shape == (*shape[:2], 1):
        return (
            f"for {where}: the result is {shape_of(got)}: expand gather's index over the "
            "features, ids_restore[..., None].expand(-1, -1, D')"
        )
    return f"for {where}: return the decoder's tokens (B, N, D') = {shape}, got {shape_of(got)}"


@checker
def check_decoder_tokens(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """Grade a learner's ``fn(latent, mask_token, ids_restore) -> tokens``, the decoder's
    input.

    ``latent`` ``(B, N_keep, D')`` and ``N - N_keep`` copies of ``mask_token`` ``(1, 1, D')``,
    put back in the original order with ``ids_restore`` ``(B, N)``: ``(B, N, D')``, as
    :meth:`~vit_tutorial.mae.MaskedAutoencoder.forward_decoder`; float32 and float64.

    Example:
        >>> check_decoder_tokens(_decoder_tokens)
        Correct! check_decoder_tokens: the visible tokens and N - N_keep mask tokens, back in
        the original order, on 4 cases (float32 and float64).
    """
    cases = [  # B, N, N_keep, D', dtype
        (1, 6, 2, 8, torch.float32),
        (3, 8, 3, 12, torch.float32),
        (2, 6, 1, 8, torch.float64),
        (2, 5, 5, 8, torch.float32),  # nothing hidden
    ]
    one_passed = False
    for b, n, k, d, dtype in cases:
        latent = torch.randn(b, k, d, dtype=dtype)
        mask_token = torch.randn(1, 1, d, dtype=dtype)
        ids_restore = torch.rand(b, n).argsort(dim=1).argsort(dim=1)
        where = f"B={b}, N={n} tokens, N_keep={k} visible, D'={d}, {dtype_name(dtype)}"
        grade_tensor(
            fn,
            (latent, mask_token, ids_restore),
            _decoder_tokens(latent, mask_token, ids_restore),
            f"for {where}",
            _decoder_slips,
            call=where,
            crash=_ONE_IMAGE if one_passed else "",
            expected=functools.partial(_decoder_shape, where, (b, n, d)),
            otherwise="the visible tokens must land where ids_restore sends them, and mask_token "
            "in every other place",
        )
        one_passed |= b == 1
    passed(
        "the visible tokens and N - N_keep mask tokens, back in the original order, on "
        f"{len(cases)} cases (float32 and float64)."
    )


# ---------------------------------------------------------------------------------------
# Predict, then measure: what pre-training adds

PRETRAINING = "benchmarks/results/pretraining.json"
"""Chapter 9's committed runs: pre-training once, fine-tuning and probing with three seeds."""


def finetuned_accuracy(start: str, per_class: int = 100) -> float:
    """The mean test accuracy, in %, of the ViT fine-tuned from ``start`` (``'scratch'``,
    ``'mae'`` or ``'supervised'``) with ``per_class`` labelled images per class, in the
    ``target`` part of :data:`PRETRAINING` (3 seeds)."""
    summary = json.loads(repository_file(PRETRAINING).read_text())["target"]["summary"]
    wanted = ("finetune", start, per_class)
    (row,) = [s for s in summary if (s["mode"], s["start"], s["per_class"]) == wanted]
    return 100 * row["mean"]


@checker
def check_mae_gain_prediction(predicted: Any) -> None:
    """Grade a prediction: the points MAE pre-training adds to the ViT fine-tuned on 100
    images per class, over scratch, by the 3-seed means of :data:`PRETRAINING`; ±30% passes."""
    mae, scratch = finetuned_accuracy("mae"), finetuned_accuracy("scratch")
    gain = mae - scratch
    slips = {
        f"give it in points ({gain:.1f}), not as a fraction": gain / 100,
        f"that is the accuracy of the pre-trained ViT ({mae:.1f}%): predict its lead": mae,
        "that is the sign the other way: the pre-trained start is ahead": -gain,
    }
    grade_prediction(
        "check_mae_gain_prediction",
        "predicted_mae_gain",
        predicted,
        gain,
        what="points",
        tolerance=0.3,
        slips=slips,
        source=f"MAE {mae:.1f}% against scratch {scratch:.1f}%, pretraining.json",
    )
