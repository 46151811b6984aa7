"""torch's PrivateUse1 device named "ocl": tensors in OpenCL buffers, native kernels, a counted CPU fallback.

Every ATen op on the device reaches one boxed kernel (`_dispatch`). View ops are computed on meta tensors and
become views of the same storage (fade.hostwork.storages); ops with an OpenCL kernel here run on the device;
every other op runs on the CPU (storages copied in, the op run, written arguments copied back, views kept), warns
once per op with its name and is counted (`fallback_counts`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import os
import re
import threading
import time
import warnings

import numpy as np
import torch

from fade.hostwork.storages import (PythonDeviceModule, StorageTable, map_nested, register_python_backend,
                                    set_geometry)
from fade.ocl import runtime
from fade.ocl.runtime import FP16, OclError

NAME = "ocl"
aten = torch.ops.aten
MAX_DIMS = 8
_FLOAT_LITERAL = re.compile(r"(\d\.\d*(?:e-?\d+)?)f\b")

_table = StorageTable(NAME)
_library = None
_lock = threading.Lock()
_fallbacks: collections.Counter = collections.Counter()
_CL_TYPES = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.int64: "long",
             torch.int32: "int", torch.int16: "short", torch.int8: "char", torch.uint8: "uchar",
             torch.bool: "uchar"}


@dataclasses.dataclass
class Block:
    """The memory behind one device storage."""
    device: int
    buffer: object


def is_registered() -> bool:
    return _library is not None


def register() -> None:
    """Name PrivateUse1 "ocl" in this process and route its ops here (idempotent). OclError if there is no
    OpenCL device or PrivateUse1 already has another name (it can be named once per process)."""
    global _library
    if _library is not None:
        return
    runtime.devices()  # fails with one line when there is no OpenCL
    # native_layer_norm(_backward) are composite for backends without a kernel (layer norm would decompose
    # into batch norm); registered per op they run this backend's own kernels.
    libraries = register_python_backend(
        NAME, BackendModule(), _dispatch, error=OclError,
        extra_ops=("native_layer_norm.default", "native_layer_norm_backward.default",
                   # these have a composite per-tensor kernel that would win over the fallback: registered, they
                   # reach _foreach as one call (multi-tensor kernels, _foreach_fused)
                   *[f"_foreach_{key}" for key in _FOREACH_FUSED], *_structured_ops()))
    # torch.load restores a storage with torch.UntypedStorage(n, device="ocl"), which needs a C++ allocator
    # (PrivateUse1 from Python has none: it crashes). Restore "ocl:N" storages through this allocator instead.
    torch.serialization.register_package(1, lambda obj: None, _restore_storage)
    _library = libraries


def _structured_ops() -> list[str]:
    """The functional and in-place overloads of the ops with kernels here that torch runs, on a backend without
    its own kernel for them, through a composite that computes the meta result in C++ and then dispatches
    empty + the out= overload: two trips into Python. Registered per op, they reach `_dispatch` once (a
    functional add: 101 -> 62 us on PoCL)."""
    found = []
    for base in sorted(set(POINTWISE) | set(_HANDLERS)):
        for name in (base, base + "_"):
            packet = getattr(aten, name, None)
            for overload in packet.overloads() if isinstance(packet, torch._ops.OpOverloadPacket) else ():
                try:  # TorchScript-only overloads (add.t) are not in the dispatcher
                    structured = torch._C._dispatch_has_kernel_for_dispatch_key(
                        getattr(packet, overload).name(), "CompositeExplicitAutogradNonFunctional")
                except RuntimeError:
                    continue
                if structured:
                    found.append(f"{name}.{overload}")
    return found


def _restore_storage(storage, location: str):
    if not location.startswith(NAME):
        return None
    index = int(location.split(":")[1]) if ":" in location else 0
    restored = empty([storage.nbytes()], [1], torch.uint8, index)
    upload(torch.empty(0, dtype=torch.uint8).set_(storage.cpu() if storage.device.type != "cpu" else storage),
           restored)
    return restored.untyped_storage()


def fallback_counts() -> dict[str, int]:
    """How many times each op ran on the CPU for lack of an OpenCL kernel, by op name."""
    with _lock:
        return dict(_fallbacks)


def reset_fallback_counts() -> None:
    with _lock:
        _fallbacks.clear()


_fallback_listeners: list = []  # called with the op name at every CPU fallback (fade.guard files them)


def add_fallback_listener(listener) -> None:
    """Call `listener(op_name)` at every CPU fallback, on the thread that ran the op."""
    _fallback_listeners.append(listener)


def remove_fallback_listener(listener) -> None:
    if listener in _fallback_listeners:
        _fallback_listeners.remove(listener)


def env_choice(name: str, default: str, allowed: tuple) -> str:
    """The value of environment variable `name` when it is one of `allowed`; else `default`, with a warning for a
    value set but not understood (a typo must not silently mean the default)."""
    value = os.environ.get(name)
    if value is None or value in allowed:
        return value or default
    warnings.warn(f"{name}={value!r} is not one of {', '.join(allowed)}; using {default!r}", stacklevel=2)
    return default


@functools.lru_cache(maxsize=None)
def _compiled_source(body: str, header: tuple, names: tuple = (), values: tuple = (),
                     wide_indices: bool = False) -> str:
    """A kernel source with its types and geometry compiled in: `#define` each of `header` ("T float", ...), then
    NAME value for each of `names` and `values` (as long literals where indices need 64 bits), then `body`. One
    object per argument set, so its hash, the kernel cache's key, is computed once."""
    suffix = "L" if wide_indices else ""
    return ("".join(f"#define {line}\n" for line in header) +
            "".join(f"#define {name} {value}{suffix}\n" for name, value in zip(names, values)) + body)


# memory
def _reclaim(young: int | None = None) -> None:
    """Dead tensors' buffers back to their devices' pools: every tensor's, or the `young` newest tensors'."""
    for block in _table.sweep(young):
        runtime.device(block.device).release(block.buffer)


def _check_dtype(dev: runtime.Device, dtype) -> None:
    if dtype == torch.float16 and not dev.info.fp16:
        raise OclError(f"ocl:{dev.index} ({dev.info.name}) lacks the OpenCL extension {FP16}: float16 tensors "
                       "cannot live there (use float32)")


def _extent(size, stride, offset: int) -> int:
    if any(s == 0 for s in size):
        return offset
    return offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))


def empty(size, stride, dtype, index: int, offset: int = 0) -> torch.Tensor:
    dev = runtime.device(index)
    _check_dtype(dev, dtype)
    nbytes = _extent(size, stride, offset) * dtype.itemsize
    if not nbytes:  # a view of the device's one zero-byte storage: no buffer, no table entry (a growing resize_
        return _table.view_of(_zero_base(dev), dtype, 0, size, stride)  # gives its tensor a storage of its own)
    buffer = dev.allocate(nbytes, _reclaim)
    return _table.new_tensor(Block(index, buffer), buffer.int_ptr, nbytes, torch.device(NAME, index), dtype,
                             offset, size, stride)


_zero_bases: dict = {}  # device index -> a zero-byte tensor over the device's null buffer, kept for the process


def _zero_base(dev: runtime.Device) -> torch.Tensor:
    base = _zero_bases.get(dev.index)
    if base is None:
        null = dev.null_buffer()
        base = _zero_bases[dev.index] = _table.new_tensor(Block(dev.index, null), null.int_ptr, 0,
                                                          torch.device(NAME, dev.index), torch.uint8, 0, [0], [1])
    return base


def _contiguous_strides(size) -> list[int]:
    strides, running = [], 1
    for s in reversed(list(size)):
        strides.append(running)
        running *= max(s, 1)
    return strides[::-1]


def empty_like_meta(meta: torch.Tensor, index: int) -> torch.Tensor:
    return empty(meta.size(), meta.stride(), meta.dtype, index)


def _block(tensor: torch.Tensor) -> Block:
    return _table.backing(tensor)


def _dev(tensor: torch.Tensor) -> runtime.Device:
    return runtime.device(tensor.device.index or 0)


def _is_dense(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous()


def _raw(tensor: torch.Tensor) -> np.ndarray:
    return tensor.reshape(-1).view(torch.uint8).numpy()


def upload(host: torch.Tensor, target: torch.Tensor, owned: bool = False) -> None:
    """Copy a host tensor into a device tensor (any strides, any dtypes), without waiting for the queue: the
    data is first copied to a private array unless `owned` (the caller never touches `host` again)."""
    host = host.detach().to(target.dtype).expand(target.shape)
    if target.numel() == 0:
        return
    if not _is_dense(target):
        staging = empty(target.size(), _contiguous_strides(target.size()), target.dtype, target.device.index)
        upload(host, staging)
        pointwise("a", target, [staging])
        return
    data = _raw(host.contiguous())
    data = np.ascontiguousarray(data) if owned else np.array(data, copy=True)
    _dev(target).write(_block(target).buffer, data, target.storage_offset() * target.element_size())


def download(source: torch.Tensor) -> torch.Tensor:
    """A contiguous host copy of a device tensor."""
    host = torch.empty(source.shape, dtype=source.dtype)
    if source.numel() == 0:
        return host
    if not _is_dense(source):
        staging = empty(source.size(), _contiguous_strides(source.size()), source.dtype, source.device.index)
        pointwise("a", staging, [source])
        source = staging
    dev = _dev(source)
    dev.record("copy device-to-host", dev.cl.enqueue_copy(dev.queue, _raw(host), _block(source).buffer,
                                                          src_offset=source.storage_offset() * source.element_size(),
                                                          is_blocking=True))
    return host


def _storage_to_host(tensor: torch.Tensor) -> torch.UntypedStorage:
    storage = tensor.untyped_storage()
    host = torch.UntypedStorage(storage.nbytes())
    if storage.nbytes():
        dev = _dev(tensor)
        dev.record("copy device-to-host", dev.cl.enqueue_copy(
            dev.queue, torch.empty(0, dtype=torch.uint8).set_(host).numpy(), _block(tensor).buffer, is_blocking=True))
    return host


def _storage_from_host(host: torch.UntypedStorage, tensor: torch.Tensor, owned: bool = False) -> None:
    """Write a host storage into a device tensor's buffer; copied first unless `owned` (see upload)."""
    if host.nbytes():
        data = torch.empty(0, dtype=torch.uint8).set_(host).numpy()
        _dev(tensor).write(_block(tensor).buffer, data if owned else data.copy(), 0)


# kernels
def _cl_type(dtype) -> str:
    cl_type = _CL_TYPES.get(dtype)
    if cl_type is None:
        raise _NoKernel(f"no OpenCL type for {dtype}")
    return cl_type


class _NoKernel(Exception):
    """This call has no OpenCL kernel here; run it on the CPU."""


def pointwise(expr: str, out: torch.Tensor, operands: list, compute=None, scalars: dict | None = None):
    """out[i] = expr(a, b, c, ...) elementwise; operands are device tensors broadcast to out's shape or Python
    numbers; named `scalars` are available to expr; compute is the dtype the expression is evaluated in.
    Returns the flat kernel's (kernel, numpy scalar type) when it ran one (see _pointwise_op's plans)."""
    scalars = scalars or {}
    if out.numel() == 0:
        return
    if expr == "a" and out.dtype == torch.bfloat16 and _all_bfloat16(operands):
        out, operands = out.view(torch.int16), [operands[0].view(torch.int16)]  # a copy of the bits
    if out.dim() > MAX_DIMS:
        raise _NoKernel(f"more than {MAX_DIMS} dims")
    compute = compute or out.dtype
    ct = "float" if compute == torch.float16 else _cl_type(compute)
    ot = _cl_type(out.dtype)
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
                raise _NoKernel("a host tensor operand")
            view = operand.expand(shape) if operand.dim() <= len(shape) else operand
            slot = len(meta)
            meta += [view.storage_offset()] + list(view.stride()) + [0] * (MAX_DIMS - len(shape))
            params.append(f"__global const {_cl_type(operand.dtype)}* in_{letter}")
            loads.append(f"long p_{letter} = meta[{slot}]; for (int d = 0; d < nd; ++d) p_{letter} += "
                         f"idx[d] * meta[{slot} + 1 + d]; {ct} {letter} = ({ct})in_{letter}[p_{letter}];")
            args.append(_block(operand).buffer)
        else:
            params.append(f"{ct} {letter}")
            args.append(operand)
    for name, value in scalars.items():
        params.append(f"{ct} {name}")
        args.append(value)
    if ct == "double":  # the expressions' float literals (0.5f) would round double math to float precision
        expr = _FLOAT_LITERAL.sub(r"\1", expr)
    store = f"({ot})(({ct})({expr}) != 0)" if out.dtype == torch.bool else f"({ot})({expr})"
    source = _helpers(expr, ct) + f"""
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
    dev = _dev(out)
    kernel = dev.kernel("pointwise", source)
    cl = dev.cl
    meta_buffer = cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                            hostbuf=np.asarray(meta, dtype=np.int64))
    np_ct = _numpy_scalar(ct, compute)
    values = [arg if not isinstance(arg, (int, float, bool)) else np_ct(arg) for arg in args]
    dev.launch(kernel, (out.numel(),), None, _block(out).buffer, meta_buffer, *values, label=f"pointwise {expr}")


def _all_bfloat16(operands) -> bool:
    return all(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 for x in operands)


# bfloat16 has no OpenCL type: its tensors are 16-bit words (the top half of a float32) that only copies and casts
# touch on the device; every other op on them runs on the CPU. Casts round to nearest even, NaN to 0x7FC0, as
# c10::BFloat16 does; from float64 and int64 through float32, as c10 does too.
_FROM_BFLOAT16 = "as_float((uint)(a & 0xFFFF) << 16)"  # a: the word, loaded as int
_TO_BFLOAT16 = ("as_short((ushort)(a != a ? 0x7FC0u : "  # a: the value, loaded as float
                "(as_uint(a) + 0x7FFFu + ((as_uint(a) >> 16) & 1u)) >> 16))")


def _cast_bfloat16(target: torch.Tensor, source: torch.Tensor) -> None:
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
    source_block, out_block = _block(source), _block(out)
    start, end = source.storage_offset() * size, (source.storage_offset() + source.numel()) * size
    target = out.storage_offset() * size
    if source_block.buffer == out_block.buffer and start < target + out.numel() * size and target < end:
        return False  # overlapping copies are undefined for clEnqueueCopyBuffer
    dev = _dev(out)
    dev.record("copy device-to-device", dev.cl.enqueue_copy(dev.queue, out_block.buffer, source_block.buffer,
                                                            byte_count=end - start, src_offset=start,
                                                            dst_offset=target))
    return True


_flat_kernels: dict = {}  # (device, expression, types, operand kinds, scalar names) -> (kernel, numpy scalar type)


def _pointwise_flat(expr, out, operands, compute, ct, ot, scalars) -> tuple:
    """pointwise() where out and every tensor operand are contiguous and alike (or single elements): a linear
    index, no per-dimension decoding and no metadata buffer. The kernel is looked up by a short key, so a
    repeated op builds no source string."""
    kinds = tuple((x.dtype, x.numel() == 1 and out.numel() != 1) if isinstance(x, torch.Tensor) else None
                  for x in operands)
    key = (out.device.index or 0, expr, ct, ot, out.dtype == torch.bool, kinds, tuple(scalars))
    entry = _flat_kernels.get(key)
    if entry is None:
        single = [kind[1] for kind in kinds if kind is not None]  # per tensor operand: one element, broadcast
        params, loads, store = _pointwise_parts(expr, [kind and kind[0] for kind in kinds], scalars, ct, ot,
                                                out.dtype == torch.bool, lambda slot: "" if single[slot] else " + i")
        source = _helpers(expr, ct) + f"""
__kernel void pointwise_flat(__global {ot}* out, long off, long n{''.join(', ' + p for p in params)}) {{
    long i = get_global_id(0);
    if (i >= n) return;
    {' '.join(loads)}
    out[off + i] = {store};
}}"""
        entry = _flat_kernels[key] = (_dev(out).kernel("pointwise_flat", source), _numpy_scalar(ct, compute))
    _launch_flat(*entry, out, operands, scalars, f"pointwise {expr}")
    return entry


def _launch_flat(kernel, np_ct, out: torch.Tensor, operands, scalars: dict, label: str) -> None:
    """A pointwise_flat kernel over out's elements."""
    _dev(out).launch(kernel, (out.numel(),), None, _block(out).buffer, np.int64(out.storage_offset()),
                     np.int64(out.numel()), *_operand_args(operands, scalars, np_ct), label=label)


def _pointwise_parts(expr: str, dtypes: list, scalars: dict, ct: str, ot: str, to_bool: bool, index) -> tuple:
    """(parameters, operand loads, stored value) of a generated elementwise kernel: per operand (letters a, b,
    c, ...) a buffer and offset where its dtype is given (a tensor; `index(slot)` is the slot-th tensor's element
    index after its offset) or a scalar of the compute type, then the named scalars."""
    params, loads, slot = [], [], 0
    for letter, dtype in zip("abcdefgh", dtypes):
        if dtype is not None:
            params.append(f"__global const {_cl_type(dtype)}* in_{letter}, long off_{letter}")
            loads.append(f"{ct} {letter} = ({ct})in_{letter}[off_{letter}{index(slot)}];")
            slot += 1
        else:
            params.append(f"{ct} {letter}")
    params += [f"{ct} {name}" for name in scalars]
    body = _FLOAT_LITERAL.sub(r"\1", expr) if ct == "double" else expr
    return params, loads, f"({ot})(({ct})({body}) != 0)" if to_bool else f"({ot})({body})"


def _numpy_scalar(ct: str, compute):
    """The numpy type of a kernel's scalar arguments computed in OpenCL type `ct` (torch dtype `compute`)."""
    return np.float32 if ct == "float" else torch.empty(0, dtype=compute).numpy().dtype.type


def _operand_args(operands, scalars: dict, np_ct) -> list:
    """A pointwise kernel's arguments after out: (buffer, offset) per tensor operand, typed Python numbers, then
    the named scalars."""
    args = []
    for operand in operands:
        if isinstance(operand, torch.Tensor):
            args += [_block(operand).buffer, np.int64(operand.storage_offset())]
        else:
            args.append(np_ct(operand) if isinstance(operand, (int, float, bool)) else operand)
    return args + [np_ct(v) if isinstance(v, (int, float, bool)) else v for v in scalars.values()]


def _collapse(shape, stride_lists) -> tuple:
    """(shape, stride lists) with size-1 dimensions dropped and neighbours merged where every tensor steps
    through them as one (a permuted copy of [n, c, l] stays 3-D, an expanded row becomes 2-D)."""
    kept = [d for d, size in enumerate(shape) if size != 1]
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


def _broadcast_strides(x: torch.Tensor, shape) -> list:
    """x's strides when broadcast to `shape` (what x.expand(shape).stride() says, without a view op)."""
    lead = len(shape) - x.dim()
    return [0] * lead + [0 if size == 1 and shape[lead + d] != 1 else st
                         for d, (size, st) in enumerate(zip(x.shape, x.stride()))]


STRIDED_KERNELS = 1024  # compiled strided geometries kept per process; past that, the generic kernel


def _pointwise_strided(expr, out, operands, compute, ct, ot, scalars) -> bool:
    """pointwise() over strided tensors with the geometry (sizes, every tensor's strides) compiled into the
    kernel, after _collapse: its divisions by constants become multiplications, no metadata buffer is made, and
    a repeated op finds its kernel by key. Offsets stay arguments, so every view of one geometry shares a
    kernel. False when the cache is full (the generic kernel then runs)."""
    shape = list(out.shape)
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    if any(x.dim() > len(shape) for x in tensors):
        return False
    sizes, strides = _collapse(shape, [list(out.stride())] + [_broadcast_strides(x, shape) for x in tensors])
    kinds = tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in operands)
    key = ("strided", out.device.index or 0, expr, ct, ot, out.dtype == torch.bool, kinds, tuple(scalars),
           tuple(sizes), tuple(map(tuple, strides)))
    entry = _flat_kernels.get(key)
    if entry is None:
        if len(_flat_kernels) >= STRIDED_KERNELS:
            return False
        total = out.numel()
        reach = max([total] + [sum((size - 1) * abs(st) for size, st in zip(sizes, sts)) + x.storage_offset()
                               for sts, x in zip(strides, [out] + tensors)])
        idx = "int" if reach < 2**31 else "long"
        decode, rest = [], "i"
        for d in range(len(sizes) - 1, 0, -1):
            decode.append(f"{idx} i{d} = {rest} % {sizes[d]}; {idx} r{d} = {rest} / {sizes[d]};")
            rest = f"r{d}"
        decode.append(f"{idx} i0 = {rest};")

        def address(sts) -> str:
            return " + ".join([f"i{d} * {st}" for d, st in enumerate(sts) if st] or ["0"])

        params, loads, store = _pointwise_parts(expr, kinds, scalars, ct, ot, out.dtype == torch.bool,
                                                lambda slot: f" + {address(strides[slot + 1])}")
        source = _helpers(expr, ct) + f"""
__kernel void pointwise_strided(__global {ot}* out, long off{''.join(', ' + p for p in params)}) {{
    {idx} i = get_global_id(0);
    if (i >= {total}) return;
    {' '.join(decode)}
    {' '.join(loads)}
    out[off + {address(strides[0])}] = {store};
}}"""
        entry = _flat_kernels[key] = (_dev(out).kernel("pointwise_strided", source), _numpy_scalar(ct, compute))
    kernel, np_ct = entry
    _dev(out).launch(kernel, (out.numel(),), None, _block(out).buffer, np.int64(out.storage_offset()),
                     *_operand_args(operands, scalars, np_ct), label=f"pointwise {expr}")
    return True


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


REDUCE_PART = 2048  # a long row is reduced in parts of this many elements by separate work items, then the parts
REDUCE_WIDTH = 16384  # ... when fewer than this many work items would otherwise run


def reduce_rows(kind: str, x: torch.Tensor, out: torch.Tensor, divisor: int | None = None) -> None:
    """out[r] = reduce(x[r, :]) for a contiguous (rows, n) device tensor x and a contiguous out of rows
    elements. Each work item loops over its row (or a part of a long row, the parts reduced in a second pass):
    no atomics and no compare-and-swap, so NaN cannot hang it, and the order is fixed, so results repeat.
    float32 accumulates in double where the device has fp64 (as torch's CPU kernels do), else in float."""
    rows, n = x.shape
    if rows == 0:
        return
    dev = _dev(x)
    floating = x.dtype.is_floating_point
    wide = torch.float64 if floating and (x.dtype == torch.float64 or dev.info.fp64) else torch.float32
    parts = 1
    if floating and kind in ("sum", "mean", "max", "min") and n >= 2 * REDUCE_PART and rows < REDUCE_WIDTH:
        parts = min(-(-n // REDUCE_PART), max(1, REDUCE_WIDTH // rows))
    if parts > 1:
        part_len = -(-n // parts)
        partial = empty([rows, parts], [parts, 1], wide, x.device.index)
        _reduce_kernel("sum" if kind == "mean" else kind, x, partial, n, parts, part_len, 1, wide)
        _reduce_kernel(kind, partial, out, parts, 1, parts, divisor or n, wide)
        return
    _reduce_kernel(kind, x, out, n, 1, n, divisor or n, wide)


def _reduce_kernel(kind: str, x: torch.Tensor, out: torch.Tensor, n: int, parts: int, part_len: int, divisor: int,
                   wide) -> None:
    rows = x.shape[0]
    dev = _dev(x)
    floating = x.dtype.is_floating_point
    acc_type = _cl_type(wide) if floating else "long"
    init, step, result = _ROWS[kind]
    source = f"""
#define ACC {acc_type}
#define FLOAT {1 if floating else 0}
__kernel void reduce_rows(__global const {_cl_type(x.dtype)}* xs, long x_off, __global {_cl_type(out.dtype)}* out,
                          long out_off, long n, long rows, long parts, long part_len, long divisor) {{
    long g = get_global_id(0);
    if (g >= rows * parts) return;
    long r = g / parts, begin = (g % parts) * part_len, end = min(n, begin + part_len);
    __global const {_cl_type(x.dtype)}* x = xs + x_off + r * n;
    ACC acc; {init.replace("acc = x[0]", "acc = (ACC)x[begin]")};
    for (long j = begin; j < end; ++j) {{ ACC v = (ACC)x[j]; {step}; }}
    out[out_off + g] = ({_cl_type(out.dtype)})({result});
}}"""
    if not floating and kind not in ("all", "any"):
        source = source.replace("if (v != v) { acc = v; break; } ", "").replace(
            "if (v != v) { best = j; break; } ", "")
    kernel = dev.kernel("reduce_rows", source)
    dev.launch(kernel, (rows * parts,), None, _block(x).buffer, np.int64(x.storage_offset()), _block(out).buffer,
           np.int64(out.storage_offset()), np.int64(n), np.int64(rows), np.int64(parts), np.int64(part_len),
           np.int64(divisor))


def softmax_rows(x: torch.Tensor, out: torch.Tensor, log: bool) -> None:
    """Row softmax (or log-softmax) of a contiguous (rows, n) float tensor. NaN and inf flow through as on
    the CPU: a row holding NaN (or +inf) yields NaN."""
    rows, n = x.shape
    if rows == 0 or n == 0:
        return
    dev = _dev(x)
    t = _cl_type(x.dtype)
    acc = "double" if x.dtype == torch.float64 else "float"
    value = "(v - m) - log(s)" if log else "exp(v - m) / s"
    local = min(256, dev.max_work_group_size, 1 << max(0, (n - 1).bit_length()))
    local = 1 << (local.bit_length() - 1)
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
    dev.launch(kernel, (rows * local,), (local,), _block(x).buffer, np.int64(x.storage_offset()), _block(out).buffer,
               np.int64(out.storage_offset()), np.int64(n), np.int64(rows))


# ops
_schemas: dict = {}  # op -> _schema_of(op)


def _schema_of(op) -> tuple:
    """What dispatch asks of an op's schema, read from it once (schema objects are slow to walk): (name,
    positional, default) per argument, the names of the arguments it writes, whether it has out= arguments,
    whether it is a view op (every return aliases an input without writing it)."""
    found = _schemas.get(op)
    if found is None:
        arguments, returns = op._schema.arguments, op._schema.returns
        found = _schemas[op] = (
            tuple((a.name, not a.kwarg_only, a.default_value if a.has_default_value() else None) for a in arguments),
            tuple(a.name for a in arguments if a.alias_info is not None and a.alias_info.is_write),
            any(a.is_out for a in arguments),
            bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns))
    return found


def _bind(op, args, kwargs) -> dict:
    bound = {}
    count = len(args)
    for position, (name, positional, default) in enumerate(_schema_of(op)[0]):
        if position < count and positional:
            bound[name] = args[position]
        elif name in kwargs:
            bound[name] = kwargs[name]
        else:
            bound[name] = default
    return bound


def _to_meta(value):
    if isinstance(value, torch.Tensor) and value.device.type == NAME:
        numel = value.untyped_storage().nbytes() // value.element_size()
        base = torch.empty(numel, dtype=value.dtype, device="meta")
        return base.as_strided(value.size(), value.stride(), value.storage_offset())
    if isinstance(value, torch.device) and value.type == NAME:
        return torch.device("meta")
    return value


def _index_of(args, kwargs) -> int:
    first = args[0] if args else None
    if isinstance(first, torch.Tensor) and first.device.type == NAME:  # the usual case, without a walk
        return first.device.index or 0
    found = []
    map_nested(lambda v: found.append(v.device.index or 0) if isinstance(v, torch.Tensor) and
               v.device.type == NAME else None, (args, kwargs))
    if found:
        return found[0]
    device = kwargs.get("device")
    return (device.index or 0) if isinstance(device, torch.device) else 0


def _written(op, bound):
    return [bound[name] for name in _schema_of(op)[1] if isinstance(bound.get(name), torch.Tensor)]


META_CACHE_SIZE = 4096
_meta_cache: dict = {}


_KEY_SCALARS = frozenset((bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format))


def _meta_key(value):
    """What an elementwise op's meta result depends on: each tensor's geometry and dtype, each scalar's value
    and type (type promotion), or None when an argument is something else (then nothing is cached)."""
    kind = type(value)
    if kind in _KEY_SCALARS:
        return (kind, value)
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.device.type, tuple(value.shape), value.stride())
    if kind is list or kind is tuple:
        keys = tuple(map(_meta_key, value))
        return None if None in keys else (kind, keys)
    return None


def _remember(cache: dict, key, value) -> None:
    """cache[key] = value in one of the per-geometry caches (meta results, views, plans): emptied once it holds
    META_CACHE_SIZE entries, so a program that keeps making new shapes does not grow it without bound."""
    if len(cache) >= META_CACHE_SIZE:
        cache.clear()
    cache[key] = value


@functools.lru_cache(maxsize=None)
def _tensor_arguments(op) -> tuple:
    """(position, name) of each argument `op` declares as a Tensor."""
    return tuple((position, argument.name) for position, argument in enumerate(op._schema.arguments)
                 if isinstance(argument.type, torch._C.TensorType))


def _numbers_as_tensors(op, args, kwargs) -> tuple:
    """(args, kwargs) with a Python number in a Tensor argument made a 0-dim CPU tensor (an int64, bool or
    default-dtype one, the dtypes of a wrapped number). torch hands a Python kernel `x % 3`'s wrapped 3 as a
    number, and calling the op again with it fails outside the few ops (add, mul, ...) that accept numbers."""
    args, kwargs = list(args), dict(kwargs)
    for position, name in _tensor_arguments(op):
        for values, key in ((args, position), (kwargs, name)):
            if (key in values if isinstance(values, dict) else key < len(values)) and \
                    isinstance(values[key], (bool, int, float, complex)):
                values[key] = torch.tensor(values[key])
    return tuple(args), kwargs


def _meta(op, args, kwargs, key=None):
    """An op's meta result (a tensor or a tuple of them), cached by its arguments' geometry, dtypes and scalars:
    torch's meta kernels are about half of a small op's Python dispatch cost, and some (max_pool2d_with_indices)
    run Python decompositions of a millisecond. Only the result's geometry is ever read. `key`: the
    arguments' _meta_key when the caller has it already."""
    key = key if key is not None else _meta_key((args, tuple(sorted(kwargs.items()))))
    if key is not None:
        key = (op, key)
        cached = _meta_cache.get(key)
        if cached is not None:
            return cached
    meta_args, meta_kwargs = _numbers_as_tensors(op, map_nested(_to_meta, args), map_nested(_to_meta, kwargs))
    meta_result = op(*meta_args, **meta_kwargs)
    if key is not None and (isinstance(meta_result, torch.Tensor) or (
            isinstance(meta_result, tuple) and all(isinstance(r, torch.Tensor) for r in meta_result))):
        _remember(_meta_cache, key, meta_result)
    return meta_result


def _output_for(op, args, kwargs, bound, key=None) -> tuple:
    """(the tensor the op writes, the meta result): its in-place/out= argument, or a fresh tensor shaped as
    the op's meta result. `key`: as for _meta."""
    meta_result = _meta(op, args, kwargs, key)
    written = _written(op, bound)
    if written:
        target = written[0]
        if target.shape != meta_result.shape:
            aten.resize_.default(target, meta_result.shape)
        return target, meta_result
    return empty_like_meta(meta_result, _index_of(args, kwargs)), meta_result


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


def _helpers(expr: str, ct: str) -> str:
    """The definitions of the helper functions `expr` calls, over the kernel's compute type `ct`."""
    floating = ct in ("float", "double", "half")
    return "".join(f"#define T {ct}\n{_HELPERS[name][0 if floating else 1]}\n#undef T\n"
                   for name in _HELPERS if name in expr)


@functools.lru_cache(maxsize=None)
def _base(op) -> str:
    """aten::add_ -> add, aten::_softmax -> _softmax."""
    return op._schema.name.split("::")[1].rstrip("_")


def _finish(op, bound, result):
    """An out= overload: the functional result copied into the out tensors, which are returned."""
    targets = _written(op, bound)
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


_pointwise_plans: dict = {}  # (op, argument key) -> _PointwisePlan


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
        empty(plan.size, plan.stride, plan.dtype, _index_of(args, kwargs))
    if out.numel():
        _launch_flat(plan.kernel, plan.np_ct, out, *_pointwise_inputs(bound, plan.operand_names, plan.scalar_names),
                     plan.label)
    return out


def _pointwise_inputs(bound: dict, operand_names, scalar_names) -> tuple:
    """(operands, named scalars) of an elementwise op from its bound arguments: bools as floats, alpha 1 when
    not given."""
    operands = [float(x) if isinstance(x, bool) else x for x in (bound[name] for name in operand_names)]
    return operands, {name: (1 if bound[name] is None else bound[name]) for name in scalar_names}


def _pointwise_op(op, args, kwargs, bound):
    arguments = _meta_key((args, tuple(sorted(kwargs.items()))))
    key = None
    if arguments is not None:
        key = (op, arguments, _index_of(args, kwargs))  # the kernel belongs to one device's context
        plan = _pointwise_plans.get(key)
        if plan is not None:
            return _run_plan(plan, args, kwargs, bound)
    base = _base(op)
    operand_names, expr, scalar_names = POINTWISE[base]
    if bound.get("approximate") == "tanh" and base in _GELU_TANH:
        expr = _GELU_TANH[base]
    elif bound.get("rounding_mode") is not None or bound.get("approximate") not in (None, "none"):
        raise _NoKernel("a variant without a kernel")
    out, _ = _output_for(op, args, kwargs, bound, arguments)
    operands = [bound[name] for name in operand_names]
    tensors = [x for x in operands if isinstance(x, torch.Tensor)]
    compute = out.dtype
    if out.dtype == torch.bool and base != "where" and tensors:  # compare in the inputs' promoted type
        compute = torch.result_type(*operands) if len(operands) == 2 else tensors[0].dtype
    if compute == torch.bfloat16 or any(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
                                        for x in operands):
        raise _NoKernel("bfloat16")
    if not compute.is_floating_point and base in _INTEGER_POINTWISE:
        expr = _INTEGER_POINTWISE[base]
    operands, scalars = _pointwise_inputs(bound, operand_names, scalar_names)
    flat = pointwise(expr, out, operands, compute, scalars)
    written = _schema_of(op)[1]  # the names of the arguments the op writes
    # planned: functional ops and in-place ones (which write self, never resized); not out= overloads, whose
    # target is another tensor each call (the key knows shapes, not which tensor) and may need a resize
    if flat is not None and key is not None and written in ((), ("self",)) and not _schema_of(op)[2]:
        _remember(_pointwise_plans, key, _PointwisePlan(
            "self" if written else None, tuple(out.shape), tuple(out.stride()), out.dtype, operand_names,
            scalar_names, flat[0], flat[1], f"pointwise {expr}"))
    return out


def _row_layout(x: torch.Tensor, dims) -> tuple:
    """x with `dims` moved last, made contiguous as (rows, n) on the device, and the kept shape."""
    dims = sorted({d % max(x.dim(), 1) for d in dims}) if x.dim() else []
    kept = [d for d in range(x.dim()) if d not in dims]
    permuted = x.permute(kept + dims) if x.dim() else x
    staging = empty(permuted.shape, _contiguous_strides(permuted.shape), x.dtype, x.device.index)
    pointwise("a", staging, [permuted])
    n = math.prod(x.shape[d] for d in dims)
    rows = math.prod(x.shape[d] for d in kept)
    return staging.view(rows, n), [x.shape[d] for d in kept], dims


def _reduction(op, args, kwargs, bound):
    base = _base(op)
    x = bound["self"]
    logical = base in ("all", "any")
    if x.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32) + (
            (torch.bool, torch.uint8) if logical else ()):
        raise _NoKernel(f"reduction over {x.dtype}")
    meta_result = _meta(op, args, kwargs)
    dim = bound.get("dim")
    dims = list(range(x.dim())) if dim is None or dim == [] else ([dim] if isinstance(dim, int) else list(dim))
    kind = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min",
            "argmax": "argmax", "argmin": "argmin", "all": "all", "any": "any"}[base]
    source = x if bound.get("dtype") is None else x.to(bound["dtype"])
    rows, _, _ = _row_layout(source, dims)
    if isinstance(meta_result, tuple):
        values = empty_like_meta(meta_result[0], x.device.index)
        indices = empty_like_meta(meta_result[1], x.device.index)
        reduce_rows(kind, rows, values.view(-1) if values.numel() else values)
        reduce_rows("arg" + kind, rows, indices.view(-1) if indices.numel() else indices)
        return _finish(op, bound, (values, indices))
    if rows.shape[1] == 0 and kind in ("max", "min", "argmax", "argmin"):
        raise _NoKernel("empty max")
    out = empty(meta_result.shape, _contiguous_strides(meta_result.shape), meta_result.dtype, x.device.index)
    reduce_rows(kind, rows, out.view(-1))
    return _finish(op, bound, out)


def _softmax(op, args, kwargs, bound):
    x, dim = bound["self"], bound["dim"]
    if x.dtype not in (torch.float32, torch.float64) or bound.get("half_to_float"):
        raise _NoKernel(f"softmax over {x.dtype}")
    dim = dim % max(x.dim(), 1)
    rows, _, _ = _row_layout(x, [dim]) if x.dim() else (x.reshape(1, 1), None, None)
    result = empty(rows.shape, _contiguous_strides(rows.shape), x.dtype, x.device.index)
    softmax_rows(rows, result, log=op._schema.name.endswith("_log_softmax"))
    order = [d for d in range(x.dim()) if d != dim] + [dim]
    inverse = [order.index(d) for d in range(x.dim())]
    permuted = result.view([x.shape[d] for d in order]).permute(inverse)
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, x.device.index)
    pointwise("a", out, [permuted])
    return _finish(op, bound, out)


def _softmax_backward(op, args, kwargs, bound):
    grad, output, dim = bound["grad_output"], bound["output"], bound["dim"]
    if output.dtype not in (torch.float32, torch.float64) or grad.dtype != output.dtype:
        raise _NoKernel("softmax backward dtype")
    out = empty(output.shape, _contiguous_strides(output.shape), output.dtype, output.device.index)
    if op._schema.name.endswith("_log_softmax_backward_data"):
        total = aten.sum.dim_IntList(grad, [dim], True)
        pointwise("a - exp(b) * c", out, [grad, output, total])
    else:
        product = empty(output.shape, _contiguous_strides(output.shape), output.dtype, output.device.index)
        pointwise("a * b", product, [grad, output])
        total = aten.sum.dim_IntList(product, [dim], True)
        pointwise("b * (a - c)", out, [grad, output, total])
    return _finish(op, bound, out)


_NLL_SOURCE = """
__kernel void nll_rows(__global const T* x, long x_off, __global const long* target, long t_off,
                       __global T* loss, __global T* weight, long rows, long classes, long ignore) {
    long r = get_global_id(0);
    if (r >= rows) return;
    long t = target[t_off + r];
    int skip = t == ignore || t < 0 || t >= classes;
    loss[r] = skip ? (T)0 : -x[x_off + r * classes + t];
    weight[r] = skip ? (T)0 : (T)1;
}
__kernel void nll_grad(__global T* grad, __global const long* target, long t_off, __global const T* scale,
                       long s_off, long s_stride, __global const T* total_weight, long w_off, int mean, long rows,
                       long classes, long ignore) {
    /* "mean" divides by total_weight read here, on the device: no host read (and so no sync) per step */
    long r = get_global_id(0);
    if (r >= rows) return;
    long t = target[t_off + r];
    if (t == ignore || t < 0 || t >= classes) return;
    grad[r * classes + t] = -scale[s_off + r * s_stride] / (mean ? total_weight[w_off] : (T)1);
}
"""
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll(op, args, kwargs, bound):
    x, target = bound["self"], bound["target"]
    if x.dim() != 2 or bound.get("weight") is not None or x.dtype not in (torch.float32, torch.float64) \
            or target.dtype != torch.int64:
        raise _NoKernel("nll_loss beyond 2-D unweighted")
    dev = _dev(x)
    index = x.device.index
    rows, classes = x.shape
    x = x if x.is_contiguous() else x.contiguous()
    target = target if target.is_contiguous() else target.contiguous()
    t = _cl_type(x.dtype)
    reduction = _REDUCTIONS[bound["reduction"]]
    program_source = f"#define T {t}\n" + _NLL_SOURCE
    ignore = np.int64(bound["ignore_index"])
    if op._schema.name.endswith("nll_loss_forward"):
        loss = empty([rows], [1], x.dtype, index)
        weight = empty([rows], [1], x.dtype, index)
        if rows:
            dev.launch(dev.kernel("nll_rows", program_source), (rows,), None,
                _block(x).buffer, np.int64(x.storage_offset()), _block(target).buffer,
                np.int64(target.storage_offset()), _block(loss).buffer, _block(weight).buffer, np.int64(rows),
                np.int64(classes), ignore)
        total_weight = aten.sum.default(weight)
        if reduction == "none":
            return _finish(op, bound, (loss, total_weight))
        total = aten.sum.default(loss)
        if reduction == "mean":
            total = aten.div.Tensor(total, total_weight)
        return _finish(op, bound, (total, total_weight))
    grad_output, total_weight = bound["grad_output"], bound["total_weight"]
    grad = empty([rows, classes], [classes, 1], x.dtype, index)
    pointwise("0", grad, [])
    if total_weight.dtype != x.dtype or total_weight.device != x.device:
        raise _NoKernel("nll_loss total_weight of another dtype or device")
    scale_stride = 0 if grad_output.dim() == 0 else grad_output.stride(0)
    if rows:
        dev.launch(dev.kernel("nll_grad", program_source), (rows,), None,
            _block(grad).buffer, _block(target).buffer, np.int64(target.storage_offset()),
            _block(grad_output).buffer, np.int64(grad_output.storage_offset()), np.int64(scale_stride),
            _block(total_weight).buffer, np.int64(total_weight.storage_offset()), np.int32(reduction == "mean"),
            np.int64(rows), np.int64(classes), ignore)
    return _finish(op, bound, grad)


@dataclasses.dataclass(frozen=True)
class _Mat:
    """A 2-D matrix in a device buffer, described without a torch view: each view of an ocl tensor is a full
    trip through dispatch (25-30 us on the H100's host), and a convolution's backward took a dozen."""

    buffer: object  # the OpenCL buffer
    dtype: torch.dtype
    index: int  # the device's
    offset: int  # in elements, from the buffer's start
    rows: int
    cols: int
    row_stride: int
    col_stride: int = 1
    base: torch.Tensor | None = None  # a tensor on the buffer's storage (none for scratch buffers)

    @property
    def shape(self) -> tuple:
        return self.rows, self.cols

    # built with the constructor, not dataclasses.replace (~5 us a call: a convolution's backward made seven)
    def t(self) -> "_Mat":
        return _Mat(self.buffer, self.dtype, self.index, self.offset, self.cols, self.rows, self.col_stride,
                    self.row_stride, self.base)

    def row_range(self, start: int, stop: int) -> "_Mat":
        return _Mat(self.buffer, self.dtype, self.index, self.offset + start * self.row_stride, stop - start,
                    self.cols, self.row_stride, self.col_stride, self.base)

    def col_range(self, start: int, stop: int) -> "_Mat":
        return _Mat(self.buffer, self.dtype, self.index, self.offset + start * self.col_stride, self.rows,
                    stop - start, self.row_stride, self.col_stride, self.base)

    def tensor(self) -> torch.Tensor:
        if self.base is None:
            raise ValueError("a scratch matrix has no tensor")
        return _table.view_of(self.base, self.dtype, self.offset, (self.rows, self.cols),
                              (self.row_stride, self.col_stride))


def _mat(t: torch.Tensor, rows: int | None = None, cols: int | None = None, start: int = 0) -> _Mat:
    """A 2-D tensor as a _Mat; or, given rows and cols, the row-major rows x cols matrix `start` elements after
    the (contiguous) tensor's first element."""
    index = t.device.index or 0
    if rows is None:
        return _Mat(_block(t).buffer, t.dtype, index, t.storage_offset(), t.shape[0], t.shape[1], t.stride(0),
                    t.stride(1), t)
    return _Mat(_block(t).buffer, t.dtype, index, t.storage_offset() + start, rows, cols, cols, 1, t)


class _Scratch:
    """Buffers for one op's temporaries (im2col columns, partial sums, coefficients), taken from the pool and
    given back when the op has enqueued its last command: the queue is in order, so a later command that reuses
    one runs after every command of this op. No tensor is made for them (a tensor costs ~40 us of host time on
    the H100's host)."""

    def __init__(self, dev: runtime.Device):
        self.dev, self.buffers = dev, []

    def buffer(self, nbytes: int):
        buffer = self.dev.allocate(max(nbytes, 1), _reclaim)
        self.buffers.append(buffer)
        return buffer

    def mat(self, dtype, rows: int, cols: int) -> _Mat:
        """A row-major rows x cols scratch matrix."""
        return _Mat(self.buffer(rows * cols * dtype.itemsize), dtype, self.dev.index, 0, rows, cols, cols)

    def __enter__(self) -> "_Scratch":
        return self

    def __exit__(self, *exc) -> None:
        for buffer in self.buffers:
            self.dev.release(buffer)
        self.buffers = []


def _gemm_layout(m: _Mat):
    """(transposed, leading dimension) of a matrix CLBlast can read in place, or None."""
    if m.col_stride == 1 and m.row_stride >= max(m.cols, 1):
        return False, m.row_stride
    if m.row_stride == 1 and m.col_stride >= max(m.rows, 1):
        return True, m.col_stride
    return None


def _gemm_operand(m: _Mat) -> tuple:
    """(matrix, transposed, leading dimension), copying the matrix if neither layout fits."""
    layout = _gemm_layout(m)
    if layout is not None:
        return (m,) + layout
    dense = empty([m.rows, m.cols], [m.cols, 1], m.dtype, m.index)
    pointwise("a", dense, [m.tensor()])
    return _mat(dense), False, max(m.cols, 1)


def _mm_into(out, a, b, alpha: float, beta: float, batch: int = 1, strides: tuple = (0, 0, 0)) -> None:
    """out = alpha * a @ b + beta * out for 2-D device tensors or _Mats (out row-major); with `batch` > 1, that
    many products whose a, b and out start `strides` elements after the previous ones (those given are the
    first)."""
    out, a, b = (x if isinstance(x, _Mat) else _mat(x) for x in (out, a, b))
    m, k = a.shape
    n = b.cols
    if m == 0 or n == 0 or batch == 0:
        return
    if out.col_stride != 1 and out.rows > 1 and out.cols > 1:
        raise ValueError("a GEMM's output must be row-major")
    if k == 0 and batch == 1:
        target = out.tensor()
        pointwise("a * beta", target, [target], scalars={"beta": beta}) if beta else pointwise("0", target, [])
        return
    if batch > 1 and (_gemm_layout(a) is None or _gemm_layout(b) is None):
        raise ValueError("a batched GEMM operand must be readable in place")  # callers pass strided views
    a, trans_a, lda = _gemm_operand(a)
    b, trans_b, ldb = _gemm_operand(b)
    pieces = _split_k_pieces(m, n, k) if batch == 1 else 0
    if pieces >= 2:
        return _mm_split_k(out, a, trans_a, lda, b, trans_b, ldb, alpha, beta, pieces)
    dev, ldc = runtime.device(out.index), max(out.row_stride, n)
    with _Scratch(dev) as scratch:
        temp = None
        if batch == 1:  # CLBlast's padded copies in a pool buffer, not one it makes and frees per call
            nbytes = runtime.gemm_temp_bytes(dev, out.dtype, trans_a, trans_b, m, n, k, a.offset, lda, b.offset, ldb,
                                             out.offset, ldc)
            temp = scratch.buffer(nbytes) if nbytes else None
        runtime.gemm(dev, out.dtype, trans_a, trans_b, m, n, k, alpha, a.buffer, a.offset, lda, b.buffer, b.offset,
                     ldb, beta, out.buffer, out.offset, ldc, batch=batch, strides=strides, temp=temp)


_OWN_GEMM_SOURCE = """
/* C[b] = alpha * A[b] @ B[b] + beta * C[b] for small batched GEMMs, launched without CLBlast's host cost (~50 us
   a call on the H100's host). Geometry and strides compiled in (M, N, K, A_RS, A_CS, A_BS, B_RS, B_CS, B_BS,
   C_RS, C_BS); a 64 x 64 tile of C per 16 x 16 work-group, 4 x 4 per work item, k in steps of 16 through local
   memory. Optional: KL, k walks blocks of KL (k = block * KL + j: A at block * A_KB + j * A_CS, B at block *
   B_KB + j * B_RS; a 1x1 convolution's weight gradient sums over (image, pixel)); KC, split-K: the third
   work-group index is a slice of KC of k, not a batch entry, and C[b] its partial product. */
#ifdef KL
#define KOFF(k, S, SB) (((k) / KL) * (SB) + ((k) % KL) * (S))
#else
#define KOFF(k, S, SB) ((k) * (S))
#define A_KB 0
#define B_KB 0
#endif
#ifndef KC
#define KC K
#define KSPLIT 0
#else
#define KSPLIT 1
#endif
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void own_gemm(__global const T* A, long a_off, __global const T* B, long b_off, __global T* C, long c_off,
              ACC alpha, ACC beta) {
    int tx = get_local_id(0), ty = get_local_id(1);
    long n0 = get_group_id(0) * 64, m0 = get_group_id(1) * 64, b = get_group_id(2);
    __local T As[16][65];
    __local T Bs[16][64];
    ACC acc[4][4];
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] = 0;
    long kbeg = KSPLIT ? b * KC : 0, kend = KSPLIT ? min((long)K, kbeg + KC) : K;
    A += a_off + (KSPLIT ? 0 : b * A_BS); B += b_off + (KSPLIT ? 0 : b * B_BS);
    for (long k0 = kbeg; k0 < kend; k0 += 16) {
        for (int l = 0; l < 4; l++) {
            int e = ty * 16 + tx + l * 256;
            int mm = e / 16, ka = e % 16, kb = e / 64, nn = e % 64;
            long gm = m0 + mm, ga = k0 + ka, gb = k0 + kb, gn = n0 + nn;
            As[ka][mm] = (gm < M && ga < kend) ? A[gm * A_RS + KOFF(ga, A_CS, A_KB)] : (T)0;
            Bs[kb][nn] = (gb < kend && gn < N) ? B[KOFF(gb, B_RS, B_KB) + gn * B_CS] : (T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < 16; kk++) {
            T a[4], v[4];
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) v[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) acc[i][j] += (ACC)a[i] * (ACC)v[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < 4; i++) {
        long m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
            long n = n0 + tx + 16 * j;
            if (n >= N) continue;
            long at = c_off + b * C_BS + m * C_RS + n;
            C[at] = (T)(alpha * acc[i][j] + (beta != 0 ? beta * (ACC)C[at] : (ACC)0));
        }
    }
}
"""


def _own_gemm_kernel(dev: runtime.Device, dtype, values: dict):
    """own_gemm built for a geometry (`values`: the defines of _OWN_GEMM_SOURCE)."""
    header = (f"T {_cl_type(dtype)}", f"ACC {'double' if dtype == torch.float64 else 'float'}")
    return dev.kernel("own_gemm", _compiled_source(_OWN_GEMM_SOURCE, header, tuple(values), tuple(values.values()),
                                                   True))


OWN_GEMM_SPLIT_GROUPS = 512  # work-groups a split-K own_gemm aims at (the H100 has 132 compute units)


def _own_weight_grad_1x1(dev: runtime.Device, grad: torch.Tensor, x: torch.Tensor, grad_weight: torch.Tensor,
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
    gw = _mat(grad_weight, cout, cg)
    with _Scratch(dev) as scratch:
        partial = scratch.buffer(splits * coutg * cg * x.dtype.itemsize)
        for group in range(groups):
            dev.launch(kernel, (-(-cg // 64) * 16, -(-coutg // 64) * 16, splits), (16, 16, 1), _block(grad).buffer,
                       np.int64(grad.storage_offset() + group * coutg * length), _block(x).buffer,
                       np.int64(x.storage_offset() + group * cg * length), partial, np.int64(0), scalar(1.0),
                       scalar(0.0))
            _sum_pieces(dev, partial, splits, gw.row_range(group * coutg, (group + 1) * coutg), 0.0)


def _own_gemm(out: _Mat, a: _Mat, b: _Mat, alpha: float, beta: float, batch: int = 1,
              strides: tuple = (0, 0, 0)) -> None:
    """out = alpha * a @ b + beta * out, `batch` times `strides` apart, by _OWN_GEMM_SOURCE: any strides for a
    and b, out row-major. One program per geometry (built once, disk-cached by pyopencl)."""
    if not (a.rows and b.cols and batch):
        return
    dev = runtime.device(out.index)
    kernel, grid = _own_gemm_geometry(dev, out, a, b, batch, strides)
    scalar = np.float64 if out.dtype == torch.float64 else np.float32
    dev.launch(kernel, grid, (16, 16, 1), a.buffer, np.int64(a.offset), b.buffer, np.int64(b.offset), out.buffer,
               np.int64(out.offset), scalar(alpha), scalar(beta))


def _own_gemm_geometry(dev: runtime.Device, out: _Mat, a: _Mat, b: _Mat, batch: int, strides: tuple) -> tuple:
    """(kernel, global size) of own_gemm for these matrices' shapes and strides (their offsets are arguments)."""
    m, k, n = a.rows, a.cols, b.cols
    values = dict(M=m, N=n, K=k, A_RS=a.row_stride, A_CS=a.col_stride, A_BS=strides[0], B_RS=b.row_stride,
                  B_CS=b.col_stride, B_BS=strides[1], C_RS=out.row_stride, C_BS=strides[2])
    return _own_gemm_kernel(dev, out.dtype, values), (-(-n // 64) * 16, -(-m // 64) * 16, batch)


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


_SUM_PIECES_SOURCE = """
__kernel void sum_pieces(__global const T* partial, long pieces, long m, long n, __global T* out, long out_off,
                         long ldc, T beta) {
    long i = get_global_id(0);
    if (i >= m * n) return;
    ACC acc = 0;
    for (long p = 0; p < pieces; ++p) acc += (ACC)partial[p * m * n + i];
    long o = out_off + (i / n) * ldc + i % n;
    out[o] = (T)(beta != 0 ? acc + (ACC)beta * (ACC)out[o] : acc);
}
"""


def _sum_pieces(dev, partial, pieces: int, out: "_Mat", beta: float) -> None:
    """out = sum of `pieces` contiguous (out.rows x out.cols) partial products in `partial` + beta * out,
    accumulated in double where the device has fp64."""
    dtype = out.dtype
    wide = "double" if dtype == torch.float64 or dev.info.fp64 else "float"
    source = _compiled_source(_SUM_PIECES_SOURCE, (f"T {_cl_type(dtype)}", f"ACC {wide}"))
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
    with _Scratch(dev) as scratch:
        partial = scratch.buffer(pieces * m * n * dtype.itemsize)
        runtime.gemm(dev, dtype, trans_a, trans_b, m, n, chunk, alpha, a.buffer, a.offset, lda, b.buffer, b.offset,
                     ldb, 0.0, partial, 0, n, batch=pieces, strides=(step_a, step_b, m * n))
        _sum_pieces(dev, partial, pieces, out, beta)
    if k > pieces * chunk:
        _mm_into(out, a.col_range(pieces * chunk, k), b.row_range(pieces * chunk, k), alpha, 1.0)


def _matmul(op, args, kwargs, bound):
    base = _base(op)
    if bound["self"].dtype not in (torch.float32, torch.float64):
        raise _NoKernel("a GEMM variant without CLBlast")
    meta_result = _meta(op, args, kwargs)
    index = bound["self"].device.index
    written = _written(op, bound)
    if written and written[0].dtype == meta_result.dtype:  # mm.out (torch.mm's path): GEMM straight into it
        if written[0].shape != meta_result.shape:
            aten.resize_.default(written[0], meta_result.shape)
        inputs = {t.untyped_storage()._cdata for t in (bound.get("self"), bound.get("mat1"), bound.get("mat2"))
                  if isinstance(t, torch.Tensor)}
        if written[0].is_contiguous() and written[0].untyped_storage()._cdata not in inputs:
            out = written[0]
            bound = dict(bound, out=None)  # nothing left for _finish to copy
    if not written or bound.get("out") is not None:
        out = empty(meta_result.shape, _contiguous_strides(meta_result.shape), meta_result.dtype, index)
    if base == "mm":
        _mm_into(out, bound["self"], bound["mat2"], 1.0, 0.0)
    elif base == "addmm":
        beta, alpha = float(bound["beta"]), float(bound["alpha"])
        if beta:
            pointwise("a", out, [bound["self"]])
        _mm_into(out, bound["mat1"], bound["mat2"], alpha, beta)
    else:  # bmm: one strided-batched GEMM
        a, b = bound["self"], bound["mat2"]
        if out.shape[0] == 1 or out.numel() == 0:
            for batch in range(out.shape[0]):
                _mm_into(out[batch], a[batch], b[batch], 1.0, 0.0)
        else:
            a = a if _gemm_layout(_mat(a[0])) is not None else _contiguous(a)
            b = b if _gemm_layout(_mat(b[0])) is not None else _contiguous(b)
            if a.shape[2] == 0:
                pointwise("0", out, [])
            else:
                _mm_into(out[0], a[0], b[0], 1.0, 0.0, batch=out.shape[0],
                         strides=(a.stride(0), b.stride(0), out.stride(0)))
    return _finish(op, bound, out)


_GEOMETRY_INPLACE = {"resize_", "as_strided_", "t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_",
                     "swapaxes_", "set_"}


def _geometry_inplace(op, args, kwargs, bound):
    base = op._schema.name.split("::")[1]
    target = bound["self"]
    if base == "set_":  # point self at another ocl storage (torch.save's storage.cpu() comes this way)
        overload, source = op._overloadname, bound.get("source")
        if overload == "source_Storage":
            return set_geometry(target, source, 0, [source.nbytes() // target.element_size()], [1])
        if overload == "source_Storage_storage_offset":
            return set_geometry(target, source, bound["storage_offset"], bound["size"],
                                bound["stride"] or _contiguous_strides(bound["size"]))
        if overload == "source_Tensor":
            return set_geometry(target, source.untyped_storage(), source.storage_offset(), source.size(),
                                source.stride())
        fresh = empty([0], [1], target.dtype, target.device.index)
        return set_geometry(target, fresh.untyped_storage(), 0, [0], [1])
    meta_result = op(*map_nested(_to_meta, args), **map_nested(_to_meta, kwargs))
    needed = _extent(meta_result.size(), meta_result.stride(), meta_result.storage_offset()) * target.element_size()
    if needed > target.untyped_storage().nbytes():  # resize_ grew it: new memory holding the old bytes
        old = download(target.reshape(-1)) if target.numel() else None
        fresh = empty(meta_result.size(), meta_result.stride(), target.dtype, target.device.index,
                      meta_result.storage_offset())
        set_geometry(target, fresh.untyped_storage(), meta_result.storage_offset(), meta_result.size(),
                     meta_result.stride())
        if old is not None and target.is_contiguous():
            upload(old, target.reshape(-1)[:old.numel()])
        return target
    return set_geometry(target, target.untyped_storage(), meta_result.storage_offset(), meta_result.size(),
                        meta_result.stride())


_view_geometry: dict = {}  # (op, argument key) -> per result (storage offset after the input's, size, stride, dtype)


def _view(op, args, kwargs):
    """A view op: its geometry from meta tensors, its storage the input's. as_strided says its geometry itself;
    a view of one device tensor reuses the geometry it had for the same op, input geometry and arguments
    (the view's offset relative to the input's), so a repeated view runs no meta kernel."""
    if op is aten.as_strided.default:
        base, size, stride = args[0], args[1], args[2]
        offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
        return _table.view_of(base, base.dtype, base.storage_offset() if offset is None else offset, size, stride)
    key = _meta_key((args, tuple(sorted(kwargs.items()))))
    base = args[0] if args and isinstance(args[0], torch.Tensor) and args[0].device.type == NAME else None
    if key is not None and base is not None:
        geometry = _view_geometry.get((op, key))
        if geometry is not None:
            return _views_from(base, geometry)
    result = _view_by_meta(op, args, kwargs)
    if key is not None and base is not None:
        results = result if isinstance(result, (list, tuple)) else (result,)
        if all(isinstance(r, torch.Tensor) and r.untyped_storage()._cdata == base.untyped_storage()._cdata
               for r in results):
            _remember(_view_geometry, (op, key), (type(result) if isinstance(result, (list, tuple)) else None, tuple(
                (r.storage_offset() - base.storage_offset(), tuple(r.size()), r.stride(), r.dtype) for r in results)))
    return result


def _views_from(base: torch.Tensor, geometry: tuple):
    kind, parts = geometry
    views = [_table.view_of(base, dtype, base.storage_offset() + delta, size, stride)
             for delta, size, stride, dtype in parts]
    return views[0] if kind is None else kind(views)


def _view_by_meta(op, args, kwargs):
    bases = {}

    def to_meta(value):
        meta = _to_meta(value)
        if meta is not value and isinstance(value, torch.Tensor):
            bases[meta.untyped_storage()._cdata] = value
        return meta

    result = op(*map_nested(to_meta, args), **map_nested(to_meta, kwargs))

    def wrap(meta):
        if not isinstance(meta, torch.Tensor):
            return meta
        base = bases[meta.untyped_storage()._cdata]
        return _table.view_of(base, meta.dtype, meta.storage_offset(), meta.size(), meta.stride())

    return map_nested(wrap, result)


def _is_view_op(op) -> bool:
    return _schema_of(op)[3]


def _copy_from(op, args, kwargs):
    source, target = args[0], args[1]
    if op is aten._copy_from_and_resize.default and target.shape != source.shape:
        if target.device.type == NAME:
            aten.resize_.default(target, source.shape)
        else:
            target.resize_(source.shape)
    if target.device.type == NAME and source.device.type == NAME:
        if target.dtype == torch.bfloat16 or source.dtype == torch.bfloat16:
            _cast_bfloat16(target, source)
        else:
            pointwise("a", target, [source])
    elif target.device.type == NAME:
        upload(source, target)
    else:
        target.copy_(download(source))
    return target


def _local_scalar_dense(op, args, kwargs):
    return download(args[0]).item()


def _empty(op, args, kwargs, bound):
    dtype = bound.get("dtype") or torch.get_default_dtype()
    size = list(bound["size"])
    stride = list(bound["stride"]) if bound.get("stride") is not None else _contiguous_strides(size)
    device = bound.get("device")
    return empty(size, stride, dtype, device.index or 0 if device is not None else 0)


def _layer_norm(op, args, kwargs, bound):
    """native_layer_norm and its backward, composed of this backend's own kernels (rows = leading dims)."""
    if _written(op, bound):
        raise _NoKernel("layer norm out=")
    x = bound["input"]
    if x.dtype not in (torch.float32, torch.float64):
        raise _NoKernel(f"layer norm over {x.dtype}")
    normalized = list(bound["normalized_shape"])
    axis = x.dim() - len(normalized)
    dims = list(range(axis, x.dim()))
    stat_shape = list(x.shape[:axis]) + [1] * len(normalized)
    weight, bias = bound.get("weight"), bound.get("bias")
    if _base(op) == "native_layer_norm":
        mean = aten.mean.dim(x, dims, True)
        centered = aten.sub.Tensor(x, mean)
        variance = aten.mean.dim(aten.mul.Tensor(centered, centered), dims, True)
        rstd = aten.rsqrt.default(aten.add.Scalar(variance, bound["eps"]))
        out = aten.mul.Tensor(centered, rstd)
        if weight is not None:
            out = aten.mul.Tensor(out, weight)
        if bias is not None:
            out = aten.add.Tensor(out, bias)
        return out, mean.view(stat_shape), rstd.view(stat_shape)
    grad, mean, rstd = bound["grad_out"], bound["mean"], bound["rstd"]
    mask = bound["output_mask"]
    xhat = aten.mul.Tensor(aten.sub.Tensor(x, mean), rstd)
    g = aten.mul.Tensor(grad, weight) if weight is not None else grad
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        mean_g = aten.mean.dim(g, dims, True)
        mean_gx = aten.mean.dim(aten.mul.Tensor(g, xhat), dims, True)
        inner = aten.sub.Tensor(aten.sub.Tensor(g, mean_g), aten.mul.Tensor(xhat, mean_gx))
        grad_input = aten.mul.Tensor(inner, rstd)
    batch_dims = list(range(axis))
    if mask[1] and weight is not None:
        product = aten.mul.Tensor(grad, xhat)
        grad_weight = aten.sum.dim_IntList(product, batch_dims, False) if batch_dims else product
    if mask[2] and bias is not None:
        grad_bias = aten.sum.dim_IntList(grad, batch_dims, False) if batch_dims else aten.clone.default(grad)
    return grad_input, grad_weight, grad_bias


_EMBEDDING_SOURCE = """
__kernel void gather_rows(__global const T* weight, long w_off, long w_row, __global const long* index,
                          long i_off, __global T* out, long count, long width) {
    long g = get_global_id(0);
    if (g >= count * width) return;
    long i = g / width, j = g % width;
    out[g] = weight[w_off + index[i_off + i] * w_row + j];
}
__kernel void scatter_add_rows(__global const T* grad, __global const long* index, long i_off, __global T* out,
                               long count, long width, long rows, long padding) {
    long j = get_global_id(0);
    if (j >= width) return;
    for (long i = 0; i < count; ++i) {
        long r = index[i_off + i];
        if (r != padding && r >= 0 && r < rows) out[r * width + j] += grad[i * width + j];
    }
}
"""


def _embedding(op, args, kwargs, bound):
    """embedding / index_select on dim 0 (a gather) and embedding_dense_backward (a per-column scatter-add,
    no atomics, so the sum order is fixed)."""
    base = _base(op)
    if _written(op, bound):
        raise _NoKernel("out=")
    if base == "index_select":
        weight, index = bound["self"], bound["index"]
        if bound["dim"] != 0 or weight.dim() < 1:
            raise _NoKernel("index_select beyond dim 0")
    elif base == "embedding":
        weight, index = bound["weight"], bound["indices"]
    else:
        weight, index = bound["grad_output"], bound["indices"]
    if weight.dtype not in (torch.float32, torch.float64) or index.dtype != torch.int64:
        raise _NoKernel("embedding dtypes")
    dev = _dev(weight)
    source = f"#define T {_cl_type(weight.dtype)}\n" + _EMBEDDING_SOURCE
    index = index if index.is_contiguous() else aten.clone.default(index, memory_format=torch.contiguous_format)
    count = index.numel()
    if base == "embedding_dense_backward":
        rows = bound["num_weights"]
        width = weight.shape[-1]
        grad = _contiguous(weight, at_start=True)  # scatter_add_rows reads grad from its buffer's start
        out = empty([rows, width], [width, 1], weight.dtype, weight.device.index)
        pointwise("0", out, [])
        if bound["scale_grad_by_freq"]:
            raise _NoKernel("scale_grad_by_freq")
        if count and width:
            dev.launch(dev.kernel("scatter_add_rows", source), (width,), None,
                _block(grad).buffer, _block(index).buffer, np.int64(index.storage_offset()),
                _block(out).buffer, np.int64(count), np.int64(width), np.int64(rows), np.int64(bound["padding_idx"]))
        return out
    weight = weight if weight.is_contiguous() else aten.clone.default(weight, memory_format=torch.contiguous_format)
    row_shape = list(weight.shape[1:])
    width = math.prod(row_shape)
    shape = (list(index.shape) if base == "embedding" else [count]) + row_shape
    out = empty(shape, _contiguous_strides(shape), weight.dtype, weight.device.index)
    if count and width:
        dev.launch(dev.kernel("gather_rows", source), (count * width,), None,
            _block(weight).buffer, np.int64(weight.storage_offset()),
            np.int64(width), _block(index).buffer, np.int64(index.storage_offset()), _block(out).buffer,
            np.int64(count), np.int64(width))
    return out


_CONV_SOURCE = """
/* FOR_READERS(BODY): BODY for each output (oy, ox) and kernel tap (ki, kj) whose window reads input (iy, ix) */
#define FOR_READERS(BODY) \\
    for (IDX ki = 0; ki < KH; ++ki) { \\
        IDX ty = iy + PH - ki * DH; \\
        if (ty < 0 || ty % SH) continue; \\
        IDX oy = ty / SH; \\
        if (oy >= OH) continue; \\
        for (IDX kj = 0; kj < KW; ++kj) { \\
            IDX tx = ix + PW - kj * DW; \\
            if (tx < 0 || tx % SW) continue; \\
            IDX ox = tx / SW; \\
            if (ox >= OW) continue; \\
            BODY; \\
        } \\
    }
__kernel void im2col(__global const T* x, long x_off, __global T* cols, long CS) {
    /* cols is (C*KH*KW, CS >= images*OH*OW): the columns of a chunk's images side by side, image-major in a row;
       work item (rest, row): rest = image * OH*OW + pixel. The geometry is compile-time (#defines): constant
       divisors become multiplications */
    IDX rest = get_global_id(0), row = get_global_id(1);
    IDX image = rest / (OH * OW), l = rest % (OH * OW);
    IDX c = row / (KH * KW), r = row % (KH * KW);
    IDX iy = (l / OW) * SH - PH + (r / KW) * DH, ix = (l % OW) * SW - PW + (r % KW) * DW;
    cols[(long)row * CS + rest] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
        ? x[x_off + ((long)(image * C + c) * H + iy) * W + ix] : (T)0;
}
__kernel void col2im(__global const T* cols, __global T* x, long x_off, long CS, long NB) {
    /* the gather form of col2im: each input element sums the columns that read it, in a fixed order */
    IDX g = get_global_id(0);
    if (g >= NB * C * H * W) return;
    IDX image = g / (C * H * W), c = (g / (H * W)) % C, iy = (g / W) % H, ix = g % W;
    T acc = 0;
    FOR_READERS(acc += cols[(long)((c * KH + ki) * KW + kj) * CS + image * (OH * OW) + oy * OW + ox]);
    x[x_off + g] = acc;
}
__kernel void depthwise(__global const T* x, long x_off, __global const T* w, long w_off, __global T* out) {
    /* groups == C: output channel o reads input channel o / M (M outputs per input channel) */
    IDX g = get_global_id(0);
    x += x_off; w += w_off;
    if (g >= N * C * M * OH * OW) return;
    IDX ox = g % OW, oy = (g / OW) % OH, o = (g / (OH * OW)) % (C * M), n = g / (C * M * OH * OW);
    __global const T* plane = x + (n * C + o / M) * H * W;
    T acc = 0;
    for (IDX ki = 0; ki < KH; ++ki) {
        IDX iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (IDX kj = 0; kj < KW; ++kj) {
            IDX ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            acc += plane[iy * W + ix] * w[(o * KH + ki) * KW + kj];
        }
    }
    out[g] = acc;
}
__kernel void depthwise_grad_input(__global const T* grad, long grad_off, __global const T* w, long w_off,
                                   __global T* gx) {
    IDX g = get_global_id(0);
    grad += grad_off; w += w_off;
    if (g >= N * C * H * W) return;
    IDX ix = g % W, iy = (g / W) % H, c = (g / (H * W)) % C, n = g / (C * H * W);
    T acc = 0;
    for (IDX m = 0; m < M; ++m) {
        IDX o = c * M + m;
        __global const T* plane = grad + (n * C * M + o) * OH * OW;
        FOR_READERS(acc += plane[oy * OW + ox] * w[(o * KH + ki) * KW + kj]);
    }
    gx[g] = acc;
}
__kernel void depthwise_grad_weight(__global const T* grad, long grad_off, __global const T* x, long x_off,
                                    __global T* partial) {
    /* partial[n * C * M * KH * KW + o * KH * KW + r]: one image's share of one weight's gradient; summed over
       the images after (sum_pieces) */
    IDX g = get_global_id(0);
    grad += grad_off; x += x_off;
    if (g >= C * M * KH * KW * N) return;
    IDX n = g / (C * M * KH * KW), r = g % (KH * KW), o = (g / (KH * KW)) % (C * M);
    IDX ki = r / KW, kj = r % KW;
    __global const T* gplane = grad + (n * C * M + o) * OH * OW;
    __global const T* xplane = x + (n * C + o / M) * H * W;
    ACC acc = 0;
    for (IDX oy = 0; oy < OH; ++oy) {
        IDX iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (IDX ox = 0; ox < OW; ++ox) {
            IDX ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            acc += gplane[oy * OW + ox] * xplane[iy * W + ix];
        }
    }
    partial[g] = acc;
}
"""
_WINOGRAD_SOURCE = """
/* Winograd F(2x2, 3x3) for stride-1, undilated 3x3 convolutions (Lavin and Gray, "Fast Algorithms for
   Convolutional Neural Networks", CVPR 2016): each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over a 4x4
   input tile d, so the 16 element-wise products become 16 GEMMs, (CO x CI) @ (CI x tiles), with 4 multiplies per
   output where direct convolution has 9. #defines: CI, CO channels in and out, H x W in, OH x OW out, PAD, TH x TW
   tiles per image. */
__kernel void wino_weight(__global const T* w, long w_off, __global T* u, int flip) {
    /* u[xi][co][ci] = (G g G^T)[xi]; g = w[co][ci], or with flip (the data gradient) w[ci][co] turned 180 degrees */
    IDX g = get_global_id(0);
    if (g >= CO * CI) return;
    IDX co = g / CI, ci = g % CI;
    T k[3][3], t[4][3];
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
            k[i][j] = flip ? w[w_off + ((long)(ci * CO + co) * 3 + (2 - i)) * 3 + (2 - j)]
                           : w[w_off + ((long)(co * CI + ci) * 3 + i) * 3 + j];
    for (int j = 0; j < 3; ++j) {
        t[0][j] = k[0][j];
        t[1][j] = (T)0.5 * (k[0][j] + k[1][j] + k[2][j]);
        t[2][j] = (T)0.5 * (k[0][j] - k[1][j] + k[2][j]);
        t[3][j] = k[2][j];
    }
    for (int i = 0; i < 4; ++i) {
        T r[4] = {t[i][0], (T)0.5 * (t[i][0] + t[i][1] + t[i][2]), (T)0.5 * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
        for (int j = 0; j < 4; ++j) u[(long)(i * 4 + j) * CO * CI + g] = r[j];
    }
}
__kernel void wino_input(__global const T* x, long x_off, __global T* v, long NT) {
    /* v[xi][ci][p] = (B^T d B)[xi] for tile p (image-major) of a chunk's NT tiles */
    IDX g = get_global_id(0);
    if (g >= CI * NT) return;
    IDX ci = g / NT, p = g % NT;
    IDX n = p / (TH * TW), tile = p % (TH * TW);
    IDX y0 = (tile / TW) * 2 - PAD, x0 = (tile % TW) * 2 - PAD;
    __global const T* plane = x + x_off + (long)(n * CI + ci) * H * W;
    T d[4][4], s[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            IDX y = y0 + i, xx = x0 + j;
            d[i][j] = (y >= 0 && y < H && xx >= 0 && xx < W) ? plane[y * W + xx] : (T)0;
        }
    for (int j = 0; j < 4; ++j) {
        s[0][j] = d[0][j] - d[2][j]; s[1][j] = d[1][j] + d[2][j];
        s[2][j] = d[2][j] - d[1][j]; s[3][j] = d[1][j] - d[3][j];
    }
    long plane_size = (long)CI * NT;
    for (int i = 0; i < 4; ++i) {
        v[(i * 4 + 0) * plane_size + g] = s[i][0] - s[i][2];
        v[(i * 4 + 1) * plane_size + g] = s[i][1] + s[i][2];
        v[(i * 4 + 2) * plane_size + g] = s[i][2] - s[i][1];
        v[(i * 4 + 3) * plane_size + g] = s[i][1] - s[i][3];
    }
}
__kernel void wino_output(__global const T* m, __global T* out, long out_off, long NT) {
    /* out tile = A^T m A from m[xi][co][p] */
    IDX g = get_global_id(0);
    if (g >= CO * NT) return;
    IDX co = g / NT, p = g % NT;
    IDX n = p / (TH * TW), tile = p % (TH * TW);
    IDX oy = (tile / TW) * 2, ox = (tile % TW) * 2;
    long plane_size = (long)CO * NT;
    T a[4][4], s[2][4];
    for (int i = 0; i < 16; ++i) a[i / 4][i % 4] = m[i * plane_size + g];
    for (int j = 0; j < 4; ++j) {
        s[0][j] = a[0][j] + a[1][j] + a[2][j];
        s[1][j] = a[1][j] - a[2][j] - a[3][j];
    }
    __global T* plane = out + out_off + (long)(n * CO + co) * OH * OW;
    for (int i = 0; i < 2; ++i) {
        if (oy + i >= OH) break;
        plane[(oy + i) * OW + ox] = s[i][0] + s[i][1] + s[i][2];
        if (ox + 1 < OW) plane[(oy + i) * OW + ox + 1] = s[i][1] - s[i][2] - s[i][3];
    }
}
"""


def _winograd(dev: runtime.Device, src: torch.Tensor, weight: torch.Tensor, dst: torch.Tensor, pad: int,
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
    source = (f"#define T {_cl_type(src.dtype)}\n#define IDX {'int' if fits else 'long'}\n" +
              "".join(f"#define {name} {value}{'' if fits else 'L'}\n"
                      for name, value in zip(names, (ci, co, h, w, oh, ow, pad, th, tw))) + _WINOGRAD_SOURCE)
    with _Scratch(dev) as scratch:
        u = scratch.buffer(16 * co * ci * size)
        v = scratch.buffer(16 * ci * chunk * th * tw * size)
        m = scratch.buffer(16 * co * chunk * th * tw * size)
        dev.launch(dev.kernel("wino_weight", source), (co * ci,), None, _block(weight).buffer,
                   np.int64(weight.storage_offset()), u, np.int32(flip))
        for first in range(0, n, chunk):
            tiles = min(chunk, n - first) * th * tw
            dev.launch(dev.kernel("wino_input", source), (ci * tiles,), None, _block(src).buffer,
                       np.int64(src.storage_offset() + first * ci * h * w), v, np.int64(tiles))
            runtime.gemm(dev, src.dtype, False, False, co, tiles, ci, 1.0, u, 0, ci, v, 0, tiles, 0.0, m, 0, tiles,
                         batch=16, strides=(co * ci, ci * tiles, co * tiles))
            dev.launch(dev.kernel("wino_output", source), (co * tiles,), None, m, _block(dst).buffer,
                       np.int64(dst.storage_offset() + first * co * oh * ow), np.int64(tiles))


FOLD_PIXELS = 1024  # output pixels per image below which a convolution's GEMM spans all of a chunk's images
# The im2col columns of as many images as fit this workspace are built at once: 1/32 of the device's memory (2.5
# GB on an 80 GB H100, 256 MB on 8 GB), at least 256 MB. Fewer chunks mean fewer commands per convolution, each
# of whose GEMM calls costs ~130 us of CLBlast host time, and wider GEMMs.
CONV_WORKSPACE_SHARE = 1 / 32
CONV_WORKSPACE_MIN_BYTES = 256 << 20
CONV_WORKSPACE_BYTES: int | None = None  # a fixed workspace instead (the tests' small chunks)


def _strided(t: torch.Tensor, start: int, size, stride) -> torch.Tensor:
    """A view of t's storage `start` elements after t's first element, made without a trip through dispatch."""
    return _table.view_of(t, t.dtype, t.storage_offset() + start, size, stride)


def _contiguous(t: torch.Tensor, at_start: bool = False) -> torch.Tensor:
    """t, or a dense copy of it when it is not contiguous (or, with `at_start`, does not start at its storage's
    first element: for kernels that take no offset)."""
    if t.is_contiguous() and not (at_start and t.storage_offset()):
        return t
    dense = empty(t.shape, _contiguous_strides(t.shape), t.dtype, t.device.index)
    pointwise("a", dense, [t])
    return dense


# A forward without bias on contiguous tensors whose layout is one launch per group (depthwise, per-image-own)
# keeps a plan: the next call with the same geometry and settings allocates and launches, skipping the
# layout's set-up (~25 us of Python a convolution); mobilenet_v2 makes 52 a step.
_conv_plans: dict = {}


def _own_forward_plan(dev, out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, groups: int):
    """A 1x1 convolution's forward by own_gemm (per-image-own), out[i]_g = W_g @ x[i]_g, with the geometry of
    the call that made `out`: the matrices _own_gemm got then, and per call only the tensors' offsets."""
    n, c, cout = x.shape[0], x.shape[1], out.shape[1]
    cg, coutg, length = c // groups, cout // groups, x.numel() // max(n * c, 1)
    kernel, grid = _own_gemm_geometry(dev, _mat(out, coutg, length), _mat(weight, coutg, cg), _mat(x, cg, length), n,
                                      (0, c * length, cout * length))
    shape, strides = list(out.shape), list(out.stride())
    scalar = np.float64 if x.dtype == torch.float64 else np.float32

    def forward(x, weight):
        out = empty(shape, strides, x.dtype, x.device.index)
        for group in range(groups):  # the offsets _mat(..., start) gives in the layout's loop
            dev.launch(kernel, grid, (16, 16, 1), _block(weight).buffer,
                       np.int64(weight.storage_offset() + group * coutg * cg), _block(x).buffer,
                       np.int64(x.storage_offset() + group * cg * length), _block(out).buffer,
                       np.int64(group * coutg * length), scalar(1.0), scalar(0.0))
        return out

    return forward


def _convolution(op, args, kwargs, bound):
    """2-D convolution forward and backward. Depthwise (one input channel per group): direct kernels. Otherwise
    im2col over a chunk of images at once + CLBlast GEMM: forward and backward-data as one strided-batched GEMM
    per group and chunk, backward-weight as one GEMM over the chunk's columns; col2im gathers (no atomics)."""
    x, weight = bound["input"], bound["weight"]
    if bound["transposed"] or x.dim() != 4 or x.dtype not in (torch.float32, torch.float64):
        raise _NoKernel("convolution beyond 2-D, non-transposed float")
    plan_key = None
    if op is aten.convolution.default and bound.get("bias") is None and x.is_contiguous() and weight.is_contiguous():
        plan_key = (x.shape, x.dtype, weight.shape, tuple(bound["stride"]), tuple(bound["padding"]),
                    tuple(bound["dilation"]), bound["groups"], x.device.index, CONV_OWN_GEMM, CONV_BENCHMARK)
        plan = _conv_plans.get(plan_key)
        if plan is not None:
            return plan(x, weight)
    x, weight = _contiguous(x), _contiguous(weight)
    n, c, h, w = x.shape
    cout, cg, kh, kw = weight.shape
    groups = bound["groups"]
    (sh, sw), (ph, pw), (dh, dw) = bound["stride"], bound["padding"], bound["dilation"]
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    length, kk = oh * ow, cg * kh * kw
    coutg = cout // groups
    dev = _dev(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    # the geometry is compiled in (one program per convolution shape, built once, cached on disk by pyopencl):
    # the kernels' divisions by constants become multiplications, and indices are 32-bit where they fit
    fits = max(n * c * h * w, n * cout * oh * ow, c * kh * kw * n * length) < 2**31
    names = ("N", "C", "H", "W", "KH", "KW", "OH", "OW", "SH", "SW", "PH", "PW", "DH", "DW", "M")
    values = (n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, coutg)
    header = (f"T {_cl_type(x.dtype)}", f"ACC {wide}", f"IDX {'int' if fits else 'long'}")
    source = _compiled_source(_CONV_SOURCE, header, names, values, not fits)
    index = x.device.index
    forward = _base(op) == "convolution"
    if not forward:
        grad = _contiguous(bound["grad_output"])
        mask = bound["output_mask"]
    if cg == 1 and groups == c and groups > 1:
        if forward:
            shape, strides = [n, cout, oh, ow], _contiguous_strides([n, cout, oh, ow])
            kernel = dev.kernel("depthwise", source)

            def depthwise(x, weight):
                out = empty(shape, strides, x.dtype, index)
                if out.numel():
                    dev.launch(kernel, (out.numel(),), None, _block(x).buffer, np.int64(x.storage_offset()),
                               _block(weight).buffer, np.int64(weight.storage_offset()), _block(out).buffer)
                return out

            if plan_key is not None:
                _remember(_conv_plans, plan_key, depthwise)
            return _conv_bias(depthwise(x, weight), bound, cout)
        grad_input = grad_weight = None
        if mask[0]:
            grad_input = empty([n, c, h, w], _contiguous_strides([n, c, h, w]), x.dtype, index)
            if grad_input.numel():
                dev.launch(dev.kernel("depthwise_grad_input", source), (grad_input.numel(),), None, _block(grad).buffer,
                           np.int64(grad.storage_offset()), _block(weight).buffer, np.int64(weight.storage_offset()),
                           _block(grad_input).buffer)
        if mask[1]:
            grad_weight = empty([cout, cg, kh, kw], _contiguous_strides([cout, cg, kh, kw]), x.dtype, index)
            weights = cout * kh * kw
            if n and weights:  # per image partial sums in a pool buffer, then summed over the images
                with _Scratch(dev) as scratch:
                    partial = scratch.buffer(n * weights * x.element_size())
                    dev.launch(dev.kernel("depthwise_grad_weight", source), (n * weights,), None, _block(grad).buffer,
                               np.int64(grad.storage_offset()), _block(x).buffer, np.int64(x.storage_offset()),
                               partial)
                    _sum_pieces(dev, partial, n, _mat(grad_weight, weights, 1), 0.0)
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
    def w_group(group: int) -> _Mat:  # the group's weights as (coutg x kk)
        return _mat(weight, coutg, kk, group * coutg * kk)

    def gemm_convolution(fold: bool, direct: bool, want_input: bool = True, own: bool = False):
        with _Scratch(dev) as scratch:  # the im2col columns: pool buffers, not tensors
            return convolution_with(fold, direct, scratch, not forward and mask[0] and want_input, own)

    def convolution_with(fold: bool, direct: bool, scratch: _Scratch, grad_in: bool, own: bool = False):
        batched = _own_gemm if own else _mm_into  # the 1x1 per-image GEMMs: FADE's kernel or CLBlast's
        if forward and direct:  # out[i]_g = W_g @ x[i]_g, every image in one strided-batched GEMM per group
            out = empty([n, cout, oh, ow], _contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            if n and length and out.numel():
                for group in range(groups):
                    batched(_mat(out, coutg, length, group * coutg * length), w_group(group),
                            _mat(x, cg, length, group * cg * length), 1.0, 0.0, batch=n,
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

        def columns(group: int, width: int) -> _Mat:  # group's rows of the columns, the first `width` of them
            return cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, width)

        def im2col(first: int, count: int) -> None:
            dev.launch(dev.kernel("im2col", source), (count * length, c * kh * kw), None, _block(x).buffer,
                       np.int64(x.storage_offset() + first * c * h * w), cols_m.buffer, np.int64(chunk * length))

        if forward:
            out = empty([n, cout, oh, ow], _contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            folded = empty([cout, chunk * length], [chunk * length, 1], x.dtype, index) if fold else None
            folded_m = _mat(folded) if fold else None
            for first in range(0, n, chunk):
                count = min(chunk, n - first)
                if not has_cols or not out.numel():
                    break
                im2col(first, count)
                if fold:  # out_g (coutg x count*L) = W_g @ cols_g, then out[image, channel] = folded[channel, image]
                    for group in range(groups):
                        _mm_into(folded_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                                 w_group(group), columns(group, count * length), 1.0, 0.0)
                    pointwise("a", _strided(out, first * cout * length, (cout, count, length),
                                            (length, cout * length, 1)),
                              [_strided(folded, 0, (cout, count, length), (chunk * length, length, 1))])
                    continue
                plane = _mat(out, cout, length, first * cout * length)
                for group in range(groups):  # out[i] (coutg x L) = W_g (coutg x kk) @ cols_g[:, image i]
                    _mm_into(plane.row_range(group * coutg, (group + 1) * coutg), w_group(group),
                             columns(group, length), 1.0, 0.0, batch=count, strides=(0, length, cout * length))
            return _conv_bias(out, bound, cout)
        grad_input = grad_weight = None
        if grad_in:
            grad_input = empty([n, c, h, w], _contiguous_strides([n, c, h, w]), x.dtype, index)
            if direct:  # grad_x[i]_g = W_g^T @ grad[i]_g straight into grad_input: no columns, no col2im
                for group in range(groups):
                    if n and length:
                        batched(_mat(grad_input, cg, length, group * cg * length), w_group(group).t(),
                                _mat(grad, coutg, length, group * coutg * length), 1.0, 0.0, batch=n,
                                strides=(0, cout * length, c * length))
            else:
                grad_cols_m = scratch.mat(x.dtype, c * kh * kw, chunk * length)
        if mask[1]:
            grad_weight = empty([cout, cg, kh, kw], _contiguous_strides([cout, cg, kh, kw]), x.dtype, index)
            gw = _mat(grad_weight, cout, kk)  # the first chunk's GEMM writes it (beta 0), the others add
            if own_wgrad and n and length and grad_weight.numel():
                _own_weight_grad_1x1(dev, grad, x, grad_weight, groups)
        if wgrad or (grad_in and fold):  # grad with the chunk's images side by side: (cout, count * L)
            grad_t = empty([cout, chunk * length], [chunk * length, 1], x.dtype, index)
            grad_t_m = _mat(grad_t)
        for first in range(0, n, chunk):
            count = min(chunk, n - first)
            if not has_cols or not length:
                break
            plane = _mat(grad, cout, length, first * cout * length)
            if wgrad or (grad_in and fold):
                pointwise("a", _strided(grad_t, 0, (cout, count, length), (chunk * length, length, 1)),
                          [_strided(grad, first * cout * length, (cout, count, length), (length, cout * length, 1))])
            if wgrad:  # gW_g += grad_g (coutg x count*L) @ cols_g^T: the chunk's images in one GEMM
                im2col(first, count)
                for group in range(groups):
                    _mm_into(gw.row_range(group * coutg, (group + 1) * coutg),
                             grad_t_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                             columns(group, count * length).t(), 1.0, 1.0 if first else 0.0)
            if grad_in and not direct:  # grad_cols_g[:, image i] = W_g^T @ grad_g[i], then col2im
                for group in range(groups):
                    if fold:  # all the chunk's images in one GEMM
                        _mm_into(grad_cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, count * length),
                                 w_group(group).t(),
                                 grad_t_m.row_range(group * coutg, (group + 1) * coutg).col_range(0, count * length),
                                 1.0, 0.0)
                        continue
                    _mm_into(grad_cols_m.row_range(group * kk, (group + 1) * kk).col_range(0, length),
                             w_group(group).t(), plane.row_range(group * coutg, (group + 1) * coutg), 1.0, 0.0,
                             batch=count, strides=(0, cout * length, length))
                dev.launch(dev.kernel("col2im", source), (count * c * h * w,), None, grad_cols_m.buffer,
                           _block(grad_input).buffer, np.int64(first * c * h * w), np.int64(chunk * length),
                           np.int64(count))
        if grad_in and not (has_cols and length) and not (direct and n and length):
            pointwise("0", grad_input, [])
        if mask[1] and not (n and (has_cols or own_wgrad) and length):
            pointwise("0", grad_weight, [])
        return grad_input, grad_weight, _conv_grad_bias(grad, mask)

    def run(layout: str):
        if layout != "winograd":
            return gemm_convolution(layout == "folded", one_by_one and layout in ("per-image", "per-image-own"),
                                    own=layout == "per-image-own")
        if forward:
            out = empty([n, cout, oh, ow], _contiguous_strides([n, cout, oh, ow]), x.dtype, index)
            if out.numel():
                _winograd(dev, x, weight, out, ph, False, budget)
            return _conv_bias(out, bound, cout)
        grad_input = None
        if mask[0]:
            grad_input = empty([n, c, h, w], _contiguous_strides([n, c, h, w]), x.dtype, index)
            if grad_input.numel():
                _winograd(dev, grad, weight, grad_input, 2 - ph, True, budget)
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
            _remember(_conv_plans, plan_key, _own_forward_plan(dev, result, x, weight, groups))
        return result

    if own and CONV_OWN_GEMM == "on":
        return chosen("per-image-own")
    key = (dev.index, forward, None if forward else tuple(mask), tuple(x.shape), tuple(weight.shape),
           (sh, sw, ph, pw, dh, dw), groups, x.dtype)
    layouts = ("folded", "per-image") + (("winograd",) if winograd else ()) + (("per-image-own",) if own else ())
    return chosen(_conv_layout(dev, key, layouts, "folded" if length < FOLD_PIXELS else "per-image", run))


# on | off | auto (GPUs only)
CONV_BENCHMARK = env_choice("FADE_OCL_CONV_BENCHMARK", "auto", ("on", "off", "auto"))
# Winograd F(2x2, 3x3) for stride-1 3x3 convolutions: auto, one of the layouts measured (so used only where
# measured faster, GPUs); on, always where it applies (the tests); off, never
CONV_WINOGRAD = env_choice("FADE_OCL_CONV_WINOGRAD", "auto", ("on", "off", "auto"))
# FADE's own GEMM kernel for a 1x1 convolution's per-image GEMMs (forward and data gradient): auto, one of the
# measured layouts (it saves CLBlast's host cost per call, and wins where that cost is most of the call); on,
# always where it applies (the tests); off, never
CONV_OWN_GEMM = env_choice("FADE_OCL_CONV_OWN_GEMM", "auto", ("on", "off", "auto"))
CONV_BENCHMARK_RUNS = 3  # timed runs per layout, the fastest kept: with one run, a busy host once made
# resnet18 inference run its 14 x 14 and 7 x 7 layers per image on the H100 (device time 15.3 -> 22.0 ms a step)
_conv_layouts: dict = {}  # convolution key -> "folded", "per-image" or "winograd", as measured


def _conv_layout(dev: runtime.Device, key: tuple, layouts: tuple, default: str, run) -> str:
    """Which of `layouts` a convolution runs: measured once per shape (each layout run once to build, then
    CONV_BENCHMARK_RUNS times with the queue finished on both sides, its fastest run counted; the fastest layout
    kept for the process, the first on a tie), or `default` when not measuring."""
    measuring = CONV_BENCHMARK == "on" or (CONV_BENCHMARK == "auto" and dev.info.kind == "gpu")
    if not measuring:
        return default
    chosen = _conv_layouts.get(key)
    if chosen is None:
        seconds = {}
        for layout in layouts:
            run(layout)  # builds its programs
            dev.queue.finish()
            for _ in range(CONV_BENCHMARK_RUNS):
                start = time.perf_counter()
                run(layout)
                dev.queue.finish()
                seconds[layout] = min(seconds.get(layout, math.inf), time.perf_counter() - start)
        chosen = _conv_layouts[key] = min(layouts, key=seconds.__getitem__)
    return chosen


def _conv_bias(out: torch.Tensor, bound: dict, cout: int) -> torch.Tensor:
    if bound.get("bias") is not None:
        out = aten.add.Tensor(out, bound["bias"].view(1, cout, 1, 1))
    return out


def _conv_grad_bias(grad: torch.Tensor, mask):
    return _channel_sums(grad) if mask[2] else None


_POOL_SOURCE = """
__kernel void max_pool2d(__global const T* x, long x_off, __global T* out, __global long* index, long planes,
                         long H, long W, long OH, long OW, long KH, long KW, long SH, long SW, long PH, long PW,
                         long DH, long DW) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    __global const T* plane = x + x_off + p * H * W;
    T best = -INFINITY;
    long where = -1;
    for (long ki = 0; ki < KH; ++ki) {
        long iy = oy * SH - PH + ki * DH;
        if (iy < 0 || iy >= H) continue;
        for (long kj = 0; kj < KW; ++kj) {
            long ix = ox * SW - PW + kj * DW;
            if (ix < 0 || ix >= W) continue;
            T v = plane[iy * W + ix];
            if (where < 0 || v > best || v != v) { best = v; where = iy * W + ix; }
        }
    }
    out[g] = best;
    index[g] = where;
}
"""


# the backward with its geometry compiled in (one program per pooling shape): its divisions by constants
# become multiplications, indices 32-bit where they fit (with 64-bit divisions at run time, vgg16's five pooling
# backwards took 4.9 ms of its training step on the H100)
_POOL_BACKWARD_SOURCE = """
/* one work item per input element: it gathers the gradients of the outputs whose window can hold it and whose
   index names it, in output order (the CPU's order of accumulation); no atomics, every element in parallel */
__kernel void max_pool2d_backward_c(__global const T* grad, long grad_off, __global const long* index,
                                    long index_off, __global T* out) {
    IDX g = get_global_id(0);
    if (g >= PLANES * H * W) return;
    IDX p = g / (H * W), where = g % (H * W), iy = where / W, ix = where % W;
    IDX y0 = iy + PH - EH, x0 = ix + PW - EW;  /* EH = (KH - 1) * DH: the window's extent less one */
    IDX oy_lo = y0 <= 0 ? 0 : (y0 + SH - 1) / SH, oy_hi = min((IDX)((iy + PH) / SH), (IDX)(OH - 1));
    IDX ox_lo = x0 <= 0 ? 0 : (x0 + SW - 1) / SW, ox_hi = min((IDX)((ix + PW) / SW), (IDX)(OW - 1));
    T acc = 0;
    for (IDX oy = oy_lo; oy <= oy_hi; ++oy)
        for (IDX ox = ox_lo; ox <= ox_hi; ++ox) {
            IDX o = p * OH * OW + oy * OW + ox;
            if (index[index_off + o] == (long)where) acc += grad[grad_off + o];
        }
    out[g] = acc;
}
"""


def _pair(value, default=None) -> tuple:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    return (value[0], value[-1]) if isinstance(value, (list, tuple)) else (value, value)


def _max_pool(op, args, kwargs, bound):
    """max_pool2d with indices and its backward: one work item per output (a plain loop over the window, so NaN
    ends nothing early and hangs nothing; as on the CPU the last NaN of a window wins); the backward one per input
    element, gathering from the outputs that chose it (no atomics)."""
    x = bound["self"]
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64):
        raise _NoKernel("max pool beyond 2-D float")
    meta_result = _meta(op, args, kwargs)
    x = _contiguous(x)
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    kh, kw = _pair(bound["kernel_size"])
    sh, sw = _pair(bound["stride"], (kh, kw))
    ph, pw = _pair(bound["padding"])
    dh, dw = _pair(bound["dilation"])
    dev = _dev(x)
    source = f"#define T {_cl_type(x.dtype)}\n" + _POOL_SOURCE
    if _base(op) == "max_pool2d_with_indices":
        out = empty_like_meta(meta_result[0], x.device.index)
        index = empty_like_meta(meta_result[1], x.device.index)
        oh, ow = out.shape[-2:]
        if out.numel():
            dev.launch(dev.kernel("max_pool2d", source), (out.numel(),), None,
                _block(x).buffer, np.int64(x.storage_offset()), _block(out).buffer,
                _block(index).buffer, *[np.int64(v) for v in (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)])
        return _finish(op, bound, (out, index))
    grad, index = _contiguous(bound["grad_output"]), _contiguous(bound["indices"])
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        oh, ow = grad.shape[-2:]
        if grad.numel():
            geometry = (planes, h, w, oh, ow, sh, sw, ph, pw, (kh - 1) * dh, (kw - 1) * dw)
            fits = max(planes * h * w, planes * oh * ow) < 2**31
            backward = _compiled_source(
                _POOL_BACKWARD_SOURCE, (f"T {_cl_type(x.dtype)}", f"IDX {'int' if fits else 'long'}"),
                ("PLANES", "H", "W", "OH", "OW", "SH", "SW", "PH", "PW", "EH", "EW"), geometry, not fits)
            dev.launch(dev.kernel("max_pool2d_backward_c", backward), (out.numel(),), None,
                       _block(grad).buffer, np.int64(grad.storage_offset()), _block(index).buffer,
                       np.int64(index.storage_offset()), _block(out).buffer, label="max_pool2d_backward")
        else:
            pointwise("0", out, [])
    return _finish(op, bound, out)


_ADAPTIVE_SOURCE = """
/* torch's bins: output o of O over an input of I covers [floor(o I / O), ceil((o + 1) I / O)) */
__kernel void adaptive_avg_pool2d(__global const T* x, long x_off, __global T* out, long planes, long H, long W,
                                  long OH, long OW) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    long y0 = (oy * H) / OH, y1 = ((oy + 1) * H + OH - 1) / OH, x0 = (ox * W) / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
    __global const T* plane = x + x_off + p * H * W;
    ACC acc = 0;
    for (long iy = y0; iy < y1; ++iy)
        for (long ix = x0; ix < x1; ++ix) acc += plane[iy * W + ix];
    out[g] = (T)(acc / (ACC)((y1 - y0) * (x1 - x0)));
}
__kernel void adaptive_avg_pool2d_backward(__global const T* grad, __global T* gx, long planes, long H, long W,
                                           long OH, long OW) {
    /* gather: each input element sums grad / bin size over the bins that hold it */
    long g = get_global_id(0);
    if (g >= planes * H * W) return;
    long p = g / (H * W), iy = (g / W) % H, ix = g % W;
    ACC acc = 0;
    for (long oy = (iy * OH) / H; oy < OH; ++oy) {
        long y0 = (oy * H) / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
        if (y0 > iy) break;
        if (iy >= y1) continue;
        for (long ox = (ix * OW) / W; ox < OW; ++ox) {
            long x0 = (ox * W) / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
            if (x0 > ix) break;
            if (ix >= x1) continue;
            acc += grad[(p * OH + oy) * OW + ox] / (ACC)((y1 - y0) * (x1 - x0));
        }
    }
    gx[g] = (T)acc;
}
"""


def _adaptive_avg_pool(op, args, kwargs, bound):
    """Adaptive average pooling over 2-D maps (global to 1x1 as a mean; other sizes with torch's bins) and its
    backward (a gather, no atomics)."""
    forward = _base(op) == "_adaptive_avg_pool2d"
    x = bound["self"]
    if x.dtype not in (torch.float32, torch.float64) or x.dim() not in (3, 4):
        raise _NoKernel("adaptive pooling dtype")
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    dev = _dev(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    source = f"#define T {_cl_type(x.dtype)}\n#define ACC {wide}\n" + _ADAPTIVE_SOURCE
    if forward:
        oh, ow = _pair(bound["output_size"])
        if (oh, ow) == (1, 1):
            return aten.mean.dim(x, [-2, -1], True)
        x = _contiguous(x)
        out = empty(list(x.shape[:-2]) + [oh, ow], _contiguous_strides(list(x.shape[:-2]) + [oh, ow]), x.dtype,
                    x.device.index)
        if out.numel():
            dev.launch(dev.kernel("adaptive_avg_pool2d", source), (out.numel(),), None, _block(x).buffer,
                                                      np.int64(x.storage_offset()), _block(out).buffer,
                                                      *[np.int64(v) for v in (planes, h, w, oh, ow)])
        return out
    grad = _contiguous(bound["grad_output"], at_start=True)  # the backward kernel takes no offset
    oh, ow = grad.shape[-2:]
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, x.device.index)
    if (oh, ow) == (1, 1):
        pointwise("a / b", out, [grad, float(h * w)])
    elif out.numel():
        dev.launch(dev.kernel("adaptive_avg_pool2d_backward", source), (out.numel(),), None, _block(grad).buffer,
                                                           _block(out).buffer,
                                                           *[np.int64(v) for v in (planes, h, w, oh, ow)])
    return out


_AVG_POOL_SOURCE = """
/* torch's windows (cpu_avg_pool): [o S - P, min(o S - P + K, I + P)) sized for count_include_pad, then clipped
   to the input [0, I) for the sum and for the divisor without count_include_pad; DIV > 0: divisor_override */
inline long avg_divisor(long oy, long ox, long H, long W, long KH, long KW, long SH, long SW, long PH, long PW,
                        long DIV, int include_pad) {
    if (DIV > 0) return DIV;
    long y0 = oy * SH - PH, x0 = ox * SW - PW;
    long y1 = min(y0 + KH, H + PH), x1 = min(x0 + KW, W + PW);
    if (include_pad) return (y1 - y0) * (x1 - x0);
    return (min(y1, H) - max(y0, (long)0)) * (min(x1, W) - max(x0, (long)0));
}
__kernel void avg_pool2d(__global const T* x, long x_off, __global T* out, long planes, long H, long W, long OH,
                         long OW, long KH, long KW, long SH, long SW, long PH, long PW, long DIV, int include_pad) {
    long g = get_global_id(0);
    if (g >= planes * OH * OW) return;
    long p = g / (OH * OW), oy = (g / OW) % OH, ox = g % OW;
    long y0 = oy * SH - PH, x0 = ox * SW - PW;
    long y1 = min(min(y0 + KH, H + PH), H), x1 = min(min(x0 + KW, W + PW), W);
    y0 = max(y0, (long)0); x0 = max(x0, (long)0);
    if (y0 >= y1 || x0 >= x1) { out[g] = 0; return; }
    __global const T* plane = x + x_off + p * H * W;
    ACC acc = 0;
    for (long iy = y0; iy < y1; ++iy)
        for (long ix = x0; ix < x1; ++ix) acc += plane[iy * W + ix];
    out[g] = (T)(acc / (ACC)avg_divisor(oy, ox, H, W, KH, KW, SH, SW, PH, PW, DIV, include_pad));
}
/* one work item per input element: it sums grad / divisor over the windows that hold it (no atomics) */
__kernel void avg_pool2d_backward(__global const T* grad, long grad_off, __global T* gx, long planes, long H,
                                  long W, long OH, long OW, long KH, long KW, long SH, long SW, long PH, long PW,
                                  long DIV, int include_pad) {
    long g = get_global_id(0);
    if (g >= planes * H * W) return;
    long p = g / (H * W), iy = (g / W) % H, ix = g % W;
    long y0 = iy + PH - KH + 1, x0 = ix + PW - KW + 1;
    long oy_lo = y0 <= 0 ? 0 : (y0 + SH - 1) / SH, oy_hi = min((iy + PH) / SH, OH - 1);
    long ox_lo = x0 <= 0 ? 0 : (x0 + SW - 1) / SW, ox_hi = min((ix + PW) / SW, OW - 1);
    __global const T* plane = grad + grad_off + p * OH * OW;
    ACC acc = 0;
    for (long oy = oy_lo; oy <= oy_hi; ++oy)
        for (long ox = ox_lo; ox <= ox_hi; ++ox)
            acc += (ACC)plane[oy * OW + ox] / (ACC)avg_divisor(oy, ox, H, W, KH, KW, SH, SW, PH, PW, DIV,
                                                                include_pad);
    gx[g] = (T)acc;
}
"""


def _avg_pool(op, args, kwargs, bound):
    """avg_pool2d and its backward with torch's semantics (stride defaulting to the kernel, padding, ceil_mode's
    clipped last windows, count_include_pad, divisor_override): the forward one work item per output, the
    backward one per input element gathering grad / divisor from the windows that cover it (no atomics)."""
    x = bound["self"]
    if x.dim() not in (3, 4) or x.dtype not in (torch.float32, torch.float64):
        raise _NoKernel("avg pool beyond 2-D float")
    meta_result = _meta(op, args, kwargs)  # torch's checks and output size
    kh, kw = _pair(bound["kernel_size"])
    sh, sw = _pair(bound["stride"], (kh, kw))
    ph, pw = _pair(bound["padding"])
    divisor = bound["divisor_override"] or 0
    x = _contiguous(x)
    h, w = x.shape[-2:]
    planes = math.prod(x.shape[:-2])
    dev = _dev(x)
    wide = "double" if x.dtype == torch.float64 or dev.info.fp64 else "float"
    source = f"#define T {_cl_type(x.dtype)}\n#define ACC {wide}\n" + _AVG_POOL_SOURCE
    if _base(op) == "avg_pool2d":
        oh, ow = meta_result.shape[-2:]
        out = empty(list(x.shape[:-2]) + [oh, ow], _contiguous_strides(list(x.shape[:-2]) + [oh, ow]), x.dtype,
                    x.device.index)
        geometry = (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, divisor)
        if out.numel():
            dev.launch(dev.kernel("avg_pool2d", source), (out.numel(),), None, _block(x).buffer,
                       np.int64(x.storage_offset()), _block(out).buffer, *[np.int64(v) for v in geometry],
                       np.int32(bool(bound["count_include_pad"])))
        return _finish(op, bound, out)
    grad = _contiguous(bound["grad_output"])
    oh, ow = grad.shape[-2:]
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        if grad.numel():
            geometry = (planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, divisor)
            dev.launch(dev.kernel("avg_pool2d_backward", source), (out.numel(),), None, _block(grad).buffer,
                       np.int64(grad.storage_offset()), _block(out).buffer, *[np.int64(v) for v in geometry],
                       np.int32(bool(bound["count_include_pad"])))
        else:
            pointwise("0", out, [])
    return _finish(op, bound, out)


def _arange(op, args, kwargs, bound):
    """arange(start, end, step, out=): out[i] = start + i * step, computed in double (long for integer
    outputs) as torch's CPU kernel does."""
    meta_result = _meta(op, args, kwargs)
    out = empty_like_meta(meta_result, _index_of(args, kwargs))
    if out.numel():
        dev = _dev(out)
        integral = not out.dtype.is_floating_point
        if not integral and not dev.info.fp64:
            raise _NoKernel("arange without fp64")
        wide, scalar = ("long", np.int64) if integral else ("double", np.float64)
        source = f"""
__kernel void arange(__global {_cl_type(out.dtype)}* out, {wide} start, {wide} step, long n) {{
    long i = get_global_id(0);
    if (i < n) out[i] = ({_cl_type(out.dtype)})(start + ({wide})i * step);
}}"""
        dev.launch(dev.kernel("arange", source), (out.numel(),), None, _block(out).buffer,
                                     scalar(bound.get("start") or 0), scalar(bound.get("step", 1)), np.int64(out.numel()))
    return _finish(op, bound, out)


def _triangle(op, args, kwargs, bound):
    """tril / triu over the last two dims (and their in-place and out= forms)."""
    x = _contiguous(bound["self"])
    if x.dim() < 2:
        raise _NoKernel("tril of fewer than 2 dims")
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, x.device.index)
    if out.numel():
        rows, cols = x.shape[-2:]
        keep = "col - row <= diagonal" if _base(op) == "tril" else "col - row >= diagonal"
        t = _cl_type(x.dtype)
        source = f"""
__kernel void triangle(__global const {t}* x, long x_off, __global {t}* out, long rows, long cols, long diagonal,
                       long n) {{
    long g = get_global_id(0);
    if (g >= n) return;
    long row = (g / cols) % rows, col = g % cols;
    out[g] = ({keep}) ? x[x_off + g] : ({t})0;
}}"""
        dev = _dev(x)
        dev.launch(dev.kernel("triangle", source), (out.numel(),), None, _block(x).buffer, np.int64(x.storage_offset()),
                                       _block(out).buffer, np.int64(rows), np.int64(cols),
                                       np.int64(bound["diagonal"]), np.int64(out.numel()))
    return _finish(op, bound, out)


def _cat(op, args, kwargs, bound):
    """cat: each input copied into its slice of the result (torch's type promotion; 1-D empty inputs skipped,
    as torch does)."""
    meta_result = _meta(op, args, kwargs)
    out = empty_like_meta(meta_result, _index_of(args, kwargs))
    dim = bound["dim"] % max(out.dim(), 1)
    offset = 0
    for tensor in bound["tensors"]:
        if tensor.dim() == 1 and tensor.numel() == 0 and out.dim() != 1:
            continue
        size = tensor.shape[dim]
        if size and out.numel():
            pointwise("a", out.narrow(dim, offset, size), [tensor])
        offset += size
    return _finish(op, bound, out)


_BN_SOURCE = """
/* per (channel, part) work-group: sums over the part's elements of channel c of a contiguous (N, C, HW) x.
   forward: d = x - x[n=0, c, 0] (a shift against cancellation), sums d and d*d;
   backward: d = x - center[c], sums g and g*d. */
__kernel void bn_partials(__global const T* x, long x_off, __global const T* g, long g_off,
                          __global const T* center, long center_off, __global ACC* partials, long C, long HW, long M,
                          long part_len, long parts, int backward) {
    long c = get_group_id(0) / parts, p = get_group_id(0) % parts;
    int t = get_local_id(0);
    long begin = p * part_len, end = min(M, begin + part_len);
    ACC shift = backward ? (ACC)center[center_off + c] : (ACC)x[x_off + c * HW];
    ACC s1 = 0, s2 = 0;
    for (long j = begin + t; j < end; j += LOCAL) {
        long i = (j / HW) * C * HW + c * HW + j % HW;
        ACC d = (ACC)x[x_off + i] - shift;
        if (backward) { ACC gv = (ACC)g[g_off + i]; s1 += gv; s2 += gv * d; } else { s1 += d; s2 += d * d; }
    }
    __local ACC l1[LOCAL], l2[LOCAL];
    l1[t] = s1; l2[t] = s2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = LOCAL / 2; h > 0; h >>= 1) {
        if (t < h) { l1[t] += l1[t + h]; l2[t] += l2[t + h]; }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) { partials[(c * parts + p) * 2] = l1[0]; partials[(c * parts + p) * 2 + 1] = l2[0]; }
}
/* per channel: the sum of g from bn_partials (a convolution's bias gradient) */
__kernel void channel_sums(__global const ACC* partials, long parts, __global T* out, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s = 0;
    for (long p = 0; p < parts; ++p) s += partials[(c * parts + p) * 2];
    out[c] = (T)s;
}
/* per channel, training forward: batch mean and 1/std, the running statistics (unbiased variance), and the
   coefficients of bn_apply: (mean, invstd * weight, bias, unused) */
__kernel void bn_forward_stats(__global const ACC* partials, long parts, long M, __global const T* x, long x_off,
                               long HW, __global const T* w, long w_off, __global const T* b, long b_off,
                               int affine_w, int affine_b, __global T* save_mean, __global T* save_invstd,
                               __global T* rmean, long rm_off, __global T* rvar, long rv_off, int running,
                               ACC eps, ACC momentum, __global ACC* coef, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s1 = 0, s2 = 0;
    for (long p = 0; p < parts; ++p) { s1 += partials[(c * parts + p) * 2]; s2 += partials[(c * parts + p) * 2 + 1]; }
    ACC mu = s1 / M, var = s2 / M - mu * mu;
    var = var < 0 ? 0 : var;
    ACC mean = (ACC)x[x_off + c * HW] + mu, invstd = 1 / sqrt(var + eps);
    save_mean[c] = (T)mean; save_invstd[c] = (T)invstd;
    if (running) {
        rmean[rm_off + c] = (T)((ACC)rmean[rm_off + c] * (1 - momentum) + mean * momentum);
        rvar[rv_off + c] = (T)((ACC)rvar[rv_off + c] * (1 - momentum) + var * M / (M > 1 ? M - 1 : 1) * momentum);
    }
    coef[c * 4] = mean; coef[c * 4 + 1] = invstd * (affine_w ? (ACC)w[w_off + c] : 1);
    coef[c * 4 + 2] = affine_b ? (ACC)b[b_off + c] : 0; coef[c * 4 + 3] = 0;
}
/* per channel, backward: grad_weight = sum(g * xhat), grad_bias = sum(g), and bn_backward_apply's
   coefficients (center, k1, k2, invstd * weight): grad_input = (g - k1 - (x - center) * k2) * invstd * weight */
__kernel void bn_backward_stats(__global const ACC* partials, long parts, long M, __global const T* center,
                                long center_off, __global const T* invstd_in, long invstd_off, int invstd_is_var,
                                ACC eps, __global const T* w, long w_off, int affine_w, int training,
                                __global T* grad_w, __global T* grad_b, __global ACC* coef, long C) {
    long c = get_global_id(0);
    if (c >= C) return;
    ACC s1 = 0, s2 = 0;
    for (long p = 0; p < parts; ++p) { s1 += partials[(c * parts + p) * 2]; s2 += partials[(c * parts + p) * 2 + 1]; }
    ACC invstd = invstd_is_var ? 1 / sqrt((ACC)invstd_in[invstd_off + c] + eps) : (ACC)invstd_in[invstd_off + c];
    grad_w[c] = (T)(s2 * invstd); grad_b[c] = (T)s1;
    coef[c * 4] = (ACC)center[center_off + c];
    coef[c * 4 + 1] = training ? s1 / M : 0;
    coef[c * 4 + 2] = training ? s2 * invstd * invstd / M : 0;
    coef[c * 4 + 3] = invstd * (affine_w ? (ACC)w[w_off + c] : 1);
}
/* eval forward in one pass: each element reads its channel's running statistics and affine parameters, and
   computes in T, as the CPU's kernel does (nothing is summed; a double square root per element cost the H100
   a third more time than the two-kernel version it replaced) */
__kernel void bn_eval(__global const T* x, long x_off, __global const T* rmean, long rm_off, __global const T* rvar,
                      long rv_off, __global const T* w, long w_off, __global const T* b, long b_off, int affine_w,
                      int affine_b, ACC eps, __global T* out, long C, long HW, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    T scale = (T)1 / sqrt(rvar[rv_off + c] + (T)eps) * (affine_w ? w[w_off + c] : (T)1);
    out[i] = (x[x_off + i] - rmean[rm_off + c]) * scale + (affine_b ? b[b_off + c] : (T)0);
}
__kernel void bn_apply(__global const T* x, long x_off, __global const ACC* coef, __global T* out, long C, long HW,
                       long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    out[i] = (T)(((ACC)x[x_off + i] - coef[c * 4]) * coef[c * 4 + 1] + coef[c * 4 + 2]);
}
__kernel void bn_backward_apply(__global const T* g, long g_off, __global const T* x, long x_off,
                                __global const ACC* coef, __global T* out, long C, long HW, long n) {
    long i = get_global_id(0);
    if (i >= n) return;
    long c = (i / HW) % C;
    out[i] = (T)(((ACC)g[g_off + i] - coef[c * 4 + 1] - ((ACC)x[x_off + i] - coef[c * 4]) * coef[c * 4 + 2])
                 * coef[c * 4 + 3]);
}
"""
BN_PART = 8192  # elements of one channel a bn_partials work-group sums


def _batch_norm(op, args, kwargs, bound):
    """native_batch_norm and its backward over (N, C, ...). Contiguous input with parameters of its dtype: fused
    kernels (per-channel sums by work-group reduction, accumulated in double where the device has fp64, then one
    elementwise pass): 3 launches for a training forward or backward, 1 for eval. Otherwise composed of the
    elementwise and reduction kernels. Running statistics are updated in place as on the CPU (unbiased)."""
    if _written_outs(op):
        raise _NoKernel("out=")
    x = bound["input"]
    if x.dtype not in (torch.float32, torch.float64) or x.dim() < 2:
        raise _NoKernel("batch norm dtype")
    names = ("weight", "bias", "running_mean", "running_var", "save_mean", "save_invstd", "grad_out")
    tensors = [bound.get(name) for name in names if isinstance(bound.get(name), torch.Tensor)]
    if not x.is_contiguous() or any(t.dtype != x.dtype or t.device != x.device for t in tensors) or \
            (bound.get("grad_out") is not None and not bound["grad_out"].is_contiguous()) or x.numel() == 0:
        return _batch_norm_composed(op, bound)
    n, c = x.shape[0], x.shape[1]
    hw = x.numel() // max(n * c, 1)
    m = n * hw
    dev = _dev(x)
    index = x.device.index
    source, local, wide = _bn_setup(dev, x.dtype)
    np_wide = np.float64 if wide == torch.float64 else np.float32
    weight, bias = bound.get("weight"), bound.get("bias")
    training = bound["training"] if "training" in bound else bound["train"]
    eps = np_wide(bound["eps"])

    def arg(t):  # (buffer, offset) of an optional per-channel tensor; x's buffer stands in for a missing one
        return (_block(t).buffer, np.int64(t.storage_offset())) if t is not None else \
            (_block(x).buffer, np.int64(0))

    flags = (np.int32(weight is not None), np.int32(bias is not None))
    forward = _base(op) in ("native_batch_norm", "_native_batch_norm_legit")
    if forward and not training:  # one pass from the running statistics
        out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, index)
        dev.launch(dev.kernel("bn_eval", source), (x.numel(),), None, _block(x).buffer, np.int64(x.storage_offset()),
                   *arg(bound.get("running_mean")), *arg(bound.get("running_var")), *arg(weight), *arg(bias),
                   *flags, eps, _block(out).buffer, np.int64(c), np.int64(hw), np.int64(x.numel()))
        return out, empty([0], [1], x.dtype, index), empty([0], [1], x.dtype, index)
    with _Scratch(dev) as scratch:  # partial sums and coefficients: pool buffers, not tensors
        coef = scratch.buffer(c * 4 * wide.itemsize)  # per channel: the affine map bn_apply uses, and more

        def partials(grad=None, center=None):
            return _bn_partials(dev, source, local, scratch, wide, x, arg(grad), arg(center), c, hw, m,
                                grad is not None)

        if forward:  # training
            running_mean, running_var = bound.get("running_mean"), bound.get("running_var")
            out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, index)
            save_mean, save_invstd = empty([c], [1], x.dtype, index), empty([c], [1], x.dtype, index)
            sums, parts = partials()
            running = running_mean is not None and running_var is not None
            dev.launch(dev.kernel("bn_forward_stats", source), (c,), None, sums, parts, np.int64(m),
                       _block(x).buffer, np.int64(x.storage_offset()), np.int64(hw), *arg(weight), *arg(bias),
                       *flags, _block(save_mean).buffer, _block(save_invstd).buffer, *arg(running_mean),
                       *arg(running_var), np.int32(running), eps, np_wide(bound["momentum"]), coef, np.int64(c))
            dev.launch(dev.kernel("bn_apply", source), (x.numel(),), None, _block(x).buffer,
                       np.int64(x.storage_offset()), coef, _block(out).buffer, np.int64(c),
                       np.int64(hw), np.int64(x.numel()))
            return out, save_mean, save_invstd
        grad, mask = bound["grad_out"], bound["output_mask"]
        center, spread = (bound["save_mean"], bound["save_invstd"]) if training else \
            (bound["running_mean"], bound["running_var"])
        grad_weight, grad_bias = empty([c], [1], x.dtype, index), empty([c], [1], x.dtype, index)
        sums, parts = partials(grad, center)
        dev.launch(dev.kernel("bn_backward_stats", source), (c,), None, sums, parts, np.int64(m),
                   *arg(center), *arg(spread), np.int32(not training), eps, *arg(weight), flags[0], np.int32(training),
                   _block(grad_weight).buffer, _block(grad_bias).buffer, coef, np.int64(c))
        grad_input = None
        if mask[0]:
            grad_input = empty(x.shape, _contiguous_strides(x.shape), x.dtype, index)
            dev.launch(dev.kernel("bn_backward_apply", source), (x.numel(),), None, _block(grad).buffer,
                       np.int64(grad.storage_offset()), _block(x).buffer, np.int64(x.storage_offset()),
                       coef, _block(grad_input).buffer, np.int64(c), np.int64(hw), np.int64(x.numel()))
        return grad_input, grad_weight if mask[1] else None, grad_bias if mask[2] else None


def _bn_partials(dev, source: str, local: int, scratch: _Scratch, wide, x: torch.Tensor, grad: tuple, center: tuple,
                 c: int, hw: int, m: int, backward: bool) -> tuple:
    """bn_partials over a contiguous (N, C, HW) x into a scratch buffer: (buffer, parts as np.int64)."""
    parts = max(1, -(-m // BN_PART))
    out = scratch.buffer(c * parts * 2 * wide.itemsize)
    dev.launch(dev.kernel("bn_partials", source), (c * parts * local,), (local,), _block(x).buffer,
               np.int64(x.storage_offset()), *grad, *center, out, np.int64(c), np.int64(hw), np.int64(m),
               np.int64(BN_PART), np.int64(parts), np.int32(backward))
    return out, np.int64(parts)


def _bn_setup(dev, dtype) -> tuple:
    """(kernel source, work-group size, accumulation dtype) of the batch-norm kernels for `dtype` on `dev`."""
    wide = torch.float64 if dtype == torch.float64 or dev.info.fp64 else torch.float32
    local = min(256, dev.max_work_group_size)
    local = 1 << (local.bit_length() - 1)
    header = (f"T {_cl_type(dtype)}", f"ACC {_cl_type(wide)}", f"LOCAL {local}")
    return _compiled_source(_BN_SOURCE, header), local, wide


def _channel_sums(grad: torch.Tensor) -> torch.Tensor:
    """grad (N, C, ...) summed over every dimension but C (a convolution's bias gradient): the batch norm's
    per-channel work-group sums, no permuted copy of grad."""
    grad = _contiguous(grad)
    n, c = grad.shape[0], grad.shape[1]
    hw = grad.numel() // max(n * c, 1)
    dev = _dev(grad)
    out = empty([c], [1], grad.dtype, grad.device.index)
    if grad.numel() == 0:
        pointwise("0", out, [])
        return out
    source, local, wide = _bn_setup(dev, grad.dtype)
    with _Scratch(dev) as scratch:
        place = (_block(grad).buffer, np.int64(grad.storage_offset()))
        sums, parts = _bn_partials(dev, source, local, scratch, wide, grad, place, place, c, hw, n * hw, True)
        dev.launch(dev.kernel("channel_sums", source), (c,), None, sums, parts, _block(out).buffer, np.int64(c))
    return out


def _batch_norm_composed(op, bound):
    """Batch norm composed of this backend's elementwise and reduction kernels: any strides, mixed dtypes."""
    x = bound["input"]
    dims = [0] + list(range(2, x.dim()))
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    weight = bound.get("weight")
    count = x.numel() // max(x.shape[1], 1)
    training = bound["training"] if "training" in bound else bound["train"]
    if _base(op) in ("native_batch_norm", "_native_batch_norm_legit"):  # the latter: under FlopCounterMode
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


_PHILOX_SOURCE = """
/* Philox4x32-10 (Salmon et al., SC'11: the counter-based generator of cuRAND and torch's CUDA dropout): one
   call per 4 elements, counter = (work item, 0, 0, 0), key = the seed drawn from torch's CPU generator */
inline void philox(long g, uint k0, uint k1, uint* r) {
    uint c0 = (uint)g, c1 = (uint)(g >> 32), c2 = 0, c3 = 0;
    for (int round = 0; round < 10; round++) {
        uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    r[0] = c0; r[1] = c1; r[2] = c2; r[3] = c3;
}
float philox_uniform(uint r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }  /* in [0, 1), 24 bits */
"""
_DROPOUT_SOURCE = _PHILOX_SOURCE + """
__kernel void dropout(__global const T* x, long x_off, __global T* out, __global uchar* mask, uint k0, uint k1,
                      float keep, T scale, long n) {
    long g = get_global_id(0);
    uint r[4];
    philox(g, k0, k1, r);
    for (int j = 0; j < 4; j++) {
        long i = g * 4 + j;
        if (i < n) {
            uchar kept = philox_uniform(r[j]) < keep;
            mask[i] = kept;
            out[i] = x[x_off + i] * (T)kept * scale;  /* x * mask * scale, as the CPU computes it */
        }
    }
}
"""
# device: the mask drawn on the device by Philox, seeded from torch's CPU generator (seeded runs repeat, but the
# masks differ from the CPU's, as CUDA's do); cpu: the CPU kernel's own draw, uploaded (masks identical to the
# CPU's; the draw costs the host ~14 ns an element: 8 ms for alexnet's 64 x 9216 activations on this VM)
DROPOUT_RNG = env_choice("FADE_OCL_DROPOUT_RNG", "device", ("device", "cpu"))


def _philox_key() -> tuple:
    """Philox's two key words from one draw of torch's CPU generator per call: torch.manual_seed repeats a run."""
    seed = int(torch.empty((), dtype=torch.int64).random_())
    return np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32)


def _dropout(op, args, kwargs, bound):
    """native_dropout: the output computed on the device with a mask from DROPOUT_RNG's generator."""
    x, p, train = bound["input"], bound["p"], bound["train"]
    if x.dtype not in (torch.float32, torch.float64) or _written(op, bound):
        raise _NoKernel("dropout dtype")
    index = x.device.index
    out = empty(x.shape, _contiguous_strides(x.shape), x.dtype, index)
    mask = empty(x.shape, _contiguous_strides(x.shape), torch.bool, index)
    if not (train is None or train):
        pointwise("a", out, [x])
        pointwise("1", mask, [])
        return out, mask
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    if DROPOUT_RNG == "cpu":  # the CPU kernel's own draw (torch.empty_like(x).bernoulli_(1 - p)), then x * mask * s
        upload(torch.empty(x.shape, dtype=x.dtype).bernoulli_(1 - p).bool(), mask, owned=True)
        pointwise("a * b * scale", out, [x, mask], scalars={"scale": scale})
        return out, mask
    if x.numel():
        x = _contiguous(x)
        key = _philox_key()
        dev = _dev(x)
        source = f"#define T {_cl_type(x.dtype)}\n" + _DROPOUT_SOURCE
        np_t = np.float64 if x.dtype == torch.float64 else np.float32
        dev.launch(dev.kernel("dropout", source), (-(-x.numel() // 4),), None, _block(x).buffer,
                   np.int64(x.storage_offset()), _block(out).buffer, _block(mask).buffer,
                   *key, np.float32(1 - p), np_t(scale),
                   np.int64(x.numel()))
    return out, mask


_BERNOULLI_SOURCE = _PHILOX_SOURCE + """
/* out[i] = (the uniform dropout draws) < p, or < probs[i] with PROBS */
__kernel void bernoulli(__global T* out, long out_off, uint k0, uint k1, float p, __global const P* probs,
                        long probs_off, long n) {
    long g = get_global_id(0);
    uint r[4];
    philox(g, k0, k1, r);
    for (int j = 0; j < 4; j++) {
        long i = g * 4 + j;
        if (i < n) {
            float u = philox_uniform(r[j]);
#ifdef PROBS
            out[out_off + i] = (T)((P)u < probs[probs_off + i]);
#else
            out[out_off + i] = (T)(u < p);
#endif
        }
    }
}
"""


def _bernoulli(op, args, kwargs, bound):
    """bernoulli_(p float or tensor) and bernoulli(probs) / bernoulli(self, p): 0/1 in the output's dtype, drawn
    on the device by dropout's Philox keyed by one draw of torch's CPU generator (torch.manual_seed repeats a
    run; the values differ from the CPU's, as CUDA's do). With a generator= argument or FADE_OCL_DROPOUT_RNG=cpu:
    the CPU fallback (the CPU's own draws)."""
    x = bound["self"]
    if DROPOUT_RNG == "cpu":  # the CPU generator's own draws, as dropout's masks (the zoo's step-by-step checks)
        raise _NoKernel("FADE_OCL_DROPOUT_RNG=cpu")
    if bound.get("generator") is not None or x.dtype in (torch.float16, torch.bfloat16) or x.is_complex():
        raise _NoKernel("bernoulli with a generator or a half dtype")
    _cl_type(x.dtype)
    index = x.device.index
    if op is aten.bernoulli_.float or op is aten.bernoulli.p:
        p, probs = float(bound["p"]), None
    elif op is aten.bernoulli_.Tensor:
        p, probs = 0.0, bound["p"]
    elif op is aten.bernoulli.default:
        p, probs = 0.0, x
    else:
        raise _NoKernel(op.name())
    if probs is not None and (not isinstance(probs, torch.Tensor) or probs.device.type != NAME or
                              not probs.dtype.is_floating_point or probs.dtype == torch.bfloat16):
        raise _NoKernel("bernoulli's probabilities")
    if not 0 <= p <= 1:
        raise _NoKernel("p outside [0, 1]: the CPU raises torch's error")
    in_place = op is aten.bernoulli_.float or op is aten.bernoulli_.Tensor
    target = x if in_place and x.is_contiguous() else empty(x.shape, _contiguous_strides(x.shape), x.dtype, index)
    n = x.numel()
    if n:
        dev = _dev(x)
        wide = "double" if probs is not None and (probs.dtype == torch.float64 or x.dtype == torch.float64) and \
            dev.info.fp64 else "float"
        if probs is not None:
            dense = empty(x.shape, _contiguous_strides(x.shape), torch.float64 if wide == "double" else torch.float32,
                          index)
            pointwise("a", dense, [probs])  # broadcast to self's shape
        key = _philox_key()
        source = f"#define T {_cl_type(x.dtype)}\n#define P {wide}\n" + \
            ("#define PROBS\n" if probs is not None else "") + _BERNOULLI_SOURCE
        probs_block = _block(dense).buffer if probs is not None else _block(target).buffer
        dev.launch(dev.kernel("bernoulli", source), (-(-n // 4),), None, _block(target).buffer,
                   np.int64(target.storage_offset()), *key,
                   np.float32(p), probs_block, np.int64(dense.storage_offset() if probs is not None else 0),
                   np.int64(n))
    if in_place and target is not x:
        pointwise("a", x, [target])
    return x if in_place else target


def _foreach(op, args, kwargs):
    """torch._foreach_X(lists, ...): X on each index in turn, each through its own ocl kernel. torch.optim
    picks foreach for the ocl device by default (it counts PrivateUse1 among the foreach devices)."""
    name = op._schema.name.split("::")[1][len("_foreach_"):]
    per_item = getattr(aten, name, None)
    lists = [a for a in args if isinstance(a, (list, tuple))]
    if per_item is None or not lists or kwargs.get("out") is not None or _written_outs(op):
        raise _NoKernel(f"_foreach_{name}")
    if _foreach_fused(op, name, args, kwargs):
        return None
    length = len(lists[0])
    results = []
    for i in range(length):
        item_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        item_kwargs = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
        results.append(per_item(*item_args, **item_kwargs))
    if name.endswith("_"):
        return None
    return results


_FOREACH_FUSED = {  # in-place foreach overload -> expression over a (self) and b (other), alpha the scalar
    "add_.List": "a + alpha * b", "add_.Scalar": "a + alpha", "mul_.List": "a * b", "mul_.Scalar": "a * alpha",
}
FOREACH_WIDTH = 16  # tensors per multi-tensor launch
FOREACH_ALONE = 1 << 20  # elements from which a tensor gets a launch of its own
# on | off | auto: GPUs only. Measured: resnet50's SGD step on the H100 61 -> 4-10 ms (train step 392-415 ->
# 262-328 ms); on PoCL (a CPU device) the branching kernel was slower than one simple kernel per tensor
FOREACH_FUSED = env_choice("FADE_OCL_FOREACH_FUSED", "auto", ("on", "off", "auto"))


def _foreach_fused(op, name: str, args, kwargs) -> bool:
    """An in-place foreach op of torch.optim's SGD (add_, mul_) over contiguous float tensors of one dtype as
    multi-tensor kernels: FOREACH_WIDTH tensors per launch over one flat index, instead of one full dispatch per
    tensor (resnet50 has 161 parameters, and SGD with momentum makes 3 such ops a step). False: not handled."""
    expr = _FOREACH_FUSED.get(f"{name}.{op._overloadname}")
    if expr is None or FOREACH_FUSED == "off":
        return False
    selves = args[0]
    others = args[1] if isinstance(args[1], (list, tuple)) else None
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1) if others is not None else args[1]
    if not selves or isinstance(alpha, torch.Tensor) or (others is not None and len(others) != len(selves)):
        return False
    dtype = selves[0].dtype
    pairs = list(zip(selves, others if others is not None else selves))
    if dtype not in (torch.float32, torch.float64) or not all(
            a.device.type == NAME and b.device.type == NAME and a.dtype == b.dtype == dtype and a.is_contiguous()
            and b.is_contiguous() and a.shape == b.shape and a.device == selves[0].device for a, b in pairs):
        return False
    dev = _dev(selves[0])
    if FOREACH_FUSED != "on" and dev.info.kind != "gpu":
        return False
    ct = _cl_type(dtype)
    scalar = np.float64 if dtype == torch.float64 else np.float32
    pairs = [pair for pair in pairs if pair[0].numel()]
    # a large tensor runs alone (a one-case kernel): in a shared launch every one of its elements would walk
    # the chain of cases (vgg16's 103M-element classifier weight: 5.1 ms a launch on the H100, ~10x its bytes)
    alone = [[pair] for pair in pairs if pair[0].numel() >= FOREACH_ALONE]
    small = [pair for pair in pairs if pair[0].numel() < FOREACH_ALONE]
    for group in alone + [small[start:start + FOREACH_WIDTH] for start in range(0, len(small), FOREACH_WIDTH)]:
        width = len(group)
        key = ("foreach", expr, ct, width, others is not None)
        kernel = _flat_kernels.get(key)
        if kernel is None:
            params = "".join(f", __global {ct}* a{t}, long ao{t}, __global const {ct}* b{t}, long bo{t}, long e{t}"
                             for t in range(width))
            body = _FLOAT_LITERAL.sub(r"\1", expr) if ct == "double" else expr
            # one flat index over the group's tensors (e{t}: where tensor t ends), so no work item idles
            cases = " else ".join(
                f"if (i < e{t}) {{ long j = i{f' - e{t - 1}' if t else ''}; {ct} a = a{t}[ao{t} + j], "
                f"b = b{t}[bo{t} + j]; a{t}[ao{t} + j] = ({ct})({body}); }}" for t in range(width))
            source = f"""
__kernel void foreach_inplace({ct} alpha{params}) {{
    long i = get_global_id(0);
    {cases}
}}"""
            kernel = _flat_kernels[key] = dev.kernel("foreach_inplace", source)
        arguments, end = [scalar(1 if alpha is None else alpha)], 0
        for a, b in group:
            end += a.numel()
            arguments += [_block(a).buffer, np.int64(a.storage_offset()), _block(b).buffer,
                          np.int64(b.storage_offset()), np.int64(end)]
        dev.launch(kernel, (end,), None, *arguments, label=f"foreach {expr}")
    return True


def _written_outs(op) -> bool:
    return _schema_of(op)[2]


_HANDLERS = {  # base op name (no trailing "_") -> the kernel taking (op, args, kwargs, bound)
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any"), _reduction),
    "native_dropout": _dropout,
    "bernoulli": _bernoulli,
    **dict.fromkeys(("_softmax", "_log_softmax"), _softmax),
    **dict.fromkeys(("_softmax_backward_data", "_log_softmax_backward_data"), _softmax_backward),
    **dict.fromkeys(("nll_loss_forward", "nll_loss_backward"), _nll),
    **dict.fromkeys(("native_layer_norm", "native_layer_norm_backward"), _layer_norm),
    **dict.fromkeys(("embedding", "index_select", "embedding_dense_backward"), _embedding),
    **dict.fromkeys(("max_pool2d_with_indices", "max_pool2d_with_indices_backward"), _max_pool),
    **dict.fromkeys(("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"), _adaptive_avg_pool),
    **dict.fromkeys(("avg_pool2d", "avg_pool2d_backward"), _avg_pool),
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "native_batch_norm_backward"), _batch_norm),
    **dict.fromkeys(("convolution", "convolution_backward"), _convolution),
    **dict.fromkeys(("mm", "addmm", "bmm"), _matmul),
    "arange": _arange,
    **dict.fromkeys(("tril", "triu"), _triangle),
    "cat": _cat,
}


def _native(op, args, kwargs):
    """The device kernel for op, or raise _NoKernel."""
    return _route_of(op)(op, args, kwargs)


@functools.lru_cache(maxsize=None)
def _route_of(op):
    """The function (op, args, kwargs) that runs `op` on the device: what _native used to decide per call from
    the op's schema (~5 us of attribute walks per op)."""
    if op is aten._copy_from.default or op is aten._copy_from_and_resize.default:
        return _copy_from
    if op is aten._local_scalar_dense.default:
        return _local_scalar_dense
    name = op._schema.name
    if name.startswith("aten::_foreach_"):
        return _foreach

    def bound(handler):
        return lambda op, args, kwargs: handler(op, args, kwargs, _bind(op, args, kwargs))

    if op in (aten.empty.memory_format, aten.empty_strided.default):
        return bound(_empty)
    if name.split("::")[1] in _GEOMETRY_INPLACE:
        return bound(_geometry_inplace)
    if _is_view_op(op):
        return _view
    base = _base(op)
    if base in POINTWISE:
        return bound(_pointwise_op)
    handler = _HANDLERS.get(base)
    if handler is None or op._overloadname in ("unary_out", "other", "names_dim"):  # max.other is maximum
        def no_kernel(op, args, kwargs):
            raise _NoKernel(op.name())
        return no_kernel
    return bound(handler)


def _dispatch(op, *args, **kwargs):
    """The kernel for every op on the ocl device."""
    try:
        return _native(op, args, kwargs)
    except _NoKernel:
        return _cpu_fallback(op, args, kwargs)


def _cpu_fallback(op, args, kwargs):
    name = op.name()
    with _lock:
        first = name not in _fallbacks
        _fallbacks[name] += 1
    for listener in list(_fallback_listeners):
        listener(name)
    if first:
        warnings.warn(f"fade.ocl: the operator '{name}' has no OpenCL kernel and runs on the CPU (copy in, run, "
                      "copy out); fade.ocl.fallback_counts() counts them", UserWarning, stacklevel=3)
    bound = _bind(op, args, kwargs)
    written = {id(t) for t in _written(op, bound)}
    host_storages = {}  # device StorageImpl address -> (host storage, a device tensor on it)
    host_to_device = {}  # id(host tensor) -> (host, device tensor)
    device_by_host_storage = {}

    def unwrap(value):
        if isinstance(value, torch.Tensor) and value.device.type == NAME:
            storage = value.untyped_storage()
            # zero-byte tensors share one storage (empty()): each gets a host storage of its own, or the CPU op
            # would resize several outputs over one host storage
            key = storage._cdata if storage.nbytes() else ("zero-byte", id(value))
            if key not in host_storages:
                host_storages[key] = (_storage_to_host(value), value)
            host_storage = host_storages[key][0]
            host = set_geometry(torch.empty(0, dtype=value.dtype), host_storage, value.storage_offset(),
                                value.size(), value.stride())
            host_to_device[id(host)] = (host, value)
            device_by_host_storage[host_storage._cdata] = value
            return host
        if isinstance(value, torch.device) and value.type == NAME:
            return torch.device("cpu")
        return value

    host_args, host_kwargs = _numbers_as_tensors(op, map_nested(unwrap, args), map_nested(unwrap, kwargs))
    result = op(*host_args, **host_kwargs)
    for host, device_tensor in list(host_to_device.values()):
        if id(device_tensor) in written:
            if host.untyped_storage().nbytes() > device_tensor.untyped_storage().nbytes() or \
                    host.untyped_storage()._cdata not in device_by_host_storage:
                fresh = empty(host.size(), host.stride(), host.dtype, device_tensor.device.index,
                              host.storage_offset())
                set_geometry(device_tensor, fresh.untyped_storage(), host.storage_offset(), host.size(),
                             host.stride())
                _storage_from_host(host.untyped_storage(), device_tensor, owned=True)
            else:
                set_geometry(device_tensor, device_tensor.untyped_storage(), host.storage_offset(), host.size(),
                             host.stride())
                _storage_from_host(host.untyped_storage(), device_tensor, owned=True)
    index = _index_of(args, kwargs)

    def wrap(value):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return value
        known = host_to_device.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        base = device_by_host_storage.get(value.untyped_storage()._cdata)
        if base is not None:
            return _table.view_of(base, value.dtype, value.storage_offset(), value.size(), value.stride())
        fresh = empty(value.size(), value.stride(), value.dtype, index, value.storage_offset())
        _storage_from_host(value.untyped_storage(), fresh) if value.untyped_storage().nbytes() <= \
            fresh.untyped_storage().nbytes() else upload(value, fresh)
        return fresh

    return map_nested(wrap, result)


class BackendModule(PythonDeviceModule):
    """`torch.ocl`: what torch asks of a device module. Random ops run on the CPU (through the fallback) with
    the CPU generator, so seeding is torch.manual_seed's."""

    def device_count(self) -> int:
        return len(runtime.devices())

    def device(self, device):
        """A no-op context: ops run on their tensors' device, there is no current device to switch."""
        return contextlib.nullcontext()

    def get_amp_supported_dtype(self) -> list:
        return [torch.float16] if any(d.fp16 for d in runtime.devices()) else []

    def synchronize(self, device=None) -> None:
        for dev in runtime.active_devices():
            dev.queue.finish()

    def empty_cache(self) -> None:
        _reclaim()
        for dev in runtime.active_devices():
            dev.empty_cache()

    def memory_allocated(self, device=None) -> int:
        return sum(block.buffer.size for block in _table.live()
                   if block.buffer is not runtime.device(block.device).null_buffer())
