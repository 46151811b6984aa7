"""One op of a Python PrivateUse1 device, run on the host: the fallback shared by fade.hostwork.standin (every op
runs here) and fade.ocl (each op without an OpenCL kernel, counted by fade.ocl.dispatch).

The devices differ in one thing only, how a device storage's bytes reach the host and come back: the stand-in
device's storages are host memory already (its host storage is the memory itself, nothing is copied), fade.ocl's
are OpenCL buffers (read into a host copy, written back after the op). That is `HostMemory`, which each device
subclasses; everything else is `run_on_host`:

- Each device tensor becomes a host tensor of the same geometry over a host storage with its storage's bytes,
  one host storage per device storage, so views and aliases of one storage stay aliases on the host. A
  zero-byte tensor gets a host storage of its own: a device may make zero-byte tensors views of one shared
  storage (fade.ocl does, one per device), and a CPU op resizing several outputs over one host storage would
  overlap them (sort and topk into empty outputs came back overlapping on ocl before this rule).
- A Python number where the schema declares a Tensor becomes a 0-dim CPU tensor (torch hands a Python kernel
  `x % 3`'s wrapped 3 as a number, and the op called again fails with it), and this device's torch.device the
  CPU. Then the op runs on the CPU.
- Each argument the schema marks written (in-place self, out=) takes back its geometry, which the op may have
  changed (resize_, set_), over the device storage behind its host storage now, so set_ onto another
  argument's storage stays an alias; its bytes go back with `HostMemory.store`. A host storage that grew or
  that the op made itself gets a device storage of its own (`HostMemory.adopt`).
- Results: a written argument comes back as the caller's device tensor, a view of an argument's storage as a
  view of its device storage, a CPU tensor the caller passed as itself, anything else as a new device tensor
  (results over one host storage share one device storage).
"""

from __future__ import annotations

import functools

import torch

from fade.hostwork.storages import map_nested, set_geometry


class HostMemory:
    """How the tensors of one device reach the host and come back; each device subclasses it."""

    def __init__(self, device_type: str, table):
        self.device_type = device_type
        self.table = table  # the device's storages.StorageTable

    def host_storage(self, tensor: torch.Tensor) -> torch.UntypedStorage:
        """A host storage holding the bytes of `tensor`'s (non-empty) storage."""
        raise NotImplementedError

    def store(self, host_storage: torch.UntypedStorage, tensor: torch.Tensor) -> None:
        """Put the bytes the op left in `host_storage` back into `tensor`'s storage (host_storage(tensor) made it)."""
        raise NotImplementedError

    def adopt(self, host_storage: torch.UntypedStorage, device: torch.device, dtype, owned: bool) -> torch.Tensor:
        """A tensor of `device` (any geometry) over a new storage holding `host_storage`'s bytes, for a tensor of
        `dtype` (which the device may refuse). `owned`: nothing else will touch `host_storage` (a copy may skip
        copying it first)."""
        raise NotImplementedError


@functools.lru_cache(maxsize=None)
def tensor_arguments(op) -> tuple:
    """(position, name) of each argument `op` declares as a Tensor."""
    return tuple((position, argument.name) for position, argument in enumerate(op._schema.arguments)
                 if isinstance(argument.type, torch._C.TensorType))


@functools.lru_cache(maxsize=None)
def written_positions(op) -> tuple:
    """(position, name, keyword-only) of each argument `op` writes: in-place self, out=."""
    return tuple((position, argument.name, argument.kwarg_only)
                 for position, argument in enumerate(op._schema.arguments)
                 if argument.alias_info is not None and argument.alias_info.is_write)


def numbers_as_tensors(op, args, kwargs) -> tuple:
    """(args, kwargs) with a Python number in a Tensor argument made a 0-dim CPU tensor (an int64, bool or
    default-dtype one, the dtypes of a wrapped number). torch hands a Python kernel `x % 3`'s wrapped 3 as a
    number, and calling the op again with it fails outside the few ops (add, mul, ...) that accept numbers."""
    args, kwargs = list(args), dict(kwargs)
    for position, name in tensor_arguments(op):
        for values, key in ((args, position), (kwargs, name)):
            if (key in values if isinstance(values, dict) else key < len(values)) and \
                    isinstance(values[key], (bool, int, float, complex)):
                values[key] = torch.tensor(values[key])
    return tuple(args), kwargs


def _written_tensors(op, args, kwargs) -> list:
    found = []
    for position, name, kwarg_only in written_positions(op):
        value = args[position] if position < len(args) and not kwarg_only else kwargs.get(name)
        if isinstance(value, torch.Tensor):
            found.append(value)
    return found


def run_on_host(op, args, kwargs, memory: HostMemory):
    """Run `op` on host tensors standing for the device tensors among its arguments; see the module's docstring."""
    name = memory.device_type
    host_storages = {}  # device StorageImpl address (or a zero-byte tensor's id) -> its host storage
    device_by_host_storage = {}  # host StorageImpl address -> a device tensor on the storage it stands for
    host_to_device = {}  # id(host tensor) -> (host tensor, device tensor)
    passed = {}  # id(CPU tensor the caller passed) -> it
    devices = []  # the device of each device tensor met, in order
    named = []  # each torch.device of this device met (empty(..., device=...) has no device tensor)

    def unwrap(value):
        if isinstance(value, torch.Tensor):
            if value.device.type != name:
                passed[id(value)] = value
                return value
            storage = value.untyped_storage()
            key = storage._cdata if storage.nbytes() else ("zero-byte", id(value))
            host_storage = host_storages.get(key)
            if host_storage is None:
                host_storage = host_storages[key] = memory.host_storage(value) if storage.nbytes() \
                    else torch.UntypedStorage(0)
                device_by_host_storage[host_storage._cdata] = value
            host = set_geometry(torch.empty(0, dtype=value.dtype), host_storage, value.storage_offset(), value.size(),
                                value.stride())
            if value.is_conj():  # the lazy math bits travel with the view: the host tensor stands for the same values
                host = host.conj()
            if value.is_neg():
                host = host._neg_view()
            host_to_device[id(host)] = (host, value)
            devices.append(value.device)
            return host
        if isinstance(value, torch.device) and value.type == name:
            named.append(torch.device(name, value.index or 0))
            return torch.device("cpu")
        return value

    host_args, host_kwargs = numbers_as_tensors(op, map_nested(unwrap, args), map_nested(unwrap, kwargs))
    result = op(*host_args, **host_kwargs)

    written = {id(tensor) for tensor in _written_tensors(op, args, kwargs)}
    stored = set()
    for host, device_tensor in list(host_to_device.values()):
        if id(device_tensor) not in written:
            continue
        host_storage = host.untyped_storage()
        base = device_by_host_storage.get(host_storage._cdata)
        if base is None or host_storage.nbytes() > base.untyped_storage().nbytes():  # the op's own, or grown
            base = memory.adopt(host_storage, device_tensor.device, host.dtype, owned=True)
            device_by_host_storage[host_storage._cdata] = base  # later arguments and results follow it
            stored.add(host_storage._cdata)
        set_geometry(device_tensor, base.untyped_storage(), host.storage_offset(), host.size(), host.stride())
        if host_storage._cdata not in stored:
            stored.add(host_storage._cdata)
            memory.store(host_storage, device_tensor)

    def wrap(value):
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return value
        known = host_to_device.get(id(value))
        if known is not None and known[0] is value:  # in-place or out=: the caller's tensor
            return known[1]
        if passed.get(id(value)) is value:
            return value
        host_storage = value.untyped_storage()
        base = device_by_host_storage.get(host_storage._cdata)
        if base is None:  # a tensor the op made
            device = (devices or named or [torch.device(name, 0)])[0]
            base = memory.adopt(host_storage, device, value.dtype, owned=False)
            device_by_host_storage[host_storage._cdata] = base
        view = memory.table.view_of(base, value.dtype, value.storage_offset(), value.size(), value.stride())
        if value.is_conj():  # a view result keeps the lazy math bits its host tensor has
            torch._C._set_conj(view, True)
        if value.is_neg():
            torch._C._set_neg(view, True)
        return view

    return map_nested(wrap, result)
