"""vit_tutorial.measure: interleaved timing, the ratio to the best other, MFU, median time."""

import math

import numpy as np
import pytest
import torch

from vit_tutorial.measure import (
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
