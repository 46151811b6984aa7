"""torch's PrivateUse1 device named "ocl": every ATen op on it reaches `_dispatch`, which routes it to a kernel
or to the counted CPU fallback.

The routing (`route_of`, cached per op): the copy ops, _foreach_*, empty, in-place geometry ops and view ops
first; then POINTWISE (pointwise.py) by the op's base name; then HANDLERS, base name -> the module's kernel. A
kernel raises NoKernel for a call it cannot run (a dtype, a variant); that call, and every op without a route,
runs on the CPU (`_cpu_fallback`, through fade.hostwork.host_fallback, which the stand-in device shares: storages
copied in, the op run, written arguments copied back, views kept),
warns once per op with its name, and is counted (`fallback_counts`, `add_fallback_listener`). `register()` names
the device; BackendModule is what torch asks of a device module (`torch.ocl`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import warnings

import torch

from fade.hostwork.host_fallback import HostMemory, run_on_host
from fade.hostwork.storages import PythonDeviceModule, register_python_backend
from fade.ocl import runtime
from fade.ocl.attention import native_multi_head_attention, transformer_encoder_layer
from fade.ocl.convolution import convolution
from fade.ocl.foreach import foreach, FOREACH_FUSED_EXPRESSIONS
from fade.ocl.gemm import matmul
from fade.ocl.indexing import arange, embedding, triangle
from fade.ocl.memory import empty, NAME, reclaim, storage_table
from fade.ocl.meta import base_name, bind_arguments, is_view_op
from fade.ocl.normalization import batch_norm, group_norm, layer_norm
from fade.ocl.philox import bernoulli, dropout, random_fill
from fade.ocl.pointwise import POINTWISE, pointwise_op
from fade.ocl.pooling import adaptive_avg_pool, adaptive_max_pool, avg_pool, max_pool
from fade.ocl.reductions import nll_loss, reduce_op, softmax, softmax_backward
from fade.ocl.runtime import OclError
from fade.ocl.sources import NoKernel
from fade.ocl.transfers import copy_from, local_scalar_dense, restore_storage, storage_from_host, storage_to_host
from fade.ocl.views import cat, empty_op, GEOMETRY_INPLACE, geometry_inplace, roll, view_op

aten = torch.ops.aten


_library = None

_lock = threading.Lock()

_fallbacks: collections.Counter = collections.Counter()


def is_registered() -> bool:
    return _library is not None


def register() -> None:
    """Name PrivateUse1 "ocl" in this process and route its ops here (idempotent). OclError if there is no
    OpenCL device or PrivateUse1 already has another name (it can be named once per process)."""
    global _library
    if _library is not None:
        return
    runtime.devices()  # fails with one line when there is no OpenCL
    # native_layer_norm(_backward) and native_group_norm are composite for backends without a kernel (layer norm
    # would decompose into batch norm; group norm's composite views its input, which fails for channels-last);
    # registered per op they run this backend's own kernels.
    libraries = register_python_backend(
        NAME, BackendModule(), _dispatch, error=OclError,
        extra_ops=("native_layer_norm.default", "native_layer_norm_backward.default", "native_group_norm.default",
                   # these have a composite per-tensor kernel that would win over the fallback: registered, they
                   # reach foreach as one call (multi-tensor kernels, _foreach_fused)
                   *[f"_foreach_{key}" for key in FOREACH_FUSED_EXPRESSIONS], *_structured_ops(),
                   # a view with a math bit would loop in torch's fallbacks here: _materialized_math_bit
                   "_conj.default", "_neg_view.default"))
    # torch.load restores a storage with torch.UntypedStorage(n, device="ocl"), which needs a C++ allocator
    # (PrivateUse1 from Python has none: it crashes). Restore "ocl:N" storages through this allocator instead.
    torch.serialization.register_package(1, lambda obj: None, restore_storage)
    _library = libraries


def _structured_ops() -> list[str]:
    """The functional and in-place overloads of the ops with kernels here that torch runs, on a backend without
    its own kernel for them, through a composite that computes the meta result in C++ and then dispatches
    empty + the out= overload: two trips into Python. Registered per op, they reach `_dispatch` once (a
    functional add: 101 -> 62 us on PoCL)."""
    found = []
    for base in sorted(set(POINTWISE) | set(HANDLERS)):
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


def note_fallback(name: str) -> bool:
    """Count one fallback named `name` in fallback_counts() and call the listeners; True the first time `name`
    is counted (the caller then warns). The graph mode (graph.py) counts its nodes that ran through eager
    dispatch as "graph:<op>" and dynamo's graph breaks as "graph:break"."""
    with _lock:
        first = name not in _fallbacks
        _fallbacks[name] += 1
    for listener in list(_fallback_listeners):
        listener(name)
    return first


HANDLERS = {  # base op name (no trailing "_") -> the kernel taking (op, args, kwargs, bound)
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any"), reduce_op),
    "native_dropout": dropout,
    "bernoulli": bernoulli,
    **dict.fromkeys(("uniform", "normal"), random_fill),
    **dict.fromkeys(("_softmax", "_log_softmax", "_safe_softmax"), softmax),
    **dict.fromkeys(("_softmax_backward_data", "_log_softmax_backward_data"), softmax_backward),
    **dict.fromkeys(("nll_loss_forward", "nll_loss_backward"), nll_loss),
    **dict.fromkeys(("native_layer_norm", "native_layer_norm_backward"), layer_norm),
    **dict.fromkeys(("native_group_norm", "native_group_norm_backward"), group_norm),
    **dict.fromkeys(("embedding", "index_select", "embedding_dense_backward"), embedding),
    **dict.fromkeys(("max_pool2d_with_indices", "max_pool2d_with_indices_backward"), max_pool),
    **dict.fromkeys(("_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward"), adaptive_avg_pool),
    **dict.fromkeys(("adaptive_max_pool2d", "adaptive_max_pool2d_backward"), adaptive_max_pool),
    **dict.fromkeys(("avg_pool2d", "avg_pool2d_backward"), avg_pool),
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "native_batch_norm_backward"), batch_norm),
    **dict.fromkeys(("convolution", "convolution_backward"), convolution),
    **dict.fromkeys(("mm", "addmm", "bmm", "baddbmm"), matmul),
    "arange": arange,
    **dict.fromkeys(("tril", "triu"), triangle),
    "cat": cat,
    "roll": roll,
    "_native_multi_head_attention": native_multi_head_attention,
    "_transformer_encoder_layer_fwd": transformer_encoder_layer,
}


def _native(op, args, kwargs):
    """The device kernel for op, or raise NoKernel."""
    return route_of(op)(op, args, kwargs)


@functools.lru_cache(maxsize=None)
def route_of(op):
    """The function (op, args, kwargs) that runs `op` on the device: what _native used to decide per call from
    the op's schema (~5 us of attribute walks per op)."""
    if op is aten._copy_from.default or op is aten._copy_from_and_resize.default:
        return copy_from
    if op is aten._local_scalar_dense.default:
        return local_scalar_dense
    name = op._schema.name
    if name.startswith("aten::_foreach_"):
        return foreach

    def bound(handler):
        return lambda op, args, kwargs: handler(op, args, kwargs, bind_arguments(op, args, kwargs))

    if op in (aten.empty.memory_format, aten.empty_strided.default):
        return bound(empty_op)
    if op in (aten._conj.default, aten._neg_view.default):
        return _materialized_math_bit
    if name.split("::")[1] in GEOMETRY_INPLACE:
        return bound(geometry_inplace)
    if is_view_op(op):
        return view_op
    base = base_name(op)
    if base in POINTWISE:
        return bound(pointwise_op)
    handler = HANDLERS.get(base)
    if handler is None or op._overloadname in ("unary_out", "other", "names_dim"):  # max.other is maximum
        def no_kernel(op, args, kwargs):
            raise NoKernel(op.name())
        return no_kernel
    return bound(handler)


def _materialized_math_bit(op, args, kwargs):
    """aten._conj (Tensor.conj() of a complex tensor) and aten._neg_view on ocl: a new tensor of the conjugate or
    negated values, not a view with torch's lazy math bit. With the bit, torch's conjugate and negative fallbacks
    resolve such a view for any op outside their fallthrough lists (`.cpu()`, torch.fft's results) through
    resolve_conj / resolve_neg -> copy_, and copy_ on this backend resolves the source again: a loop in C++ until
    the stack overflows (a segfault, session 20). neg runs as the device's own op; the conjugate through the CPU
    fallback (ocl has no complex kernels), counted as one. What is lost is the view: writing into the result does
    not change the original, as it would on the CPU."""
    tensor = args[0]
    if op is aten._neg_view.default:
        return aten.neg.default(tensor)
    if not tensor.is_complex():
        return tensor
    return _cpu_fallback(aten._conj_physical.default, (tensor,), {})


def _dispatch(op, *args, **kwargs):
    """The kernel for every op on the ocl device."""
    try:
        return _native(op, args, kwargs)
    except NoKernel:
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
    return run_on_host(op, args, kwargs, _host_memory)


class _HostMemory(HostMemory):
    """ocl's storages are OpenCL buffers: read into a host copy before the op, written back after it."""

    def host_storage(self, tensor):
        return storage_to_host(tensor)

    def store(self, host_storage, tensor) -> None:
        storage_from_host(host_storage, tensor, owned=True)  # the fallback's own copy, dropped after the op

    def adopt(self, host_storage, device, dtype, owned: bool):
        fresh = empty([-(-host_storage.nbytes() // dtype.itemsize)], [1], dtype, device.index or 0)
        storage_from_host(host_storage, fresh, owned=owned)
        return fresh


_host_memory = _HostMemory(NAME, storage_table)


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
        reclaim()
        for dev in runtime.active_devices():
            dev.empty_cache()

    def memory_allocated(self, device=None) -> int:
        return sum(block.buffer.size for block in storage_table.live()
                   if block.buffer is not runtime.device(block.device).null_buffer())
