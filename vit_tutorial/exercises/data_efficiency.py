"""Checkers for chapter 8: the greyscale ResNet-18 baseline, DeiT's hard-label distillation
loss, and Mixup as torchvision's ``v2.MixUp`` pairs a batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.data_efficiency import resnet18_greyscale
from vit_tutorial.exercises._common import call_safely, checker, close, passed, scalar_loss

__all__ = ["check_greyscale_resnet", "check_distillation_loss", "check_mixup"]


# ---------------------------------------------------------------------------------------
# The ResNet-18 baseline


def _pair(value: Any) -> Any:
    """``(v, v)`` for an int, as ``nn.Conv2d`` and ``nn.MaxPool2d`` read their sizes."""
    return (value, value) if isinstance(value, int) else tuple(value)


def _grid(conv: nn.Conv2d, pool: nn.Module, size: int = 28) -> int | None:
    """The side of the grid that ``conv`` then ``pool`` make of a ``size``×``size`` image."""
    if isinstance(conv.padding, str):  # 'same' or 'valid': no formula needed here
        return None
    (k, _), (s, _), (p, _) = (_pair(v) for v in (conv.kernel_size, conv.stride, conv.padding))
    side = (size + 2 * p - k) // s + 1
    if isinstance(pool, nn.MaxPool2d):
        (k, _), (s, _), (p, _) = (_pair(v) for v in (pool.kernel_size, pool.stride, pool.padding))
        side = (side + 2 * p - k) // s + 1
    return side


def _check_stem(model: nn.Module, in_channels: int, where: str) -> None:
    """conv1 must be ``Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)``, and the
    max-pool after it torchvision's."""
    conv = model.conv1
    if not isinstance(conv, nn.Conv2d):
        raise AssertionError(
            f"for {where}: model.conv1 must be one nn.Conv2d, got {type(conv).__name__}; "
            "replace it by nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, "
            "bias=False)"
        )
    if conv.in_channels != in_channels:
        still_rgb = "still " if conv.in_channels == 3 else ""
        raise AssertionError(
            f"for {where}: conv1 {still_rgb}takes {conv.in_channels} channels, but conv1 must "
            f"take in_channels = {in_channels}: replace model.conv1 by nn.Conv2d(in_channels, "
            "64, kernel_size=7, stride=2, padding=3, bias=False); repeating a grey image "
            "three times to fit an RGB conv1 is not what is asked"
        )
    if conv.out_channels != 64:
        raise AssertionError(
            f"for {where}: conv1 makes {conv.out_channels} channels; it must make 64, the "
            "channels that bn1 and layer1 expect"
        )
    kernel, stride = _pair(conv.kernel_size), _pair(conv.stride)
    if kernel != (7, 7) or stride != (2, 2):
        grid = _grid(conv, model.maxpool)
        yours = f" (yours gives {grid}×{grid})" if grid not in (None, 7) else ""
        raise AssertionError(
            f"for {where}: conv1 is a {kernel[0]}×{kernel[1]} convolution of stride "
            f"{stride[0]}: the stem must stay torchvision's 7×7 convolution of stride 2 "
            f"(padding 3), so that it and the max-pool take a 28×28 image to a 7×7 "
            f"grid{yours}, the ViT's grid of 4×4-pixel patches"
        )
    if conv.padding != (3, 3):
        raise AssertionError(
            f"for {where}: conv1 has padding={conv.padding}; torchvision's 7×7 stem pads by "
            "3, which takes a 28×28 image to 14×14 (then 7×7 after the max-pool)"
        )
    if conv.bias is not None:
        raise AssertionError(
            f"for {where}: conv1 has a bias: build it with bias=False, as torchvision does; "
            "the BatchNorm right after it (bn1) adds its own shift β, which makes a bias "
            "redundant"
        )
    _check_pool(model, where)


def _check_pool(model: nn.Module, where: str) -> None:
    """The max-pool after conv1 must be torchvision's, untouched."""
    conv, pool = model.conv1, model.maxpool
    if not isinstance(pool, nn.MaxPool2d):
        grid = _grid(conv, pool)
        raise AssertionError(
            f"for {where}: the max-pool after conv1 is gone (model.maxpool is "
            f"{type(pool).__name__}): keep torchvision's 3×3 max-pool of stride 2; with the "
            f"7×7 stride-2 conv1 it takes a 28×28 image to a 7×7 grid (yours: {grid}×{grid})"
        )
    if (_pair(pool.kernel_size), _pair(pool.stride), _pair(pool.padding)) != (
        (3, 3),
        (2, 2),
        (1, 1),
    ):
        raise AssertionError(
            f"for {where}: the max-pool must stay torchvision's: kernel 3, stride 2, padding "
            "1; only conv1 changes"
        )


def _check_head(model: nn.Module, num_classes: int, where: str) -> None:
    """The head ``fc`` must be a ``Linear(512, num_classes)``."""
    fc = model.fc
    if not isinstance(fc, nn.Linear):
        raise AssertionError(
            f"for {where}: model.fc must be the Linear head, got {type(fc).__name__}"
        )
    if fc.out_features == num_classes:
        return
    imagenet = ", ImageNet's classes," if fc.out_features == 1000 else ","
    still = "still " if fc.out_features == 1000 else ""
    raise AssertionError(
        f"for {where}: the head fc {still}has {fc.out_features} outputs{imagenet} not "
        f"num_classes = {num_classes}: build the model with resnet18(num_classes=num_classes), "
        "whose fc is a Linear(512, num_classes)"
    )


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def _check_the_rest(model: nn.Module, in_channels: int, num_classes: int, where: str) -> None:
    """Every parameter but conv1's has the name and shape of the reference's."""
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        want = _shapes(resnet18_greyscale(in_channels, num_classes))
    got = _shapes(model)
    if got == want:
        return
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    reshaped = [
        f"{name} {got[name]} instead of {want[name]}"
        for name in sorted(want.keys() & got.keys())
        if got[name] != want[name]
    ]
    parts = [
        f"{what}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
        for what, names in [("missing", missing), ("extra", extra), ("reshaped", reshaped)]
        if names
    ]
    count_got = sum(p.numel() for p in model.parameters())
    count_want = sum(torch.Size(shape).numel() for shape in want.values())
    raise AssertionError(
        f"for {where}: the model has {count_got:,} parameters, torchvision's ResNet-18 with "
        f"the new conv1 {count_want:,}; only conv1 may change ({'; '.join(parts)})"
    )


@checker
def check_greyscale_resnet(fn: Callable[[int, int], nn.Module]) -> None:
    """Grade a learner's ``fn(in_channels, num_classes) -> nn.Module``.

    It must return torchvision's ResNet-18, ``torchvision.models.resnet18(num_classes=...)``,
    with its first convolution ``conv1`` replaced by
    ``nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)``, and
    nothing else changed: with the max-pool, that stem takes a 28×28 image to a 7×7 grid.
    The checker compares the structure (conv1, the max-pool, the head, every parameter's
    shape) with :func:`~vit_tutorial.data_efficiency.resnet18_greyscale`'s, and runs the
    model on a batch; the initial weights are free.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

    Example:
        >>> check_greyscale_resnet(resnet18_greyscale)
        Correct! check_greyscale_resnet: torchvision's ResNet-18 with a 7×7 stride-2
        conv1 of 1 and 3 channels; 11,175,370 parameters for 1 channel and 10 classes.
    """
    from torchvision.models import ResNet  # an optional dependency: imported when needed

    counts = []
    for in_channels, num_classes in [(1, 10), (3, 5)]:
        where = f"in_channels={in_channels}, num_classes={num_classes}"
        model = call_safely(fn, (in_channels, num_classes), where)
        if not isinstance(model, ResNet):
            wrapped = isinstance(model, nn.Module) and any(
                isinstance(m, ResNet) for m in model.modules()
            )
            hint = (
                ": replace its conv1 rather than wrapping it; conv1 must take in_channels"
                if wrapped
                else ", from torchvision.models.resnet18(num_classes=num_classes)"
            )
            raise AssertionError(
                f"for {where}: return the ResNet itself (a torchvision.models.ResNet), got "
                f"{type(model).__name__}{hint}"
            )
        _check_stem(model, in_channels, where)
        _check_head(model, num_classes, where)
        _check_the_rest(model, in_channels, num_classes, where)
        images = torch.randn(2, in_channels, 28, 28, dtype=model.conv1.weight.dtype)
        was_training = model.training
        logits = call_safely(model.eval(), (images,), f"a (2, {in_channels}, 28, 28) batch")
        model.train(was_training)
        if not isinstance(logits, Tensor) or logits.shape != (2, num_classes):
            shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise AssertionError(
                f"for {where}: a (2, {in_channels}, 28, 28) batch gives {shape}, not the "
                f"logits (2, {num_classes}), one row per image"
            )
        counts.append(sum(p.numel() for p in model.parameters()))
    passed(
        "check_greyscale_resnet",
        "torchvision's ResNet-18 with a 7×7 stride-2 conv1 of 1 and 3 channels; "
        f"{counts[0]:,} parameters for 1 channel and 10 classes.",
    )


# ---------------------------------------------------------------------------------------
# DeiT's hard-label distillation


def _name(dtype: torch.dtype) -> str:
    """``'float32'`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


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


def _distillation_mistakes(
    cls_logits: Tensor, dist_logits: Tensor, labels: Tensor, teacher_logits: Tensor, eps: float
) -> list[tuple[str, Tensor]]:
    """The loss that each usual mistake computes, with its explanation."""
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
    return [
        (soft, (class_term + ce(dist, teacher.softmax(-1))) / 2),
        (soft, (class_term + kl) / 2),
        (
            "label smoothing is for the class head only: the distillation head learns the "
            "teacher's classes unsmoothed, F.cross_entropy(dist_logits, teacher_classes)",
            (class_term + ce(dist, t, label_smoothing=eps)) / 2,
        ),
        (
            "you summed the two terms: the loss is their mean, (class term + distillation "
            "term) / 2",
            class_term + dist_term,
        ),
        (swapped, (ce(dist, y, label_smoothing=eps) + ce(cls, t)) / 2),
        (swapped, (ce(dist, y) + ce(cls, t, label_smoothing=eps)) / 2),
        (
            "the class term uses the teacher's logits: it must score the student's class "
            "head, cls_logits, on the true labels; the teacher only gives the distillation "
            "head its targets",
            (ce(teacher, y, label_smoothing=eps) + dist_term) / 2,
        ),
        (
            "both heads learn the teacher's classes: the class head learns the true labels",
            (ce(cls, t, label_smoothing=eps) + dist_term) / 2,
        ),
        (
            "both heads learn the true labels: the distillation head learns the teacher's "
            "classes, teacher_logits.argmax(-1)",
            (class_term + ce(dist, y)) / 2,
        ),
        ("the distillation term is missing: add the distillation head's loss", class_term),
        ("the class term is missing: add the class head's loss", dist_term),
    ]


@checker
def check_distillation_loss(fn: Callable[[Tensor, Tensor, Tensor, Tensor, float], Tensor]) -> None:
    """Grade a learner's ``fn(cls_logits, dist_logits, labels, teacher_logits,
    label_smoothing) -> loss``, DeiT's hard-label distillation loss.

    ``cls_logits`` and ``dist_logits`` are the student's two heads ``(B, K)``, ``labels``
    the true classes ``(B,)`` and ``teacher_logits`` the teacher's ``(B, K)``. The loss is
    the mean of the two heads' cross-entropies, a 0-dimensional tensor:
    ``(CE(cls_logits, labels, label_smoothing) + CE(dist_logits, teacher_classes)) / 2``,
    with ``teacher_classes = teacher_logits.argmax(-1)`` and no label smoothing on the
    distillation head, as :func:`~vit_tutorial.engine.fit` trains with ``teacher=``.
    Inputs come in float32 and in float64.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

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
        where = f"B={B} images, K={K} classes, label_smoothing={eps}, {_name(dtype)}"
        args = (cls_logits, dist_logits, labels, teacher_logits)
        got = call_safely(fn, (*(a.clone() for a in args), eps), where)
        want = _distillation_loss(*args, eps)
        per_image = "each head's cross-entropy is a mean over the batch, a single number"
        got = scalar_loss(got, where, B, per_image)
        if close(got, want, atol=1e-5):
            continue
        hint = next(
            (
                why
                for why, loss in _distillation_mistakes(*args, eps)
                if close(got, loss, atol=1e-5)
            ),
            "compare with DeiT's formula: (CE(cls_logits, labels, smoothing) + "
            "CE(dist_logits, teacher_logits.argmax(-1))) / 2",
        )
        raise AssertionError(f"for {where}: got {got.item():.4f}, want {want.item():.4f}; {hint}")
    passed(
        "check_distillation_loss",
        f"DeiT's hard-label distillation loss, on {len(cases)} cases (float32 and float64).",
    )


# ---------------------------------------------------------------------------------------
# Mixup


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
            f"flip(0) pairs {what[:-1]} i with {what[:-1]} B - 1 - i, as timm's Mixup does; "
            f"here pair it with {what[:-1]} i - 1, {what}.roll(1, 0), as torchvision's "
            "v2.MixUp does"
        )
    return (
        f"{what} 0 to {B - 1} are mixed with {what} {partners}, not "
        f"{[(i - 1) % B for i in range(B)]} (each with {what[:-1]} i - 1): a random "
        f"permutation pairs the batch differently on every call; pair the batch with "
        f"itself rolled by one, {what}.roll(1, 0), as torchvision's v2.MixUp does"
    )


def _check_mixed_images(mixed: Any, images: Tensor, lam: float, where: str) -> None:
    if not isinstance(mixed, Tensor) or mixed.shape != images.shape:
        shape = tuple(mixed.shape) if isinstance(mixed, Tensor) else type(mixed).__name__
        raise AssertionError(
            f"for {where}: the mixed images must have the images' shape "
            f"{tuple(images.shape)}, got {shape}"
        )
    want = lam * images + (1 - lam) * images.roll(1, 0)
    if close(mixed, want):
        return
    if close(mixed, (1 - lam) * images + lam * images.roll(1, 0)):
        hint = (
            "1 - lam is on the wrong side: each image keeps weight lam and its partner, "
            "images.roll(1, 0), gets 1 - lam: lam·images + (1 - lam)·images.roll(1, 0)"
        )
    else:
        hint = _pairing_hint(_partners(mixed, images, lam), "images") or (
            "compare with lam·images + (1 - lam)·images.roll(1, 0)"
        )
    raise AssertionError(f"for {where}: {hint}")


def _check_soft_labels(soft: Any, labels: Tensor, lam: float, num_classes: int, where: str) -> None:
    B, K = len(labels), num_classes
    formula = "lam·one_hot(labels) + (1 - lam)·one_hot(labels.roll(1, 0))"
    if not isinstance(soft, Tensor):
        raise AssertionError(
            f"for {where}: the soft labels must be a tensor (B, num_classes), got "
            f"{type(soft).__name__}"
        )
    if soft.shape == (B,):
        raise AssertionError(
            f"for {where}: the labels are not mixed: you returned class indices, shape "
            f"({B},); return soft labels of shape (B, num_classes) = ({B}, {K}): {formula}"
        )
    if soft.ndim == 2 and len(soft) == B and soft.shape[1] != K:
        raise AssertionError(
            f"for {where}: the soft labels have {soft.shape[1]} columns, not num_classes = "
            f"{K}: pass it to F.one_hot(labels, num_classes); without it, one_hot makes "
            "max(labels) + 1 columns, which depends on the batch"
        )
    if soft.shape != (B, K):
        raise AssertionError(
            f"for {where}: the soft labels must have shape (B, num_classes) = ({B}, {K}), "
            f"got {tuple(soft.shape)}"
        )
    one_hot = F.one_hot(labels, K).double()
    if close(soft, lam * one_hot + (1 - lam) * one_hot.roll(1, 0)):
        return
    if close(soft, one_hot):
        hint = (
            f"the labels are not mixed: you returned one-hot labels, but mixed image i is "
            f"lam of image i and 1 - lam of image i - 1, so its label is {formula}"
        )
    elif close(soft, (1 - lam) * one_hot + lam * one_hot.roll(1, 0)):
        hint = f"1 - lam is on the wrong side of the labels: {formula}"
    else:
        pairing = _pairing_hint(_partners(soft, one_hot, lam), "labels")
        hint = (
            f"the labels are not paired as the images: {pairing}"
            if pairing
            else f"compare with {formula}"
        )
    raise AssertionError(f"for {where}: {hint}")


@checker
def check_mixup(fn: Callable[[Tensor, Tensor, float, int], tuple[Tensor, Tensor]]) -> None:
    """Grade a learner's ``fn(images, labels, lam, num_classes) -> (mixed, soft_labels)``.

    Mixup with a given mixing weight ``lam``, pairing the batch as torchvision's
    ``v2.MixUp`` does (``torchvision/transforms/v2/_augment.py``): the batch is mixed with
    itself rolled by one, so image ``i`` with image ``i - 1`` (image 0 with the last),
    ``mixed = lam·images + (1 - lam)·images.roll(1, 0)``, and its label likewise,
    ``soft_labels = lam·one_hot(labels) + (1 - lam)·one_hot(labels.roll(1, 0))``, of shape
    ``(B, num_classes)``. (``v2.MixUp`` draws ``lam`` from a Beta(α, α) distribution once
    per batch; here it is given.) Images come in float32 and in float64.

    Raises:
        AssertionError: with an explanation of the mistake, when ``fn`` is wrong.

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
        where = f"B={B} images, num_classes={K}, lam={lam}, {_name(dtype)}"
        out = call_safely(fn, (images.clone(), labels.clone(), lam, K), where)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise AssertionError(
                f"for {where}: return two tensors, (mixed_images, soft_labels), got "
                f"{type(out).__name__}"
            )
        _check_mixed_images(out[0], images, lam, where)
        _check_soft_labels(out[1], labels, lam, K, where)
    passed(
        "check_mixup",
        "images and labels mixed as torchvision's v2.MixUp mixes them, on "
        f"{len(cases)} batches (float32 and float64).",
    )
