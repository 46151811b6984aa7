"""benchmarks/reliability_check.py's CPU path: the contention summary reads the JSONL the bench wrote."""

import importlib.util
import json
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[2] / "benchmarks" / "reliability_check.py"


def load_harness():
    spec = importlib.util.spec_from_file_location("reliability_check", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_contended_counts_reads_each_records_verdict(tmp_path):
    harness = load_harness()
    lines = [{"telemetry": {"contended": True, "contention": {"other_cpu_share": 0.61234}}},
             {"telemetry": {"contended": False, "contention": {"other_cpu_share": 0.01, "gpu_other_processes": 0}}},
             {"telemetry": {}}]  # fmt: skip
    path = tmp_path / "busy.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert harness.contended_counts(path) == {"records": 3, "contended": 1, "other_cpu_share": [0.612, 0.01, 0],
                                              "gpu_other_processes": [None, 0, None]}  # fmt: skip


def test_bench_arguments_name_the_device_and_the_output(tmp_path):
    harness = load_harness()
    assert harness.bench_args("cuda:0", "gemm/*", tmp_path / "q.jsonl") == [
        "bench", "micro", "--quick", "--device", "cuda:0", "-o", str(tmp_path / "q.jsonl"), "--only", "gemm/*"]
