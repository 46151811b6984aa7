"""Ops indexed by position: embedding and index_select on dim 0 (a gather), embedding's backward (a scatter-add
per column, no atomics), arange, and tril/triu.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, empty_like_meta
from fade.ocl.meta import base_name, device_index_of, meta_result_of, written_arguments
from fade.ocl.pointwise import contiguous, finish, pointwise
from fade.ocl.sources import cl_type, load, NoKernel

aten = torch.ops.aten


_EMBEDDING_SOURCE = load("embedding.cl")


def embedding(op, args, kwargs, bound):
    """embedding / index_select on dim 0 (a gather) and embedding_dense_backward (a per-column scatter-add,
    no atomics, so the sum order is fixed)."""
    base = base_name(op)
    if written_arguments(op, bound):
        raise NoKernel("out=")
    if base == "index_select":
        weight, index = bound["self"], bound["index"]
        if bound["dim"] != 0 or weight.dim() < 1:
            raise NoKernel("index_select beyond dim 0")
    elif base == "embedding":
        weight, index = bound["weight"], bound["indices"]
    else:
        weight, index = bound["grad_output"], bound["indices"]
    if weight.dtype not in (torch.float32, torch.float64) or index.dtype != torch.int64:
        raise NoKernel("embedding dtypes")
    dev = device_of(weight)
    source = f"#define T {cl_type(weight.dtype)}\n" + _EMBEDDING_SOURCE
    index = index if index.is_contiguous() else aten.clone.default(index, memory_format=torch.contiguous_format)
    count = index.numel()
    if base == "embedding_dense_backward":
        rows = bound["num_weights"]
        width = weight.shape[-1]
        grad = contiguous(weight, at_start=True)  # scatter_add_rows reads grad from its buffer's start
        out = empty([rows, width], [width, 1], weight.dtype, weight.device.index)
        pointwise("0", out, [])
        if bound["scale_grad_by_freq"]:
            raise NoKernel("scale_grad_by_freq")
        if count and width:
            dev.launch(dev.kernel("scatter_add_rows", source), (width,), None,
                block_of(grad).buffer, block_of(index).buffer, np.int64(index.storage_offset()),
                block_of(out).buffer, np.int64(count), np.int64(width), np.int64(rows), np.int64(bound["padding_idx"]))
        return out
    weight = weight if weight.is_contiguous() else aten.clone.default(weight, memory_format=torch.contiguous_format)
    row_shape = list(weight.shape[1:])
    width = math.prod(row_shape)
    shape = (list(index.shape) if base == "embedding" else [count]) + row_shape
    out = empty(shape, contiguous_strides(shape), weight.dtype, weight.device.index)
    if count and width:
        dev.launch(dev.kernel("gather_rows", source), (count * width,), None,
            block_of(weight).buffer, np.int64(weight.storage_offset()),
            np.int64(width), block_of(index).buffer, np.int64(index.storage_offset()), block_of(out).buffer,
            np.int64(count), np.int64(width))
    return out


def arange(op, args, kwargs, bound):
    """arange(start, end, step, out=): out[i] = start + i * step, computed in double (long for integer
    outputs) as torch's CPU kernel does."""
    meta_result = meta_result_of(op, args, kwargs)
    out = empty_like_meta(meta_result, device_index_of(args, kwargs))
    if out.numel():
        dev = device_of(out)
        integral = not out.dtype.is_floating_point
        if not integral and not dev.info.fp64:
            raise NoKernel("arange without fp64")
        wide, scalar = ("long", np.int64) if integral else ("double", np.float64)
        source = f"""
__kernel void arange(__global {cl_type(out.dtype)}* out, {wide} start, {wide} step, long n) {{
    long i = get_global_id(0);
    if (i < n) out[i] = ({cl_type(out.dtype)})(start + ({wide})i * step);
}}"""
        dev.launch(dev.kernel("arange", source), (out.numel(),), None, block_of(out).buffer,
                   scalar(bound.get("start") or 0), scalar(bound.get("step", 1)), np.int64(out.numel()))
    return finish(op, bound, out)


def triangle(op, args, kwargs, bound):
    """tril / triu over the last two dims (and their in-place and out= forms)."""
    x = contiguous(bound["self"])
    if x.dim() < 2:
        raise NoKernel("tril of fewer than 2 dims")
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        rows, cols = x.shape[-2:]
        keep = "col - row <= diagonal" if base_name(op) == "tril" else "col - row >= diagonal"
        t = cl_type(x.dtype)
        source = f"""
__kernel void triangle(__global const {t}* x, long x_off, __global {t}* out, long rows, long cols, long diagonal,
                       long n) {{
    long g = get_global_id(0);
    if (g >= n) return;
    long row = (g / cols) % rows, col = g % cols;
    out[g] = ({keep}) ? x[x_off + g] : ({t})0;
}}"""
        dev = device_of(x)
        dev.launch(dev.kernel("triangle", source), (out.numel(),), None, block_of(x).buffer,
                   np.int64(x.storage_offset()), block_of(out).buffer, np.int64(rows), np.int64(cols),
                   np.int64(bound["diagonal"]), np.int64(out.numel()))
    return finish(op, bound, out)
