"""Chapter 11's ladder: the mid-2020s changes to chapter 8's ViT, one rung at a time.

What runs is :mod:`vit_tutorial.experiments.ch11` (``ch11.run``: chapter 8's run of its
``'vit'`` with the row's options, then the probe; ``ch11.specs``, ``ch11.run_all``,
``ch11.summarize``). Rows (``--rows``, default all of ``ch11.ROWS``):
baseline, + LayerScale, + RMSNorm, + QK-norm, + RoPE, + registers, − QKV bias, each adding its
change to the row above, then SwiGLU on the last, with LayerScale and without. Sizes 1,000 and
55,000 training images, seeds 0 to 2, 430 steps (the short study of chapter 8): 54 runs, about
two CPU-hours with one thread each (``--jobs 2`` halves the time on two cores).

Two more parts (``--parts``): ``qk-norm``, the baseline and QK-norm alone (``ch11.CONTROLS``)
at the learning rates ``ch11.QK_RATES``, 55,000 images (21 more runs), and ``patch-drop``, the
baseline with patch dropout 0.5 at both sizes (6 more).

Each run is one line of a JSON-lines log (``--log``, default the result file with ``.jsonl``),
written as it finishes: a run already in the log is not run again, so an interrupted ladder
resumes; ``--summarize-only`` summarises the log without running. The summary (per row and
size: the per-seed test and validation accuracy, final training loss, largest attention logit
and token norms, their median) goes to ``benchmarks/results/modern_ladder.json`` with its
provenance. ``--quick``: every part at 300 images, 20 steps, one seed, on the CPU (two rungs,
the QK-norm pair at the highest rate): the code path only, written only with ``--out``.

Usage: ``python benchmarks/modern_ladder.py [--rows ...] [--jobs 2] [--device cuda]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from vit_tutorial.experiments import ch08, ch11
from vit_tutorial.experiments.runner import read_log

from _results import RESULTS, arguments, provenance, setup, study_arguments, study_log, write_json

DEFAULT_OUT = RESULTS / "modern_ladder.json"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=ch11.PARTS, default=["ladder"])
    parser.add_argument(
        "--rows", nargs="+", choices=ch11.ROWS, default=None, help="the ladder's (default: all)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, ch08.FULL_TRAIN_SIZE])
    parser.add_argument("--steps", type=int, default=ch11.SHORT_STEPS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--history-points", type=int, default=ch08.HISTORY_POINTS)
    study_arguments(parser)
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    args.rows = args.rows or [*ch11.RUNGS, *ch11.SWIGLU_ROWS]
    args.rates = ch11.QK_RATES
    if args.quick:  # every part: 2 rungs, the QK-norm pair at the highest rate, patch dropout
        args.rows, args.seeds, args.sizes, args.steps = ["baseline", "-qkv-bias"], [0], [300], 20
        args.device, args.history_points, args.parts = "cpu", 2, list(ch11.PARTS)
        args.rates = ch11.QK_RATES[-1:]
    return args


def main() -> int:
    args = parse()
    out = setup(args, DEFAULT_OUT)
    log = study_log(args, out)
    wanted = {}
    for part in args.parts:
        for spec in ch11.specs(part, args.rows, args.sizes, args.seeds, args.steps, args.rates):
            wanted[spec.key] = spec
    tic = time.perf_counter()
    if args.summarize_only:
        rows = read_log(log)
    else:
        options = dict(device=args.device, data_root=args.data_root)
        options["history_points"] = args.history_points
        rows = ch11.run_all(wanted.values(), log, processes=args.jobs, **options)
    runs = sorted((r for r in rows.values() if r["key"] in wanted), key=lambda r: r["key"])
    print(f"{len(runs)} runs in {time.perf_counter() - tic:.0f} s (this invocation)")
    runs_on = {"device": args.device, "jobs": args.jobs, "torch_threads_per_run": 1}
    record = {
        "benchmark": "modern_ladder",
        "quick": args.quick,
        "provenance": {
            **provenance(args.seeds),
            "runs_on": args.runs_machine or runs_on,
            "log": str(log),
        },
        "missing_runs": sorted(set(wanted) - set(rows)),
        "budget": {"steps": args.steps, "batch_size": ch08.BATCH_SIZE},
        "parts": args.parts,
        "rows": args.rows,
        "sizes": args.sizes,
        "configurations": ch11.summarize(runs),
        "runs": runs,
    }
    for row in record["configurations"]:
        accuracies = " ".join(f"{100 * a:.2f}" for a in row["test_accuracy"])
        print(f"{row['row']:20s} n={row['train_size']:>5} lr={row['lr']:g} test % {accuracies}")
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
