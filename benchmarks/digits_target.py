"""The chapter 6 target: a ViT beats the RBF SVM on scikit-learn's handwritten digits.

Target (issue 5): at least 98.4% test accuracy on the stratified 80/20 digits split
(``random_state=0``), as the mean over 3 seeds, each run taking at most 60 s of training
on a 2-core CPU. The classical baseline, scikit-learn's RBF SVM on the same split, is
printed for reference (98.33%).

The recipe is the CLI default, ``python -m vit_tutorial.train --dataset digits`` (preset
``digits`` in :data:`vit_tutorial.recipes.RECIPES`). "Training time" is the time spent in
training steps as recorded by :func:`vit_tutorial.engine.fit`; the per-epoch evaluation
is excluded and reported separately in the wall time. Torch keeps its default number of
threads (``torch.get_num_threads()`` is printed). On a busy machine times are inflated:
compare them on an idle one. The script exits with status 1 when the target is missed.

Usage: ``.venv/bin/python benchmarks/digits_target.py [--seeds 0 1 2] [--preset digits]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from sklearn.svm import SVC

from vit_tutorial.data import digits_datasets
from vit_tutorial.recipes import RECIPES, train_recipe

TARGET_ACCURACY = 0.984
TIME_LIMIT_S = 60.0


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
    args = parser.parse_args()
    recipe = RECIPES[args.preset]
    print(f"preset {args.preset}: {recipe}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"RBF SVM baseline on the same split: {100 * svm_baseline():.2f}%")
    accuracies, times = [], []
    for seed in args.seeds:
        tic = time.perf_counter()
        result = train_recipe(args.preset, seed=seed, progress=False)
        accuracies.append(result.test_accuracy)
        times.append(result.train_seconds)
        print(f"seed {seed}: test accuracy {100 * result.test_accuracy:.2f}% | training "
              f"{result.train_seconds:.1f} s | wall {time.perf_counter() - tic:.1f} s",
              flush=True)
    mean = statistics.mean(accuracies)
    spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
    print(f"mean test accuracy {100 * mean:.2f}% over {len(accuracies)} seeds "
          f"(min {100 * min(accuracies):.2f}%, max {100 * max(accuracies):.2f}%, "
          f"std {100 * spread:.2f} points)")
    print(f"training time per run: mean {statistics.mean(times):.1f} s, max {max(times):.1f} s")
    met = mean >= TARGET_ACCURACY and max(times) <= TIME_LIMIT_S
    print(f"target (mean >= {100 * TARGET_ACCURACY:.1f}%, each run <= {TIME_LIMIT_S:.0f} s): "
          f"{'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
