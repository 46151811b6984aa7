"""Plots: every family of a GPU run becomes a readable PNG, with the spec-table peak drawn as a line."""

import random

from fade.measure.suites.micro import suite as micro
from fade.measure.case import Case, CaseResult
from fade.results import make_record
from fade.measure.timing import Timing
from fade.report.plots import plot_micro

PEAKS = {"tflops": {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9}, "bandwidth_gbs": 3352.0, "basis": "table"}
TYPICAL_FRACTION = {"gemm": 0.75, "conv": 0.5, "sdpa": 0.55, "memory": 0.88, "norm": 0.7, "transfer": None}


def synthetic_record(case: Case, rng: random.Random) -> dict:
    """A plausible H100-like record for `case`, so plots can be drawn without a GPU."""
    family = case.case_id.split("/")[0]
    params = case.params
    extra = {}
    peak_kind, peak_dtype = None, None
    if family in ("gemm", "conv", "sdpa"):
        work = {"flops": 2 * params["m"] * params["n"] * params["k"]} if family == "gemm" else {"flops": 10**11}
        peak_kind, peak_dtype, unit = "tflops", params["dtype"], "TFLOP/s"
        value = PEAKS["tflops"][params["dtype"]] * TYPICAL_FRACTION[family] * rng.uniform(0.6, 1.0)
        if family == "gemm" and params["m"] < 2048:
            value *= params["m"] / 2048
        if family == "sdpa":
            extra = {"backend_ran": {"default": "CUDNN_ATTENTION", "math": "MATH", "flash": "FLASH_ATTENTION",
                                     "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}[params["backend"]]}  # fmt: skip
    elif family in ("memory", "norm"):
        peak_kind, unit = "bandwidth", "GB/s"
        size = params.get("elements", 2**26) * 4
        value = 3352.0 * TYPICAL_FRACTION[family] * min(1.0, size / 2**27) * rng.uniform(0.9, 1.0)
        work = {"bytes": size * 2}
    elif family == "transfer":
        unit, work = "GB/s", {"bytes": params["nbytes"]}
        value = (52.0 if params["memory"] == "pinned" else 18.0) * min(1.0, params["nbytes"] / 2**24)
    elif family == "launch":
        unit, work, value = "us", {}, {"eager": 4.1, "graph": 1.2, "sync": 9.5}[params["mode"]]
    else:  # cpu_vs_gpu
        unit, work = "x", {"flops": 2 * params["n"] ** 3}
        cpu, gpu = 1.2, 45.0 * params["n"] / 2048
        value = gpu / cpu
        extra = {"cpu": {"tflops": cpu, "threads": 16}, "gpu": {"tflops": gpu}}
    median = 1e-3
    timing = Timing(samples_s=tuple(median * rng.uniform(0.98, 1.02) for _ in range(9)), calls_per_sample=1,
                    warmup_calls=3, warmup_s=0.05, method="cuda-events", stop_reason="converged")  # fmt: skip
    result = CaseResult(value=value, unit=unit, formula="", timing=timing, work=work, peak_kind=peak_kind, peak_dtype=peak_dtype, extra=extra)
    return make_record(
        case=case, run_id="synthetic", torch_device="cuda:0", status="ok", started="", finished="", duration_s=0.1,
        device={"name": "NVIDIA H100 80GB HBM3"}, stack={}, peaks=PEAKS, telemetry={}, result=result,
    )  # fmt: skip


def synthetic_gpu_run() -> list:
    rng = random.Random(0)
    return [synthetic_record(case, rng) for case in micro.build_catalog("cuda:0", quick=False)]


def test_a_full_gpu_run_gives_one_png_per_family(tmp_path):
    paths = plot_micro(synthetic_gpu_run(), tmp_path)
    assert [path.name for path in paths] == ["gemm.png", "bandwidth.png", "conv.png", "sdpa.png", "cpu_vs_gpu.png"]
    assert all(path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000 for path in paths)


def test_failed_records_are_left_out(tmp_path):
    records = synthetic_gpu_run()
    for record in records:
        record["status"] = "error"
    assert plot_micro(records, tmp_path) == []
