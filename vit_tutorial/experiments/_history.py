"""Learning curves of chapter 8's runs: when :func:`~vit_tutorial.experiments.ch08.run` scores
the validation split (:func:`history_steps`, :class:`ScoringLoader`), and the curves of
several runs, averaged over their seeds (:func:`learning_curves`) and drawn with the models
side by side (:func:`plot_learning_curves`). :mod:`~vit_tutorial.experiments.ch08` re-exports
them; this module imports nothing of it.

A run's ``history`` holds three lists of one value per point: the optimiser ``step`` (inside an
epoch or at its end), the mean ``train_loss`` of the steps since the previous point, and the
``val_accuracy`` (a fraction) at that step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from vit_tutorial.engine import evaluate
from vit_tutorial.validate import check_int

__all__ = [
    "HISTORY_POINTS",
    "ScoringLoader",
    "history_steps",
    "learning_curves",
    "plot_learning_curves",
]

#: The points of a run's learning curve: one per epoch of the full training set's budget.
HISTORY_POINTS = 13
#: The models' names in a legend, in the order they are drawn (others follow, as they come).
NAMES = {"vit": "ViT", "hybrid": "hybrid ViT", "resnet18": "ResNet-18", "resnet8": "ResNet-8"}
NAMES |= {"swin": "Swin", "swin_global": "Swin, 1 window", "vit_p2": "ViT, 2×2 patches"}
NAMES["vit_rel"] = "ViT, relative bias"


def history_steps(steps: int, points: int = HISTORY_POINTS) -> list[int]:
    """The optimiser steps after which a run records a point of its learning curve: ``points``
    of them, evenly spread over its ``steps``, the last step included (every step when there
    are fewer). A point may fall inside an epoch.

    Example:
        >>> history_steps(5590)[:3], history_steps(3)  # 55,000 images: 430 steps an epoch
        ([430, 860, 1290], [1, 2, 3])
        >>> history_steps(432, 4)  # 1,000 images, 54 epochs of 8 steps
        [108, 216, 324, 432]
    """
    steps = check_int("steps", steps)
    points = min(steps, check_int("points", points))
    return sorted({math.ceil(k * steps / points) for k in range(1, points + 1)})


class ScoringLoader:
    """A training loader as :func:`~vit_tutorial.engine.fit` reads it (its batches, length and
    sampler) that scores ``model`` on ``val_loader`` after each step of ``points`` but the last
    (the run scores its final model itself), mid-epoch too: the accuracies in
    :attr:`accuracy`, the seconds it took in :attr:`seconds`. :meth:`recording` wraps the
    run's loss so that the mean training loss of the steps between two points is kept. The
    scoring draws nothing from the training's random streams (a loader draws its base seed
    from the global generator), so the run trains exactly as it would without it.
    :meth:`curve` then makes the run's ``history``."""

    def __init__(self, loader, model: nn.Module, val_loader, points: list[int], device, amp):
        self.loader, self.model, self.val_loader, self.points = loader, model, val_loader, points
        self.device, self.amp = device, amp
        self.step, self.accuracy, self.train_loss, self.seconds = 0, [], [], 0.0
        self._loss_sum: Any = 0.0  # loss · batch size since the last point (a tensor)
        self._loss_count = 0

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def sampler(self) -> Any:
        return self.loader.sampler

    def __iter__(self) -> Iterator:
        for batch in self.loader:
            self._score_if_due()
            yield batch  # fit asks for the next batch once this step is done
            self.step += 1
        self._score_if_due()

    def _score_if_due(self) -> None:
        done = len(self.accuracy)  # points scored so far
        if done < len(self.points) - 1 and self.step == self.points[done]:
            tic = time.perf_counter()
            with torch.random.fork_rng(devices=[]):
                score = evaluate(self.model, self.val_loader, self.device, self.amp)
            self.accuracy.append(score["accuracy"])
            self._close_point()
            self.seconds += time.perf_counter() - tic

    def _close_point(self) -> None:
        mean = self._loss_sum / max(self._loss_count, 1)
        self.train_loss.append(round(float(mean), 4))
        self._loss_sum, self._loss_count = 0.0, 0

    def recording(self, loss: Any) -> nn.Module:
        """``loss`` (``loss(outputs, images, targets) -> (value, logits)``), adding each step's
        value times its batch size to the current point's sum (on the device: no sync)."""
        return _RecordedLoss(loss, self)

    def curve(self, val_accuracy: float) -> dict[str, list]:
        """The run's ``history``, once it has trained, with the final model's ``val_accuracy``:
        at each point, the step, the mean training loss of the steps since the previous point
        (rounded to 4 decimals) and the validation accuracy."""
        self._close_point()
        return {
            "step": list(self.points),
            "train_loss": list(self.train_loss),
            "val_accuracy": [*self.accuracy, val_accuracy],
        }


class _RecordedLoss(nn.Module):
    """A run's loss that also adds each step's value to its :class:`ScoringLoader`'s sum (a
    module, so that ``fit`` moves a teacher inside ``loss`` to the device)."""

    def __init__(self, loss: Any, owner: ScoringLoader) -> None:
        super().__init__()
        self.loss, self.owner = loss, owner

    def forward(self, outputs: Any, images: torch.Tensor, targets: torch.Tensor) -> Any:
        value, logits = self.loss(outputs, images, targets)
        owner = self.owner
        owner._loss_sum = owner._loss_sum + value.detach().float() * len(targets)
        owner._loss_count += len(targets)
        return value, logits


def learning_curves(runs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model (in :data:`NAMES`' order), the learning curve of its seeds: ``step``, the
    ``seeds``, and for ``train_loss`` and ``val_accuracy`` the ``mean``, ``min`` and ``max``
    over the seeds at each step. ``runs`` are chapter 8's run records (lines of the study's
    log), of one training-set size, budget, augmentation and pooling.

    Raises:
        ValueError: no runs, a run without a ``history`` (the study's runs made before
            histories were recorded have none), runs of several configurations, or seeds of
            one model whose curves have other steps.
    """
    runs = list(runs)
    if not runs:
        raise ValueError("no runs to draw")
    if bare := [r["key"] for r in runs if "history" not in r]:
        raise ValueError(f"these runs have no history (made before it was recorded): {bare}")
    shared = ("train_size", "steps", "augmentation", "pool", "distilled")
    if len({tuple(r[k] for k in shared) for r in runs}) > 1:
        raise ValueError(f"runs of several configurations: they must share {shared}")
    order = [*NAMES, *dict.fromkeys(r["model"] for r in runs)]
    curves: dict[str, dict[str, Any]] = {}
    for model in sorted({r["model"] for r in runs}, key=order.index):
        seeds = sorted((r for r in runs if r["model"] == model), key=lambda r: r["seed"])
        steps = seeds[0]["history"]["step"]
        if any(r["history"]["step"] != steps for r in seeds):
            raise ValueError(f"the seeds of {model!r} recorded their curves at other steps")
        curve: dict[str, Any] = {"step": steps, "seeds": [r["seed"] for r in seeds]}
        for key in ("train_loss", "val_accuracy"):
            columns = list(zip(*(r["history"][key] for r in seeds), strict=True))
            curve[key] = {
                "mean": [statistics.fmean(c) for c in columns],
                "min": [min(c) for c in columns],
                "max": [max(c) for c in columns],
            }
        curves[model] = curve
    return curves


def plot_learning_curves(runs: Iterable[dict[str, Any]], title: str | None = None) -> Any:
    """Draw the learning curves of ``runs`` (:func:`learning_curves`), the models side by side:
    the training loss (left) and the validation accuracy in % (right) against the optimiser
    step, the mean of each model's seeds as a line and the lowest to the highest seed as a
    band. A figure 6.9 in wide, text of 9 pt or more; matplotlib is imported here. Returns it.
    """
    import matplotlib.pyplot as plt

    runs = list(runs)
    curves = learning_curves(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.9, 3.0), dpi=96, layout="constrained")
    for i, (model, curve) in enumerate(curves.items()):
        style = dict(marker="os^Dv<>p"[i % 8], ms=4, color=f"C{i}")
        for ax, key, scale in ((left, "train_loss", 1), (right, "val_accuracy", 100)):
            band = {k: [scale * v for v in values] for k, values in curve[key].items()}
            ax.plot(curve["step"], band["mean"], label=NAMES.get(model, model), **style)
            if len(curve["seeds"]) > 1:
                ax.fill_between(curve["step"], band["min"], band["max"], color=style["color"],
                                alpha=0.2, lw=0)  # fmt: skip
    left.set(xlabel="optimiser step", ylabel="training loss")
    right.set(xlabel="optimiser step", ylabel="validation accuracy (%)")
    right.legend(fontsize=9)
    seeds = max(len(c["seeds"]) for c in curves.values())
    spread = "; bands: lowest to highest seed" if seeds > 1 else ""
    plural = "s" if seeds > 1 else ""
    default = f"{runs[0]['train_size']:,} training images; mean of {seeds} seed{plural}{spread}"
    fig.suptitle(title or default, fontsize=10)
    return fig
