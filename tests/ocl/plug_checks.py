"""fade.ocl as one of FADE's measuring devices, on whatever OpenCL device is present (PoCL in CI): the session,
timing, the fallback count per case, the ops probe's `fallback` class, the guard and the CLI verbs. Run by
test_ocl_plug.py in a child process (PrivateUse1 is named once per process)."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fade.ocl as ocl
from fade.hostwork import guard
from fade.measure.case import Case, CaseContext, CaseResult
from fade.measure.session import execute_case, open_session
from fade.measure.suites.ops.probe import run_op
from fade.measure.timing import measure

from child import child_environment

warnings.simplefilter("ignore", UserWarning)  # fade.ocl's first-fallback warnings; counted below instead
SESSION = open_session("ocl")  # registers fade.ocl, as the measuring worker does
DEV = SESSION.device
TINY_SCRIPT = """import torch
x = torch.arange(12.0).to("ocl").view(3, 4)
y = torch.cumsum(x, dim=1)  # no OpenCL kernel
print(float(y.sum().cpu()))
"""


def fade_cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "fade", *args], capture_output=True, text=True,
                          env=child_environment(), timeout=timeout)


def test_session_describes_the_opencl_device():
    info = ocl.devices()[0]
    described = SESSION.describe()
    assert DEV == "ocl:0" and described["device_info"]["type"] == "ocl"
    assert described["device_info"]["name"] == info.name and described["device_info"]["compute_units"] > 0
    assert described["dtypes"]["fp32"] is None and "tf32" in described["dtypes"]["tf32"]
    assert (described["dtypes"]["fp16"] is None) == info.fp16
    if described["peaks"] is None:  # PoCL and unknown GPUs: no table row, and the record says so
        assert "no spec-table row" in described["device_info"]["peaks_note"]
    tuning = described["device_info"]["clblast_tuning"]  # whether tuned CLBlast parameters apply, and why
    assert isinstance(tuning["applied"], bool) and tuning["reason"]


def test_a_bad_ocl_index_is_one_usage_line():
    from fade.errors import FadeUsageError

    with pytest.raises(FadeUsageError, match=r"does not exist: fade.ocl sees \d+ OpenCL device"):
        open_session("ocl:99")


def test_timing_syncs_through_torch_ocl():
    x = torch.ones(1000).to(DEV)
    timing = measure(lambda: x.mul_(1.0), device=DEV, warmup_s=0.0, min_warmup_calls=2, min_run_s=0.0,
                     budget_s=0.05, min_samples=3, max_samples=5)
    assert timing.method == "host-clock+sync" and timing.median_s > 0


def count_cumsum(ctx) -> CaseResult:
    x = torch.ones(4, 4).to(ctx.device)
    torch.cumsum(x, dim=0)
    torch.cumsum(x, dim=1)
    return CaseResult(value=1.0, unit="x", formula="test")


def native_add(ctx) -> CaseResult:
    (torch.ones(8).to(ctx.device) + 1).cpu()
    return CaseResult(value=1.0, unit="x", formula="test")


@pytest.mark.parametrize("function, total", [("native_add", 0), ("count_cumsum", 2)])
def test_each_case_record_carries_its_fallbacks(function, total):
    case = Case(f"test/{function}", "test", __name__, function)
    record = execute_case(case, CaseContext(device=DEV, run_id="r"), SESSION)
    assert record["status"] == "ok", record["error"]
    fallbacks = record["extra"]["ocl_fallbacks"]
    assert fallbacks["total"] == total
    assert (fallbacks["ops"] == {}) if total == 0 else set(fallbacks["ops"]) == {"aten::cumsum.out"}


def test_ops_probe_classes_a_cpu_fallback_as_fallback():
    ctx = CaseContext(device=DEV, run_id="r")
    fell_back = run_op(ctx, op="cumsum", dtype="float32", samples=1).extra
    assert fell_back["class"] == "fallback" and "aten::cumsum.out" in fell_back["fallback_ops"]
    native = run_op(ctx, op="add", dtype="float32", samples=1).extra
    assert native["class"] in ("ok", "slow") and "fallback_ops" not in native


def test_guard_reports_a_fallback_at_the_users_line_named_with_the_op():
    x = torch.ones(4, 4).to(DEV)
    with guard(device="ocl", quiet=True) as watched:
        for _ in range(2):
            torch.cumsum(x, dim=0)  # SITE fallback
    records = watched.report.by_kind("backend_fallback")
    assert len(records) == 1 and records[0].count == 2 and "aten::cumsum" in records[0].ops
    assert records[0].code.endswith("# SITE fallback")


def test_bench_micro_on_ocl_runs_and_skips_with_reasons(tmp_path):
    out = tmp_path / "micro.jsonl"
    done = fade_cli("bench", "micro", "--device", "ocl", "--quick", "--only",
                    "gemm/fp32/256x256x256,launch,conv/fp32/nchw/fwd/layer4.1.conv2,transfer/h2d", "-o", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {record["case_id"]: record for record in map(json.loads, out.read_text().splitlines())}
    assert records["gemm/fp32/256x256x256"]["extra"]["ocl_fallbacks"]["total"] == 0
    assert records["launch/eager"]["unit"] == "us" and records["launch/sync"]["status"] == "ok"
    assert records["conv/fp32/nchw/fwd/layer4.1.conv2/n2"]["status"] == "ok"
    assert records["transfer/h2d/pageable/16MiB"]["status"] == "ok"
    pinned = records["transfer/h2d/pinned/16MiB"]
    assert pinned["status"] == "skipped" and "pinned host memory" in pinned["error"]


def test_bench_models_on_ocl_counts_fallbacks_and_skips_variants(tmp_path):
    out = tmp_path / "models.jsonl"
    done = fade_cli("bench", "models", "--device", "ocl", "--quick", "--mode", "train", "--models",
                    "plug_workloads:mlp,plug_workloads:cumsum_net", "--variants", "fp32,tf32,compile", "-o", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {record["case_id"]: record for record in map(json.loads, out.read_text().splitlines())}
    cumsum = records["models/plug_workloads:cumsum_net/train/fp32/b2"]
    assert cumsum["status"] == "ok" and cumsum["extra"]["ocl_fallbacks"]["ops"]["aten::cumsum.out"] > 0
    timed = cumsum["extra"]["ocl_fallbacks_timed"]  # every timed step falls back once: at least one per sample
    assert 0 < timed["ops"]["aten::cumsum.out"] <= cumsum["extra"]["ocl_fallbacks"]["ops"]["aten::cumsum.out"]
    assert records["models/plug_workloads:mlp/train/fp32/b2"]["status"] == "ok"
    assert "tf32" in records["models/plug_workloads:mlp/train/tf32/b2"]["error"]
    compiled = records["models/plug_workloads:mlp/train/compile/b2"]  # compile on ocl: fade.ocl's graph mode
    assert compiled["status"] == "ok" and compiled["extra"]["ocl_fallbacks"]["total"] == 0
    graph_cumsum = records["models/plug_workloads:cumsum_net/train/compile/b2"]  # a graph node run eagerly, counted
    assert graph_cumsum["status"] == "ok" and graph_cumsum["extra"]["ocl_fallbacks"]["ops"]["graph:aten::cumsum"] > 0


def test_watch_on_ocl_reports_the_fallback_line(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(TINY_SCRIPT)
    report = tmp_path / "watch.json"
    done = fade_cli("watch", "--device", "ocl", "--quiet", "--json", str(report), "--", "python", str(script))
    assert done.returncode == 0 and done.stdout.strip() == "150.0", done.stderr[-3000:]
    sites = [record for record in json.loads(report.read_text())["records"] if record["kind"] == "backend_fallback"]
    assert [site["line"] for site in sites] == [3] and "aten::cumsum" in sites[0]["ops"]
