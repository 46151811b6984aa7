"""The tuner's plan from a profile of the baseline step: the values that answer the profile's verdicts go first, the
knobs that need no compile next, the compile modes last and cheapest first; `fade profile`'s fix line names the same
values the tuner tries first."""

import pytest

from fade.act.tune.search import search
from fade.analyze.knobs import PROFILE_RULES, Target, load_knobs, searched_knobs
from fade.analyze.profile import StepSummary, decide
from fade.analyze.tuneplan import plan_search
from tests.tune.fakes import REFERENCE, FakeTimer

CUDA_TRAIN_IMAGE = Target("cuda", "2.11.0+cu130", "train", image=True, attention=False)


def summary(*, host_wait=0.0, gemm_share=0.0, mfu=None, memory_share=0.0, top=None, sync_wait=0.0) -> StepSummary:
    """A one-step summary of a 1000 us window whose device work has the given shares."""
    busy = 1000.0 * (1 - host_wait - sync_wait)
    classes = {name: 0.0 for name in ("gemm", "convolution", "attention", "elementwise", "normalization", "reduction",
                                      "copy", "other")}  # fmt: skip
    classes["convolution"] = gemm_share * busy
    classes["elementwise"] = memory_share * busy
    classes["other"] = busy - classes["convolution"] - classes["elementwise"]
    return StepSummary(
        step="all steps", steps=1, window_us=1000.0, host_us=1000.0, busy_us=busy,
        idle_us={"host_wait": 1000.0 * host_wait, "sync_wait": 1000.0 * sync_wait, "other": 0.0},
        class_us=classes, overlap_us=0.0, top_kernels=[top] if top else [],
        top_host_ops=[], launches={"kernels": 100, "shorter_than_overhead": 90, "threshold_us": 5.0},
        flops={"mfu_gemm_conv": mfu}, copies={}, syncs={"count": 3, "us": 0.0},
    )  # fmt: skip


CASES = {
    "launch_bound": summary(host_wait=0.6),
    "gemm_low_peak": summary(gemm_share=0.78, mfu=0.23),
    "memory_bound_elementwise": summary(memory_share=0.7),
    "one_kernel_dominates:convolution": summary(top={"name": "cudnn::conv_dgrad", "class": "convolution", "library": "cuDNN",
                                                     "direction": "bwd_data", "total_us": 900.0}),  # fmt: skip
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_the_profiles_fix_line_names_the_values_the_tuner_tries_first(key):
    verdicts = decide(CASES[key], platform="cuda", device_timeline=True)
    verdict = next(verdict for verdict in verdicts if key.startswith(verdict["rule"]))
    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    plan = plan_search(knobs, [verdict])
    first = [f"{visit.knob}={value}" for visit in plan.visits for value in visit.values if f"{visit.knob}={value}" in plan.named]
    assert first, f"no knob answers {key}"
    assert first == [name for name in verdict["tune_first"] if name in first]  # same values, same order
    assert all(name in verdict["fix"] for name in first)  # and the fix line says them
    named_knobs = {name.split("=")[0] for name in first}
    assert {visit.knob for visit in plan.visits[: len(named_knobs)]} == named_knobs  # visited before any other knob


def test_a_launch_bound_step_tries_cuda_graphs_before_anything_else():
    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    verdicts = decide(CASES["launch_bound"], platform="cuda", device_timeline=True)
    timer = FakeTimer({("compile", "reduce-overhead"): 0.4})
    result = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock, plan=plan_search(knobs, verdicts))
    assert timer.calls[1]["compile"] == "reduce-overhead"  # the first trial after the baseline
    assert result.chosen["compile"] == "reduce-overhead"
    row = next(row for row in result.candidates if row.value == "reduce-overhead")
    assert "launch_bound" in row.why


def test_gemm_at_a_low_share_of_peak_puts_precision_and_layout_first_and_compile_last():
    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    plan = plan_search(knobs, decide(CASES["gemm_low_peak"], platform="cuda", device_timeline=True))
    order = [visit.knob for visit in plan.visits]
    assert order[:2] == ["precision", "channels_last"]
    assert order[-1] == "compile"
    compile_values = plan.visits[-1].values
    assert compile_values[-1] == "max-autotune"  # the dearest mode last (knobs.toml cost 8x)


def test_a_step_no_knob_can_fix_is_said_as_such():
    """Syncs in the step: no knob removes a .item() from the user's loop; the plan says so and keeps the default order."""
    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    verdicts = decide(summary(sync_wait=0.4), platform="cuda", device_timeline=True)
    plan = plan_search(knobs, verdicts)
    assert [entry["rule"] for entry in plan.unanswered] == ["sync_bound"]
    assert "remove .item()" in plan.unanswered[0]["fix"]
    assert plan.named == {}
    assert [visit.knob for visit in plan.visits][-1] == "compile"


def test_every_rule_a_knob_answers_is_one_that_decide_emits():
    """knobs.PROFILE_RULES is the list the table is checked against; each must be a rule decide() can return."""
    import inspect

    from fade.analyze import profile

    source = inspect.getsource(profile.decide)
    for rule in PROFILE_RULES:
        assert f'"rule": "{rule}"' in source


def test_the_fix_line_names_only_the_knobs_of_the_platform():
    """A convolution-dominated step: on ROCm the fix line names MIOpen's find modes, on CUDA it does not."""
    top = CASES["one_kernel_dominates:convolution"]
    on_cuda = decide(top, platform="cuda", device_timeline=True)[0]["tune_first"]
    on_rocm = decide(top, platform="rocm", device_timeline=True)[0]["tune_first"]
    assert "miopen_find_mode=hybrid" in on_rocm and not any(name.startswith("miopen") for name in on_cuda)
    assert "cudnn_benchmark=on" in on_cuda
