"""Batch norm (fused kernels in kernels/batch_norm.cl for contiguous input: per-channel work-group sums, then
one elementwise pass; otherwise composed of the elementwise and reduction ops), layer norm and group norm
(kernels/layer_norm.cl).
Also `channel_sums`, a convolution's bias gradient by the batch norm's per-channel sums.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, Scratch
from fade.ocl.meta import base_name, has_out_arguments, written_arguments
from fade.ocl.pointwise import contiguous, pointwise
from fade.ocl.reductions import row_work_group
from fade.ocl.sources import cl_type, compiled_source, load, NoKernel

aten = torch.ops.aten


_LN_SOURCE = load("layer_norm.cl")

LN_PART_ROWS = 64  # rows one work item of ln_backward_params sums (the weight and bias gradients' partial sums)


def layer_norm(op, args, kwargs, bound):
    """native_layer_norm and its backward (rows = the leading dims, each normalized over the trailing
    `normalized_shape`): kernels/layer_norm.cl, a work-group per row, for the forward and the input gradient,
    and column sums in parts for the weight and bias gradients; accumulated in double where the device has
    fp64. mean and rstd are saved in the input's dtype, shaped as torch's (leading dims, then ones)."""
    if written_arguments(op, bound):
        raise NoKernel("layer norm out=")
    x = bound["input"]
    if x.dtype not in (torch.float32, torch.float64):
        raise NoKernel(f"layer norm over {x.dtype}")
    normalized = list(bound["normalized_shape"])
    axis = x.dim() - len(normalized)
    n = math.prod(normalized)
    rows = math.prod(x.shape[:axis])
    stat_shape = list(x.shape[:axis]) + [1] * len(normalized)
    weight, bias = bound.get("weight"), bound.get("bias")
    if weight is not None and weight.dtype != x.dtype or bias is not None and bias.dtype != x.dtype:
        raise NoKernel("layer norm with parameters of another dtype")
    dev = device_of(x)
    index = x.device.index
    forward = base_name(op) == "native_layer_norm"
    blocks = _row_blocks(x) if forward and len(normalized) == 1 and rows and n else None
    x = x if blocks else contiguous(x)
    weight = contiguous(weight) if weight is not None else None
    bias = contiguous(bias) if bias is not None else None
    if forward:
        mean = empty(stat_shape, contiguous_strides(stat_shape), x.dtype, index)
        rstd = empty(stat_shape, contiguous_strides(stat_shape), x.dtype, index)
        if blocks:
            return _blocks_forward(x, blocks, weight, bias, bound["eps"], mean, rstd, rows, n), mean, rstd
        return _rows_forward(x, weight, bias, bound["eps"], mean, rstd, rows, n), mean, rstd
    grad, mean, rstd = contiguous(bound["grad_out"]), contiguous(bound["mean"]), contiguous(bound["rstd"])
    mask = bound["output_mask"]
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        grad_input = _rows_input_grad(grad, x, mean, rstd, weight, rows, n)
    want_w, want_b = bool(mask[1] and weight is not None), bool(mask[2] and bias is not None)
    if want_w:
        grad_weight = empty(list(weight.shape), contiguous_strides(weight.shape), x.dtype, index)
    if want_b:
        grad_bias = empty(list(bias.shape), contiguous_strides(bias.shape), x.dtype, index)
    if (want_w or want_b) and n:
        if rows:
            source, _, wide = _ln_program(dev, x.dtype, n)
            place = functools.partial(_place, stand_in=x)
            parts = -(-rows // LN_PART_ROWS)
            with Scratch(dev) as scratch:
                partial = scratch.buffer(2 * parts * n * wide.itemsize)
                dev.launch(dev.kernel("ln_backward_params", source), (parts * n,), None, *place(grad), *place(x),
                           *place(mean), *place(rstd), partial, np.int64(rows), np.int64(n), np.int64(parts),
                           np.int64(LN_PART_ROWS))
                dev.launch(dev.kernel("ln_params_finish", source), (n,), None, partial, np.int64(parts),
                           np.int64(n), *place(grad_weight), *place(grad_bias), np.int32(want_w),
                           np.int32(want_b))
        else:
            for t in (grad_weight, grad_bias):
                if t is not None:
                    pointwise("0", t, [])
    return grad_input, grad_weight, grad_bias


def _ln_program(dev, dtype, n: int) -> tuple:
    """(source, work-group size, accumulation dtype) of kernels/layer_norm.cl for rows of n elements."""
    wide = torch.float64 if dtype == torch.float64 or dev.info.fp64 else torch.float32
    local = row_work_group(dev, n)
    return compiled_source(_LN_SOURCE, (f"T {cl_type(dtype)}", f"ACC {cl_type(wide)}", f"LOCAL {local}")), local, wide


def _place(t, stand_in) -> tuple:
    """(buffer, offset) of an optional tensor; stand_in's buffer for a missing one (the kernel ignores it)."""
    return (block_of(t).buffer, np.int64(t.storage_offset())) if t is not None else (block_of(stand_in).buffer,
                                                                                        np.int64(0))


def _rows_forward(x, weight, bias, eps: float, mean, rstd, rows: int, n: int) -> torch.Tensor:
    """ln_forward over a contiguous x's `rows` rows of n elements (layer norm, group norm): the normalized
    output (then * weight + bias, each of n elements, where given), the rows' mean and rstd written into
    `mean` and `rstd`; with nothing to normalize over, NaN statistics, as on the CPU."""
    dev = device_of(x)
    out = empty(list(x.shape), contiguous_strides(x.shape), x.dtype, x.device.index)
    if rows and n:
        source, local, wide = _ln_program(dev, x.dtype, n)
        acc = np.float64 if wide == torch.float64 else np.float32
        dev.launch(dev.kernel("ln_forward", source), (rows * local,), (local,), *_place(x, x), *_place(weight, x),
                   *_place(bias, x), np.int32(weight is not None), np.int32(bias is not None), acc(eps),
                   block_of(out).buffer, np.int64(out.storage_offset()), block_of(mean).buffer,
                   block_of(rstd).buffer, np.int64(n))
    elif rows:
        pointwise("NAN", mean, [])
        pointwise("NAN", rstd, [])
    return out


ROW_BLOCK_MIN = 16  # adjacent rows a block must have for ln_forward_blocks to read x in place


def _row_blocks(x: torch.Tensor) -> tuple | None:
    """(inner, outer, js) when x's rows (its leading dims flattened) are blocks of `inner` adjacent rows, row r
    starting at (r // inner) * outer + r % inner, and its last dim has a stride js > 1: a channels-first tensor
    seen channels-last (convnext permutes NCHW to NHWC for its layer norm), which ln_forward_blocks reads in
    place; None for any other layout (contiguous rows, or one the copy handles)."""
    if x.dim() < 2 or x.stride(-1) <= 1:
        return None
    sizes, strides = x.shape[:-1], x.stride()[:-1]
    k, inner = len(sizes) - 1, 1
    while k >= 0 and (sizes[k] == 1 or strides[k] == inner):
        inner *= sizes[k]
        k -= 1
    outer = strides[k] if k >= 0 else 0
    span = outer
    for d in range(k, -1, -1):  # the outer dims collapse into one stride
        if sizes[d] != 1 and strides[d] != span:
            return None
        span *= sizes[d]
    if inner < ROW_BLOCK_MIN:
        return None
    return inner, outer, x.stride(-1)


def _blocks_forward(x, blocks: tuple, weight, bias, eps: float, mean, rstd, rows: int, n: int) -> torch.Tensor:
    """ln_forward_blocks: layer norm over the last dim of an x laid out as _row_blocks found (`blocks`), read in
    place; the output contiguous, as torch's, and the rows' mean and rstd written into `mean` and `rstd`."""
    dev = device_of(x)
    out = empty(list(x.shape), contiguous_strides(x.shape), x.dtype, x.device.index)
    source, _, wide = _ln_program(dev, x.dtype, n)
    acc = np.float64 if wide == torch.float64 else np.float32
    inner, outer, js = blocks
    dev.launch(dev.kernel("ln_forward_blocks", source), (-(-rows // 32) * 32, 8), (32, 8), *_place(x, x),
               np.int64(inner), np.int64(outer), np.int64(js), *_place(weight, x), *_place(bias, x),
               np.int32(weight is not None), np.int32(bias is not None), acc(eps), block_of(out).buffer,
               np.int64(out.storage_offset()), block_of(mean).buffer, block_of(rstd).buffer, np.int64(rows),
               np.int64(n))
    return out


def _rows_input_grad(grad, x, mean, rstd, weight, rows: int, n: int) -> torch.Tensor:
    """ln_backward_input over contiguous grad and x's `rows` rows of n elements: the input gradient, with grad
    scaled by `weight` (n elements) where given."""
    dev = device_of(x)
    grad_input = empty(list(x.shape), contiguous_strides(x.shape), x.dtype, x.device.index)
    if rows and n:
        source, local, _ = _ln_program(dev, x.dtype, n)
        dev.launch(dev.kernel("ln_backward_input", source), (rows * local,), (local,), *_place(grad, x),
                   *_place(x, x), *_place(mean, x), *_place(rstd, x), *_place(weight, x), np.int32(weight is not None),
                   block_of(grad_input).buffer, np.int64(n))
    return grad_input


def group_norm(op, args, kwargs, bound):
    """native_group_norm and its backward: each (image, group) is a row of C/G x HxW elements normalized by
    layer_norm.cl's kernels (a work-group per row), then the per-channel weight and bias; the backward's
    weight and bias gradients are per-channel sums (channel_sums). Any input layout (channels-last is made
    NCHW first); mean and rstd saved as (N, G), as torch's."""
    if written_arguments(op, bound):
        raise NoKernel("group norm out=")
    x = bound["input"]
    if x.dtype not in (torch.float32, torch.float64):
        raise NoKernel(f"group norm over {x.dtype}")
    weight = bound.get("weight")
    n_img, c, hxw, groups = int(bound["N"]), int(bound["C"]), int(bound["HxW"]), int(bound["group"])
    if weight is not None and weight.dtype != x.dtype:
        raise NoKernel("group norm with parameters of another dtype")
    index = x.device.index
    x = contiguous(x)
    rows, n = n_img * groups, (c // max(groups, 1)) * hxw
    per_channel = [1, c] + [1] * (x.dim() - 2)
    if base_name(op) == "native_group_norm":
        bias = bound.get("bias")
        mean = empty([n_img, groups], [groups, 1], x.dtype, index)
        rstd = empty([n_img, groups], [groups, 1], x.dtype, index)
        out = _rows_forward(x, None, None, bound["eps"], mean, rstd, rows, n)
        if weight is not None and bias is not None and out.numel():
            pointwise("a * b + c", out, [out, weight.view(per_channel), bias.view(per_channel)])
        elif weight is not None and out.numel():
            pointwise("a * b", out, [out, weight.view(per_channel)])
        elif bias is not None and out.numel():
            pointwise("a + b", out, [out, bias.view(per_channel)])
        return out, mean, rstd
    grad, mean, rstd = contiguous(bound["grad_out"]), contiguous(bound["mean"]), contiguous(bound["rstd"])
    mask = bound["output_mask"]
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        g = grad
        if weight is not None and grad.numel():  # the normalized values' gradient: grad * weight per channel
            g = empty(list(x.shape), contiguous_strides(x.shape), x.dtype, index)
            pointwise("a * b", g, [grad, weight.view(per_channel)])
        grad_input = _rows_input_grad(g, x, mean, rstd, None, rows, n)
    if mask[1] and weight is not None or mask[2]:
        grouped = [n_img, groups, n]
        if mask[1] and weight is not None:
            product = empty(grouped, contiguous_strides(grouped), x.dtype, index)
            if product.numel():
                pointwise("a * (b - c) * d", product, [grad.view(grouped), x.view(grouped),
                                                       mean.view(n_img, groups, 1), rstd.view(n_img, groups, 1)])
            grad_weight = channel_sums(product.view(x.shape))
        if mask[2]:
            grad_bias = channel_sums(grad)
    return grad_input, grad_weight, grad_bias


_BN_SOURCE = load("batch_norm.cl")

BN_PART = 8192  # elements of one channel a bn_partials work-group sums


def batch_norm(op, args, kwargs, bound):
    """native_batch_norm and its backward over (N, C, ...). Contiguous input with parameters of its dtype: fused
    kernels (per-channel sums by work-group reduction, accumulated in double where the device has fp64, then one
    elementwise pass): 3 launches for a training forward or backward, 1 for eval. Otherwise composed of the
    elementwise and reduction kernels. Running statistics are updated in place as on the CPU (unbiased)."""
    if has_out_arguments(op):
        raise NoKernel("out=")
    x = bound["input"]
    if x.dtype not in (torch.float32, torch.float64) or x.dim() < 2:
        raise NoKernel("batch norm dtype")
    names = ("weight", "bias", "running_mean", "running_var", "save_mean", "save_invstd", "grad_out")
    tensors = [bound.get(name) for name in names if isinstance(bound.get(name), torch.Tensor)]
    if not x.is_contiguous() or any(t.dtype != x.dtype or t.device != x.device for t in tensors) or \
            (bound.get("grad_out") is not None and not bound["grad_out"].is_contiguous()) or x.numel() == 0:
        return _batch_norm_composed(op, bound)
    n, c = x.shape[0], x.shape[1]
    hw = x.numel() // max(n * c, 1)
    m = n * hw
    dev = device_of(x)
    index = x.device.index
    source, local, wide = _bn_setup(dev, x.dtype)
    np_wide = np.float64 if wide == torch.float64 else np.float32
    weight, bias = bound.get("weight"), bound.get("bias")
    training = bound["training"] if "training" in bound else bound["train"]
    eps = np_wide(bound["eps"])

    arg = functools.partial(_place, stand_in=x)  # (buffer, offset) of an optional per-channel tensor

    flags = (np.int32(weight is not None), np.int32(bias is not None))
    forward = base_name(op) in ("native_batch_norm", "_native_batch_norm_legit")
    if forward and not training:  # one pass from the running statistics
        out = empty(x.shape, contiguous_strides(x.shape), x.dtype, index)
        dev.launch(dev.kernel("bn_eval", source), (x.numel(),), None, block_of(x).buffer, np.int64(x.storage_offset()),
                   *arg(bound.get("running_mean")), *arg(bound.get("running_var")), *arg(weight), *arg(bias),
                   *flags, eps, block_of(out).buffer, np.int64(c), np.int64(hw), np.int64(x.numel()))
        return out, empty([0], [1], x.dtype, index), empty([0], [1], x.dtype, index)
    with Scratch(dev) as scratch:  # partial sums and coefficients: pool buffers, not tensors
        coef = scratch.buffer(c * 4 * wide.itemsize)  # per channel: the affine map bn_apply uses, and more

        def partials(grad=None, center=None):
            return _bn_partials(dev, source, local, scratch, wide, x, arg(grad), arg(center), c, hw, m,
                                grad is not None)

        if forward:  # training
            running_mean, running_var = bound.get("running_mean"), bound.get("running_var")
            out = empty(x.shape, contiguous_strides(x.shape), x.dtype, index)
            save_mean, save_invstd = empty([c], [1], x.dtype, index), empty([c], [1], x.dtype, index)
            sums, parts = partials()
            running = running_mean is not None and running_var is not None
            dev.launch(dev.kernel("bn_forward_stats", source), (c,), None, sums, parts, np.int64(m),
                       block_of(x).buffer, np.int64(x.storage_offset()), np.int64(hw), *arg(weight), *arg(bias),
                       *flags, block_of(save_mean).buffer, block_of(save_invstd).buffer, *arg(running_mean),
                       *arg(running_var), np.int32(running), eps, np_wide(bound["momentum"]), coef, np.int64(c))
            dev.launch(dev.kernel("bn_apply", source), (x.numel(),), None, block_of(x).buffer,
                       np.int64(x.storage_offset()), coef, block_of(out).buffer, np.int64(c),
                       np.int64(hw), np.int64(x.numel()))
            return out, save_mean, save_invstd
        grad, mask = bound["grad_out"], bound["output_mask"]
        center, spread = (bound["save_mean"], bound["save_invstd"]) if training else \
            (bound["running_mean"], bound["running_var"])
        grad_weight, grad_bias = empty([c], [1], x.dtype, index), empty([c], [1], x.dtype, index)
        sums, parts = partials(grad, center)
        dev.launch(dev.kernel("bn_backward_stats", source), (c,), None, sums, parts, np.int64(m),
                   *arg(center), *arg(spread), np.int32(not training), eps, *arg(weight), flags[0], np.int32(training),
                   block_of(grad_weight).buffer, block_of(grad_bias).buffer, coef, np.int64(c))
        grad_input = None
        if mask[0]:
            grad_input = empty(x.shape, contiguous_strides(x.shape), x.dtype, index)
            dev.launch(dev.kernel("bn_backward_apply", source), (x.numel(),), None, block_of(grad).buffer,
                       np.int64(grad.storage_offset()), block_of(x).buffer, np.int64(x.storage_offset()),
                       coef, block_of(grad_input).buffer, np.int64(c), np.int64(hw), np.int64(x.numel()))
        return grad_input, grad_weight if mask[1] else None, grad_bias if mask[2] else None


def _bn_partials(dev, source: str, local: int, scratch: Scratch, wide, x: torch.Tensor, grad: tuple, center: tuple,
                 c: int, hw: int, m: int, backward: bool) -> tuple:
    """bn_partials over a contiguous (N, C, HW) x into a scratch buffer: (buffer, parts as np.int64)."""
    parts = max(1, -(-m // BN_PART))
    out = scratch.buffer(c * parts * 2 * wide.itemsize)
    dev.launch(dev.kernel("bn_partials", source), (c * parts * local,), (local,), block_of(x).buffer,
               np.int64(x.storage_offset()), *grad, *center, out, np.int64(c), np.int64(hw), np.int64(m),
               np.int64(BN_PART), np.int64(parts), np.int32(backward))
    return out, np.int64(parts)


def bn_fold(weight: torch.Tensor, bias, bn_weight, bn_bias, running_mean: torch.Tensor, running_var: torch.Tensor,
            eps: float) -> tuple:
    """(weight', bias') of a convolution with the eval-mode batch norm after it folded in: weight' is weight scaled
    per output channel by bn_weight / sqrt(running_var + eps) (bn_eval's scale), bias' (C, 1, 1) is
    bn_bias + (bias - running_mean) * that scale, so conv(x, weight') + bias' is the batch norm of conv(x, weight,
    bias). One launch (graph_rewrite.py puts it where the batch norm's was)."""
    tensors = [t for t in (weight, bias, bn_weight, bn_bias, running_mean, running_var) if t is not None]
    if weight.dtype not in (torch.float32, torch.float64) or weight.dim() < 1 or \
            any(t.dtype != weight.dtype or t.device != weight.device for t in tensors) or \
            any(t.dim() != 1 or t.numel() != weight.shape[0] or not t.is_contiguous() for t in tensors[1:]):
        raise NoKernel("batch norm fold: parameters of another dtype, device or shape")
    weight = contiguous(weight)
    c = weight.shape[0]
    dev = device_of(weight)
    index = weight.device.index
    out_w = empty(list(weight.shape), contiguous_strides(weight.shape), weight.dtype, index)
    out_b = empty([c, 1, 1], [1, 1, 1], weight.dtype, index)
    if weight.numel():
        source, _, wide = _bn_setup(dev, weight.dtype)
        np_wide = np.float64 if wide == torch.float64 else np.float32
        arg = functools.partial(_place, stand_in=weight)
        dev.launch(dev.kernel("bn_fold", source), (weight.numel(),), None, *arg(weight), *arg(bias),
                   np.int32(bias is not None), *arg(running_mean), *arg(running_var), *arg(bn_weight), *arg(bn_bias),
                   np.int32(bn_weight is not None), np.int32(bn_bias is not None), np_wide(eps),
                   block_of(out_w).buffer, block_of(out_b).buffer, np.int64(weight.numel() // max(c, 1)),
                   np.int64(weight.numel()))
    return out_w, out_b


def _bn_setup(dev, dtype) -> tuple:
    """(kernel source, work-group size, accumulation dtype) of the batch-norm kernels for `dtype` on `dev`."""
    wide = torch.float64 if dtype == torch.float64 or dev.info.fp64 else torch.float32
    local = row_work_group(dev, 256)
    header = (f"T {cl_type(dtype)}", f"ACC {cl_type(wide)}", f"LOCAL {local}")
    return compiled_source(_BN_SOURCE, header), local, wide


def channel_sums(grad: torch.Tensor) -> torch.Tensor:
    """grad (N, C, ...) summed over every dimension but C (a convolution's bias gradient): the batch norm's
    per-channel work-group sums, no permuted copy of grad."""
    grad = contiguous(grad)
    n, c = grad.shape[0], grad.shape[1]
    hw = grad.numel() // max(n * c, 1)
    dev = device_of(grad)
    out = empty([c], [1], grad.dtype, grad.device.index)
    if grad.numel() == 0:
        pointwise("0", out, [])
        return out
    source, local, wide = _bn_setup(dev, grad.dtype)
    with Scratch(dev) as scratch:
        place = (block_of(grad).buffer, np.int64(grad.storage_offset()))
        sums, parts = _bn_partials(dev, source, local, scratch, wide, grad, place, place, c, hw, n * hw, True)
        dev.launch(dev.kernel("channel_sums", source), (c,), None, sums, parts, block_of(out).buffer, np.int64(c))
    return out


def _batch_norm_composed(op, bound):
    """Batch norm composed of this backend's elementwise and reduction kernels: any strides, mixed dtypes."""
    x = bound["input"]
    dims = [0] + list(range(2, x.dim()))
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    weight = bound.get("weight")
    count = x.numel() // max(x.shape[1], 1)
    training = bound["training"] if "training" in bound else bound["train"]
    if base_name(op) in ("native_batch_norm", "_native_batch_norm_legit"):  # the latter: under FlopCounterMode
        running_mean, running_var = bound.get("running_mean"), bound.get("running_var")
        if training:
            mean = aten.mean.dim(x, dims, False)
            centered = aten.sub.Tensor(x, mean.view(shape))
            variance = aten.mean.dim(aten.mul.Tensor(centered, centered), dims, False)
            invstd = aten.rsqrt.default(aten.add.Scalar(variance, bound["eps"]))
            momentum = bound["momentum"]
            if running_mean is not None:
                pointwise("a * (1 - m) + b * m", running_mean, [running_mean, mean], scalars={"m": momentum})
            if running_var is not None:
                unbiased = count / max(count - 1, 1)
                pointwise("a * (1 - m) + b * m * u", running_var, [running_var, variance],
                          scalars={"m": momentum, "u": unbiased})
        else:
            mean = running_mean
            invstd = aten.rsqrt.default(aten.add.Scalar(running_var, bound["eps"]))
            centered = aten.sub.Tensor(x, mean.view(shape))
        out = aten.mul.Tensor(centered, invstd.view(shape))
        if weight is not None:
            out = aten.mul.Tensor(out, weight.view(shape))
        if bound.get("bias") is not None:
            out = aten.add.Tensor(out, bound["bias"].view(shape))
        if not training:  # the CPU returns empty saved statistics in eval mode
            return out, empty([0], [1], x.dtype, x.device.index), empty([0], [1], x.dtype, x.device.index)
        return out, mean, invstd
    grad = bound["grad_out"]
    mask = bound["output_mask"]
    if training:
        mean, invstd = bound["save_mean"], bound["save_invstd"]
    else:
        mean = bound["running_mean"]
        invstd = aten.rsqrt.default(aten.add.Scalar(bound["running_var"], bound["eps"]))
    xhat = aten.mul.Tensor(aten.sub.Tensor(x, mean.view(shape)), invstd.view(shape))
    grad_input = grad_weight = grad_bias = None
    sum_grad = aten.sum.dim_IntList(grad, dims, False)
    sum_grad_xhat = aten.sum.dim_IntList(aten.mul.Tensor(grad, xhat), dims, False)
    scale = invstd if weight is None else aten.mul.Tensor(invstd, weight)
    if mask[0]:
        if training:
            inner = aten.sub.Tensor(aten.sub.Tensor(grad, aten.div.Scalar(sum_grad, count).view(shape)),
                                    aten.mul.Tensor(xhat, aten.div.Scalar(sum_grad_xhat, count).view(shape)))
            grad_input = aten.mul.Tensor(inner, scale.view(shape))
        else:
            grad_input = aten.mul.Tensor(grad, scale.view(shape))
    if mask[1]:
        grad_weight = sum_grad_xhat
    if mask[2]:
        grad_bias = sum_grad
    return grad_input, grad_weight, grad_bias
