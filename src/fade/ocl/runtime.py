"""The OpenCL side of fade.ocl: devices, a caching buffer allocator, kernel programs and CLBlast GEMM.

Programs are built with pyopencl, whose binary cache (under the user's cache directory, keyed by the source,
the build options and the device and driver) keeps each kernel compiled once per device and driver across
processes. GEMM calls CLBlast through ctypes over libclblast.so.1's C API: `pyclblast` on PyPI is a source
package that needs CLBlast's headers and a compiler, while the C API needs only the shared library that
Debian's `libclblast1` installs.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import threading
import time

import torch

from fade.ocl.settings import setting

FP16 = "cl_khr_fp16"
FLUSH_EVERY = int(setting("FADE_OCL_FLUSH_EVERY"))  # commands between clFlush calls (Device.enqueued); 0: never
BUILD_BUDGET = setting("FADE_OCL_BUILD_BUDGET")  # auto: Device.builds_spent after BUILD_BUDGET_S; off: never
# seconds of program builds a device may spend before measuring stops building per-shape programs: a guess, not
# a measurement (above what a network of a few dozen convolution shapes was seen to spend: resnet50's and
# convnext_small's first steps on the H200 finished in the loss runs' time limits; densenet161's did not)
BUILD_BUDGET_S = 180.0
FP64 = "cl_khr_fp64"


class OclError(RuntimeError):
    """fade.ocl cannot do what was asked (no OpenCL, a kernel that does not build, a missing extension)."""


class OutOfMemoryError(torch.OutOfMemoryError):
    """An OpenCL device ran out of memory (the analogue of torch.cuda.OutOfMemoryError)."""


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    vendor: str
    platform: str
    kind: str  # "gpu", "cpu", "accelerator" or "other"
    opencl_version: str
    driver_version: str
    compute_units: int
    clock_mhz: int
    global_memory_bytes: int
    max_allocation_bytes: int
    local_memory_bytes: int
    fp16: bool
    fp64: bool

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _cl():
    try:
        import pyopencl
    except ImportError as error:
        raise OclError(f"fade.ocl needs pyopencl: pip install 'fade[ocl]' ({error})") from None
    return pyopencl


def _kind(cl, device) -> str:
    if device.type & cl.device_type.GPU:
        return "gpu"
    if device.type & cl.device_type.CPU:
        return "cpu"
    if device.type & cl.device_type.ACCELERATOR:
        return "accelerator"
    return "other"


@functools.lru_cache(maxsize=1)
def _cl_devices() -> tuple:
    """Every OpenCL device, GPUs first, then the others, each in platform order."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as error:  # no ICD registered: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
        raise OclError(f"no OpenCL platform found (is an ICD installed under /etc/OpenCL/vendors?): {error}") \
            from None
    found = [device for platform in platforms for device in platform.get_devices()]
    if not found:
        raise OclError("OpenCL platforms exist but report no devices")
    return tuple(sorted(found, key=lambda device: _kind(cl, device) != "gpu"))


def devices() -> list[DeviceInfo]:
    """The OpenCL devices as fade.ocl numbers them (ocl:0 is the first GPU). OclError if there is none."""
    cl = _cl()
    infos = []
    for index, device in enumerate(_cl_devices()):
        extensions = device.extensions.split()
        infos.append(DeviceInfo(index, device.name.strip(), device.vendor.strip(), device.platform.name.strip(),
                                _kind(cl, device), device.version.strip(), device.driver_version.strip(),
                                device.max_compute_units, device.max_clock_frequency, device.global_mem_size,
                                device.max_mem_alloc_size, device.local_mem_size, FP16 in extensions,
                                FP64 in extensions))
    return infos


FULL_SWEEP_BYTES = 256 << 20  # new buffers made before the allocator looks at every tensor for dead ones, or
FULL_SWEEP_ALLOCATIONS = 512  # allocations since the last full sweep, on a miss. An eager training step's outputs
# and gradients die by the next step but are older than the newest tensors a miss looks at: mobilenet_v3_small
# (batch 2, 32 px, PoCL) made 161 new buffers a step and held 257 MB; with this, 1.5 and 47 MB, 2087 entries
# checked a step against 12537 (256 allocations: 0.05 buffers, 3043 checks; 2048: 44 buffers)
YOUNG_FIRST = 8  # on a pool miss, the allocator looks at this many of the newest tensors, then ...
YOUNG_SWEEP = 64  # ... at this many when those freed nothing of the size
MEMORY_HEADROOM = 0.92  # of the device's global memory, for buffers; the rest for the driver, CLBlast, kernels


MAX_PENDING_WRITES = 64  # host-to-device writes in flight before write() waits for the oldest


class Device:
    """One OpenCL device in use: context, in-order queue, buffer pool, built programs."""

    def __init__(self, index: int):
        cl = _cl()
        self.cl = cl
        self.index = index
        self.cl_device = _cl_devices()[index]
        self.info = devices()[index]
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context)
        self.lock = threading.RLock()
        self.pool: dict[int, list] = {}  # rounded size -> free buffers
        self.pooled_bytes = 0
        self.held_bytes = 0  # every buffer this device's allocator created and still holds (live or pooled)
        self.fresh_bytes = 0  # bytes of new buffers made since the last full sweep of dead tensors
        self.allocations = 0  # allocations since the last full sweep
        self.programs: dict = {}
        self.builds = 0  # programs built on this device
        self.build_s = 0.0  # wall seconds those builds took (builds_spent)
        self.kernel_names: dict = {}  # id(kernel) -> its function name, for the profile's labels
        self.typed_kernels: set = set()  # id(kernel) of those whose scalar argument types pyopencl knows
        self.recording: list | None = None  # (label, event) per command while a profile records
        self.pending_writes: collections.deque = collections.deque()  # events of writes not known complete
        self.unflushed = 0  # commands enqueued since the last clFlush (enqueued())
        self.max_work_group_size = self.cl_device.max_work_group_size  # (pyopencl asks the driver each time)
        self._null_buffer = None
        # the graph mode's capture (fade.ocl.capture.Recording) while one records this device's commands, else None
        self.capture = None

    # commands
    def launch(self, kernel, global_size, local_size, *args, label: str | None = None):
        """Enqueue `kernel` over `global_size` work items; while a profile records, its event is kept.

        A kernel's scalar argument types are declared to pyopencl at its first launch (from that launch's numpy
        scalars; a kernel's source fixes them): undeclared, pyopencl set each scalar argument at ~20 us (NVIDIA's
        OpenCL on the H100: a launch with 9 scalar arguments took 216 us to enqueue, one with none 34 us)."""
        if id(kernel) not in self.typed_kernels:
            kernel.set_scalar_arg_dtypes([None if isinstance(arg, self.cl.MemoryObjectHolder) else arg.dtype
                                          for arg in args])
            self.typed_kernels.add(id(kernel))
        event = kernel(self.queue, global_size, local_size, *args)
        self.enqueued()
        if self.capture is not None:
            self.capture.launch(self, kernel, global_size, local_size, args, label)
        if self.recording is not None:
            self.recording.append((label or self.kernel_names.get(id(kernel), "kernel"), event))
        return event

    def launch_set(self, kernel, global_size, local_size):
        """Enqueue a kernel whose arguments are already set (the graph mode's replayed launches; not recorded
        by a profile or a capture: those take `launch`)."""
        event = self.cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)
        self.enqueued()
        return event

    def enqueued(self) -> None:
        """Count a command; every FLUSH_EVERY (settings: FADE_OCL_FLUSH_EVERY) flush the queue, so the device
        starts on what is queued while the host goes on enqueueing (clFlush returns once the commands are
        submitted; it waits for none of them)."""
        if FLUSH_EVERY:
            self.unflushed += 1
            if self.unflushed >= FLUSH_EVERY:
                self.queue.flush()
                self.unflushed = 0

    def write(self, buffer, data, offset_bytes: int) -> None:
        """Copy a host array into a buffer without waiting: a blocking write waits for every queued command
        first (a sync per dropout mask). `data` must not change afterwards (callers pass arrays they own); the
        event keeps it alive until the copy is done, and the oldest are dropped once complete."""
        event = self.cl.enqueue_copy(self.queue, buffer, data, dst_offset=offset_bytes, is_blocking=False)
        self.enqueued()
        self.record("copy host-to-device", event)
        if self.capture is not None:
            self.capture.host("a write from the host")
        pending = self.pending_writes
        pending.append(event)
        complete = self.cl.command_execution_status.COMPLETE
        while pending and (len(pending) > MAX_PENDING_WRITES or
                           pending[0].command_execution_status == complete):
            pending.popleft().wait()

    def copy(self, target, source, nbytes: int, target_offset: int = 0, source_offset: int = 0) -> None:
        """clEnqueueCopyBuffer: `nbytes` from `source` (at byte `source_offset`) to `target` (at `target_offset`)."""
        self.record("copy device-to-device", self.cl.enqueue_copy(self.queue, target, source, byte_count=nbytes,
                                                                  src_offset=source_offset, dst_offset=target_offset))
        self.enqueued()
        if self.capture is not None:
            self.capture.copy(self, target, source, nbytes, target_offset, source_offset)

    def read(self, host, buffer, offset_bytes: int = 0) -> None:
        """A blocking copy of `buffer` from byte `offset_bytes` into the host array `host`."""
        self.record("copy device-to-host", self.cl.enqueue_copy(self.queue, host, buffer, src_offset=offset_bytes,
                                                                is_blocking=True))
        if self.capture is not None:
            self.capture.host("a read to the host")

    def record(self, label: str, event) -> None:
        """Keep a command's event (a copy, a CLBlast call) while a profile records."""
        if self.recording is not None and event is not None:
            self.recording.append((label, event))

    def start_recording(self) -> None:
        """Profile every command from here: the queue is swapped for one with profiling enabled."""
        with self.lock:
            self.queue.finish()
            self.queue = self.cl.CommandQueue(self.context,
                                              properties=self.cl.command_queue_properties.PROFILING_ENABLE)
            self.recording = []

    def stop_recording(self) -> list:
        """[(label, device seconds)] of every recorded command, in order; the plain queue is back."""
        with self.lock:
            self.queue.finish()
            recorded, self.recording = self.recording or [], None
            self.queue = self.cl.CommandQueue(self.context)
        return [(label, (event.profile.end - event.profile.start) * 1e-9) for label, event in recorded]

    # memory
    @staticmethod
    def rounded(nbytes: int) -> int:
        nbytes = max(nbytes, 64)
        return 1 << (nbytes - 1).bit_length() if nbytes <= (1 << 20) else -(-nbytes // (1 << 20)) * (1 << 20)

    def null_buffer(self):
        """The one small buffer behind every zero-byte tensor of this device (no kernel touches it; the tensor
        over it lives for the process, so it never returns to the pool): a batch norm makes three a call."""
        if self._null_buffer is None:
            self._null_buffer = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, 64)
        return self._null_buffer

    def allocate(self, nbytes: int, reclaim):
        """A buffer of at least `nbytes`, from the pool when one fits; `reclaim(young, old)` pools the buffers of
        dead tensors among the `young` newest (None: the young generation's, or with `old` every tensor's): on a
        pool miss the YOUNG_FIRST newest, then the YOUNG_SWEEP newest, the young generation once FULL_SWEEP_BYTES
        of new buffers were made or FULL_SWEEP_ALLOCATIONS allocations went by since the last full sweep, and
        every tensor before the pool is emptied for room."""
        size = self.rounded(nbytes)
        if size > self.info.max_allocation_bytes or size > self.info.global_memory_bytes:
            raise OutOfMemoryError(f"ocl:{self.index} ({self.info.name}): cannot allocate {nbytes} bytes; the "
                                   f"device allows {self.info.max_allocation_bytes} bytes per buffer and has "
                                   f"{self.info.global_memory_bytes} in all")
        with self.lock:
            self.allocations += 1
            free = self.pool.get(size)
            if not free:  # the newest few first: a temporary usually died a call or two ago
                reclaim(YOUNG_FIRST)
                free = self.pool.get(size)
            if not free:
                reclaim(YOUNG_SWEEP)
                free = self.pool.get(size)
            if not free and (self.fresh_bytes > FULL_SWEEP_BYTES or self.allocations > FULL_SWEEP_ALLOCATIONS):
                self._reclaim_all(reclaim)
                free = self.pool.get(size)
            if free:
                self.pooled_bytes -= size
                buffer = free.pop()
                if self.capture is not None:
                    self.capture.allocate(self, buffer, nbytes)
                return buffer
            # Drivers that allocate lazily (NVIDIA's) accept any clCreateBuffer and fail the first kernel that
            # touches memory they cannot back, so the pool is emptied before the total would pass the device.
            if self.held_bytes + size > self.info.global_memory_bytes * MEMORY_HEADROOM:
                self._reclaim_all(reclaim, old=True)
                self.empty_cache()
                if self.held_bytes + size > self.info.global_memory_bytes * MEMORY_HEADROOM:
                    raise OutOfMemoryError(
                        f"ocl:{self.index} ({self.info.name}): out of memory allocating {nbytes} bytes: live tensors "
                        f"hold {self.held_bytes} of the device's {self.info.global_memory_bytes} bytes")
            try:
                buffer = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size)
            except self.cl.Error:
                self.empty_cache()
                try:
                    buffer = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, size)
                except self.cl.Error as error:
                    raise OutOfMemoryError(f"ocl:{self.index} ({self.info.name}): out of memory allocating "
                                           f"{nbytes} bytes ({error})") from None
            self.held_bytes += size
            self.fresh_bytes += size
            if self.capture is not None:
                self.capture.allocate(self, buffer, nbytes)
            return buffer

    def reserve(self, sizes: dict, reclaim) -> None:
        """Before a replayed call makes its fresh buffers ({pool size: count}): when the pool lacks some, one full
        sweep for dead tensors' buffers (the last call's outputs and gradients are older than the newest tensors
        a pool miss looks at, so each of its misses swept twice and found nothing: mobilenet_v3_small's backward
        made ~100 such misses a call)."""
        with self.lock:
            short = any(len(self.pool.get(size, ())) < count for size, count in sizes.items())
        if short:
            with self.lock:
                self._reclaim_all(reclaim)

    def take(self, buffer) -> bool:
        """Take a pooled buffer out of the pool for good (a captured graph's own memory); False if not pooled."""
        with self.lock:
            free = self.pool.get(buffer.size, [])
            for position, pooled in enumerate(free):
                if pooled is buffer:
                    del free[position]
                    self.pooled_bytes -= buffer.size
                    return True
        return False

    def pooled(self) -> set:
        """id() of every buffer in the pool."""
        with self.lock:
            return {id(buffer) for free in self.pool.values() for buffer in free}

    def _reclaim_all(self, reclaim, old: bool = False) -> None:
        """Dead tensors' buffers back to the pool: a full sweep of the young generation (with `old`, of every
        tensor), which restarts the count to the next."""
        reclaim(None, old)
        self.fresh_bytes = self.allocations = 0

    def release(self, buffer) -> None:
        with self.lock:
            self.pool.setdefault(buffer.size, []).append(buffer)
            self.pooled_bytes += buffer.size

    def empty_cache(self) -> None:
        with self.lock:
            self.queue.finish()
            self.pool.clear()  # buffers leave the allocator only here: live ones come back through the pool
            self.held_bytes -= self.pooled_bytes
            self.pooled_bytes = 0

    # programs
    def builds_spent(self) -> bool:
        """Whether measuring has spent this device's build budget (FADE_OCL_BUILD_BUDGET: BUILD_BUDGET_S of
        program builds): from then on a new shape measures nothing that builds a program of its own."""
        return BUILD_BUDGET == "auto" and self.build_s >= BUILD_BUDGET_S

    def kernel(self, name: str, source: str, options: tuple = ()):
        """The kernel `name` of `source`, built at first use (disk-cached by pyopencl per device and driver)."""
        key = (name, source, options)
        kernel = self.programs.get(key)
        if kernel is None:
            header = ""
            if FP16 in self.cl_device.extensions:
                header += "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n"
            if FP64 in self.cl_device.extensions:
                header += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
            started = time.monotonic()
            try:
                program = self.cl.Program(self.context, header + source).build(options=list(options))
            except self.cl.Error as error:
                lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                log = [line for line in lines if not line.startswith(("clBuildProgram failed", "Build on",
                                                                      "(options:"))]
                status = lines[0].split(" - ")[0] if lines else type(error).__name__
                raise OclError(f"OpenCL kernel {name!r} failed to build on ocl:{self.index} ({self.info.name}): "
                               f"{status}: {' | '.join(log[:4])[:500]}") from None
            finally:
                self.builds += 1
                self.build_s += time.monotonic() - started
            kernel = getattr(program, name)
            self.programs[key] = kernel
            self.kernel_names[id(kernel)] = name
        return kernel


_devices: dict[int, Device] = {}
_devices_lock = threading.Lock()
# called with each Device as it opens, in order: tuning.apply_persisted registers itself (the CLBlast parameters
# `fade tune --device ocl --pretune` persisted); fade.ocl's __init__ imports tuning, so it is always registered
DEVICE_OPENED: list = []


def device(index: int) -> Device:
    opened = _devices.get(index)  # the common case, without the lock (every op asks)
    if opened is not None:
        return opened
    with _devices_lock:
        if index not in _devices:
            count = len(_cl_devices())
            if not 0 <= index < count:
                raise OclError(f"ocl:{index} does not exist; there are {count} OpenCL devices")
            _devices[index] = Device(index)
            for opened in list(DEVICE_OPENED):
                opened(_devices[index])
        return _devices[index]


def active_devices() -> list[Device]:
    return list(_devices.values())


# CLBlast through its C API
_CLBLAST_NAMES = ("libclblast.so.1", "libclblast.so")
_COL_MAJOR, _NO_TRANS, _TRANS = 102, 111, 112  # CLBlastLayout, CLBlastTranspose
_GEMM = {torch.float32: ("CLBlastSgemm", ctypes.c_float), torch.float64: ("CLBlastDgemm", ctypes.c_double)}
CLBLAST_PRECISION = {torch.float32: 32, torch.float64: 64}  # CLBlastPrecision: kSingle, kDouble
_gemm_recorders: list = []  # the lists record_gemms() is filling; empty (the default), gemm() records nothing


@functools.lru_cache(maxsize=1)
def clblast():
    """The loaded CLBlast library, or OclError naming what is missing."""
    for name in _CLBLAST_NAMES + tuple(filter(None, [ctypes.util.find_library("clblast")])):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OclError("CLBlast is not installed (Debian/Ubuntu: apt-get install libclblast1; conda: clblast)")


_TEMP_SIZE = {torch.float32: "CLBlastSGemmTempBufferSize", torch.float64: "CLBlastDGemmTempBufferSize"}
_temp_sizes: dict = {}  # gemm_temp_bytes' answers by their arguments


def _column_major_head(trans_a: bool, trans_b: bool, m: int, n: int, k: int) -> list:
    """Layout, transposes and sizes of CLBlast's column-major call for the row-major C (m x n) = op(A) op(B):
    C^T = op(B)^T op(A)^T over the same memory, so B's transpose and n come first; the caller passes B's
    operand before A's. CLBlast's indirect kernel takes C column-major: a row-major call made it transpose C
    into a buffer it allocated and back on every call (vgg16's Winograd GEMMs: 822 MB a call, up to 36 ms of
    host time on the H100 while the driver allocated and freed it)."""
    return [ctypes.c_int(_COL_MAJOR), ctypes.c_int(_TRANS if trans_b else _NO_TRANS),
            ctypes.c_int(_TRANS if trans_a else _NO_TRANS), ctypes.c_size_t(n), ctypes.c_size_t(m),
            ctypes.c_size_t(k)]


def gemm_temp_bytes(dev: Device, dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int, a_offset: int,
                    lda: int, b_offset: int, ldb: int, c_offset: int, ldc: int) -> int:
    """Bytes of the scratch buffer CLBlast's (non-batched) GEMM needs for these arguments (padded or transposed
    copies; 0 for none), asked once per distinct arguments: given to gemm(temp=...), CLBlast makes and frees no
    buffer of its own per call (on the H100, a 64 x 4096 x 25088 GEMM spent 1.6 ms of host time doing so)."""
    key = (dev.index, dtype, trans_a, trans_b, m, n, k, a_offset, lda, b_offset, ldb, c_offset, ldc)
    found = _temp_sizes.get(key)
    if found is None:
        size = ctypes.c_size_t(0)
        queue = ctypes.c_void_p(dev.queue.int_ptr)
        status = getattr(clblast(), _TEMP_SIZE[dtype])(  # the column-major call gemm() makes
            *_column_major_head(trans_a, trans_b, m, n, k), *[ctypes.c_size_t(v) for v in (
                b_offset, ldb, a_offset, lda, c_offset, ldc)], ctypes.byref(queue), ctypes.byref(size))
        if status != 0:
            raise OclError(f"CLBlast GemmTempBufferSize failed with status {status} on ocl:{dev.index}")
        found = _temp_sizes[key] = size.value
    return found


def gemm(dev: Device, dtype, trans_a: bool, trans_b: bool, m: int, n: int, k: int, alpha: float, a, a_offset: int,
         lda: int, b, b_offset: int, ldb: int, beta: float, c, c_offset: int, ldc: int, batch: int = 1,
         strides: tuple = (0, 0, 0), temp=None) -> None:
    """C = alpha * op(A) @ op(B) + beta * C, row-major, offsets and leading dimensions in elements. With
    `batch` > 1, `batch` such products whose A, B and C start `strides` elements apart (CLBlast's
    strided-batched GEMM: one call, one launch). `temp`: a buffer of gemm_temp_bytes for CLBlast's scratch
    (batch 1 only)."""
    if dtype not in _GEMM:
        raise OclError(f"CLBlast GEMM for {dtype} is not wired in fade.ocl")
    if dev.capture is not None:  # the arguments as given (strides are reordered below)
        dev.capture.gemm(dev, (dtype, trans_a, trans_b, m, n, k, alpha, a, a_offset, lda, b, b_offset, ldb, beta, c,
                               c_offset, ldc, batch, strides, temp))
    if _gemm_recorders:
        for calls in _gemm_recorders:
            calls.append((dev.index, str(dtype).removeprefix("torch."), trans_a, trans_b, m, n, k, batch))
    name, scalar = _GEMM[dtype]
    size = ctypes.c_size_t
    queue = ctypes.c_void_p(dev.queue.int_ptr)
    head = _column_major_head(trans_a, trans_b, m, n, k) + [scalar(alpha)]  # B's operand first (see there)
    operands = [(b, b_offset, ldb), (a, a_offset, lda), (c, c_offset, ldc)]
    strides = (strides[1], strides[0], strides[2])
    if batch > 1:
        name += "StridedBatched"
        a_, b_, c_ = [[ctypes.c_void_p(buf.int_ptr), size(off), size(ld), size(stride)]
                      for (buf, off, ld), stride in zip(operands, strides)]
        arguments = head + a_ + b_ + [scalar(beta)] + c_ + [size(batch)]
    else:
        a_, b_, c_ = [[ctypes.c_void_p(buf.int_ptr), size(off), size(ld)] for buf, off, ld in operands]
        arguments = head + a_ + b_ + [scalar(beta)] + c_
    event = ctypes.c_void_p() if dev.recording is not None else None
    tail = []
    if temp is not None and batch == 1:
        name += "WithTempBuffer"
        tail = [ctypes.c_void_p(temp.int_ptr)]
    status = getattr(clblast(), name)(*arguments, ctypes.byref(queue), None if event is None else ctypes.byref(event),
                                      *tail)

    if status != 0:
        raise OclError(f"CLBlast {name} failed with status {status} on ocl:{dev.index} ({dev.info.name})")
    dev.enqueued()
    if event is not None and event.value:
        shape = f"{'T' if trans_a else 'N'}{'T' if trans_b else 'N'} {m}x{n}x{k}" + (f" x{batch}" if batch > 1 else "")
        dev.record(f"{name[7:].removesuffix('WithTempBuffer')} {shape}",
                   dev.cl.Event.from_int_ptr(event.value, retain=False))


@contextlib.contextmanager
def record_gemms():
    """Collect every gemm() call made inside the block as (device index, dtype name, trans_a, trans_b, m, n, k,
    batch) tuples, in call order: the shapes a model step needs (fade.ocl.tuning tunes them)."""
    calls: list = []
    _gemm_recorders.append(calls)
    try:
        yield calls
    finally:
        _gemm_recorders.remove(calls)


def override_parameters(dev: Device, kernel: str, dtype, parameters: dict) -> None:
    """CLBlastOverrideParameters: CLBlast's routines use `parameters` (every parameter of `kernel`, by CLBlast's
    names) for `kernel` ("Xgemm", "XgemmDirect", "GemmRoutine", ...) on this device and precision from the
    next call on; the routine's program is rebuilt for them (CLBlast keys its compiled programs by the values)."""
    names = (ctypes.c_char_p * len(parameters))(*[name.encode() for name in parameters])
    values = (ctypes.c_size_t * len(parameters))(*[int(value) for value in parameters.values()])
    status = clblast().CLBlastOverrideParameters(ctypes.c_void_p(dev.cl_device.int_ptr), kernel.encode(),
                                                 ctypes.c_int(CLBLAST_PRECISION[dtype]),
                                                 ctypes.c_size_t(len(parameters)), names, values)
    if status != 0:  # -2050 kMissingOverrideParameter: a parameter of the kernel is not given
        raise OclError(f"CLBlastOverrideParameters({kernel}) failed with status {status} on ocl:{dev.index} "
                       f"({dev.info.name})")
