"""Matrix multiplies: mm, addmm, bmm and baddbmm through CLBlast (runtime.gemm) or FADE's tiled kernel
(kernels/tiled_gemm.cl), whichever gemm_kernel measured faster for the shape on a GPU; split-K for a small output
with a long k (either way); and the small GEMM kernel (kernels/own_gemm.cl) that 1x1 convolutions' per-image
layouts use, where CLBlast's host cost (~50-130 us a call on the H100's host) would outweigh the work.
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl import measured, runtime
from fade.ocl.memory import as_mat, block_of, contiguous_strides, empty, Mat, Scratch
from fade.ocl.meta import base_name, meta_result_of, written_arguments
from fade.ocl.pointwise import contiguous, finish, pointwise
from fade.ocl.settings import setting
from fade.ocl.sources import cl_type, compiled_source, load, NoKernel

aten = torch.ops.aten


def gemm_layout(m: Mat):
    """(transposed, leading dimension) of a matrix CLBlast can read in place, or None."""
    if m.col_stride == 1 and m.row_stride >= max(m.cols, 1):
        return False, m.row_stride
    if m.row_stride == 1 and m.col_stride >= max(m.rows, 1):
        return True, m.col_stride
    return None


def _gemm_operand(m: Mat) -> tuple:
    """(matrix, transposed, leading dimension), copying the matrix if neither layout fits."""
    layout = gemm_layout(m)
    if layout is not None:
        return (m,) + layout
    dense = empty([m.rows, m.cols], [m.cols, 1], m.dtype, m.index)
    pointwise("a", dense, [m.tensor()])
    return as_mat(dense), False, max(m.cols, 1)


def mm_into(out, a, b, alpha: float, beta: float, batch: int = 1, strides: tuple = (0, 0, 0),
            source: torch.Tensor | None = None) -> None:
    """out = alpha * a @ b + beta * out for 2-D device tensors or _Mats (out row-major); with `batch` > 1, that
    many products whose a, b and out start `strides` elements after the previous ones (those given are the
    first). Through CLBlast or tiled_gemm, whichever gemm_kernel picks for the shape. `source` (unbatched): a
    tensor that broadcasts to out's shape, which the beta term reads instead of out (addmm's self): the tiled
    kernel reads it in place; for the others it is copied into out first."""
    out, a, b = (x if isinstance(x, Mat) else as_mat(x) for x in (out, a, b))
    m, k = a.shape
    n = b.cols
    if m == 0 or n == 0 or batch == 0:
        return
    if out.col_stride != 1 and out.rows > 1 and out.cols > 1:
        raise ValueError("a GEMM's output must be row-major")
    if k == 0 and batch == 1:
        target = out.tensor()
        if beta:
            pointwise("a * beta", target, [target if source is None else source], scalars={"beta": beta})
        else:
            pointwise("0", target, [])
        return
    kernel = gemm_kernel(out, a, b, batch, strides)
    read = None
    if source is not None and beta:
        if kernel == "clblast" or kernel.endswith("/split") or batch > 1:
            pointwise("a", out.tensor(), [source])
        else:
            read = _broadcast_mat(source, m, n)
    if kernel == "clblast":
        _clblast_mm(out, a, b, alpha, beta, batch, strides)
    else:
        tiled_mm(out, a, b, alpha, beta, batch, strides, kernel, source=read)


def _broadcast_mat(t: torch.Tensor, m: int, n: int) -> Mat:
    """A tensor of at most two dimensions that broadcasts to (m, n) as an m x n Mat: stride 0 along a
    dimension it lacks or has once (no view made: each costs a dispatch)."""
    sizes = (1,) * (2 - t.dim()) + tuple(t.shape)
    steps = (0,) * (2 - t.dim()) + tuple(t.stride())
    return Mat(block_of(t).buffer, t.dtype, t.device.index or 0, t.storage_offset(), m, n,
               steps[0] if sizes[0] != 1 else 0, steps[1] if sizes[1] != 1 else 0, t)


def _clblast_mm(out: Mat, a: Mat, b: Mat, alpha: float, beta: float, batch: int, strides: tuple) -> None:
    m, k = a.shape
    n = b.cols
    if batch > 1 and (gemm_layout(a) is None or gemm_layout(b) is None):
        raise ValueError("a batched GEMM operand must be readable in place")  # callers pass strided views
    a, trans_a, lda = _gemm_operand(a)
    b, trans_b, ldb = _gemm_operand(b)
    pieces = _split_k_pieces(m, n, k) if batch == 1 else 0
    if pieces >= 2:
        return _mm_split_k(out, a, trans_a, lda, b, trans_b, ldb, alpha, beta, pieces)
    dev, ldc = runtime.device(out.index), max(out.row_stride, n)
    with Scratch(dev) as scratch:
        temp = None
        if batch == 1:  # CLBlast's padded copies in a pool buffer, not one it makes and frees per call
            nbytes = runtime.gemm_temp_bytes(dev, out.dtype, trans_a, trans_b, m, n, k, a.offset, lda, b.offset, ldb,
                                             out.offset, ldc)
            temp = scratch.buffer(nbytes) if nbytes else None
        runtime.gemm(dev, out.dtype, trans_a, trans_b, m, n, k, alpha, a.buffer, a.offset, lda, b.buffer, b.offset,
                     ldb, beta, out.buffer, out.offset, ldc, batch=batch, strides=strides, temp=temp)


# FADE's tiled kernel or CLBlast, per GEMM shape: auto, measured once per shape on GPUs for products of at least
# GEMM_MEASURE_FLOPS (both kernels' speed and CLBlast's host cost count), the tiled kernel's runtime-geometry
# program unmeasured for smaller ones on GPUs, CLBlast elsewhere; measure, measured on any device and size (the
# tests); on, the tiled kernel always (the tests); off, CLBlast always
GEMM_OWN = setting("FADE_OCL_GEMM_OWN")

gemm_kernels: dict = {}  # GEMM key -> "clblast" or a tiled_mm kernel name, as measured

GEMM_MEASURE_SHARE = 16  # a shape is measured when its scratch output fits 1/16 of the device's memory

# auto measures a GEMM of at least this many flops per call. Measuring builds one program per tiling for the shape
# (0.3-1 s each on NVIDIA's compiler), while a small product's gain is microseconds: on the H200 the tiled kernel
# saved 4-13 us on vit's 0.1 GFLOP head and 25-230 us on resnet50's 6.6-13 GFLOP products
# (results/ocl-gemm-h200-s15), and measuring every shape made mobilenet_v3_small's first training step take 219 s
# instead of 42 (results/ocl-table-h200-s16), its products all below 0.7 GFLOP. Smaller products run the tiled
# kernel's runtime-geometry program, built once per tiling and layout, not CLBlast: CLBlast costs 50-130 us of host
# time a call on the H100's host, a replayed launch a few; mobilenet_v3_small's graph-mode training step made 128
# CLBlast calls.
GEMM_MEASURE_FLOPS = 1 << 30


def _tiling_fits(dev: runtime.Device, tiling: str, dtype) -> bool:
    """Whether a tiling's work-group and its two local tiles fit the device."""
    bm, bn, bk, tm, tn = TILINGS[tiling]
    local_bytes = 2 * bk * (bm + 4 + bn + 4) * dtype.itemsize
    return (bm // tm) * (bn // tn) <= dev.max_work_group_size and local_bytes <= dev.info.local_memory_bytes


def tiled_options(dev: runtime.Device, m: int, n: int, k: int, batch: int, dtype=torch.float32) -> tuple:
    """The tiled_mm kernels a GEMM may run: two 128-row tilings, a narrow one, and, where 128 x 128 tiles give
    fewer work-groups than TILED_SPLIT_GROUPS per compute unit and k is long (a weight gradient's small output:
    gpt2's 768 x 3072 x 4096 makes 144 tiles on the H200's 132 compute units, one short wave), 128 x 128 split
    along k; each only where it fits the device (_tiling_fits)."""
    options = tuple(t for t in ("128x128t16x8", "128x64t8x8", "32x64") if _tiling_fits(dev, t, dtype))
    if options[:1] == ("128x128t16x8",) and batch == 1 and _few_tiles_long_k(dev, m, n, k, "128x128t16x8"):
        options += ("128x128t16x8/split",)
    return options


def _generic_tiling(dev: runtime.Device, m: int, dtype) -> str:
    """The tiled kernel, runtime-geometry program, for a product too small to measure: 32 x 64 tiles where m is
    at most 32, 64 x 64 otherwise (small tiles: these products make few), or CLBlast where neither fits."""
    for tiling in ("32x64", "64x64") if m <= 32 else ("64x64", "32x64"):
        if _tiling_fits(dev, tiling, dtype):
            return f"{tiling}/generic"
    return "clblast"


def gemm_kernel(out: Mat, a: Mat, b: Mat, batch: int, strides: tuple) -> str:
    """"clblast" or the tiled_mm kernel for this GEMM (GEMM_OWN): measured once per shape and layout."""
    m, k, n = a.rows, a.cols, b.cols
    if GEMM_OWN == "off" or out.dtype not in (torch.float32, torch.float64) or k == 0:
        return "clblast"  # (k == 0: beta * out, which mm_into and CLBlast's batched call do)
    dev = runtime.device(out.index)
    if GEMM_OWN == "auto" and dev.info.kind != "gpu":
        return "clblast"  # (decided before the options: every GEMM call asks)
    if GEMM_OWN == "auto" and 2 * m * n * k * batch < GEMM_MEASURE_FLOPS:
        return _generic_tiling(dev, m, out.dtype)
    key = (dev.index, out.dtype, m, n, k, batch, a.row_stride, a.col_stride, b.row_stride, b.col_stride,
           out.row_stride, strides)
    chosen = gemm_kernels.get(key) if GEMM_OWN != "on" else None  # only shapes that had options were measured
    if chosen is not None:
        return chosen
    options = tiled_options(dev, m, n, k, batch, out.dtype)
    if GEMM_OWN == "auto" and dev.builds_spent():  # the runtime-geometry programs: built once for every shape
        options = tuple(dict.fromkeys(f"{option.partition('/')[0]}/generic" for option in options))
    if not options:
        return "clblast"
    if GEMM_OWN == "on":
        return options[-1] if options[-1].endswith("/split") else options[0]
    nbytes = m * n * batch * out.dtype.itemsize
    if dev.capture is not None or nbytes > dev.info.global_memory_bytes // GEMM_MEASURE_SHARE:
        return "clblast"
    with Scratch(dev) as scratch:
        target = Mat(scratch.buffer(nbytes), out.dtype, out.index, 0, m, n, n)
        step = (strides[0], strides[1], m * n)

        def run(kernel: str) -> None:
            if kernel == "clblast":
                _clblast_mm(target, a, b, 1.0, 0.0, batch, step)
            else:
                tiled_mm(target, a, b, 1.0, 0.0, batch, step, kernel)

        return measured.fastest(dev, gemm_kernels, key, ("clblast",) + options, run)


_OWN_GEMM_SOURCE = load("own_gemm.cl")


def _own_gemm_kernel(dev: runtime.Device, dtype, values: dict):
    """own_gemm built for a geometry (`values`: the defines of _OWN_GEMM_SOURCE)."""
    header = (f"T {cl_type(dtype)}", f"ACC {'double' if dtype == torch.float64 else 'float'}")
    return dev.kernel("own_gemm", compiled_source(_OWN_GEMM_SOURCE, header, tuple(values), tuple(values.values()),
                                                   True))


OWN_GEMM_SPLIT_GROUPS = 512  # work-groups a split-K own_gemm aims at (the H100 has 132 compute units)


def own_weight_grad_1x1(dev: runtime.Device, grad: torch.Tensor, x: torch.Tensor, grad_weight: torch.Tensor,
                         groups: int) -> None:
    """A stride-1 1x1 convolution's weight gradient, gW_g = sum over images i and pixels l of grad[i, g, :, l]
    x[i, g, :, l]^T, read in place (no permuted copy of grad, no columns) by own_gemm walking k as (image,
    pixel) blocks, split along k into slices summed by sum_pieces: two launches per group."""
    n, c = x.shape[0], x.shape[1]
    cout = grad.shape[1]
    length = x.numel() // max(n * c, 1)
    cg, coutg, k = c // groups, cout // groups, n * length
    tiles = -(-cg // 64) * -(-coutg // 64)
    splits = max(1, min(OWN_GEMM_SPLIT_GROUPS // tiles, k // 256))
    chunk = -(-k // splits)
    chunk = -(-chunk // 16) * 16
    splits = -(-k // chunk)
    values = dict(M=coutg, N=cg, K=k, A_RS=length, A_CS=1, A_BS=0, B_RS=1, B_CS=length, B_BS=0, C_RS=cg,
                  C_BS=coutg * cg, KL=length, A_KB=cout * length, B_KB=c * length, KC=chunk)
    kernel = _own_gemm_kernel(dev, x.dtype, values)
    scalar = np.float64 if x.dtype == torch.float64 else np.float32
    gw = as_mat(grad_weight, cout, cg)
    with Scratch(dev) as scratch:
        partial = scratch.buffer(splits * coutg * cg * x.dtype.itemsize)
        for group in range(groups):
            dev.launch(kernel, (-(-cg // 64) * 16, -(-coutg // 64) * 16, splits), (16, 16, 1), block_of(grad).buffer,
                       np.int64(grad.storage_offset() + group * coutg * length), block_of(x).buffer,
                       np.int64(x.storage_offset() + group * cg * length), partial, np.int64(0), scalar(1.0),
                       scalar(0.0))
            sum_pieces(dev, partial, splits, gw.row_range(group * coutg, (group + 1) * coutg), 0.0)


def own_gemm(out: Mat, a: Mat, b: Mat, alpha: float, beta: float, batch: int = 1,
              strides: tuple = (0, 0, 0)) -> None:
    """out = alpha * a @ b + beta * out, `batch` times `strides` apart, by _OWN_GEMM_SOURCE: any strides for a
    and b, out row-major. One program per geometry (built once, disk-cached by pyopencl)."""
    if not (a.rows and b.cols and batch):
        return
    dev = runtime.device(out.index)
    kernel, grid = own_gemm_geometry(dev, out, a, b, batch, strides)
    scalar = np.float64 if out.dtype == torch.float64 else np.float32
    dev.launch(kernel, grid, (16, 16, 1), a.buffer, np.int64(a.offset), b.buffer, np.int64(b.offset), out.buffer,
               np.int64(out.offset), scalar(alpha), scalar(beta))


def own_gemm_geometry(dev: runtime.Device, out: Mat, a: Mat, b: Mat, batch: int, strides: tuple) -> tuple:
    """(kernel, global size) of own_gemm for these matrices' shapes and strides (their offsets are arguments)."""
    m, k, n = a.rows, a.cols, b.cols
    values = dict(M=m, N=n, K=k, A_RS=a.row_stride, A_CS=a.col_stride, A_BS=strides[0], B_RS=b.row_stride,
                  B_CS=b.col_stride, B_BS=strides[1], C_RS=out.row_stride, C_BS=strides[2])
    return _own_gemm_kernel(dev, out.dtype, values), (-(-n // 64) * 16, -(-m // 64) * 16, batch)


_TILED_GEMM_SOURCE = load("tiled_gemm.cl")

# tiled_gemm's tilings: name -> (BM, BN, BK, TM, TN), a BM x BN tile of C per work-group of (BN/TN) x (BM/TM)
# work items. The first two are what tiled_options offers: on the H200 (results/ocl-gemm-h200-s17), 128 items of
# 16 x 8 outputs each (231 registers, two work-groups per SM) ran the big products 12-16% faster than 256 items
# of 8 x 8 (39.5 against 34.3 TFLOP/s at 4096^3; cuBLAS fp32 50.7), and 128 x 64 tiles of 8 x 8 the products
# with a narrow side (35.5 against 28.8 at 4096 x 768 x 3072); a warp as 8 x 4 items instead of 16 x 2, k steps
# of 16 and 256-row tiles were slower.
TILINGS = {
    "128x128t16x8": (128, 128, 8, 16, 8),
    "128x64t8x8": (128, 64, 8, 8, 8),
    "128x128": (128, 128, 8, 8, 8),
    "128x128k16": (128, 128, 16, 8, 8),
    "128x64k16": (128, 64, 16, 8, 4),
    "128x64": (128, 64, 8, 8, 4),
    "64x128": (64, 128, 8, 4, 8),
    "64x64": (64, 64, 8, 4, 4),
    "64x64k16": (64, 64, 16, 4, 4),
    "32x64": (32, 64, 16, 4, 4),
}


def tiled_gemm_geometry(dev: runtime.Device, out: Mat, a: Mat, b: Mat, batch: int, strides: tuple, tiling: str,
                        split: int = 0, source: Mat | None = None, generic: bool = False) -> tuple:
    """(kernel, global size, local size, geometry arguments) of tiled_gemm for these matrices' shapes and strides
    (their offsets are arguments); `split` > 0: split-K in slices of `split` (a multiple of the tiling's BK) along
    the third work-group index; `source`: the matrix the beta term reads instead of `out` (unbatched). `generic`:
    the RUNTIME_GEOMETRY program (one per tiling, dtype, operand layout and index width), the shape and strides
    in the geometry arguments (numpy scalars, to pass after s_off); else they are compiled in and the geometry
    arguments are ()."""
    bm, bn, bk, tm, tn = TILINGS[tiling]
    m, k, n = a.rows, a.cols, b.cols
    s_rs, s_cs, s_bs = (source.row_stride, source.col_stride, 0) if source is not None else \
        (out.row_stride, 1, strides[2])
    geometry = dict(M=m, N=n, K=k, A_RS=a.row_stride, A_CS=a.col_stride, A_BS=strides[0], B_RS=b.row_stride,
                    B_CS=b.col_stride, B_BS=strides[1], C_RS=out.row_stride, C_BS=strides[2], S_RS=s_rs,
                    S_CS=s_cs, S_BS=s_bs)
    values = dict(A_K1=int(a.col_stride == 1 and a.rows > 1), B_K1=int(b.row_stride == 1 and b.cols > 1),
                  BM=bm, BN=bn, BK=bk, TM=tm, TN=tn)
    wide = max(m * max(a.row_stride, 1) + k * max(a.col_stride, 1) + batch * strides[0],
               k * max(b.row_stride, 1) + n * max(b.col_stride, 1) + batch * strides[1],
               m * max(out.row_stride, 1) + n + batch * strides[2], m * s_rs + n * s_cs) >= 2**31
    if generic:
        values["RUNTIME_GEOMETRY"] = 1
        index = np.int64 if wide else np.int32
        arguments = tuple(index(v) for v in geometry.values()) + (index(split),)
    else:
        threads = (bm // tm) * (bn // tn)
        a_batch, b_batch = (strides[0], strides[1]) if batch > 1 and not split else (0, 0)
        values["VA"] = int(_vector_loads(a.offset, a_batch, bm * bk, threads, values["A_K1"], (a.row_stride, k),
                                         (a.row_stride, a.col_stride, m)))
        values["VB"] = int(_vector_loads(b.offset, b_batch, bk * bn, threads, values["B_K1"], (b.col_stride, k),
                                         (b.col_stride, b.row_stride, n)))
        if split:
            values["KC"] = split
        values = {**geometry, **values}
        arguments = ()
    header = (f"T {cl_type(out.dtype)}", f"T4 {cl_type(out.dtype)}4", f"IDX {'long' if wide else 'int'}",
              f"ACC {'double' if out.dtype == torch.float64 else 'float'}")
    kernel = dev.kernel("tiled_gemm", compiled_source(_TILED_GEMM_SOURCE, header, tuple(values),
                                                       tuple(values.values()), wide))
    slices = -(-k // split) if split else batch
    return kernel, (-(-n // bn) * (bn // tn), -(-m // bm) * (bm // tm), slices), (bn // tn, bm // tm, 1), arguments


def _vector_loads(offset: int, batch_stride: int, tile: int, threads: int, k_unit: int, along_k: tuple,
                  across: tuple) -> bool:
    """Whether tiled_gemm may read an operand's tile of `tile` elements as T4s (VA / VB), along k where k is its
    unit-stride index (`k_unit`: A_K1 / B_K1; `along_k`: (the other stride, k)), else along m or n (`across`:
    (that index's stride, which must be 1, the other stride, its extent)): the work items share the T4s evenly,
    the offset and the batch stride keep each one aligned, and the other stride and the extent are multiples of 4,
    so that every T4 is aligned and lies wholly inside or outside the matrix."""
    if tile % (4 * threads) or offset % 4 or batch_stride % 4:
        return False
    if k_unit:
        other, extent = along_k
        return other % 4 == 0 and extent % 4 == 0
    unit, other, extent = across
    return unit == 1 and other % 4 == 0 and extent % 4 == 0


TILED_SPLIT_GROUPS = 4  # work-groups per compute unit a split tiled GEMM aims at


def tiled_mm(out: Mat, a: Mat, b: Mat, alpha: float, beta: float, batch: int = 1, strides: tuple = (0, 0, 0),
             kernel: str = "128x128t16x8", source: Mat | None = None) -> None:
    """out = alpha * a @ b + beta * out, `batch` times `strides` apart, by _TILED_GEMM_SOURCE (any strides for a
    and b, out row-major): one launch and no copies; "TILING/split": k in slices (partial products in a scratch
    buffer, then summed by sum_pieces: two launches); "TILING/generic": the program whose shape and strides are
    arguments, one for every shape. `source` (unsplit and unbatched only): the beta term reads it instead of out
    (addmm's bias, any strides, 0 for a broadcast dimension)."""
    if not (a.rows and b.cols and batch):
        return
    dev = runtime.device(out.index)
    scalar = np.float64 if out.dtype == torch.float64 else np.float32
    tiling, _, split = kernel.partition("/")
    generic = split == "generic"
    if generic and batch == 1 and (source is None or beta == 0) and \
            _few_tiles_long_k(dev, a.rows, b.cols, a.cols, tiling):
        split, source = "split", None
    if split != "split" or batch > 1:
        code, grid, local, geometry = tiled_gemm_geometry(dev, out, a, b, batch, strides, tiling, source=source,
                                                          generic=generic)
        s = source if source is not None else out
        dev.launch(code, grid, local, a.buffer, np.int64(a.offset), b.buffer, np.int64(b.offset), out.buffer,
                   np.int64(out.offset), scalar(alpha), scalar(beta), s.buffer, np.int64(s.offset), *geometry)
        return
    assert source is None, "a split tiled GEMM reads beta's term from out"
    bm, bn, bk = TILINGS[tiling][:3]
    m, k, n = a.rows, a.cols, b.cols
    tiles = -(-m // bm) * -(-n // bn)
    slices = max(1, min(-(-dev.info.compute_units * TILED_SPLIT_GROUPS // tiles), k // (4 * bk)))
    per_slice = -(-k // slices)
    chunk = -(-per_slice // bk) * bk  # a whole number of k steps
    slices = -(-k // chunk)
    with Scratch(dev) as scratch:
        partial = scratch.mat(out.dtype, slices * m, n)
        code, grid, local, geometry = tiled_gemm_geometry(dev, partial.row_range(0, m), a, b, slices,
                                                           (0, 0, m * n), tiling, chunk, generic=generic)
        dev.launch(code, grid, local, a.buffer, np.int64(a.offset), b.buffer, np.int64(b.offset), partial.buffer,
                   np.int64(0), scalar(alpha), scalar(0.0), partial.buffer, np.int64(0), *geometry)
        sum_pieces(dev, partial.buffer, slices, out, beta)


def _few_tiles_long_k(dev: runtime.Device, m: int, n: int, k: int, tiling: str) -> bool:
    """Whether an unbatched GEMM is worth splitting along k with this tiling: fewer tiles than TILED_SPLIT_GROUPS
    per compute unit and k of at least 1024. tiled_options offers the split then, and an unmeasured (generic)
    GEMM takes it: unsplit, a small convolution weight gradient's few tiles each walked the whole batch's pixels
    on one compute unit (mobilenet_v3_small's first, 16 x 27 x 802816: one work-group), and the H200's training
    step of the network went from 46 to 74 ms (results/ocl-table-h200-s18)."""
    bm, bn = TILINGS[tiling][:2]
    return k >= 1024 and -(-m // bm) * -(-n // bn) < TILED_SPLIT_GROUPS * dev.info.compute_units


SPLIT_K_CHUNK = 2048  # a GEMM's k is split into pieces of at least this many ...

SPLIT_K_PARTIALS = 1 << 22  # ... when the pieces' partial products (m x n each) fit this many elements


def _split_k_pieces(m: int, n: int, k: int) -> int:
    """How many slices of k a GEMM is split into (< 2: none): as many as SPLIT_K_CHUNK and SPLIT_K_PARTIALS
    allow, or fewer (down to half) when that divides k, so no leftover slice costs a GEMM call of its own
    (CLBlast spends ~130 us of host time per call on the H100's host)."""
    most = min(k // SPLIT_K_CHUNK, SPLIT_K_PARTIALS // max(m * n, 1))
    for pieces in range(most, max(1, most // 2), -1):
        if k % pieces == 0:
            return pieces
    return most


_SUM_PIECES_SOURCE = load("sum_pieces.cl")


def sum_pieces(dev, partial, pieces: int, out: "Mat", beta: float) -> None:
    """out = sum of `pieces` contiguous (out.rows x out.cols) partial products in `partial` + beta * out,
    accumulated in double where the device has fp64."""
    dtype = out.dtype
    wide = "double" if dtype == torch.float64 or dev.info.fp64 else "float"
    source = compiled_source(_SUM_PIECES_SOURCE, (f"T {cl_type(dtype)}", f"ACC {wide}"))
    scalar = np.float64 if dtype == torch.float64 else np.float32
    m, n = out.rows, out.cols
    dev.launch(dev.kernel("sum_pieces", source), (m * n,), None, partial, np.int64(pieces), np.int64(m), np.int64(n),
               out.buffer, np.int64(out.offset), np.int64(out.row_stride), scalar(beta))



def _mm_split_k(out, a, trans_a, lda, b, trans_b, ldb, alpha, beta, pieces) -> None:
    """out = alpha * a @ b + beta * out for a GEMM with a small output and a long k (a convolution's weight
    gradient sums over every pixel of the batch: mobilenet_v2's first is 16 x 32 x 802816), whose few output
    tiles leave most of a GPU idle: `pieces` products over slices of k in one strided-batched GEMM, then a
    kernel sums them into out (accumulating in double where the device has fp64); the leftover of k, if any,
    is one more GEMM added to out."""
    m, k = a.shape
    n = b.cols
    chunk = k // pieces
    dtype, dev = out.dtype, runtime.device(out.index)
    step_a = chunk * (lda if trans_a else 1)  # one slice of k further along a (m x k) and b (k x n)
    step_b = chunk * (1 if trans_b else ldb)
    with Scratch(dev) as scratch:
        partial = scratch.buffer(pieces * m * n * dtype.itemsize)
        runtime.gemm(dev, dtype, trans_a, trans_b, m, n, chunk, alpha, a.buffer, a.offset, lda, b.buffer, b.offset,
                     ldb, 0.0, partial, 0, n, batch=pieces, strides=(step_a, step_b, m * n))
        sum_pieces(dev, partial, pieces, out, beta)
    if k > pieces * chunk:
        mm_into(out, a.col_range(pieces * chunk, k), b.row_range(pieces * chunk, k), alpha, 1.0)


def bmm_into(out, a, b, alpha: float, beta: float) -> None:
    """out = alpha * a @ b + beta * out for 3-D device tensors: one strided-batched GEMM."""
    if out.shape[0] == 1 or out.numel() == 0:
        for batch in range(out.shape[0]):
            mm_into(out[batch], a[batch], b[batch], alpha, beta)
        return
    a = a if gemm_layout(as_mat(a[0])) is not None else contiguous(a)
    b = b if gemm_layout(as_mat(b[0])) is not None else contiguous(b)
    if a.shape[2] == 0:  # no products: beta * out
        pointwise("a * beta", out, [out], scalars={"beta": beta}) if beta else pointwise("0", out, [])
    else:
        mm_into(out[0], a[0], b[0], alpha, beta, batch=out.shape[0], strides=(a.stride(0), b.stride(0), out.stride(0)))


def matmul(op, args, kwargs, bound):
    base = base_name(op)
    if bound["self"].dtype not in (torch.float32, torch.float64):
        raise NoKernel("a GEMM variant without CLBlast")
    meta_result = meta_result_of(op, args, kwargs)
    index = bound["self"].device.index
    written = written_arguments(op, bound)
    if written and written[0].dtype == meta_result.dtype:  # mm.out (torch.mm's path): GEMM straight into it
        if written[0].shape != meta_result.shape:
            aten.resize_.default(written[0], meta_result.shape)
        inputs = {t.untyped_storage()._cdata for t in (bound.get("self"), bound.get("mat1"), bound.get("mat2"))
                  if isinstance(t, torch.Tensor)}
        if written[0].is_contiguous() and written[0].untyped_storage()._cdata not in inputs:
            out = written[0]
            bound = dict(bound, out=None)  # nothing left for finish to copy
    if not written or bound.get("out") is not None:
        out = empty(meta_result.shape, contiguous_strides(meta_result.shape), meta_result.dtype, index)
    if base == "mm":
        mm_into(out, bound["self"], bound["mat2"], 1.0, 0.0)
    elif base == "addmm":
        beta, alpha = float(bound["beta"]), float(bound["alpha"])
        source = bound["self"] if beta and bound["self"] is not out else None
        mm_into(out, bound["mat1"], bound["mat2"], alpha, beta, source=source)
    elif base == "baddbmm":
        beta, alpha = float(bound["beta"]), float(bound["alpha"])
        if beta:
            pointwise("a", out, [bound["self"]])
        bmm_into(out, bound["batch1"], bound["batch2"], alpha, beta)
    else:  # bmm
        bmm_into(out, bound["self"], bound["mat2"], 1.0, 0.0)
    return finish(op, bound, out)
