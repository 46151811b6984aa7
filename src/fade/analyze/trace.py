"""Read a Chrome trace that torch.profiler (Kineto) exported and sort its events into what a step summary needs.

Kineto's event categories, as torch.profiler's `export_chrome_trace` writes them (complete events, ph "X",
`ts` and `dur` in microseconds):

- device work: "kernel", "gpu_memcpy", "gpu_memset" (args: "device", "stream", "correlation"; copies also
  "bytes" and "memory bandwidth (GB/s)"). ROCm builds (roctracer / rocprofiler-sdk) use the same categories.
- host runtime calls: "cuda_runtime", "cuda_driver" (ROCm: the same categories with hip* names; newer Kineto
  may write "hip_runtime"/"hip_driver", also accepted). Their "correlation" links a launch to its device event.
- host operators: "cpu_op" (args "Input Dims" and "Concrete Inputs" with record_shapes; "flops" where the
  profiler wrote them), and "user_annotation" spans, among them `ProfilerStep#N` from `prof.step()`.
- "ac2g" flow events link host and device too; the "correlation" arg carries the same link, so they are
  not needed here.

FLOPs: torch 2.13's Chrome export does not write the `with_flops` counts (they live in key_averages()), so
an op without `args.flops` gets them from its recorded shapes with the formulas torch's profiler uses
(torch/csrc/profiler/util.cpp computeFlops): mm/addmm 2*M*K*N, bmm/baddbmm 2*B*M*K*N, convolution
2*N*K*Ho*Wo*(C/groups)*R*S (x2 for convolution_backward computing both gradients). Attention ops
(ATTENTION_FLOP_OPS: SDPA's flash, memory-efficient and cuDNN ops and their backward) get
torch.utils.flop_counter's formulas (sdpa_flop_count, sdpa_backward_flop_count), written out here since
this module imports no torch: forward 2*B*Hq*Sq*Sk*(Dq + Dv), backward 2*B*Hq*Sq*Sk*(3*Dq + 2*Dv), from the
query, key, value (and grad_out) shapes; causal attention counted as full, as FlopCounterMode counts it
(so the profile's FLOPs match `fade bench models`'). Nested ops are counted once (the outermost op that
carries FLOPs on its thread): SDPA's outer aten::_scaled_dot_product_*_attention op, not the kernel op inside.
"""

from __future__ import annotations

import gzip
import io
import json
import math

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from fade.errors import FadeUsageError
from fade.reading import read_bytes

MAX_TRACE_BYTES = 2 * 2**30  # 2 GiB of JSON: parsing it takes ~10x that in Python objects, past a laptop's RAM
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# host calls that block until the device (or a stream) drains: "sync points"
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent_blocking",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipCtxSynchronize",
})
# host calls that copy; a copy whose device side is DtoH (or a plain blocking cudaMemcpy) is also a sync
MEMCPY_CALLS = frozenset({
    "cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync", "cudaMemcpyPeer", "cudaMemcpyPeerAsync",
    "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2",
    "hipMemcpy", "hipMemcpyAsync", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpy2DAsync", "hipMemcpyDtoH",
    "hipMemcpyHtoD", "hipMemcpyDtoHAsync", "hipMemcpyHtoDAsync", "hipMemcpyPeer", "hipMemcpyPeerAsync",
})
BLOCKING_MEMCPY_CALLS = frozenset({
    "cudaMemcpy", "cudaMemcpy2D", "hipMemcpy", "hipMemcpy2D", "hipMemcpyDtoH", "cuMemcpyDtoH_v2",
})
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipGraphLaunch", "hipExtLaunchMultiKernelMultiDevice",
})
GEMM_FLOP_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"})
CONV_FLOP_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
# attention ops -> (layout of q/k/v: "bhsd" batch, heads, sequence, head dim, or "bshd"; backward?). The
# backward ops take grad_out first. torch/utils/flop_counter.py registers the same ops (the *_for_cpu pair,
# the CPU's SDPA, is counted here with the same formula; FlopCounterMode has no rule for it)
ATTENTION_FLOP_OPS = {
    "aten::_scaled_dot_product_flash_attention": ("bhsd", False),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", False),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": ("bhsd", False),
    "aten::_cudnn_attention_forward": ("bhsd", False),
    "aten::_flash_attention_forward": ("bshd", False),
    "aten::_efficient_attention_forward": ("bshd", False),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ("bhsd", True),
    "aten::_cudnn_attention_backward": ("bhsd", True),
    "aten::_flash_attention_backward": ("bshd", True),
    "aten::_efficient_attention_backward": ("bshd", True),
}
FLOP_KINDS = ("gemm", "convolution", "attention")


@dataclass
class DeviceEvent:
    start_us: float
    end_us: float
    name: str
    category: str  # "kernel", "gpu_memcpy" or "gpu_memset"
    device: int
    stream: int
    correlation: Optional[int]
    bytes: Optional[int] = None
    bandwidth_gbs: Optional[float] = None
    launch_us: Optional[float] = None  # ts of the host runtime call that launched it, when correlated
    step: Optional[int] = None  # index into TraceEvents.steps


@dataclass
class HostEvent:
    start_us: float
    end_us: float
    name: str
    tid: object
    args: dict
    step: Optional[int] = None  # index into TraceEvents.steps of the step span it starts in


@dataclass
class Step:
    name: str  # "ProfilerStep#3", or "window" when the trace has no step annotations
    start_us: float
    end_us: float


@dataclass
class TraceEvents:
    steps: list  # Step, by start
    device: list  # DeviceEvent, by start
    runtime: list  # HostEvent of RUNTIME_CATEGORIES, by start
    cpu_ops: list  # HostEvent of "cpu_op", by start
    platform: str  # "cuda", "rocm" or "cpu" (no device events)
    device_index: Optional[int]  # the device analysed; None without device events
    other_devices: list = field(default_factory=list)  # devices present in the trace but not analysed


def read_trace(path, *, max_bytes: int = MAX_TRACE_BYTES) -> dict:
    """The trace at `path` (.json or .json.gz) as a dict; FadeUsageError (one line) when it cannot be used."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise FadeUsageError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    gzipped = path.name.endswith(".gz")
    # gzip'd JSON traces compress ~10-20x; the on-disk limit scales so both forms allow the same trace
    limit = max_bytes // 10 if gzipped else max_bytes
    if size > limit:
        raise FadeUsageError(
            f"{path}: the trace is {size / 2**20:.0f} MiB, over the {limit / 2**20:.0f} MiB this reader accepts; "
            "profile fewer steps (active=1) or a smaller batch, or raise max_bytes")
    raw = read_bytes(path, what="trace", max_bytes=limit)  # a regular file only: a FIFO would block an open()
    try:
        if gzipped:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as handle:
                data = handle.read(max_bytes + 1)  # bounded: a small .gz can inflate to any size
        else:
            data = raw
        if len(data) > max_bytes:
            raise FadeUsageError(
                f"{path}: the trace inflates to over {max_bytes / 2**20:.0f} MiB of JSON, more than this reader "
                "accepts; profile fewer steps (active=1) or a smaller batch, or raise max_bytes")
        trace = json.loads(data)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise FadeUsageError(f"{path}: cannot read the trace: {exc}") from None
    except RecursionError:  # json's parser recurses per nesting level: a hostile depth, not a trace
        raise FadeUsageError(f"{path}: not a JSON trace (nested too deeply)") from None
    except json.JSONDecodeError as exc:
        raise FadeUsageError(f"{path}: not a JSON trace (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                             "pass the file torch.profiler's export_chrome_trace wrote") from None
    validate_trace(trace, where=str(path))
    return trace


def validate_trace(trace, *, where: str = "trace") -> None:
    """Raise FadeUsageError (one line) unless `trace` looks like a Chrome trace from torch.profiler."""
    if isinstance(trace, list):
        events = trace  # the JSON Array Format of the Chrome trace spec
    elif isinstance(trace, dict):
        events = trace.get("traceEvents")
        if events is None:
            raise FadeUsageError(f"{where}: no 'traceEvents' list; pass the file torch.profiler's "
                                 "export_chrome_trace wrote (a Chrome/Perfetto JSON trace)")
    else:
        raise FadeUsageError(f"{where}: a trace is a JSON object with 'traceEvents', not {type(trace).__name__}")
    if not isinstance(events, list):
        raise FadeUsageError(f"{where}: 'traceEvents' is {type(events).__name__}, not a list")
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise FadeUsageError(f"{where}: traceEvents[{index}] is {type(event).__name__}, not an object")
        if event.get("ph") == "X":
            ts, dur = event.get("ts"), event.get("dur", 0)
            if not _is_number(ts) or not _is_number(dur) or dur < 0:
                raise FadeUsageError(f"{where}: traceEvents[{index}] ({event.get('name')!r}) has no valid "
                                     f"'ts'/'dur' (ts={ts!r}, dur={dur!r})")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def trace_events_of(trace) -> list:
    return trace if isinstance(trace, list) else trace["traceEvents"]


def collect_events(trace, *, device_index: Optional[int] = None) -> TraceEvents:
    """Sort a validated trace's complete events into steps, device events, runtime calls and host ops.

    `device_index` picks the device to analyse; by default the one with the most device time.
    """
    steps, device, runtime, cpu_ops = [], [], [], []
    for event in trace_events_of(trace):
        if event.get("ph") != "X":
            continue
        category = event.get("cat")
        name = str(event.get("name", ""))
        start = float(event["ts"])
        end = start + float(event.get("dur", 0))
        args = event.get("args") or {}
        if category in DEVICE_CATEGORIES:
            device.append(DeviceEvent(
                start, end, name, category, _int(args.get("device"), 0), _int(args.get("stream"), 0),
                _int(args.get("correlation"), None), _int(args.get("bytes"), None),
                _float(args.get("memory bandwidth (GB/s)"))))
        elif category in RUNTIME_CATEGORIES:
            runtime.append(HostEvent(start, end, name, event.get("tid"), args))
        elif category == "cpu_op":
            cpu_ops.append(HostEvent(start, end, name, event.get("tid"), args))
        if STEP_NAME.match(name) and category in ("user_annotation", "cpu_op", None):
            steps.append(Step(name, start, end))

    time_by_device: dict = {}
    for event in device:
        time_by_device[event.device] = time_by_device.get(event.device, 0.0) + (event.end_us - event.start_us)
    chosen = device_index
    if chosen is None and time_by_device:
        chosen = max(time_by_device, key=time_by_device.get)
    if chosen is not None and device and chosen not in time_by_device:
        raise FadeUsageError(f"device {chosen} has no events in this trace; it has "
                             + ", ".join(str(d) for d in sorted(time_by_device)))
    device = sorted((e for e in device if e.device == chosen), key=lambda e: e.start_us)
    runtime.sort(key=lambda e: e.start_us)
    cpu_ops.sort(key=lambda e: e.start_us)
    steps.sort(key=lambda s: s.start_us)
    if not steps:
        starts = [e.start_us for e in cpu_ops + runtime] + [e.start_us for e in device]
        ends = [e.end_us for e in cpu_ops + runtime] + [e.end_us for e in device]
        if starts:
            steps = [Step("window", min(starts), max(ends))]

    launches = {}
    for call in runtime:
        correlation = _int(call.args.get("correlation"), None)
        if correlation is not None:
            launches[correlation] = call.start_us
    step_starts = [s.start_us for s in steps]
    for event in device:
        event.launch_us = launches.get(event.correlation) if event.correlation is not None else None
        event.step = _step_of(step_starts, steps, event.launch_us if event.launch_us is not None else event.start_us)
    for event in runtime + cpu_ops:
        event.step = _step_of(step_starts, steps, event.start_us)
        if event.step is not None and event.start_us > steps[event.step].end_us:
            event.step = None  # between two step spans: outside every step

    names = {call.name for call in runtime}
    if not device:
        platform = "cpu"
    elif any(name.startswith("hip") for name in names) or any(e.name.startswith("__amd_rocclr") for e in device):
        platform = "rocm"
    else:
        platform = "cuda"
    return TraceEvents(steps, device, runtime, cpu_ops, platform, chosen if device else None,
                       sorted(d for d in time_by_device if d != chosen))


def _step_of(step_starts: list, steps: list, when: float) -> Optional[int]:
    """Index of the step whose host span contains `when` (a launch) or, past its end, precedes the next."""
    import bisect

    position = bisect.bisect_right(step_starts, when) - 1
    if position < 0:
        return None
    if position == len(steps) - 1 and when > steps[position].end_us:
        return None  # after the last profiled step: the profiler's tail, not a step
    return position


def _int(value, default):
    if type(value) is int:  # the common case, without the cost of a try
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def op_flops(event: HostEvent) -> Optional[float]:
    """FLOPs of one host op: the trace's own `flops` arg, else the shape formula (module docstring), else None."""
    recorded = _float(event.args.get("flops"))
    if recorded is not None:
        return recorded
    dims = event.args.get("Input Dims")
    if not isinstance(dims, list):
        return None
    try:
        if event.name in ("aten::mm", "aten::_scaled_mm"):
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if event.name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if event.name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if event.name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if event.name in ATTENTION_FLOP_OPS:
            return _attention_flops(dims, *ATTENTION_FLOP_OPS[event.name])
        if event.name == "aten::convolution":
            return _conv_flops(dims[0], dims[1], event.args.get("Concrete Inputs") or [], offset=3)
        if event.name == "aten::convolution_backward":
            concrete = event.args.get("Concrete Inputs") or []
            forward = _conv_flops(dims[1], dims[2], concrete, offset=4)
            mask = _parse_list(concrete[10]) if len(concrete) > 10 else [True, True]
            return forward * sum(1 for wanted in mask[:2] if wanted) if forward is not None else None
    except (TypeError, ValueError, IndexError):
        return None
    return None


def _attention_flops(dims: list, layout: str, backward: bool) -> Optional[float]:
    """torch.utils.flop_counter's sdpa_flop_count / sdpa_backward_flop_count from the recorded shapes:
    each of the two forward GEMMs (Q K^T, P V) is 2*B*Hq*Sq*Sk*D, the backward recomputes Q K^T and runs four
    more (dP, dV, dQ, dK). None for a 3-D (varlen, packed) query: its per-sequence lengths are not in the trace."""
    shapes = dims[1:4] if backward else dims[0:3]
    if len(shapes) < 3 or any(not isinstance(shape, list) or len(shape) != 4 for shape in shapes):
        return None
    if layout == "bshd":
        shapes = [[b, h, s, d] for b, s, h, d in shapes]
    (batch, heads, seq_q, dim_q), (_, _, seq_k, _), (_, _, _, dim_v) = shapes
    scores = 2.0 * batch * heads * seq_q * seq_k
    return scores * (3 * dim_q + 2 * dim_v) if backward else scores * (dim_q + dim_v)


def _conv_flops(input_dims, weight_dims, concrete: list, *, offset: int) -> Optional[float]:
    """2 * N * K * prod(out spatial) * (C/groups) * prod(kernel): the weight's C is already C/groups."""
    if len(input_dims) < 3 or len(weight_dims) != len(input_dims):
        return None
    batch, out_channels = input_dims[0], weight_dims[0]
    kernel = weight_dims[2:]
    spatial = input_dims[2:]
    stride = _parse_list(concrete[offset]) if len(concrete) > offset else []
    padding = _parse_list(concrete[offset + 1]) if len(concrete) > offset + 1 else []
    dilation = _parse_list(concrete[offset + 2]) if len(concrete) > offset + 2 else []
    transposed = len(concrete) > offset + 3 and str(concrete[offset + 3]).strip().lower() == "true"
    output = []
    for axis, size in enumerate(spatial):
        s = _pick(stride, axis, 1)
        p = _pick(padding, axis, 0)
        d = _pick(dilation, axis, 1)
        if transposed:
            output.append(size)  # a transposed conv does the work of the forward conv on its input grid
        else:
            output.append((size + 2 * p - d * (kernel[axis] - 1) - 1) // s + 1)
    return 2.0 * batch * out_channels * math.prod(output) * weight_dims[1] * math.prod(kernel)


def _pick(values: list, axis: int, default: int) -> int:
    if not values:
        return default
    return int(values[axis] if axis < len(values) else values[-1])


def _parse_list(text) -> list:
    if isinstance(text, list):
        return text
    text = str(text).strip()
    if not text:
        return []
    try:
        value = json.loads(text.replace("True", "true").replace("False", "false").replace("'", '"'))
    except json.JSONDecodeError:
        return []
    return value if isinstance(value, list) else [value]


# "Input type" strings of a trace's cpu_op args -> bytes per element
ELEMENT_BYTES = {"double": 8, "float": 4, "c10::BFloat16": 2, "c10::Half": 2, "c10::Float8_e4m3fn": 1,
                 "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "signed char": 1,
                 "unsigned char": 1, "int": 4, "long int": 8}  # fmt: skip


def op_gemm_bytes(event: HostEvent) -> Optional[float]:
    """The least bytes a GEMM host op moves: each operand read once and the output written once, (m*k + k*n + m*n)
    x batch elements at its first operand's element size ("Input type"); None without shapes or a known type."""
    dims, types = event.args.get("Input Dims"), event.args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    first = {"aten::mm": 0, "aten::bmm": 0, "aten::addmm": 1, "aten::baddbmm": 1}.get(event.name)
    if first is None or len(dims) < first + 2 or len(types) <= first:
        return None
    size = ELEMENT_BYTES.get(str(types[first]))
    a, b = dims[first], dims[first + 1]
    try:
        if size is None or len(a) != len(b) or len(a) not in (2, 3):
            return None
        batch = a[0] if len(a) == 3 else 1
        m, k, n = a[-2], a[-1], b[-1]
    except TypeError:
        return None
    if not all(isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 for dim in (batch, m, k, n)):
        return None  # a trace from elsewhere: only positive integer sizes make a byte count
    return float(size * batch * (m * k + k * n + m * n))


def flops_by_kind(cpu_ops: list) -> dict:
    """{"gemm": FLOPs, "convolution": FLOPs, "attention": FLOPs} over `cpu_ops`, each nested FLOP-carrying op
    counted once; with "gemm_bytes" and "gemm_bytes_flops": the least bytes of the GEMMs whose shapes and types
    the trace has (op_gemm_bytes), and those GEMMs' FLOPs (their arithmetic intensity is the ratio)."""
    totals = dict.fromkeys(FLOP_KINDS, 0.0)
    totals["gemm_bytes"] = totals["gemm_bytes_flops"] = 0.0
    last_end_by_thread: dict = {}
    for op in cpu_ops:  # sorted by start: an op inside the last counted op of its thread is its child
        counted = op.name in GEMM_FLOP_OPS or op.name in CONV_FLOP_OPS or op.name in ATTENTION_FLOP_OPS
        flops = op_flops(op) if (counted or "flops" in op.args) else None
        if not flops:
            continue
        if op.start_us < last_end_by_thread.get(op.tid, -math.inf):
            continue
        last_end_by_thread[op.tid] = op.end_us
        kind = "attention" if op.name in ATTENTION_FLOP_OPS else "convolution" if "conv" in op.name else "gemm"
        totals[kind] += flops
        moved = op_gemm_bytes(op) if kind == "gemm" else None
        if moved:
            totals["gemm_bytes"] += moved
            totals["gemm_bytes_flops"] += flops
    return totals


