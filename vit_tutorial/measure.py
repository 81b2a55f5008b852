"""What a layer costs: wall-clock time, peak memory and FLOP utilisation (chapters 1 and 7, the
performance appendix, ``benchmarks/``). :func:`interleaved_timings` times implementations of the
same work in rotating order, so that a slow spell of the machine hits them all alike,
:func:`ratio_to_best` turns those rounds into "ours / the fastest other" per round, and
:func:`cpu_share` says whether another process held a core meanwhile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from numbers import Integral, Real

import torch

from vit_tutorial.validate import check_int

__all__ = [
    "median_seconds",
    "peak_memory",
    "interleaved_timings",
    "ratio_to_best",
    "model_flops_utilization",
    "QUIET_SHARE",
    "CpuShare",
    "cpu_share",
]

#: :attr:`CpuShare.share` at or above which a measurement counts as quiet (no other process
#: held a core it needed); below it, as taken under contention.
QUIET_SHARE = 0.9


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes of CPU memory that tensors allocated while ``fn()`` ran (memory live before
    does not count, the result of ``fn`` does). PyTorch has no CPU ``max_memory_allocated``, so
    this runs ``fn`` under a profiler that records every allocation and free of the tensor
    allocator (a kernel's internal buffers too): the peak is the largest running sum in time order.

    Example:
        >>> peak_memory(lambda: torch.empty(1024, 1024))  # 4 MiB of float32
        4194304
    """
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep the profiler's C++ log off stderr
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        fn()
    # Raw events: prof.events() folds allocations (> 0 bytes) and frees into ops, losing order.
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    return max(itertools.accumulate((e.nbytes() for e in events), initial=0))


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs, after ``warmup`` runs: the
    median ignores the occasional run slowed down by another process. To compare, run it under
    :func:`torch.inference_mode` with a fixed :func:`torch.set_num_threads`."""
    times = interleaved_timings({"fn": fn}, check_int("repeats", repeats), warmup)
    return statistics.median(times["fn"])


def interleaved_timings(
    fns: Mapping[str, Callable[[], object]],
    rounds: int = 5,
    warmup: int = 1,
    synchronize: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """Wall-clock seconds of each of ``fns`` (implementations of the same work, by name), once
    per round: ``{name: [seconds of round 0, round 1, ...]}``. Each first runs ``warmup`` times
    untimed; round ``r`` (of ``rounds`` >= 1) then runs them all from the ``r``-th (mod their
    number), so none always runs first or last and the per-round ratios stay fair.
    ``synchronize`` runs before each clock reading (``torch.cuda.synchronize`` on a GPU, whose
    kernels run asynchronously; ``None`` on the CPU).

    Example:
        >>> times = interleaved_timings({"a": lambda: None, "b": lambda: None}, rounds=3)
        >>> {name: len(seconds) for name, seconds in times.items()}
        {'a': 3, 'b': 3}
    """
    for name, value, low in (("rounds", rounds, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if not fns:
        raise ValueError("fns is empty: give at least one function to time")
    sync = synchronize or (lambda: None)
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    sync()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            start = time.perf_counter()
            fns[name]()
            sync()
            times[name].append(time.perf_counter() - start)
    return times


def ratio_to_best(times: Mapping[str, list[float]], ours: str) -> dict[str, object]:
    """How ``ours`` compares with the fastest of the others, from interleaved rounds:
    ``ratio`` is ``median(times[ours]) / median(times[best])``, ``best`` being the other name
    with the smallest median (below 1: ``ours`` is faster); ``round_median``, ``round_min`` and
    ``round_max`` summarise the per-round ratios ``times[ours][r] / times[best][r]``, the spread
    the machine's noise leaves (the minimum of several others' noisy times per round would be
    biased low, favouring them); ``median_<name>`` are the raw medians (seconds).

    Example:
        >>> r = ratio_to_best({"ours": [1.0, 2.0, 3.0], "a": [2.0, 2.0, 2.0],
        ...                    "b": [4.0, 1.0, 6.0]}, "ours")
        >>> r["best"], r["ratio"], r["round_min"], r["round_max"]
        ('a', 1.0, 0.5, 1.5)
    """
    if ours not in times:
        raise ValueError(f"{ours!r} is not among the timed names {sorted(times)}")
    others = [name for name in times if name != ours]
    if not others:
        raise ValueError(f"nothing to compare {ours!r} with: time at least one other")
    _positive([(f"times[{name!r}]", t) for name, seconds in times.items() for t in seconds])
    lengths = {len(seconds) for seconds in times.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"every name needs the same number (>= 1) of rounds, got {lengths}")
    medians = {name: statistics.median(t) for name, t in times.items()}
    best = min(others, key=medians.__getitem__)
    rounds = [mine / theirs for mine, theirs in zip(times[ours], times[best], strict=True)]
    return {
        "best": best,
        "ratio": medians[ours] / medians[best],
        "round_median": statistics.median(rounds),
        "round_min": min(rounds),
        "round_max": max(rounds),
        **{f"median_{name}": m for name, m in medians.items()},
    }


def model_flops_utilization(flops: float, seconds: float, peak_flops: float) -> float:
    """Model FLOP utilisation: ``flops / seconds``, the achieved rate, over the peak rate.
    ``flops`` counts the model's own arithmetic (a ViT training step: about 3 × batch ×
    :func:`~vit_tutorial.vit.vit_flops`, a forward and a backward of twice its cost), not the
    hardware's (recomputation, padding), per PaLM (Chowdhery et al. 2022, Section 4.1, Appendix B).

    Example:
        >>> round(model_flops_utilization(flops=4e12, seconds=0.01, peak_flops=989e12), 3)
        0.404
    """
    _positive([("flops", flops), ("seconds", seconds), ("peak_flops", peak_flops)])
    return flops / seconds / peak_flops


def _positive(pairs: list[tuple[str, object]]) -> None:
    for name, value in pairs:
        if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a number > 0 and finite, got {value!r}")


@dataclasses.dataclass
class CpuShare:
    """What this process got of the CPU during a measurement (:func:`cpu_share` fills it)."""

    threads: int
    cpu_seconds: float = 0.0  # user and system time of every thread of the process
    wall_seconds: float = 0.0

    @property
    def share(self) -> float:
        """``cpu_seconds / (wall_seconds × threads)``: 1 when every thread ran throughout."""
        return self.cpu_seconds / (self.wall_seconds * self.threads) if self.wall_seconds else 0.0

    @property
    def quiet(self) -> bool:
        """Whether :attr:`share` reached :data:`QUIET_SHARE`."""
        return self.share >= QUIET_SHARE

    def as_dict(self) -> dict[str, object]:
        """The record a result file keeps: the fields, the share and the verdict."""
        return {**dataclasses.asdict(self), "share": self.share, "quiet": self.quiet}

    def __str__(self) -> str:
        verdict = "quiet" if self.quiet else f"below {QUIET_SHARE}, not quiet"
        return f"CPU share {self.share:.2f} of {self.threads} thread(s): {verdict}"


@contextlib.contextmanager
def cpu_share(threads: int | None = None) -> Iterator[CpuShare]:
    """Measure, around the ``with`` block, the process's CPU seconds over wall seconds ×
    ``threads`` (default: :func:`torch.get_num_threads`): a contention test that does not lag.

    A thread that runs throughout adds its wall time in CPU time; one that waits for a core
    another process holds does not. So one thread on a machine with a free core gives about 1,
    and ``threads`` beside ``k`` busy threads of others, more than the cores, about
    ``cores / (threads + k)`` (2/3 for 1 thread and 2 neighbours on 2 cores, or 2 and 1).
    OpenMP threads that wait at a barrier spin for a while before they sleep, and spinning
    counts as CPU time, so a run of large kernels on an idle machine gives about 1 with every
    thread too; but work that keeps only one thread busy (Python between small kernels, the
    optimiser's loop) gives about ``1 / threads`` on an idle machine: the test can call a quiet
    machine busy (a false alarm, on the safe side). It does not see what
    slows a process without taking its core: shared caches, memory bandwidth, a neighbour on
    the other hyperthread of the same core. The load average is no substitute: it averages
    the last minute, lagging, and counts this process's own threads.

    Example:
        >>> with cpu_share(threads=1) as cpu:
        ...     time.sleep(0.05)  # waiting is not running
        >>> cpu.quiet
        False
    """
    record = CpuShare(check_int("threads", torch.get_num_threads() if threads is None else threads))
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield record
    finally:
        record.cpu_seconds = time.process_time() - cpu
        record.wall_seconds = time.perf_counter() - wall
