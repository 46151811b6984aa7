"""benchmarks/ocl_vendor_budget.py: issue 19's ocl:0,cuda:0 run costed from the bench's own timing code on a
simulated clock (no waiting): what a slow step costs, and that --timing-budget bounds the ocl cases only."""


import pytest

from tests.cliutil import load_benchmark



@pytest.fixture(scope="module")
def script():
    return load_benchmark("ocl_vendor_budget")


def test_a_step_slower_than_a_segment_gets_two_samples_per_segment(script):
    """2 s a step (resnet50 training on ocl): 6 segments of 2 timed steps; the first segment's 2 warm-up calls,
    block trial and settle window, then a warm-up call and a block trial per later segment: 26 steps in all."""
    from fade.measure.suites.models.case import TIMING_SEGMENTS

    cost = script.timing_cost(2.0, wandering=False)
    assert cost["segments"] == TIMING_SEGMENTS
    assert cost["steps"] == 26


def test_on_ocl_the_vendor_variant_is_its_own_reference_and_on_cuda_it_is_not(script):
    assert script.checked_steps("ocl:0", "train") == 5
    assert script.checked_steps("cuda:0", "train") == 15
    assert script.checked_steps("ocl:0", "infer") == 2  # one calibration forward, one checked forward
    assert script.checked_steps("cuda:0", "infer") == 3


def test_a_timing_budget_bounds_the_slow_ocl_cases_and_leaves_the_cuda_cases_alone(script):
    free = script.estimate(script.H100_STEP_MS)
    bounded = script.estimate(script.H100_STEP_MS, timing_budget_s=30.0)
    for before, after in zip(free["cases"], bounded["cases"]):
        if before["device"] == "cuda:0":
            assert after["wandering"] == before["wandering"]
        if before["step_ms"] >= 1000:
            assert after["wandering"]["segments"] == 6 and after["wandering"]["timed_steps"] == 26
    assert bounded["total_s"]["wandering"] < free["total_s"]["wandering"]
    assert bounded["total_s"]["steady"] == free["total_s"]["steady"]
