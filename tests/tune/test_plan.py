"""The tuner's plan from a profile of the baseline step: the knobs that need no compile first, the compile modes
last, and in each tier the values that answer the profile's verdicts first (compile modes then cheapest first); `fade profile`'s fix line names the same
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
    by_tier = {False: [], True: []}  # within its tier (needs no compile / compiles), a named knob is visited first
    for visit in plan.visits:
        by_tier[any(knob.id == visit.knob and knob.group == "compile" for knob in knobs)].append(visit.knob)
    for tier in by_tier.values():
        named_here = [knob for knob in tier if knob in {name.split("=")[0] for name in first}]
        assert tier[: len(set(named_here))] == list(dict.fromkeys(named_here))


def test_a_launch_bound_step_compiles_with_cuda_graphs_first_after_the_cheap_knobs():
    """Launch-bound: reduce-overhead is the first trial that compiles, ahead of compile=default; the knobs that need
    no compile still run before it (once a compile mode is in the configuration, each of them would compile)."""
    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    verdicts = decide(CASES["launch_bound"], platform="cuda", device_timeline=True)
    timer = FakeTimer({("compile", "reduce-overhead"): 0.4})
    result = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock, plan=plan_search(knobs, verdicts))
    compiled = [index for index, call in enumerate(timer.calls) if call["compile"] != "off"]
    assert timer.calls[compiled[0]]["compile"] == "reduce-overhead"
    assert all(call["compile"] == "off" for call in timer.calls[: compiled[0]]) and compiled[0] > 3
    assert result.chosen["compile"] == "reduce-overhead"
    row = next(row for row in result.candidates if row.value == "reduce-overhead")
    assert "launch_bound" in row.why
    assert "compiles with compile=reduce-overhead first, after the knobs that need no compile" in verdicts[0]["fix"]


def test_a_memory_bound_step_does_not_make_every_cheap_knob_compile():
    """EfficientNet-B0 training on an H200 (results/tune-h200-s11/): memory-bound elementwise, compile trials of
    56 s, eager trials of 4 s, a 300 s budget. The plan once put compile=default first; each cheap knob was then
    a 56 s compile and the search ended at 101 s with reduce-overhead untried (0.32x of the best hand
    configuration). Now the cheap knobs run in eager mode first, reduce-overhead compiles first, and the later pass
    judges amp-bf16 under it (eager mode: 6% slower than fp32) before amp-fp16 and tf32."""
    from tests.tune.test_search import SlowCompiles

    knobs, _ = searched_knobs(load_knobs(), CUDA_TRAIN_IMAGE)
    verdicts = decide(CASES["memory_bound_elementwise"], platform="cuda", device_timeline=True)
    plan = plan_search(knobs, verdicts, mode="train")
    rates = {  # samples/s on the H200: fade tune's own trials (results/tune-h200-s11/call3, channels_last off) and
        # the hand loop's fp16+ro (call1)
        ("default", "off", "off"): 1936, ("tf32", "off", "off"): 1933, ("amp-bf16", "off", "off"): 1822,
        ("amp-fp16", "off", "off"): 1472, ("default", "on", "off"): 1959, ("default", "off", "default"): 1603,
        ("default", "off", "reduce-overhead"): 4521, ("amp-bf16", "off", "reduce-overhead"): 5974,
        ("amp-fp16", "off", "reduce-overhead"): 5102, ("tf32", "off", "reduce-overhead"): 4521,
    }  # fmt: skip

    def step_ms(config):
        return 64e3 / rates.get((config["precision"], config["channels_last"], config["compile"]), 1900)

    timer = SlowCompiles({}, eager_s=4.0, compile_s={"default": 56.0, "reduce-overhead": 56.0, "max-autotune": 448.0},
                         step_ms=step_ms)  # fmt: skip
    result = search(knobs, timer.paired(), reference=REFERENCE, budget_s=300, clock=timer.clock, plan=plan, spent_s=25.0)
    assert result.chosen == {**result.baseline, "precision": "amp-bf16", "compile": "reduce-overhead"}
    compiled = [call["precision"] for call in timer.calls[: result.trials_measured] if call["compile"] == "reduce-overhead"]
    assert compiled[:2] == ["default", "amp-bf16"]  # graphs on the eager best, then bf16 under them, before fp16
    assert result.verdict == "faster"
    assert result.elapsed_s <= 300 + 60


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


CUDA_GENERATE = Target("cuda", "2.11.0+cu130", "generate", image=False, attention=True)


def test_a_launch_bound_decode_compiles_first_with_the_static_cache_it_needs():
    """`fade tune --generate`: an eager batch-1 decode is launch-bound on a fast GPU, and an eager decode trial is
    not cheap (whole greedy runs), so the compile mode the verdict names is the first trial, judged with the static
    cache it needs (the knob table's `needs` comes with the value); the knobs that need no compile follow under
    it. Without that verdict the decode's plan keeps the compile modes last."""
    knobs, _ = searched_knobs(load_knobs(), CUDA_GENERATE)
    verdicts = decide(CASES["launch_bound"], platform="cuda", device_timeline=True)
    plan = plan_search(knobs, verdicts, mode="generate")
    # the modes that replay CUDA graphs answer it; the cheapest first (the others wait for the next pass once it wins)
    assert (plan.visits[0].knob, plan.visits[0].values) == \
        ("decode_compile", ("reduce-overhead", "reduce-overhead+coordinate-descent", "max-autotune"))
    assert "launch_bound" in plan.visits[0].why
    timer = FakeTimer({("decode_compile", "reduce-overhead"): 0.25, ("weight_quant", "int8"): 0.7})
    result = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock, plan=plan)
    baseline = timer.calls[0]
    assert baseline["decode_compile"] == "off" and baseline["kv_cache"] == "dynamic"
    assert timer.calls[1] == {**baseline, "decode_compile": "reduce-overhead", "kv_cache": "static"}
    searched = [row for row in result.candidates if row.knob]
    assert all(row.config["decode_compile"] != "off" for row in searched)
    assert "under the compile mode" in next(row.why for row in searched if row.knob == "weight_quant")
    assert result.chosen["decode_compile"] == "reduce-overhead" and result.chosen["kv_cache"] == "static"
    assert result.chosen["weight_quant"] == "int8"

    quiet = plan_search(knobs, [], mode="generate")
    compiled_at = [index for index, visit in enumerate(quiet.visits) if visit.knob == "decode_compile"]
    assert compiled_at == [len(quiet.visits) - 1]


def test_once_graphs_answered_a_launch_bound_decode_the_modes_without_them_are_left_out():
    """Session 22's 8B decode on an H200 (results/s22-h200/A) waited on the host 89% of its step; reduce-overhead
    answered it 3.5x, and the next pass gave its last budget to decode_compile=default, which launches every
    kernel again (on the 1B it ran at 195 tokens/s against reduce-overhead's 601, results/s22-h200/B). The later
    pass now tries the other graph modes, coordinate descent first, and leaves default and
    max-autotune-no-cudagraphs out with the reason. Below GRAPHLESS_SHARE every mode is tried."""
    from fade.act.tune.search import GRAPHLESS_SHARE

    knobs, _ = searched_knobs(load_knobs(), CUDA_GENERATE)
    knobs = [knob for knob in knobs if knob.id == "decode_compile" or knob.id == "kv_cache"]
    speed = {"reduce-overhead": 0.25, "reduce-overhead+coordinate-descent": 0.22, "max-autotune": 0.26,
             "default": 0.7, "max-autotune-no-cudagraphs": 0.6}  # fmt: skip

    def run(share):
        verdicts = [{"rule": "launch_bound", "share": share, "title": "launch-bound"}]
        timer = FakeTimer({("decode_compile", mode): factor for mode, factor in speed.items()})
        result = search(knobs, timer, reference=REFERENCE, budget_s=10_000, clock=timer.clock,
                        plan=plan_search(knobs, verdicts, mode="generate"))  # fmt: skip
        return timer, result

    timer, result = run(0.89)
    tried = [call["decode_compile"] for call in timer.calls]
    assert tried[:3] == ["off", "reduce-overhead", "reduce-overhead+coordinate-descent"]
    assert "default" not in tried and "max-autotune-no-cudagraphs" not in tried
    rows = {row.value: row for row in result.candidates if row.knob == "decode_compile"}
    assert rows["default"].status == "not-tried" and "launch_bound (89% of the step)" in rows["default"].reason
    assert result.chosen["decode_compile"] == "reduce-overhead+coordinate-descent"
    timer, _ = run(GRAPHLESS_SHARE - 0.2)
    assert "default" in [call["decode_compile"] for call in timer.calls]
