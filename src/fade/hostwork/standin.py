"""A stand-in accelerator for machines without a GPU: torch's PrivateUse1 device, backed by host memory.

Why: the guard must be tested on the real dispatch path (autograd, CompositeImplicit decompositions, the mode
stack, autograd's device threads, `.item()` lowering to `_local_scalar_dense`), not on synthetic events. The
`meta` device cannot copy to the host, and a tensor subclass would add a Python dispatch key that real device
tensors do not have. A PrivateUse1 device has neither problem: `torch.randn(4).to("standin")` is a real tensor
of a real non-CPU device type, and the guard sees exactly the ops it would see on "cuda".

How: `torch.utils.backend_registration._setup_privateuseone_for_python_backend` registers the device, its
hooks and a Python device guard (torch >= 2.5; experimental there). Every ATen op on the device reaches one
boxed fallback kernel (`_run_on_host`), which runs it with the host fallback fade.ocl uses too
(`fade.hostwork.host_fallback.run_on_host`) on host tensors sharing the device tensors' memory. A device
tensor's storage is made with `_construct_storage_from_data_pointer` over its host twin's memory, so views,
`detach` and in-place ops keep their aliasing without any per-op code.

Limits: one device (standin:0); ops run synchronously; no streams, events, pinned memory or generators
(random ops use the CPU generator). It is for tests and examples, never for speed.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

import torch

from fade.hostwork.host_fallback import HostMemory, run_on_host
from fade.hostwork.storages import PythonDeviceModule, StorageTable, register_python_backend, set_geometry

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


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """The host tensor sharing `tensor`'s memory, with the same sizes, strides and offset. No copy."""
    return set_geometry(torch.empty(0, dtype=tensor.dtype), _memory.host_storage(tensor), tensor.storage_offset(),
                        tensor.size(), tensor.stride())


class _HostMemory(HostMemory):
    """The stand-in's storages are host memory: the host storage is the memory itself, nothing is copied."""

    def host_storage(self, tensor: torch.Tensor) -> torch.UntypedStorage:
        try:
            return _host_storage.backing(tensor)
        except RuntimeError:
            raise RuntimeError(f"{NAME} tensor has no host memory (was it made outside fade.hostwork.standin?)") \
                from None

    def store(self, host_storage, tensor) -> None:
        pass  # the op wrote the device tensor's own memory

    def adopt(self, host_storage, device, dtype, owned: bool) -> torch.Tensor:
        nbytes = host_storage.nbytes()
        tensor = _host_storage.new_tensor(host_storage, host_storage.data_ptr(), nbytes, device, torch.uint8, 0,
                                          [nbytes], [1])
        if len(_host_storage) % 1024 == 0:
            _host_storage.sweep()
        return tensor


_memory = _HostMemory(NAME, _host_storage)


def _run_on_host(op, *args, **kwargs):
    """The boxed fallback for every op on the stand-in device."""
    if _simulated_warnings:
        name = op.name()
        # A composite op reaches the backend as another overload (cumsum as cumsum.out), so match the base
        # name too.
        message = _simulated_warnings.get(name) or _simulated_warnings.get(name.split(".")[0])
        if message:
            warnings.warn(message, UserWarning, stacklevel=2)
    if op is aten._copy_from.default or op is aten._copy_from_and_resize.default:
        source, destination = args[0], args[1]
        if op is aten._copy_from_and_resize.default:
            run_on_host(aten.resize_.default, (destination, source.shape), {}, _memory)
        return run_on_host(aten.copy_.default, (destination, source), {}, _memory)
    return run_on_host(op, args, kwargs, _memory)


class _BackendModule(PythonDeviceModule):
    """`torch.standin`: what torch asks of a device module, plus the allocator figure the guard reads."""

    def get_amp_supported_dtype(self) -> list:
        return [torch.float16, torch.bfloat16]

    def synchronize(self, device=None) -> None:
        pass  # ops run synchronously

    def memory_allocated(self, device=None) -> int:
        return sum(host.nbytes() for host in _host_storage.live())
