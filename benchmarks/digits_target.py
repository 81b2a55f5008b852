"""The chapter 6 target: a ViT beats the RBF SVM on scikit-learn's handwritten digits.

Target (issue 5): at least 98.4% test accuracy on the stratified 80/20 digits split
(``random_state=0``), as the mean over 3 seeds, each run taking at most 60 s of training
on a 2-core CPU. The classical baseline, scikit-learn's RBF SVM on the same split, is
printed for reference (98.33%).

The recipe is the CLI default, ``python -m vit_tutorial.cli train --dataset digits`` (preset
``digits`` in :data:`vit_tutorial.recipes.RECIPES`). "Training time" is the time spent in
training steps as recorded by :func:`vit_tutorial.engine.fit`; the per-epoch evaluation
is excluded and reported separately in the wall time. Torch keeps its default number of
threads (``torch.get_num_threads()`` is printed) unless ``--threads`` says otherwise. On a
busy machine times are inflated: compare them on an idle one. The script exits with status
1 when the target is missed.

It writes ``benchmarks/results/digits_target.json`` (``--out`` elsewhere): per seed the test
accuracy, the number of wrong test images (of 360) and the training seconds, their mean and
spread, the SVM baseline and a ``provenance`` block. Chapter 6 loads that file. ``--quick``
(one seed, one epoch, seconds) only checks the code path; it writes only with ``--out``
and never fails on the target.

Usage: ``.venv/bin/python benchmarks/digits_target.py [--seeds 0 1 2] [--preset digits]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from sklearn.svm import SVC

from vit_tutorial.data import digits_datasets
from vit_tutorial.recipes import RECIPES, train_recipe

from _results import (
    RESULTS,
    arguments,
    fit_device_options,
    provenance,
    recipe_record,
    setup,
    summarize_and_print,
    training_arguments,
    write_json,
)

TARGET_ACCURACY = 0.984
TIME_LIMIT_S = 60.0
DEFAULT_OUT = RESULTS / "digits_target.json"


def svm_baseline() -> float:
    """Test accuracy of scikit-learn's default RBF SVM on the same split and pixels."""
    data = digits_datasets()
    x_train, y_train = data.train.tensors[0].flatten(1).numpy(), data.train.tensors[1].numpy()
    x_test, y_test = data.test.tensors[0].flatten(1).numpy(), data.test.tensors[1].numpy()
    return float((SVC().fit(x_train, y_train).predict(x_test) == y_test).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="digits", choices=sorted(RECIPES))
    arguments(parser, DEFAULT_OUT)
    training_arguments(parser)
    args = parser.parse_args()
    epochs = 1 if args.quick else None  # None: the preset's
    if args.quick:
        args.seeds = [0]
    out = setup(args, DEFAULT_OUT)
    recipe = RECIPES[args.preset]
    record = {
        "benchmark": "digits_target",
        "quick": args.quick,
        "provenance": provenance(args.seeds),
    }
    test_images = len(digits_datasets().test)
    print(f"preset {args.preset}: {recipe}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    svm_accuracy = svm_baseline()
    print(f"RBF SVM baseline on the same split: {100 * svm_accuracy:.2f}%")
    runs = []
    for seed in args.seeds:
        tic = time.perf_counter()
        result = train_recipe(
            args.preset, seed=seed, epochs=epochs, progress=False, **fit_device_options(args)
        )
        runs.append(
            {
                "seed": seed,
                "accuracy": result.test_accuracy,
                "wrong": round((1 - result.test_accuracy) * test_images),
                "train_seconds": round(result.train_seconds, 2),
                "load_average_1min_after": round(os.getloadavg()[0], 2),
            }
        )
        print(
            f"seed {seed}: test accuracy {100 * result.test_accuracy:.2f}% "
            f"({runs[-1]['wrong']} of {test_images} wrong) | training "
            f"{result.train_seconds:.1f} s | wall {time.perf_counter() - tic:.1f} s",
            flush=True,
        )
    summary, times = summarize_and_print(runs)
    met = summary["mean_accuracy"] >= TARGET_ACCURACY and max(times) <= TIME_LIMIT_S
    print(
        f"target (mean >= {100 * TARGET_ACCURACY:.1f}%, each run <= {TIME_LIMIT_S:.0f} s): "
        f"{'met' if met else 'MISSED'}{' (quick run: not a measurement)' if args.quick else ''}"
    )
    record.update(
        {
            "preset": args.preset,
            "recipe": recipe_record(recipe),
            "training": fit_device_options(args),
            "epochs": epochs or recipe.fit.epochs,
            "test_images": test_images,
            "svm_accuracy": svm_accuracy,
            "svm_wrong": round((1 - svm_accuracy) * test_images),
            "runs": runs,
            **summary,
            "mean_train_seconds": statistics.mean(times),
            "target": {
                "mean_accuracy": TARGET_ACCURACY,
                "train_seconds": TIME_LIMIT_S,
                "met": None if args.quick else met,
            },
        }
    )
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
