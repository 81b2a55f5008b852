"""Chapter 8's study: data scaling, the augmentation ablation and DeiT distillation.

What runs is :mod:`vit_tutorial.experiments.ch08`. Three parts, every run under one budget
rule (the same number of optimisation steps, ``ch08.STEPS``: 13 epochs of the 55,000
training images at batch 128, whatever the model and training-set size):

- ``scaling``: ``vit``, ``hybrid``, ``resnet18`` and ``resnet8`` (``--models``) at 1,000,
  4,000, 15,000 and 55,000 training images (class-balanced, nested), no augmentation;
- ``ablation``: the hybrid on all 55,000 images with each row of
  ``ch08.AUGMENTATIONS``;
- ``distillation``: the plain and the hybrid ViT with DeiT's distillation token, taught by
  the ``resnet18`` of the scaling part trained on the same images with the same seed,
  against the same ViTs with a class token and no distillation.

Each run is one line of a JSON-lines log (``--log``, default the result file with
``.jsonl``), written as it finishes: a run already in the log is not run again, so an
interrupted study resumes; ``--summarize-only`` summarises a log without running. At the
end the log is summarised (per configuration, the mean and per-seed spread of test
accuracy) into ``benchmarks/results/fashion_mnist_study.json`` with its provenance.

Each run records its learning curve, ``history`` (``ch08.run``): at ``--history-points``
steps spread evenly over the run (13 by default: one per epoch of the full training set),
the step, the mean training loss since the previous point and the validation accuracy. The committed study's runs were made before that and have none. The curves of the
smallest and largest sizes, 3 seeds, go into a log of their own, which resumes as any does::

    python benchmarks/fashion_mnist_study.py --parts scaling --sizes 1000 55000 --jobs 8 \
        --models vit hybrid resnet8 --log benchmarks/results/fashion_mnist_curves.jsonl \
        --out benchmarks/results/fashion_mnist_curves.json

The full study is 99 runs (48 scaling, 27 more for the ablation, 24 distillation) of 5,590
steps or a few more (whole epochs: 5,590 to 5,664); the committed log holds 96 (the ablation's ``all`` row
is missing). It takes hours on a laptop CPU, minutes on a GPU with
``--jobs 8`` (parallel processes; CUDA runs in bf16 autocast). ``--quick`` runs every
part with 300 training images and 20 steps (the scaling part with chapter 10's Swin too, the
ablation only with no augmentation and with all of it, the distillation only for the plain
ViT), with 2 points of history, on the CPU, in minutes: it checks the code path only and
writes only with ``--out``.

Usage: ``python benchmarks/fashion_mnist_study.py [--parts scaling ablation distillation]
[--jobs 8] [--device cuda]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from vit_tutorial.experiments.ch08 import (
    AUGMENTATIONS,
    BATCH_SIZE,
    FULL_TRAIN_SIZE,
    HISTORY_POINTS,
    LATER_MODELS,
    MODELS,
    STEPS,
    RunSpec,
    load_teacher,
    run,
)

from _results import RESULTS, arguments, provenance, setup, write_json

DEFAULT_OUT = RESULTS / "fashion_mnist_study.json"
SIZES = (1000, 4000, 15000, FULL_TRAIN_SIZE)
DISTILL_SIZES = (4000, FULL_TRAIN_SIZE)
PARTS = ("scaling", "ablation", "distillation")


QUICK_AUGMENTATIONS = ("none", "all")  # --quick: one row that uses every lever


def specs(
    part: str, seeds: list[int], sizes, steps: int, quick: bool = False, models=MODELS
) -> list[RunSpec]:
    """The runs of ``part``; a distillation run's teacher is a scaling run. ``models``: the
    scaling part's."""
    if part == "scaling":
        return [RunSpec(m, n, s, steps) for n in sizes for m in models for s in seeds]
    if part == "ablation":
        return [
            RunSpec("hybrid", max(sizes), s, steps, augmentation=a)
            for a in (QUICK_AUGMENTATIONS if quick else AUGMENTATIONS)
            for s in seeds
        ]
    distill_sizes = [n for n in sizes if n in DISTILL_SIZES] or [max(sizes)]
    return [
        RunSpec(m, n, s, steps, pool="cls", distilled=d)
        for n in distill_sizes
        for m in (("vit",) if quick else ("vit", "hybrid"))
        for d in (False, True)
        for s in seeds
    ]


def _work(job: tuple[RunSpec, dict]) -> dict:
    """One run in a worker process (one thread: the processes share the CPU)."""
    torch.set_num_threads(1)
    spec, options = job[0], dict(job[1])
    teachers = Path(options.pop("teachers"))
    device = options["device"]
    teacher = None
    if spec.distilled:
        teacher = load_teacher(teachers / f"{spec.teacher.key}.pt", device)
    save_to = teachers / f"{spec.key}.pt" if spec.model == "resnet18" else None
    return run(spec, teacher=teacher, save_to=save_to, **options)


def run_all(specs: list[RunSpec], options: dict, log: Path, processes: int) -> list[dict]:
    """Run the specs not yet in ``log``, ``processes`` at a time; every line of ``log``.

    Teachers go first, then the runs in the order given; a distilled run starts as soon
    as its teacher is done (it needs the teacher's saved weights).
    """
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["key"]] = row
    todo = [s for s in specs if s.key not in done]
    print(f"{len(specs)} runs, {len(specs) - len(todo)} already in {log}", flush=True)
    todo.sort(key=lambda s: s.model != "resnet18")  # teachers first, then in part order
    teachers = Path(options["teachers"])
    for spec in todo:  # a teacher in the log but not on disk (another machine) runs again
        if spec.distilled and not (teachers / f"{spec.teacher.key}.pt").exists():
            done.pop(spec.teacher.key, None)
            if spec.teacher not in todo:
                todo.insert(0, spec.teacher)

    def ready(spec: RunSpec) -> bool:
        return not spec.distilled or (
            spec.teacher.key in done and (teachers / f"{spec.teacher.key}.pt").exists()
        )

    context = multiprocessing.get_context("spawn")
    with log.open("a") as out, context.Pool(processes) as pool:
        in_flight: list = []
        while todo or in_flight:
            while len(in_flight) < processes:
                # a distilled run whose teacher is done comes first
                choice = next((s for s in todo if s.distilled and ready(s)), None)
                choice = choice or next((s for s in todo if not s.distilled), None)
                if choice is None:
                    break
                todo.remove(choice)
                in_flight.append(pool.apply_async(_work, ((choice, options),)))
            if not in_flight:
                raise RuntimeError(f"runs left whose teacher never ran: {todo}")
            finished = [r for r in in_flight if r.ready()]
            if not finished:
                time.sleep(0.2)
                continue
            for result in finished:
                in_flight.remove(result)
                row = result.get()  # re-raises a worker's error
                out.write(json.dumps(row) + "\n")
                out.flush()
                done[row["key"]] = row
                print(
                    f"{row['key']}: test {100 * row['test_accuracy']:.2f}% "
                    f"({row['train_seconds']:.0f} s)",
                    flush=True,
                )
    return list(done.values())


def _spec_fields(row: dict) -> dict:
    return {f.name: row[f.name] for f in dataclasses.fields(RunSpec)}


def summarize(rows: list[dict]) -> list[dict]:
    """Per configuration (all but the seed): mean, spread and the per-seed accuracies."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        config = {k: v for k, v in _spec_fields(row).items() if k != "seed"}
        groups.setdefault(tuple(sorted(config.items())), []).append(row)
    summary = []
    for config, group in sorted(groups.items()):
        group.sort(key=lambda r: r["seed"])
        accuracies = [r["test_accuracy"] for r in group]
        summary.append(
            {
                **dict(config),
                "seeds": [r["seed"] for r in group],
                "test_accuracy": accuracies,
                "mean_test_accuracy": statistics.fmean(accuracies),
                "std_test_accuracy": statistics.stdev(accuracies) if len(group) > 1 else 0.0,
                "min_test_accuracy": min(accuracies),
                "max_test_accuracy": max(accuracies),
                "mean_val_accuracy": statistics.fmean(r["val_accuracy"] for r in group),
                "epochs": group[0]["epochs"],
                "parameters": group[0]["parameters"],
                "mean_train_seconds": round(statistics.fmean(r["train_seconds"] for r in group), 1),
            }
        )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument(
        "--models",
        nargs="+",
        choices=MODELS + LATER_MODELS,
        default=list(MODELS),
        help="the scaling part's (default: chapter 8's four; 'swin' is chapter 10's)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--data-root", default=None)
    parser.add_argument(
        "--teachers", type=Path, default=None, help="folder of the teachers' weights"
    )
    parser.add_argument(
        "--summarize-only",
        action="store_true",
        help="run nothing: summarise the runs already in --log (made elsewhere, say on a "
        "GPU machine; --runs-machine then says where and how)",
    )
    parser.add_argument("--runs-machine", type=json.loads, default=None, help="a JSON object")
    parser.add_argument(
        "--history-points",
        type=int,
        default=HISTORY_POINTS,
        help="points of each run's learning curve (validation accuracy, training loss)",
    )
    arguments(parser, DEFAULT_OUT)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.sizes, args.steps, args.device = [0], [300], 20, "cpu"
        args.models = [*MODELS, "swin"]  # chapter 10's Swin too (its controls: configurations)
        args.history_points = 2
    out = setup(args, DEFAULT_OUT)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    log = args.log or (out.with_suffix(".jsonl") if out else Path(tempfile.mkdtemp()) / "log")
    teachers = args.teachers or log.parent / (log.stem + "-teachers")
    teachers.mkdir(parents=True, exist_ok=True)
    options = {
        "device": device,
        "data_root": args.data_root,
        "teachers": str(teachers),
        "history_points": args.history_points,
    }
    wanted = {}
    for part in args.parts:
        for spec in specs(part, args.seeds, args.sizes, args.steps, args.quick, args.models):
            wanted[spec.key] = spec
            if spec.distilled:  # and its teacher
                wanted[spec.teacher.key] = spec.teacher
    tic = time.perf_counter()
    if args.summarize_only:
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    else:
        rows = run_all(list(wanted.values()), options, log, args.jobs)
    rows = [r for r in rows if r["key"] in wanted]
    missing = sorted(set(wanted) - {r["key"] for r in rows})
    print(f"{len(rows)} runs in {time.perf_counter() - tic:.0f} s (this invocation)")
    if missing:
        print(f"{len(missing)} runs not in {log}: {missing}")
    runs_on = args.runs_machine or {"device": device, "jobs": args.jobs}
    record = {
        "benchmark": "fashion_mnist_study",
        "quick": args.quick,
        "provenance": {**provenance(args.seeds), "runs_on": runs_on, "log": str(log)},
        "missing_runs": missing,
        "budget": {"steps": args.steps, "batch_size": BATCH_SIZE},
        # the runs made before histories were recorded have none
        "runs_with_history": sum("history" in r for r in rows),
        "parts": args.parts,
        "sizes": args.sizes,
        "configurations": summarize(rows),
        "runs": sorted(rows, key=lambda r: r["key"]),
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
