"""Chapter 8's study: data scaling, the augmentation ablation and DeiT distillation.

What runs is :mod:`vit_tutorial.experiments.ch08_study`: three parts, every run under
one budget rule (the same optimisation steps, ``ch08.STEPS``: 13 epochs of the 55,000 training
images at batch 128, whatever the model and training-set size):

- ``scaling``: ``vit``, ``hybrid``, ``resnet18`` and ``resnet8`` (``--models``; chapter 10's
  are ``ch08.LATER_MODELS``) at 1,000, 4,000, 15,000 and 55,000 training images
  (class-balanced, nested), no augmentation;
- ``ablation``: the hybrid on all 55,000 images with each row of ``ch08.AUGMENTATIONS``;
- ``distillation``: the plain and the hybrid ViT with DeiT's distillation token, taught by
  the ``resnet18`` of the scaling part trained on the same images with the same seed,
  against the same ViTs with a class token and no distillation.

Each run is one line of a JSON-lines log (``--log``, default the result file with ``.jsonl``),
written as it finishes (:func:`vit_tutorial.experiments.runner.run_study`): a run already in
the log is not run again, so an interrupted study resumes; ``--summarize-only`` summarises a
log without running. At the end the log is summarised (per configuration, the mean and
per-seed spread of test accuracy) into ``benchmarks/results/fashion_mnist_study.json`` with
its provenance.

Each run records its learning curve, ``history`` (``ch08.run``): at ``--history-points``
steps spread evenly over the run (13 by default: one per epoch of the full training set),
the step, the mean training loss since the previous point and the validation accuracy. The
committed study's runs were made before that and have none. The curves of the smallest and
largest sizes, 3 seeds, go into a log of their own, which resumes as any does::

    python benchmarks/fashion_mnist_study.py --parts scaling --sizes 1000 55000 --jobs 8 \
        --models vit hybrid resnet8 --log benchmarks/results/fashion_mnist_curves.jsonl \
        --out benchmarks/results/fashion_mnist_curves.json

The full study is 99 runs (48 scaling, 27 more for the ablation, 24 distillation) of 5,590
steps or a few more (whole epochs: 5,590 to 5,664); the committed log holds 96 (the
ablation's ``all`` row is missing). It takes hours on a laptop CPU, minutes on a GPU with
``--jobs 8`` (parallel processes; CUDA runs in bf16 autocast). ``--quick`` runs every part
with 300 training images and 20 steps (the scaling part with chapter 10's Swin too, the
ablation only with no augmentation and with all of it, the distillation only for the plain
ViT), with 2 points of history, on the CPU, in minutes: it checks the code path only and
writes only with ``--out``.

Usage: ``python benchmarks/fashion_mnist_study.py [--parts scaling ablation distillation]
[--jobs 8] [--device cuda]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from vit_tutorial.experiments import ch08
from vit_tutorial.experiments import ch08_study as study
from vit_tutorial.experiments.runner import read_log

from _results import RESULTS, arguments, provenance, setup, study_arguments, study_log, write_json

DEFAULT_OUT = RESULTS / "fashion_mnist_study.json"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=study.PARTS, default=list(study.PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(study.SIZES))
    parser.add_argument("--steps", type=int, default=ch08.STEPS)
    parser.add_argument(
        "--models",
        nargs="+",
        choices=ch08.MODELS + ch08.LATER_MODELS,
        default=list(ch08.MODELS),
        help="the scaling part's (default: chapter 8's four; 'swin' is chapter 10's)",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--data-root", default=None)
    parser.add_argument(
        "--teachers", type=Path, default=None, help="folder of the teachers' weights"
    )
    parser.add_argument(
        "--history-points",
        type=int,
        default=ch08.HISTORY_POINTS,
        help="points of each run's learning curve (validation accuracy, training loss)",
    )
    study_arguments(parser)
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.sizes, args.steps, args.device = [0], [300], 20, "cpu"
        args.models = [*ch08.MODELS, "swin"]  # chapter 10's Swin too (its controls: configurations)
        args.history_points = 2
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def main() -> int:
    args = parse()
    out = setup(args, DEFAULT_OUT)
    log = study_log(args, out)
    teachers = args.teachers or log.parent / (log.stem + "-teachers")
    teachers.mkdir(parents=True, exist_ok=True)
    wanted = study.specs(
        args.parts, args.seeds, args.sizes, args.steps, quick=args.quick, models=args.models
    )
    tic = time.perf_counter()
    if args.summarize_only:
        rows = read_log(log)
    else:
        options = dict(device=args.device, data_root=args.data_root)
        options["history_points"] = args.history_points
        rows = study.run_all(wanted, log, teachers=teachers, processes=args.jobs, **options)
    keys = {spec.key for spec in wanted}
    runs = sorted((r for r in rows.values() if r["key"] in keys), key=lambda r: r["key"])
    missing = sorted(keys - set(rows))
    print(f"{len(runs)} runs in {time.perf_counter() - tic:.0f} s (this invocation)")
    if missing:
        print(f"{len(missing)} runs not in {log}: {missing}")
    runs_on = args.runs_machine or {"device": args.device, "jobs": args.jobs}
    record = {
        "benchmark": "fashion_mnist_study",
        "quick": args.quick,
        "provenance": {**provenance(args.seeds), "runs_on": runs_on, "log": str(log)},
        "missing_runs": missing,
        "budget": {"steps": args.steps, "batch_size": ch08.BATCH_SIZE},
        # the runs made before histories were recorded have none
        "runs_with_history": sum("history" in r for r in runs),
        "parts": args.parts,
        "sizes": args.sizes,
        "configurations": study.summarize(runs),
        "runs": runs,
    }
    for row in record["configurations"]:
        print(
            f"{row['model']:8s} n={row['train_size']:>5} {row['augmentation']:14s} "
            f"{row['pool']:4s} {'distilled' if row['distilled'] else '':9s} "
            f"{100 * row['mean_test_accuracy']:.2f}% ± {100 * row['std_test_accuracy']:.2f}"
        )
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
