"""GEMM throughput per dtype (TFLOP/s = 2*m*n*k / median_s / 1e12), and the same GEMM on the CPU against the GPU."""

from __future__ import annotations

from fade.measure.case import CaseResult, random_tensor, tflops_result
from fade.measure.step.conditions import fp32_math_for_dtype, pinned_fp32_math
from fade.measure.timing import measure

GEMM_FORMULA = "2*m*n*k / median_s / 1e12"


def gemm(ctx, *, m: int, n: int, k: int, dtype: str, shape: str = "square") -> CaseResult:
    """C[m,n] = A[m,k] @ B[k,n] with torch.matmul; fp8 through torch._scaled_mm with unit scales, bf16 out."""
    with pinned_fp32_math(dtype):
        call = _gemm_call(m, n, k, dtype, ctx.device)
        timing = measure(call, device=ctx.device, **ctx.timing)
    return tflops_result(timing, 2 * m * n * k, GEMM_FORMULA, dtype, {"fp32_math": fp32_math_for_dtype(dtype), "shape": shape})


def cpu_vs_gpu(ctx, *, n: int, dtype: str = "fp32") -> CaseResult:
    """The same n^3 GEMM on the CPU and on the GPU, both warm; value = CPU time / GPU time."""
    import torch

    with pinned_fp32_math(dtype):
        gpu_timing = measure(_gemm_call(n, n, n, dtype, ctx.device), device=ctx.device, **ctx.timing)
        cpu_timing = measure(_gemm_call(n, n, n, dtype, "cpu"), device="cpu", **ctx.timing)
    flops = 2 * n * n * n

    def side(timing) -> dict:
        return {
            "tflops": flops / timing.median_s / 1e12,
            "median_s": timing.median_s,
            "cov": timing.cov,
            "n": timing.n,
            "noisy": timing.noisy,
        }

    return CaseResult(
        value=cpu_timing.median_s / gpu_timing.median_s,
        unit="x",
        formula="cpu.median_s / gpu.median_s (speed-up of the GPU over the CPU; stats are the GPU's)",
        timing=gpu_timing,
        work={"flops": flops},
        extra={
            "cpu": {**side(cpu_timing), "threads": torch.get_num_threads(), "timing": cpu_timing.to_dict()},
            "gpu": side(gpu_timing),
            "fp32_math": fp32_math_for_dtype(dtype),
        },
    )


def _gemm_call(m: int, n: int, k: int, dtype: str, device: str):
    import torch

    if dtype == "fp8":
        a = random_tensor((m, k), "fp8", device)
        b = random_tensor((n, k), "fp8", device, seed=1).t()  # _scaled_mm wants B column-major
        scale = torch.tensor(1.0, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    a = random_tensor((m, k), dtype, device)
    b = random_tensor((k, n), dtype, device, seed=1)
    return lambda: torch.matmul(a, b)
