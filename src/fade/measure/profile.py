"""Profile a step callable with torch.profiler (Kineto) and write its Chrome trace, gzip'd, atomically.

Method:

Schedule
    torch.profiler.schedule(wait, warmup, active, repeat=1): the first `wait` steps run unprofiled (compile,
    autotuning, first-call costs: module load, cuBLAS/hipBLASLt heuristics, MIOpen find), the next `warmup`
    steps run with the profiler on but discarded (its own start-up: CUPTI/roctracer buffers, "Lazy Function
    Loading"), and the last `active` steps are recorded, each marked by `prof.step()` as ProfilerStep#N.
    record_shapes and with_flops are on (shapes give fade.analyze.trace its FLOP formulas).
Activities
    CPU always; CUDA (which is HIP on ROCm builds) when `device` is a CUDA/ROCm device. A device whose
    activity torch.profiler.supported_activities() lacks (a build without Kineto's GPU backend) is one
    FadeUsageError line, as is a CUDA device on a machine without one.
Overhead
    The same step is timed without the profiler by fade.measure.timing.measure (its warm-up, sync and stop
    rule), and with it from the ProfilerStep#N spans of the trace (host spans of back-to-back steps: in steady
    state the host cannot run more than the launch queue ahead, so they approximate step time; on the CPU they
    are exact). overhead_fraction = median profiled step / median unprofiled step - 1.
Output
    The trace Kineto exported is read back, gzip'd and moved into place with os.replace, so a reader never
    sees half a file. The capture holds the trace dict for fade.analyze.profile.summarize_trace.
"""

from __future__ import annotations

import gzip
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from fade.errors import FadeUsageError
from fade.files import atomic_write_bytes
from fade.measure.timing import measure

OVERHEAD_BUDGET_S = 1.0  # timing the unprofiled step: as long as one measurement's default budget
PROFILER_STEP_PREFIX = "ProfilerStep#"


@dataclass
class ProfileCapture:
    trace: dict  # the Chrome trace as Kineto exported it
    trace_path: Optional[str]  # where the gzip'd trace was written; None when no path was given
    device: str
    activities: list  # "cpu", "cuda"
    schedule: dict  # {wait, warmup, active}
    profiled_step_s: list  # host span of each recorded ProfilerStep#N, in seconds
    unprofiled_timing: Optional[dict]  # fade.measure.timing.Timing.to_dict() + stats, or None if skipped
    overhead_fraction: Optional[float]  # median profiled / median unprofiled - 1
    torch_version: str
    warnings: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """Everything but the trace itself (it is in trace_path)."""
        return {key: value for key, value in self.__dict__.items() if key != "trace"}


def profile_steps(
    step: Callable[[], None],
    *,
    device: str,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    trace_path=None,
    measure_overhead: bool = True,
    overhead_budget_s: float = OVERHEAD_BUDGET_S,
    on_progress: Optional[Callable[[str], None]] = None,
) -> ProfileCapture:
    """Run `step` wait+warmup+active times under torch.profiler, as the module docstring describes.

    `step` does one whole step (forward, backward, optimizer) and returns nothing. `trace_path` (a .json.gz
    path) receives the trace. `on_progress` gets one short line per phase.
    """
    if wait < 0 or warmup < 0 or active < 1:
        raise FadeUsageError(f"profile schedule wait={wait} warmup={warmup} active={active}: need wait >= 0, "
                             "warmup >= 0 and active >= 1")
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    progress = on_progress or (lambda message: None)
    activities, names = _activities(torch, ProfilerActivity, device)
    exported = {}
    with tempfile.TemporaryDirectory(prefix="fade-profile-") as scratch:
        raw_path = Path(scratch) / "trace.json"

        def on_trace_ready(prof) -> None:
            prof.export_chrome_trace(str(raw_path))
            exported["done"] = True

        progress(f"profiling {active} steps after {wait} unprofiled and {warmup} warm-up steps on {device}")
        with profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                     on_trace_ready=on_trace_ready, record_shapes=True, with_flops=True) as prof:
            for _ in range(wait + warmup + active):
                step()
                prof.step()
        if not exported:
            raise FadeUsageError("torch.profiler recorded no trace (on_trace_ready never ran); "
                                 f"check the schedule wait={wait} warmup={warmup} active={active}")
        text = raw_path.read_text(encoding="utf-8")
    trace = json.loads(text)
    written = None
    if trace_path is not None:
        written = str(write_trace_gzip(text, trace_path))
        progress(f"trace written to {written}")

    profiled = sorted((event["ts"], event["dur"] * 1e-6) for event in trace.get("traceEvents", [])
                      if str(event.get("name", "")).startswith(PROFILER_STEP_PREFIX) and event.get("ph") == "X")
    profiled_step_s = [duration for _, duration in profiled]
    warnings = []
    if len(profiled_step_s) != active:
        warnings.append(f"{len(profiled_step_s)} ProfilerStep spans in the trace, {active} expected")
    unprofiled, overhead = None, None
    if measure_overhead:
        progress("timing the step without the profiler (overhead)")
        timing = measure(step, device=device, budget_s=overhead_budget_s, min_samples=3)
        unprofiled = {**timing.to_dict(), "stats": timing.stats()}
        if profiled_step_s and timing.median_s > 0:
            overhead = statistics.median(profiled_step_s) / timing.median_s - 1.0
    return ProfileCapture(
        trace=trace, trace_path=written, device=device, activities=names,
        schedule={"wait": wait, "warmup": warmup, "active": active}, profiled_step_s=profiled_step_s,
        unprofiled_timing=unprofiled, overhead_fraction=overhead, torch_version=torch.__version__,
        warnings=warnings)


def _activities(torch, activity, device: str) -> tuple:
    device_type = device.split(":", 1)[0]
    supported = set(torch.profiler.supported_activities())
    if device_type == "cpu":
        return [activity.CPU], ["cpu"]
    if device_type != "cuda":
        raise FadeUsageError(f"profiling device {device!r} is not supported yet; use 'cuda' (NVIDIA or ROCm) or 'cpu'")
    if not torch.cuda.is_available():
        raise FadeUsageError(f"device {device!r} requested but torch.cuda.is_available() is False on this machine; "
                             "profile with device='cpu' for a CPU-only summary")
    if activity.CUDA not in supported:
        raise FadeUsageError("this torch build's profiler has no GPU backend (supported_activities() lacks CUDA: "
                             "Kineto built without CUPTI/roctracer, as in some conda-forge builds); install a "
                             "pytorch.org wheel, or profile with device='cpu'")
    return [activity.CPU, activity.CUDA], ["cpu", "cuda"]


def write_trace_gzip(text: str, path) -> Path:
    """gzip `text` and write it atomically (fade.files): readers see the old trace or the new one, never half."""
    return atomic_write_bytes(path, gzip.compress(text.encode("utf-8"), mtime=int(time.time())))
