"""Summarize where a profiled step's time went on the device (busy by kernel class, idle by cause) and decide
what to try first, from the Chrome trace torch.profiler exported (fade.analyze.trace reads it).

Definitions (all times in microseconds, per step; thresholds are the named constants below):

Step window
    Step i's window runs on the device timeline from max(host start of ProfilerStep#i, end of step i-1's last
    device event) to max(host end of ProfilerStep#i, end of step i's last device event). Device events belong
    to the step whose host span contains their launch call (the "correlation" arg), else their start. Windows
    never overlap, so their idle and busy times add up. A trace without ProfilerStep annotations is one window.
Busy, and busy by class
    busy = the union of all device events (kernels, copies, memsets, all streams) inside the window. The class
    of an event comes from fade.analyze.kernels (data/kernels.toml); copies and memsets are class "copy".
    `class_us` sums event durations per class, so with concurrent streams the classes can add up to more
    than busy (`overlap_us` says by how much).
Idle, split by cause
    idle = window - busy, cut into gaps. A gap is
    - "sync_wait" when the host was inside a sync call (SYNC_CALLS, a blocking or device-to-host memcpy) as
      the gap began: it sat in the sync until the device drained, so nothing was queued behind it;
    - else "host_wait" (launch-bound) when the next device event was launched after the gap began, or no
      device event follows in the window: the device waited for the host to issue work;
    - else "other": work was queued but did not start (cross-stream waits, events, queue latency).
    HTA (hta/analyzers/breakdown_analysis.py) differs: it splits idle per stream, only between a stream's
    first and last kernel, and has "kernel_wait" (gaps under consecutive_kernel_delay with the launch already
    queued) where FADE folds those into "other"; it has no sync category (a gap after a sync is host wait to
    HTA). FADE's window also counts the leading and trailing host-only time of the step as idle.
Launches
    device kernels in the window, and how many ran shorter than LAUNCH_OVERHEAD_US: a kernel that short
    cannot keep the device busy while the host spends that long issuing the next one.
FLOPs and MFU
    FLOPs of GEMM, convolution and attention host ops in the step (fade.analyze.trace.flops_by_kind: shape
    formulas, attention's from torch.utils.flop_counter). TFLOP/s of the step = FLOPs per step / the step
    time the caller measured WITHOUT the profiler (`step_s`: fade.measure.profile passes the bench's timing
    of the same step), so the profiler's own cost does not count; without `step_s`, FLOPs / window
    (`step_time_basis` says which). `tflops_window` is always FLOPs / window. Of GEMM/conv = their FLOPs /
    time of gemm+convolution kernels; of attention = attention FLOPs / attention kernel time. MFU = TFLOP/s /
    the peak the caller passes (the doctor's spec table: fade.analyze.specs), never a literal here.
Verdicts
    named rules over the whole profile (`decide`: launch_bound, sync_bound, copy_bound, one_kernel_dominates,
    gemm_low_peak or gemm_bandwidth_bound (GEMMs below the device's ridge point: _gemm_traffic),
    memory_bound_elementwise), each with a threshold constant below and the fix to try.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

from fade.analyze.kernels import CLASSES, classify_kernel
from fade.analyze.trace import (
    BLOCKING_MEMCPY_CALLS, LAUNCH_CALLS, MEMCPY_CALLS, SYNC_CALLS, TraceEvents, collect_events, flops_by_kind,
    validate_trace,
)
from fade.errors import FadeUsageError
from fade.version import __version__

SCHEMA_VERSION = 1
IDLE_CAUSES = ("host_wait", "sync_wait", "other")
TOP_N = 15  # kernels and host ops listed per step; the rest are summed in the totals
TOP_N_TOTAL = 50  # kernels listed for the whole profile, so `compare_profiles` can match most of them
LAUNCH_OVERHEAD_US = 5.0  # a launch costs the host a few us (the trace's median_launch_call_us shows it): shorter kernels starve
HOST_WAIT_SHARE = 0.30  # device idle waiting for launches >= 30% of the step: launch-bound, graphs pay off
SYNC_WAIT_SHARE = 0.10  # idle behind syncs >= 10% of the step: removing the sync is worth more than tuning kernels
COPY_SHARE = 0.15  # host<->device copies >= 15% of the step: data movement, not compute, is the bottleneck
DOMINANT_KERNEL_SHARE = 0.40  # one kernel name >= 40% of busy time: tuning that one op is the whole story
GEMM_SHARE = 0.50  # GEMM+conv >= 50% of busy time: the matrix units set the pace
GEMM_LOW_MFU = 0.40  # ... and below 40% of peak: dense GEMMs reach 60-80% of peak when dtype and layout fit
# ... unless the GEMMs' arithmetic intensity is below the device's ridge point (gemm_bandwidth_bound: bandwidth
# sets their pace) and convolutions, whose bytes the trace does not give, are under this share of the FLOPs
CONV_SHARE_OF_MATRIX = 0.10
MEMORY_BOUND_SHARE = 0.50  # elementwise+normalization+reduction >= 50% of busy: memory-bound, fusion pays off
MEMORY_BOUND_CLASSES = ("elementwise", "normalization", "reduction")
# host ops that read a device value back, so the host waits for the device (a "sync" on a GPU; on the CPU the
# same host read, with nothing to wait for): the names of fade.hostwork.classify's SYNC_OPS and the
# dynamic-output-shape ops it flags, as the trace's cpu_op events spell them (`.item()` dispatches to
# aten::_local_scalar_dense, which the count uses so a nested aten::item is not counted twice)
HOST_READ_OPS = frozenset({"aten::_local_scalar_dense", "aten::equal", "aten::nonzero", "aten::masked_select",
                           "aten::unique_dim", "aten::_unique2", "aten::unique_consecutive"})


@dataclass
class StepSummary:
    step: str  # "ProfilerStep#3", "window" (no annotations) or "all steps"
    steps: int  # how many steps this summary covers (1 per step, n for the total)
    window_us: float
    host_us: float  # host-side duration of the ProfilerStep span(s)
    busy_us: Optional[float]  # None without a device timeline
    idle_us: Optional[dict]  # cause -> us, causes IDLE_CAUSES; None without a device timeline
    class_us: dict  # kernel class -> summed event time
    overlap_us: float  # sum(class_us) - busy_us: time two streams ran at once
    top_kernels: list  # {name, class, library, direction, total_us, count, mean_us}
    top_host_ops: list  # {name, self_us, count, mean_us}
    launches: dict  # {kernels, shorter_than_overhead, threshold_us, median_launch_call_us}
    flops: dict  # {gemm, convolution, total, tflops_step, tflops_gemm_conv, mfu_step, mfu_gemm_conv}
    copies: dict  # kind ("HtoD", "DtoH", "DtoD", "memset", ...) -> {count, bytes, us, pct_of_bandwidth}
    syncs: dict  # {count, us, by_name: {name: count}, host_reads, evidence}: blocking runtime calls; host-read ops

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ProfileSummary:
    device_timeline: bool  # False for a CPU-only trace: no device events, host figures only
    platform: str  # "cuda", "rocm" or "cpu"
    device_index: Optional[int]
    steps: list  # StepSummary per step
    total: StepSummary  # all steps together
    verdicts: list  # {rule, share, title, fix}, the most time at stake first
    peak: Optional[dict]  # {tflops, dtype, bandwidth_gbs, source} as passed in
    notes: list = field(default_factory=list)
    host_lines: list = field(default_factory=list)  # {kind, file, line, code, count, ops}: the user's lines, from the caller
    schema_version: int = SCHEMA_VERSION

    @property
    def verdict(self) -> Optional[dict]:
        return self.verdicts[0] if self.verdicts else None

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "fade_version": __version__,
            "kind": "profile-summary",
            "device_timeline": self.device_timeline,
            "platform": self.platform,
            "device_index": self.device_index,
            "peak": self.peak,
            "verdict": self.verdict,
            "verdicts": list(self.verdicts),
            "total": self.total.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
            "notes": list(self.notes),
            "host_lines": list(self.host_lines),
            "thresholds": {
                "launch_overhead_us": LAUNCH_OVERHEAD_US, "host_wait_share": HOST_WAIT_SHARE,
                "sync_wait_share": SYNC_WAIT_SHARE, "copy_share": COPY_SHARE,
                "dominant_kernel_share": DOMINANT_KERNEL_SHARE, "gemm_share": GEMM_SHARE,
                "gemm_low_mfu": GEMM_LOW_MFU, "memory_bound_share": MEMORY_BOUND_SHARE,
            },
        }


def summarize_trace(trace, *, peak_tflops: Optional[float] = None, peak_dtype: Optional[str] = None,
                    peak_bandwidth_gbs: Optional[float] = None, peak_source: Optional[str] = None,
                    device_index: Optional[int] = None, host_lines: Optional[list] = None,
                    step_s: Optional[float] = None, tune_command: Optional[str] = None) -> ProfileSummary:
    """The step summary of a Chrome trace dict (as module docstring defines it). `tune_command`: the `fade tune`
    command a launch-bound verdict suggests (default: TUNE_COMMAND, with MODEL for the user to fill in). Peaks are plain numbers
    from the spec table; without them MFU and bandwidth percentages are None. `host_lines` are the user's
    source lines behind host syncs, reads and copies ({kind, file, line, code, count, ops}, most first), as
    the caller found them (fade.measure.profile records them with fade.hostwork's call-site machinery);
    the sync and copy verdicts name the first of them. `step_s`: the step's time measured without the
    profiler, for the step's TFLOP/s and MFU (module docstring); None: the profiled window's."""
    if step_s is not None and not (step_s > 0):
        raise FadeUsageError(f"step_s={step_s!r}: the unprofiled step time must be a positive number of seconds")
    validate_trace(trace)
    events = collect_events(trace, device_index=device_index)
    peak = None
    if peak_tflops or peak_bandwidth_gbs:
        peak = {"tflops": peak_tflops, "dtype": peak_dtype, "bandwidth_gbs": peak_bandwidth_gbs, "source": peak_source}
    notes = []
    if not events.steps:
        notes.append("the trace has no complete events: nothing to summarize")
    if not events.device:
        notes.append("CPU-only trace: no device timeline (no kernel, gpu_memcpy or gpu_memset events); "
                     "busy/idle split and kernel classes are empty, host ops and FLOPs are from the CPU")
    if events.other_devices:
        notes.append(f"device {events.device_index} analysed; devices {events.other_devices} also in the trace")
    if not any(step.name.startswith("ProfilerStep#") for step in events.steps) and events.steps:
        notes.append("no ProfilerStep#N annotations (prof.step() not called): the whole trace is one window")
    windows = _windows(events)
    syncs = _sync_intervals(events)
    starts = [event.start_us for event in events.device]
    reaches = list(itertools.accumulate((event.end_us for event in events.device), max))
    sync_index = ([s[0] for s in syncs], list(itertools.accumulate((s[1] for s in syncs), max)))
    gaps = [_gaps(events, sync_index, starts, reaches, start, end) for start, end in windows]
    by_step = _by_step(events)
    per_step = [_summarize(events, by_step, syncs, [index], windows, gaps, peak, events.steps[index].name,
                           step_s=step_s) for index in range(len(events.steps))]
    total = _summarize(events, by_step, syncs, list(range(len(events.steps))), windows, gaps, peak, "all steps",
                       top_n=TOP_N_TOTAL, step_s=step_s)
    host_lines = list(host_lines or [])
    verdicts = decide(total, platform=events.platform, device_timeline=bool(events.device), host_lines=host_lines,
                      tune_command=tune_command)
    return ProfileSummary(bool(events.device), events.platform, events.device_index, per_step, total, verdicts,
                          peak, notes, host_lines)


def _windows(events: TraceEvents) -> list:
    last_end_by_step = defaultdict(lambda: None)
    for event in events.device:
        if event.step is not None:
            previous = last_end_by_step[event.step]
            last_end_by_step[event.step] = event.end_us if previous is None else max(previous, event.end_us)
    windows = []
    previous_device_end = None
    for index, step in enumerate(events.steps):
        start = step.start_us if previous_device_end is None else max(step.start_us, previous_device_end)
        device_end = last_end_by_step[index]
        end = max(step.end_us, device_end) if device_end is not None else step.end_us
        windows.append((start, max(start, end)))
        if device_end is not None:
            previous_device_end = device_end
    return windows


def _sync_intervals(events: TraceEvents) -> list:
    """(start, end, name, step index) of host calls that block on the device, by start."""
    dtoh_correlations = {e.correlation for e in events.device if e.category == "gpu_memcpy" and "DtoH" in e.name}
    intervals = []
    for call in events.runtime:
        blocking = call.name in SYNC_CALLS or call.name in BLOCKING_MEMCPY_CALLS
        if not blocking and call.name in MEMCPY_CALLS:
            blocking = call.args.get("correlation") in dtoh_correlations
        if blocking:
            intervals.append((call.start_us, call.end_us, call.name, call.step))
    return intervals


def _gaps(events: TraceEvents, syncs: tuple, starts: list, reaches: list, start: float, end: float) -> list:
    """(gap_start, gap_end, cause) of the idle stretches of the device in [start, end].

    `starts`: the device events' start times (sorted); `reaches[i]`: the latest end among events 0..i;
    `syncs`: (starts, reaches) of the blocking host calls, built the same way."""
    gaps = []
    position = bisect.bisect_left(starts, start)
    # an event that began before the window but runs into it covers the window's start
    cursor = max(start, reaches[position - 1]) if position > 0 else start
    while position < len(events.device) and events.device[position].start_us < end:
        event = events.device[position]
        if event.start_us > cursor:
            gaps.append((cursor, event.start_us, _cause(cursor, event.start_us, event, syncs)))
        cursor = max(cursor, event.end_us)
        position += 1
    if cursor < end:
        gaps.append((cursor, end, _cause(cursor, end, None, syncs)))
    return gaps


def _cause(gap_start: float, gap_end: float, next_event, syncs: tuple) -> str:
    sync_starts, sync_reaches = syncs
    began = bisect.bisect_right(sync_starts, gap_start)  # syncs the host entered before the device went idle ...
    if began and sync_reaches[began - 1] > gap_start:  # ... and was still inside when it did
        return "sync_wait"
    if next_event is None or (next_event.launch_us is not None and next_event.launch_us > gap_start):
        return "host_wait"
    return "other"


def _by_step(events: TraceEvents) -> dict:
    """{"device" | "cpu_ops" | "runtime": [events of step 0, of step 1, ...]}, each list in start order."""
    groups = {}
    for kind in ("device", "cpu_ops", "runtime"):
        lists = [[] for _ in events.steps]
        for event in getattr(events, kind):
            if event.step is not None:
                lists[event.step].append(event)
        groups[kind] = lists
    return groups


def _summarize(events: TraceEvents, by_step: dict, syncs: list, step_indices: list, windows: list, gaps: list,
               peak: Optional[dict], label: str, top_n: int = TOP_N, step_s: Optional[float] = None) -> StepSummary:
    chosen = set(step_indices)
    window_us = sum(windows[i][1] - windows[i][0] for i in step_indices)
    host_us = sum(events.steps[i].end_us - events.steps[i].start_us for i in step_indices)
    idle = dict.fromkeys(IDLE_CAUSES, 0.0)
    for index in step_indices:
        for gap_start, gap_end, cause in gaps[index]:
            idle[cause] += gap_end - gap_start
    busy_us = max(0.0, window_us - sum(idle.values()))
    if not events.device:
        idle, busy_us = None, None  # no device timeline: neither figure exists

    class_us = dict.fromkeys(CLASSES, 0.0)
    kernels: dict = {}
    copies: dict = {}
    launched = short = 0
    for event in (event for index in step_indices for event in by_step["device"][index]):
        start, end = windows[event.step]
        duration = max(0.0, min(event.end_us, end) - max(event.start_us, start))
        if event.category == "kernel":
            kind = classify_kernel(event.name)
            launched += 1
            short += (event.end_us - event.start_us) < LAUNCH_OVERHEAD_US
        else:
            kind = None
            copy_kind = _copy_kind(event)
            entry = copies.setdefault(copy_kind, {"count": 0, "bytes": 0, "us": 0.0, "pct_of_bandwidth": None})
            entry["count"] += 1
            entry["bytes"] += event.bytes or 0
            entry["us"] += duration
        class_name = kind.kernel_class if kind else "copy"
        class_us[class_name] += duration
        entry = kernels.setdefault(event.name, {
            "name": event.name, "class": class_name, "library": kind.library if kind else None,
            "direction": kind.direction if kind else None, "total_us": 0.0, "count": 0})
        entry["total_us"] += duration
        entry["count"] += 1
    if peak and peak.get("bandwidth_gbs"):
        for entry in copies.values():
            if entry["us"] > 0 and entry["bytes"]:
                achieved_gbs = entry["bytes"] / (entry["us"] * 1e-6) / 1e9
                entry["pct_of_bandwidth"] = 100.0 * achieved_gbs / peak["bandwidth_gbs"]
    top_kernels = sorted(kernels.values(), key=lambda k: -k["total_us"])[:top_n]
    for entry in top_kernels:
        entry["mean_us"] = entry["total_us"] / entry["count"]

    host_ops = [op for index in step_indices for op in by_step["cpu_ops"][index]]
    launch_calls = [call.end_us - call.start_us for index in step_indices for call in by_step["runtime"][index]
                    if call.name in LAUNCH_CALLS]
    sync_calls = [s for s in syncs if s[3] in chosen]
    by_name: dict = defaultdict(int)
    for _, _, name, _ in sync_calls:
        by_name[name] += 1
    flops = flops_by_kind(host_ops)
    host_reads = sum(1 for op in host_ops if op.name in HOST_READ_OPS)
    return StepSummary(
        step=label, steps=len(step_indices), window_us=window_us, host_us=host_us, busy_us=busy_us, idle_us=idle,
        class_us=class_us, overlap_us=max(0.0, sum(class_us.values()) - (busy_us or 0.0)), top_kernels=top_kernels,
        top_host_ops=_top_host_ops(host_ops, top_n),
        launches={"kernels": launched, "shorter_than_overhead": short, "threshold_us": LAUNCH_OVERHEAD_US,
                  "median_launch_call_us": statistics.median(launch_calls) if launch_calls else None},
        flops={**_flops(flops, len(step_indices), window_us if events.device else host_us,
                        class_us["gemm"] + class_us["convolution"], class_us["attention"], peak, step_s),
               **_gemm_traffic(flops, class_us["gemm"], peak)},
        copies=copies,
        syncs={"count": len(sync_calls), "us": sum(end - start for start, end, _, _ in sync_calls),
               "by_name": dict(by_name), "host_reads": host_reads,
               "evidence": ("runtime calls that block on the device (SYNC_CALLS, blocking or DtoH memcpy) and "
                            "host-read ops (HOST_READ_OPS cpu_op events)") if events.device else
                           ("host-read ops only (HOST_READ_OPS cpu_op events, e.g. aten::_local_scalar_dense for "
                            ".item()): a CPU-only trace has no device to wait on")},
    )


def _copy_kind(event) -> str:
    if event.category == "gpu_memset":
        return "memset"
    for kind in ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH"):
        if kind in event.name:
            return kind
    return "copy"


def _top_host_ops(ops: list, top_n: int) -> list:
    """Host ops by self time (duration minus that of ops nested in them on the same thread)."""
    self_us: dict = defaultdict(float)
    count: dict = defaultdict(int)
    stacks: dict = defaultdict(list)  # thread -> [(end, name)]
    for op in ops:  # sorted by start
        stack = stacks[op.tid]
        while stack and stack[-1][0] <= op.start_us:
            stack.pop()
        if stack:
            self_us[stack[-1][1]] -= op.end_us - op.start_us
        self_us[op.name] += op.end_us - op.start_us
        count[op.name] += 1
        stack.append((op.end_us, op.name))
    ranked = sorted(self_us, key=lambda name: -self_us[name])[:top_n]
    return [{"name": name, "self_us": max(0.0, self_us[name]), "count": count[name],
             "mean_us": max(0.0, self_us[name]) / count[name]} for name in ranked]


def _flops(flops: dict, steps: int, window_us: float, gemm_conv_us: float, attention_us: float,
           peak: Optional[dict], step_s: Optional[float]) -> dict:
    """FLOPs and rates (module docstring, "FLOPs and MFU")."""
    matrix = flops["gemm"] + flops["convolution"]
    total = matrix + flops["attention"]
    peak_tflops = (peak or {}).get("tflops")

    def rate(count: float, seconds: float) -> Optional[float]:
        return count / seconds / 1e12 if count and seconds > 0 else None

    def mfu(tflops: Optional[float]) -> Optional[float]:
        return tflops / peak_tflops if tflops and peak_tflops else None

    tflops_window = rate(total, window_us * 1e-6)
    tflops_step = rate(total / max(1, steps), step_s) if step_s else tflops_window
    tflops_gemm_conv = rate(matrix, gemm_conv_us * 1e-6)
    tflops_attention = rate(flops["attention"], attention_us * 1e-6)
    return {
        "gemm": flops["gemm"], "convolution": flops["convolution"], "attention": flops["attention"], "total": total,
        "step_time_basis": "unprofiled" if step_s else "profiled window",
        "step_s": step_s if step_s else (window_us * 1e-6 / max(1, steps) if window_us > 0 else None),
        "tflops_step": tflops_step, "tflops_window": tflops_window,
        "tflops_gemm_conv": tflops_gemm_conv, "tflops_attention": tflops_attention,
        "mfu_step": mfu(tflops_step), "mfu_window": mfu(tflops_window),
        "mfu_gemm_conv": mfu(tflops_gemm_conv), "mfu_attention": mfu(tflops_attention),
        "formula": ("TFLOP/s = FLOPs of GEMM/conv/attention host ops per step / step_s (the step timed without the "
                    "profiler when step_time_basis is 'unprofiled', else the profiled window); tflops_window = "
                    "FLOPs / profiled window; MFU = TFLOP/s / peak (spec table)"),
    }


def _gemm_traffic(flops: dict, gemm_us: float, peak: Optional[dict]) -> dict:
    """The GEMMs' arithmetic intensity (FLOPs per least byte moved, over the GEMMs whose shapes and types the trace
    has: trace.op_gemm_bytes), the device's ridge point (peak FLOP/s over peak bytes/s, from the spec table) and the
    GEMMs' bandwidth as % of peak (their least bytes, scaled to all GEMM FLOPs, over the GEMM kernels' time). A
    GEMM below the ridge is bounded by memory, not by the matrix units: a batch-1 decode's GEMV reads each weight
    for 2 FLOPs."""
    known, moved = flops.get("gemm_bytes_flops") or 0.0, flops.get("gemm_bytes") or 0.0
    intensity = known / moved if known and moved else None
    tflops, bandwidth = (peak or {}).get("tflops"), (peak or {}).get("bandwidth_gbs")
    ridge = tflops * 1e12 / (bandwidth * 1e9) if tflops and bandwidth else None
    pct = None
    if intensity and bandwidth and gemm_us > 0 and flops.get("gemm"):
        pct = 100.0 * (moved * flops["gemm"] / known) / (gemm_us * 1e-6) / (bandwidth * 1e9)
    return {"gemm_intensity": intensity, "ridge_intensity": ridge, "pct_of_bandwidth_gemm": pct}


# -- verdicts -------------------------------------------------------------------------------------------
GUARD_LINE = "fade watch -- python train.py   # names the line of your code behind each sync and copy"
TUNE_LINE = "{command}   # searches CUDA graphs / compile modes and writes a profile"
TUNE_COMMAND = "fade tune MODEL --mode train"  # when the trace does not say which model and mode ran
MIOPEN_FIND_LINE = "export MIOPEN_FIND_MODE=3 MIOPEN_FIND_ENFORCE=3   # MIOpen tunes this shape once (rule MIOPEN001)"


def _at_lines(host_lines: list, kinds: tuple) -> str:
    """' at train.py:12 (loss.item())' for the user's top line of these kinds, or ''."""
    for entry in host_lines:
        if entry.get("kind") in kinds:
            code = f" ({entry['code']})" if entry.get("code") else ""
            more = sum(1 for e in host_lines if e.get("kind") in kinds) - 1
            return f" at {entry['file']}:{entry['line']}{code}" + (f" and {more} more line(s)" if more > 0 else "")
    return ""


def _line_count(host_lines: list, kinds: tuple) -> int:
    """Calls at the user's lines of these kinds in the one step the lines were recorded in."""
    return sum(entry.get("count", 0) for entry in host_lines if entry.get("kind") in kinds)


def decide(total: StepSummary, *, platform: str, device_timeline: bool, host_lines: Optional[list] = None,
           tune_command: Optional[str] = None) -> list:
    """Every verdict rule that fires on `total`, the one with the largest share of the step first. `tune_command`
    is the `fade tune` command for the profiled model and mode, where known."""
    host_lines = host_lines or []
    user_syncs = _line_count(host_lines, ("sync", "host_read"))  # per step: the lines cover one step
    if not device_timeline:
        verdicts = []
        if user_syncs:  # only reads at the user's lines: optimizers read their CPU step counters on purpose
            verdicts.append({
                "rule": "host_reads", "share": None,
                "title": f"{user_syncs} host read(s) of a tensor value per step in your code (.item(), nonzero, ...)"
                         + _at_lines(host_lines, ("sync", "host_read")) + "; on a GPU each one is a sync",
                "fix": "keep the value on the device (accumulate a tensor) and read it after the step or every N "
                       "steps. " + GUARD_LINE})
        verdicts.append({"rule": "cpu_only", "share": None, "title": "CPU-only profile: no device timeline to judge",
                         "fix": "profile on the accelerator (device='cuda') for the busy/idle split"})
        return verdicts
    window = total.window_us or 1.0
    busy = total.busy_us or 1.0
    verdicts = []
    host_wait = total.idle_us["host_wait"] / window
    if host_wait >= HOST_WAIT_SHARE:
        short = total.launches["shorter_than_overhead"]
        verdicts.append({
            "rule": "launch_bound", "share": host_wait,
            "title": f"launch-bound: the device waits on the host {100 * host_wait:.0f}% of the step "
                     f"({short} of {total.launches['kernels']} kernels shorter than {LAUNCH_OVERHEAD_US:g} us)",
            "fix": "capture the step in a CUDA/HIP graph: torch.compile(model, mode='reduce-overhead') or "
                   "torch.cuda.graphs; larger batches also amortize launches. " +
                   TUNE_LINE.format(command=tune_command or TUNE_COMMAND)})
    sync_wait = total.idle_us["sync_wait"] / window
    if sync_wait >= SYNC_WAIT_SHARE:
        verdicts.append({
            "rule": "sync_bound", "share": sync_wait,
            "title": f"{total.syncs['count']} host syncs leave the device idle {100 * sync_wait:.0f}% of the step"
                     + _at_lines(host_lines, ("sync", "host_read")),
            "fix": "remove .item()/.cpu()/print of device tensors from the step, or move them after it. " + GUARD_LINE})
    copy_us = sum(entry["us"] for kind, entry in total.copies.items() if kind in ("HtoD", "DtoH", "PtoP", "HtoH"))
    if copy_us / window >= COPY_SHARE:
        verdicts.append({
            "rule": "copy_bound", "share": copy_us / window,
            "title": f"host<->device copies take {100 * copy_us / window:.0f}% of the step" + _at_lines(host_lines, ("copy",)),
            "fix": "keep tensors on the device; load with DataLoader(pin_memory=True) and .to(device, "
                   "non_blocking=True). " + GUARD_LINE})
    if total.top_kernels:
        top = total.top_kernels[0]
        share = top["total_us"] / busy
        if share >= DOMINANT_KERNEL_SHARE:
            fix = f"tune the op behind it ({top['class']}, {top['library'] or 'unknown library'})"
            if platform == "rocm" and top["class"] == "convolution" and top["direction"] == "bwd_weight":
                fix = "a backward-weight convolution dominates on ROCm: " + MIOPEN_FIND_LINE
            elif top["class"] == "gemm" and platform == "rocm":
                fix += "; on ROCm try PYTORCH_TUNABLEOP_ENABLED=1 (TunableOp picks hipBLASLt/rocBLAS per shape)"
            verdicts.append({"rule": "one_kernel_dominates", "share": share * busy / window,
                             "title": f"one kernel takes {100 * share:.0f}% of device time: {top['name'][:120]}",
                             "fix": fix, "kernel_class": top["class"]})
    gemm_share = (total.class_us["gemm"] + total.class_us["convolution"]) / busy
    mfu = total.flops.get("mfu_gemm_conv")
    intensity, ridge = total.flops.get("gemm_intensity"), total.flops.get("ridge_intensity")
    matrix_flops = (total.flops.get("gemm") or 0.0) + (total.flops.get("convolution") or 0.0)
    below_ridge = (intensity is not None and ridge is not None and intensity < ridge and matrix_flops > 0
                   and (total.flops.get("convolution") or 0.0) < CONV_SHARE_OF_MATRIX * matrix_flops)
    if gemm_share >= GEMM_SHARE and mfu is not None and mfu < GEMM_LOW_MFU and below_ridge:
        pct = total.flops.get("pct_of_bandwidth_gemm")
        verdicts.append({
            "rule": "gemm_bandwidth_bound", "share": gemm_share * busy / window,
            "title": f"GEMM kernels take {100 * gemm_share:.0f}% of device time at {intensity:.1f} FLOP/byte, below "
                     f"the device's ridge of {ridge:.0f}: memory sets their pace, not the {100 * mfu:.0f}% of peak"
                     + (f" (they move their operands at {pct:.0f}% of peak bandwidth)" if pct is not None else ""),
            "fix": "read fewer bytes per FLOP: a larger batch (each weight read serves more rows; decode: more "
                   "sequences at once), weight-only int8/int4 quantization (fade tune MODEL --generate tries it), "
                   "and fusing the GEMMs' neighbours so their outputs are not written and read back"})
    elif gemm_share >= GEMM_SHARE and mfu is not None and mfu < GEMM_LOW_MFU:
        verdicts.append({
            "rule": "gemm_low_peak", "share": gemm_share * busy / window,
            "title": f"GEMM/conv kernels take {100 * gemm_share:.0f}% of device time at {100 * mfu:.0f}% of peak",
            "fix": "use bf16/fp16 autocast, allow TF32 (torch.set_float32_matmul_precision('high')), "
                   "channels_last for convolutions, and dimensions that are multiples of 8/16"})
    memory_share = sum(total.class_us[c] for c in MEMORY_BOUND_CLASSES) / busy
    if memory_share >= MEMORY_BOUND_SHARE:
        verdicts.append({
            "rule": "memory_bound_elementwise", "share": memory_share * busy / window,
            "title": f"elementwise/normalization/reduction kernels take {100 * memory_share:.0f}% of device time",
            "fix": "fuse them with torch.compile(model) (default mode); Inductor merges pointwise chains into "
                   "one kernel each"})
    if sync_wait < SYNC_WAIT_SHARE and user_syncs:
        verdicts.append({  # below the share that makes it the bottleneck, but the user's line is known: say it
            "rule": "syncs_in_step", "share": sync_wait,
            "title": f"{user_syncs} host sync(s) per step in your code" + _at_lines(host_lines, ("sync", "host_read"))
                     + f", the device idle behind them {100 * sync_wait:.0f}% of the step",
            "fix": "move the read after the step or read every N steps. " + GUARD_LINE})
    verdicts.sort(key=lambda v: -(v["share"] or 0.0))
    _add_tune_first(verdicts, platform)
    if not verdicts:
        verdicts.append({"rule": "device_busy", "share": busy / window,
                         "title": f"the device is busy {100 * busy / window:.0f}% of the step and no rule fired",
                         "fix": "compare kernels against their roofline: fade ops"})
    return verdicts


def _add_tune_first(verdicts: list, platform: str) -> None:
    """Each verdict that a knob answers (data/knobs.toml `answers`) gets `tune_first`, the values `fade tune` tries
    first for it (fade.analyze.tuneplan), and says so in its fix: the profile's fix line and the tuner's first
    trials come from the same table, so they cannot disagree."""
    from fade.analyze.knobs import load_knobs
    from fade.analyze.tuneplan import answering_values, verdict_key

    places = {"cuda": ("any", "gpu", "cuda"), "rocm": ("any", "gpu", "rocm")}.get(platform, ("any",))
    # a ROCm knob is no fix on CUDA; a decode loop's knobs (modes ["generate"]) none for a step's profile
    knobs = [knob for knob in load_knobs() if knob.where in places and set(knob.modes) != {"generate"}]
    compiled = {knob.id for knob in knobs if knob.group == "compile"}
    for verdict in verdicts:
        values = answering_values(knobs, verdict_key(verdict))
        if values:
            verdict["tune_first"] = values
            cheap = [value for value in values if value.split("=", 1)[0] not in compiled]
            modes = [value for value in values if value.split("=", 1)[0] in compiled]
            said = []
            if cheap:
                said.append(f"`fade tune` tries these first where they apply: {', '.join(cheap)}")
            if modes:
                said.append(f"{'and' if cheap else '`fade tune`'} compiles with {', '.join(modes)} first, after the knobs "
                            "that need no compile (seconds each)")  # fmt: skip
            verdict["fix"] += f" ({'; '.join(said)})"


# -- before/after ---------------------------------------------------------------------------------------
def compare_profiles(before, after) -> dict:
    """Which classes and kernels got faster from `before` to `after` (summaries or their to_dict()), per step."""
    a = before.to_dict() if hasattr(before, "to_dict") else before
    b = after.to_dict() if hasattr(after, "to_dict") else after
    for label, summary in (("before", a), ("after", b)):
        if not isinstance(summary, dict) or summary.get("schema_version") != SCHEMA_VERSION or "total" not in summary:
            raise FadeUsageError(f"{label}: not a profile summary of schema_version {SCHEMA_VERSION}")
    ta, tb = a["total"], b["total"]
    na, nb = max(1, ta["steps"]), max(1, tb["steps"])

    def row(key, value_a, value_b):
        if value_a is None or value_b is None:  # a CPU-only profile has no busy or idle time
            return {"name": key, "before_us": None, "after_us": None, "delta_us": None, "speedup": None}
        per_a, per_b = value_a / na, value_b / nb
        return {"name": key, "before_us": per_a, "after_us": per_b, "delta_us": per_b - per_a,
                "speedup": per_a / per_b if per_b > 0 else None}

    classes = [row(c, ta["class_us"].get(c, 0.0), tb["class_us"].get(c, 0.0)) for c in CLASSES
               if ta["class_us"].get(c) or tb["class_us"].get(c)]
    kernels_a = {k["name"]: k for k in ta["top_kernels"]}
    kernels_b = {k["name"]: k for k in tb["top_kernels"]}
    kernels = []
    for name in list(kernels_a) + [n for n in kernels_b if n not in kernels_a]:
        entry = row(name, kernels_a.get(name, {}).get("total_us", 0.0), kernels_b.get(name, {}).get("total_us", 0.0))
        entry["class"] = (kernels_a.get(name) or kernels_b.get(name))["class"]
        entry["only_in"] = "before" if name not in kernels_b else "after" if name not in kernels_a else None
        kernels.append(entry)
    kernels.sort(key=lambda k: -abs(k["delta_us"]))
    return {
        "schema_version": SCHEMA_VERSION,
        "fade_version": __version__,
        "kind": "profile-comparison",
        "steps": {"before": ta["steps"], "after": tb["steps"]},
        "step": row("window", ta["window_us"], tb["window_us"]),
        "busy": row("busy", ta["busy_us"], tb["busy_us"]),
        "idle": [row(cause, (ta["idle_us"] or {}).get(cause), (tb["idle_us"] or {}).get(cause))
                 for cause in IDLE_CAUSES],
        "classes": classes,
        "kernels": kernels[:TOP_N_TOTAL],
        "verdict": {"before": a.get("verdict"), "after": b.get("verdict")},
        "note": "times are per step (each profile's total / its step count); kernels outside a profile's top "
                f"{TOP_N_TOTAL} count as 0 there (only_in says which side listed them)",
    }


