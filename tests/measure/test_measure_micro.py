"""The micro suite: bad input is one line and exit-2 material (FadeUsageError) before anything runs; the
catalog covers the issue's families. (The quick CPU suite's 60 s wall-time target is a benchmark, not a test:
benchmarks/quick_suite_time.py, docs/performance.md.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fade
from fade.errors import FadeUsageError
from fade.measure.suites.micro import suite as micro
from fade.results import read_records

SRC_ROOT = str(Path(__file__).resolve().parents[2] / "src")


def usage_error(**kwargs) -> str:
    with pytest.raises(FadeUsageError) as raised:
        micro.run_micro(**{"isolate": False, **kwargs})
    message = str(raised.value)
    assert "\n" not in message  # one line for `fade: error: ...`
    return message


def test_unknown_pattern_names_the_families_and_a_close_match(tmp_path):
    message = usage_error(device="cpu", only="gemmm/bf16", out=tmp_path / "r.jsonl")
    assert "matches no case" in message and "did you mean 'gemm/bf16'" in message and "families: gemm" in message


def test_fp8_on_the_cpu_is_refused_with_the_reason(tmp_path):
    message = usage_error(device="cpu", only="gemm/fp8", quick=True, out=tmp_path / "r.jsonl")
    assert "fp8" in message and "cpu" in message
    message = usage_error(device="cpu", dtypes=["fp8"], quick=True, out=tmp_path / "r.jsonl")
    assert message.startswith("dtype fp8 is not supported on cpu")


def test_unknown_dtype_suggests_the_known_one(tmp_path):
    assert "did you mean 'fp32'" in usage_error(device="cpu", dtypes=["fp33"], out=tmp_path / "r.jsonl")


def test_unwritable_output_path_is_refused_before_anything_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = usage_error(device="cpu", only="nonsense-pattern", out=blocker / "results.jsonl")
    assert message.startswith(f"-o {blocker / 'results.jsonl'}: cannot create directory")
    assert "is a directory" in usage_error(device="cpu", out=tmp_path)


def test_unknown_or_absent_device_is_a_usage_error(tmp_path):
    assert "unknown device 'tpu9'" in usage_error(device="tpu9", out=tmp_path / "r.jsonl")
    import torch

    if not torch.cuda.is_available():
        assert "not available" in usage_error(device="cuda", out=tmp_path / "r.jsonl")


def test_a_pattern_of_the_full_suite_says_so_under_quick(tmp_path):
    message = usage_error(device="cpu", quick=True, only="gemm/fp32/2048x2048x2048", out=tmp_path / "r.jsonl")
    assert "drop --quick" in message


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
@pytest.mark.parametrize("quick", [True, False])
def test_catalog_ids_are_unique_and_every_case_is_importable(device, quick):
    import importlib

    cases = micro.build_catalog(device, quick=quick)
    assert len({case.case_id for case in cases}) == len(cases)
    for case in cases:
        assert callable(getattr(importlib.import_module(case.module), case.function))
        json.dumps(case.params)


def test_gpu_catalog_covers_the_issue():
    ids = [case.case_id for case in micro.build_catalog("cuda:0", quick=False)]

    def has(pattern):
        return any(micro.matches(pattern, case_id) for case_id in ids)

    for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8"):
        assert has(f"gemm/{dtype}/8192x8192x8192") and has(f"gemm/{dtype}/8192x28672x4096")
    for op in ("copy", "scale", "add", "triad"):
        assert has(f"memory/{op}/1GiB")
    for direction in ("h2d", "d2h"):
        assert has(f"transfer/{direction}/pinned") and has(f"transfer/{direction}/pageable")
    assert has("launch/eager") and has("launch/graph")
    for layout in ("nchw", "channels_last"):
        for direction in ("fwd", "bwd_data", "bwd_weight"):
            assert has(f"conv/fp32/{layout}/{direction}/*") and has(f"conv/bf16/{layout}/{direction}/*")
    for backend in ("math", "flash", "efficient", "cudnn"):
        assert has(f"sdpa/bf16/{backend}/*")
    for op in ("layer_norm", "softmax", "sum"):
        assert has(f"norm/{op}/*")
    assert has("cpu_vs_gpu/*")


def test_selection_drops_unsupported_dtypes_and_says_why():
    catalog = micro.build_catalog("cuda:0", quick=True)
    support = {"fp32": None, "tf32": None, "fp16": None, "bf16": None, "fp8": "fp8 does not run on cuda:0: no"}
    cases, unsupported = micro.select_cases(catalog, device="cuda:0", dtype_support=support, patterns=["gemm"])
    assert cases and all(case.dtype != "fp8" for case in cases)
    assert unsupported == {"fp8 does not run on cuda:0: no": 2}
    with pytest.raises(FadeUsageError, match="selects only cases cuda:0 cannot run: fp8"):
        micro.select_cases(catalog, device="cuda:0", dtype_support=support, patterns=["gemm/fp8"])


def test_small_selection_runs_in_process_and_plots(tmp_path):
    out = tmp_path / "r.jsonl"
    result = fade.bench(
        "micro", "cpu", quick=True, only="gemm/fp32/256x256x256,memory/copy/4MiB,sdpa/fp32/math", out=out,
        isolate=False, plot=True, progress=False,
    )  # fmt: skip
    summary = result.run
    assert summary.statuses == {"ok": 3}
    records = read_records(out, strict=True).records
    assert {r["unit"] for r in records} == {"TFLOP/s", "GB/s"}
    sdpa = next(r for r in records if r["case_id"].startswith("sdpa"))
    assert sdpa["extra"]["backend_ran"] == "MATH"
    assert [path.name for path in result.plots] == ["gemm.png", "bandwidth.png", "sdpa.png"]
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in result.plots)


def test_importing_fade_measure_does_not_import_torch():
    script = "import sys, fade.measure; sys.exit('torch' in sys.modules)"
    subprocess.run([sys.executable, "-c", script], check=True, env=dict(os.environ, PYTHONPATH=SRC_ROOT))


def test_power_heavy_gpu_cases_time_a_sustained_second_and_the_rest_keep_the_run_settings():
    cases = {case.case_id: case for case in micro.build_catalog("cuda:0", quick=False)}
    assert cases["gemm/bf16/8192x8192x8192"].timing == micro.SUSTAINED_TIMING
    assert cases["sdpa/bf16/flash/b4h32s4096d128"].timing == micro.SUSTAINED_TIMING
    assert cases["gemm/bf16/1024x1024x1024"].timing is None  # launch- and cache-bound: the settle phase suits it
    assert cases["memory/copy/1GiB"].timing is None
    assert all(case.timing is None for case in micro.build_catalog("cuda:0", quick=True))
    assert all(case.timing is None for case in micro.build_catalog("cpu", quick=False))


def test_a_case_timing_override_reaches_the_case_through_a_real_worker(tmp_path):
    from fade.measure.case import Case
    from fade.measure.runner import IsolatedExecutor, run_cases

    module = "tests.measure.fault_cases"
    cases = [Case("t/override", "t", module, "report_timing", {}, timing={"budget_s": 7.0}),
             Case("t/plain", "t", module, "report_timing", {})]  # fmt: skip
    out = tmp_path / "r.jsonl"
    run_cases(cases, executor=IsolatedExecutor("cpu"), out=out, timing={"budget_s": 0.4, "min_samples": 5})
    seen = {record["case_id"]: record["extra"]["timing"] for record in read_records(out).records}
    assert seen["t/override"] == {"budget_s": 7.0, "min_samples": 5}
    assert seen["t/plain"] == {"budget_s": 0.4, "min_samples": 5}
