"""Decide whether one dispatched ATen op is a guard offence, from its name, tags and the devices of its tensors.

The rules, for an accelerator device type ACC (source: research/pytorch-tooling.md §1-2, measured on 2.11):
- copy: `_to_copy`, `copy_`, `_copy_from(_and_resize)` whose source and destination are on different devices,
  and `lift_fresh` of an ACC tensor (`torch.tensor(data, device=ACC)` copies host data over). A blocking copy
  between host and device also makes the host wait: on CUDA both directions end in `memcpy_and_sync`
  (aten/src/ATen/native/cuda/Copy.cu), which the sync debug mode reports. That wait is part of the copy, so
  the finding carries `syncs=True` and no separate sync is reported. `non_blocking=True` copies do not wait.
- sync: with an ACC input, `_local_scalar_dense` (`.item()`), `equal`, ops tagged `dynamic_output_shape`
  (nonzero, masked_select, unique, ...) and boolean-mask indexing. `index.Tensor` carries the tag for every
  index, but only a bool or uint8 index makes it wait for the device.
- device_mix: ACC inputs together with CPU tensors of one or more dimensions. A 0-dim CPU tensor is legal and
  costs nothing (it is passed as a scalar), so it is not flagged.
- cpu_compute: every tensor is on the CPU, the op is not a view, allocation or metadata op, some tensor has
  one or more dimensions, and the caller says the accelerator is in use. 0-dim-only ops are left out: torch's
  own optimizers keep their step counters on the CPU on purpose.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

aten = torch.ops.aten
CPU = "cpu"

COPY_OPS = frozenset({aten._to_copy.default, aten.copy_.default, aten._copy_from.default,
                      aten._copy_from_and_resize.default})
LIFT_OPS = frozenset({aten.lift_fresh.default, aten.lift_fresh_copy.default})
SYNC_OPS = frozenset({aten._local_scalar_dense.default, aten.equal.default})
MASK_INDEX_PACKETS = frozenset({aten.index, aten.index_put_, aten.index_put, aten._index_put_impl_})
# Ops that move no data and compute nothing: allocation, metadata, storage juggling.
NO_COMPUTE_PACKETS = frozenset({
    aten.empty, aten.empty_strided, aten.empty_like, aten.new_empty, aten.new_empty_strided, aten.lift_fresh,
    aten.detach, aten.alias, aten.set_, aten.resize_, aten.is_pinned, aten._has_compatible_shallow_copy_type,
    aten.is_same_size, aten.sym_size, aten.sym_stride, aten.sym_numel, aten.sym_storage_offset,
    aten._local_scalar_dense, aten.result_type, aten.is_nonzero, aten.dim, aten.size, aten.stride,
})
MASK_DTYPES = (torch.bool, torch.uint8)


class Finding(NamedTuple):
    kind: str  # a key of fade.hostwork.report.KINDS
    direction: str  # copies: "h2d" | "d2h" | "d2d"; otherwise ""
    nbytes: int
    syncs: bool = False  # copies: a blocking host<->device copy, so the host waited for it too

    @property
    def host_waits(self) -> bool:
        """Whether this finding stands for a host wait (for matching CUDA's sync debug warnings to it)."""
        return self.kind == "sync" or self.syncs


class _OpInfo(NamedTuple):
    is_copy: bool
    is_lift: bool
    is_sync: bool
    is_mask_index: bool
    computes: bool


_op_info_cache: dict = {}


def _op_info(func) -> _OpInfo:
    info = _op_info_cache.get(func)
    if info is None:
        packet = getattr(func, "overloadpacket", None)
        tags = getattr(func, "tags", ())
        dynamic = torch.Tag.dynamic_output_shape in tags
        mask_index = packet in MASK_INDEX_PACKETS
        info = _OpInfo(
            is_copy=func in COPY_OPS,
            is_lift=func in LIFT_OPS,
            is_sync=func in SYNC_OPS or (dynamic and not mask_index),
            is_mask_index=mask_index,
            computes=not (getattr(func, "is_view", False) or packet in NO_COMPUTE_PACKETS),
        )
        _op_info_cache[func] = info
    return info


def op_name(func) -> str:
    """'aten::_to_copy' for aten._to_copy.default; other overloads keep their suffix ('aten::index.Tensor')."""
    name = func.name() if hasattr(func, "name") else str(func)
    return name[: -len(".default")] if name.endswith(".default") else name


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _direction(source, destination, accelerator: str) -> str:
    """'h2d', 'd2h', 'd2d' (two accelerator devices) or '' when no device boundary is crossed."""
    source_type, destination_type = source.type, destination.type
    if source_type == destination_type and (source.index is None or destination.index is None
                                            or source.index == destination.index):
        return ""
    if source_type == CPU and destination_type == accelerator:
        return "h2d"
    if source_type == accelerator and destination_type == CPU:
        return "d2h"
    if source_type == accelerator and destination_type == accelerator:
        return "d2d"
    return ""


def _copy_finding(func, args, kwargs, accelerator: str) -> Finding | None:
    if func is aten._to_copy.default:  # _to_copy(self, *, ..., device, non_blocking)
        source = args[0]
        destination = kwargs.get("device") or source.device
        non_blocking = kwargs.get("non_blocking", False)
    elif func is aten.copy_.default:  # copy_(self=destination, src, non_blocking)
        source = args[1]
        destination = args[0].device
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    else:  # _copy_from(self=source, dst, non_blocking)
        source = args[0]
        destination = args[1].device
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if not isinstance(source, torch.Tensor):
        return None
    direction = _direction(source.device, torch.device(destination), accelerator)
    if not direction:
        return None
    return Finding("copy", direction, _nbytes(source), syncs=direction != "d2d" and not non_blocking)


def _scan(values, accelerator: str, check_masks: bool, state: list) -> None:
    """One pass over op arguments (tensors, and lists of tensors one level down). Updates
    state = [on_accelerator, on_other_device, has_mask_index, cpu_operands]."""
    for value in values:
        if isinstance(value, torch.Tensor):
            tensors = (value,)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], (torch.Tensor, type(None))):
            tensors = [item for item in value if isinstance(item, torch.Tensor)]
        else:
            continue
        for tensor in tensors:
            if tensor.is_cpu:  # a C attribute: no torch.device object on the hot path
                if tensor.dim() > 0:
                    state[3].append(tensor)
            elif tensor.device.type == accelerator:
                state[0] = True
            else:
                state[1] = True
            if check_masks and tensor.dtype in MASK_DTYPES:
                state[2] = True


def classify(func, args, kwargs, outputs, accelerator: str, accelerator_in_use: bool) -> tuple[list[Finding], bool]:
    """The offences of one op call, and whether it touched the accelerator (which makes the region a GPU region).

    `outputs` is what the op returned (None if it raised).
    """
    info = _op_info_cache.get(func) or _op_info(func)
    if info.is_copy:
        finding = _copy_finding(func, args, kwargs, accelerator)
        if finding:
            return [finding], True
        # same device: a dtype conversion or a plain copy, judged like any other op below
    state = [False, False, False, []]  # on_accelerator, on_other_device, has_mask_index, cpu_operands
    _scan(args, accelerator, info.is_mask_index, state)
    if kwargs:
        _scan(kwargs.values(), accelerator, False, state)  # out= tensors and tensor-valued keywords
    on_accelerator, on_other_device, mask_index, cpu_operands = state
    if on_accelerator:
        findings = []
        if info.is_lift:  # torch.tensor(data, device=ACC) copied with non_blocking=False (tensor_new.cpp)
            findings.append(Finding("copy", "h2d", sum(_nbytes(t) for t in args if isinstance(t, torch.Tensor)),
                                    syncs=True))
        if info.is_sync or mask_index:
            findings.append(Finding("sync", "", 0))
        if cpu_operands:
            findings.append(Finding("device_mix", "", sum(_nbytes(t) for t in cpu_operands)))
        return findings, True
    if on_other_device:
        return [], False
    has_dims = bool(cpu_operands)
    output_state = [False, False, False, []]
    _scan(outputs if isinstance(outputs, (list, tuple)) else (outputs,), accelerator, False, output_state)
    if output_state[0]:  # a factory op that made an accelerator tensor: not CPU compute
        return [], True
    if output_state[1]:
        return [], False
    has_dims = has_dims or bool(output_state[3])
    if accelerator_in_use and info.computes and has_dims:
        return [Finding("cpu_compute", "", 0)], False
    return [], False


def is_host_read(func) -> bool:
    """Whether the op reads a tensor's value back to the host (`.item()`, `equal`, dynamic output shapes):
    a sync when the tensor is on an accelerator, a plain host read on the CPU."""
    info = _op_info_cache.get(func) or _op_info(func)
    return info.is_sync
