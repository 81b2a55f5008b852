"""What one attention layer costs on a Gh×Gw grid: explicit full, fused SDPA full, and axial.

Target (issue 6): on a 64×64 grid with D = 64, in float32 on the CPU, one axial layer
(a height layer, then a width layer) takes at least 10× less time and at least 10× less
peak memory than one explicit full-attention layer; the ratios against the fused
``F.scaled_dot_product_attention`` are reported too. The script exits with status 1
when the target is missed.

What runs is :mod:`vit_tutorial.experiments.ch07`. How it measures:

* **time**: :func:`vit_tutorial.measure.median_seconds`, the median of ``--repeats`` runs
  after a warm-up run, under :func:`torch.inference_mode` with ``--threads`` threads
  (default 1, so that a busy machine disturbs it less);
* **peak memory**: :func:`vit_tutorial.measure.peak_memory`. PyTorch has no CPU
  ``max_memory_allocated``, so the layer runs once under ``torch.profiler`` with
  ``profile_memory=True``; the allocations and frees it records are summed in time order
  and the largest running sum is the peak (input excluded, output included);
* **FLOPs**: :func:`vit_tutorial.axial.attention_flops`, by formula.

Slopes are least-squares fits of log(time) and log(memory) against log(N) over the grids
from 16×16 up; full attention tends to 2 (``O(N²)``), axial to 1.5 (``O(N·√N)``). With
fewer than two such grids there is no line to fit, and the script refuses ``--grids``.

Usage: ``.venv/bin/python benchmarks/axial_attention.py [--threads 1] [--plot out.png]``
"""

from __future__ import annotations

import argparse
import sys

import torch

from vit_tutorial.axial import attention_flops
from vit_tutorial.experiments.ch07 import METHODS, SMALLEST, measure, plot, slope


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grids", type=int, nargs="+", default=[8, 12, 16, 24, 32, 48, 64])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--plot", help="save a log-log plot of time and memory here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    grids = sorted(set(args.grids))
    if sum(g >= SMALLEST for g in grids) < 2:  # refused before anything is measured
        parser.error(
            f"--grids needs two or more grids of {SMALLEST}×{SMALLEST} or above for the "
            f"slopes, got {args.grids}"
        )
    print(
        f"one attention layer, B=1, D={args.dim}, h={args.num_heads}, float32, CPU, "
        f"{torch.get_num_threads()} thread(s), torch {torch.__version__}, "
        f"median of {args.repeats} runs"
    )
    results = measure(grids, args.dim, args.num_heads, args.repeats)

    print(
        f"\n{'grid':>7} {'N':>6} | "
        + " | ".join(f"{m:>24}" for m in METHODS)
        + " | GFLOPs full / axial"
    )
    for i, g in enumerate(grids):
        cells = [
            f"{results[m]['seconds'][i] * 1e3:9.2f} ms {results[m]['bytes'][i] / 2**20:8.2f} MiB"
            for m in METHODS
        ]
        flops = [attention_flops(g, args.dim, k) / 1e9 for k in ("full", "axial")]
        print(
            f"{g:>3}×{g:<3} {g * g:>6} | "
            + " | ".join(cells)
            + f" | {flops[0]:.3f} / {flops[1]:.3f}"
        )
    print("\nslopes of log-log fits against N (grids from 16×16):")
    for m in METHODS:
        print(
            f"  {m:>16}: time {slope(grids, results[m]['seconds']):.2f}, "
            f"peak memory {slope(grids, results[m]['bytes']):.2f}"
        )

    ok = True
    g = grids[-1]
    axial_t, axial_m = results["axial"]["seconds"][-1], results["axial"]["bytes"][-1]
    print(f"\nat {g}×{g} (N={g * g}), ratio full / axial (height + width); > 1: axial is cheaper")
    for m in METHODS[:2]:
        t_ratio = results[m]["seconds"][-1] / axial_t
        m_ratio = results[m]["bytes"][-1] / axial_m
        print(f"  {m:>16}: time {t_ratio:6.1f}×, peak memory {m_ratio:6.1f}×")
        if m == "full explicit":
            ok = t_ratio >= 10 and m_ratio >= 10
    flop_ratio = attention_flops(g, args.dim, "full") / attention_flops(g, args.dim, "axial")
    print(f"  {'FLOPs by formula':>16}: {flop_ratio:6.1f}×")
    print(
        f"target (>= 10× less time and peak memory than explicit full at {g}×{g}): "
        f"{'met' if ok else 'MISSED'}"
    )

    if args.plot:
        plot(grids, results, args.plot)
        print(f"plot saved to {args.plot}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
