"""Telemetry summaries: a figure measured while clocks were pulled down says so; idle does not count."""

from fade.measure.fingerprint import stack_fingerprint
from fade.measure.telemetry import TelemetrySample, TelemetrySampler, TelemetrySource, open_telemetry, summarize_samples


def source_of(samples) -> TelemetrySource:
    readings = iter(samples)
    last = samples[-1]
    return TelemetrySource("fake", read=lambda: next(readings, last))


def test_power_cap_during_the_run_marks_it_throttled():
    samples = [
        TelemetrySample(0.0, sm_clock_mhz=1980, power_w=690, temperature_c=60, reasons=("gpu_idle",)),
        TelemetrySample(0.1, sm_clock_mhz=1755, power_w=700, temperature_c=71, reasons=("sw_power_cap",)),
    ]
    summary = summarize_samples(samples, source=source_of(samples))
    assert summary["throttled"] is True
    assert summary["throttle_reasons"] == ["sw_power_cap"]
    assert summary["reasons_seen"] == ["gpu_idle", "sw_power_cap"]
    assert summary["sm_clock_mhz"] == {"min": 1755, "median": 1867.5, "max": 1980}
    assert summary["mem_clock_mhz"] is None


def test_idle_and_application_clocks_are_not_throttling():
    samples = [TelemetrySample(0.0, reasons=("gpu_idle", "applications_clocks_setting"))]
    assert summarize_samples(samples, source=source_of(samples))["throttled"] is False


def test_sampler_reads_at_start_and_stop_even_for_a_short_case():
    samples = [TelemetrySample(float(i), sm_clock_mhz=1000 + i) for i in range(100)]
    with TelemetrySampler(source_of(samples), period_s=10.0) as sampler:
        pass
    assert sampler.summary()["samples"] == 2


def test_missing_library_or_cpu_gives_a_reason_not_an_error():
    assert open_telemetry("cpu").reason == "no GPU telemetry for a cpu device"
    summary = summarize_samples([], source=TelemetrySource("none", reason="nvidia-ml-py is not installed"))
    assert summary == {"available": False, "source": "none", "reason": "nvidia-ml-py is not installed"}


def test_fingerprint_keeps_only_relevant_environment_variables():
    fingerprint = stack_fingerprint({"PYTORCH_TUNABLEOP_ENABLED": "1", "MIOPEN_FIND_MODE": "3", "HOME": "/root", "HSA_X": "y"})
    assert fingerprint["env"] == {"HSA_X": "y", "MIOPEN_FIND_MODE": "3", "PYTORCH_TUNABLEOP_ENABLED": "1"}
    assert fingerprint["torch"]["version"]
    assert {"cudnn_benchmark", "float32_matmul_precision", "tunableop_enabled", "preferred_blas_library"} <= set(
        fingerprint["backends"]
    )
