"""Chapter 11's ladder: the mid-2020s changes to chapter 8's ViT, one rung at a time.

What runs is :mod:`vit_tutorial.experiments.ch11` (``ch11.run``: chapter 8's run of its ``'vit'``
with the row's options, then the probe). Rows (``--rows``, default all of ``ch11.ROWS``):
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
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from vit_tutorial.experiments import ch11
from vit_tutorial.experiments.ch08 import BATCH_SIZE, FULL_TRAIN_SIZE, HISTORY_POINTS

from _results import RESULTS, arguments, provenance, setup, write_json

DEFAULT_OUT = RESULTS / "modern_ladder.json"
PARTS = ("ladder", "qk-norm", "patch-drop")


def specs(part: str, rows, sizes, seeds, steps, rates=ch11.QK_RATES) -> list[ch11.LadderSpec]:
    """The runs of ``part``: the ladder's ``rows`` at ``sizes``; the controls (see above)."""
    if part == "ladder":
        grid = [(row, size, None) for size in sizes for row in rows]
    elif part == "qk-norm":
        rows = ("baseline", "qk-norm-alone")
        # chapter 8's rate is the ladder's own (no rate in the key): its baseline is shared
        default = ch11.ch08.FIT.lr
        grid = [(r, max(sizes), None if lr == default else lr) for lr in rates for r in rows]
    else:
        grid = [(row, size, None) for size in sizes for row in ("baseline", "patch-drop")]
    return [ch11.LadderSpec(r, n, s, steps, lr) for r, n, lr in grid for s in seeds]


def _work(job: tuple[ch11.LadderSpec, dict]) -> dict:
    """One run in a worker process (one thread: the processes share the CPU)."""
    torch.set_num_threads(1)
    return ch11.run(job[0], **job[1])


def run_all(specs: list[ch11.LadderSpec], options: dict, log: Path, jobs: int) -> list[dict]:
    """Run the specs not yet in ``log``, ``jobs`` at a time, in order; every run of ``log``."""
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["key"]] = row
    todo = [s for s in specs if s.key not in done]
    print(f"{len(specs)} runs, {len(specs) - len(todo)} already in {log}", flush=True)
    made_by = provenance([])  # the code that runs: each run's line names it
    code = {k: made_by[k] for k in ("git_commit", "git_dirty")}
    context = multiprocessing.get_context("spawn")
    with log.open("a") as out, context.Pool(jobs) as pool:
        for row in pool.imap_unordered(_work, [(s, options) for s in todo]):
            row["code"] = code
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[row["key"]] = row
            print(
                f"{row['key']}: test {100 * row['test_accuracy']:.2f}%, final loss "
                f"{row['final_train_loss']:.3f} ({row['train_seconds']:.0f} s)",
                flush=True,
            )
    return list(done.values())


def summarize(rows: list[dict]) -> list[dict]:
    """Per row, training-set size and learning rate: the per-seed measures (seed order) and
    their median."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        lr = row.get("lr", ch11.ch08.FIT.lr)
        groups.setdefault((row["row"], row["train_size"], lr), []).append(row)
    order = {name: i for i, name in enumerate(ch11.ROWS)}
    summary = []
    for (name, size, lr), group in sorted(
        groups.items(), key=lambda g: (g[0][2], g[0][1], order[g[0][0]])
    ):
        group.sort(key=lambda r: r["seed"])
        per_seed = {
            key: [r[key] for r in group]
            for key in ("test_accuracy", "val_accuracy", "final_train_loss")
        }
        summary.append(
            {
                "row": name,
                "train_size": size,
                "lr": lr,
                "seeds": [r["seed"] for r in group],
                **per_seed,
                **{f"median_{k}": statistics.median(v) for k, v in per_seed.items()},
                "max_attention_logit": [max(r["max_attention_logit"]) for r in group],
                "patch_norm_max_over_median": [
                    round(r["token_norms"]["patches"][2] / r["token_norms"]["patches"][0], 3)
                    for r in group
                ],
                "parameters": group[0]["parameters"],
                "options": group[0]["options"],
            }
        )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=["ladder"])
    parser.add_argument(
        "--rows", nargs="+", choices=ch11.ROWS, default=None, help="the ladder's (default: all)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, FULL_TRAIN_SIZE])
    parser.add_argument("--steps", type=int, default=ch11.SHORT_STEPS)
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--history-points", type=int, default=HISTORY_POINTS)
    parser.add_argument("--summarize-only", action="store_true", help="run nothing")
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    args.rows = args.rows or [*ch11.RUNGS, *ch11.SWIGLU_ROWS]
    rates = ch11.QK_RATES
    if args.quick:  # every part: 2 rungs, the QK-norm pair at the highest rate, patch dropout
        args.rows, args.seeds, args.sizes, args.steps = ["baseline", "-qkv-bias"], [0], [300], 20
        args.device, args.history_points, args.parts, rates = "cpu", 2, PARTS, rates[-1:]
    out = setup(args, DEFAULT_OUT)
    log = args.log or (out.with_suffix(".jsonl") if out else Path(tempfile.mkdtemp()) / "log")
    options = {
        "device": args.device,
        "data_root": args.data_root,
        "history_points": args.history_points,
    }
    wanted_specs = {}
    for part in args.parts:
        for spec in specs(part, args.rows, args.sizes, args.seeds, args.steps, rates):
            wanted_specs[spec.key] = spec
    wanted = set(wanted_specs)
    tic = time.perf_counter()
    if args.summarize_only:
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    else:
        rows = run_all(list(wanted_specs.values()), options, log, args.jobs)
    rows = [r for r in rows if r["key"] in wanted]
    missing = sorted(wanted - {r["key"] for r in rows})
    print(f"{len(rows)} runs in {time.perf_counter() - tic:.0f} s (this invocation)")
    record = {
        "benchmark": "modern_ladder",
        "quick": args.quick,
        "provenance": {
            **provenance(args.seeds),
            "runs_on": {"device": args.device, "jobs": args.jobs, "torch_threads_per_run": 1},
            "log": str(log),
        },
        "missing_runs": missing,
        "budget": {"steps": args.steps, "batch_size": BATCH_SIZE},
        "parts": args.parts,
        "rows": args.rows,
        "sizes": args.sizes,
        "configurations": summarize(rows),
        "runs": sorted(rows, key=lambda r: r["key"]),
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
