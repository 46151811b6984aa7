"""Device memory bandwidth (STREAM copy/scale/add/triad), host<->device transfers, and kernel launch latency.

Bytes are counted as read + written per call (STREAM's convention, and rocm_bandwidth_test's for a
same-device copy): copy and scale touch 2 arrays, add and triad 3. GB = 1e9 bytes. A transfer counts its
payload once. Sizes above the last-level cache are cold by construction; smaller ones show cache and
launch effects, which is what the bandwidth-vs-size curve is for.
"""

from __future__ import annotations

from fade.measure.case import CaseResult, CaseSkipped, bandwidth_result, random_tensor, synchronize
from fade.measure.timing import measure

STREAM_ARRAYS_TOUCHED = {"copy": 2, "scale": 2, "add": 3, "triad": 3}  # arrays read + written per call
STREAM_SCALAR = 3.0  # STREAM's q
BANDWIDTH_FORMULA = "bytes / median_s / 1e9"


def stream(ctx, *, op: str, elements: int, dtype: str = "fp32") -> CaseResult:
    """One STREAM kernel over `elements`-long arrays, each a single torch op (no temporaries)."""
    import torch

    a = random_tensor((elements,), dtype, ctx.device)
    b = random_tensor((elements,), dtype, ctx.device, seed=1)
    c = random_tensor((elements,), dtype, ctx.device, seed=2)
    calls = {
        "copy": lambda: b.copy_(a),  # b = a
        "scale": lambda: torch.mul(a, STREAM_SCALAR, out=b),  # b = q*a
        "add": lambda: torch.add(a, b, out=c),  # c = a + b
        "triad": lambda: torch.add(b, c, alpha=STREAM_SCALAR, out=a),  # a = b + q*c
    }
    timing = measure(calls[op], device=ctx.device, **ctx.timing)
    moved = STREAM_ARRAYS_TOUCHED[op] * elements * a.element_size()
    return bandwidth_result(timing, moved, BANDWIDTH_FORMULA + " (bytes = arrays read + written x array bytes)",
                            {"array_bytes": elements * a.element_size()})  # fmt: skip


def transfer(ctx, *, direction: str, memory: str, nbytes: int) -> CaseResult:
    """Host->device ("h2d") or device->host ("d2h") copy from/to pinned or pageable host memory."""
    import torch

    elements = nbytes // 4
    pinned = memory == "pinned"
    device_tensor = random_tensor((elements,), "fp32", ctx.device)
    host_tensor = random_tensor((elements,), "fp32", "cpu")
    if pinned:
        try:
            host_tensor = host_tensor.pin_memory()
        except (RuntimeError, NotImplementedError) as error:  # fade.ocl has no page-locked host allocator
            raise CaseSkipped(f"pinned host memory is not available for {ctx.device}: "
                              f"{str(error).splitlines()[0][:200]}") from None
    if direction == "h2d":
        call = lambda: device_tensor.copy_(host_tensor, non_blocking=pinned)  # noqa: E731
    else:
        call = lambda: host_tensor.copy_(device_tensor, non_blocking=pinned)  # noqa: E731
    timing = measure(call, device=ctx.device, **ctx.timing)
    moved = elements * 4
    return CaseResult(
        value=moved / timing.median_s / 1e9,
        unit="GB/s",
        formula=BANDWIDTH_FORMULA + " (bytes = payload, counted once)",
        timing=timing,
        work={"bytes": moved},
        extra={"non_blocking": pinned, "torch_pinned": bool(host_tensor.is_pinned()) if pinned else False},
    )


def launch(ctx, *, mode: str) -> CaseResult:
    """Cost of launching a one-element in-place add.

    eager: back-to-back launches, per call (the host's launch rate); graph: the same kernel replayed
    from a CUDA graph (device-side cost per kernel); sync: launch plus synchronize, host-timed per call
    (the round trip a host waits for a single small kernel).
    """
    x = random_tensor((1,), "fp32", ctx.device)
    tiny_add = lambda: x.add_(1e-6)  # noqa: E731
    if mode == "eager":
        timing = measure(tiny_add, device=ctx.device, **ctx.timing)
    elif mode == "graph":
        timing = measure(tiny_add, device=ctx.device, cuda_graph=True, **ctx.timing)
    elif mode == "sync":

        def launch_and_wait() -> None:
            tiny_add()
            synchronize(ctx.device)  # sync point: part of what this case measures

        # host clock: the call synchronizes itself, so "cpu" timing is the right stopwatch here
        timing = measure(launch_and_wait, device="cpu", **ctx.timing)
    else:
        raise ValueError(f"unknown launch mode {mode!r}")
    return CaseResult(
        value=timing.median_s * 1e6,
        unit="us",
        formula="median_s * 1e6 (microseconds per launch)",
        timing=timing,
        extra={"mode": mode},
    )
