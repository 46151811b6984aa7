"""`fade profile` end to end on the CPU: a zoo model's step (the bench's workload and step core), a user script
with a planted `.item()` named at its line, `fade profile compare`, the summary in `fade report`, the
`fade.profile()` context manager, and bad input as one line with exit code 2."""

import gzip
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import fade  # noqa: E402
from fade.cli import main  # noqa: E402
from fade.errors import FadeUsageError  # noqa: E402
from fade.measure.profile import capture_from_text  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PLANTED = REPO / "examples" / "profile_planted_sync.py"
TINY = ["--batch", "2", "--size", "32", "--device", "cpu", "--wait", "1", "--warmup", "0", "--steps", "1",
        "--no-overhead"]


def planted_line() -> int:
    for number, line in enumerate(PLANTED.read_text().splitlines(), start=1):
        if "# PLANTED: sync" in line:
            return number
    raise AssertionError("the example lost its # PLANTED: sync marker")


@pytest.fixture(scope="module")
def resnet_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("resnet")
    code = main(["profile", "resnet18", "--mode", "train", *TINY, "-o", str(out / "dir"), "--json", str(out / "s.json")])
    return code, out


def test_a_zoo_model_profile_writes_the_trace_and_a_versioned_cpu_only_summary(resnet_profile):
    code, out = resnet_profile
    assert code == 0
    trace = out / "dir" / "resnet18-train-default.trace.json.gz"
    summary = json.loads((out / "dir" / "resnet18-train-default.summary.json").read_text())
    with gzip.open(trace, "rt") as handle:
        assert any(str(e.get("name")).startswith("ProfilerStep#") for e in json.load(handle)["traceEvents"])
    assert summary["kind"] == "profile-summary" and summary["schema_version"] == 1
    assert summary["device_timeline"] is False and summary["verdict"]["rule"] == "cpu_only"
    assert any("CPU-only" in note for note in summary["notes"])
    assert any("outside the summary" in note for note in summary["notes"])  # the schedule is stated
    assert summary["total"]["flops"]["convolution"] > 0
    assert summary["context"]["workload"]["model"] == "resnet18" and summary["context"]["variant"]
    assert summary["host_lines"] == []  # the zoo's and FADE's own lines are not the user's
    assert json.loads((out / "s.json").read_text())["kind"] == "profile-summary"


def test_fade_report_renders_a_profile_summary_as_its_own_section(resnet_profile, tmp_path):
    _, out = resnet_profile
    html = tmp_path / "report.html"
    assert main(["report", str(out / "dir" / "resnet18-train-default.summary.json"), "-o", str(html)]) == 0
    text = html.read_text()
    assert "<section class=profile>" in text and "resnet18-train-default.summary.json" in text


def test_compare_of_two_summaries_or_their_directories(resnet_profile, tmp_path):
    _, out = resnet_profile
    summary = out / "dir" / "resnet18-train-default.summary.json"
    assert main(["profile", "compare", str(summary), str(out / "dir"), "--json", str(tmp_path / "c.json")]) == 0
    comparison = json.loads((tmp_path / "c.json").read_text())
    assert comparison["kind"] == "profile-comparison" and comparison["step"]["speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize("make_bad, message", [
    (lambda d: d / "missing.json", "no such file"),
    (lambda d: (d / "x.json").write_text("{") and d / "x.json", "not JSON"),
    (lambda d: (d / "r.json").write_text('{"schema_version": 1}') and d / "r.json", "not a profile summary"),
    (lambda d: (d / "v.json").write_text('{"kind": "profile-summary", "schema_version": 99}') and d / "v.json",
     "schema_version 99"),
    (lambda d: d, "0 \\*.summary.json files"),
])
def test_compare_refuses_bad_input_with_one_line(make_bad, message, resnet_profile, tmp_path, capsys):
    _, out = resnet_profile
    bad = make_bad(tmp_path)
    assert main(["profile", "compare", str(out / "dir"), str(bad)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and re.search(message, error)


def test_the_planted_item_of_a_script_is_named_at_its_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["profile", "--device", "cpu", "-o", str(tmp_path), "--json", str(tmp_path / "s.json"), "--",
                 "python", str(PLANTED.relative_to(REPO)), "--steps", "8"])
    assert code == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    where = f"examples/profile_planted_sync.py:{planted_line()}"
    assert summary["verdict"]["rule"] == "host_reads" and where in summary["verdict"]["title"]
    assert summary["host_lines"][0]["kind"] == "host_read" and summary["host_lines"][0]["count"] == 1
    assert summary["total"]["syncs"]["host_reads"] >= 1 and "host-read ops" in summary["total"]["syncs"]["evidence"]
    assert (tmp_path / "profile_planted_sync.trace.json.gz").exists()
    from fade.report.profile import profile_html_section

    assert "PLANTED: sync" in profile_html_section(summary)  # the report's section lists the line too
    assert "trained 8 steps" in capsys.readouterr().out  # the script's own output passes through


def test_a_script_with_no_step_is_one_line_and_exit_2(tmp_path, capsys):
    script = tmp_path / "nostep.py"
    script.write_text("import torch\nprint(float(torch.ones(2).sum()))\n")
    assert main(["profile", "--device", "cpu", "-o", str(tmp_path / "o"), "--", "python", str(script)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "no step found" in error and "fade.step()" in error


@pytest.mark.parametrize("argv, message", [
    (["profile", "resnt18"], "did you mean 'resnet18'"),
    (["profile", "resnet18", "--variants", "bogus"], "unknown part 'bogus'"),
    (["profile"], "name a model"),
    (["profile", "--", "python", "missing_script.py"], "script not found"),
])
def test_bad_usage_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert main([*argv, "-o", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error


def test_an_unwritable_output_directory_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["profile", "resnet18", *TINY, "-o", str(blocker / "sub")]) == 2
    assert "cannot create the directory" in capsys.readouterr().err


def test_a_cuda_device_without_one_is_one_line(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA/ROCm device")
    assert main(["profile", "resnet18", "--device", "cuda", "-o", str(tmp_path)]) == 2
    assert "is_available() is False" in capsys.readouterr().err
    assert main(["profile", "--device", "cuda", "-o", str(tmp_path), "--", "python", str(PLANTED)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "is_available() is False" in error  # before the script runs


def test_a_trace_over_the_size_limit_is_one_usage_line(monkeypatch):
    monkeypatch.setattr("fade.analyze.trace.MAX_TRACE_BYTES", 10)
    with pytest.raises(FadeUsageError, match="profile fewer steps"):
        capture_from_text('{"traceEvents": []}', device="cpu", activities=["cpu"], wait=0, warmup=0, active=1)


def test_a_gpu_capture_without_device_events_says_the_backend_recorded_nothing():
    capture = capture_from_text('{"traceEvents": []}', device="cuda", activities=["cpu", "cuda"], wait=0,
                                warmup=0, active=1)
    assert any("CUPTI" in warning for warning in capture.warnings)


def _train(steps: int, explicit: bool) -> list:
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(8, 16)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(inputs).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # the test's own host read: the line the summary must name
        if explicit:
            fade.step()
    return losses


def test_the_context_manager_profiles_optimizer_steps_and_names_the_line():
    with fade.profile(steps=2, wait=1, warmup=0, device="cpu") as p:
        _train(5, explicit=False)
    summary = p.summary
    assert summary["kind"] == "profile-summary" and summary["total"]["steps"] == 2
    reads = [entry for entry in summary["host_lines"] if entry["kind"] == "host_read"]
    line = next((entry for entry in reads if "loss.item()" in entry["code"]), reads)
    assert line["file"].endswith("test_profile_cli.py") and line["count"] == 1


def test_fade_step_takes_over_from_optimizer_steps():
    with fade.profile(steps=2, wait=1, warmup=0, device="cpu") as p:
        _train(5, explicit=True)
    # the first optimizer.step() ended a step before the first fade.step() was seen; then only fade.step() counts
    assert p.explicit_steps and p.steps_seen == 1 + 5
    assert p.summary["total"]["steps"] == 2


def test_too_few_steps_in_the_context_manager_raise_with_the_reason():
    with fade.profile(steps=3, wait=2, warmup=1, device="cpu") as p:
        _train(2, explicit=False)
    with pytest.raises(FadeUsageError, match="only 2 step"):
        p.summary


def test_the_profiles_flops_per_step_equal_the_model_benchs_count(resnet_profile):
    """TFLOP/s from the profile and from `fade bench models` can only agree if both count the same FLOPs: the
    trace's shapes (fade.analyze.trace) give exactly FlopCounterMode's count for the bench's resnet18 step."""
    from fade.measure.step.config import reference_config
    from fade.measure.step.runner import WEIGHT_SEED, StepRunner, apply_config
    from fade.measure.zoo.workload import build_workload

    _, out = resnet_profile
    summary = json.loads((out / "dir" / "resnet18-train-default.summary.json").read_text())
    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload("resnet18", 2, 32, "cpu")
    config = reference_config()
    runner = StepRunner(workload, apply_config(workload, config), config, True, "cpu", track_finite=False)
    counted = sum(runner.checked_steps(1, count_flops=True).flops_by_op.values())
    total = summary["total"]
    assert total["flops"]["total"] / total["steps"] == counted


def test_a_zoo_profile_times_its_unprofiled_step_with_the_bench_timing_path(tmp_path, monkeypatch):
    """The step's TFLOP/s and MFU divide by the step timed without the profiler by models.case.time_step, the
    bench's own timing (QUICK_TIMING with --quick), after the bench's checked steps; the summary reports both
    times and the profiler's overhead."""
    from fade.measure.suites.models import case
    from fade.measure.suites.models.suite import QUICK_TIMING

    calls = []
    bench_time_step = case.time_step

    def recording(runner, samples, device, settings, **kwargs):
        calls.append({"settings": settings, "lr": runner.optimizer.param_groups[0]["lr"], **kwargs})
        return bench_time_step(runner, samples, device, settings, **kwargs)

    monkeypatch.setattr(case, "time_step", recording)
    tiny = [arg for arg in TINY if arg != "--no-overhead"]
    assert main(["profile", "resnet18", *tiny, "--quick", "-o", str(tmp_path / "dir")]) == 0
    assert calls == [{"settings": QUICK_TIMING, "lr": 0.0, "quick": True}]  # learning rate frozen, as the bench's
    summary = json.loads((tmp_path / "dir" / "resnet18-train-default.summary.json").read_text())
    times, flops = summary["step_time"], summary["total"]["flops"]
    unprofiled = summary["capture"]["unprofiled_timing"]
    assert "time_step" in unprofiled["method"] and unprofiled["timing_segments"]["segments"] >= 1
    assert times["unprofiled_s"] == unprofiled["stats"]["median_s"] > 0
    assert times["profiled_window_s"] > 0 and times["overhead_window_pct"] is not None
    assert flops["step_time_basis"] == "unprofiled"
    assert flops["tflops_step"] == pytest.approx(flops["total"] / times["unprofiled_s"] / 1e12)
