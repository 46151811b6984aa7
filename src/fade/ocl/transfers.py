"""Copies between the host and an ocl device: upload, download, whole storages (the CPU fallback), torch.load's
storage restore, and the copy ops (_copy_from, .item()).
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, NAME
from fade.ocl.pointwise import cast_bfloat16, pointwise

aten = torch.ops.aten


def restore_storage(storage, location: str):
    if not location.startswith(NAME):
        return None
    index = int(location.split(":")[1]) if ":" in location else 0
    restored = empty([storage.nbytes()], [1], torch.uint8, index)
    upload(torch.empty(0, dtype=torch.uint8).set_(storage.cpu() if storage.device.type != "cpu" else storage),
           restored)
    return restored.untyped_storage()


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
        staging = empty(target.size(), contiguous_strides(target.size()), target.dtype, target.device.index)
        upload(host, staging)
        pointwise("a", target, [staging])
        return
    data = _raw(host.contiguous())
    data = np.ascontiguousarray(data) if owned else np.array(data, copy=True)
    device_of(target).write(block_of(target).buffer, data, target.storage_offset() * target.element_size())


def download(source: torch.Tensor) -> torch.Tensor:
    """A contiguous host copy of a device tensor."""
    host = torch.empty(source.shape, dtype=source.dtype)
    if source.numel() == 0:
        return host
    if not _is_dense(source):
        staging = empty(source.size(), contiguous_strides(source.size()), source.dtype, source.device.index)
        pointwise("a", staging, [source])
        source = staging
    device_of(source).read(_raw(host), block_of(source).buffer, source.storage_offset() * source.element_size())
    return host


def storage_to_host(tensor: torch.Tensor) -> torch.UntypedStorage:
    storage = tensor.untyped_storage()
    host = torch.UntypedStorage(storage.nbytes())
    if storage.nbytes():
        device_of(tensor).read(torch.empty(0, dtype=torch.uint8).set_(host).numpy(), block_of(tensor).buffer)
    return host


def storage_from_host(host: torch.UntypedStorage, tensor: torch.Tensor, owned: bool = False) -> None:
    """Write a host storage into a device tensor's buffer; copied first unless `owned` (see upload)."""
    if host.nbytes():
        data = torch.empty(0, dtype=torch.uint8).set_(host).numpy()
        device_of(tensor).write(block_of(tensor).buffer, data if owned else data.copy(), 0)


def copy_from(op, args, kwargs):
    source, target = args[0], args[1]
    if op is aten._copy_from_and_resize.default and target.shape != source.shape:
        if target.device.type == NAME:
            aten.resize_.default(target, source.shape)
        else:
            target.resize_(source.shape)
    if target.device.type == NAME and source.device.type == NAME:
        if target.dtype == torch.bfloat16 or source.dtype == torch.bfloat16:
            cast_bfloat16(target, source)
        else:
            pointwise("a", target, [source])
    elif target.device.type == NAME:
        upload(source, target)
    else:
        target.copy_(download(source))
    return target


def local_scalar_dense(op, args, kwargs):
    return download(args[0]).item()
