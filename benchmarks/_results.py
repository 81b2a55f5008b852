"""What every benchmark script shares: its common options, and where it writes.

A run that takes more than about a minute of CPU lives in a script of ``benchmarks/`` that
writes a JSON result file into ``benchmarks/results/``; the book loads and plots that file.
Each file carries a ``provenance`` block saying how, where and from which commit it was made
(:func:`vit_tutorial.experiments.runner.provenance`, re-exported here with ``write_json``),
so that a reader can rerun it and a reviewer can tell a stale file from a fresh one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import torch

from vit_tutorial.experiments.runner import accuracy_summary, provenance, write_json

__all__ = ["RESULTS", "arguments", "fit_device_options", "provenance", "recipe_record", "setup"]
__all__ += ["study_arguments", "study_log", "summarize_and_print", "training_arguments"]
__all__ += ["write_json"]

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


def study_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--jobs``, ``--log``, ``--summarize-only`` and ``--runs-machine``: the options of a
    study that :func:`vit_tutorial.experiments.runner.run_study` runs, resumably."""
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes, one thread each")
    parser.add_argument(
        "--log", type=Path, default=None, help="the runs' JSON lines (default: --out's, .jsonl)"
    )
    parser.add_argument(
        "--summarize-only",
        action="store_true",
        help="run nothing: summarise the runs already in --log (made elsewhere, say on a "
        "GPU machine; --runs-machine then says where and how)",
    )
    parser.add_argument("--runs-machine", type=json.loads, default=None, help="a JSON object")


def study_log(args: argparse.Namespace, out: Path | None) -> Path:
    """``--log``, else the result file with ``.jsonl``, else (a quick run that writes nothing)
    a file in a new temporary folder."""
    return args.log or (out.with_suffix(".jsonl") if out else Path(tempfile.mkdtemp()) / "log")


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


def summarize_and_print(runs: list[dict]) -> tuple[dict, list[float]]:
    """:func:`~vit_tutorial.experiments.runner.accuracy_summary` of the runs; print the mean
    accuracy with its per-seed spread and the training time per run; return the summary and
    each run's training seconds."""
    summary = accuracy_summary(runs)
    times = [r["train_seconds"] for r in runs]
    print(
        f"mean test accuracy {100 * summary['mean_accuracy']:.2f}% over {len(runs)} seeds "
        f"(min {100 * summary['min_accuracy']:.2f}%, max {100 * summary['max_accuracy']:.2f}%"
        f", std {100 * summary['std_accuracy']:.2f} points)"
    )
    print(f"training time per run: mean {statistics.mean(times):.1f} s, max {max(times):.1f} s")
    return summary, times
