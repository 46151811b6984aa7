"""The model bench end to end on the CPU with tiny networks: what a record holds, and how NaN, a loss far from
fp32, an OOM and a hang become results instead of crashes."""

import json
import statistics
import textwrap

import pytest

from fade.measure.step import numerics
from fade.measure.step.finite import FiniteTracker, InvalidRun
from fade.measure.suites.models import case as models_case
from fade.measure.suites.models.suite import run_models
from fade.results import read_records
from tests.clock import FakeClock

WORKLOADS = textwrap.dedent(
    """
    import time
    import torch
    import torch.nn.functional as F

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 10)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return self.fc(F.relu(self.conv(x)).mean((2, 3)))

    def batch(batch_size):
        return torch.randn(batch_size, 3, 8, 8), torch.randint(0, 10, (batch_size,))

    def tiny(batch_size):
        return Tiny(), batch(batch_size), F.cross_entropy

    class LateNaN(Tiny):
        def forward(self, x):
            out = super().forward(x)
            return out * float("nan") if self.calls > 4 else out

    def late_nan(batch_size):
        return LateNaN(), batch(batch_size), F.cross_entropy

    def early_nan(batch_size):
        model = Tiny()
        with torch.no_grad():
            model.fc.bias.fill_(float("inf"))
        return model, batch(batch_size), F.cross_entropy

    class Hungry(Tiny):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    def hungry(batch_size):
        return Hungry(), batch(batch_size), F.cross_entropy

    class Stuck(Tiny):
        def forward(self, x):
            time.sleep(3600)

    def stuck(batch_size):
        return Stuck(), batch(batch_size), F.cross_entropy

    def no_arguments():
        return Tiny(), torch.randn(4, 3, 8, 8), lambda output: output.square().mean()
    """
)


@pytest.fixture
def workloads(tmp_path, monkeypatch):
    """A user module in the current directory, as `--models fade_test_workloads:tiny` would find it."""
    (tmp_path / "fade_test_workloads.py").write_text(WORKLOADS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(tmp_path, models, **options):
    options.setdefault("isolate", False)
    options.setdefault("quick", True)
    out = tmp_path / "models.jsonl"
    summary = run_models("cpu", models=models, out=out, **options)
    return {record["case_id"]: record for record in summary.records}, out


def test_a_zoo_network_records_throughput_flops_and_the_loss_check(tmp_path):
    records, out = run(tmp_path, ["resnet18"], batch=2, image_size=32, mode="train",
                       variants=["fp32", "amp-bf16+channels-last"])  # fmt: skip
    fp32 = records["models/resnet18/train/fp32/b2-32px"]
    mixed = records["models/resnet18/train/amp-bf16+channels-last/b2-32px"]
    for record in (fp32, mixed):
        assert record["status"] == "ok", record["error"]
        assert record["suite"] == "models" and record["unit"] == "samples/s"
        assert record["value"] == pytest.approx(2 / record["stats"]["median_s"])
        extra = record["extra"]
        assert extra["workload"]["input_copy_included"] is False
        assert extra["workload"]["params"] == 11_689_512
        assert extra["workload"]["timed_learning_rate"] == 0.0
        assert extra["flops"]["per_step"] == record["work"]["flops"] > 0
        assert extra["flops"]["achieved_tflops"] > 0
        assert extra["loss_check"]["ok"] and extra["loss_check"]["finite_checked_steps"] >= 3
    assert fp32["extra"]["loss_check"]["difference"] == 0.0  # fp32 is its own reference
    assert mixed["extra"]["loss_check"]["fp32_rounded_loss"] is not None  # the rounding spread was measured
    assert fp32["extra"]["in_effect"]["input_memory_format"] == "contiguous"
    assert mixed["extra"]["in_effect"]["input_memory_format"] == "channels_last"
    assert mixed["extra"]["in_effect"]["autocast_dtype"] == "bfloat16"
    assert mixed["work"]["flops"] == fp32["work"]["flops"]  # FLOPs are counted on the fp32 reference
    assert len(read_records(out).records) == 2


def test_unsupported_variants_are_recorded_as_skipped_with_the_reason(tmp_path):
    records, _ = run(tmp_path, ["gpt2-small"], mode="infer", variants=["channels-last"])
    more, _ = run(tmp_path, ["mobilenet_v2"], mode="infer", variants=["amp-fp16", "tf32"])
    records.update(more)
    assert {record["status"] for record in records.values()} == {"skipped"}
    assert "no 4-D input" in records["models/gpt2-small/infer/channels-last/b2-32tok"]["error"]
    assert "GPU configuration" in records["models/mobilenet_v2/infer/amp-fp16/b2-64px"]["error"]
    assert "tf32" in records["models/mobilenet_v2/infer/tf32/b2-64px"]["error"]


def test_validate_adds_a_plain_loop_figure_and_the_difference(workloads):
    records, _ = run(workloads, ["fade_test_workloads:tiny"], batch=4, mode="infer", variants=["fp32"], validate=True)
    record = records["models/fade_test_workloads:tiny/infer/fp32/b4"]
    plain = record["extra"]["plain_loop"]
    assert plain["samples_per_s"] > 0 and plain["mean_samples_per_s"] > 0 and plain["fade_mean_samples_per_s"] > 0
    expected = 100 * (record["value"] - plain["samples_per_s"]) / plain["samples_per_s"]
    assert plain["fade_vs_plain_pct"] == pytest.approx(expected)
    assert plain["spread_pct"] >= 0 and plain["fade_spread_pct"] == record["extra"]["timing_segments"]["spread_pct"]


def test_the_plain_loop_times_blocks_of_fades_size_in_every_segment_and_takes_their_median(workloads):
    """A median of single 25 ms blocks skips a host hiccup that the mean of a 0.25 s repeat absorbs: the two
    sides compare the same statistic over blocks of the same k steps."""
    records, _ = run(workloads, ["fade_test_workloads:tiny"], batch=4, mode="infer", variants=["fp32"], validate=True)
    record = next(iter(records.values()))
    plain = record["extra"]["plain_loop"]
    assert plain["calls_per_block"] == record["timing"]["calls_per_sample"]
    assert len(plain["blocks_each"]) == len(plain["segment_samples_per_s"]) == models_case.TIMING_SEGMENTS
    assert min(plain["blocks_each"]) >= models_case.PLAIN_MIN_BLOCKS
    assert plain["repeats"] == len(plain["step_ms_each"]) == sum(plain["blocks_each"])
    assert plain["step_ms_median"] == pytest.approx(statistics.median(plain["step_ms_each"]))


def test_validate_interleaves_fade_and_plain_segments_abba(workloads):
    """Drift between two back-to-back measurements made FADE and the plain loop differ by 10-18% on
    launch-bound H100 cases; their segments now alternate F P P F, so both sides share every moment."""
    records, _ = run(workloads, ["fade_test_workloads:tiny"], batch=4, mode="train", variants=["fp32"], validate=True)
    segments = next(iter(records.values()))["extra"]["timing_segments"]
    assert segments["order"] == "FPPF" * (models_case.TIMING_SEGMENTS // 2)
    assert len(segments["samples_per_s"]) == segments["segments"] == models_case.TIMING_SEGMENTS


def test_fade_timing_pools_its_segments_into_one_timing_of_one_block_size(workloads):
    records, _ = run(workloads, ["fade_test_workloads:tiny"], batch=4, mode="infer", variants=["fp32"])
    record = next(iter(records.values()))
    segments, timing = record["extra"]["timing_segments"], record["timing"]
    assert segments["order"] == "F" * models_case.TIMING_SEGMENTS and "plain_loop" not in record["extra"]
    assert record["stats"]["n"] == sum(segments["n"]) == len(timing["samples_s"])
    assert min(segments["n"]) >= 2 and timing["settings"]["segments"] == models_case.TIMING_SEGMENTS
    assert timing["calls_per_sample"] == segments["calls_per_sample"]
    assert record["extra"]["gc"]["frozen_objects"] > 0


def test_segment_settings_split_the_totals_and_skip_warm_up_after_the_first():
    totals = {"warmup_s": 0.2, "min_warmup_calls": 2, "min_run_s": 0.8, "budget_s": 1.6, "min_samples": 8,
              "max_samples": 80, "min_block_s": 0.025, "max_settle_s": 0.5}  # fmt: skip
    first = models_case._segment_settings(totals, True)
    later = models_case._segment_settings(totals, False)
    segments = models_case.TIMING_SEGMENTS
    assert first["budget_s"] * segments == pytest.approx(1.6) and first["min_run_s"] * segments == pytest.approx(0.8)
    assert first["min_samples"] >= 2 and first["max_samples"] == 80 // segments
    assert (first["warmup_s"], first["max_settle_s"], first["min_block_s"]) == (0.2, 0.5, 0.025)
    assert (later["warmup_s"], later["min_warmup_calls"], later["max_settle_s"], later["min_block_s"]) == (0.0, 1, 0.0, 0.0)


def test_cudnn_benchmark_is_pinned_during_a_case_and_restored(tmp_path):
    import torch

    torch.backends.cudnn.benchmark = True
    try:
        records, _ = run(tmp_path, ["alexnet"], mode="infer", variants=["fp32"])
        record = next(iter(records.values()))
        assert record["extra"]["in_effect"]["cudnn_benchmark"] is False
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = False


def test_a_user_function_without_arguments_and_a_bare_tensor_batch_runs(workloads):
    records, _ = run(workloads, ["fade_test_workloads:no_arguments"], variants=["fp32"], mode="train")
    record = next(iter(records.values()))
    assert record["status"] == "ok", record["error"]
    assert record["extra"]["workload"]["samples"] == 4  # the batch the function chose, not --batch


def test_a_nan_in_a_timed_step_makes_the_case_invalid_not_fast(workloads):
    records, _ = run(workloads, ["fade_test_workloads:late_nan"], variants=["fp32"], mode="train")
    record = next(iter(records.values()))
    assert record["status"] == "error" and record["value"] is None
    assert "timed steps" in record["error"] and "invalid" in record["error"]


def test_a_non_finite_loss_in_the_checked_steps_makes_the_case_invalid(workloads):
    records, _ = run(workloads, ["fade_test_workloads:early_nan"], variants=["amp-bf16"], mode="train")
    record = next(iter(records.values()))
    assert record["status"] == "error" and "not finite" in record["error"]


def test_a_loss_far_from_fp32_makes_the_case_invalid(workloads, monkeypatch):
    monkeypatch.setattr(numerics, "LOSS_RELATIVE_TOLERANCE", 0.0)
    monkeypatch.setattr(numerics, "LOSS_ROUNDING_FACTOR", 0.0)
    records, _ = run(workloads, ["fade_test_workloads:tiny"], variants=["amp-bf16"], mode="train")
    record = next(iter(records.values()))
    assert record["status"] == "error" and "fp32 from the same seed" in record["error"]


def test_out_of_memory_is_a_result(workloads):
    records, _ = run(workloads, ["fade_test_workloads:hungry"], variants=["fp32"], mode="infer")
    assert next(iter(records.values()))["status"] == "oom"


def test_a_hung_case_times_out_in_its_worker_and_the_next_case_still_runs(workloads):
    records, out = run(workloads, ["fade_test_workloads:stuck", "fade_test_workloads:tiny"], variants=["fp32"],
                       mode="infer", isolate=True, timeout_s=8)  # fmt: skip
    assert records["models/fade_test_workloads:stuck/infer/fp32/b2"]["status"] == "timeout"
    assert records["models/fade_test_workloads:tiny/infer/fp32/b2"]["status"] == "ok"
    lines = out.read_text().splitlines()
    assert [json.loads(line)["status"] for line in lines] == ["timeout", "ok"]


def test_only_keeps_the_cases_whose_id_matches_a_pattern():
    from fade.measure.suites.models.suite import build_cases, select_cases
    from fade.measure.suites.models.variants import parse_variants

    cases = build_cases(["alexnet", "mobilenet_v2"], modes=["train", "infer"],
                        variants=parse_variants(["fp32", "compile"]), batch=64)  # fmt: skip
    kept = select_cases(cases, ["models/mobilenet_v2/*/compile/*", "models/alexnet/train/fp32/b64"])
    assert [case.case_id for case in kept] == [
        "models/alexnet/train/fp32/b64",
        "models/mobilenet_v2/train/compile/b64",
        "models/mobilenet_v2/infer/compile/b64",
    ]
    assert select_cases(cases, None) == cases


def test_the_plain_segment_times_every_block_and_syncs_as_often_as_the_engine(monkeypatch):
    """The CUDA path without a GPU: fake events read a fake clock that each step advances by 10 ms."""
    import torch

    now = [0.0]
    steps_at_sync = []

    class FakeEvent:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = now[0]

        def elapsed_time(self, end):  # ms, as torch's
            return 1e3 * (end.at - self.at)

    def step():
        now[0] += 0.010

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: steps_at_sync.append(round(now[0] / 0.010)))
    per_step_s = models_case._plain_segment(step, "cuda:0", calls=3, blocks=5, per_sync=2, warmup_steps=1)
    assert per_step_s == pytest.approx([0.010] * 5)
    assert steps_at_sync == [1, 7, 13, 16]  # after the warm-up step, then after every 2 blocks of 3 steps


def _fake_runner(step, module):
    import contextlib
    import types

    workload = types.SimpleNamespace(inputs=())
    return types.SimpleNamespace(step=step, module=module, workload=workload, optimizer=None, scaler=None,
                                 training=False, autocast=contextlib.nullcontext, sdpa_backend=None,
                                 device="cpu")  # fmt: skip


SHORT_TIMING = {"budget_s": 0.3, "min_run_s": 0.06, "warmup_s": 0.01, "min_block_s": 0.004, "max_settle_s": 0.0}
WANDER_SPELL_S = 0.12  # of the fake clock: about two segments of SHORT_TIMING


def _wandering(clock, calls):
    """1 ms a step for WANDER_SPELL_S of the clock, then 3 ms for as long: the host rate of a launch-bound
    step, exaggerated; a spell is longer than a segment (SHORT_TIMING's budget / TIMING_SEGMENTS), so the
    segments land in different spells."""

    def step(*inputs):
        calls[0] += 1
        clock.advance(0.001 if (clock.now // WANDER_SPELL_S) % 2 == 0 else 0.003)

    return step


def test_a_wandering_step_gets_more_segments_and_a_steady_one_does_not():
    clock = FakeClock()
    wandering = _wandering(clock, [0])
    _, noisy, _ = models_case._timed_segments(_fake_runner(wandering, None), 1, "cpu", SHORT_TIMING, validate=False, clock=clock)
    _, calm, _ = models_case._timed_segments(_fake_runner(lambda: clock.advance(0.001), None), 1, "cpu", SHORT_TIMING,
                                             validate=False, clock=clock)  # fmt: skip
    assert noisy["segments"] == models_case.MAX_TIMING_SEGMENTS and noisy["spread_pct"] > models_case.NOISY_SEGMENT_SPREAD_PCT
    assert calm["segments"] == models_case.TIMING_SEGMENTS and calm["spread_pct"] <= models_case.NOISY_SEGMENT_SPREAD_PCT


def test_a_timing_budget_stops_further_batches_but_never_the_first():
    """--timing-budget: a wandering step gets no further batch once its segments took the budget; the first batch
    of TIMING_SEGMENTS always runs, and the record says why the timing stopped."""
    clock = FakeClock()
    budgeted = {**SHORT_TIMING, models_case.TIMING_BUDGET_KEY: 0.01}  # spent within the first batch
    _, segments, _ = models_case._timed_segments(_fake_runner(_wandering(clock, [0]), None), 1, "cpu", budgeted,
                                                 validate=False, clock=clock)  # fmt: skip
    assert segments["segments"] == models_case.TIMING_SEGMENTS and segments["spread_pct"] > models_case.NOISY_SEGMENT_SPREAD_PCT
    assert segments["why_stopped"] == "max_timing_s 0.01 s spent"
    generous = {**SHORT_TIMING, models_case.TIMING_BUDGET_KEY: 1000.0}
    _, segments, _ = models_case._timed_segments(_fake_runner(_wandering(clock, [0]), None), 1, "cpu", generous,
                                                 validate=False, clock=clock)  # fmt: skip
    assert segments["segments"] == models_case.MAX_TIMING_SEGMENTS and segments["why_stopped"] == "max segments"


def test_only_fades_own_segments_decide_on_more_and_the_plain_loop_follows_them():
    clock = FakeClock()
    calls = [0]
    wandering_module = _wandering(clock, calls)  # the plain loop's step calls the module; FADE's step is steady
    runner = _fake_runner(lambda: clock.advance(0.001), wandering_module)
    _, segments, plain = models_case._timed_segments(runner, 1, "cpu", SHORT_TIMING, validate=True, clock=clock)
    assert segments["segments"] == models_case.TIMING_SEGMENTS and segments["order"] == "FPPF" * 3
    assert plain["spread_pct"] > models_case.NOISY_SEGMENT_SPREAD_PCT  # noisy, yet it bought FADE nothing

    calls[0] = 0
    runner = _fake_runner(lambda: wandering_module(), wandering_module)
    _, segments, plain = models_case._timed_segments(runner, 1, "cpu", SHORT_TIMING, validate=True, clock=clock)
    assert segments["order"] == "FPPF" * (models_case.MAX_TIMING_SEGMENTS // 2)
    assert len(plain["segment_samples_per_s"]) == models_case.MAX_TIMING_SEGMENTS


def test_the_finiteness_sum_sees_a_nan_in_any_step_across_folds():
    import torch

    tracker = FiniteTracker("cpu")
    steps = 2 * tracker.FOLD_STEPS + 5
    for index in range(steps):
        tracker.add_loss(torch.tensor(float("nan") if index == 7 else 1.0))
    with pytest.raises(InvalidRun, match="invalid"):
        tracker.check()
    tracker.reset()
    tracker.KEEP_BYTES = 64  # a fold of kept outputs every few steps
    for index in range(steps):
        tracker.add_output({"logits": torch.ones(3, 2, dtype=torch.bfloat16), "ids": torch.arange(3)})
    assert tracker.check() == steps and float(tracker.total) == 6 * steps
    for index in range(steps):
        tracker.add_output(torch.full((4,), float("inf") if index == 3 else 1.0))
    with pytest.raises(InvalidRun):
        tracker.check()


def test_an_inference_step_launches_no_op_of_its_own_until_its_kept_outputs_fill_keep_bytes():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountOps(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountOps.ops += not func.is_view  # a view launches nothing on a device
            return func(*args, **(kwargs or {}))

    tracker = FiniteTracker("cpu")
    tracker.KEEP_BYTES = 16 * 1024
    outputs = [torch.randn(8, 32) for _ in range(40)]  # 1 KB each: 16 fit, the 17th folds
    with CountOps():
        for output in outputs[:16]:
            tracker.add_output(output)
        assert CountOps.ops == 0 and tracker.kept_bytes == 16 * 1024
        tracker.add_output(outputs[16])  # one concatenation and one sum for the 16 kept, then keeps this one
        assert CountOps.ops == 2 and tracker.kept_bytes == 1024
    for output in outputs[17:]:
        tracker.add_output(output)
    assert tracker.kept_bytes_max == tracker.KEEP_BYTES
    tracker.check()
    assert float(tracker.total) == pytest.approx(float(sum(output.sum() for output in outputs)), rel=1e-5)


def test_an_output_larger_than_keep_bytes_is_summed_on_the_spot_and_not_kept():
    import torch

    tracker = FiniteTracker("cpu")
    tracker.KEEP_BYTES = 1024
    big = torch.ones(64, 64)  # 16 KB
    big[5, 7] = float("nan")
    tracker.add_output(big)
    assert tracker.kept == [] and tracker.kept_bytes_max == 0 and len(tracker.pending) == 1
    with pytest.raises(InvalidRun):
        tracker.check()


def test_the_bench_and_the_tuner_judge_an_fp16_run_with_skipped_updates_alike():
    """fp16's GradScaler skipped two of the first four steps while it found its scale: both the bench and the
    tuner compare the last loss with fp32's after as many updates (only the tuner did, so the bench called
    a variant invalid that the tuner accepted)."""
    from types import SimpleNamespace

    from fade.act.tune import numerics as tune_numerics

    assert tune_numerics.loss_check is numerics.loss_check  # one judge
    reference = {"losses": [7.0, 6.0, 5.0, 4.0, 3.0], "rounded_losses": [7.0, 6.0, 5.0, 4.0, 3.0], "flops_by_op": {}}
    losses = [7.0, 7.0, 7.0, 6.0, 5.0]
    bench = models_case._compare_losses(losses, reference, SimpleNamespace(updates_before_last=2), training=True)
    assert bench["ok"] and bench["fp32_loss"] == 5.0 and bench["updates_before_last"] == 2
    assert tune_numerics.check_training({"losses": losses, "grads_finite": True, "updates_before_last": 2}, reference) is None

    claimed_four = {"losses": losses, "grads_finite": True, "updates_before_last": 4}
    with pytest.raises(InvalidRun) as caught:
        models_case._compare_losses(losses, reference, SimpleNamespace(updates_before_last=4), training=True)
    assert str(caught.value) == tune_numerics.check_training(claimed_four, reference)
    assert "fp32 from the same seed after 4 updates gives 3" in str(caught.value)


def test_the_checked_steps_count_the_updates_a_grad_scaler_let_through():
    """The checked steps count the GradScaler's updates (its scale halves on a skipped step) and the bench's
    loss check reads them: here a scaler that skips the first step, on the CPU."""
    import torch

    from fade.measure.step.config import StepConfig
    from fade.measure.step.runner import StepRunner
    from fade.measure.zoo.workload import Workload

    model = torch.nn.Linear(4, 3)
    workload = Workload(model, (torch.randn(8, 4),), torch.randint(0, 3, (8,)), torch.nn.functional.cross_entropy, 8)
    runner = StepRunner(workload, model, StepConfig(), True, "cpu", track_finite=False)
    scales = iter([2.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # before/after each of 3 steps: the first is skipped
    runner.scaler = type("Scaler", (), {"get_scale": lambda self: next(scales), "scale": lambda self, loss: loss,
                                        "step": lambda self, optimizer: optimizer.step(), "update": lambda self: None})()  # fmt: skip
    checked = runner.checked_steps(3)
    assert checked.updates_before_last == 1 and len(checked.losses) == 3
