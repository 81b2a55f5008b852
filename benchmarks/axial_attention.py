"""What one attention layer costs on a Gh×Gw grid: explicit full, fused SDPA full, and axial.

Target (issue 6): on a 64×64 grid with D = 64, in float32 on the CPU, one axial layer
(a height layer, then a width layer) takes at least 10× less time and at least 10× less
peak memory than one explicit full-attention layer; the ratios against the fused
``F.scaled_dot_product_attention`` are reported too. The script exits with status 1
when the target is missed.

How it measures:

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

import numpy as np
import torch
from torch import nn

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import AxialAttention, attention_flops
from vit_tutorial.measure import median_seconds, peak_memory

METHODS = ("full explicit", "full fused SDPA", "axial")
#: The smallest grid side the slopes fit: below it, fixed costs bend the log-log lines.
SMALLEST = 16


def layers(dim: int, num_heads: int) -> dict[str, nn.Module]:
    """The three layers compared, in eval mode; axial uses the package default (fused) path."""
    explicit = MultiHeadSelfAttention(dim, num_heads).eval()
    explicit.fused = False  # softmax(Q Kᵀ / √d) V, the N × N matrix in memory
    fused = MultiHeadSelfAttention(dim, num_heads).eval()
    axial = nn.Sequential(
        AxialAttention(dim, num_heads, "height"), AxialAttention(dim, num_heads, "width")
    ).eval()
    return dict(zip(METHODS, (explicit, fused, axial), strict=True))


def measure(grids: list[int], dim: int, num_heads: int, repeats: int) -> dict[str, dict]:
    """``{method: {'seconds': [...], 'bytes': [...]}}``, one entry per grid."""
    torch.manual_seed(0)
    modules = layers(dim, num_heads)
    results = {m: {"seconds": [], "bytes": []} for m in METHODS}
    with torch.inference_mode():
        for g in grids:
            grid = torch.randn(1, g, g, dim)  # (B, Gh, Gw, D)
            inputs = {
                "full explicit": grid.reshape(1, g * g, dim),  # (B, N, D)
                "full fused SDPA": grid.reshape(1, g * g, dim),
                "axial": grid,
            }
            for m in METHODS:
                run = lambda m=m: modules[m](inputs[m])  # noqa: E731
                results[m]["seconds"].append(median_seconds(run, repeats=repeats))
                results[m]["bytes"].append(peak_memory(run))
    return results


def slope(grids: list[int], values: list[float], smallest: int = SMALLEST) -> float:
    """Least-squares slope of log(values) against log(N = G²) over grids ``>= smallest``;
    ValueError with fewer than two such grids (no line to fit)."""
    keep = [i for i, g in enumerate(grids) if g >= smallest]
    if len({grids[i] for i in keep}) < 2:
        raise ValueError(
            f"a slope needs two or more grids of {smallest}×{smallest} or above, got {grids}"
        )
    n = np.log([grids[i] ** 2 for i in keep])
    return float(np.polyfit(n, np.log([values[i] for i in keep]), 1)[0])


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
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = [g * g for g in grids]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, label in (
            (axes[0], "seconds", "time (s)"),
            (axes[1], "bytes", "peak memory (bytes)"),
        ):
            for m in METHODS:
                ax.loglog(
                    n,
                    results[m][key],
                    "o-",
                    label=f"{m} (slope {slope(grids, results[m][key]):.2f})",
                )
            ax.set(xlabel="tokens N", ylabel=label)
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=90)
        print(f"plot saved to {args.plot}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
