"""View ops and in-place geometry changes (resize_, as_strided_, set_, transpose_, ...) as views of the same
storage (fade.hostwork.storages), empty/empty_strided, and cat (each input copied into its slice).
"""

from __future__ import annotations

import torch

from fade.hostwork.storages import map_nested, set_geometry
from fade.ocl.memory import contiguous_strides, empty, empty_like_meta, extent, NAME, storage_table
from fade.ocl.meta import as_meta, device_index_of, meta_key, meta_result_of, remember, written_arguments
from fade.ocl.pointwise import finish, pointwise
from fade.ocl.sources import NoKernel
from fade.ocl.transfers import download, upload

aten = torch.ops.aten


GEOMETRY_INPLACE = {"resize_", "as_strided_", "t_", "transpose_", "squeeze_", "unsqueeze_", "swapdims_",
                     "swapaxes_", "set_"}


def geometry_inplace(op, args, kwargs, bound):
    base = op._schema.name.split("::")[1]
    target = bound["self"]
    if base == "set_":  # point self at another ocl storage (torch.save's storage.cpu() comes this way)
        overload, source = op._overloadname, bound.get("source")
        if overload == "source_Storage":
            return set_geometry(target, source, 0, [source.nbytes() // target.element_size()], [1])
        if overload == "source_Storage_storage_offset":
            return set_geometry(target, source, bound["storage_offset"], bound["size"],
                                bound["stride"] or contiguous_strides(bound["size"]))
        if overload == "source_Tensor":
            return set_geometry(target, source.untyped_storage(), source.storage_offset(), source.size(),
                                source.stride())
        fresh = empty([0], [1], target.dtype, target.device.index)
        return set_geometry(target, fresh.untyped_storage(), 0, [0], [1])
    meta_result = op(*map_nested(as_meta, args), **map_nested(as_meta, kwargs))
    needed = extent(meta_result.size(), meta_result.stride(), meta_result.storage_offset()) * target.element_size()
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


def view_op(op, args, kwargs):
    """A view op: its geometry from meta tensors, its storage the input's. as_strided says its geometry itself;
    a view of one device tensor reuses the geometry it had for the same op, input geometry and arguments
    (the view's offset relative to the input's), so a repeated view runs no meta kernel."""
    if op is aten.as_strided.default:
        base, size, stride = args[0], args[1], args[2]
        offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
        return storage_table.view_of(base, base.dtype, base.storage_offset() if offset is None else offset, size,
                                     stride)
    key = meta_key((args, tuple(sorted(kwargs.items()))))
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
            remember(_view_geometry, (op, key), (type(result) if isinstance(result, (list, tuple)) else None, tuple(
                (r.storage_offset() - base.storage_offset(), tuple(r.size()), r.stride(), r.dtype) for r in results)))
    return result


def _views_from(base: torch.Tensor, geometry: tuple):
    kind, parts = geometry
    views = [storage_table.view_of(base, dtype, base.storage_offset() + delta, size, stride)
             for delta, size, stride, dtype in parts]
    return views[0] if kind is None else kind(views)


def _view_by_meta(op, args, kwargs):
    bases = {}

    def to_meta(value):
        meta = as_meta(value)
        if meta is not value and isinstance(value, torch.Tensor):
            bases[meta.untyped_storage()._cdata] = value
        return meta

    result = op(*map_nested(to_meta, args), **map_nested(to_meta, kwargs))

    def wrap(meta):
        if not isinstance(meta, torch.Tensor):
            return meta
        base = bases[meta.untyped_storage()._cdata]
        return storage_table.view_of(base, meta.dtype, meta.storage_offset(), meta.size(), meta.stride())

    return map_nested(wrap, result)


def empty_op(op, args, kwargs, bound):
    dtype = bound.get("dtype") or torch.get_default_dtype()
    size = list(bound["size"])
    layout = bound.get("memory_format")
    if bound.get("stride") is not None:
        stride = list(bound["stride"])
    elif layout in (None, torch.contiguous_format, torch.preserve_format):
        stride = contiguous_strides(size)
    else:  # channels_last(_3d): torch's own strides for the layout (and its error for a wrong rank)
        stride = list(torch.empty(size, dtype=dtype, device="meta", memory_format=layout).stride())
    device = bound.get("device")
    return empty(size, stride, dtype, device.index or 0 if device is not None else 0)


def cat(op, args, kwargs, bound):
    """cat: each input copied into its slice of the result (torch's type promotion; 1-D empty inputs skipped,
    as torch does)."""
    meta_result = meta_result_of(op, args, kwargs)
    out = empty_like_meta(meta_result, device_index_of(args, kwargs))
    dim = bound["dim"] % max(out.dim(), 1)
    offset = 0
    for tensor in bound["tensors"]:
        if tensor.dim() == 1 and tensor.numel() == 0 and out.dim() != 1:
            continue
        size = tensor.shape[dim]
        if size and out.numel():
            pointwise("a", out.narrow(dim, offset, size), [tensor])
        offset += size
    return finish(op, bound, out)


def roll(op, args, kwargs, bound):
    """roll: each rolled dimension's two pieces copied into their places of the result, one elementwise copy per
    piece (no dims: the flattened tensor rolled, then viewed back, torch's rule)."""
    if written_arguments(op, bound):
        raise NoKernel("roll out=")
    x, shifts, dims = bound["self"], list(bound["shifts"]), list(bound["dims"])
    out = empty_like_meta(meta_result_of(op, args, kwargs), device_index_of(args, kwargs))
    if not dims:
        if len(shifts) != 1:
            raise NoKernel("roll: several shifts and no dims")
        source, target, dims = x.reshape(-1), out.view(-1), [0]
    else:
        source, target = x, out
    pieces = [(source, target)]
    for shift, dim in zip(shifts, dims):
        size = source.shape[dim]
        shift = shift % size if size else 0
        if shift:
            pieces = [(part.narrow(dim, start, length), place.narrow(dim, at, length))
                      for part, place in pieces
                      for start, at, length in ((0, shift, size - shift), (size - shift, 0, shift))]
    for part, place in pieces:
        if place.numel():
            pointwise("a", place, [part])
    return out
