"""Device memory of fade.ocl: the storage table (each ocl storage's OpenCL buffer, a Block), empty tensors, and
the buffers an op borrows without a tensor (Scratch) or reads as a 2-D matrix (Mat).

A tensor's storage is one buffer from its device's caching allocator (runtime.Device.allocate); dead tensors'
buffers go back to the pool by `reclaim`. Zero-byte tensors are views of one null buffer per device.
"""

from __future__ import annotations

import dataclasses

import torch

from fade.hostwork.storages import StorageTable
from fade.ocl import runtime
from fade.ocl.runtime import FP16, OclError


NAME = "ocl"

storage_table = StorageTable(NAME)


@dataclasses.dataclass
class Block:
    """The memory behind one device storage."""
    device: int
    buffer: object


def reclaim(young: int | None = None, old: bool = True) -> None:
    """Dead tensors' buffers back to their devices' pools: every tensor's, or the `young` newest tensors', or
    (`old` False) the young generation's (StorageTable.sweep)."""
    for block in storage_table.sweep(young, old):
        runtime.device(block.device).release(block.buffer)


def _check_dtype(dev: runtime.Device, dtype) -> None:
    if dtype == torch.float16 and not dev.info.fp16:
        raise OclError(f"ocl:{dev.index} ({dev.info.name}) lacks the OpenCL extension {FP16}: float16 tensors "
                       "cannot live there (use float32)")


def extent(size, stride, offset: int) -> int:
    if any(s == 0 for s in size):
        return offset
    return offset + 1 + sum((s - 1) * st for s, st in zip(size, stride))


def empty(size, stride, dtype, index: int, offset: int = 0) -> torch.Tensor:
    dev = runtime.device(index)
    _check_dtype(dev, dtype)
    nbytes = extent(size, stride, offset) * dtype.itemsize
    if not nbytes:  # a view of the device's one zero-byte storage: no buffer, no table entry (a growing resize_
        return storage_table.view_of(_zero_base(dev), dtype, 0, size, stride)  # gives its tensor a storage of its own)
    buffer = dev.allocate(nbytes, reclaim)
    return storage_table.new_tensor(Block(index, buffer), buffer.int_ptr, nbytes, torch.device(NAME, index), dtype,
                             offset, size, stride)


_zero_bases: dict = {}  # device index -> a zero-byte tensor over the device's null buffer, kept for the process


def _zero_base(dev: runtime.Device) -> torch.Tensor:
    base = _zero_bases.get(dev.index)
    if base is None:
        null = dev.null_buffer()
        base = _zero_bases[dev.index] = storage_table.new_tensor(Block(dev.index, null), null.int_ptr, 0,
                                                          torch.device(NAME, dev.index), torch.uint8, 0, [0], [1])
    return base


def contiguous_strides(size) -> list[int]:
    strides, running = [], 1
    for s in reversed(list(size)):
        strides.append(running)
        running *= max(s, 1)
    return strides[::-1]


def empty_like_meta(meta: torch.Tensor, index: int) -> torch.Tensor:
    return empty(meta.size(), meta.stride(), meta.dtype, index)


def block_of(tensor: torch.Tensor) -> Block:
    return storage_table.backing(tensor)


def device_of(tensor: torch.Tensor) -> runtime.Device:
    return runtime.device(tensor.device.index or 0)


@dataclasses.dataclass(frozen=True)
class Mat:
    """A 2-D matrix in a device buffer, described without a torch view: each view of an ocl tensor is a full
    trip through dispatch (25-30 us on the H100's host), and a convolution's backward took a dozen."""

    buffer: object  # the OpenCL buffer
    dtype: torch.dtype
    index: int  # the device's
    offset: int  # in elements, from the buffer's start
    rows: int
    cols: int
    row_stride: int
    col_stride: int = 1
    base: torch.Tensor | None = None  # a tensor on the buffer's storage (none for scratch buffers)

    @property
    def shape(self) -> tuple:
        return self.rows, self.cols

    # built with the constructor, not dataclasses.replace (~5 us a call: a convolution's backward made seven)
    def t(self) -> "Mat":
        return Mat(self.buffer, self.dtype, self.index, self.offset, self.cols, self.rows, self.col_stride,
                    self.row_stride, self.base)

    def row_range(self, start: int, stop: int) -> "Mat":
        return Mat(self.buffer, self.dtype, self.index, self.offset + start * self.row_stride, stop - start,
                    self.cols, self.row_stride, self.col_stride, self.base)

    def col_range(self, start: int, stop: int) -> "Mat":
        return Mat(self.buffer, self.dtype, self.index, self.offset + start * self.col_stride, self.rows,
                    stop - start, self.row_stride, self.col_stride, self.base)

    def tensor(self) -> torch.Tensor:
        if self.base is None:
            raise ValueError("a scratch matrix has no tensor")
        return storage_table.view_of(self.base, self.dtype, self.offset, (self.rows, self.cols),
                              (self.row_stride, self.col_stride))


def as_mat(t: torch.Tensor, rows: int | None = None, cols: int | None = None, start: int = 0) -> Mat:
    """A 2-D tensor as a Mat; or, given rows and cols, the row-major rows x cols matrix `start` elements after
    the (contiguous) tensor's first element."""
    index = t.device.index or 0
    if rows is None:
        return Mat(block_of(t).buffer, t.dtype, index, t.storage_offset(), t.shape[0], t.shape[1], t.stride(0),
                    t.stride(1), t)
    return Mat(block_of(t).buffer, t.dtype, index, t.storage_offset() + start, rows, cols, cols, 1, t)


class Scratch:
    """Buffers for one op's temporaries (im2col columns, partial sums, coefficients), taken from the pool and
    given back when the op has enqueued its last command: the queue is in order, so a later command that reuses
    one runs after every command of this op. No tensor is made for them (a tensor costs ~40 us of host time on
    the H100's host)."""

    def __init__(self, dev: runtime.Device):
        self.dev, self.buffers = dev, []

    def buffer(self, nbytes: int):
        buffer = self.dev.allocate(max(nbytes, 1), reclaim)
        self.buffers.append(buffer)
        return buffer

    def mat(self, dtype, rows: int, cols: int) -> Mat:
        """A row-major rows x cols scratch matrix."""
        return Mat(self.buffer(rows * cols * dtype.itemsize), dtype, self.dev.index, 0, rows, cols, cols)

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc) -> None:
        for buffer in self.buffers:
            self.dev.release(buffer)
        self.buffers = []


def strided_view(t: torch.Tensor, start: int, size, stride) -> torch.Tensor:
    """A view of t's storage `start` elements after t's first element, made without a trip through dispatch."""
    return storage_table.view_of(t, t.dtype, t.storage_offset() + start, size, stride)
