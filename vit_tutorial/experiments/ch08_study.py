"""Chapter 8's study: which runs, how they run, their summary; chapter 8's runs are :mod:`~vit_tutorial.experiments.ch08`.

Three parts (:data:`PARTS`), every run under chapter 8's budget rule (``ch08.RunSpec``):
``scaling``, the models at the training-set sizes :data:`SIZES`, no augmentation; ``ablation``,
the hybrid on the largest size with each row of ``ch08.AUGMENTATIONS``; ``distillation``, the
plain and the hybrid ViT with DeiT's distillation token, taught by the ``resnet18`` of the scaling
part trained on the same images with the same seed, against the same ViTs with a class token and
no distillation (:func:`specs`). :func:`run_all` runs them with
:func:`~vit_tutorial.experiments.runner.run_study`, a teacher before its students;
:func:`summarize` summarises the log per configuration.

Chapter 10's models (``ch08.LATER_MODELS``) run in the scaling part too (``models``).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vit_tutorial.experiments import ch08
from vit_tutorial.experiments.runner import run_study, spread

__all__ = ["DISTILL_SIZES", "PARTS", "SIZES", "run_all", "specs", "summarize", "work"]

#: The scaling part's training-set sizes (class-balanced, nested).
SIZES = (1000, 4000, 15000, 55_000)
#: The sizes the distillation part runs at (of those asked for; else the largest).
DISTILL_SIZES = (4000, 55_000)
PARTS = ("scaling", "ablation", "distillation")
QUICK_AUGMENTATIONS = ("none", "all")  # one row that uses every lever


def _part(part: str, seeds, sizes, steps: int, quick: bool, models) -> list:
    """The runs of one part of :data:`PARTS`."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; expected one of {PARTS}")
    if part == "scaling":
        return [ch08.RunSpec(m, n, s, steps) for n in sizes for m in models for s in seeds]
    if part == "ablation":
        return [
            ch08.RunSpec("hybrid", max(sizes), s, steps, augmentation=a)
            for a in (QUICK_AUGMENTATIONS if quick else ch08.AUGMENTATIONS)
            for s in seeds
        ]
    distill_sizes = [n for n in sizes if n in DISTILL_SIZES] or [max(sizes)]
    return [
        ch08.RunSpec(m, n, s, steps, pool="cls", distilled=d)
        for n in distill_sizes
        for m in (("vit",) if quick else ("vit", "hybrid"))
        for d in (False, True)
        for s in seeds
    ]


def specs(
    parts: Iterable[str] = PARTS,
    seeds: Iterable[int] = (0, 1, 2),
    sizes: Sequence[int] = SIZES,
    steps: int | None = None,
    *,
    quick: bool = False,
    models: Iterable[str] | None = None,
) -> list:
    """The runs of ``parts``, in part order, each distilled run's teacher with them (once each):
    ``steps`` (default ``ch08.STEPS``); ``models``, the scaling part's (default ``ch08.MODELS``);
    ``quick``: the ablation with no augmentation and with all of it, the distillation with the
    plain ViT only.

    Example:
        >>> [s.key for s in specs(["distillation"], [0], [300], 20, quick=True)][1:]
        ['resnet18-n300-s0-none-t20', 'vit-n300-s0-none-t20-cls-distilled']
    """
    steps = ch08.STEPS if steps is None else steps
    models, seeds, wanted = tuple(models or ch08.MODELS), list(seeds), {}
    for part in parts:
        for spec in _part(part, seeds, list(sizes), steps, quick, models):
            if spec.distilled:
                wanted.setdefault(spec.teacher.key, spec.teacher)
            wanted.setdefault(spec.key, spec)
    return list(wanted.values())


def teacher_path(teachers: str | Path, spec: Any) -> Path:
    """Where the ``resnet18`` run ``spec`` saves its weights, a teacher's, under ``teachers``."""
    return Path(teachers) / f"{spec.key}.pt"


def work(spec: Any, *, teachers: str, **options: Any) -> dict[str, Any]:
    """One run of the study (``ch08.run`` with ``options``), in a worker process: a distilled run
    loads its teacher from ``teachers``, a ``resnet18`` run saves its weights there."""
    teacher = None
    if spec.distilled:
        teacher = ch08.load_teacher(teacher_path(teachers, spec.teacher), options["device"])
    save_to = teacher_path(teachers, spec) if spec.model == "resnet18" else None
    return ch08.run(spec, teacher=teacher, save_to=save_to, **options)


def _after(spec: Any) -> list:
    return [spec.teacher] if spec.distilled else []


def _stands(spec: Any, rows: dict, *, teachers: str) -> bool:
    """A logged teacher stands when its weights are on disk (not so for a log made elsewhere)."""
    return spec.model != "resnet18" or teacher_path(teachers, spec).exists()


def run_all(
    specs: Iterable, log: str | Path, *, teachers: str | Path, processes: int = 1, **options: Any
) -> dict[str, dict]:
    """Run the ``specs`` that ``log`` lacks, ``processes`` at a time
    (:func:`~vit_tutorial.experiments.runner.run_study`), each with ``ch08.run``'s ``options``
    (``device``, ``data_root``, ``history_points``...); the teachers' weights go to and come from
    the folder ``teachers``, and a teacher logged without them runs again. Every run of ``log``."""
    teachers = str(teachers)
    return run_study(
        specs,
        functools.partial(work, teachers=teachers, **options),
        log,
        processes=processes,
        after=_after,
        stands=functools.partial(_stands, teachers=teachers),
    )


def summarize(rows: Iterable[dict]) -> list[dict]:
    """Per configuration (every field of ``ch08.RunSpec`` but the seed), in key order: the
    seeds, their test accuracies, and the mean, spread, mean validation accuracy, epochs,
    parameters and mean training seconds."""
    fields = [f.name for f in dataclasses.fields(ch08.RunSpec) if f.name != "seed"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(sorted((k, row[k]) for k in fields)), []).append(row)
    summary = []
    for config, group in sorted(groups.items()):
        group.sort(key=lambda r: r["seed"])
        accuracies = [r["test_accuracy"] for r in group]
        summary.append(
            {
                **dict(config),
                "seeds": [r["seed"] for r in group],
                "test_accuracy": accuracies,
                **spread(accuracies, "test_accuracy"),
                "mean_val_accuracy": statistics.fmean(r["val_accuracy"] for r in group),
                "epochs": group[0]["epochs"],
                "parameters": group[0]["parameters"],
                "mean_train_seconds": round(statistics.fmean(r["train_seconds"] for r in group), 1),
            }
        )
    return summary
