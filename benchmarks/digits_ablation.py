"""The ablation of chapter 6: which design choices matter for a ViT on the digits.

What runs is :mod:`vit_tutorial.experiments.ch06`: one plain ViT and variants that each
change one thing (the position encoding, the patch size, the pooling, the stem), with the
chapter's shortened schedule (15 epochs), tested on the same 360 test images; the seed
changes the initial weights and the order of the batches. ``--epochs`` shortens the
schedule (the warm-up stays its first fifth). A configuration that appears in several
groups (the base appears in all four) is trained once per seed.

The result file holds, per variant and seed, the test accuracy and the number of wrong test
images, with the mean and the spread over seeds, and a ``provenance`` block. One test
image is 1/360 = 0.28 points of accuracy: differences of an image or two are noise.

Usage::

    .venv/bin/python benchmarks/digits_ablation.py     # writes results/digits_ablation.json
    .venv/bin/python benchmarks/digits_ablation.py --quick --out /tmp/a.json     # seconds
    .venv/bin/python benchmarks/digits_ablation.py --variants patch-4 stem-conv-1 --seeds 0 \\
        --epochs 3 --out /tmp/b.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from vit_tutorial.data import digits_datasets
from vit_tutorial.experiments.ch06 import BASE, BATCH_SIZE, SCHEDULE, VARIANTS, ablation, settings

from _results import RESULTS, arguments, provenance, setup, summarize, write_json

DEFAULT_OUT = RESULTS / "digits_ablation.json"
QUICK = dict(seeds=[0], epochs=1, variants=["patch-4", "stem-conv-2"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--epochs", type=int, default=SCHEDULE.epochs)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.variants = QUICK["seeds"], QUICK["epochs"], QUICK["variants"]
    out = setup(args, DEFAULT_OUT)
    record = {
        "benchmark": "digits_ablation",
        "quick": args.quick,
        "provenance": provenance(args.seeds),
    }
    tic = time.perf_counter()
    seeds = "".join(f"{'seed ' + str(s):>9s}" for s in args.seeds)
    print(f"{'varied':12s}{'variant':15s}{seeds}{'mean':>8s}{'wrong':>8s}", flush=True)
    rows = []
    for row in ablation(args.variants, args.seeds, args.epochs):
        rows.append({**row, **summarize(row["runs"])})
        accuracies = "".join(f"{100 * r['accuracy']:9.2f}" for r in row["runs"])
        print(
            f"{row['group']:12s}{row['name']:15s}{accuracies}"
            f"{100 * rows[-1]['mean_accuracy']:8.2f}{rows[-1]['mean_wrong']:8.1f}",
            flush=True,
        )
    configs = {tuple(sorted(r["config"].items())) for r in rows}
    print(f"{len(configs) * len(args.seeds)} distinct runs of {args.epochs} epochs")
    record.update(
        {
            "base": BASE,
            "schedule": {**dataclasses.asdict(settings(args.epochs)), "batch_size": BATCH_SIZE},
            "test_images": len(digits_datasets().test),
            "variants": rows,
            "wall_seconds": round(time.perf_counter() - tic, 1),
        }
    )
    print(f"wall time {record['wall_seconds']:.0f} s")
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
