"""layer_norm, softmax and a sum reduction over the last dimension, as memory bandwidth (GB/s).

Bytes per call are the minimum traffic: the input read once and the output written once (layer_norm
also reads its weight and bias). Real kernels may read twice; the % of peak then shows it.
"""

from __future__ import annotations

from fade.measure.case import CaseResult, bandwidth_result, random_tensor
from fade.measure.timing import measure


def norm(ctx, *, op: str, rows: int, cols: int, dtype: str) -> CaseResult:
    import torch
    import torch.nn.functional as F

    x = random_tensor((rows, cols), dtype, ctx.device)
    size = x.element_size()
    if op == "layer_norm":
        weight = random_tensor((cols,), dtype, ctx.device, seed=1)
        bias = random_tensor((cols,), dtype, ctx.device, seed=2)
        call = lambda: F.layer_norm(x, (cols,), weight, bias)  # noqa: E731
        moved = 2 * rows * cols * size + 2 * cols * size
    elif op == "softmax":
        call = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        moved = 2 * rows * cols * size
    elif op == "sum":
        call = lambda: x.sum(dim=-1)  # noqa: E731
        moved = rows * cols * size + rows * size
    else:
        raise ValueError(f"unknown op {op!r}")
    timing = measure(call, device=ctx.device, **ctx.timing)
    return bandwidth_result(timing, moved, "bytes / median_s / 1e9 (bytes = input read once + output written once)")
