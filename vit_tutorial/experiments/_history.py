"""Learning curves of chapter 8's runs: when :func:`~vit_tutorial.experiments.ch08.run` scores
the validation split (:func:`history_steps`; :func:`~vit_tutorial.engine.fit` scores it, with
``eval_every``), and the curves of several runs, averaged over their seeds
(:func:`learning_curves`) and drawn with the models side by side (:func:`plot_learning_curves`).
:mod:`~vit_tutorial.experiments.ch08` re-exports them; this module imports nothing of it.

A run's ``history`` holds three lists of one value per point: the optimiser ``step`` (inside an
epoch or at its end), the mean ``train_loss`` of the steps since the previous point, and the
``val_accuracy`` (a fraction) at that step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from vit_tutorial.validate import check_int

__all__ = [
    "HISTORY_POINTS",
    "eval_every",
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
    """The optimiser steps after which a run of ``steps`` records a point of its learning
    curve, at most ``points`` of them: every ``eval_every = ⌈steps / points⌉`` steps
    (:func:`eval_every`), and the last step (every step when there are fewer). A point may
    fall inside an epoch; the last gap may be shorter, and a run of fewer than ``2 · points``
    steps gets fewer points (``history_steps(14)`` has 7).

    Example:
        >>> history_steps(5590)[:3], history_steps(3)  # 55,000 images: 430 steps an epoch
        ([430, 860, 1290], [1, 2, 3])
        >>> history_steps(432, 4)  # 1,000 images, 54 epochs of 8 steps
        [108, 216, 324, 432]
    """
    every = eval_every(steps, points)
    return sorted({*range(every, steps + 1, every), steps})


def eval_every(steps: int, points: int = HISTORY_POINTS) -> int:
    """The ``eval_every`` of :func:`~vit_tutorial.engine.fit` that gives a run of ``steps``
    at most ``points`` points (:func:`history_steps`): ``⌈steps / points⌉``, at least 1."""
    steps, points = check_int("steps", steps), check_int("points", points)
    return math.ceil(steps / points)


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
