"""What every benchmark result file shares: provenance, per-seed summaries, writing.

A run that takes more than about a minute of CPU lives in a script of ``benchmarks/`` that
writes a JSON result file into ``benchmarks/results/``; the book loads and plots that file.
Each file carries a ``provenance`` block saying how, where and from which commit it was
made, so that a reader can rerun it and a reviewer can tell a stale file from a fresh one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import numpy
import sklearn
import torch

import vit_tutorial
from vit_tutorial.files import write_atomically

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def arguments(
    parser: argparse.ArgumentParser, default_out: Path, default_threads: int | None = None
) -> None:
    """Add ``--quick``, ``--out`` and ``--threads``, the options every result-writing
    benchmark has (``--threads`` defaults to ``default_threads``, else torch's)."""
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny run that only checks the code path (used by the tests); "
        "writes only with an explicit --out",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"result file (default: {default_out.relative_to(ROOT)}; none with --quick)",
    )
    default = default_threads or f"torch's, {torch.get_num_threads()} here"
    parser.add_argument(
        "--threads",
        type=int,
        default=default_threads,
        help=f"torch threads (default: {default}; 1 with --quick). On a machine shared with "
        "other jobs, 1 thread is far faster than 2 that wait for each other",
    )


def training_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--device``, ``--amp`` and ``--compile``: where and how the runs train
    (:func:`vit_tutorial.engine.fit`'s arguments; the defaults use a GPU when there is one)."""
    parser.add_argument("--device", default="auto", help="'auto', 'cpu', 'cuda', ...")
    parser.add_argument(
        "--amp",
        default="auto",
        choices=["auto", "bf16", "fp16", "none"],
        help="autocast: 'auto' is bf16 on a GPU and nothing on the CPU",
    )
    parser.add_argument("--compile", action="store_true", help="train through torch.compile")


def fit_device_options(args: argparse.Namespace) -> dict:
    """``device``, ``amp`` and ``compile`` for :func:`~vit_tutorial.engine.fit`."""
    amp = None if args.amp == "none" else args.amp
    return {"device": args.device, "amp": amp, "compile": args.compile}


def recipe_record(recipe) -> dict:
    """A :class:`~vit_tutorial.recipes.Recipe` as the result files hold it: one flat dict."""
    fields = {"dataset": recipe.dataset, "model": recipe.model, "batch_size": recipe.batch_size}
    return {**fields, **dataclasses.asdict(recipe.fit)}


def setup(args: argparse.Namespace, default_out: Path) -> Path | None:
    """Apply ``--threads`` and return where to write: ``--out``, else the committed file,
    but never a quick run over the committed file."""
    threads = args.threads or (1 if args.quick else None)
    if threads is not None:
        torch.set_num_threads(threads)
    if args.out is not None:
        return args.out
    return None if args.quick else default_out


def _git(*command: str) -> str | None:
    try:
        run = subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def provenance(seeds: list[int]) -> dict:
    """How the result was made: command, commit, versions, machine, seeds, date.

    ``git_dirty`` is true when the code that ran (the package, the benchmark scripts)
    differed from the commit, so that the commit alone does not describe it; result files
    and the book are not code.
    """
    status = _git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "vit_tutorial",
        "benchmarks",
        ":(exclude)benchmarks/results",
    )
    return {
        "command": shlex.join(["python", *sys.argv]),
        # a copy without .git (a GPU machine's) names its commit in $GIT_COMMIT
        "git_commit": _git("rev-parse", "HEAD") or os.environ.get("GIT_COMMIT"),
        "git_dirty": None if status is None else bool(status),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seeds": list(seeds),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": numpy.__version__,
            "sklearn": sklearn.__version__,
            "vit_tutorial": getattr(vit_tutorial, "__version__", None),
        },
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_1min_at_start": round(os.getloadavg()[0], 2),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
    }


def summarize(runs: list[dict]) -> dict:
    """Mean and per-seed spread of runs that each hold ``accuracy`` and ``wrong``.

    ``std`` is the sample standard deviation over seeds (0 for one seed); ``min`` and
    ``max`` bound the per-seed values.
    """
    accuracies = [r["accuracy"] for r in runs]
    wrong = [r["wrong"] for r in runs]
    return {
        "mean_accuracy": statistics.mean(accuracies),
        "std_accuracy": statistics.stdev(accuracies) if len(runs) > 1 else 0.0,
        "min_accuracy": min(accuracies),
        "max_accuracy": max(accuracies),
        "mean_wrong": statistics.mean(wrong),
        "min_wrong": min(wrong),
        "max_wrong": max(wrong),
    }


def summarize_and_print(runs: list[dict]) -> tuple[dict, list[float]]:
    """:func:`summarize` the runs, print the mean accuracy with its per-seed spread and the
    training time per run; return the summary and each run's training seconds."""
    summary = summarize(runs)
    times = [r["train_seconds"] for r in runs]
    print(
        f"mean test accuracy {100 * summary['mean_accuracy']:.2f}% over {len(runs)} seeds "
        f"(min {100 * summary['min_accuracy']:.2f}%, max {100 * summary['max_accuracy']:.2f}%"
        f", std {100 * summary['std_accuracy']:.2f} points)"
    )
    print(f"training time per run: mean {statistics.mean(times):.1f} s, max {max(times):.1f} s")
    return summary, times


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` as JSON, atomically (``vit_tutorial.files``)."""
    write_atomically(path, json.dumps(data, indent=1) + "\n")
