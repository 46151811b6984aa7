"""2-D convolution forward, backward-data and backward-weight on ResNet-50 layer shapes (TFLOP/s).

Each direction is its own case, so a slow backward-weight (where the MI300 regression lived) shows per
shape. The backward passes call aten.convolution_backward with one output selected, the op autograd
uses. FLOPs per direction = 2*N*K*C*R*S*Ho*Wo (MIOpenDriver's flopCnt; groups = 1 here). fp32 runs with
fp32 math pinned to "ieee": torch lets cuDNN use TF32 for fp32 convolutions by default, which would put
an "fp32" figure above the fp32 peak.
"""

from __future__ import annotations

from fade.measure.case import CaseResult, random_tensor, tflops_result
from fade.measure.step.conditions import fp32_math_for_dtype, pinned_fp32_math
from fade.measure.timing import measure

CONV_FORMULA = "2*N*K*C*R*S*Ho*Wo / median_s / 1e12"


def conv(
    ctx,
    *,
    layer: str,
    n: int,
    c: int,
    h: int,
    w: int,
    k: int,
    r: int,
    s: int,
    stride: int,
    padding: int,
    dtype: str,
    layout: str,
    direction: str,
) -> CaseResult:
    import torch
    import torch.nn.functional as F

    out_h = (h + 2 * padding - r) // stride + 1
    out_w = (w + 2 * padding - s) // stride + 1
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = random_tensor((n, c, h, w), dtype, ctx.device).contiguous(memory_format=memory_format)
    weight = random_tensor((k, c, r, s), dtype, ctx.device, seed=1).contiguous(memory_format=memory_format)
    grad_out = random_tensor((n, k, out_h, out_w), dtype, ctx.device, seed=2).contiguous(memory_format=memory_format)
    conv_args = ([stride, stride], [padding, padding], [1, 1], False, [0, 0], 1)
    if direction == "fwd":
        call = lambda: F.conv2d(x, weight, stride=stride, padding=padding)  # noqa: E731
    elif direction == "bwd_data":
        call = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
            grad_out, x, weight, None, *conv_args, [True, False, False]
        )
    elif direction == "bwd_weight":
        call = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
            grad_out, x, weight, None, *conv_args, [False, True, False]
        )
    else:
        raise ValueError(f"unknown direction {direction!r}")
    with pinned_fp32_math(dtype):
        timing = measure(call, device=ctx.device, **ctx.timing)
    flops = 2 * n * k * c * r * s * out_h * out_w
    return tflops_result(timing, flops, CONV_FORMULA, dtype,
                         {"layer": layer, "output_hw": [out_h, out_w], "fp32_math": fp32_math_for_dtype(dtype)})  # fmt: skip
