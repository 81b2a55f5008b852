"""vit_tutorial.measure: interleaved timing, the ratio to the best other, MFU, median time, the
contention test."""

import math
import time

import numpy as np
import pytest
import torch

from vit_tutorial import measure
from vit_tutorial.measure import (
    QUIET_SHARE,
    cpu_share,
    interleaved_timings,
    median_seconds,
    model_flops_utilization,
    peak_memory,
    ratio_to_best,
)


def recorder(calls: list[str], name: str):
    return lambda: calls.append(name)


def test_interleaved_timings_rotates_the_order_and_warms_up_first():
    calls: list[str] = []
    fns = {name: recorder(calls, name) for name in "abc"}
    times = interleaved_timings(fns, rounds=4, warmup=2)
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]  # the warm-up, untimed
    rounds = [calls[6 + 3 * r : 9 + 3 * r] for r in range(4)]
    assert rounds == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for v in times.values() for t in v)


def test_interleaved_timings_synchronizes_before_each_reading():
    syncs = []
    interleaved_timings(
        {"a": lambda: None}, rounds=3, warmup=0, synchronize=lambda: syncs.append(1)
    )
    assert len(syncs) == 1 + 3  # after the warm-up, then after every timed call


def test_interleaved_timings_measures_time():
    import time

    times = interleaved_timings(
        {"slow": lambda: time.sleep(0.02), "fast": lambda: None}, rounds=2, warmup=0
    )
    assert min(times["slow"]) >= 0.02 > max(times["fast"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rounds": 0}, "rounds must be an integer >= 1, got 0"),
        ({"rounds": 2.0}, "rounds must be an integer >= 1, got 2.0"),
        ({"warmup": -1}, "warmup must be an integer >= 0, got -1"),
    ],
)
def test_interleaved_timings_refuses_bad_counts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        interleaved_timings({"a": lambda: None}, **kwargs)


def test_interleaved_timings_refuses_nothing_to_time():
    with pytest.raises(ValueError, match="fns is empty"):
        interleaved_timings({})


def test_ratio_to_best_divides_medians_by_the_fastest_others():
    times = {"ours": [1.0, 3.0, 2.0], "a": [2.0, 2.0, 2.0], "b": [0.5, 6.0, 4.0]}
    r = ratio_to_best(times, "ours")
    assert r["best"] == "a"  # median 2 against b's 4
    assert r["ratio"] == 1.0  # median(ours) = 2 over a's 2
    assert (r["round_median"], r["round_min"], r["round_max"]) == (1.0, 0.5, 1.5)
    assert (r["median_ours"], r["median_a"], r["median_b"]) == (2.0, 2.0, 4.0)


def test_ratio_to_best_is_not_biased_by_the_noise_of_the_others():
    """Three equal implementations with noise: the ratio stays near 1 (a per-round
    minimum over the others would put it well above)."""
    g = torch.Generator().manual_seed(0)
    noise = lambda: (1 + 0.2 * torch.rand(101, generator=g)).tolist()  # noqa: E731
    r = ratio_to_best({"ours": noise(), "a": noise(), "b": noise()}, "ours")
    assert 0.95 < r["ratio"] < 1.05


@pytest.mark.parametrize(
    "times, ours, message",
    [
        ({"a": [1.0]}, "ours", "'ours' is not among the timed names"),
        ({"ours": [1.0]}, "ours", "nothing to compare 'ours' with"),
        ({"ours": [1.0], "a": [1.0, 2.0]}, "ours", "the same number"),
        ({"ours": [], "a": []}, "ours", "the same number"),
        ({"ours": [1.0], "a": [-2.0]}, "ours", r"times\['a'\] must be a number > 0 .*got -2.0"),
        ({"ours": [0.0], "a": [1.0]}, "ours", r"times\['ours'\] must be .*got 0.0"),
        ({"ours": [1.0], "a": [math.inf]}, "ours", r"times\['a'\] .* finite, got inf"),
        ({"ours": [math.nan], "a": [1.0]}, "ours", "got nan"),
        ({"ours": ["1"], "a": [1.0]}, "ours", "got '1'"),
    ],
)
def test_ratio_to_best_refuses_what_it_cannot_compare(times, ours, message):
    with pytest.raises(ValueError, match=message):
        ratio_to_best(times, ours)


def test_model_flops_utilization_is_achieved_over_peak():
    assert model_flops_utilization(flops=5e12, seconds=0.5, peak_flops=1e14) == pytest.approx(0.1)


@pytest.mark.parametrize("bad", [0, -1.0, True, "1", math.nan, math.inf, np.float32(-1)])
@pytest.mark.parametrize("name", ["flops", "seconds", "peak_flops"])
def test_model_flops_utilization_refuses_non_positive_numbers(name, bad):
    kwargs = {"flops": 1e12, "seconds": 1.0, "peak_flops": 1e14, name: bad}
    with pytest.raises(ValueError, match=f"{name} must be a number > 0"):
        model_flops_utilization(**kwargs)


def test_numpy_numbers_are_numbers():
    assert model_flops_utilization(np.float32(5e12), np.float64(0.5), np.int64(10**14)) > 0
    assert (
        ratio_to_best({"ours": [np.float32(1.0)], "a": [np.float64(2.0)]}, "ours")["ratio"] == 0.5
    )
    assert len(interleaved_timings({"a": lambda: None}, np.int64(2), np.int32(0))["a"]) == 2
    assert median_seconds(lambda: None, np.int64(2)) >= 0


def test_median_seconds_and_peak_memory():
    assert median_seconds(lambda: None, repeats=3) >= 0
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        median_seconds(lambda: None, repeats=0)
    with pytest.raises(TypeError, match="repeats must be an integer, got 2.0"):
        median_seconds(lambda: None, repeats=2.0)
    calls = []
    with pytest.raises(ValueError, match="warmup must be an integer >= 0, got -1"):
        median_seconds(lambda: calls.append(1), warmup=-1)
    assert not calls  # refused before anything ran
    assert peak_memory(lambda: torch.empty(256, 256)) >= 256 * 256 * 4


# --- cpu_share: the contention test ----------------------------------------------------------


class FakeClocks:
    """``perf_counter`` and ``process_time`` that move only when the test moves them."""

    def __init__(self) -> None:
        self.wall = self.cpu = 100.0

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu


@pytest.fixture
def clocks(monkeypatch):
    fake = FakeClocks()
    monkeypatch.setattr(measure, "time", fake)
    return fake


@pytest.mark.parametrize(
    "threads, cpu, wall, share, quiet",
    [
        (1, 2.0, 2.0, 1.0, True),  # one thread that ran throughout
        (1, 2 / 3, 1.0, 2 / 3, False),  # one thread, two busy neighbours on 2 cores
        (2, 4 / 3, 1.0, 2 / 3, False),  # two threads, one busy neighbour on 2 cores
        (2, 1.0, 1.0, 0.5, False),  # two threads, one asleep: a false alarm, the safe side
        (4, 3.8, 1.0, 0.95, True),  # four threads, kept busy
        (1, 0.9, 1.0, QUIET_SHARE, True),  # the threshold itself is quiet
        (1, 0.0, 0.0, 0.0, False),  # no time passed: no evidence of quiet
    ],
)
def test_cpu_share_is_cpu_seconds_over_wall_seconds_times_threads(
    clocks, threads, cpu, wall, share, quiet
):
    with cpu_share(threads=threads) as record:
        clocks.cpu += cpu
        clocks.wall += wall
    assert record.share == pytest.approx(share)
    assert record.quiet is quiet
    assert record.as_dict() == {
        "threads": threads,
        "cpu_seconds": pytest.approx(cpu),
        "wall_seconds": pytest.approx(wall),
        "share": pytest.approx(share),
        "quiet": quiet,
    }
    assert str(record).startswith(f"CPU share {share:.2f} of {threads} thread(s): ")


def test_cpu_share_counts_torch_threads_by_default_and_fills_the_record_on_error(clocks):
    with cpu_share() as record:
        clocks.cpu += 1.0
        clocks.wall += 1.0
    assert record.threads == torch.get_num_threads()
    with pytest.raises(RuntimeError, match="boom"), cpu_share(threads=1) as failed:
        clocks.cpu += 0.5
        clocks.wall += 1.0
        raise RuntimeError("boom")
    assert failed.share == pytest.approx(0.5) and str(failed).endswith("below 0.9, not quiet")


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (1.0, TypeError)])
def test_cpu_share_refuses_a_thread_count_that_is_not_a_positive_integer(bad, error):
    with pytest.raises(error, match="threads must be"), cpu_share(threads=bad):
        pass


def test_cpu_share_on_the_real_clocks_tells_waiting_from_running():
    """Not a speed target: a sleep takes next to no CPU on any machine, and a loop that runs
    until it has used 0.05 CPU seconds took at least that (its share only falls, and far
    less than to a sleep's, when other processes take the core)."""
    with cpu_share(threads=1) as asleep:
        time.sleep(0.1)
    with cpu_share(threads=1) as running:
        start = time.process_time()
        while time.process_time() - start < 0.05:
            pass
    assert asleep.share < 0.5 and not asleep.quiet
    assert running.cpu_seconds >= 0.05 and 0 < running.share <= 1.05
    assert running.share > asleep.share
