"""What dispatch reads from an op: its schema (arguments bound by name, what it writes, whether it is a view
op), its meta result (computed on meta tensors, cached by the arguments' geometry), and the output tensor an
op writes (its out= or in-place argument, or a fresh one shaped as the meta result).
"""

from __future__ import annotations

import functools

import torch

from fade.hostwork.host_fallback import numbers_as_tensors  # the CPU fallback needs it too
from fade.hostwork.storages import map_nested
from fade.ocl.memory import empty_like_meta, NAME

aten = torch.ops.aten


_schemas: dict = {}  # op -> schema_of(op)


def schema_of(op) -> tuple:
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


def bind_arguments(op, args, kwargs) -> dict:
    bound = {}
    count = len(args)
    for position, (name, positional, default) in enumerate(schema_of(op)[0]):
        if position < count and positional:
            bound[name] = args[position]
        elif name in kwargs:
            bound[name] = kwargs[name]
        else:
            bound[name] = default
    return bound


def as_meta(value):
    if isinstance(value, torch.Tensor) and value.device.type == NAME:
        numel = value.untyped_storage().nbytes() // value.element_size()
        base = torch.empty(numel, dtype=value.dtype, device="meta")
        return base.as_strided(value.size(), value.stride(), value.storage_offset())
    if isinstance(value, torch.device) and value.type == NAME:
        return torch.device("meta")
    return value


def device_index_of(args, kwargs) -> int:
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


def written_arguments(op, bound):
    return [bound[name] for name in schema_of(op)[1] if isinstance(bound.get(name), torch.Tensor)]


META_CACHE_SIZE = 4096

_meta_cache: dict = {}


_KEY_SCALARS = frozenset((bool, int, float, str, type(None), torch.dtype, torch.device, torch.memory_format))


def meta_key(value):
    """What an elementwise op's meta result depends on: each tensor's geometry and dtype, each scalar's value
    and type (type promotion), or None when an argument is something else (then nothing is cached)."""
    kind = type(value)
    if kind in _KEY_SCALARS:
        return (kind, value)
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.device.type, tuple(value.shape), value.stride())
    if kind is list or kind is tuple:
        keys = tuple(map(meta_key, value))
        return None if None in keys else (kind, keys)
    return None


def remember(cache: dict, key, value) -> None:
    """cache[key] = value in one of the per-geometry caches (meta results, views, plans): emptied once it holds
    META_CACHE_SIZE entries, so a program that keeps making new shapes does not grow it without bound."""
    if len(cache) >= META_CACHE_SIZE:
        cache.clear()
    cache[key] = value


def meta_result_of(op, args, kwargs, key=None):
    """An op's meta result (a tensor or a tuple of them), cached by its arguments' geometry, dtypes and scalars:
    torch's meta kernels are about half of a small op's Python dispatch cost, and some (max_pool2d_with_indices)
    run Python decompositions of a millisecond. Only the result's geometry is ever read. `key`: the
    arguments' meta_key when the caller has it already."""
    key = key if key is not None else meta_key((args, tuple(sorted(kwargs.items()))))
    if key is not None:
        key = (op, key)
        cached = _meta_cache.get(key)
        if cached is not None:
            return cached
    meta_args, meta_kwargs = numbers_as_tensors(op, map_nested(as_meta, args), map_nested(as_meta, kwargs))
    meta_result = op(*meta_args, **meta_kwargs)
    if key is not None and (isinstance(meta_result, torch.Tensor) or (
            isinstance(meta_result, tuple) and all(isinstance(r, torch.Tensor) for r in meta_result))):
        remember(_meta_cache, key, meta_result)
    return meta_result


def output_for(op, args, kwargs, bound, key=None) -> tuple:
    """(the tensor the op writes, the meta result): its in-place/out= argument, or a fresh tensor shaped as
    the op's meta result. `key`: as for meta_result_of."""
    meta_result = meta_result_of(op, args, kwargs, key)
    written = written_arguments(op, bound)
    if written:
        target = written[0]
        if target.shape != meta_result.shape:
            aten.resize_.default(target, meta_result.shape)
        return target, meta_result
    return empty_like_meta(meta_result, device_index_of(args, kwargs)), meta_result


@functools.lru_cache(maxsize=None)
def base_name(op) -> str:
    """aten::add_ -> add, aten::_softmax -> _softmax."""
    return op._schema.name.split("::")[1].rstrip("_")


def is_view_op(op) -> bool:
    return schema_of(op)[3]


def has_out_arguments(op) -> bool:
    return schema_of(op)[2]
