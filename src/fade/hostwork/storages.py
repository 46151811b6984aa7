"""Device tensors over memory FADE owns: a table from each PrivateUse1 storage to the object that backs it.

A PrivateUse1 backend registered from Python gets no allocator, so its tensors' storages are built with
`torch._C._construct_storage_from_data_pointer` over an address FADE chooses, and the memory behind them lives in
a Python object (a host storage for the stand-in device, an OpenCL buffer for `fade.ocl`). Geometry (sizes,
strides, offset) is set with the CPU kernel of `set_`, which never reads data, so views, `detach` and in-place
ops share one storage and keep their aliasing without per-op code. Shared by fade.hostwork.standin and fade.ocl.
"""

from __future__ import annotations

import threading

import torch

aten = torch.ops.aten


def map_nested(function, value):
    """`function` applied to every leaf of nested lists, tuples and dicts, keeping their types."""
    if isinstance(value, (list, tuple)):
        return type(value)(map_nested(function, item) for item in value)
    if isinstance(value, dict):
        return {key: map_nested(function, item) for key, item in value.items()}
    return function(value)


def set_geometry(tensor: torch.Tensor, storage, offset: int, size, stride) -> torch.Tensor:
    """Point `tensor` at `storage` with the given geometry; no data is read or written."""
    aten.set_.source_Storage_storage_offset._op_dk("CPU", tensor, storage, offset, size, stride)
    return tensor


class StorageTable:
    """Device storages of one backend -> their backing objects. A storage's entry dies with the storage."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self._lock = threading.Lock()
        self._entries: dict = {}  # StorageImpl address -> (weak ref to the device storage, backing object)

    def new_tensor(self, backing, address: int, nbytes: int, device: torch.device, dtype, offset: int, size,
                   stride) -> torch.Tensor:
        """A device tensor on a fresh storage of `nbytes` at `address`, remembered as backed by `backing`."""
        from torch.multiprocessing.reductions import StorageWeakRef

        storage = torch._C._construct_storage_from_data_pointer(address, device, nbytes)
        tensor = set_geometry(torch._C._acc.create_empty_tensor((0,), dtype), storage, offset, size, stride)
        with self._lock:
            self._entries[storage._cdata] = (StorageWeakRef(tensor.untyped_storage()), backing)
        return tensor

    def view_of(self, base: torch.Tensor, dtype, offset: int, size, stride) -> torch.Tensor:
        """A device tensor sharing `base`'s storage with the given geometry."""
        return set_geometry(torch._C._acc.create_empty_tensor((0,), dtype), base.untyped_storage(), offset, size,
                            stride)

    def backing(self, tensor_or_storage):
        """The object behind a device tensor's (or storage's) memory; RuntimeError if FADE did not make it."""
        storage = tensor_or_storage.untyped_storage() if isinstance(tensor_or_storage, torch.Tensor) \
            else tensor_or_storage
        entry = self._entries.get(storage._cdata)
        if entry is None or entry[0].expired():
            raise RuntimeError(f"this {self.device_type} tensor has no memory behind it (made outside FADE?)")
        return entry[1]

    def sweep(self) -> list:
        """Forget the storages that died; returns their backing objects (so an allocator can reuse them)."""
        with self._lock:
            dead = [key for key, (ref, _) in self._entries.items() if ref.expired()]
            return [self._entries.pop(key)[1] for key in dead]

    def live(self) -> list:
        """The backing objects of the storages still alive."""
        with self._lock:
            return [backing for ref, backing in self._entries.values() if not ref.expired()]

    def __len__(self) -> int:
        return len(self._entries)
