"""`fade bench models --device ocl:0,cpu` on PoCL at small size: the command issue 19 runs on the H100 as
ocl:0,cuda:0, here with the CPU as the vendor side. No speed bar: it proves that both devices run the same
cases into one file and that the table and the JSON give ocl as % of the last device listed, for every row.
Skips without an OpenCL device. The CLI runs in this process; each device's cases run in their own worker."""

import json

import pytest

from fade.errors import ExitCode
from fade.results import read_records

from .child import why_no_device

VENDOR_VARIANT = "fp32+cudnn_benchmark=on"  # the fair CUDA fp32 side; ignored by fade.ocl and the CPU, run as fp32


def test_ocl_against_the_cpu_in_one_run_as_percent_of_the_last_device(fade, tmp_path):
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    out, summary = tmp_path / "models.jsonl", tmp_path / "summary.json"
    code, stdout, stderr = fade("bench", "models", "--device", "ocl:0,cpu", "--quick", "--models", "resnet18",
                                "--mode", "infer", "--variants", VENDOR_VARIANT, "-o", out, "--json", summary)
    assert code == ExitCode.OK, stdout[-3000:] + stderr[-3000:]
    records = read_records(out).records
    assert sorted(record["torch_device"] for record in records) == ["cpu", "ocl:0"]
    assert len({record["run_id"] for record in records}) == 1  # one run, two devices
    for record in records:
        assert record["status"] == "ok" and record["params"]["variant"] == VENDOR_VARIANT
        assert record["extra"]["variant"]["ran_as"] == "fp32"
        assert "cudnn_benchmark=on" in record["extra"]["variant"]["not_applicable"]
    data = json.loads(summary.read_text())
    assert data["devices"] == ["ocl:0", "cpu"]
    comparison = data["comparison"]
    assert comparison["by"] == "device" and comparison["baseline"] == "cpu"
    assert comparison["sets"] == ["cpu", "ocl:0"]
    assert comparison["rows"], "the table has no row"
    for row in comparison["rows"]:
        by_set = {label: cell for cell, (label, _) in zip(row["cells"], comparison["columns"])}
        assert by_set["cpu"]["verdict"] == "baseline"
        assert by_set["ocl:0"]["pct_of_baseline"] > 0
    assert "Compared with cpu" in stdout
    assert f"fade compare {out} --by device --baseline cpu" in stdout.replace("\n", "")

    code, stdout, _ = fade("compare", out, "--by", "device", "--baseline", "cpu", "--json")
    assert code == ExitCode.OK
    assert json.loads(stdout)["rows"] == comparison["rows"]  # the same numbers from the file
