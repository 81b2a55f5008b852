"""Measuring what a layer costs on the CPU: wall-clock time and peak memory.

Used by the chapters that measure cost (1 and 7) and by ``benchmarks/``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["median_seconds", "peak_memory"]


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of CPU memory that tensors allocated while ``fn()`` ran.

    PyTorch has no ``max_memory_allocated`` for the CPU, so this runs ``fn`` under
    :class:`torch.profiler.profile` with ``profile_memory=True``, which records every
    allocation and every free of the tensor allocator (including a kernel's internal
    buffers), and sums these deltas in time order; the peak is the largest running sum.
    Memory that was live before the call does not count; the result of ``fn`` does.

    Example:
        >>> peak_memory(lambda: torch.empty(1024, 1024))  # 4 MiB of float32
        4194304
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep the profiler's C++ log off stderr
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        fn()
    # The raw event stream keeps each allocation and free as its own "[memory]" event
    # (prof.events() folds them into the operators, losing the order within an operator).
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()  # > 0 allocation, < 0 free
        peak = max(peak, live)
    return peak


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` runs.

    The median ignores the occasional run slowed down by another process; run it under
    :func:`torch.inference_mode` with a fixed :func:`torch.set_num_threads` to compare.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
