"""Chapter 9 with the pre-training's own variance: each encoder pre-trained with 3 seeds.

``benchmarks/pretraining.py`` pre-trains each encoder once (seed 0; MAE 10 epochs, the
coarse-label encoder 4), so its 3-seed spreads are the fine-tuning's alone. Here, for each
seed s of ``--seeds``, both encoders are pre-trained with seed s for the same number of
epochs (``--epochs``, 10), then fine-tuned and linearly probed with seed s at 100, 10 and
1,000 labelled images per class (:func:`vit_tutorial.experiments.ch09.labelled_data`), next
to the ViT from scratch with seed s. A start's spread over the seeds then holds both the
pre-training's and the fine-tuning's variance. Every other setting is ``pretraining.py``'s
(:mod:`vit_tutorial.experiments.ch09`).

The runs are ``ch09_study.seed_specs``, run by ``ch09_study.run_seeds``
(:func:`vit_tutorial.experiments.runner.run_study`, ``--jobs`` at a time, one thread each).
Each run is one JSON line of ``--log`` (default: the result file with ``.jsonl``), written
as it finishes; a run already there is skipped, so the study resumes. The encoders'
weights go to ``--weights`` (a folder) with their SHA-256 in the log; a fine-tuning line
names the SHA-256 of the encoder it started from, runs after that pre-training, and runs
again when its encoder changed; the summary keeps only lines whose encoder is the one
logged for that seed. Several processes may share a log, one seed each (``--seeds 1``).
``--summarize-only`` writes the result file from the log without running (``--runs-machine``
says where the runs were made).

``--quick`` runs one seed tiny (500 images, 1 epoch, 2 labels per class), on the CPU, in
seconds: it checks the code path and writes only with ``--out``.

Usage: ``python benchmarks/pretraining_seeds.py [--seeds 0 1 2] [--device cuda]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from vit_tutorial.experiments import ch09_study as study
from vit_tutorial.experiments.runner import read_log

from _results import RESULTS, arguments, provenance, setup, study_arguments, study_log, write_json

DEFAULT_OUT = RESULTS / "pretraining_seeds.json"
EPOCHS = 10  # MAE's in pretraining.py; the coarse-label encoder's there is 4


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="each encoder's")
    parser.add_argument("--device", default="cpu", help="'cpu', 'cuda', 'auto'")
    parser.add_argument("--weights", type=Path, default=None, help="the encoders' folder")
    study_arguments(parser)
    arguments(parser, DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.quick:
        args.seeds, args.device = args.seeds[:1], "cpu"
    out = setup(args, DEFAULT_OUT)
    log = study_log(args, out)
    weights = args.weights or Path(tempfile.mkdtemp())
    weights.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    if not args.summarize_only:
        runs = study.seed_specs(args.seeds, args.epochs, args.quick)
        study.run_seeds(runs, log, weights=weights, device=args.device, processes=args.jobs)
    done = read_log(log)
    runs = [r for r in study.current(done) if r["seed"] in args.seeds]
    pretrained = [r for r in done.values() if r["mode"] == "pretrain" and r["seed"] in args.seeds]
    table = study.seeds_summary(runs)
    for row in table:
        print(
            f"{row['mode']:>8} {row['start']:>10} {row['per_class']:>5}/class: "
            f"{100 * row['mean']:.2f}% ± {100 * row['std']:.2f} ({len(row['seeds'])} seeds)"
        )
    print(f"{len(runs)} runs in the log; {time.perf_counter() - tic:.0f} s")
    if out is not None:
        record = {
            "benchmark": "pretraining_seeds",
            "quick": args.quick,
            "provenance": {**provenance(args.seeds), "runs_on": args.runs_machine},
            "epochs": args.epochs,
            "pretraining": sorted(pretrained, key=lambda r: r["key"]),
            "summary": table,
            "runs": sorted(runs, key=lambda r: r["key"]),
        }
        write_json(out, record)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
