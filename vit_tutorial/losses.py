"""The losses :func:`~vit_tutorial.engine.fit` trains with (chapters 6, 8 and 9).

A loss for ``fit`` is a callable ``loss(outputs, images, targets) -> (loss, logits)``: ``outputs``
is what the model returned for ``images``; ``logits`` score the training accuracy, or are
``None`` for a loss with no accuracy to report (MAE's). :class:`Classification` (the default) is
the cross-entropy, :class:`HardDistillation` DeiT's hard-label distillation, :func:`mae_loss` a
masked autoencoder's own loss, which its forward pass computes, as MAE's ``models_mae.py`` does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vit_tutorial.validate import check_real

__all__ = ["cross_entropy", "Classification", "HardDistillation", "masked_patch_loss", "mae_loss"]


def cross_entropy(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of ``logits (B, K)``, in float32, against class indices ``(B,)`` or
    probabilities ``(B, K)`` (soft labels: Mixup, CutMix), with ``label_smoothing``; ValueError
    for a class outside ``0..K-1``, or soft labels of another width, negative or not finite.

    Example:
        >>> logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
        >>> round(cross_entropy(logits, torch.tensor([0, 1])).item(), 4)
        0.1269
        >>> round(cross_entropy(logits, torch.tensor([[1.0, 0.0], [0.0, 1.0]])).item(), 4)
        0.1269
    """
    check_real("label_smoothing", label_smoothing, 0.0, 1.0)
    k, soft = logits.shape[-1], targets.is_floating_point()
    if soft and (targets.shape != logits.shape or not (targets.isfinite() & (targets >= 0)).all()):
        raise ValueError(
            f"soft labels must be (B, {k}) for {k} classes, finite and >= 0, got "
            f"{tuple(targets.shape)} with minimum {targets.min().item():g}"
        )
    if not soft and len(bad := targets[(targets < 0) | (targets >= k)]):
        raise ValueError(f"label {bad[0].item()} is not among the {k} classes (0 to {k - 1})")
    return F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)


class Classification:
    """Cross-entropy of a classifier's logits with the labels (``label_smoothing`` in [0, 1))."""

    def __init__(self, label_smoothing: float = 0.0) -> None:
        self.label_smoothing = check_real("label_smoothing", label_smoothing, 0, 1, high_open=True)

    def __call__(self, outputs: Tensor, images: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        if isinstance(outputs, tuple):
            raise ValueError(
                "the model returned two heads' logits (a distillation token): train it with "
                "fit(..., loss=HardDistillation(teacher))"
            )
        return cross_entropy(outputs, targets, self.label_smoothing), outputs


class HardDistillation(nn.Module):
    """DeiT's hard-label distillation (Touvron et al. 2021, Section 4), for a model with a
    distillation token, which returns ``(class logits, distillation logits)`` in training. The
    class head learns the labels (``label_smoothing`` in ``[0, 1)``), the distillation head the
    classes the ``teacher`` (any classifier ``teacher(images) -> logits``) predicts, unsmoothed;
    the loss is the mean of the two cross-entropies, and the mean of the two heads is scored.
    The teacher runs in eval mode, without gradients, on the model's device
    (:func:`~vit_tutorial.engine.fit` moves this module, which holds it)."""

    def __init__(self, teacher: nn.Module, label_smoothing: float = 0.0) -> None:
        super().__init__()
        if not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be an nn.Module, got {type(teacher).__name__}")
        self.teacher = teacher.eval()
        self.label_smoothing = check_real("label_smoothing", label_smoothing, 0, 1, high_open=True)

    def forward(self, outputs: Any, images: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        if not (isinstance(outputs, tuple) and len(outputs) == 2):
            raise ValueError(
                "HardDistillation needs a model with a distillation token, whose training "
                "forward returns (class logits, distillation logits); this one returned "
                f"{type(outputs).__name__}"
            )
        class_logits, distill_logits = outputs
        with torch.no_grad():
            teacher_classes = self.teacher.eval()(images).argmax(-1)
        class_loss = cross_entropy(class_logits, targets, self.label_smoothing)
        loss = (class_loss + cross_entropy(distill_logits, teacher_classes)) / 2
        return loss, (class_logits + distill_logits) / 2


def masked_patch_loss(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """The mean over hidden patches of the per-patch mean squared error, for ``pred`` and
    ``target`` ``(B, N, L)`` and ``mask`` ``(B, N)`` with 1.0 on hidden patches: MAE's loss (He
    et al. 2022, Section 3: counting the visible patches too costs about 0.5% accuracy).

    Example:
        >>> pred, target = torch.zeros(1, 2, 3), torch.tensor([[[1.0] * 3, [3.0] * 3]])
        >>> masked_patch_loss(pred, target, torch.tensor([[0.0, 1.0]])).item()  # patch 2 only
        9.0
    """
    if pred.shape != target.shape or pred.shape[:2] != mask.shape:
        raise ValueError(
            f"pred {tuple(pred.shape)} and target {tuple(target.shape)} must be equal "
            f"(B, N, L) tensors and mask {tuple(mask.shape)} their (B, N)"
        )
    if not mask.any():
        raise ValueError("the mask hides no patch: the loss over hidden patches is undefined")
    per_patch = (pred - target).pow(2).mean(dim=-1)  # (B, N)
    return (per_patch * mask).sum() / mask.sum()


def mae_loss(outputs: Any, images: Tensor, targets: Tensor) -> tuple[Tensor, None]:
    """A :class:`~vit_tutorial.mae.MaskedAutoencoder`'s loss, which its forward computed
    (:func:`masked_patch_loss`); the labels are not read, and no accuracy is reported."""
    if not isinstance(getattr(outputs, "loss", None), Tensor):  # not an MAEOutput
        raise TypeError(f"mae_loss needs MaskedAutoencoder outputs, got {type(outputs).__name__}")
    return outputs.loss, None
