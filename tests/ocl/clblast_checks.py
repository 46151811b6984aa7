"""CLBlast tuning on whatever OpenCL device is present (PoCL in CI); run by test_ocl_clblast.py in a child process.
Each parameter override builds CLBlast's GEMM program anew (about 7 s on PoCL on 2 cores, then PoCL's kernel cache
has it), so the checks share one 64x64x64 shape and two configurations."""

import json
import os
import subprocess
import sys

import numpy
import pytest
import torch

import fade.ocl as ocl
from fade.act.tune import cache as tune_cache
from fade.ocl import runtime, tuning

ocl.register()
SHAPE = tuning.GemmShape(64, 64, 64)
INDIRECT = {"GemmRoutine": {"XGEMM_MIN_INDIRECT_SIZE": 1}}  # every GEMM through the Xgemm kernel
LEGAL = {"GEMMK": 0, "KREG": 1, "KWG": 16, "KWI": 2, "MDIMA": 8, "MDIMC": 8, "MWG": 16, "NDIMB": 8, "NDIMC": 8,
         "NWG": 16, "SA": 0, "SB": 0, "STRM": 0, "STRN": 0, "VWM": 1, "VWN": 1}
ILLEGAL = {**LEGAL, "MDIMC": 32, "MDIMA": 32}  # MWG 16 is not a multiple of MDIMC 32 * VWM 1


@pytest.fixture(scope="module")
def dev():
    return runtime.device(0)


@pytest.fixture(scope="module")
def bench_and_default(dev):
    bench = tuning.ShapeBench(dev)
    return bench, bench.measure(SHAPE)["sample"]


def test_an_override_reaches_the_kernel_an_illegal_one_breaks_it_and_the_checker_rejects_it(dev, bench_and_default):
    """Bypassing the checker, the illegal configuration is built and runs: its wrong C proves CLBlast uses the
    overridden parameters; the legal one, applied next, gives the default's C again."""
    bench, default = bench_and_default
    assert tuning.violations("Xgemm", ILLEGAL, **tuning.device_limits(dev))
    tuning.apply(dev, {**INDIRECT, "Xgemm": ILLEGAL})
    try:
        broken = tuning.relative_difference(numpy, bench.measure(SHAPE, 1)["sample"], default)
    except runtime.OclError:
        broken = float("inf")  # a CLBlast error is the override at work too
    assert broken > tuning.GEMM_RTOL
    tuning.apply(dev, {"Xgemm": LEGAL})
    assert tuning.relative_difference(numpy, bench.measure(SHAPE, 1)["sample"],
                                      default) <= tuning.GEMM_RTOL


def test_persisted_parameters_round_trip_and_apply_on_this_device(dev, bench_and_default, tmp_path):
    bench, default = bench_and_default
    fingerprint = tuning.fingerprint(dev)
    assert fingerprint["name"] == dev.info.name and "libclblast" in fingerprint["driver"]
    tuning.persist(tune_cache.open_cache(fingerprint, base=tmp_path), fingerprint, {**INDIRECT, "Xgemm": LEGAL}, {})
    report = tuning.apply_persisted(dev, environ={}, cache_base=tmp_path)
    assert report["applied"] and report["kernels"] == ["GemmRoutine", "Xgemm"], report
    record = tuning.read_persisted(tune_cache.open_cache(fingerprint, base=tmp_path))
    assert record["parameters"]["Xgemm"] == LEGAL
    result = tuning.measure_shapes(dev, [SHAPE], bench, {SHAPE: default}, repeats=1)
    assert result["worst_rel_diff"] <= tuning.GEMM_RTOL and result["rows"][0]["gflops"] > 0


def test_parameters_the_tuner_persisted_apply_in_a_process_that_never_imports_it(dev, tmp_path):
    """The tuner writes clblast.json through its cache (fade.act.tune.cache); a fresh process that imports only
    fade.ocl, as a bench worker or a user's script does, applies it when the device opens (fade.ocl reads it through
    fade.device_cache, and imports nothing of fade.act)."""
    fingerprint = tuning.fingerprint(dev)
    tuning.persist(tune_cache.open_cache(fingerprint, base=tmp_path / "fade" / "tune"), fingerprint,
                   {**INDIRECT, "Xgemm": LEGAL}, {})
    script = ("import json, sys, torch, fade.ocl as ocl\n"
              "ocl.register()\n"
              "torch.ones(2, device='ocl:0')\n"
              "print(json.dumps({'tuning': ocl.clblast_tuning(0),\n"
              "                  'act': sorted(m for m in sys.modules if m.startswith('fade.act'))}))\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                           env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path), FADE_OCL_CLBLAST_TUNED="1"))
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout.splitlines()[-1])
    assert seen["act"] == []
    assert seen["tuning"]["applied"] and seen["tuning"]["kernels"] == ["GemmRoutine", "Xgemm"], seen
    assert seen["tuning"]["cache"].startswith(str(tmp_path / "fade" / "tune"))


def test_the_recorder_captures_a_tiny_models_step_and_nothing_outside():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("ocl:0")
    x = torch.randn(5, 8).to("ocl:0")
    with runtime.record_gemms() as calls:
        model(x).square().sum().backward()
    model(x)  # outside the block: not recorded
    shapes = {(s.m, s.n, s.k, s.trans_a, s.trans_b) for s in tuning.shapes_from_calls(calls)}
    # forward x W1^T, h W2^T; backward dh = dy W2, dW2 = dy^T h, dW1 = dh^T x
    assert shapes == {(5, 16, 8, False, True), (5, 4, 16, False, True), (5, 16, 4, False, False),
                      (4, 16, 5, True, False), (16, 8, 5, True, False)}
    assert len(calls) == 5 and ocl.clblast_tuning(0)["reason"]


def test_device_data_matches_the_host_copy_and_a_checked_gemm(dev):
    """The hashed A and B on the device equal uniform_host's; C's sampled elements equal a float64 host GEMM."""
    shape = tuning.GemmShape(33, 20, 17, trans_a=True, batch=2)
    bench = tuning.ShapeBench(dev)
    a, b, c = bench._buffers(shape)
    seed_a, seed_b = tuning.operand_seeds(shape)
    device_a = numpy.empty(33 * 17 * 2, numpy.float32)
    dev.cl.enqueue_copy(dev.queue, device_a, a)
    assert numpy.array_equal(device_a, tuning.uniform_host(numpy, seed_a, device_a.size))
    assert numpy.all(device_a != 0) and -1 <= device_a.min() and device_a.max() < 1
    host_a = device_a.astype(numpy.float64).reshape(2, 17, 33).transpose(0, 2, 1)
    host_b = tuning.uniform_host(numpy, seed_b, 17 * 20 * 2).astype(numpy.float64).reshape(2, 17, 20)
    expected = (host_a @ host_b).reshape(-1)
    sample = bench.measure(shape, 1)["sample"]
    stride, _ = tuning.sample_positions(expected.size)
    assert tuning.relative_difference(numpy, sample, numpy.concatenate([expected[::stride], expected[-1:]])) < 1e-5
