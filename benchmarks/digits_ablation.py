"""The ablation of chapter 6: which design choices matter for a ViT on the digits.

What runs is :mod:`vit_tutorial.experiments.ch06`: one plain ViT and variants that each
change one thing (the position encoding, the patch size, the pooling, the stem), with the
chapter's shortened schedule (15 epochs), tested on the same 360 test images; the seed
changes the initial weights and the order of the batches. ``--epochs`` shortens the
schedule (the warm-up stays its first fifth). A configuration that appears in several
groups (the base appears in all four) is trained once per seed.

Each run is one line of a JSON-lines log (``--log``, default the result file with ``.jsonl``),
written as it finishes (``--jobs`` at a time, one thread each:
:func:`vit_tutorial.experiments.runner.run_study`), so an interrupted ablation resumes. The
result file holds, per variant and seed, the test accuracy and the number of wrong test images,
with the mean and the spread over seeds, and a ``provenance`` block. One test
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
from vit_tutorial.experiments import ch06
from vit_tutorial.experiments.runner import accuracy_summary, read_log, run_study

from _results import RESULTS, arguments, provenance, setup, study_arguments, study_log, write_json

DEFAULT_OUT = RESULTS / "digits_ablation.json"
QUICK = dict(seeds=[0], epochs=1, variants=["patch-4", "stem-conv-2"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--epochs", type=int, default=ch06.SCHEDULE.epochs)
    variants = list(ch06.VARIANTS)
    parser.add_argument("--variants", nargs="+", choices=variants, default=variants)
    study_arguments(parser)
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.epochs, args.variants = QUICK["seeds"], QUICK["epochs"], QUICK["variants"]
    out = setup(args, DEFAULT_OUT)
    log = study_log(args, out)
    tic = time.perf_counter()
    runs = ch06.ablation_runs(args.variants, args.seeds, args.epochs)
    if args.summarize_only:
        done = read_log(log)
    else:
        done = run_study(runs, ch06.ablation_work, log, processes=args.jobs)
    if missing := [run.key for run in runs if run.key not in done]:
        print(f"runs not in {log}: {missing}", file=sys.stderr)
        return 1
    seeds = "".join(f"{'seed ' + str(s):>9s}" for s in args.seeds)
    print(f"{'varied':12s}{'variant':15s}{seeds}{'mean':>8s}{'wrong':>8s}")
    rows = []
    for variant in args.variants:
        keys = [ch06.AblationRun.of(variant, seed, args.epochs).key for seed in args.seeds]
        results = [{k: v for k, v in done[key].items() if k not in ("key", "code")} for key in keys]
        rows.append({**ch06.variant_row(variant, results), **accuracy_summary(results)})
        accuracies = "".join(f"{100 * r['accuracy']:9.2f}" for r in results)
        print(
            f"{rows[-1]['group']:12s}{rows[-1]['name']:15s}{accuracies}"
            f"{100 * rows[-1]['mean_accuracy']:8.2f}{rows[-1]['mean_wrong']:8.1f}"
        )
    print(f"{len(runs)} distinct runs of {args.epochs} epochs")
    schedule = {**dataclasses.asdict(ch06.settings(args.epochs)), "batch_size": ch06.BATCH_SIZE}
    record = {
        "benchmark": "digits_ablation",
        "quick": args.quick,
        "provenance": provenance(args.seeds),
        "base": ch06.BASE,
        "schedule": schedule,
        "test_images": len(digits_datasets().test),
        "variants": rows,
        "wall_seconds": round(time.perf_counter() - tic, 1),
    }
    print(f"wall time {record['wall_seconds']:.0f} s")
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
