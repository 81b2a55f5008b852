"""Learning curves of chapter 8's runs: when :func:`~vit_tutorial.experiments.ch08.run` scores
the validation split (:func:`history_epochs`, :class:`ScoringLoader`), and the curves of
several runs, averaged over their seeds (:func:`learning_curves`) and drawn with the models
side by side (:func:`plot_learning_curves`). :mod:`~vit_tutorial.experiments.ch08` re-exports
them; this module imports nothing of it.

A run's ``history`` holds three lists of one value per point: the optimiser ``step`` at the
end of an epoch, the mean ``train_loss`` of the epochs since the previous point, and the
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
    "history_epochs",
    "learning_curves",
    "plot_learning_curves",
]

#: The points of a run's learning curve: one per epoch of the full training set's budget.
HISTORY_POINTS = 13
#: The models' names in a legend, in the order they are drawn (others follow, as they come).
NAMES = {"vit": "ViT", "hybrid": "hybrid ViT", "resnet18": "ResNet-18", "resnet8": "ResNet-8"}


def history_epochs(epochs: int, points: int = HISTORY_POINTS) -> list[int]:
    """The epochs after which a run records a point of its learning curve: ``points`` of
    them, evenly spread, the last epoch included (every epoch when there are fewer).

    Example:
        >>> history_epochs(13), history_epochs(3)
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [1, 2, 3])
        >>> history_epochs(699, 4)  # 1,000 images: 8 steps an epoch
        [175, 350, 525, 699]
    """
    epochs = check_int("epochs", epochs)
    points = min(epochs, check_int("points", points))
    return sorted({math.ceil(k * epochs / points) for k in range(1, points + 1)})


class ScoringLoader:
    """A training loader as :func:`~vit_tutorial.engine.fit` reads it (its batches, length and
    sampler) that scores ``model`` on ``val_loader`` after each epoch of ``points`` but the
    last (the run scores its final model itself): the accuracies in :attr:`accuracy`, the
    seconds it took in :attr:`seconds`. The scoring draws nothing from the training's random
    streams (a loader draws its base seed from the global generator), so the run trains
    exactly as it would without it. :meth:`curve` then makes the run's ``history``."""

    def __init__(self, loader, model: nn.Module, val_loader, points: list[int], device, amp):
        self.loader, self.model, self.val_loader, self.points = loader, model, val_loader, points
        self.device, self.amp = device, amp
        self.epoch, self.accuracy, self.seconds = 0, [], 0.0

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def sampler(self) -> Any:
        return self.loader.sampler

    def __iter__(self) -> Iterator:
        yield from self.loader  # fit asks for the next batch once the last step is done
        self.epoch += 1
        if self.epoch in self.points[:-1]:
            tic = time.perf_counter()
            with torch.random.fork_rng(devices=[]):
                score = evaluate(self.model, self.val_loader, self.device, self.amp)
            self.accuracy.append(score["accuracy"])
            self.seconds += time.perf_counter() - tic

    def curve(self, train_loss: list[float], val_accuracy: float) -> dict[str, list]:
        """The run's ``history``, from ``fit``'s per-epoch ``train_loss`` and the final
        model's ``val_accuracy``: at each point, the step, the mean training loss of the
        epochs since the previous point (rounded to 4 decimals) and the validation accuracy."""
        starts = [0, *self.points[:-1]]
        return {
            "step": [epoch * len(self.loader) for epoch in self.points],
            "train_loss": [
                round(statistics.fmean(train_loss[a:b]), 4)
                for a, b in zip(starts, self.points, strict=True)
            ],
            "val_accuracy": [*self.accuracy, val_accuracy],
        }


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
