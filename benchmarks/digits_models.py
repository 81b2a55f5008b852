"""Chapter 6's recipe, trained and kept: the models the chapter and its solutions load.

Trains preset ``digits`` (the chapter's recipe) with seeds 0, 1 and 2 on the CPU in float32, as
the chapter's live cell trains seed 0, and writes each model to
``benchmarks/results/digits_recipe_seed<N>.pt``: a checkpoint of ``vit_tutorial.checkpoint``
(weights, config, history, the test accuracy and the provenance, with its SHA-256; no
optimiser state). Chapter 6 reads the position tables of seeds 1 and 2 from them instead of
training both again (about 90 s of its run), its solutions notebook the model of seed 0
(about 45 s). About 35 s of training per seed on an idle 2-core machine.

``--quick`` (seed 0, one epoch) only checks the code path; it writes only with ``--out``.

Usage: ``.venv/bin/python benchmarks/digits_models.py [--seeds 0 1 2] [--out FOLDER]``
"""

from __future__ import annotations

import argparse
import sys

import torch

from vit_tutorial.experiments.ch06 import RECIPE_MODELS, train_recipe_model

from _results import RESULTS, arguments, provenance, setup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(RECIPE_MODELS))
    arguments(parser, RESULTS)
    args = parser.parse_args()
    if args.quick:
        args.seeds = [0]
    folder = setup(args, RESULTS)
    if folder is None:
        print("--quick writes only with --out FOLDER: nothing to do")
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    epochs = 1 if args.quick else None
    extra = {"quick": args.quick, "provenance": provenance(args.seeds)}
    for seed in args.seeds:
        path = folder / f"digits_recipe_seed{seed}.pt"
        result = train_recipe_model(seed, path, epochs=epochs, extra=extra)
        print(
            f"seed {seed}: test accuracy {100 * result.test_accuracy:.2f}%, training "
            f"{result.train_seconds:.1f} s; wrote {path}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
