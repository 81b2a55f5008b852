"""Chapter 7's measurements: what one attention layer costs on a Gh×Gw grid.

Three layers (:data:`METHODS`, :func:`layers`): explicit full attention (the N × N matrix in
memory), fused full attention (``F.scaled_dot_product_attention``) and axial attention (a height
layer, then a width layer). :func:`measure` times each and takes its peak memory on square grids
(:func:`~vit_tutorial.measure.median_seconds`, :func:`~vit_tutorial.measure.peak_memory`);
:func:`slope` fits the log-log line of a cost against N over the grids from :data:`SMALLEST` up
(full attention tends to 2, ``O(N²)``; axial to 1.5, ``O(N·√N)``), and :func:`plot` draws it.
``benchmarks/axial_attention.py`` runs them for the target of issue 6.

Example:
    >>> round(slope([8, 16, 32], [1.0, 4.0, 16.0]), 6)  # time ∝ N over the grids from 16×16
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vit_tutorial.attention import MultiHeadSelfAttention
from vit_tutorial.axial import AxialAttention
from vit_tutorial.measure import median_seconds, peak_memory

__all__ = ["METHODS", "SMALLEST", "layers", "measure", "plot", "slope"]

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


def measure(grids: Sequence[int], dim: int, num_heads: int, repeats: int) -> dict[str, dict]:
    """``{method: {'seconds': [...], 'bytes': [...]}}``, one entry per grid side of ``grids``:
    the median of ``repeats`` timed calls after a warm-up, and the peak memory of one call
    (input excluded, output included), under :func:`torch.inference_mode`, batch 1, float32."""
    torch.manual_seed(0)
    modules = layers(dim, num_heads)
    results = {m: {"seconds": [], "bytes": []} for m in METHODS}
    with torch.inference_mode():
        for g in grids:
            grid = torch.randn(1, g, g, dim)  # (B, Gh, Gw, D)
            tokens = grid.reshape(1, g * g, dim)  # (B, N, D)
            inputs = {"full explicit": tokens, "full fused SDPA": tokens, "axial": grid}
            for m in METHODS:
                run = lambda m=m, x=inputs[m]: modules[m](x)  # noqa: E731
                results[m]["seconds"].append(median_seconds(run, repeats=repeats))
                results[m]["bytes"].append(peak_memory(run))
    return results


def slope(grids: Sequence[int], values: Sequence[float], smallest: int = SMALLEST) -> float:
    """Least-squares slope of log(values) against log(N = G²) over grids ``>= smallest``;
    ValueError with fewer than two such grids (no line to fit)."""
    keep = [i for i, g in enumerate(grids) if g >= smallest]
    if len({grids[i] for i in keep}) < 2:
        raise ValueError(
            f"a slope needs two or more grids of {smallest}×{smallest} or above, got {list(grids)}"
        )
    n = np.log([grids[i] ** 2 for i in keep])
    return float(np.polyfit(n, np.log([values[i] for i in keep]), 1)[0])


def plot(grids: Sequence[int], results: dict[str, dict], path: str | Path) -> None:
    """Save a log-log plot of :func:`measure`'s time and memory against N, with the slopes,
    to ``path``."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    n = [g * g for g in grids]
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2)
    for ax, key, label in zip(axes, ("seconds", "bytes"), ("time (s)", "peak memory (bytes)")):
        for m in METHODS:
            fit = slope(grids, results[m][key])
            ax.loglog(n, results[m][key], "o-", label=f"{m} (slope {fit:.2f})")
        ax.set(xlabel="tokens N", ylabel=label)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
