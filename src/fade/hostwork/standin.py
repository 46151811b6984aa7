"""A stand-in accelerator for machines without a GPU: torch's PrivateUse1 device, backed by host memory.

Why: the guard must be tested on the real dispatch path (autograd, CompositeImplicit decompositions, the mode
stack, autograd's device threads, `.item()` lowering to `_local_scalar_dense`), not on synthetic events. The
`meta` device cannot copy to the host, and a tensor subclass would add a Python dispatch key that real device
tensors do not have. A PrivateUse1 device has neither problem: `torch.randn(4).to("standin")` is a real tensor
of a real non-CPU device type, and the guard sees exactly the ops it would see on "cuda".

How: `torch.utils.backend_registration._setup_privateuseone_for_python_backend` registers the device, its
hooks and a Python device guard (torch >= 2.5; experimental there). Every ATen op on the device reaches one
boxed fallback kernel (`_run_on_host`) that runs it on host tensors sharing the device tensors' memory and
wraps the results. A device tensor's storage is made with `_construct_storage_from_data_pointer` over its
host twin's memory, so views, `detach` and in-place ops keep their aliasing without any per-op code.

Limits: one device (standin:0); ops run synchronously; no streams, events, pinned memory or generators
(random ops use the CPU generator). It is for tests and examples, never for speed.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import torch

from fade.hostwork.storages import (PythonDeviceModule, StorageTable, map_nested, register_python_backend,
                                    set_geometry)

NAME = "standin"
aten = torch.ops.aten

_lock = threading.Lock()
_host_storage = StorageTable(NAME)  # device storage -> the host UntypedStorage holding its memory
_library = None  # the torch.library.Library holding the fallback; kept alive here
_simulated_warnings: dict[str, str] = {}  # op name -> warning text the op emits (see simulated_warnings)


def is_registered() -> bool:
    return _library is not None


def register() -> None:
    """Register the "standin" device in this process (idempotent). PrivateUse1 can be named only once per
    process, so this fails if another backend already took it."""
    global _library
    if _library is not None:
        return
    _library = register_python_backend(NAME, _BackendModule(), _run_on_host)


@contextlib.contextmanager
def simulated_warnings(messages: dict[str, str]):
    """While active, each named op ("aten::cumsum", or a full overload name) emits its message as a UserWarning,
    from inside the kernel, the way C++ kernels' TORCH_WARN reaches Python. Lets tests exercise the guard's
    capture of warnings a real backend emits (CPU fallbacks, CUDA's sync debug mode)."""
    with _lock:
        _simulated_warnings.update(messages)
    try:
        yield
    finally:
        with _lock:
            for name in messages:
                _simulated_warnings.pop(name, None)


def simulated_cpu_fallback(*ops: str):
    """The warning MPS and DirectML emit when they run an op on the CPU for lack of a kernel."""
    return simulated_warnings({op: f"The operator '{op}' is not currently supported on the {NAME} backend and "
                                   "will fall back to run on the CPU. This may have performance implications."
                               for op in ops})


def _device() -> torch.device:
    return torch.device(NAME, 0)


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """The host tensor sharing `tensor`'s memory, with the same sizes, strides and offset. No copy."""
    try:
        host_storage = _host_storage.backing(tensor)
    except RuntimeError:
        raise RuntimeError(f"{NAME} tensor has no host memory (was it made outside fade.hostwork.standin?)") from None
    return set_geometry(torch.empty(0, dtype=tensor.dtype), host_storage, tensor.storage_offset(), tensor.size(),
                        tensor.stride())


def _new_device_tensor(host: torch.Tensor) -> torch.Tensor:
    """A device tensor over `host`'s memory, same geometry."""
    host_storage = host.untyped_storage()
    tensor = _host_storage.new_tensor(host_storage, host_storage.data_ptr(), host_storage.nbytes(), _device(),
                                      host.dtype, host.storage_offset(), host.size(), host.stride())
    if len(_host_storage) % 1024 == 0:
        _host_storage.sweep()
    return tensor


def _view_of(device_base: torch.Tensor, host_view: torch.Tensor) -> torch.Tensor:
    """A device tensor sharing `device_base`'s storage, with `host_view`'s geometry."""
    return _host_storage.view_of(device_base, host_view.dtype, host_view.storage_offset(), host_view.size(),
                                 host_view.stride())


def _run_on_host(op, *args, **kwargs):
    """The boxed fallback for every op on the stand-in device."""
    if _simulated_warnings:
        name = op.name()
        # A composite op reaches the backend as another overload (cumsum as cumsum.out), so match the base
        # name too.
        message = _simulated_warnings.get(name) or _simulated_warnings.get(name.split(".")[0])
        if message:
            warnings.warn(message, UserWarning, stacklevel=2)
    device_by_storage = {}  # host storage address -> device tensor, to turn host views back into device views
    device_by_host = {}  # id(host tensor) -> (host tensor, device tensor), for in-place and out= results

    def unwrap(value):
        if isinstance(value, torch.Tensor) and value.device.type == NAME:
            host = to_host(value)
            device_by_storage[host.untyped_storage()._cdata] = value
            device_by_host[id(host)] = (host, value)
            return host
        if isinstance(value, torch.device) and value.type == NAME:
            return torch.device("cpu")
        return value

    host_args = map_nested(unwrap, args)
    host_kwargs = map_nested(unwrap, kwargs)
    if op is aten._copy_from.default or op is aten._copy_from_and_resize.default:
        source, destination = host_args[0], host_args[1]
        if op is aten._copy_from_and_resize.default:
            destination.resize_(source.shape)
        destination.copy_(source)
        return _wrap_inplace(destination, args[1])
    for argument in op._schema.arguments:
        if argument.is_out and isinstance(host_kwargs.get(argument.name), torch.Tensor):
            # The generic structured kernel hands us outputs of a placeholder shape; let the CPU kernel size
            # them rather than warn that it resized a non-empty output.
            host_kwargs[argument.name].resize_(0)
    result = op(*host_args, **host_kwargs)

    def wrap(value):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return value
        known = device_by_host.get(id(value))
        if known is not None and known[0] is value:  # in-place or out=: hand back the caller's tensor
            return _wrap_inplace(value, known[1])
        base = device_by_storage.get(value.untyped_storage()._cdata)
        if base is not None:  # a view of an input
            return _view_of(base, value)
        return _new_device_tensor(value)

    return map_nested(wrap, result)


def _wrap_inplace(host: torch.Tensor, device_tensor: torch.Tensor) -> torch.Tensor:
    """Return `device_tensor`, first matching its geometry to `host` if the op resized or restrided it."""
    same_geometry = (host.size() == device_tensor.size() and host.stride() == device_tensor.stride()
                     and host.storage_offset() == device_tensor.storage_offset())
    grew = host.untyped_storage().nbytes() > device_tensor.untyped_storage().nbytes()
    if grew:  # the host storage was reallocated: point the device tensor at a storage over the new memory
        fresh = _new_device_tensor(host)
        set_geometry(device_tensor, fresh.untyped_storage(), host.storage_offset(), host.size(), host.stride())
    elif not same_geometry:
        set_geometry(device_tensor, device_tensor.untyped_storage(), host.storage_offset(), host.size(),
                     host.stride())
    return device_tensor


class _BackendModule(PythonDeviceModule):
    """`torch.standin`: what torch asks of a device module, plus the allocator figure the guard reads."""

    def get_amp_supported_dtype(self) -> list:
        return [torch.float16, torch.bfloat16]

    def synchronize(self, device=None) -> None:
        pass  # ops run synchronously

    def memory_allocated(self, device=None) -> int:
        return sum(host.nbytes() for host in _host_storage.live())
