"""A real CPU profile of a tiny model goes through capture -> summary -> console and HTML rendering, with the
trace written gzip'd and the summary saying there is no device timeline."""

import gzip
import json

import pytest

torch = pytest.importorskip("torch")

from fade.analyze.profile import compare_profiles, summarize_trace  # noqa: E402
from fade.errors import FadeUsageError  # noqa: E402
from fade.measure.profile import profile_steps  # noqa: E402
from fade.report.console import make_console  # noqa: E402
from fade.report.profile import profile_html_section, render_comparison, render_profile  # noqa: E402


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "trace.json.gz"
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(8, 32)

    def step():
        optimizer.zero_grad()
        model(inputs).sum().backward()
        optimizer.step()

    progress = []
    result = profile_steps(step, device="cpu", wait=1, warmup=1, active=2, trace_path=path,
                           overhead_budget_s=0.05, on_progress=progress.append)
    result.progress = progress
    return result


def test_the_capture_writes_a_gzipped_chrome_trace_of_the_active_steps(capture):
    with gzip.open(capture.trace_path, "rt") as handle:
        on_disk = json.load(handle)
    names = [e.get("name") for e in on_disk["traceEvents"]]
    assert sum(str(n).startswith("ProfilerStep#") for n in names) == 2
    assert len(capture.profiled_step_s) == 2 and capture.activities == ["cpu"]
    assert capture.overhead_fraction is not None and capture.unprofiled_timing["stats"]["n"] >= 3
    assert capture.progress and "trace" not in capture.to_dict()


def test_a_cpu_profile_summarizes_host_ops_and_flops_without_a_device_timeline(capture):
    summary = summarize_trace(capture.trace)
    assert summary.device_timeline is False and summary.platform == "cpu"
    assert any("CPU-only" in note for note in summary.notes)
    assert summary.total.busy_us is None and summary.total.idle_us is None
    assert summary.total.flops["gemm"] > 0  # three GEMMs per step from the recorded shapes
    assert {op["name"] for op in summary.total.top_host_ops} & {"aten::addmm", "aten::mm"}
    assert summary.verdict["rule"] == "cpu_only"


def test_the_summary_renders_on_the_console_and_as_an_html_section(capture):
    data = summarize_trace(capture.trace).to_dict()
    console = make_console(record=True, width=120)
    console.print(render_profile(data))
    text = console.export_text()
    assert "verdict" in text and "Top host ops" in text
    html = profile_html_section(data)
    assert html.startswith("<section") and "CPU-only" in html and "aten::" in html
    console.print(render_comparison(compare_profiles(data, data)))


def test_the_html_section_of_a_device_profile_carries_the_time_split_plot():
    pytest.importorskip("matplotlib")
    from tests.profile.synthetic import mixed_idle_trace

    html = profile_html_section(summarize_trace(mixed_idle_trace()).to_dict())
    assert "data:image/png;base64," in html and "idle: waiting on host" in html


def test_a_cuda_device_on_a_machine_without_one_is_one_usage_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA/ROCm device")
    with pytest.raises(FadeUsageError, match="torch.cuda.is_available\\(\\) is False"):
        profile_steps(lambda: None, device="cuda", wait=0, warmup=0, active=1)


def test_a_bad_schedule_is_refused():
    with pytest.raises(FadeUsageError, match="active >= 1"):
        profile_steps(lambda: None, device="cpu", wait=0, warmup=0, active=0)


def test_the_mfu_peak_is_the_spec_table_peak_of_the_dtype_the_variant_runs_in():
    """The model bench and `fade profile` share models.case.peak_for_flops: autocast's dtype wins, TF32 only
    where the variant's math says tf32 and the device has it, FLOP-weighted across conv and matmul."""
    from fade.measure.suites.models.case import peak_for_flops
    from fade.measure.suites.models.variants import parse_variant

    peaks = {"tflops": {"bf16": 1000.0, "tf32": 500.0, "fp32": 50.0}}
    bf16 = peak_for_flops({"conv": 1, "matmul": 1}, parse_variant("amp-bf16"), peaks, {"tf32": None})
    assert bf16["peak_tflops"] == pytest.approx(1000.0) and bf16["peak_dtype"] == "bf16"
    tf32 = peak_for_flops({"conv": 0, "matmul": 10}, parse_variant("tf32"), peaks, {"tf32": None})
    assert tf32["peak_dtype"] == "tf32"
    no_tf32 = peak_for_flops({"conv": 0, "matmul": 10}, parse_variant("tf32"), peaks, {"tf32": "no TF32 here"})
    assert no_tf32["peak_dtype"] == "fp32" and no_tf32["peak_tflops"] == pytest.approx(50.0)
    assert peak_for_flops({"conv": 1, "matmul": 0}, parse_variant("amp-fp16"), peaks, {})["note"].startswith(
        "the spec table has no fp16")
    assert peak_for_flops({"conv": 1}, parse_variant("default"), None, {})["peak_tflops"] is None


@pytest.mark.parametrize("window_pct, says, never", [
    (12.0, "profiler overhead +12%", "shorter than the unprofiled"),
    (-37.0, "37% shorter than the unprofiled step", "overhead -37%"),
])
def test_a_profiled_window_shorter_than_the_unprofiled_step_is_not_called_a_negative_overhead(window_pct, says,
                                                                                              never):
    """Issue 30: `fade profile` printed "profiler overhead -37%". A window shorter than the unprofiled step is no
    overhead; the line says what it was instead."""
    from tests.profile.synthetic import mixed_idle_trace

    data = summarize_trace(mixed_idle_trace()).to_dict()
    data["step_time"] = {"unprofiled_s": 0.010, "profiled_window_s": 0.010 * (1 + window_pct / 100),
                         "overhead_window_pct": window_pct}
    console = make_console(record=True, width=400)
    console.print(render_profile(data))
    text = " ".join(console.export_text().split())
    assert says in text and never not in text
