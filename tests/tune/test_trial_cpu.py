"""A real trial on the CPU: a small conv net trains and infers under knobs; numerics pass for sound ones."""

import pytest

torch = pytest.importorskip("torch")

from fade.act.tune.numerics import check  # noqa: E402
from fade.act.tune.trial import measure_reference, measure_trial  # noqa: E402
from fade.measure.zoo.workload import Workload  # noqa: E402

TIMING = {"warmup_s": 0.0, "min_warmup_calls": 1, "min_run_s": 0.01, "budget_s": 0.05, "min_samples": 3, "max_samples": 5,
          "min_block_s": 0.0, "max_settle_s": 0.0}  # fmt: skip


def make_workload():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    inputs = (torch.randn(8, 3, 16, 16, generator=generator),)
    target = torch.randint(0, 10, (8,), generator=generator)
    return Workload(model, inputs, target, torch.nn.functional.cross_entropy, 8)


@pytest.mark.parametrize("knobs", [{"precision": "default"}, {"precision": "amp-bf16", "channels_last": "on"}])
@pytest.mark.parametrize("mode", ["train", "infer"])
def test_sound_knobs_pass_the_numerics_check(mode, knobs):
    reference = measure_reference(make_workload, mode, "cpu", quick=True) if mode == "train" else None
    result = measure_trial(make_workload, mode, knobs, "cpu", TIMING, quick=True)
    assert result.timing.n >= 3 and result.value > 0
    assert check(result.extra["numerics"], reference) is None


def test_a_wrong_result_fails_the_inference_check():
    numerics = {"mode": "infer", "relative_rms_error": 0.3, "math_dtype": "bf16", "finite": True}
    assert "more than the 0.05 allowed for bf16" in check(numerics, None)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_side_by_side_builds_each_configuration_once_and_times_them_in_rotating_rounds(mode):
    from fade.act.tune.search import round_settings
    from fade.act.tune.trial import side_by_side

    built = []

    def counting_workload():
        built.append(1)
        return make_workload()

    configs = {"default": {"precision": "default"}, "hand": {"precision": "amp-bf16", "channels_last": "on"}}
    result = side_by_side(counting_workload, mode, configs, "cpu", TIMING, rounds=3, quick=True)
    sides = result.extra["sides"]
    assert len(built) == 2  # once per configuration, however many rounds
    for name in configs:
        assert len(sides[name]["round_medians_s"]) == 3
        # each round takes round_settings' share of a trial's samples (at least that; more only as the clock
        # allows), pooled: no count that depends on how busy the host is
        assert len(sides[name]["samples_s"]) >= 3 * round_settings(TIMING, 3)["min_samples"]
        assert check(sides[name]["numerics"], measure_reference(make_workload, mode, "cpu", quick=True) if mode == "train" else None) is None


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.AdamW, torch.optim.Adam])
def test_the_optimizer_knob_rebuilds_any_torch_optimizer_with_foreach(optimizer_class):
    """AdamW keeps decoupled_weight_decay in its defaults but refuses it as an argument (torch 2.11 on
    an H100: every gpt2-small optimizer_impl trial failed with a TypeError)."""
    from types import SimpleNamespace

    from fade.measure.step.runner import make_optimizer

    model = torch.nn.Linear(4, 2)
    workload = SimpleNamespace(optimizer=lambda: optimizer_class(model.parameters(), lr=0.01, weight_decay=0.1))
    rebuilt = make_optimizer(workload, "foreach")  # the optimizer_impl knob's value
    assert type(rebuilt) is optimizer_class
    assert rebuilt.defaults["foreach"] is True and rebuilt.defaults["weight_decay"] == 0.1


def test_steps_a_grad_scaler_skipped_are_not_counted_against_fp16():
    """fp16 with a GradScaler skips its first steps while the scale is found (resnet50 on an H100: loss
    6.81 after 5 steps vs fp32's 4.86, yet only 2 updates had happened). The loss is compared with fp32's
    after as many updates."""
    reference = {"losses": [7.0, 6.0, 5.0, 4.0, 3.0], "rounded_losses": [7.0, 6.0, 5.0, 4.0, 3.0]}
    two_updates = {"mode": "train", "losses": [7.0, 7.0, 7.0, 6.0, 5.0], "grads_finite": True, "updates_before_last": 2}
    assert check(two_updates, reference) is None
    claimed_four = dict(two_updates, updates_before_last=4)
    assert "fp32 from the same seed after 4 updates gives 3" in check(claimed_four, reference)


def test_a_checked_fp16_run_reports_how_many_updates_happened():
    from fade.act.tune.trial import prepare

    prepared = prepare(make_workload, "train", {"precision": "amp-fp16"}, "cpu", quick=True)
    numerics = prepared.numerics
    assert 0 <= numerics["updates_before_last"] <= len(numerics["losses"]) - 1


def test_the_baseline_diagnosis_runs_the_profilers_rules_on_the_step():
    """The tuner's diagnosis is `fade profile`'s summary of the baseline step; on the CPU there is no device
    timeline, so the plan keeps the default order and says why."""
    from fade.act.tune.trial import diagnose_step
    from fade.act.tune.tuner import plan_for
    from fade.analyze.knobs import Target, load_knobs, searched_knobs

    diagnosis = diagnose_step(make_workload, "tiny", "train", 8, None, "cpu")
    assert diagnosis["device_timeline"] is False and diagnosis["platform"] == "cpu"
    assert [verdict["rule"] for verdict in diagnosis["verdicts"]] == ["cpu_only"]
    assert diagnosis["step_ms"] > 0
    knobs, _ = searched_knobs(load_knobs(), Target("cpu", torch.__version__, "train", image=True))
    plan = plan_for(knobs, {"status": "ok", **diagnosis})
    assert "CPU-only profile" in plan.note and plan.unanswered == []
    assert [visit.knob for visit in plan.visits] == ["precision", "channels_last", "compile"]


def test_a_failed_diagnosis_leaves_the_default_order_and_says_why():
    from fade.act.tune.tuner import plan_for
    from fade.analyze.knobs import Target, load_knobs, searched_knobs

    knobs, _ = searched_knobs(load_knobs(), Target("cuda", "2.11.0", "train", image=True))
    plan = plan_for(knobs, {"status": "failed", "reason": "timeout: no result after 180 s"})
    assert "could not be profiled (timeout" in plan.note
    assert plan.visits[-1].knob == "compile" and plan.named == {}


def test_checked_steps_keep_each_loss_even_when_the_module_overwrites_its_output():
    """Under CUDA graphs a loss computed inside the compiled module (transformers' models with labels) lives in a
    graph output the next replay overwrites; the checked steps copy each loss. A module that writes its loss into
    one persistent buffer stands in for the replay here."""
    from fade.measure.step.config import StepConfig
    from fade.measure.step.runner import StepRunner

    class IntoBuffer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value, buffer):
            buffer.copy_(value)
            ctx.mark_dirty(buffer)
            return buffer

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    class Overwriting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))
            self.register_buffer("out", torch.zeros(()))

        def forward(self, x):
            return IntoBuffer.apply((x * self.weight).sum(), self.out.detach())

    model = Overwriting()
    workload = Workload(model, (torch.ones(2, 4),), None, lambda output: output, 2)
    runner = StepRunner(workload, model, StepConfig.from_knobs({}), True, "cpu", track_finite=False)
    losses = runner.checked_steps(3).losses
    assert len(set(losses)) == 3  # without the copy every entry reads the last step's value


def test_the_worker_diagnoses_a_zoo_model_in_a_worker_it_then_closes():
    """WorkerMeasure.diagnose runs trial.tune_diagnose in an isolated worker and closes that worker, so no trial
    is timed in a process that ran torch.profiler."""
    from fade.act.tune.tuner import WorkerMeasure
    from fade.analyze.knobs import Target, load_knobs, searched_knobs

    knobs, _ = searched_knobs(load_knobs(), Target("cpu", torch.__version__, "infer", image=True))
    worker = WorkerMeasure(knobs, model="resnet18", mode="infer", batch=2, size=32, device="cpu", cache_env={}, quick=True)
    try:
        diagnosis = worker.diagnose()
        assert not worker.running  # the worker that profiled is gone
    finally:
        worker.close()
    assert diagnosis["status"] == "ok", diagnosis
    assert diagnosis["platform"] == "cpu" and diagnosis["step_ms"] > 0
