"""The performance appendix's CPU figures, timed at full size on a quiet machine.

The appendix's text interprets the figures of this file, not the timings of the machine that
last ran the page: its live cells time reduced cases, and a busy machine (another process on a
core) makes those say more about the neighbours than about the code (issue 33).

What it measures: :func:`vit_tutorial.experiments.appendix.measure_all` at
:data:`~vit_tutorial.experiments.appendix.FULL` (the sizes the appendix interprets): einops'
cost per call, the backward/forward ratio of a ViT-S/16 training step, fused against explicit
attention, torchvision's fast path, bf16 autocast's time and error, ``torch.compile``'s first
call and gain, AdamW's for-loop, ``foreach`` and fused steps, images per second by batch and
thread count, the utilisation of the measured matmul rate, and two identical copies of one
MLP. Every figure is timed on ``--threads`` (default 1) but the thread comparison, on 1 and
``--all-threads`` (default: every CPU).

Each timed block records its CPU share (:func:`vit_tutorial.measure.cpu_share`: CPU seconds
over wall seconds × threads). One below :data:`vit_tutorial.measure.QUIET_SHARE` was timed
while another process held a core: the script then refuses to write the committed file and
exits with status 1, naming the blocks; with ``--out`` it writes there, marked
``"quiet": false``. ``--quick`` (tiny sizes, 2 rounds, about 30 s, most of it one compile)
only checks the code path; it writes only with ``--out`` and exits 0.

The result file, ``benchmarks/results/appendix_cpu_fp32.json``:

- ``benchmark`` ("appendix_timings"), ``quick``, ``threads``, ``all_threads``;
- ``quiet``: every block's share reached ``quiet_share``; ``contended``: those that did not,
  as ``"name (share)"``;
- ``load_average_1min``: ``{"before": ..., "after": ...}`` the run;
- ``provenance``: command, commit, versions, machine, date (``benchmarks/_results.py``);
- ``measurements``: ``{name: {"case", "rounds", "medians" (seconds by timed name), "cpu" (one
  :meth:`~vit_tutorial.measure.CpuShare.as_dict` per timed block), "figures"}}``, with names
  and figures as :mod:`vit_tutorial.experiments.appendix` documents them.

Usage (on an idle machine, from a committed tree; about a minute on 2 cores):
``.venv/bin/python benchmarks/appendix_timings.py [--threads 1] [--all-threads N] [--quick]
[--out PATH]``
"""

from __future__ import annotations

import argparse
import os
import sys

from vit_tutorial.experiments.appendix import FULL, QUICK, measure_all
from vit_tutorial.measure import QUIET_SHARE

from _results import RESULTS, arguments, provenance, setup, write_json

DEFAULT_OUT = RESULTS / "appendix_cpu_fp32.json"


def contended(measurements: dict[str, dict]) -> list[str]:
    """``"name (share)"`` of every timed block whose CPU share was below the quiet share."""
    return [
        f"{name} ({block['share']:.2f})"
        for name, record in measurements.items()
        for block in record["cpu"]
        if not block["quiet"]
    ]


def show(name: str, record: dict) -> None:
    """Print one measurement: its case, CPU shares and figures."""
    shares = ", ".join(f"{b['share']:.2f}" for b in record["cpu"])
    figures = ", ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in record["figures"].items()
    )
    print(f"{name}: {record['case']}; CPU share {shares}\n  {figures}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    arguments(parser, DEFAULT_OUT, default_threads=1)
    parser.add_argument(
        "--all-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="the thread count the thread comparison sets against one (default: every CPU, "
        f"{os.cpu_count()} here)",
    )
    args = parser.parse_args()
    out = setup(args, DEFAULT_OUT)
    record = {
        "benchmark": "appendix_timings",
        "quick": args.quick,
        "provenance": provenance([0]),
        "threads": args.threads or 1,
        "all_threads": args.all_threads,
        "quiet_share": QUIET_SHARE,
        "load_average_1min": {"before": round(os.getloadavg()[0], 2)},
    }
    measurements = measure_all(QUICK if args.quick else FULL, args.all_threads, show)
    record["load_average_1min"]["after"] = round(os.getloadavg()[0], 2)
    busy = contended(measurements)
    record.update(quiet=not busy, contended=busy, measurements=measurements)
    print(f"load average (1 min): {record['load_average_1min']}")
    if busy:
        print(f"under contention (CPU share below {QUIET_SHARE}): {', '.join(busy)}")
    if busy and out == DEFAULT_OUT:
        print(
            f"not written: {DEFAULT_OUT.name} holds a quiet machine's figures only; rerun "
            "on an idle machine, or write elsewhere with --out",
            file=sys.stderr,
        )
        return 1
    if out is not None:
        write_json(out, record)
        print(f"wrote {out}")
    return 1 if busy and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
