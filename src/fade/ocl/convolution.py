"""2-D convolution forward and backward: depthwise kernels, direct grouped kernels, im2col + CLBlast GEMM in one of
several layouts (folded, per image, direct 1x1, own 1x1 GEMM), and Winograd F(2x2, 3x3); the layout measured once per shape
on GPUs (FADE_OCL_CONV_BENCHMARK), or chosen by FOLD_PIXELS. Kernels: kernels/convolution.cl, grouped_conv.cl and winograd.cl,
with the geometry compiled in.
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl import measured, runtime
from fade.ocl.gemm import mm_into, own_gemm, own_gemm_geometry, own_weight_grad_1x1, sum_pieces
from fade.ocl.memory import as_mat, block_of, contiguous_strides, device_of, empty, Mat, Scratch, strided_view
from fade.ocl.meta import base_name, remember
from fade.ocl.normalization import channel_sums
from fade.ocl.pointwise import contiguous, pointwise
from fade.ocl.settings import setting
from fade.ocl.sources import cl_type, compiled_source, load, NoKernel

aten = torch.ops.aten


_CONV_SOURCE = load("conv_readers.cl") + load("convolution.cl")

_GROUPED_SOURCE = load("conv_readers.cl") + load("grouped_conv.cl")

GROUPED_WGRAD_ACCUMULATORS = 72  # weights one weight-gradient work item of the grouped kernels sums (registers)

GROUPED_WGRAD_GROUPS = 2048  # work-groups the grouped weight gradient aims at (pixel chunks x weights' blocks)

GROUPED_LANES = 128  # work items of a grouped weight-gradient work-group


def _largest_divisor(n: int, most: int) -> int:
    return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)

_WINOGRAD_SOURCE = load("winograd.cl")


def winograd_convolution(dev: runtime.Device, src: torch.Tensor, weight: torch.Tensor, dst: torch.Tensor, pad: int,
              flip: bool, budget: int) -> None:
    """dst = the 3x3, stride-1 convolution of src (N, CI, H, W) with padding `pad`, by Winograd F(2x2, 3x3)
    (_WINOGRAD_SOURCE): per chunk of images, the input tiles transformed, one strided-batched GEMM over the 16
    transformed products, the output tiles transformed back. `flip`: the data gradient (weight is (CI, CO, 3, 3),
    used transposed and turned 180 degrees). src, weight and dst contiguous; dst (N, CO, OH, OW) written whole."""
    n, ci, h, w = src.shape
    co, oh, ow = dst.shape[1:]
    th, tw = -(-oh // 2), -(-ow // 2)
    size = src.element_size()
    chunk = max(1, min(n, budget // max(16 * (ci + co) * th * tw * size, 1)))
    fits = max(src.numel(), dst.numel(), 16 * max(ci, co) * chunk * th * tw, 16 * ci * co) < 2**31
    names = ("CI", "CO", "H", "W", "OH", "OW", "PAD", "TH", "TW")
    source = (f"#define T {cl_type(src.dtype)}\n#define IDX {'int' if fits else 'long'}\n" +
              "".join(f"#define {name} {value}{'' if fits else 'L'}\n"
                      for name, value in zip(names, (ci, co, h, w, oh, ow, pad, th, tw))) + _WINOGRAD_SOURCE)
    with Scratch(dev) as scratch:
        u = scratch.buffer(16 * co * ci * size)
        v = scratch.buffer(16 * ci * chunk * th * tw * size)
        m = scratch.buffer(16 * co * chunk * th * tw * size)
        dev.launch(dev.kernel("wino_weight", source), (co * ci,), None, block_of(weight).buffer,
                   np.int64(weight.storage_offset()), u, np.int32(flip))
        for first in range(0, n, chunk):
            tiles = min(chunk, n - first) * th * tw
            dev.launch(dev.kernel("wino_input", source), (ci * tiles,), None, block_of(src).buffer,
                       np.int64(src.storage_offset() + first * ci * h * w), v, np.int64(tiles))
            runtime.gemm(dev, src.dtype, False, False, co, tiles, ci, 1.0, u, 0, ci, v, 0, tiles, 0.0, m, 0, tiles,
                         batch=16, strides=(co * ci, ci * tiles, co * tiles))
            dev.launch(dev.kernel("wino_output", source), (co * tiles,), None, m, block_of(dst).buffer,
                       np.int64(dst.storage_offset() + first * co * oh * ow), np.int64(tiles))


FOLD_PIXELS = 1024  # output pixels per image below which a convolution's GEMM spans all of a chunk's images

# The im2col columns of as many images as fit this workspace are built at once: 1/32 of the device's memory (2.5
# GB on an 80 GB H100, 256 MB on 8 GB), at least 256 MB. Fewer chunks mean fewer commands per convolution, each
# of whose GEMM calls costs ~130 us of CLBlast host time, and wider GEMMs.
CONV_WORKSPACE_SHARE = 1 / 32

CONV_WORKSPACE_MIN_BYTES = 256 << 20

CONV_WORKSPACE_BYTES: int | None = None  # a fixed workspace instead (the tests' small chunks)


# A forward without bias on contiguous tensors whose layout is one launch per group (depthwise, per-image-own)
# keeps a plan: the next call with the same geometry and settings allocates and launches, skipping the
# layout's set-up (~25 us of Python a convolution); mobilenet_v2 makes 52 a step.
conv_plans: dict = {}


def _own_forward_plan(dev, out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, groups: int):
    """A 1x1 convolution's forward by own_gemm (per-image-own), out[i]_g = W_g @ x[i]_g, with the geometry of
    the call that made `out`: the matrices own_gemm got then, and per call only the tensors' offsets."""
    n, c, cout = x.shape[0], x.shape[1], out.shape[1]
    cg, coutg, length = c // groups, cout // groups, x.numel() // max(n * c, 1)
    kernel, grid = own_gemm_geometry(dev, as_mat(out, coutg, length), as_mat(weight, coutg, cg),
                                     as_mat(x, cg, length), n, (0, c * length, cout * length))
    shape, strides = list(out.shape), list(out.stride())
    scalar = np.float64 if x.dtype == torch.float64 else np.float32

    def forward(x, weight):
        out = empty(shape, strides, x.dtype, x.device.index)
        for group in range(groups):  # the offsets as_mat(..., start) gives in the layout's loop
            dev.launch(kernel, grid, (16, 16, 1), block_of(weight).buffer,
                       np.int64(weight.storage_offset() + group * coutg * cg), block_of(x).buffer,
                       np.int64(x.storage_offset() + group * cg * length), block_of(out).buffer,
                       np.int64(group * coutg * length), scalar(1.0), scalar(0.0))
        return out

    return forward


def convolution(op, args, kwargs, bound):
    """2-D convolution forward and backward. Depthwise (one input channel per group): direct kernels. Otherwise
    im2col over a chunk of images at once + CLBlast GEMM: forward and backward-data as one strided-batched GEMM
    per group and chunk, backward-weight as one GEMM over the chunk's columns; col2im gathers (no atomics)."""
    x, weight = bound["input"], bound["weight"]
    if bound["transposed"] or x.dim() != 4 or x.dtype not in (torch.float32, torch.float64):
        raise NoKernel("convolution beyond 2-D, non-transposed float")
    plan_key = None
    if op is aten.convolution.default and bound.get("bias") is None and x.is_contiguous() and weight.is_contiguous():
        plan_key = (x.shape, x.dtype, weight.shape, tuple(bound["stride"]), tuple(bound["padding"]),
                    tuple(bound["dilation"]), bound["groups"], x.device.index, CONV_OWN_GEMM, CONV_BENCHMARK)
        plan = conv_plans.get(plan_key)
        if plan is not None:
            return plan(x, weight)
    x, weight = contiguous(x), contiguous(weight)
    n, c, h, w = x.shape
    cout, cg, kh, kw = weight.shape
    groups = bound["groups"]
    (sh, sw), (ph, pw), (dh, dw) = bound["stride"], bound["padding"], bound["dilation"]
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    length, kk = oh * ow, cg * kh * kw
    coutg = cout // groups
    dev = device_of(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    # the geometry is compiled in (one program per convolution shape, built once, cached on disk by pyopencl):
    # the kernels' divisions by constants become multiplications, and indices are 32-bit where they fit
    fits = max(n * c * h * w, n * cout * oh * ow, c * kh * kw * n * length) < 2**31
    names = ("N", "C", "H", "W", "KH", "KW", "OH", "OW", "SH", "SW", "PH", "PW", "DH", "DW", "M")
    values = (n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, coutg)
    header = (f"T {cl_type(x.dtype)}", f"ACC {wide}", f"IDX {'int' if fits else 'long'}")
    source = compiled_source(_CONV_SOURCE, header, names, values, not fits)
    index = x.device.index
    forward = base_name(op) == "convolution"
    if not forward:
        grad = contiguous(bound["grad_output"])
        mask = bound["output_mask"]
    if cg == 1 and groups == c and groups > 1:
        if forward:
            shape, strides = [n, cout, oh, ow], contiguous_strides([n, cout, oh, ow])
            kernel = dev.kernel("depthwise", source)

            def depthwise(x, weight):
                out = empty(shape, strides, x.dtype, index)
                if out.numel():
                    dev.launch(kernel, (out.numel(),), None, block_of(x).buffer, np.int64(x.storage_offset()),
                               block_of(weight).buffer, np.int64(weight.storage_offset()), block_of(out).buffer)
                return out

            if plan_key is not None:
                remember(conv_plans, plan_key, depthwise)
            return _conv_bias(depthwise(x, weight), bound, cout)
        grad_input = grad_weight = None
        if mask[0]:
            grad_input = empty([n, c, h, w], contiguous_strides([n, c, h, w]), x.dtype, index)
            if grad_input.numel():
                dev.launch(dev.kernel("depthwise_grad_input", source), (grad_input.numel(),), None,
                           block_of(grad).buffer, np.int64(grad.storage_offset()), block_of(weight).buffer,
                           np.int64(weight.storage_offset()), block_of(grad_input).buffer)
        if mask[1]:
            grad_weight = empty([cout, cg, kh, kw], contiguous_strides([cout, cg, kh, kw]), x.dtype, index)
            weights = cout * kh * kw
            if n and weights:  # per image partial sums in a pool buffer, then summed over the images
                with Scratch(dev) as scratch:
                    partial = scratch.buffer(n * weights * x.element_size())
                    dev.launch(dev.kernel("depthwise_grad_weight", source), (n * weights,), None, block_of(grad).buffer,
                               np.int64(grad.storage_offset()), block_of(x).buffer, np.int64(x.storage_offset()),
                               partial)
                    sum_pieces(dev, partial, n, as_mat(grad_weight, weights, 1), 0.0)
            elif weights:
                pointwise("0", grad_weight, [])
        return grad_input, grad_weight, _conv_grad_bias(grad, mask)
    # The GEMM layout, per shape: every image of a chunk in one GEMM (n = images x pixels) and a permuting copy
    # ("folded"), or one strided-batched GEMM call over the images (n = one image's pixels; a 1x1 convolution
    # then needs no im2col: x is its own columns). Measured per shape on GPUs (CONV_BENCHMARK, like
    # cudnn.benchmark); else folded below FOLD_PIXELS (CLBlast ran resnet50's 512 x 49 x 4608 per image x 64 at
    # 11 TFLOP/s on the H100).
    one_by_one = (kh, kw, sh, sw, ph, pw, dh, dw) == (1, 1, 1, 1, 0, 0, 1, 1)
    budget = min(CONV_WORKSPACE_BYTES or max(CONV_WORKSPACE_MIN_BYTES,
                                             int(dev.info.global_memory_bytes * CONV_WORKSPACE_SHARE)),
                 dev.info.max_allocation_bytes // 2)
    def w_group(group: int) -> Mat:  # the group's weights as (coutg x kk)
        return as_mat(weight, coutg, kk, group * coutg * kk)

    def gemm_convolution(fold: bool, direct: bool, want_input: bool = True, own: bool = False):
        with Scratch(dev) as scratch:  # the im2col columns: pool buffers, not tensors
            return convolution_with(fold, direct, scratch, not forward and mask[0] and want_input, own)

    def convolution_with(fold: bool, direct: bool, scratch: Scratch, grad_in: bool, own: bool = False):
        batched = own_gemm if own else mm_into  # the 1x1 per-image GEMMs: FADE's kernel or CLBlast's
        if forward and direct:  # out[i]_g = W_g @ x[i]_g, every image in one strided-batched GEMM per group
            out = empty([n, cout, oh, ow], contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            if n and length and out.numel():
                for group in range(groups):
                    batched(as_mat(out, coutg, length, group * coutg * length), w_group(group),
                            as_mat(x, cg, length, group * cg * length), 1.0, 0.0, batch=n,
                            strides=(0, c * length, cout * length))
            return _conv_bias(out, bound, cout)
        per_image = (c * kh * kw * 2 + cout) * length * x.element_size()
        chunk = max(1, min(n, budget // max(per_image, 1)))
        has_cols = c * kh * kw * chunk * length > 0
        # the columns: the forward's GEMM operand, the weight gradient's; a data gradient alone needs none
        # a 1x1 weight gradient by own_gemm reads grad and x in place (per-image-own): no columns
        own_wgrad = own and direct and not forward and mask[1]
        wgrad = not forward and mask[1] and not own_wgrad  # the weight gradient through columns and CLBlast
        cols_m = scratch.mat(x.dtype, c * kh * kw, chunk * length) if forward or wgrad else None

        def columns(group: int, width: int) -> Mat:  # group's rows of the columns, the first `width` of them
            return cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, width)

        def im2col(first: int, count: int) -> None:
            dev.launch(dev.kernel("im2col", source), (count * length, c * kh * kw), None, block_of(x).buffer,
                       np.int64(x.storage_offset() + first * c * h * w), cols_m.buffer, np.int64(chunk * length))

        if forward:
            out = empty([n, cout, oh, ow], contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            folded = empty([cout, chunk * length], [chunk * length, 1], x.dtype, index) if fold else None
            folded_m = as_mat(folded) if fold else None
            for first in range(0, n, chunk):
                count = min(chunk, n - first)
                if not has_cols or not out.numel():
                    break
                im2col(first, count)
                if fold:  # out_g (coutg x count*L) = W_g @ cols_g, then out[image, channel] = folded[channel, image]
                    for group in range(groups):
                        mm_into(folded_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                                 w_group(group), columns(group, count * length), 1.0, 0.0)
                    pointwise("a", strided_view(out, first * cout * length, (cout, count, length),
                                            (length, cout * length, 1)),
                              [strided_view(folded, 0, (cout, count, length), (chunk * length, length, 1))])
                    continue
                plane = as_mat(out, cout, length, first * cout * length)
                for group in range(groups):  # out[i] (coutg x L) = W_g (coutg x kk) @ cols_g[:, image i]
                    mm_into(plane.row_range(group * coutg, (group + 1) * coutg), w_group(group),
                             columns(group, length), 1.0, 0.0, batch=count, strides=(0, length, cout * length))
            return _conv_bias(out, bound, cout)
        grad_input = grad_weight = None
        if grad_in:
            grad_input = empty([n, c, h, w], contiguous_strides([n, c, h, w]), x.dtype, index)
            if direct:  # grad_x[i]_g = W_g^T @ grad[i]_g straight into grad_input: no columns, no col2im
                for group in range(groups):
                    if n and length:
                        batched(as_mat(grad_input, cg, length, group * cg * length), w_group(group).t(),
                                as_mat(grad, coutg, length, group * coutg * length), 1.0, 0.0, batch=n,
                                strides=(0, cout * length, c * length))
            else:
                grad_cols_m = scratch.mat(x.dtype, c * kh * kw, chunk * length)
        if mask[1]:
            grad_weight = empty([cout, cg, kh, kw], contiguous_strides([cout, cg, kh, kw]), x.dtype, index)
            gw = as_mat(grad_weight, cout, kk)  # the first chunk's GEMM writes it (beta 0), the others add
            if own_wgrad and n and length and grad_weight.numel():
                own_weight_grad_1x1(dev, grad, x, grad_weight, groups)
        if wgrad or (grad_in and fold):  # grad with the chunk's images side by side: (cout, count * L)
            grad_t = empty([cout, chunk * length], [chunk * length, 1], x.dtype, index)
            grad_t_m = as_mat(grad_t)
        for first in range(0, n, chunk):
            count = min(chunk, n - first)
            if not has_cols or not length:
                break
            plane = as_mat(grad, cout, length, first * cout * length)
            if wgrad or (grad_in and fold):
                pointwise("a", strided_view(grad_t, 0, (cout, count, length), (chunk * length, length, 1)),
                          [strided_view(grad, first * cout * length, (cout, count, length),
                                        (length, cout * length, 1))])
            if wgrad:  # gW_g += grad_g (coutg x count*L) @ cols_g^T: the chunk's images in one GEMM
                im2col(first, count)
                for group in range(groups):
                    mm_into(gw.row_range(group * coutg, (group + 1) * coutg),
                             grad_t_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                             columns(group, count * length).t(), 1.0, 1.0 if first else 0.0)
            if grad_in and not direct:  # grad_cols_g[:, image i] = W_g^T @ grad_g[i], then col2im
                for group in range(groups):
                    if fold:  # all the chunk's images in one GEMM
                        mm_into(grad_cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, count * length),
                                 w_group(group).t(),
                                 grad_t_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                                 1.0, 0.0)
                        continue
                    mm_into(grad_cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, length),
                             w_group(group).t(), plane.row_range(group * coutg, (group + 1) * coutg), 1.0, 0.0,
                             batch=count, strides=(0, cout * length, length))
                dev.launch(dev.kernel("col2im", source), (count * c * h * w,), None, grad_cols_m.buffer,
                           block_of(grad_input).buffer, np.int64(first * c * h * w), np.int64(chunk * length),
                           np.int64(count))
        if grad_in and not (has_cols and length) and not (direct and n and length):
            pointwise("0", grad_input, [])
        if mask[1] and not (n and (has_cols or own_wgrad) and length):
            pointwise("0", grad_weight, [])
        return grad_input, grad_weight, _conv_grad_bias(grad, mask)

    def grouped():  # kernels/grouped_conv.cl: every group in one launch, no columns
        ocb, icb = _largest_divisor(coutg, 8), _largest_divisor(cg, 8)
        wicb = _largest_divisor(cg, max(1, GROUPED_WGRAD_ACCUMULATORS // (kh * kw)))
        pixels = n * length
        blocks = cout * (cg // wicb)
        chunks = max(1, min(-(-GROUPED_WGRAD_GROUPS // blocks), -(-pixels // GROUPED_LANES)))
        chunk = -(-pixels // chunks)
        chunks = -(-pixels // chunk) if pixels else 1
        gheader = (f"T {cl_type(x.dtype)}", f"ACC {cl_type(x.dtype)}", f"IDX {'int' if fits else 'long'}")

        def gsource(block: int):  # the program with ICB = block
            return compiled_source(_GROUPED_SOURCE, gheader, names + ("CG", "OCB", "ICB", "CHUNK", "LANES"),
                                   values + (cg, ocb, block, chunk, GROUPED_LANES), not fits)

        if forward:
            out = empty([n, cout, oh, ow], contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            if out.numel():
                dev.launch(dev.kernel("grouped_forward", gsource(icb)), (-(-pixels // 64) * 64, cout // ocb), (64, 1),
                           block_of(x).buffer, np.int64(x.storage_offset()), block_of(weight).buffer,
                           np.int64(weight.storage_offset()), block_of(out).buffer)
            return _conv_bias(out, bound, cout)
        grad_input = grad_weight = None
        if mask[0]:
            grad_input = empty([n, c, h, w], contiguous_strides([n, c, h, w]), x.dtype, index)
            if grad_input.numel():
                dev.launch(dev.kernel("grouped_grad_input", gsource(icb)), (-(-(n * h * w) // 64) * 64, c // icb),
                           (64, 1), block_of(grad).buffer, np.int64(grad.storage_offset()), block_of(weight).buffer,
                           np.int64(weight.storage_offset()), block_of(grad_input).buffer)
        if mask[1]:
            grad_weight = empty([cout, cg, kh, kw], contiguous_strides([cout, cg, kh, kw]), x.dtype, index)
            if pixels and grad_weight.numel():
                with Scratch(dev) as scratch:
                    partial = scratch.buffer(chunks * grad_weight.numel() * x.element_size())
                    dev.launch(dev.kernel("grouped_grad_weight", gsource(wicb)), (chunks * blocks * GROUPED_LANES,),
                               (GROUPED_LANES,), block_of(grad).buffer, np.int64(grad.storage_offset()),
                               block_of(x).buffer, np.int64(x.storage_offset()), partial)
                    sum_pieces(dev, partial, chunks, as_mat(grad_weight, cout, kk), 0.0)
            elif grad_weight.numel():
                pointwise("0", grad_weight, [])
        return grad_input, grad_weight, _conv_grad_bias(grad, mask)

    def run(layout: str):
        if layout == "grouped":
            return grouped()
        if layout != "winograd":
            return gemm_convolution(layout == "folded", one_by_one and layout in ("per-image", "per-image-own"),
                                    own=layout == "per-image-own")
        if forward:
            out = empty([n, cout, oh, ow], contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            if out.numel():
                winograd_convolution(dev, x, weight, out, ph, False, budget)
            return _conv_bias(out, bound, cout)
        grad_input = None
        if mask[0]:
            grad_input = empty([n, c, h, w], contiguous_strides([n, c, h, w]), x.dtype, index)
            if grad_input.numel():
                winograd_convolution(dev, grad, weight, grad_input, 2 - ph, True, budget)
        _, grad_weight, grad_bias = gemm_convolution(length < FOLD_PIXELS, False, want_input=False)
        return grad_input, grad_weight, grad_bias

    winograd = (kh, kw, sh, sw, dh, dw, groups) == (3, 3, 1, 1, 1, 1, 1) and ph == pw and ph in (0, 1, 2) and \
        CONV_WINOGRAD != "off"
    if winograd and CONV_WINOGRAD == "on":
        return run("winograd")
    own = one_by_one and CONV_OWN_GEMM != "off"

    def chosen(layout: str):  # run the layout; remember a plan for a 1x1 forward by own_gemm
        result = run(layout)
        if layout == "per-image-own" and forward and plan_key is not None and n and length:
            remember(conv_plans, plan_key, _own_forward_plan(dev, result, x, weight, groups))
        return result

    if own and CONV_OWN_GEMM == "on":
        return chosen("per-image-own")
    # grouped kernels: several input channels a group, windows whose taps' lane sums fit local memory
    direct_grouped = groups > 1 and cg > 1 and CONV_GROUPED != "off" and \
        kh * kw * GROUPED_LANES * x.element_size() <= dev.info.local_memory_bytes // 2
    if direct_grouped and CONV_GROUPED == "on":
        return run("grouped")
    key = (dev.index, forward, None if forward else tuple(mask), tuple(x.shape), tuple(weight.shape),
           (sh, sw, ph, pw, dh, dw), groups, x.dtype)
    layouts = ("folded", "per-image") + (("winograd",) if winograd else ()) + (("per-image-own",) if own else ()) + \
        (("grouped",) if direct_grouped else ())
    return chosen(_conv_layout(dev, key, layouts, "folded" if length < FOLD_PIXELS else "per-image", run))


# on | off | auto (GPUs only)
CONV_BENCHMARK = setting("FADE_OCL_CONV_BENCHMARK")

# Winograd F(2x2, 3x3) for stride-1 3x3 convolutions: auto, one of the layouts measured (so used only where
# measured faster, GPUs); on, always where it applies (the tests); off, never
CONV_WINOGRAD = setting("FADE_OCL_CONV_WINOGRAD")

# FADE's own GEMM kernel for a 1x1 convolution's per-image GEMMs (forward and data gradient): auto, one of the
# measured layouts (it saves CLBlast's host cost per call, and wins where that cost is most of the call); on,
# always where it applies (the tests); off, never
CONV_OWN_GEMM = setting("FADE_OCL_CONV_OWN_GEMM")

# FADE's direct kernels for grouped convolutions (kernels/grouped_conv.cl): auto, one of the measured layouts;
# on, always where they apply (the tests); off, never
CONV_GROUPED = setting("FADE_OCL_CONV_GROUPED")

conv_layouts: dict = {}  # convolution key -> "folded", "per-image" or "winograd", as measured


def _conv_layout(dev: runtime.Device, key: tuple, layouts: tuple, default: str, run) -> str:
    """Which of `layouts` a convolution runs: measured once per shape (measured.fastest) on GPUs or with
    CONV_BENCHMARK on, else `default`. Not while a graph is being captured (its launches would be recorded), nor,
    under auto, for a new shape once the device's build budget is spent (runtime.Device.builds_spent: each
    layout builds programs of its own for the shape)."""
    measuring = CONV_BENCHMARK == "on" or (CONV_BENCHMARK == "auto" and dev.info.kind == "gpu" and
                                           (key in conv_layouts or not dev.builds_spent()))
    if not measuring or (dev.capture is not None and key not in conv_layouts):
        return default
    return measured.fastest(dev, conv_layouts, key, layouts, run)


def _conv_bias(out: torch.Tensor, bound: dict, cout: int) -> torch.Tensor:
    if bound.get("bias") is not None:
        out = aten.add.Tensor(out, bound["bias"].view(1, cout, 1, 1))
    return out


def _conv_grad_bias(grad: torch.Tensor, mask):
    return channel_sums(grad) if mask[2] else None
