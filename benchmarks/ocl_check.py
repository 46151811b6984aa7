"""GPU smoke check of fade.ocl on the device machine: OpenCL devices, CLBlast SGEMM against torch CUDA fp32
(TF32 off) with a correctness check, and a small MLP trained a few steps on ocl against the CPU (and CUDA).

    python benchmarks/ocl_check.py OUT                          # on the GPU machine (NVIDIA ICD registered)
    python benchmarks/ocl_check.py /tmp/ocl-smoke --smoke       # CPU smoke run on PoCL: 256^3, 2 steps

Method: SGEMM C = A @ B, fp32, row-major, n x n x n (default 4096), A and B from torch.randn with seed 0. The
ocl side calls CLBlast's CLBlastSgemm on buffers fade.ocl allocated, through `torch.mm` on ocl tensors (the
path a model takes); the CUDA side is torch.mm with torch.backends.cuda.matmul.allow_tf32 = False and
float32_matmul_precision "highest". Both are timed by fade.measure.timing.measure (warm-up, blocks, settle,
median and IQR; ocl syncs with clFinish through torch.ocl.synchronize, CUDA with events). TFLOP/s =
2 n^3 / median. Correctness: max |C_ocl - C_ref| / max |C_ref| with C_ref the CUDA fp32 result (or the CPU's
when there is no CUDA); bar 1e-4. The MLP (12 -> 64 -> 64 -> 5, GELU/Tanh, SGD momentum, cross-entropy,
batch 64) trains STEPS steps from the same seed on cpu, ocl and cuda; losses must match the CPU within 1e-4
relative, with zero CPU fallbacks on ocl.

Writes into OUT: devices.json (fade.ocl.devices()), results.json (every figure above, per-side timing
samples, losses, fallback counts, pass/fail per check). Exit code 0 when every check passed, 1 otherwise,
2 on bad input (OUT not writable, no OpenCL device).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import torch

from fade import __version__
from fade.files import atomic_write_text
from fade.measure.timing import measure

GEMM_REL_TOL = 1e-4
LOSS_REL_TOL = 1e-4


def _timing(t) -> dict:
    return {"median_s": t.median_s, "iqr_s": t.iqr_s, "n": t.n, "method": t.method, "stop_reason": t.stop_reason,
            "samples_s": list(t.samples_s)}


def gemm_check(n: int, budget_s: float) -> dict:
    torch.manual_seed(0)
    a, b = torch.randn(n, n), torch.randn(n, n)
    result: dict = {"n": n, "flop": 2 * n ** 3}
    da, db = a.to("ocl:0"), b.to("ocl:0")
    c_ocl = torch.mm(da, db).cpu()
    ocl_t = measure(lambda: torch.mm(da, db), device="ocl:0", budget_s=budget_s)
    result["ocl"] = dict(_timing(ocl_t), tflops=2 * n ** 3 / ocl_t.median_s / 1e12)
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        ca, cb = a.cuda(), b.cuda()
        reference = torch.mm(ca, cb).cpu()
        cuda_t = measure(lambda: torch.mm(ca, cb), device="cuda", budget_s=budget_s)
        result["cuda_fp32_tf32_off"] = dict(_timing(cuda_t), tflops=2 * n ** 3 / cuda_t.median_s / 1e12)
        result["ocl_pct_of_cuda"] = 100 * cuda_t.median_s / ocl_t.median_s
        result["reference"] = "cuda fp32 (TF32 off)"
    else:
        reference = a.double() @ b.double()
        result["reference"] = "cpu fp64"
    error = ((c_ocl.double() - reference.double()).abs().max() / reference.double().abs().max()).item()
    result["max_rel_error"] = error
    result["correct"] = error <= GEMM_REL_TOL
    return result


def _mlp_losses(device: str, steps: int) -> list[float]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 5)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=False)
    torch.manual_seed(2)
    inputs, targets = torch.randn(64, 12).to(device), torch.randint(0, 5, (64,)).to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def mlp_check(steps: int, cuda_losses=None) -> dict:
    import fade.ocl as ocl

    cpu = _mlp_losses("cpu", steps)
    ocl.reset_fallback_counts()
    started = time.perf_counter()
    on_ocl = _mlp_losses("ocl:0", steps)
    result = {"steps": steps, "cpu": cpu, "ocl": on_ocl, "ocl_wall_s": time.perf_counter() - started,
              "ocl_fallbacks": ocl.fallback_counts()}
    if cuda_losses is not None:
        result["cuda"] = cuda_losses
    worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(on_ocl, cpu))
    result["max_rel_loss_diff_vs_cpu"] = worst
    result["ok"] = worst <= LOSS_REL_TOL and not result["ocl_fallbacks"]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--budget", type=float, default=10.0, help="timing budget per side, seconds")
    parser.add_argument("--smoke", action="store_true", help="256^3 GEMM, 2 MLP steps, 2 s budgets")
    args = parser.parse_args(argv)
    if args.smoke:
        args.size, args.steps, args.budget = 256, 2, 2.0
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        probe = args.out / ".ocl_check_write_test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        print(f"ocl_check: cannot write to {args.out}: {error}", file=sys.stderr)
        return 2
    import fade.ocl as ocl

    # CUDA's losses first: once a Python PrivateUse1 backend is registered, a CUDA backward in the same
    # process trips autograd's stream assert (engine.cpp "opt_ready_stream && opt_parent_stream", torch
    # 2.11 on the H100; docs/ocl.md, known limits).
    cuda_losses = _mlp_losses("cuda", args.steps) if torch.cuda.is_available() else None
    try:
        ocl.register()
        devices = [dataclasses.asdict(d) for d in ocl.devices()]
    except ocl.OclError as error:
        print(f"ocl_check: {error}", file=sys.stderr)
        return 2
    atomic_write_text(args.out / "devices.json", json.dumps(devices, indent=2) + "\n")
    started = time.perf_counter()
    results = {"fade_version": __version__, "torch": torch.__version__, "python": platform.python_version(),
               "ocl_device": devices[0], "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available()
               else None, "gemm": gemm_check(args.size, args.budget), "mlp": mlp_check(args.steps, cuda_losses)}
    results["wall_s"] = time.perf_counter() - started
    results["passed"] = results["gemm"]["correct"] and results["mlp"]["ok"]
    atomic_write_text(args.out / "results.json", json.dumps(results, indent=2) + "\n")
    gemm = results["gemm"]
    line = f"SGEMM {args.size}^3 ocl {gemm['ocl']['tflops']:.2f} TFLOP/s"
    if "cuda_fp32_tf32_off" in gemm:
        line += f", cuda fp32 {gemm['cuda_fp32_tf32_off']['tflops']:.2f} ({gemm['ocl_pct_of_cuda']:.0f}%)"
    print(f"{devices[0]['name']}: {line}, rel err {gemm['max_rel_error']:.1e}; MLP {args.steps} steps "
          f"max rel diff {results['mlp']['max_rel_loss_diff_vs_cpu']:.1e}, fallbacks "
          f"{sum(results['mlp']['ocl_fallbacks'].values())}; {'PASS' if results['passed'] else 'FAIL'}")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
