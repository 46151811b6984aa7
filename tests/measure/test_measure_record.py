"""Result records: the JSONL reader keeps good lines and reports bad ones by number; the appender
never leaves a torn line behind; summaries take each case's newest record."""

import json

import pytest

from fade.errors import FadeUsageError
from fade.measure.case import Case, CaseResult
from fade.results import SCHEMA_VERSION, JsonlAppender, make_record, peak_for, read_records, summarize
from fade.measure.timing import Timing


def a_record(case_id="gemm/bf16/8192x8192x8192", status="ok", value=700.0, device="cuda:0") -> dict:
    timing = Timing(samples_s=(1.5e-3, 1.4e-3, 1.6e-3, 1.45e-3, 1.55e-3), calls_per_sample=1, warmup_calls=3,
                    warmup_s=0.05, method="cuda-events", stop_reason="converged")  # fmt: skip
    result = CaseResult(value=value, unit="TFLOP/s", formula="2*m*n*k / median_s / 1e12", timing=timing,
                        work={"flops": 2 * 8192**3}, peak_kind="tflops", peak_dtype="bf16")  # fmt: skip
    return make_record(
        case=Case(case_id=case_id, suite="micro", module="m", function="f", params={"dtype": "bf16"}),
        run_id="run1", torch_device=device, status=status, started="2026-11-22T00:00:00.000Z",
        finished="2026-11-22T00:00:01.000Z", duration_s=1.0, device={"name": "NVIDIA H100 80GB HBM3"},
        stack={}, peaks={"tflops": {"bf16": 989.4}, "bandwidth_gbs": 3352.0, "basis": "table"},
        telemetry={"available": False, "reason": "test"}, result=result if status == "ok" else None,
    )  # fmt: skip


def test_record_carries_schema_version_stats_and_percent_of_peak():
    record = a_record()
    assert record["schema_version"] == SCHEMA_VERSION and record["fade_version"]
    assert record["stats"]["median_s"] == pytest.approx(1.5e-3) and record["stats"]["n"] == 5
    assert record["peak"]["pct_of_peak"] == pytest.approx(100 * 700.0 / 989.4)
    assert record["peak"]["basis"] == "table"
    json.dumps(record, allow_nan=False)


def test_no_peak_when_the_table_lacks_the_dtype():
    result = CaseResult(value=1.0, unit="TFLOP/s", formula="", peak_kind="tflops", peak_dtype="fp8")
    assert peak_for(result, {"tflops": {"bf16": 989.4}, "bandwidth_gbs": None}) is None
    assert peak_for(result, None) is None


def test_corrupt_line_is_reported_with_its_number_and_the_rest_is_kept(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps(a_record())
    path.write_text(good + "\n" + '{"schema_version": 1, "case_id": "torn' + "\n" + good + "\n")
    found = read_records(path)
    assert len(found.records) == 2
    assert len(found.problems) == 1 and f"{path}:2:" in found.problems[0]
    with pytest.raises(FadeUsageError, match=":2: not valid JSON"):
        read_records(path, strict=True)


def test_unknown_schema_version_is_reported_not_misread(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**a_record(), "schema_version": 99}) + "\n")
    found = read_records(path)
    assert found.records == [] and "schema_version 99" in found.problems[0]


def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(FadeUsageError, match="cannot read results file"):
        read_records(tmp_path / "absent.jsonl")


def test_appender_starts_a_fresh_line_after_a_torn_one(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(a_record()) + "\n" + '{"schema_version": 1, "cas')  # a writer died mid-line
    with JsonlAppender(path) as appender:
        appender.append(a_record(case_id="launch/eager"))
    found = read_records(path)
    assert [r["case_id"] for r in found.records] == ["gemm/bf16/8192x8192x8192", "launch/eager"]
    assert len(found.problems) == 1 and ":2:" in found.problems[0]


def test_summary_uses_the_newest_record_per_case_and_device():
    rows = summarize([a_record(status="error"), a_record(device="cuda:1"), a_record(value=750.0)])
    assert [(row["torch_device"], row["status"], row["value"]) for row in rows] == [
        ("cuda:0", "ok", 750.0),
        ("cuda:1", "ok", 700.0),
    ]
    assert rows[0]["pct_of_peak"] == pytest.approx(100 * 750 / 989.4)
    assert rows[0]["median_ms"] == pytest.approx(1.5)


def test_peaks_come_from_device_truth_and_a_failure_degrades(monkeypatch):
    from types import SimpleNamespace

    from fade.analyze import devices
    from fade.collect import snapshot
    from fade.measure import session

    peaks = SimpleNamespace(tflops={"bf16": 989.4, "fp8": 1978.9}, bandwidth_gbs=3352.0, basis="table", source="NVIDIA H100 datasheet")
    truth = SimpleNamespace(peaks=peaks, to_dict=lambda: {"name": "NVIDIA H100 80GB HBM3", "peaks": {"tflops": {"bf16": 989.4}}})
    monkeypatch.setattr(snapshot, "collect_snapshot", lambda **options: {})
    monkeypatch.setattr(devices, "torch_device_truth", lambda snapshot, index: truth)
    info, found = session.device_truth_and_peaks("cuda:0")
    assert info["name"] == "NVIDIA H100 80GB HBM3" and "torch" in info
    assert found == {"tflops": {"bf16": 989.4, "fp8": 1978.9}, "bandwidth_gbs": 3352.0, "basis": "table", "source": "NVIDIA H100 datasheet"}

    def broken(snapshot, index):
        raise IndexError("no torch GPU device 0")

    monkeypatch.setattr(devices, "torch_device_truth", broken)
    info, found = session.device_truth_and_peaks("cuda:0")
    assert info["error"].startswith("device_truth(0) failed: IndexError") and found is None
    assert session.device_truth_and_peaks("cpu")[1] is None  # the CPU has no peak
