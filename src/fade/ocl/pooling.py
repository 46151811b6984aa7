"""Pooling over 2-D maps: max pooling with indices, adaptive average and max pooling and average pooling, each
with its backward as a gather over the outputs that read an input element (no atomics).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty
from fade.ocl.meta import base_name, meta_result_of
from fade.ocl.pointwise import contiguous, finish, pointwise
from fade.ocl.sources import cl_type, compiled_source, load, NoKernel

aten = torch.ops.aten


_POOL_SOURCE = load("max_pool.cl")


# the backward with its geometry compiled in (one program per pooling shape): its divisions by constants
# become multiplications, indices 32-bit where they fit (with 64-bit divisions at run time, vgg16's five pooling
# backwards took 4.9 ms of its training step on the H100)
_POOL_BACKWARD_SOURCE = load("max_pool_backward.cl")


def _pair(value, default=None) -> tuple:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    return (value[0], value[-1]) if isinstance(value, (list, tuple)) else (value, value)


def max_pool(op, args, kwargs, bound):
    """max_pool2d with indices and its backward: one work item per output (a plain loop over the window, so NaN
    ends nothing early and hangs nothing; as on the CPU the last NaN of a window wins); the backward one per input
    element, gathering from the outputs that chose it (no atomics)."""
    x = bound["self"]
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64):
        raise NoKernel("max pool beyond 2-D float")
    meta_result = meta_result_of(op, args, kwargs)
    x = contiguous(x)
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    kh, kw = _pair(bound["kernel_size"])
    sh, sw = _pair(bound["stride"], (kh, kw))
    ph, pw = _pair(bound["padding"])
    dh, dw = _pair(bound["dilation"])
    dev = device_of(x)
    source = f"#define T {cl_type(x.dtype)}\n" + _POOL_SOURCE
    if base_name(op) == "max_pool2d_with_indices":
        shape = list(meta_result[0].shape)  # contiguous, as the kernel writes them (the meta result of a
        # channels-last input is channels-last: its strides had scrambled the outputs)
        out = empty(shape, contiguous_strides(shape), x.dtype, x.device.index)
        index = empty(shape, contiguous_strides(shape), torch.int64, x.device.index)
        oh, ow = out.shape[-2:]
        if out.numel():
            dev.launch(dev.kernel("max_pool2d", source), (out.numel(),), None,
                block_of(x).buffer, np.int64(x.storage_offset()), block_of(out).buffer,
                block_of(index).buffer, *[np.int64(v) for v in (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)])
        return finish(op, bound, (out, index))
    grad, index = contiguous(bound["grad_output"]), contiguous(bound["indices"])
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        oh, ow = grad.shape[-2:]
        if grad.numel():
            geometry = (planes, h, w, oh, ow, sh, sw, ph, pw, (kh - 1) * dh, (kw - 1) * dw)
            fits = max(planes * h * w, planes * oh * ow) < 2**31
            backward = compiled_source(
                _POOL_BACKWARD_SOURCE, (f"T {cl_type(x.dtype)}", f"IDX {'int' if fits else 'long'}"),
                ("PLANES", "H", "W", "OH", "OW", "SH", "SW", "PH", "PW", "EH", "EW"), geometry, not fits)
            dev.launch(dev.kernel("max_pool2d_backward_c", backward), (out.numel(),), None,
                       block_of(grad).buffer, np.int64(grad.storage_offset()), block_of(index).buffer,
                       np.int64(index.storage_offset()), block_of(out).buffer, label="max_pool2d_backward")
        else:
            pointwise("0", out, [])
    return finish(op, bound, out)


_ADAPTIVE_SOURCE = load("adaptive_bins.cl") + load("adaptive_avg_pool.cl")


def adaptive_avg_pool(op, args, kwargs, bound):
    """Adaptive average pooling over 2-D maps (global to 1x1 as a mean; other sizes with torch's bins) and its
    backward (a gather, no atomics)."""
    forward = base_name(op) == "_adaptive_avg_pool2d"
    x = bound["self"]
    if x.dtype not in (torch.float32, torch.float64) or x.dim() not in (3, 4):
        raise NoKernel("adaptive pooling dtype")
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    dev = device_of(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    source = f"#define T {cl_type(x.dtype)}\n#define ACC {wide}\n" + _ADAPTIVE_SOURCE
    if forward:
        oh, ow = _pair(bound["output_size"])
        if (oh, ow) == (1, 1):
            return aten.mean.dim(x, [-2, -1], True)
        x = contiguous(x)
        out = empty(list(x.shape[:-2]) + [oh, ow], contiguous_strides(list(x.shape[:-2]) + [oh, ow]), x.dtype,
                    x.device.index)
        if out.numel():
            dev.launch(dev.kernel("adaptive_avg_pool2d", source), (out.numel(),), None, block_of(x).buffer,
                                                      np.int64(x.storage_offset()), block_of(out).buffer,
                                                      *[np.int64(v) for v in (planes, h, w, oh, ow)])
        return out
    grad = contiguous(bound["grad_output"], at_start=True)  # the backward kernel takes no offset
    oh, ow = grad.shape[-2:]
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    if (oh, ow) == (1, 1):
        pointwise("a / b", out, [grad, float(h * w)])
    elif out.numel():
        dev.launch(dev.kernel("adaptive_avg_pool2d_backward", source), (out.numel(),), None, block_of(grad).buffer,
                                                           block_of(out).buffer,
                                                           *[np.int64(v) for v in (planes, h, w, oh, ow)])
    return out


_ADAPTIVE_MAX_SOURCE = load("adaptive_bins.cl") + load("adaptive_max_pool.cl")


def adaptive_max_pool(op, args, kwargs, bound):
    """adaptive_max_pool2d (values and indices, any output size, torch's bins) and its backward: the forward one
    work item per output, the backward one per input element gathering from the outputs whose index names it,
    in the CPU's order of accumulation (no atomics)."""
    x = bound["self"]
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64):
        raise NoKernel("adaptive max pool beyond 2-D float")
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    dev = device_of(x)
    source = f"#define T {cl_type(x.dtype)}\n" + _ADAPTIVE_MAX_SOURCE
    if base_name(op) == "adaptive_max_pool2d":
        meta_result = meta_result_of(op, args, kwargs)  # torch's checks and output size
        shape = list(meta_result[0].shape)
        oh, ow = shape[-2:]
        x = contiguous(x)
        out = empty(shape, contiguous_strides(shape), x.dtype, x.device.index)
        index = empty(shape, contiguous_strides(shape), torch.int64, x.device.index)
        if out.numel():
            dev.launch(dev.kernel("adaptive_max_pool2d", source), (out.numel(),), None, block_of(x).buffer,
                       np.int64(x.storage_offset()), block_of(out).buffer, block_of(index).buffer,
                       *[np.int64(v) for v in (planes, h, w, oh, ow)])
        return finish(op, bound, (out, index))
    grad, index = contiguous(bound["grad_output"]), contiguous(bound["indices"])
    oh, ow = grad.shape[-2:]
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        if grad.numel():
            dev.launch(dev.kernel("adaptive_max_pool2d_backward", source), (out.numel(),), None,
                       block_of(grad).buffer, np.int64(grad.storage_offset()), block_of(index).buffer,
                       np.int64(index.storage_offset()), block_of(out).buffer,
                       *[np.int64(v) for v in (planes, h, w, oh, ow)])
        else:
            pointwise("0", out, [])
    return finish(op, bound, out)


_AVG_POOL_SOURCE = load("avg_pool.cl")


def avg_pool(op, args, kwargs, bound):
    """avg_pool2d and its backward with torch's semantics (stride defaulting to the kernel, padding, ceil_mode's
    clipped last windows, count_include_pad, divisor_override): the forward one work item per output, the
    backward one per input element gathering grad / divisor from the windows that cover it (no atomics)."""
    x = bound["self"]
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64):
        raise NoKernel("avg pool beyond 2-D float")
    meta_result = meta_result_of(op, args, kwargs)  # torch's checks and output size
    kh, kw = _pair(bound["kernel_size"])
    sh, sw = _pair(bound["stride"], (kh, kw))
    ph, pw = _pair(bound["padding"])
    divisor = bound["divisor_override"] or 0
    x = contiguous(x)
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    dev = device_of(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    source = f"#define T {cl_type(x.dtype)}\n#define ACC {wide}\n" + _AVG_POOL_SOURCE
    if base_name(op) == "avg_pool2d":
        oh, ow = meta_result.shape[-2:]
        out = empty(list(x.shape[:-2]) + [oh, ow], contiguous_strides(list(x.shape[:-2]) + [oh, ow]), x.dtype,
                    x.device.index)
        geometry = (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, divisor)
        if out.numel():
            dev.launch(dev.kernel("avg_pool2d", source), (out.numel(),), None, block_of(x).buffer,
                       np.int64(x.storage_offset()), block_of(out).buffer, *[np.int64(v) for v in geometry],
                       np.int32(bool(bound["count_include_pad"])))
        return finish(op, bound, out)
    grad = contiguous(bound["grad_output"])
    oh, ow = grad.shape[-2:]
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        if grad.numel():
            geometry = (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, divisor)
            dev.launch(dev.kernel("avg_pool2d_backward", source), (out.numel(),), None, block_of(grad).buffer,
                       np.int64(grad.storage_offset()), block_of(out).buffer, *[np.int64(v) for v in geometry],
                       np.int32(bool(bound["count_include_pad"])))
        else:
            pointwise("0", out, [])
    return finish(op, bound, out)
