"""The doctor's quick measurements: GEMM per dtype, a device copy, and a numerical GEMM self-test.

A few seconds per device, so `fade doctor` can say "this GPU reaches N% of its peak" and "it computes
right". Method: random inputs (never zeros), warm-up calls first (the first BLAS call in a process loads
kernels: rocBLAS#1270, so a cold call would be 10-100× slower), then the median of timed calls with
device events (CPU: perf_counter). Full-strength timing lives in `fade bench`; this is the triage view.
Runs in a child process (`python -m fade.measure.suites.quick`) so a crashing or hanging driver cannot take
the doctor down.

Self-test (amd-pitfalls I-22): rocBLAS on gfx1201 returned wrong fp32 results once the grid's y
dimension passed 65536, i.e. only for very tall matrices. So the test multiplies a tall M×K matrix by
K×N on the device and compares sampled rows (first, last and random ones: the last rows are where a
grid overflow shows) against float64 on the CPU.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

QUICK_TIMEOUT_S = 120.0
# Sizes that fill an H100-class GPU (8192³ bf16 ≈ 1.4 ms) yet keep the whole run a few seconds.
GPU_GEMM = {"fp32": 4096, "fp16": 8192, "bf16": 8192}
CPU_GEMM = {"fp32": 1024, "bf16": 512}
GPU_COPY_BYTES = 1 << 30  # far beyond any L2 (H100 50 MB, MI300X 256 MB Infinity Cache)
CPU_COPY_BYTES = 1 << 27
SELFTEST_ROWS = {"gpu": 1 << 20, "cpu": 1 << 16}  # tall enough to cross 65536-row grid limits
SELFTEST_K, SELFTEST_N = 256, 64
SELFTEST_RTOL = 1e-3  # fp32 (no TF32) with K=256 lands ~1e-6; a broken kernel is off by O(1)
WARMUP_CALLS, TIMED_CALLS = 3, 10


def _timer(torch, device):
    if device.type == "cuda":
        def run(fn, calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            samples = []
            for _ in range(calls):
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            return samples
    else:
        def run(fn, calls):
            samples = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
            return samples
    return run


def _stats(samples: list[float], work: float, unit_scale: float) -> dict:
    """Throughput from the median time; spread as min/max throughput over the timed calls."""
    median = statistics.median(samples)
    return {"value": work / median / unit_scale, "median_s": median, "samples": len(samples),
            "min": work / max(samples) / unit_scale, "max": work / min(samples) / unit_scale}


def measure_device(device_name: str) -> dict:
    """GEMM per dtype, a device copy and the self-test on one device, with fp32 math pinned to IEEE ("fp32"
    means fp32 here; TF32 is a separate figure) and restored after; `fp32_flags` records what was in effect."""
    from fade.measure.step.conditions import pinned_flags

    with pinned_flags("ieee", "ieee") as in_effect:
        out = _measure_pinned(device_name)
    out["fp32_flags"] = in_effect
    return out


def _measure_pinned(device_name: str) -> dict:
    import torch

    device = torch.device(device_name)
    on_gpu = device.type != "cpu"
    timed = _timer(torch, device)
    # random data is made where it is used: 8192² randn on a CPU core alone takes ~0.5 s
    gen = torch.Generator(device=device).manual_seed(0)
    out = {"device": device_name, "gemm": {}, "copy": None, "selftest": None}
    sizes = GPU_GEMM if on_gpu else CPU_GEMM
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for name, n in sizes.items():
        a = torch.randn(n, n, generator=gen, device=device).to(dtypes[name])
        b = torch.randn(n, n, generator=gen, device=device).to(dtypes[name])
        timed(lambda: torch.mm(a, b), WARMUP_CALLS)
        out["gemm"][name] = {"n": n, **_stats(timed(lambda: torch.mm(a, b), TIMED_CALLS), 2 * n**3, 1e12)}
        del a, b
    nbytes = GPU_COPY_BYTES if on_gpu else CPU_COPY_BYTES
    src = torch.rand(nbytes // 4, device=device, generator=gen)
    dst = torch.empty_like(src)
    timed(lambda: dst.copy_(src), WARMUP_CALLS)
    out["copy"] = {"bytes": nbytes, **_stats(timed(lambda: dst.copy_(src), TIMED_CALLS), 2 * nbytes, 1e9)}
    del src, dst
    out["selftest"] = selftest(torch, device, SELFTEST_ROWS["gpu" if on_gpu else "cpu"], gen)
    if on_gpu:
        torch.cuda.empty_cache()
    return out


def selftest(torch, device, rows: int, gen) -> dict:
    a = torch.randn(rows, SELFTEST_K, generator=gen, device=device)
    b = torch.randn(SELFTEST_K, SELFTEST_N, generator=gen, device=device)
    c = torch.full((rows, SELFTEST_N), float("nan"), device=device)  # poisoned: unwritten rows show up
    torch.mm(a, b, out=c)
    picks = torch.cat([torch.arange(0, 512, device=device), torch.arange(rows - 512, rows, device=device),
                       torch.randint(0, rows, (1024,), generator=gen, device=device)])
    got = c[picks].double().cpu()
    ref = a[picks].double().cpu() @ b.double().cpu()  # only the checked rows go to the CPU
    picks = picks.cpu()
    row_err = ((got - ref).norm(dim=1) / ref.norm(dim=1)).nan_to_num(nan=float("inf"))
    bad = picks[row_err > SELFTEST_RTOL]
    max_err = float(row_err.max())
    return {"rows": rows, "k": SELFTEST_K, "n": SELFTEST_N, "checked_rows": len(picks),
            "max_rel_err": max_err if max_err != float("inf") else "inf", "ok": len(bad) == 0,
            "bad_rows": sorted(set(int(r) for r in bad[:8]))}


def measure_all(devices: list[str] | None = None) -> dict:
    import torch

    if devices is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        devices = [f"cuda:{i}" for i in range(count)] or ["cpu"]
    results = {}
    for name in devices:
        try:
            results[name] = measure_device(name)
        except Exception as exc:  # noqa: BLE001 - one device failing must not hide the others
            results[name] = {"device": name, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return {"devices": results}


def run_quick_subprocess(devices: list[str] | None = None, timeout_s: float = QUICK_TIMEOUT_S,
                         with_probe: bool = False) -> dict:
    """Run the measurements in a child process; a crash or hang becomes an `error` entry.

    with_probe: the same child first probes torch (result under "torch"), so the doctor imports
    torch and starts the GPU runtime once instead of twice.
    """
    argv = [sys.executable, "-m", "fade.measure.suites.quick", *(["--probe"] if with_probe else []), *(devices or [])]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        stdout, failure = proc.stdout, None
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            failure = f"quick measurements died (exit {proc.returncode}): {tail}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        failure = f"quick measurements timed out after {timeout_s:g} s"
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    result = results[-1] if results else {}
    if failure or "devices" not in result:
        result = {**result, "devices": result.get("devices", {}), "error": failure or "no result printed"}
    return result


def main(argv: list[str]) -> dict:
    result = {}
    if argv[:1] == ["--probe"]:
        from fade.collect.torch_probe import probe_torch

        argv = argv[1:]
        result["torch"] = probe_torch()
        print(json.dumps(result), flush=True)  # the probe survives even if a measurement kills us
    result.update(measure_all(argv or None))
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
