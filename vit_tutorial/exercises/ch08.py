"""Checkers for chapter 8: DeiT's hard-label distillation loss, Mixup as torchvision's
``v2.MixUp`` pairs a batch, and a prediction of the ViT's accuracy on 1,000 images, graded
against the committed study. (The greyscale ResNet-18 baseline's checker is in
:mod:`vit_tutorial.exercises.ch08_resnet`.)"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from vit_tutorial.exercises._common import (
    call_safely,
    checker,
    close,
    dtype_name,
    grade_answer,
    grade_loss,
    passed,
)
from vit_tutorial.exercises._predictions import grade_prediction
from vit_tutorial.notebook import repository_file

__all__ = ["check_distillation_loss", "check_mixup", "check_vit_accuracy_prediction"]


def _distillation_loss(
    cls_logits: Tensor,
    dist_logits: Tensor,
    labels: Tensor,
    teacher_logits: Tensor,
    label_smoothing: float,
) -> Tensor:
    """The reference: the mean of the class head's loss on the true labels (smoothed) and
    the distillation head's on the teacher's classes (not smoothed)."""
    teacher_classes = teacher_logits.argmax(-1)
    return (
        F.cross_entropy(cls_logits, labels, label_smoothing=label_smoothing)
        + F.cross_entropy(dist_logits, teacher_classes)
    ) / 2


def _distillation_slips(
    cls_logits: Tensor, dist_logits: Tensor, labels: Tensor, teacher_logits: Tensor, eps: float
) -> dict[str, Any]:
    """The loss that each usual mistake computes."""
    cls, dist, teacher = (t.double() for t in (cls_logits, dist_logits, teacher_logits))
    y, t = labels, teacher.argmax(-1)
    ce = F.cross_entropy
    class_term, dist_term = ce(cls, y, label_smoothing=eps), ce(dist, t)
    soft = (
        "the distillation head learns the teacher's hard labels, teacher_logits.argmax(-1) "
        "(DeiT's hard distillation), not its probabilities softmax(teacher_logits)"
    )
    kl = F.kl_div(
        dist.log_softmax(-1), teacher.log_softmax(-1), reduction="batchmean", log_target=True
    )
    swapped = (
        "the heads are swapped: the class head (cls_logits) learns the true labels, with "
        "label smoothing; the distillation head (dist_logits) learns the teacher's classes"
    )
    return {
        soft: [(class_term + ce(dist, teacher.softmax(-1))) / 2, (class_term + kl) / 2],
        "label smoothing is for the class head only: the distillation head learns the "
        "teacher's classes unsmoothed, F.cross_entropy(dist_logits, "
        "teacher_classes)": (class_term + ce(dist, t, label_smoothing=eps)) / 2,
        "you summed the two terms: the loss is their mean, (class term + distillation "
        "term) / 2": class_term + dist_term,
        swapped: [
            (ce(dist, y, label_smoothing=eps) + ce(cls, t)) / 2,
            (ce(dist, y) + ce(cls, t, label_smoothing=eps)) / 2,
        ],
        "the class term uses the teacher's logits: it must score the student's class "
        "head, cls_logits, on the true labels; the teacher only gives the distillation "
        "head its targets": (ce(teacher, y, label_smoothing=eps) + dist_term) / 2,
        "both heads learn the teacher's classes: the class head learns the true labels": (
            (ce(cls, t, label_smoothing=eps) + dist_term) / 2
        ),
        "both heads learn the true labels: the distillation head learns the teacher's "
        "classes, teacher_logits.argmax(-1)": (class_term + ce(dist, y)) / 2,
        "the distillation term is missing: add the distillation head's loss": class_term,
        "the class term is missing: add the class head's loss": dist_term,
    }


@checker
def check_distillation_loss(fn: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]) -> None:
    """Grade a learner's ``fn(cls_logits, dist_logits, labels, teacher_logits,
    label_smoothing) -> loss``, DeiT's hard-label distillation loss.

    ``(CE(cls_logits, labels, label_smoothing) + CE(dist_logits, teacher_logits.argmax(-1))) / 2``,
    as :class:`~vit_tutorial.losses.HardDistillation`; inputs in float32 and float64.

    Example:
        >>> check_distillation_loss(_distillation_loss)
        Correct! check_distillation_loss: DeiT's hard-label distillation loss, on 4
        cases (float32 and float64).
    """
    cases = [  # B, K, label smoothing, dtype
        (8, 10, 0.1, torch.float32),
        (5, 3, 0.0, torch.float32),
        (6, 7, 0.1, torch.float64),
        (4, 5, 0.0, torch.float64),
    ]
    for B, K, eps, dtype in cases:
        cls_logits, dist_logits, teacher_logits = (
            3 * torch.randn(B, K, dtype=dtype) for _ in "abc"
        )
        labels = torch.randint(K, (B,))
        args = (cls_logits, dist_logits, labels, teacher_logits, eps)
        grade_loss(
            fn,
            args,
            _distillation_loss(*args),
            f"B={B} images, K={K} classes, label_smoothing={eps}, {dtype_name(dtype)}",
            _distillation_slips,
            per_image="each head's cross-entropy is a mean over the batch, a single number",
            otherwise="compare with DeiT's formula: (CE(cls_logits, labels, smoothing) + "
            "CE(dist_logits, teacher_logits.argmax(-1))) / 2",
        )
    passed(f"DeiT's hard-label distillation loss, on {len(cases)} cases (float32 and float64).")


_FORMULA = "lam·one_hot(labels) + (1 - lam)·one_hot(labels.roll(1, 0))"


def _mixup(images: Tensor, labels: Tensor, lam: float, num_classes: int) -> tuple[Tensor, Tensor]:
    """The reference: each image (and label) mixed with the previous one in the batch."""
    one_hot = F.one_hot(labels, num_classes).to(images.dtype)
    mixed = lam * images + (1 - lam) * images.roll(1, 0)
    return mixed, lam * one_hot + (1 - lam) * one_hot.roll(1, 0)


def _partners(mixed: Tensor, originals: Tensor, lam: float) -> list[int] | None:
    """For each row ``i`` of ``mixed``, the ``j`` with ``mixed[i] = lam·originals[i] +
    (1 - lam)·originals[j]``; None when some row is no such mix."""
    rest = (mixed.double() - lam * originals.double()) / (1 - lam)
    partners = []
    for row in rest:
        j = next((j for j, x in enumerate(originals) if close(row, x, atol=1e-4)), None)
        if j is None:
            return None
        partners.append(j)
    return partners


def _pairing_hint(partners: list[int] | None, what: str) -> str | None:
    """Why pairing row i with row ``partners[i]`` is wrong (row i - 1 is right)."""
    B = len(partners) if partners is not None else 0
    if partners is None or partners == [(i - 1) % B for i in range(B)]:
        return None
    if partners == list(range(B)):
        return f"the {what} are not mixed: each is returned as it came"
    if partners == [(i + 1) % B for i in range(B)]:
        return (
            f"you paired {what[:-1]} i with {what[:-1]} i + 1, roll(-1, 0): torchvision's "
            f"MixUp pairs it with {what[:-1]} i - 1, {what}.roll(1, 0)"
        )
    if partners == list(range(B))[::-1]:
        return (
            f"flip(0) pairs {what[:-1]} i with {what[:-1]} B - 1 - i, as timm's Mixup does; here "
            f"pair it with {what[:-1]} i - 1, {what}.roll(1, 0), as torchvision's v2.MixUp does"
        )
    return (
        f"{what} 0 to {B - 1} are mixed with {what} {partners}, not "
        f"{[(i - 1) % B for i in range(B)]} (each with {what[:-1]} i - 1): a random "
        f"permutation pairs the batch differently on every call; pair the batch with "
        f"itself rolled by one, {what}.roll(1, 0), as torchvision's v2.MixUp does"
    )


def _soft_labels_shape(where: str, B: int, K: int, soft: Tensor) -> str:
    """Why ``soft`` is not a batch of ``B`` soft labels over ``K`` classes."""
    if soft.shape == (B,):
        return (
            f"for {where}: the labels are not mixed: you returned class indices, shape "
            f"({B},); return soft labels of shape (B, num_classes) = ({B}, {K}): {_FORMULA}"
        )
    if soft.ndim == 2 and len(soft) == B and soft.shape[1] != K:
        return (
            f"for {where}: the soft labels have {soft.shape[1]} columns, not num_classes = "
            f"{K}: pass it to F.one_hot(labels, num_classes); without it, one_hot makes "
            "max(labels) + 1 columns, which depends on the batch"
        )
    return (
        f"for {where}: the soft labels must have shape (B, num_classes) = ({B}, {K}), "
        f"got {tuple(soft.shape)}"
    )


def _check_mixup(out: Any, images: Tensor, labels: Tensor, lam: float, K: int, where: str) -> None:
    """Grade the mixed images and the soft labels of one batch."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise AssertionError(
            f"for {where}: return two tensors, (mixed_images, soft_labels), got "
            f"{type(out).__name__}"
        )
    rolled = images.roll(1, 0)
    grade_answer(
        out[0],
        lam * images + (1 - lam) * rolled,
        f"for {where}",
        [
            (
                "1 - lam is on the wrong side: each image keeps weight lam and its partner, "
                "images.roll(1, 0), gets 1 - lam: lam·images + (1 - lam)·images.roll(1, 0)",
                (1 - lam) * images + lam * rolled,
            )
        ],
        expected=f"for {where}: the mixed images must have the images' shape "
        f"{tuple(images.shape)}, got {{got}}",
        otherwise=lambda got: (
            _pairing_hint(_partners(got, images, lam), "images")
            or "compare with lam·images + (1 - lam)·images.roll(1, 0)"
        ),
    )
    one_hot = F.one_hot(labels, K).double()
    grade_answer(
        out[1],
        lam * one_hot + (1 - lam) * one_hot.roll(1, 0),
        f"for {where}",
        {
            f"the labels are not mixed: you returned one-hot labels, but mixed image i is "
            f"lam of image i and 1 - lam of image i - 1, so its label is {_FORMULA}": one_hot,
            f"1 - lam is on the wrong side of the labels: {_FORMULA}": (
                (1 - lam) * one_hot + lam * one_hot.roll(1, 0)
            ),
        },
        not_tensor=f"for {where}: the soft labels must be a tensor (B, num_classes), got {{got}}",
        expected=functools.partial(_soft_labels_shape, where, len(labels), K),
        otherwise=lambda got: (
            f"the labels are not paired as the images: {pairing}"
            if (pairing := _pairing_hint(_partners(got, one_hot, lam), "labels"))
            else f"compare with {_FORMULA}"
        ),
    )


@checker
def check_mixup(fn: Callable[[Tensor, Tensor, float, int], tuple[Tensor, Tensor]]) -> None:
    """Grade a learner's ``fn(images, labels, lam, num_classes) -> (mixed, soft_labels)``.

    Mixup as torchvision's ``v2.MixUp`` pairs the batch, with itself rolled by one:
    ``mixed = lam·images + (1 - lam)·images.roll(1, 0)``, the one-hot labels likewise,
    ``(B, num_classes)``; images in float32 and float64.

    Example:
        >>> check_mixup(_mixup)
        Correct! check_mixup: images and labels mixed as torchvision's v2.MixUp mixes
        them, on 3 batches (float32 and float64).
    """
    cases = [  # B, (C, H, W), K, lam, dtype
        (4, (1, 6, 6), 10, 0.7, torch.float32),
        (4, (3, 4, 4), 5, 0.2, torch.float32),
        (3, (1, 5, 5), 4, 0.9, torch.float64),
    ]
    for B, shape, K, lam, dtype in cases:
        images = torch.randn(B, *shape, dtype=dtype)
        # Distinct classes, so that each pairing shows; K - 1 left out, so that a one-hot
        # without num_classes comes out too narrow.
        labels = torch.randperm(K - 1)[:B]
        where = f"B={B} images, num_classes={K}, lam={lam}, {dtype_name(dtype)}"
        out = call_safely(fn, (images.clone(), labels.clone(), lam, K), where)
        _check_mixup(out, images, labels, lam, K, where)
    passed(
        "images and labels mixed as torchvision's v2.MixUp mixes them, on "
        f"{len(cases)} batches (float32 and float64)."
    )


# ---------------------------------------------------------------------------------------
# Predict, then measure: the ViT on 1,000 images

STUDY = "benchmarks/results/fashion_mnist_study.json"
"""Chapter 8's committed study: every run of the data-scaling race, three seeds each."""


def study_accuracy(model: str, train_size: int) -> float:
    """The mean test accuracy, in %, of ``model`` trained on ``train_size`` images in
    :data:`STUDY` (3 seeds, no augmentation, mean pooling, the study's step budget)."""
    study = json.loads(repository_file(STUDY).read_text())
    wanted = (model, train_size, "none", "mean", False)
    fields = ("model", "train_size", "augmentation", "pool", "distilled")
    (row,) = [c for c in study["configurations"] if tuple(c[f] for f in fields) == wanted]
    return 100 * row["mean_test_accuracy"]


@checker
def check_vit_accuracy_prediction(predicted: Any) -> None:
    """Grade a prediction: the plain ViT's test accuracy in %, trained on 1,000 images, the
    mean of its 3 seeds in :data:`STUDY`; ±4% (about 3 points) passes."""
    actual = study_accuracy("vit", 1000)
    full = study_accuracy("vit", 55_000)
    slips = {
        "write it in percent (74.4 for 74.4%), not as a fraction": actual / 100,
        "that is the test error, 100 minus the accuracy: predict the accuracy": 100 - actual,
        f"that is about what the ViT reaches with all 55,000 images ({full:.1f}%): with "
        f"1,000 it loses {full - actual:.0f} points": full,
        "that is chance, one class in ten: the ViT learns much more than that": 10.0,
    }
    grade_prediction(
        "check_vit_accuracy_prediction",
        "predicted_vit_accuracy",
        predicted,
        actual,
        what="percent test accuracy",
        tolerance=0.04,
        slips=slips,
        source="mean of 3 seeds, fashion_mnist_study.json",
    )
