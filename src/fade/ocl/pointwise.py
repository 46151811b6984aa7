"""Elementwise ops: `pointwise(expr, out, operands)` generates an OpenCL kernel from a C expression over
operands a, b, c, ... and launches it; POINTWISE maps ATen ops to expressions.

Three generated kernels, chosen per call: flat (out and operands contiguous and alike: a linear index), strided
(the geometry compiled in after merging dimensions, cached per geometry up to STRIDED_KERNELS), and a generic
one reading sizes and strides from a metadata buffer. A same-geometry elementwise op keeps a plan
(PointwisePlan) and skips its meta result next time. Also here: copies (the driver's buffer copy where it
fits), bfloat16 casts, `contiguous` and `finish` (an out= result copied into its target).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, NAME
from fade.ocl.meta import base_name, device_index_of, meta_key, output_for, remember, schema_of, written_arguments
from fade.ocl.sources import cl_type, FLOAT_LITERAL, NoKernel

aten = torch.ops.aten


MAX_DIMS = 8


def pointwise(expr: str, out: torch.Tensor, operands: list, compute=None, scalars: dict | None = None):
    """out[i] = expr(a, b, c, ...) elementwise; operands are device tensors broadcast to out's shape or Python
    numbers; named `scalars` are available to expr; compute is the dtype the expression is evaluated in.
    Returns the flat kernel's (kernel, numpy scalar type) when it ran one (see pointwise_op's plans)."""
    scalars = scalars or {}
    if out.numel() == 0:
        return
    if expr == "a" and out.dtype == torch.bfloat16 and _all_bfloat16(operands):
        out, operands = out.view(torch.int16), [operands[0].view(torch.int16)]  # a copy of the bits
    if out.dim() > MAX_DIMS:
        raise NoKernel(f"more than {MAX_DIMS} dims")
    if compute is None and expr == "a" and out.dtype == torch.bool and isinstance(operands[0], torch.Tensor):
        compute = operands[0].dtype  # a cast to bool tests the value != 0 in its own type: (uchar)-1.7f is
        # undefined in OpenCL C (NVIDIA's gave 0, so False, where torch gives True)
    compute = compute or out.dtype
    ct = "float" if compute == torch.float16 else cl_type(compute)
    ot = cl_type(out.dtype)
    shape = list(out.shape)
    if expr == "a" and _copy_buffer(out, operands[0]):
        return
    if out.is_contiguous() and all(not isinstance(x, torch.Tensor) or x.device.type == NAME and
                                   (x.numel() == 1 or (list(x.shape) == shape and x.is_contiguous()))
                                   for x in operands):
        return _pointwise_flat(expr, out, operands, compute, ct, ot, scalars)
    if all(not isinstance(x, torch.Tensor) or x.device.type == NAME for x in operands) and \
            _pointwise_strided(expr, out, operands, compute, ct, ot, scalars):
        return
    meta = [out.numel(), len(shape)] + shape + [0] * (MAX_DIMS - len(shape))
    meta += [out.storage_offset()] + list(out.stride()) + [0] * (MAX_DIMS - len(shape))
    params, loads, args, letters = [], [], [], "abcdefgh"
    for position, operand in enumerate(operands):
        letter = letters[position]
        if isinstance(operand, torch.Tensor):
            if operand.device.type != NAME:
                raise NoKernel("a host tensor operand")
            view = operand.expand(shape) if operand.dim() <= len(shape) else operand
            slot = len(meta)
            meta += [view.storage_offset()] + list(view.stride()) + [0] * (MAX_DIMS - len(shape))
            params.append(f"__global const {cl_type(operand.dtype)}* in_{letter}")
            loads.append(f"long p_{letter} = meta[{slot}]; for (int d = 0; d < nd; ++d) p_{letter} += "
                         f"idx[d] * meta[{slot} + 1 + d]; {ct} {letter} = ({ct})in_{letter}[p_{letter}];")
            args.append(block_of(operand).buffer)
        else:
            params.append(f"{ct} {letter}")
            args.append(operand)
    for name, value in scalars.items():
        params.append(f"{ct} {name}")
        args.append(value)
    if ct == "double":  # the expressions' float literals (0.5f) would round double math to float precision
        expr = FLOAT_LITERAL.sub(r"\1", expr)
    store = f"({ot})(({ct})({expr}) != 0)" if out.dtype == torch.bool else f"({ot})({expr})"
    source = helper_source(expr, ct) + f"""
__kernel void pointwise(__global {ot}* out, __global const long* meta{''.join(', ' + p for p in params)}) {{
    long i = get_global_id(0);
    if (i >= meta[0]) return;
    int nd = (int)meta[1];
    long idx[{MAX_DIMS}];
    long rem = i;
    for (int d = nd - 1; d >= 0; --d) {{ long s = meta[2 + d]; idx[d] = rem % s; rem /= s; }}
    long o = meta[{2 + MAX_DIMS}];
    for (int d = 0; d < nd; ++d) o += idx[d] * meta[{3 + MAX_DIMS} + d];
    {' '.join(loads)}
    out[o] = {store};
}}"""
    dev = device_of(out)
    kernel = dev.kernel("pointwise", source)
    cl = dev.cl
    meta_buffer = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                            hostbuf=np.asarray(meta, dtype=np.int64))
    np_ct = numpy_scalar(ct, compute)
    values = [arg if not isinstance(arg, (int, float, bool)) else np_ct(arg) for arg in args]
    dev.launch(kernel, (out.numel(),), None, block_of(out).buffer, meta_buffer, *values, label=f"pointwise {expr}")


def _all_bfloat16(operands) -> bool:
    return all(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 for x in operands)


# bfloat16 has no OpenCL type: its tensors are 16-bit words (the top half of a float32) that only copies and casts
# touch on the device; every other op on them runs on the CPU. Casts round to nearest even, NaN to 0x7FC0, as
# c10::BFloat16 does; from float64 and int64 through float32, as c10 does too.
_FROM_BFLOAT16 = "as_float((uint)(a & 0xFFFF) << 16)"  # a: the word, loaded as int

_TO_BFLOAT16 = ("as_short((ushort)(a != a ? 0x7FC0u : "  # a: the value, loaded as float
                "(as_uint(a) + 0x7FFFu + ((as_uint(a) >> 16) & 1u)) >> 16))")


def cast_bfloat16(target: torch.Tensor, source: torch.Tensor) -> None:
    """target = source converted, on the device, where one of them is bfloat16 (any strides)."""
    if source.dtype == target.dtype:
        pointwise("a", target, [source])
    elif source.dtype == torch.bfloat16:
        expr = f"({_FROM_BFLOAT16} != 0)" if target.dtype == torch.bool else _FROM_BFLOAT16
        pointwise(expr, target, [source.view(torch.int16)], compute=torch.int32)
    else:
        pointwise(_TO_BFLOAT16, target.view(torch.int16), [source], compute=torch.float32)


def _copy_buffer(out: torch.Tensor, source) -> bool:
    """out = source with the driver's buffer copy (clEnqueueCopyBuffer) when both are contiguous and alike and do
    not overlap: on the H100 it moved 2992 GB/s where a one-element-per-work-item kernel moved 2385."""
    if not isinstance(source, torch.Tensor) or source.device.type != NAME or source.dtype != out.dtype or \
            source.shape != out.shape or not (out.is_contiguous() and source.is_contiguous()):
        return False
    size = out.element_size()
    source_block, out_block = block_of(source), block_of(out)
    start, end = source.storage_offset() * size, (source.storage_offset() + source.numel()) * size
    target = out.storage_offset() * size
    if source_block.buffer == out_block.buffer and start < target + out.numel() * size and target < end:
        return False  # overlapping copies are undefined for clEnqueueCopyBuffer
    device_of(out).copy(out_block.buffer, source_block.buffer, end - start, target, start)
    return True


flat_kernels: dict = {}  # (device, expression, types, operand kinds, scalar names) -> (kernel, numpy scalar type)


def _pointwise_flat(expr, out, operands, compute, ct, ot, scalars) -> tuple:
    """pointwise() where out and every tensor operand are contiguous and alike (or single elements): a linear
    index, no per-dimension decoding and no metadata buffer. The kernel is looked up by a short key, so a
    repeated op builds no source string."""
    kinds = tuple((x.dtype, x.numel() == 1 and out.numel() != 1) if isinstance(x, torch.Tensor) else None
                  for x in operands)
    key = (out.device.index or 0, expr, ct, ot, out.dtype == torch.bool, kinds, tuple(scalars))
    entry = flat_kernels.get(key)
    if entry is None:
        single = [kind[1] for kind in kinds if kind is not None]  # per tensor operand: one element, broadcast
        params, loads, store = _pointwise_parts(expr, [kind and kind[0] for kind in kinds], scalars, ct, ot,
                                                out.dtype == torch.bool, lambda slot: "" if single[slot] else " + i")
        source = helper_source(expr, ct) + f"""
__kernel void pointwise_flat(__global {ot}* out, long off, long n{''.join(', ' + p for p in params)}) {{
    long i = get_global_id(0);
    if (i >= n) return;
    {' '.join(loads)}
    out[off + i] = {store};
}}"""
        entry = flat_kernels[key] = (device_of(out).kernel("pointwise_flat", source), numpy_scalar(ct, compute))
    _launch_flat(*entry, out, operands, scalars, f"pointwise {expr}")
    return entry


def _launch_flat(kernel, np_ct, out: torch.Tensor, operands, scalars: dict, label: str) -> None:
    """A pointwise_flat kernel over out's elements."""
    device_of(out).launch(kernel, (out.numel(),), None, block_of(out).buffer, np.int64(out.storage_offset()),
                     np.int64(out.numel()), *_operand_args(operands, scalars, np_ct), label=label)


def _pointwise_parts(expr: str, dtypes: list, scalars: dict, ct: str, ot: str, to_bool: bool, index) -> tuple:
    """(parameters, operand loads, stored value) of a generated elementwise kernel: per operand (letters a, b,
    c, ...) a buffer and offset where its dtype is given (a tensor; `index(slot)` is the slot-th tensor's element
    index after its offset) or a scalar of the compute type, then the named scalars."""
    params, loads, slot = [], [], 0
    for letter, dtype in zip("abcdefgh", dtypes):
        if dtype is not None:
            params.append(f"__global const {cl_type(dtype)}* in_{letter}, long off_{letter}")
            loads.append(f"{ct} {letter} = ({ct})in_{letter}[off_{letter}{index(slot)}];")
            slot += 1
        else:
            params.append(f"{ct} {letter}")
    params += [f"{ct} {name}" for name in scalars]
    body = FLOAT_LITERAL.sub(r"\1", expr) if ct == "double" else expr
    return params, loads, f"({ot})(({ct})({body}) != 0)" if to_bool else f"({ot})({body})"


def numpy_scalar(ct: str, compute):
    """The numpy type of a kernel's scalar arguments computed in OpenCL type `ct` (torch dtype `compute`)."""
    return np.float32 if ct == "float" else torch.empty(0, dtype=compute).numpy().dtype.type


def _operand_args(operands, scalars: dict, np_ct) -> list:
    """A pointwise kernel's arguments after out: (buffer, offset) per tensor operand, typed Python numbers, then
    the named scalars."""
    args = []
    for operand in operands:
        if isinstance(operand, torch.Tensor):
            args += [block_of(operand).buffer, np.int64(operand.storage_offset())]
        else:
            args.append(np_ct(operand) if isinstance(operand, (int, float, bool)) else operand)
    return args + [np_ct(v) if isinstance(v, (int, float, bool)) else v for v in scalars.values()]


def collapse(shape, stride_lists) -> tuple:
    """(shape, stride lists) with size-1 dimensions dropped, the rest ordered by the first tensor's (the
    output's) strides, largest first, and neighbours merged where every tensor steps through them as one (a
    permuted copy of [n, c, l] stays 3-D, an expanded row becomes 2-D).

    The order is the work items' order: an elementwise kernel may visit elements in any order, and following
    the output's memory order makes neighbouring work items write neighbouring addresses. A channels-last
    [n, c, h, w] result, visited in its logical order, had neighbours c elements apart: the H200's graph-mode
    convnext_small spent ~150 us on residual adds that move ~25 MB, ~10x their bytes."""
    kept = [d for d, size in enumerate(shape) if size != 1]
    if stride_lists:
        first = stride_lists[0]
        kept.sort(key=lambda d: -abs(first[d]))  # stable: equal strides keep their logical order
    sizes = [shape[d] for d in kept]
    strides = [[st[d] for d in kept] for st in stride_lists]
    d = len(sizes) - 1
    while d > 0:
        if all(st[d - 1] == st[d] * sizes[d] for st in strides):
            sizes[d - 1] *= sizes[d]
            for st in strides:
                st[d - 1] = st[d]
                del st[d]
            del sizes[d]
        d -= 1
    return sizes, strides


def broadcast_strides(x: torch.Tensor, shape) -> list:
    """x's strides when broadcast to `shape` (what x.expand(shape).stride() says, without a view op)."""
    lead = len(shape) - x.dim()
    return [0] * lead + [0 if size == 1 and shape[lead + d] != 1 else st
                         for d, (size, st) in enumerate(zip(x.shape, x.stride()))]


STRIDED_KERNELS = 1024  # compiled strided geometries kept per process; past that, the generic kernel

# a strided geometry gets a kernel of its own when it is met for the STRIDED_AFTER-th time; before, the generic
# kernel (one program per expression) runs it. A training step repeats its geometries every step, while
# generation grows its sequence by a token a step, so each of its geometries is met once: built on first sight,
# tiny-llama's model.generate on PoCL built programs for minutes before its first token.
STRIDED_AFTER = 2
strided_seen: dict = {}  # geometry key -> times met, until it is built


def strided_indexing(sizes, reach: int) -> tuple:
    """(idx, decode, address) for a kernel with its geometry compiled in: `idx` the index type ("int" while every
    address stays below 2^31, else "long"), `decode` the statements turning work item `i` into the indices
    i0..iN of `sizes` (divisions by constants), and `address(strides)` the offset expression over them."""
    idx = "int" if reach < 2**31 else "long"
    decode, rest = [], "i"
    for d in range(len(sizes) - 1, 0, -1):
        decode.append(f"{idx} i{d} = {rest} % {sizes[d]}; {idx} r{d} = {rest} / {sizes[d]};")
        rest = f"r{d}"
    decode.append(f"{idx} i0 = {rest};")

    def address(strides) -> str:
        return " + ".join([f"i{d} * {st}" for d, st in enumerate(strides) if st] or ["0"])

    return idx, decode, address


def _pointwise_strided(expr, out, operands, compute, ct, ot, scalars) -> bool:
    """pointwise() over strided tensors with the geometry (sizes, every tensor's strides) compiled into the
    kernel, after _collapse: its divisions by constants become multiplications, no metadata buffer is made, and
    a repeated op finds its kernel by key. Offsets stay arguments, so every view of one geometry shares a
    kernel. False for a geometry met fewer than STRIDED_AFTER times, or when the cache is full: the generic kernel
    then runs."""
    shape = list(out.shape)
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    if any(x.dim() > len(shape) for x in tensors):
        return False
    sizes, strides = collapse(shape, [list(out.stride())] + [broadcast_strides(x, shape) for x in tensors])
    kinds = tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in operands)
    key = ("strided", out.device.index or 0, expr, ct, ot, out.dtype == torch.bool, kinds, tuple(scalars),
           tuple(sizes), tuple(map(tuple, strides)))
    entry = flat_kernels.get(key)
    if entry is None:
        if len(flat_kernels) >= STRIDED_KERNELS:
            return False
        seen = strided_seen.get(key, 0) + 1
        if seen < STRIDED_AFTER:
            if len(strided_seen) >= STRIDED_KERNELS:  # a stream of new geometries: forget the old ones
                strided_seen.clear()
            strided_seen[key] = seen
            return False
        strided_seen.pop(key, None)
        total = out.numel()
        reach = max([total] + [sum((size - 1) * abs(st) for size, st in zip(sizes, sts)) + x.storage_offset()
                               for sts, x in zip(strides, [out] + tensors)])
        idx, decode, address = strided_indexing(sizes, reach)
        params, loads, store = _pointwise_parts(expr, kinds, scalars, ct, ot, out.dtype == torch.bool,
                                                lambda slot: f" + {address(strides[slot + 1])}")
        source = helper_source(expr, ct) + f"""
__kernel void pointwise_strided(__global {ot}* out, long off{''.join(', ' + p for p in params)}) {{
    {idx} i = get_global_id(0);
    if (i >= {total}) return;
    {' '.join(decode)}
    {' '.join(loads)}
    out[off + {address(strides[0])}] = {store};
}}"""
        entry = flat_kernels[key] = (device_of(out).kernel("pointwise_strided", source), numpy_scalar(ct, compute))
    kernel, np_ct = entry
    device_of(out).launch(kernel, (out.numel(),), None, block_of(out).buffer, np.int64(out.storage_offset()),
                     *_operand_args(operands, scalars, np_ct), label=f"pointwise {expr}")
    return True


_ERF_GRAD = "(0.5f * (1 + erf(b * 0.70710678118654752f)) + b * exp(-0.5f * b * b) * 0.3989422804014327f)"

POINTWISE = {  # base name -> (operand argument names, expression, scalar argument names)
    "add": (("self", "other"), "a + alpha * b", ("alpha",)),
    "sub": (("self", "other"), "a - alpha * b", ("alpha",)),
    "rsub": (("self", "other"), "b - alpha * a", ("alpha",)),
    "mul": (("self", "other"), "a * b", ()),
    "div": (("self", "other"), "a / b", ()),
    "neg": (("self",), "-a", ()),
    "exp": (("self",), "exp(a)", ()),
    "log": (("self",), "log(a)", ()),
    "sqrt": (("self",), "sqrt(a)", ()),
    "rsqrt": (("self",), "rsqrt(a)", ()),
    "abs": (("self",), "(a < 0 ? -a : a)", ()),
    "sin": (("self",), "sin(a)", ()),
    "cos": (("self",), "cos(a)", ()),
    "tanh": (("self",), "tanh(a)", ()),
    "sigmoid": (("self",), "1 / (1 + exp(-a))", ()),
    "relu": (("self",), "((a != a || a > 0) ? a : 0)", ()),
    "reciprocal": (("self",), "1 / a", ()),
    "gelu": (("self",), "0.5f * a * (1 + erf(a * 0.70710678118654752f))", ()),
    "pow": (("self", "exponent"), "pow(a, b)", ()),
    "remainder": (("self", "other"), "fade_remainder(a, b)", ()),
    "eq": (("self", "other"), "a == b", ()),
    "ne": (("self", "other"), "a != b", ()),
    "lt": (("self", "other"), "a < b", ()),
    "le": (("self", "other"), "a <= b", ()),
    "gt": (("self", "other"), "a > b", ()),
    "ge": (("self", "other"), "a >= b", ()),
    "maximum": (("self", "other"), "(a != a ? a : (b != b ? b : (a > b ? a : b)))", ()),
    "minimum": (("self", "other"), "(a != a ? a : (b != b ? b : (a < b ? a : b)))", ()),
    "where": (("condition", "self", "other"), "(a != 0 ? b : c)", ()),
    "threshold_backward": (("grad_output", "self"), "(b <= threshold ? 0 : a)", ("threshold",)),
    "sigmoid_backward": (("grad_output", "output"), "a * (1 - b) * b", ()),
    "tanh_backward": (("grad_output", "output"), "a * (1 - b * b)", ()),
    "gelu_backward": (("grad_output", "self"), "a * " + _ERF_GRAD, ()),
    # SiLU (EfficientNet, MobileNetV3's heads, every Llama MLP), Hardswish and Hardsigmoid (MobileNetV3): issue 27
    # found aten::silu.out 147 times a training step on the CPU fallback; the backwards follow torch's formulas
    "silu": (("self",), "a / (1 + exp(-a))", ()),
    "silu_backward": (("grad_output", "self"), "a * (1 / (1 + exp(-b))) * (1 + b * (1 - 1 / (1 + exp(-b))))", ()),
    "hardswish": (("self",), "(a != a ? a : a * (a + 3 < 0 ? 0 : (a + 3 > 6 ? 6 : a + 3)) / 6)", ()),
    "hardswish_backward": (("grad_output", "self"), "(b <= -3 ? 0 : (b < 3 ? a * (b / 3 + 0.5f) : a))", ()),
    "hardsigmoid": (("self",), "(a != a ? a : (a + 3 < 0 ? 0 : (a + 3 > 6 ? 6 : a + 3)) / 6)", ()),
    "hardsigmoid_backward": (("grad_output", "self"), "((b > -3 && b < 3) ? a / 6 : 0)", ()),
    "fill": (("value",), "a", ()),
    "zero": ((), "0", ()),
    "clone": (("self",), "a", ()),
    "ceil": (("self",), "ceil(a)", ()),
    "floor": (("self",), "floor(a)", ()),
    "bitwise_and": (("self", "other"), "a & b", ()),
    "bitwise_or": (("self", "other"), "a | b", ()),
    "bitwise_not": (("self",), "~a", ()),
    "logical_not": (("self",), "a == 0", ()),
    "logical_and": (("self", "other"), "a != 0 && b != 0", ()),
    "logical_or": (("self", "other"), "a != 0 || b != 0", ()),
    "isnan": (("self",), "a != a", ()),
    "isinf": (("self",), "(a == INFINITY || a == -INFINITY)", ()),
    "isposinf": (("self",), "a == INFINITY", ()),
    "isneginf": (("self",), "a == -INFINITY", ()),
    "isfinite": (("self",), "(a == a && a != INFINITY && a != -INFINITY)", ()),
    "native_dropout_backward": (("grad_output", "mask"), "a * b * scale", ("scale",)),
    "hardtanh": (("self",), "(a != a ? a : (a < min_val ? min_val : (a > max_val ? max_val : a)))",
                 ("min_val", "max_val")),
    "hardtanh_backward": (("grad_output", "self"), "((b <= min_val || b >= max_val) ? 0 : a)",
                          ("min_val", "max_val")),
    "sign": (("self",), "(a > 0) - (a < 0)", ()),
    "masked_fill": (("self", "mask", "value"), "(b != 0 ? c : a)", ()),
    "addcmul": (("self", "tensor1", "tensor2"), "a + value * b * c", ("value",)),
    "addcdiv": (("self", "tensor1", "tensor2"), "a + value * b / c", ("value",)),
    "lerp": (("self", "end", "weight"), "a + c * (b - a)", ()),
}

# In an integer compute type the expressions above do not build (OpenCL C has no integer ceil, floor or pow) or
# differ from torch; these replace them. ceil and floor of an integer are the integer, as in torch.
_INTEGER_POINTWISE = {"ceil": "a", "floor": "a", "pow": "fade_pow(a, b)"}

_HELPERS = {  # function an expression may call -> (its OpenCL C over floating T, over integer T)
    # torch.remainder: Python's sign rule, the result takes the divisor's sign (torch's CPU kernel, fmod then
    # adjust). An integer divisor of 0 gives 0 where the CPU raises and CUDA's result is undefined: a division by
    # zero (or INT_MIN % -1) traps on a CPU OpenCL device and would kill the process.
    "fade_remainder": (
        "T fade_remainder(T a, T b) { T r = fmod(a, b); if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }",
        "T fade_remainder(T a, T b) { T d = (b == 0 || b == -1) ? (T)1 : b; T r = a % d;\n"
        "    if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }"),
    # integer pow as torch computes it: square-and-multiply, wrapping on overflow (in ulong: no signed overflow);
    # a negative exponent gives 0 except for bases 1 and -1
    "fade_pow": (
        "T fade_pow(T a, T b) { return pow(a, b); }",
        "T fade_pow(T a, T b) {\n"
        "    if (b < 0) return a == 1 ? (T)1 : (a == -1 ? ((b & 1) ? (T)-1 : (T)1) : (T)0);\n"
        "    ulong result = 1, base = (ulong)a, e = (ulong)b;\n"
        "    while (e) { if (e & 1) result *= base; base *= base; e >>= 1; }\n"
        "    return (T)result; }"),
}


def helper_source(expr: str, ct: str) -> str:
    """The definitions of the helper functions `expr` calls, over the kernel's compute type `ct`."""
    floating = ct in ("float", "double", "half")
    return "".join(f"#define T {ct}\n{_HELPERS[name][0 if floating else 1]}\n#undef T\n"
                   for name in _HELPERS if name in expr)


def finish(op, bound, result):
    """An out= overload: the functional result copied into the out tensors, which are returned."""
    targets = written_arguments(op, bound)
    if not targets:
        return result
    results = result if isinstance(result, tuple) else (result,)
    for target, value in zip(targets, results):
        if target.shape != value.shape:
            aten.resize_.default(target, value.shape)
        pointwise("a", target, [value])
    return targets[0] if len(targets) == 1 else tuple(targets)


_GELU_TANH = {  # gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its derivative
    "gelu": "0.5f * a * (1 + tanh(0.7978845608028654f * (a + 0.044715f * a * a * a)))",
    "gelu_backward": "a * (0.5f * (1 + tanh(0.7978845608028654f * (b + 0.044715f * b * b * b))) + 0.5f * b * "
                     "(1 - tanh(0.7978845608028654f * (b + 0.044715f * b * b * b)) * "
                     "tanh(0.7978845608028654f * (b + 0.044715f * b * b * b))) * "
                     "0.7978845608028654f * (1 + 0.134145f * b * b))",
}


pointwise_plans: dict = {}  # (op, argument key) -> _PointwisePlan


@dataclasses.dataclass(frozen=True)
class _PointwisePlan:
    """What an elementwise op did the first time for one argument geometry (dtypes, shapes, strides, scalars),
    kept when it ran the flat kernel: the next call with that geometry allocates, binds and launches, without
    the meta result, the output's checks or the kernel's lookup (~15 us of Python an op)."""
    written: str | None  # "self" for an in-place op, or None (a fresh output)
    size: tuple
    stride: tuple
    dtype: torch.dtype
    operand_names: tuple
    scalar_names: tuple
    kernel: object
    np_ct: type
    label: str


def _run_plan(plan: _PointwisePlan, args, kwargs, bound):
    out = bound[plan.written] if plan.written else \
        empty(plan.size, plan.stride, plan.dtype, device_index_of(args, kwargs))
    if out.numel():
        _launch_flat(plan.kernel, plan.np_ct, out, *_pointwise_inputs(bound, plan.operand_names, plan.scalar_names),
                     plan.label)
    return out


def _pointwise_inputs(bound: dict, operand_names, scalar_names) -> tuple:
    """(operands, named scalars) of an elementwise op from its bound arguments: bools as floats, alpha 1 when
    not given."""
    operands = [float(x) if isinstance(x, bool) else x for x in (bound[name] for name in operand_names)]
    return operands, {name: (1 if bound[name] is None else bound[name]) for name in scalar_names}


def variant_expression(op, bound: dict) -> str:
    """The expression of an elementwise op's call (tanh GELU's own); NoKernel for a variant with no kernel
    (a division's rounding mode). Checked before the op's output is made or resized."""
    base = base_name(op)
    if bound.get("approximate") == "tanh" and base in _GELU_TANH:
        return _GELU_TANH[base]
    if bound.get("rounding_mode") is not None or bound.get("approximate") not in (None, "none"):
        raise NoKernel("a variant without a kernel")
    return POINTWISE[base][1]


def typed_expression(op, bound: dict, expr: str, out_dtype) -> tuple:
    """(expression, compute dtype) of an elementwise op's call whose result is `out_dtype`: comparisons compute
    in their inputs' promoted type, integer types take _INTEGER_POINTWISE's forms; NoKernel for bfloat16. The
    graph mode's fused kernels (graph_fusion.py) ask this too, with the graph's fake tensors as operands."""
    base = base_name(op)
    operands = [bound[name] for name in POINTWISE[base][0]]
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    compute = out_dtype
    if out_dtype == torch.bool and base != "where" and tensors:  # compare in the inputs' promoted type
        compute = torch.result_type(*operands) if len(operands) == 2 else tensors[0].dtype
    if compute == torch.bfloat16 or any(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
                                        for x in operands):
        raise NoKernel("bfloat16")
    if base == "bitwise_not" and compute == torch.bool:  # ~ of a bool is its negation, not ~1 = 0xFE (true)
        expr = "a == 0"
    elif not compute.is_floating_point and base in _INTEGER_POINTWISE:
        expr = _INTEGER_POINTWISE[base]
    return expr, compute


def pointwise_op(op, args, kwargs, bound):
    arguments = meta_key((args, tuple(sorted(kwargs.items()))))
    key = None
    if arguments is not None:
        key = (op, arguments, device_index_of(args, kwargs))  # the kernel belongs to one device's context
        plan = pointwise_plans.get(key)
        if plan is not None:
            return _run_plan(plan, args, kwargs, bound)
    expr = variant_expression(op, bound)
    out, _ = output_for(op, args, kwargs, bound, arguments)
    expr, compute = typed_expression(op, bound, expr, out.dtype)
    operand_names, _, scalar_names = POINTWISE[base_name(op)]
    operands, scalars = _pointwise_inputs(bound, operand_names, scalar_names)
    flat = pointwise(expr, out, operands, compute, scalars)
    written = schema_of(op)[1]  # the names of the arguments the op writes
    # planned: functional ops and in-place ones (which write self, never resized); not out= overloads, whose
    # target is another tensor each call (the key knows shapes, not which tensor) and may need a resize
    if flat is not None and key is not None and written in ((), ("self",)) and not schema_of(op)[2]:
        remember(pointwise_plans, key, _PointwisePlan(
            "self" if written else None, tuple(out.shape), tuple(out.stride()), out.dtype, operand_names,
            scalar_names, flat[0], flat[1], f"pointwise {expr}"))
    return out


def contiguous(t: torch.Tensor, at_start: bool = False) -> torch.Tensor:
    """t, or a dense copy of it when it is not contiguous (or, with `at_start`, does not start at its storage's
    first element: for kernels that take no offset)."""
    if t.is_contiguous() and not (at_start and t.storage_offset()):
        return t
    dense = empty(t.shape, contiguous_strides(t.shape), t.dtype, t.device.index)
    pointwise("a", dense, [t])
    return dense
