"""Device tensors over memory FADE owns: a table from each PrivateUse1 storage to the object that backs it.

A PrivateUse1 backend registered from Python gets no allocator, so its tensors' storages are built with
`torch._C._construct_storage_from_data_pointer` over an address FADE chooses, and the memory behind them lives in
a Python object (a host storage for the stand-in device, an OpenCL buffer for `fade.ocl`). Geometry (sizes,
strides, offset) is set with the CPU kernel of `set_`, which never reads data, so views, `detach` and in-place
ops share one storage and keep their aliasing without per-op code. Shared by fade.hostwork.standin and fade.ocl.
"""

from __future__ import annotations

import itertools
import threading

import torch
from torch.multiprocessing.reductions import StorageWeakRef  # torch imports it already

aten = torch.ops.aten


# Ops every Python PrivateUse1 backend registers per op as well as through its fallback, for two reasons.
# (1) Some C++ paths reach the device kernel with the Python dispatch key excluded while a dispatch mode is on
# the stack (torch.tensor(data, device=...) copies that way); torch then routes the call through the mode's
# interpreter, which finds per-op Python registrations but not fallbacks. (2) For backends other than
# CPU/CUDA, convolution's composite kernel calls convolution_overrideable, which only raises; a direct
# registration runs the backend's own kernel.
PER_OP = ("empty.memory_format", "empty_strided.default", "_copy_from.default", "_copy_from_and_resize.default",
          "convolution.default", "convolution_backward.default")


def register_python_backend(name: str, module, kernel, extra_ops: tuple = (), error=RuntimeError) -> tuple:
    """Name PrivateUse1 `name` with device module `module` and route every op on it to `kernel(op, *args,
    **kwargs)`: a boxed fallback plus the per-op registrations (PER_OP and `extra_ops`). PrivateUse1 can be
    named once per process: `error` is raised when another backend already took it. Returns the
    torch.library objects, which must be kept alive."""
    import functools

    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", name):
        raise error(f"PrivateUse1 is already registered as {current!r}; the {name} device needs it")
    if current == "privateuseone":
        _setup_privateuseone_for_python_backend(name, backend_module=module)
    _route_storage_clones(name)
    library = torch.library.Library("_", "IMPL")
    library.fallback(kernel, "PrivateUse1")
    aten_library = torch.library.Library("aten", "IMPL")
    for op_name in PER_OP + tuple(extra_ops):
        packet, overload = op_name.split(".")
        op = getattr(getattr(aten, packet), overload)
        aten_library.impl(op, functools.partial(kernel, op), "PrivateUse1")
    return library, aten_library


_torch_storage_clone = torch.UntypedStorage.clone


def _route_storage_clones(name: str) -> None:
    """Make UntypedStorage.clone of a `name` storage a device op. torch's clone (behind copy.deepcopy of a
    tensor) makes torch.UntypedStorage(n, device=...), which needs the device's C++ allocator; a Python backend
    has none, and the interpreter dies of a segfault. Routed here, the storage is viewed as bytes and cloned
    with the backend's own kernels."""

    def clone(storage):
        if storage.device.type != name:
            return _torch_storage_clone(storage)
        view = torch.empty(0, dtype=torch.uint8, device=storage.device)
        return set_geometry(view, storage, 0, [storage.nbytes()], [1]).clone().untyped_storage()

    torch.UntypedStorage.clone = clone


def map_nested(function, value):
    """`function` applied to every leaf of nested lists, tuples and dicts, keeping their types."""
    if isinstance(value, (list, tuple)):
        return type(value)(map_nested(function, item) for item in value)
    if isinstance(value, dict):
        return {key: map_nested(function, item) for key, item in value.items()}
    return function(value)


_SET_ = aten.set_.source_Storage_storage_offset
# An entry keeps torch's StorageWeakRef (it frees the weak reference when dropped); its handle is tested with
# the storage class's _expired directly, skipping the wrapper's two Python calls: the table asks on every op and
# every allocation.
_expired = torch.UntypedStorage._expired
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_inference_mode = torch.is_inference_mode_enabled


def set_geometry(tensor: torch.Tensor, storage, offset: int, size, stride) -> torch.Tensor:
    """Point `tensor` at `storage` with the given geometry; no data is read or written. The CPU kernel of set_
    is device-agnostic; redispatch reaches it in about half the time of _op_dk (2.4 against 5.5 us here)."""
    _SET_.redispatch(_CPU_KEYS, tensor, storage, offset, size, stride)
    return tensor


class StorageTable:
    """Device storages of one backend -> their backing objects. A storage's entry dies with the storage."""

    # A full sweep looks at a young generation. An entry that outlives PROMOTE_AFTER full sweeps (parameters,
    # optimizer state) leaves it, and only every OLD_EVERY-th full sweep (or one that asks for everything: the
    # allocator's before it empties the pool for room) looks at it again: a training step's sweeps checked its
    # ~1000 parameters' and momentum buffers' storages each time (mobilenet_v3_small: 8% of a replayed step's host
    # time). Eager steps make a few full sweeps each (runtime.FULL_SWEEP_ALLOCATIONS), so an activation that lives
    # through a forward and a backward outlives two or three; with PROMOTE_AFTER at 2 such buffers were found
    # dead only every OLD_EVERY-th sweep, and new ones were made meanwhile.
    PROMOTE_AFTER = 8
    OLD_EVERY = 16

    def __init__(self, device_type: str):
        self.device_type = device_type
        self._lock = threading.Lock()
        self._entries: dict = {}  # StorageImpl address -> (weak ref to the device storage, backing object)
        self._young: dict = {}  # StorageImpl address -> full sweeps survived; insertion-ordered, newest last
        self._full_sweeps = 0

    def new_tensor(self, backing, address: int, nbytes: int, device: torch.device, dtype, offset: int, size,
                   stride) -> torch.Tensor:
        """A device tensor on a fresh storage of `nbytes` at `address`, remembered as backed by `backing`."""
        storage = torch._C._construct_storage_from_data_pointer(address, device, nbytes)
        tensor = set_geometry(torch._C._acc.create_empty_tensor((0,), dtype), storage, offset, size, stride)
        ref = StorageWeakRef(tensor.untyped_storage())
        with self._lock:
            key = storage._cdata
            self._entries[key] = (ref, backing)
            self._young.pop(key, None)  # an address used again: newest again
            self._young[key] = 0
        return tensor

    def view_of(self, base: torch.Tensor, dtype, offset: int, size, stride) -> torch.Tensor:
        """A device tensor sharing `base`'s storage with the given geometry. Under torch.inference_mode, a view
        of a normal tensor is made a normal tensor: autograd's view bookkeeping gives it the base's version
        counter, which an inference tensor refuses ("Cannot set version_counter for inference tensor": an
        expanded view's clone failed, and with it model.generate's attention)."""
        if _inference_mode() and not base.is_inference():
            with torch.inference_mode(False):
                empty = torch._C._acc.create_empty_tensor((0,), dtype)
        else:
            empty = torch._C._acc.create_empty_tensor((0,), dtype)
        return set_geometry(empty, base.untyped_storage(), offset, size, stride)

    def backing(self, tensor_or_storage):
        """The object behind a device tensor's (or storage's) memory; RuntimeError if FADE did not make it."""
        storage = tensor_or_storage.untyped_storage() if isinstance(tensor_or_storage, torch.Tensor) \
            else tensor_or_storage
        entry = self._entries.get(storage._cdata)
        if entry is None or _expired(entry[0].cdata):
            raise RuntimeError(f"this {self.device_type} tensor has no memory behind it (made outside FADE?)")
        return entry[1]

    def sweep(self, young: int | None = None, old: bool = True) -> list:
        """Forget the storages that died; returns their backing objects (so an allocator can reuse them).
        `young`: look only at the `young` most recently made entries (temporaries die young; a full sweep
        costs about a microsecond per storage it checks, and a training step holds a thousand). None: every
        entry of the young generation, and with `old` (or on every OLD_EVERY-th such sweep) every entry."""
        with self._lock:
            entries, found = self._entries, []
            if young is not None:
                generation = self._young
                for key in list(itertools.islice(reversed(generation), young)):
                    if _expired(entries[key][0].cdata):
                        found.append(entries.pop(key)[1])
                        del generation[key]
                return found
            self._full_sweeps += 1
            if old or self._full_sweeps % self.OLD_EVERY == 0:
                for key in [key for key, entry in entries.items() if _expired(entry[0].cdata)]:
                    found.append(entries.pop(key)[1])
            survivors, promote = {}, self.PROMOTE_AFTER  # the young generation rebuilt in one pass
            for key, age in self._young.items():
                entry = entries.get(key)
                if entry is None:  # died, found above
                    continue
                if _expired(entry[0].cdata):
                    found.append(entries.pop(key)[1])
                elif age + 1 < promote:
                    survivors[key] = age + 1
            self._young = survivors
            return found

    def live(self) -> list:
        """The backing objects of the storages still alive."""
        with self._lock:
            return [backing for ref, backing in self._entries.values() if not _expired(ref.cdata)]

    def __len__(self) -> int:
        return len(self._entries)


class PythonDeviceModule:
    """What torch asks of the device module (`torch.<name>`) of a PrivateUse1 backend registered from Python,
    for a backend whose random ops run on the CPU generator: seeding is torch.manual_seed's (it seeds the CPU
    generator before it calls these) and the device's own RNG state is empty. torch asks for it anyway
    (torch.random.fork_rng saves the current accelerator's state), so these must exist. Subclasses override
    device_count, synchronize, memory_allocated and what else differs."""

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed(self, seed: int) -> None:
        pass

    def manual_seed_all(self, seed: int) -> None:
        pass

    def seed(self) -> None:
        pass

    def seed_all(self) -> None:
        pass

    def initial_seed(self) -> int:
        return torch.initial_seed()

    def get_rng_state(self, device=None) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)

    def set_rng_state(self, new_state, device=None) -> None:
        pass

    def get_rng_state_all(self) -> list:
        return [self.get_rng_state()]

    def set_rng_state_all(self, new_states) -> None:
        pass
