"""`fade profile MODEL --device ocl:0` on PoCL: the summary carries the per-kernel table from OpenCL profiling
events (issue 19's "where the gap is, kernel by kernel"), and the console shows it. Runs the CLI in a child
process (PrivateUse1 can be named once per process); skips without an OpenCL device."""

import json
import subprocess
import sys

import pytest

from .child import ROOT, child_environment, why_no_device


def test_fade_profile_on_ocl_reports_opencl_kernels_per_step(tmp_path):
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    summary = tmp_path / "summary.json"
    child = subprocess.run(
        [sys.executable, "-m", "fade", "profile", "resnet18", "--device", "ocl:0", "--mode", "train", "--batch", "2",
         "--size", "32", "--quick", "--wait", "1", "--warmup", "0", "--steps", "2", "--no-overhead",
         "-o", str(tmp_path / "out"), "--json", str(summary)],
        capture_output=True, text=True, env=child_environment(), timeout=280, cwd=ROOT)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    opencl = json.loads(summary.read_text())["opencl"]
    assert opencl["steps"] == 2 and opencl["device"].startswith("ocl:0")
    kernels = {row["kernel"]: row for row in opencl["by_kernel"]}
    # a training step of a CNN: convolutions as im2col + CLBlast GEMMs, fused batch norm, the optimizer
    assert {"im2col", "bn_partials", "bn_apply"} <= set(kernels) and any(k.startswith("Sgemm") for k in kernels)
    assert 0 < opencl["device_ms"] <= opencl["wall_ms"] and 0 <= opencl["host_bound"] < 1
    assert abs(sum(row["share"] for row in opencl["by_kernel"]) - 1) < 1e-6
    assert kernels["bn_apply"]["calls"] == 20  # per step: resnet18's 20 batch norms, one apply each
    assert "OpenCL kernels (profiling events, per step)" in child.stdout + child.stderr
