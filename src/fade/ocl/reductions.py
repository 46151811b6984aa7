"""Row reductions (sum, mean, max, min, arg-, all, any), softmax and log-softmax with their backwards, and the
negative log-likelihood loss. A reduction permutes the reduced dims last into a contiguous (rows, n) copy, then
one work item loops over a row (or a part of a long row): no atomics, a fixed order, results that repeat.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, empty_like_meta, strided_view
from fade.ocl.meta import base_name, meta_result_of
from fade.ocl.pointwise import finish, pointwise
from fade.ocl.sources import cl_type, compiled_source, load, NoKernel

aten = torch.ops.aten


_ROWS = {
    "sum": ("acc = 0", "acc += v", "acc"),
    "mean": ("acc = 0", "acc += v", "acc / (ACC)divisor"),
    "max": ("acc = -INFINITY; if (!FLOAT) acc = x[0]",
            "if (v != v) { acc = v; break; } if (v > acc) acc = v", "acc"),
    "min": ("acc = INFINITY; if (!FLOAT) acc = x[0]",
            "if (v != v) { acc = v; break; } if (v < acc) acc = v", "acc"),
    "argmax": ("acc = -INFINITY; long best = 0; if (!FLOAT) acc = x[0]",
               "if (v != v) { best = j; break; } if (v > acc) { acc = v; best = j; }", "best"),
    "argmin": ("acc = INFINITY; long best = 0; if (!FLOAT) acc = x[0]",
               "if (v != v) { best = j; break; } if (v < acc) { acc = v; best = j; }", "best"),
    "all": ("acc = 1", "if (v == 0) { acc = 0; break; }", "acc"),  # NaN is nonzero: true, as in torch
    "any": ("acc = 0", "if (v != 0) { acc = 1; break; }", "acc"),
}


REDUCE_PART = 2048  # a long row is reduced in parts of this many elements by separate work-groups, then the parts

REDUCE_WIDTH = 16384  # ... when fewer than this many work items would otherwise run

REDUCE_GROUPS = 1024  # a row reduced by work-groups is split into parts while fewer groups than this would run

STRIDED_PART = 256  # a strided (column) reduction is split into parts of this many elements when too narrow

ROW_GROUP_MIN = 32  # rows at least this long are reduced by a work-group each (shorter: one work item a row)

_COMBINE = {"sum": ("0", "((a) + (b))"),
            "max": ("-INFINITY", "(((a) != (a)) ? (a) : (((b) != (b) || (b) > (a)) ? (b) : (a)))"),
            "min": ("INFINITY", "(((a) != (a)) ? (a) : (((b) != (b) || (b) < (a)) ? (b) : (a)))")}

_REDUCE_ROWS_SOURCE = load("reduce_rows.cl")


def row_work_group(dev, n: int) -> int:
    """The work-group size of a kernel that gives each row of n elements a work-group (reductions, softmax, layer
    norm, batch norm's channel sums): the power of two covering n, at most 256 and the device's limit."""
    local = min(256, dev.max_work_group_size, 1 << max(0, (n - 1).bit_length()))
    return 1 << (local.bit_length() - 1)


def reduce_rows(kind: str, x: torch.Tensor, out: torch.Tensor, divisor: int | None = None, inner: int = 1) -> None:
    """out[o, i] = reduce over j of x[o, j, i] for a contiguous device tensor x viewed as (outer, n, inner)
    (x.shape is (outer * ... , n) with inner == 1, or (outer, n * inner) otherwise) and a contiguous out of
    outer * inner elements. No atomics and no compare-and-swap, so NaN cannot hang it, and a fixed order, so
    results repeat. float32 accumulates in double where the device has fp64 (as torch's CPU kernels do).
    Rows (inner 1) of floats at least ROW_GROUP_MIN long: a work-group per row (or per part of a long row, the
    parts reduced in a second pass); otherwise one work item per output (or per part of it), looping over its
    elements with stride `inner`, so neighbouring work items read neighbouring elements."""
    rows, length = x.shape
    n = length // inner
    if rows == 0 or inner == 0:
        return
    dev = device_of(x)
    floating = x.dtype.is_floating_point
    wide = torch.float64 if floating and (x.dtype == torch.float64 or dev.info.fp64) else torch.float32
    splittable = floating and kind in ("sum", "mean", "max", "min")
    width = rows * inner
    if inner == 1 and splittable and n >= ROW_GROUP_MIN:
        parts = 1
        if n >= 2 * REDUCE_PART and rows < REDUCE_GROUPS:
            parts = min(-(-n // REDUCE_PART), max(1, REDUCE_GROUPS // rows))
        if parts == 1:
            _reduce_groups(kind, x, out, n, n, divisor or n, wide)
            return
        partial = empty([parts, rows], [rows, 1], wide, x.device.index)
        _reduce_groups("sum" if kind == "mean" else kind, x, partial, n, -(-n // parts), 1, wide)
        reduce_rows(kind, partial.view(1, parts * rows), out, divisor or n, inner=rows)
        return
    parts = 1
    if splittable and n >= 2 * STRIDED_PART and width < REDUCE_WIDTH:
        parts = min(-(-n // STRIDED_PART), max(1, REDUCE_WIDTH // width))
    if parts > 1:
        partial = empty([parts, width], [width, 1], wide, x.device.index)
        _reduce_strided("sum" if kind == "mean" else kind, x, partial, n, inner, parts, -(-n // parts), 1, wide)
        _reduce_strided(kind, partial.view(1, parts * width), out, parts, width, 1, parts, divisor or n, wide)
        return
    _reduce_strided(kind, x, out, n, inner, 1, n, divisor or n, wide)


def _reduce_groups(kind: str, x: torch.Tensor, out: torch.Tensor, n: int, part_len: int, divisor: int,
                   wide) -> None:
    """reduce_rows.cl over x's rows in parts of part_len: out[p * rows + r]."""
    rows = x.numel() // max(n, 1)
    dev = device_of(x)
    local = row_work_group(dev, min(n, part_len))
    identity, combine = _COMBINE["sum" if kind == "mean" else kind]
    header = (f"TX {cl_type(x.dtype)}", f"TO {cl_type(out.dtype)}", f"ACC {cl_type(wide)}", f"LOCAL {local}",
              f"IDENTITY {identity}", f"COMBINE(a, b) {combine}",
              f"FINAL(a) {'(a) / (ACC)divisor' if kind == 'mean' else '(a)'}")
    kernel = dev.kernel("reduce_rows", compiled_source(_REDUCE_ROWS_SOURCE, header))
    parts = -(-n // part_len) if n else 1
    dev.launch(kernel, (rows * parts * local,), (local,), block_of(x).buffer, np.int64(x.storage_offset()),
               block_of(out).buffer, np.int64(out.storage_offset()), np.int64(n), np.int64(rows),
               np.int64(part_len), np.int64(divisor))


def _reduce_strided(kind: str, x: torch.Tensor, out: torch.Tensor, n: int, inner: int, parts: int, part_len: int,
                    divisor: int, wide) -> None:
    """One work item per (part, output): out[p * width + o * inner + i] = reduce over the part's j of
    x[o, j, i]; over nothing (n 0), the reduction's identity (a sum's 0, any's false, all's true; a mean's NaN)."""
    width = out.numel() // parts  # not x.numel() // n: an empty x still has outputs to write
    dev = device_of(x)
    floating = x.dtype.is_floating_point
    acc_type = cl_type(wide) if floating else "long"
    init, step, result = _ROWS[kind]
    source = f"""
#define ACC {acc_type}
#define FLOAT {1 if floating else 0}
__kernel void reduce_strided(__global const {cl_type(x.dtype)}* xs, long x_off, __global {cl_type(out.dtype)}* out,
                             long out_off, long n, long width, long inner, long parts, long part_len, long divisor) {{
    long g = get_global_id(0);
    if (g >= width * parts) return;
    long p = g / width, w = g % width, o = w / inner, i = w % inner;
    long begin = p * part_len, end = min(n, begin + part_len);
    __global const {cl_type(x.dtype)}* x = xs + x_off + o * n * inner + i;
    ACC acc; {init.replace("acc = x[0]", "acc = (ACC)x[begin * inner]")};
    for (long j = begin; j < end; ++j) {{ ACC v = (ACC)x[j * inner]; {step}; }}
    out[out_off + g] = ({cl_type(out.dtype)})({result});
}}"""
    if not floating and kind not in ("all", "any"):
        source = source.replace("if (v != v) { acc = v; break; } ", "").replace(
            "if (v != v) { best = j; break; } ", "")
    kernel = dev.kernel("reduce_strided", source)
    dev.launch(kernel, (width * parts,), None, block_of(x).buffer, np.int64(x.storage_offset()), block_of(out).buffer,
               np.int64(out.storage_offset()), np.int64(n), np.int64(width), np.int64(inner), np.int64(parts),
               np.int64(part_len), np.int64(divisor))


SOFTMAX_TEAM = 32  # rows up to SOFTMAX_TEAM * SOFTMAX_TEAM_VALUES long: a team of this many work items per row ...

SOFTMAX_TEAM_VALUES = 32  # ... each holding this many of the row's values in registers

SOFTMAX_TEAMS = 8  # teams (rows) per work-group


def softmax_rows(x: torch.Tensor, out: torch.Tensor, log: bool, safe: bool = False) -> None:
    """Row softmax (or log-softmax) of a contiguous (rows, n) float tensor. NaN and inf flow through as on
    the CPU: a row holding NaN (or +inf) yields NaN. `safe` (_safe_softmax, attention's): a row of -inf only
    (every key masked) yields zeros instead of NaN.

    Rows of up to SOFTMAX_TEAM * SOFTMAX_TEAM_VALUES elements (attention's scores, a classifier's logits) go to
    softmax_team: a team of SOFTMAX_TEAM work items per row, SOFTMAX_TEAMS rows a work-group, the row read once
    into registers and written once. A work-group per row with the row read three times ran vit_b_16's
    151296 rows of 197 at 412 us a call on the H200, ~7x the time its 238 MB take at the memory's speed
    (results/ocl-diag-h200-s17)."""
    rows, n = x.shape
    if rows == 0 or n == 0:
        return
    dev = device_of(x)
    if _by_teams(dev, n):
        _launch_by_teams(dev, "softmax_team", x.dtype, n, rows, log, safe, x, out)
        return
    t = cl_type(x.dtype)
    acc = "double" if x.dtype == torch.float64 else "float"
    value = "(v - m) - log(s)" if log else "exp(v - m) / s"
    if safe:
        value = f"(m == -INFINITY ? 0 : {value})"
    local = row_work_group(dev, n)
    # a work-group per row (one work item per row took 0.22 ms for 64 x 1000 on the H100): strided partial
    # max and sum per work item, then tree reductions in local memory; NaN wins the max, as on the CPU
    source = f"""#define LOCAL {local}
__kernel void softmax_rows(__global const {t}* xs, long x_off, __global {t}* out, long out_off, long n,
                           long rows) {{
    long r = get_group_id(0);
    int t = get_local_id(0);
    __global const {t}* x = xs + x_off + r * n;
    __local {acc} red[LOCAL];
    {acc} m = -INFINITY;
    for (long j = t; j < n; j += LOCAL) {{ {acc} v = x[j]; m = (m != m) ? m : ((v != v || v > m) ? v : m); }}
    red[t] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {{
        if (t < h) {{ {acc} o = red[t + h], v = red[t]; red[t] = (v != v) ? v : ((o != o || o > v) ? o : v); }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    {acc} s = 0;
    for (long j = t; j < n; j += LOCAL) s += exp(({acc})x[j] - m);
    red[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {{
        if (t < h) red[t] += red[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    s = red[0];
    for (long j = t; j < n; j += LOCAL) {{ {acc} v = x[j]; out[out_off + r * n + j] = ({t})({value}); }}
}}"""
    kernel = dev.kernel("softmax_rows", source)
    dev.launch(kernel, (rows * local,), (local,), block_of(x).buffer, np.int64(x.storage_offset()),
               block_of(out).buffer, np.int64(out.storage_offset()), np.int64(n), np.int64(rows))


_SOFTMAX_TEAM_SOURCE = load("softmax_team.cl")


def _by_teams(dev, n: int) -> bool:
    """Whether rows of n go to the team kernels (softmax_team.cl)."""
    return n <= SOFTMAX_TEAM * SOFTMAX_TEAM_VALUES and SOFTMAX_TEAM * SOFTMAX_TEAMS <= dev.max_work_group_size


def _launch_by_teams(dev, name: str, dtype, n: int, rows: int, log: bool, safe: bool, *tensors) -> None:
    """softmax_team or softmax_team_backward over `rows` rows of n: `tensors` in the kernel's order (buffer and
    offset each)."""
    source = compiled_source(_SOFTMAX_TEAM_SOURCE, (f"T {cl_type(dtype)}",
                                                    f"ACC {'double' if dtype == torch.float64 else 'float'}"),
                             ("N", "VALUES", "TEAM", "TEAMS", "LOG", "SAFE"),
                             (n, -(-n // SOFTMAX_TEAM), SOFTMAX_TEAM, SOFTMAX_TEAMS, int(log), int(safe)))
    arguments = []
    for t in tensors:
        arguments += (block_of(t).buffer, np.int64(t.storage_offset()))
    dev.launch(dev.kernel(name, source), (SOFTMAX_TEAM, -(-rows // SOFTMAX_TEAMS) * SOFTMAX_TEAMS),
               (SOFTMAX_TEAM, SOFTMAX_TEAMS), *arguments, np.int64(rows))


def _row_layout(x: torch.Tensor, dims) -> tuple:
    """x with `dims` moved last as a contiguous (rows, n) device tensor (a view where x already is laid out so,
    else a copy), and the kept shape."""
    dims = sorted({d % max(x.dim(), 1) for d in dims}) if x.dim() else []
    kept = [d for d in range(x.dim()) if d not in dims]
    n = math.prod(x.shape[d] for d in dims)
    rows = math.prod(x.shape[d] for d in kept)
    permuted = x.permute(kept + dims) if x.dim() else x
    if permuted.is_contiguous():
        return strided_view(x, 0, (rows, n), (n, 1)), [x.shape[d] for d in kept], dims
    staging = empty(permuted.shape, contiguous_strides(permuted.shape), x.dtype, x.device.index)
    pointwise("a", staging, [permuted])
    return staging.view(rows, n), [x.shape[d] for d in kept], dims


def _reduce_layout(x: torch.Tensor, dims) -> tuple:
    """(x as a contiguous (outer, n * inner) device tensor, inner) for reducing `dims`: a view when x is
    contiguous and the dims are one block of it (inner: the elements after the block, read with that stride);
    else the dims moved last (_row_layout, inner 1)."""
    dims = sorted({d % max(x.dim(), 1) for d in dims}) if x.dim() else []
    if dims and x.is_contiguous() and dims == list(range(dims[0], dims[-1] + 1)):
        inner = math.prod(x.shape[dims[-1] + 1:])
        outer = math.prod(x.shape[:dims[0]])
        length = x.numel() // max(outer, 1)
        return strided_view(x, 0, (outer, length), (length, 1)), inner
    return _row_layout(x, dims)[0], 1


def reduce_op(op, args, kwargs, bound):
    base = base_name(op)
    x = bound["self"]
    logical = base in ("all", "any")
    if x.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32) + (
            (torch.bool, torch.uint8) if logical else ()):
        raise NoKernel(f"reduction over {x.dtype}")
    meta_result = meta_result_of(op, args, kwargs)
    dim = bound.get("dim")
    dims = list(range(x.dim())) if dim is None or dim == [] else ([dim] if isinstance(dim, int) else list(dim))
    kind = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min",
            "argmax": "argmax", "argmin": "argmin", "all": "all", "any": "any"}[base]
    source = x if bound.get("dtype") is None else x.to(bound["dtype"])
    rows, inner = _reduce_layout(source, dims)
    if isinstance(meta_result, tuple):
        values = empty_like_meta(meta_result[0], x.device.index)
        indices = empty_like_meta(meta_result[1], x.device.index)
        reduce_rows(kind, rows, values.view(-1) if values.numel() else values, inner=inner)
        reduce_rows("arg" + kind, rows, indices.view(-1) if indices.numel() else indices, inner=inner)
        return finish(op, bound, (values, indices))
    if rows.shape[1] == 0 and kind in ("max", "min", "argmax", "argmin"):
        raise NoKernel("empty max")
    out = empty(meta_result.shape, contiguous_strides(meta_result.shape), meta_result.dtype, x.device.index)
    reduce_rows(kind, rows, out.view(-1), inner=inner)
    return finish(op, bound, out)


def softmax(op, args, kwargs, bound):
    """_softmax, _log_softmax and _safe_softmax (attention's: a row whose every score is -inf gives zeros; its
    dtype argument casts first, as its CPU kernel does)."""
    x, dim = bound["self"], bound["dim"]
    safe = op._schema.name.endswith("_safe_softmax")
    if safe and bound.get("dtype") is not None and bound["dtype"] != x.dtype:
        x = x.to(bound["dtype"])
    if x.dtype not in (torch.float32, torch.float64) or bound.get("half_to_float"):
        raise NoKernel(f"softmax over {x.dtype}")
    log = op._schema.name.endswith("_log_softmax")
    dim = dim % max(x.dim(), 1)
    if x.dim() and dim == x.dim() - 1 and x.is_contiguous():  # rows in place, the result straight into out
        out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
        n = x.shape[-1]
        softmax_rows(strided_view(x, 0, (x.numel() // max(n, 1), n), (n, 1)), out, log=log, safe=safe)
        return finish(op, bound, out)
    rows, _, _ = _row_layout(x, [dim]) if x.dim() else (x.reshape(1, 1), None, None)
    result = empty(rows.shape, contiguous_strides(rows.shape), x.dtype, x.device.index)
    softmax_rows(rows, result, log=log, safe=safe)
    order = [d for d in range(x.dim()) if d != dim] + [dim]
    inverse = [order.index(d) for d in range(x.dim())]
    permuted = result.view([x.shape[d] for d in order]).permute(inverse)
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    pointwise("a", out, [permuted])
    return finish(op, bound, out)


def softmax_backward(op, args, kwargs, bound):
    grad, output, dim = bound["grad_output"], bound["output"], bound["dim"]
    if output.dtype not in (torch.float32, torch.float64) or grad.dtype != output.dtype:
        raise NoKernel("softmax backward dtype")
    out = empty(output.shape, contiguous_strides(output.shape), output.dtype, output.device.index)
    log = op._schema.name.endswith("_log_softmax_backward_data")
    dim = dim % max(output.dim(), 1)
    n = output.shape[dim] if output.dim() else 1
    dev = device_of(output)
    if output.dim() and dim == output.dim() - 1 and output.is_contiguous() and grad.is_contiguous() and \
            _by_teams(dev, n):
        # rows in place: one kernel reading each row of grad and output once (else a product, a row sum and a
        # pointwise kernel)
        rows = output.numel() // max(n, 1)
        if rows:
            _launch_by_teams(dev, "softmax_team_backward", output.dtype, n, rows, log, False, grad, output, out)
        return finish(op, bound, out)
    if log:
        total = aten.sum.dim_IntList(grad, [dim], True)
        pointwise("a - exp(b) * c", out, [grad, output, total])
    else:
        product = empty(output.shape, contiguous_strides(output.shape), output.dtype, output.device.index)
        pointwise("a * b", product, [grad, output])
        total = aten.sum.dim_IntList(product, [dim], True)
        pointwise("b * (a - c)", out, [grad, output, total])
    return finish(op, bound, out)


_NLL_SOURCE = load("nll_loss.cl")

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def nll_loss(op, args, kwargs, bound):
    x, target = bound["self"], bound["target"]
    if x.dim() != 2 or bound.get("weight") is not None or x.dtype not in (torch.float32, torch.float64) \
            or target.dtype != torch.int64:
        raise NoKernel("nll_loss beyond 2-D unweighted")
    dev = device_of(x)
    index = x.device.index
    rows, classes = x.shape
    x = x if x.is_contiguous() else x.contiguous()
    target = target if target.is_contiguous() else target.contiguous()
    t = cl_type(x.dtype)
    reduction = _REDUCTIONS[bound["reduction"]]
    program_source = f"#define T {t}\n" + _NLL_SOURCE
    ignore = np.int64(bound["ignore_index"])
    if op._schema.name.endswith("nll_loss_forward"):
        loss = empty([rows], [1], x.dtype, index)
        weight = empty([rows], [1], x.dtype, index)
        if rows:
            dev.launch(dev.kernel("nll_rows", program_source), (rows,), None,
                block_of(x).buffer, np.int64(x.storage_offset()), block_of(target).buffer,
                np.int64(target.storage_offset()), block_of(loss).buffer, block_of(weight).buffer, np.int64(rows),
                np.int64(classes), ignore)
        total_weight = aten.sum.default(weight)
        if reduction == "none":
            return finish(op, bound, (loss, total_weight))
        total = aten.sum.default(loss)
        if reduction == "mean":
            total = aten.div.Tensor(total, total_weight)
        return finish(op, bound, (total, total_weight))
    grad_output, total_weight = bound["grad_output"], bound["total_weight"]
    grad = empty([rows, classes], [classes, 1], x.dtype, index)
    pointwise("0", grad, [])
    if total_weight.dtype != x.dtype or total_weight.device != x.device:
        raise NoKernel("nll_loss total_weight of another dtype or device")
    scale_stride = 0 if grad_output.dim() == 0 else grad_output.stride(0)
    if rows:
        dev.launch(dev.kernel("nll_grad", program_source), (rows,), None,
            block_of(grad).buffer, block_of(target).buffer, np.int64(target.storage_offset()),
            block_of(grad_output).buffer, np.int64(grad_output.storage_offset()), np.int64(scale_stride),
            block_of(total_weight).buffer, np.int64(total_weight.storage_offset()), np.int32(reduction == "mean"),
            np.int64(rows), np.int64(classes), ignore)
    return finish(op, bound, grad)
