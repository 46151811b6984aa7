"""Numerics on a model in a realistic state (issue 14): a random BatchNorm network in eval mode underflows
fp16; calibrated BatchNorm statistics make fp16 pass where it is sound, and a real overflow still fails."""

import pytest

torch = pytest.importorskip("torch")

from fade.act.tune.numerics import check  # noqa: E402
from fade.act.tune.trial import prepare  # noqa: E402
from fade.measure.step.numerics import calibrate_batchnorm, check_inference  # noqa: E402
from fade.measure.zoo.workload import Workload, build_workload  # noqa: E402

FP16 = {"precision": "amp-fp16"}


def mobilenet_v2():
    return build_workload("mobilenet_v2", 4, 64, "cpu")


def test_a_random_mobilenet_v2_in_eval_mode_underflows_fp16_without_calibration(monkeypatch):
    """The issue's rejection, reproduced at CPU size: logits RMS ~1e-10, fp16 returns zeros, error 1."""
    monkeypatch.setattr("fade.act.tune.trial.calibrate_batchnorm", lambda model, inputs: 0)
    numerics = prepare(mobilenet_v2, "infer", FP16, "cpu", quick=True).numerics
    assert numerics["fp32_output_rms"] < 1e-6
    reason = check(numerics, None)
    assert reason is not None and "below fp16's smallest normal" in reason


def test_calibrated_batchnorm_lets_fp16_pass_on_mobilenet_v2():
    numerics = prepare(mobilenet_v2, "infer", FP16, "cpu", quick=True).numerics
    assert numerics["calibrated_batchnorm"] == 52
    assert numerics["fp32_output_rms"] > 1e-2  # logits of a realistic scale
    assert check(numerics, None) is None


def test_fp16_that_truly_overflows_is_still_rejected():
    """A head whose logits reach ~1e6: fp16 (max 65504) gives inf, after calibration as before."""

    def overflowing():
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))  # fmt: skip
        with torch.no_grad():
            model[-1].weight.mul_(1e6)
        inputs = (torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
        return Workload(model, inputs, None, lambda output: output.float().mean(), 4)

    numerics = prepare(overflowing, "infer", FP16, "cpu", quick=True).numerics
    assert check(numerics, None) == "an output is not finite"


def test_calibration_sets_the_batch_statistics_and_restores_mode_and_momentum():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4)).eval()
    inputs = (3 + 2 * torch.randn(8, 3, 5, 5, generator=torch.Generator().manual_seed(0)),)
    assert calibrate_batchnorm(model, inputs) == 1
    norm = model[1]
    features = model[0](inputs[0]).detach()
    assert torch.allclose(norm.running_mean, features.mean((0, 2, 3)), atol=1e-5)
    assert torch.allclose(norm.running_var, features.var((0, 2, 3), unbiased=True), rtol=1e-4)
    assert norm.momentum == 0.1 and not model.training
    assert calibrate_batchnorm(torch.nn.Linear(2, 2), (torch.ones(1, 2),)) == 0


def test_the_output_bound_follows_what_rounding_does_to_the_model_but_never_past_the_cap():
    sensitive = {"mode": "infer", "relative_rms_error": 0.3, "math_dtype": "bf16", "finite": True, "rounding_spread": 0.2}
    assert check_inference(sensitive) is None  # 0.3 <= 2 x 0.2
    assert "allowed for bf16" in check_inference({**sensitive, "rounding_spread": 0.1})
    zeros = {**sensitive, "relative_rms_error": 1.0, "rounding_spread": 5.0}
    assert "more than the 0.5 allowed" in check_inference(zeros)


def test_a_loss_that_takes_a_target_gets_one_derived_or_given():
    from fade.act.tune.tuner import loss_target

    model = torch.nn.Linear(6, 5)
    inputs = (torch.randn(4, 6),)
    target, note = loss_target(model, inputs, torch.nn.CrossEntropyLoss(), None)
    assert target.shape == (4,) and target.dtype == torch.int64 and int(target.max()) < 5
    assert note.startswith("derived: random class indices")
    target, note = loss_target(model, inputs, torch.nn.MSELoss(), None)
    assert target.shape == (4, 5) and note.startswith("derived")
    given = torch.zeros(4, dtype=torch.int64)
    assert loss_target(model, inputs, torch.nn.CrossEntropyLoss(), given) == (given, "given")
    assert loss_target(model, inputs, lambda output: output.sum(), None) == (None, "loss_fn(output)")


def test_a_loss_that_cannot_run_is_one_line_not_a_traceback():
    from fade.act.tune.tuner import tune
    from fade.errors import FadeUsageError

    with pytest.raises(FadeUsageError, match=r"loss_fn\(output, target\) failed on one forward pass: .*Error"):
        tune(torch.nn.Linear(6, 5), torch.randn(4, 6), torch.nn.CrossEntropyLoss(), target=torch.zeros(3, dtype=torch.int64))


def test_a_batch_too_small_for_train_mode_leaves_the_statistics_as_they_were():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4)).eval()
    assert calibrate_batchnorm(model, (torch.randn(1, 3, 1, 1),)) == 0
    assert torch.equal(model[1].running_var, torch.ones(4)) and not model.training
