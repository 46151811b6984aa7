"""The timing engine, on the CPU with an injected clock: statistics, noise flag, stop rule, warm-up."""

import math
import statistics

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fade.measure import timing
from fade.measure.timing import NOISY_COV, Timing, measure, quantile, rotation_count
from tests.clock import FakeClock


def costing(clock: FakeClock, durations):
    """A function whose i-th call takes durations[i] (the last one repeats)."""
    calls = []

    def fn():
        duration = durations[min(len(calls), len(durations) - 1)]
        calls.append(duration)
        clock.advance(duration)

    return fn, calls


def timing_of(samples, **overrides) -> Timing:
    fields = dict(
        samples_s=tuple(samples), calls_per_sample=1, warmup_calls=0, warmup_s=0.0, method="host-clock", stop_reason="converged"
    )
    fields.update(overrides)
    return Timing(**fields)


def test_median_and_iqr_are_numpy_linear_quartiles():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    result = timing_of(samples)
    assert result.median_s == pytest.approx(numpy.percentile(samples, 50))
    assert result.q1_s == pytest.approx(numpy.percentile(samples, 25))
    assert result.q3_s == pytest.approx(numpy.percentile(samples, 75))
    assert result.iqr_s == pytest.approx(numpy.percentile(samples, 75) - numpy.percentile(samples, 25))
    assert (result.min_s, result.max_s, result.n) == (1.0, 10.0, 6)
    assert result.cov == pytest.approx(statistics.stdev(samples) / statistics.fmean(samples))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1e-9, max_value=10.0), min_size=1, max_size=50), st.floats(min_value=0, max_value=1))
def test_quantile_matches_numpy_for_any_samples(samples, q):
    assert quantile(samples, q) == pytest.approx(numpy.percentile(samples, q * 100), rel=1e-9, abs=1e-12)


def test_noisy_flag_turns_on_just_above_the_threshold():
    samples = [1.0, 1.1, 0.9, 1.05, 0.95]
    cov = timing_of(samples).cov
    assert not timing_of(samples, noisy_cov=cov).noisy  # at the threshold: not noisy
    assert timing_of(samples, noisy_cov=cov * (1 - 1e-9)).noisy  # above it: noisy
    assert timing_of([1.0] * 5).noisy is False
    assert timing_of(samples).stats()["noisy_cov_threshold"] == NOISY_COV


def test_slow_first_call_stays_out_of_the_median():
    clock = FakeClock()
    fn, calls = costing(clock, [10.0] + [0.002] * 10_000)  # the first call "compiles" for 10 s
    result = measure(fn, device="cpu", clock=clock, warmup_s=0.01, min_warmup_calls=3, min_run_s=0.01)
    assert result.median_s == pytest.approx(0.002)
    assert result.max_s == pytest.approx(0.002)
    assert result.warmup_calls >= 3
    assert len(calls) == result.warmup_calls + result.n * result.calls_per_sample


def test_steady_function_converges_after_min_samples_and_min_run():
    clock = FakeClock()
    fn, _ = costing(clock, [0.004])
    result = measure(fn, device="cpu", clock=clock, warmup_s=0.0, min_samples=5, min_run_s=0.05, budget_s=10.0)
    assert result.stop_reason == "converged"
    assert result.n >= 5
    assert sum(result.samples_s) * result.calls_per_sample >= 0.05
    assert result.cov == pytest.approx(0.0, abs=1e-12)


def test_noisy_function_stops_when_the_budget_is_spent():
    clock = FakeClock()
    fn, _ = costing(clock, [0.002, 0.006] * 100_000)  # CoV ~0.5: never converges
    result = measure(
        fn, device="cpu", clock=clock, warmup_s=0.0, min_block_s=1e-3, budget_s=0.5, max_samples=10_000, target_cov=0.01
    )
    assert result.stop_reason == "budget"
    sampling_s = sum(result.samples_s) * result.calls_per_sample
    assert 0.5 <= sampling_s <= 0.5 + timing.ROUND_S + 0.01  # stops within one round of the budget
    assert result.noisy


def test_max_samples_caps_the_replicates():
    clock = FakeClock()
    fn, _ = costing(clock, [0.002, 0.006] * 100_000)
    result = measure(fn, device="cpu", clock=clock, warmup_s=0.0, max_samples=12, budget_s=100.0)
    assert result.stop_reason == "max_samples"
    assert result.n == 12


def test_min_samples_are_taken_even_past_the_budget():
    clock = FakeClock()
    fn, _ = costing(clock, [2.0])  # one call is longer than the whole budget
    result = measure(fn, device="cpu", clock=clock, warmup_s=0.0, min_warmup_calls=1, budget_s=0.1, min_samples=5)
    assert result.n == 5
    assert result.calls_per_sample == 1


def test_sub_microsecond_calls_are_timed_in_blocks():
    clock = FakeClock()
    fn, _ = costing(clock, [5e-7])
    result = measure(fn, device="cpu", clock=clock, warmup_s=0.0, min_block_s=1e-3, min_run_s=0.01)
    assert result.calls_per_sample * 5e-7 >= 1e-3  # one block lasts at least MIN_BLOCK_S
    assert result.median_s == pytest.approx(5e-7)


def test_rotation_cycles_through_argument_sets():
    clock = FakeClock()
    seen = []

    def fn(tag):
        seen.append(tag)
        clock.advance(0.001)

    result = measure(fn, device="cpu", clock=clock, rotate=[("a",), ("b",), ("c",)], warmup_s=0.0, min_run_s=0.0)
    assert seen[:6] == ["a", "b", "c", "a", "b", "c"]
    assert result.cold_cache == "rotate:3"


def test_rotation_count_covers_twice_the_cache():
    assert rotation_count(bytes_per_set=10 * 2**20, cache_bytes=50 * 2**20) == math.ceil(2 * 50 / 10) + 1
    assert rotation_count(bytes_per_set=2**30, cache_bytes=2**20) == 2


def test_real_cpu_op_gives_a_median_with_spread():
    import torch

    a = torch.randn(128, 128)
    result = measure(lambda: a @ a, device="cpu", warmup_s=0.01, budget_s=0.05, min_run_s=0.01)
    assert result.method == "host-clock"
    assert result.n >= 5 and result.median_s > 0 and result.iqr_s >= 0
    assert set(result.stats()) >= {"median_s", "iqr_s", "min_s", "max_s", "cov", "n", "noisy"}


def test_cuda_graph_is_refused_off_cuda():
    with pytest.raises(ValueError, match="cuda_graph"):
        measure(lambda: None, device="cpu", cuda_graph=True)


def test_settle_phase_waits_out_a_clock_that_is_still_changing():
    """A call that runs at 2 ms for its first 40 calls and 1 ms after (a GPU clock walking after a load
    change) is sampled at its steady 1 ms once the settle phase runs, and at 2 ms without it."""

    def timed(max_settle_s):
        clock = FakeClock()
        walking, _ = costing(clock, [0.002] * 40 + [0.001])
        return measure(walking, device="cpu", clock=clock, warmup_s=0.0, min_warmup_calls=1, min_samples=5,
                       max_samples=10, min_run_s=0.0, budget_s=1.0, min_block_s=1e-4,
                       max_settle_s=max_settle_s)  # fmt: skip

    assert timed(max_settle_s=0.0).median_s == pytest.approx(0.002)
    assert timed(max_settle_s=1.0).median_s == pytest.approx(0.001)
