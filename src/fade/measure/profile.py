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
Unprofiled step time and overhead
    Before the window (never after: a step timed after a profiler session ran slower, see profile_steps) the same
    step is timed without the profiler. A zoo or module:function workload
    (profile_workload) is timed exactly as `fade bench models` times it, by the bench's own code path
    (models.case.time_step: conditions.gc_frozen, the flags pinned, after the bench's checked steps, learning
    rate 0, FULL_TIMING's budget in segments, more segments while they disagree), so a host-bound step whose
    rate wanders lands on the bench's median. The summary's step TFLOP/s and MFU divide by that time; the
    profiled window only splits the step into busy and idle (fade.analyze.profile). A bare callable
    (profile_steps without `time_unprofiled`) gets fade.measure.timing.measure with its defaults. The
    profiled step is read from the trace twice: the device window (summary `step_time.profiled_window_s`)
    and the ProfilerStep#N host spans (back-to-back steps: in steady state the host cannot run more than
    the launch queue ahead; on the CPU they are exact). overhead_fraction = median host span / unprofiled
    median - 1; the summary's `step_time.overhead_window_pct` compares the window.
Running code (StepProfiler: `fade profile -- python train.py`, `fade.profile()`)
    The same schedule, advanced at each step end: every optimizer.step() (fade.hostwork.hooks' post-hook),
    or only fade.step() once the code calls it. No overhead figure: the steps cannot be re-run.
The user's lines
    One step after the window runs under fade.hostwork.lines.LineRecorder (the guard's classifier and call
    sites): the lines of host reads (.item()), syncs and copies, for the verdict. That step is not in the trace.
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
    time_unprofiled: Optional[Callable[[], tuple]] = None,
    on_progress: Optional[Callable[[str], None]] = None,
) -> ProfileCapture:
    """Run `step` wait+warmup+active times under torch.profiler, as the module docstring describes.

    `step` does one whole step (forward, backward, optimizer) and returns nothing. `trace_path` (a .json.gz
    path) receives the trace. `time_unprofiled` (when `measure_overhead`) times the step without the
    profiler and returns (Timing, facts dict): the bench's path for a workload; None: timing.measure with
    `overhead_budget_s`. `on_progress` gets one short line per phase.
    """
    if wait < 0 or warmup < 0 or active < 1:
        raise FadeUsageError(f"profile schedule wait={wait} warmup={warmup} active={active}: need wait >= 0, "
                             "warmup >= 0 and active >= 1")
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    progress = on_progress or (lambda message: None)
    activities, names = _activities(torch, ProfilerActivity, device)
    if measure_overhead:
        # Before the profiler, never after: on the H100 a launch-bound step timed right after a torch.profiler
        # session ran 34.3 ms against 25.4 ms in a fresh bench process (resnet50 train amp-bf16+CL b64,
        # results/profile-h100/). The cause is not isolated (state the profiler leaves behind is the suspect).
        progress("timing the step without the profiler (its step time and the profiler's overhead)")
        if time_unprofiled is not None:
            timing, facts = time_unprofiled()
        else:
            timing = measure(step, device=device, budget_s=overhead_budget_s, min_samples=3)
            facts = {"method": f"fade.measure.timing.measure, budget {overhead_budget_s:g} s"}
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
    capture = capture_from_text(text, device=device, activities=names, wait=wait, warmup=warmup, active=active,
                                trace_path=trace_path, progress=progress)
    if measure_overhead:
        capture.unprofiled_timing = {**timing.to_dict(), "stats": timing.stats(), **facts}
        if capture.profiled_step_s and timing.median_s > 0:
            capture.overhead_fraction = statistics.median(capture.profiled_step_s) / timing.median_s - 1.0
    return capture


def capture_from_text(text: str, *, device: str, activities: list, wait: int, warmup: int, active: int,
                      trace_path=None, progress: Optional[Callable[[str], None]] = None) -> ProfileCapture:
    """A ProfileCapture of the exported trace `text`, written gzip'd to `trace_path` when given."""
    import torch

    from fade.analyze.trace import MAX_TRACE_BYTES

    if len(text) > MAX_TRACE_BYTES:
        raise FadeUsageError(f"the profiler exported a {len(text) / 2**20:.0f} MiB trace, over the "
                             f"{MAX_TRACE_BYTES / 2**20:.0f} MiB the summary reads; profile fewer steps (--active 1)")
    trace = json.loads(text)
    written = None
    if trace_path is not None:
        written = str(write_trace_gzip(text, trace_path))
        if progress:
            progress(f"trace written to {written}")
    profiled = sorted((event["ts"], event["dur"] * 1e-6) for event in trace.get("traceEvents", [])
                      if str(event.get("name", "")).startswith(PROFILER_STEP_PREFIX) and event.get("ph") == "X")
    profiled_step_s = [duration for _, duration in profiled]
    warnings = []
    if "cuda" in activities and not any(event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                                        for event in trace.get("traceEvents", [])):
        warnings.append("the GPU activity was on but the trace has no kernel or memcpy events: the profiler's GPU "
                        "backend (CUPTI on NVIDIA, roctracer/rocprofiler on ROCm) recorded nothing; check that "
                        "libcupti / roctracer loads (LD_LIBRARY_PATH) and no other profiler holds it")
    if len(profiled_step_s) != active:
        warnings.append(f"{len(profiled_step_s)} ProfilerStep spans in the trace, {active} expected")
    return ProfileCapture(
        trace=trace, trace_path=written, device=device, activities=activities,
        schedule={"wait": wait, "warmup": warmup, "active": active}, profiled_step_s=profiled_step_s,
        unprofiled_timing=None, overhead_fraction=None, torch_version=torch.__version__, warnings=warnings)


def _activities(torch, activity, device: str) -> tuple:
    device_type = device.split(":", 1)[0]
    supported = set(torch.profiler.supported_activities())
    if device_type == "cpu":
        return [activity.CPU], ["cpu"]
    if device_type == "ocl":  # host ops only: the OpenCL kernels come from profiling events (_opencl_kernels)
        from fade.measure.ocldevice import resolve_ocl

        resolve_ocl(device)
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


class StepProfiler:
    """Profile running code step by step: `with StepProfiler(device="cuda") as p:` starts torch.profiler with
    the schedule (wait, warmup, active) and advances it at each step end, found as the guard finds it: every
    `optimizer.step()` (fade.hostwork.hooks' post-hook), or, once the code calls `fade.step()`, only those.
    After the window, one more step runs under fade.hostwork.lines.LineRecorder (outside the trace), which
    names the user's lines of host reads, syncs and copies. After the block: `capture` (None when the window
    never opened: `steps_seen` says how many steps were found), `lines`, `problem` (why there is no capture).
    """

    def __init__(self, *, device: str, wait: int = 1, warmup: int = 1, active: int = 3, trace_path=None,
                 record_lines: bool = True, dtype: Optional[str] = None, context: Optional[dict] = None):
        if wait < 0 or warmup < 0 or active < 1:
            raise FadeUsageError(f"profile schedule wait={wait} warmup={warmup} active={active}: need wait >= 0, "
                                 "warmup >= 0 and active >= 1")
        self.device, self.wait, self.warmup, self.active = device, wait, warmup, active
        self.trace_path = trace_path
        self.record_lines = record_lines
        self.steps_seen = 0
        self.explicit_steps = False
        self.capture: Optional[ProfileCapture] = None
        self.lines: list = []
        self.problem: Optional[str] = None
        self._profiler = None
        self._recorder = None
        self._names: list = []
        self._scratch = None
        self._text: Optional[str] = None
        self._lines_done = False
        self.dtype = dtype  # the dtype the step's math runs in, for the peak behind MFU; None: no MFU
        self.context = dict(context or {})
        self._summary: Optional[dict] = None

    @property
    def summary(self) -> dict:
        """The summary JSON (summarize_capture) once the block has ended; FadeUsageError with the reason when
        no window was profiled."""
        if self.capture is None:
            raise FadeUsageError(self.problem or "the profile is still running: read .summary after the with block")
        if self._summary is None:
            self._summary = summarize_capture(self.capture, lines=self.lines, peak=device_peak(self.device, self.dtype),
                                              context=self.context)
        return self._summary

    def __enter__(self) -> "StepProfiler":
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        from fade.hostwork import hooks

        activities, self._names = _activities(torch, ProfilerActivity, self.device)
        self._scratch = tempfile.TemporaryDirectory(prefix="fade-profile-")
        raw_path = Path(self._scratch.name) / "trace.json"

        def on_trace_ready(prof) -> None:
            prof.export_chrome_trace(str(raw_path))
            self._text = raw_path.read_text(encoding="utf-8")

        self._profiler = profile(activities=activities, on_trace_ready=on_trace_ready, record_shapes=True,
                                 with_flops=True, schedule=schedule(wait=self.wait, warmup=self.warmup,
                                                                    active=self.active, repeat=1))
        self._profiler.__enter__()
        hooks.add_step_listener(self._on_step)
        return self

    def step(self) -> None:
        """End a step explicitly (what `fade.step()` does for every active profiler)."""
        self._on_step(True)

    def _on_step(self, explicit: bool) -> None:
        if explicit and not self.explicit_steps:
            self.explicit_steps = True  # from now on optimizer steps are inside the user's steps
        elif not explicit and self.explicit_steps:
            return
        self.steps_seen += 1
        if self._recorder is not None:  # the attribution step has ended
            self._stop_recorder()
        if self._profiler is not None:
            self._profiler.step()
            if self._text is not None:  # the window is complete: stop profiling, record one step's lines
                self._profiler.__exit__(None, None, None)
                self._profiler = None
                if self.record_lines and not self._lines_done:
                    from fade.hostwork.lines import LineRecorder

                    accelerator = self.device.split(":", 1)[0]
                    self._recorder = LineRecorder(None if accelerator == "cpu" else accelerator)
                    self._recorder.__enter__()

    def _stop_recorder(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        recorder, self._recorder = self._recorder, None
        self._lines_done = True
        if _get_current_dispatch_mode() is recorder:
            recorder.__exit__(None, None, None)
        self.lines = recorder.lines()

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        from fade.hostwork import hooks

        hooks.remove_step_listener(self._on_step)
        if self._recorder is not None:
            self._stop_recorder()
        if self._profiler is not None:  # the window did not complete: a partial active window still exports
            self._profiler.__exit__(None, None, None)
            self._profiler = None
        self._scratch.cleanup()
        needed = self.wait + self.warmup + 1
        if self.steps_seen == 0:
            self.problem = ("no step found: the code never called optimizer.step() or fade.step(), so the profiler's "
                            "schedule never advanced; call fade.step() at the end of each step")
        elif self._text is None or self.steps_seen < needed:
            self.problem = (f"only {self.steps_seen} step(s) found, the window needs at least {needed} "
                            f"(wait {self.wait} + warmup {self.warmup} + 1 active); run more steps or lower --wait/--warmup")
        else:
            self.capture = capture_from_text(self._text, device=self.device, activities=self._names,
                                             wait=self.wait, warmup=self.warmup, active=self.active,
                                             trace_path=self.trace_path)
            if self.steps_seen < self.wait + self.warmup + self.active:
                self.capture.warnings.append(f"the code ended after {self.steps_seen} steps: the active window is "
                                             "partial")
            if self.record_lines and not self._lines_done:
                self.capture.warnings.append("no step ran after the window: the user's lines were not recorded")
        self._text = None
        return None


def profile_script(command: list, *, device: str, wait: int = 1, warmup: int = 1, active: int = 3,
                   trace_path=None, dtype: Optional[str] = None) -> tuple:
    """Run `python SCRIPT ARGS` here (fade.hostwork.process.run_script, as `fade watch` runs one) under a
    StepProfiler. Returns (profiler, exit code, exit text); FadeUsageError when no window was profiled."""
    import torch
    from torch.profiler import ProfilerActivity

    from fade.hostwork.process import run_script

    _activities(torch, ProfilerActivity, device)  # a bad device is the caller's error, not the script's
    profiler = StepProfiler(device=device, wait=wait, warmup=warmup, active=active, trace_path=trace_path,
                            dtype=dtype, context={"command": list(command), "kind": "script"})
    exit_code, exit_text = run_script(command, profiler)
    return profiler, exit_code, exit_text


def profile_workload(model: str, *, mode: str = "train", variant: str = "default", batch: int = 32,
                     size: Optional[int] = None, device: str, wait: int = 2, warmup: int = 2, active: int = 3,
                     trace_path=None, measure_overhead: bool = True, quick: bool = False,
                     on_progress: Optional[Callable[[str], None]] = None, build: Optional[Callable] = None) -> dict:
    """Profile one model-bench case's step: the workload built as `fade bench models` builds it
    (zoo.workload.build_workload, step.runner.apply_config, StepRunner under step.config.pinned), the
    bench's checked steps run (step.runner.checked_step_count: they compile and warm the step, and move the
    weights as the bench's do), its learning rate frozen as for the bench's timed steps, then profile_steps
    with the bench's own timing of the unprofiled step (models.case.time_step with suite.FULL_TIMING, or
    QUICK_TIMING when `quick`, as `fade bench models --quick`), and one step under LineRecorder. `build()`, when
    given, returns the Workload instead (the tuner's in-process model object); `model` then only labels it.

    Returns {capture, lines, peak, workload, variant}: `peak` is the spec-table peak of the dtype the
    variant's GEMM/conv math runs in (models.case.peak_for_flops, as the bench's % of peak), decided from the
    trace's FLOPs by family, or None with the reason in its note."""
    import torch

    from fade.analyze.trace import collect_events, flops_by_kind
    from fade.hostwork.lines import LineRecorder
    from fade.measure.step.config import pinned
    from fade.measure.step.numerics import calibrate_batchnorm
    from fade.measure.step.runner import TIMED_LEARNING_RATE, WEIGHT_SEED, StepRunner, apply_config, checked_step_count
    from fade.measure.suites.models.case import device_facts, peak_for_flops, time_step
    from fade.measure.suites.models.suite import FULL_TIMING, QUICK_TIMING
    from fade.measure.suites.models.variants import parse_variant, run_as, skip_reason
    from fade.measure.zoo.workload import build_workload

    if mode not in ("train", "infer"):
        raise FadeUsageError(f"--mode {mode!r}: use train or infer")
    from torch.profiler import ProfilerActivity

    _activities(torch, ProfilerActivity, device)  # no such device, or no GPU profiler backend: one line, before any work
    parsed = parse_variant(variant)
    progress = on_progress or (lambda message: None)
    peaks, dtype_support = device_facts(device)
    reason = skip_reason(parsed, device, dtype_support, mode)
    if reason:
        raise FadeUsageError(f"variant {variant!r} cannot run on {device}: {reason}")
    parsed = run_as(parsed, device)  # as the bench: knobs this device ignores stay at their baselines
    training = mode == "train"
    progress(f"building {model} (batch {batch}) on {device}")
    torch.manual_seed(WEIGHT_SEED)
    workload = build() if build is not None else build_workload(model, batch, size, device)
    if not training:  # as the bench: BatchNorm statistics of the example batch (step.numerics.calibrate_batchnorm)
        calibrate_batchnorm(workload.model, workload.inputs)
    runnable = apply_config(workload, parsed)
    settings = QUICK_TIMING if quick else FULL_TIMING

    def bench_timing() -> tuple:
        timing, segments, _, gc_facts = time_step(runner, workload.samples, device, settings, quick=quick)
        return timing, {"method": "fade bench models' timing (fade.measure.suites.models.case.time_step, "
                                  f"{'QUICK' if quick else 'FULL'}_TIMING)", "timing_segments": segments, "gc": gc_facts}

    with pinned(parsed):
        runner = StepRunner(workload, runnable, parsed, training, device, track_finite=False)
        progress(f"running the bench's {checked_step_count(training, quick)} checked step(s) (compile, warm-up)")
        runner.checked_steps(checked_step_count(training, quick))
        runner.freeze_weights()
        capture = profile_steps(runner.step, device=device, wait=wait, warmup=warmup, active=active,
                                trace_path=trace_path, measure_overhead=measure_overhead,
                                time_unprofiled=bench_timing, on_progress=progress)
        opencl = _opencl_kernels(runner.step, device, active, progress)
        accelerator = device.split(":", 1)[0]
        with LineRecorder(None if accelerator == "cpu" else accelerator) as recorder:
            runner.step()
        _sync(torch, device)
    if parsed.compile_mode is not None:
        torch._dynamo.reset()
    flops = flops_by_kind(collect_events(capture.trace).cpu_ops)
    # attention's FLOPs are matmuls (Q K^T, P V): the bench's FlopCounterMode families count them as "matmul" too
    chosen = peak_for_flops({"conv": flops["convolution"], "matmul": flops["gemm"] + flops["attention"]}, parsed,
                            peaks, dtype_support)
    peak = None
    if peaks:
        peak = {"tflops": chosen["peak_tflops"], "dtype": chosen["peak_dtype"], "note": chosen["note"],
                "bandwidth_gbs": peaks.get("bandwidth_gbs"), "source": peaks.get("source")}
    return {
        "capture": capture, "lines": recorder.lines(), "peak": peak, "variant": parsed.record(), "opencl": opencl,
        "workload": {"model": model, "mode": mode, "batch": batch, "size": size, "samples": workload.samples,
                     "description": workload.description,
                     "timed_learning_rate": TIMED_LEARNING_RATE if training else None},
    }


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device.startswith("ocl"):
        import fade.ocl

        fade.ocl.synchronize()


def _opencl_kernels(step: Callable[[], None], device: str, steps: int, progress) -> Optional[dict]:
    """On an ocl device, `steps` more steps under fade.ocl.profile: each OpenCL command's device time from its
    profiling event (torch.profiler sees none of them); None on other devices."""
    if not device.startswith("ocl"):
        return None
    import fade.ocl

    progress(f"timing {steps} step(s)' OpenCL commands with profiling events")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    with fade.ocl.profile(index, steps=steps) as times:
        for _ in range(steps):
            step()
    return times.as_dict()


def summarize_capture(capture: ProfileCapture, *, lines: Optional[list] = None, peak: Optional[dict] = None,
                      context: Optional[dict] = None, opencl: Optional[dict] = None) -> dict:
    """The summary JSON of a capture: fade.analyze.profile.summarize_trace's to_dict() with the peak, the
    user's lines, and `capture` (schedule, overhead, trace path) and `context` (what was profiled) added."""
    from fade.analyze.profile import summarize_trace

    peak = peak or {}
    unprofiled_s = ((capture.unprofiled_timing or {}).get("stats") or {}).get("median_s") or None
    workload = (context or {}).get("workload") or {}
    tune_command = (f"fade tune {workload['model']} --mode {workload['mode']}"
                    if workload.get("model") and workload.get("mode") else None)
    summary = summarize_trace(capture.trace, peak_tflops=peak.get("tflops"), peak_dtype=peak.get("dtype"),
                              peak_bandwidth_gbs=peak.get("bandwidth_gbs"), peak_source=peak.get("source"),
                              host_lines=lines, step_s=unprofiled_s, tune_command=tune_command).to_dict()
    summary["capture"] = capture.to_dict()
    summary["step_time"] = step_times(summary, capture)
    summary["context"] = dict(context or {})
    if opencl:
        summary["opencl"] = opencl
        summary["notes"].append(f"opencl: {opencl['steps']} more step(s) timed with OpenCL profiling events, one "
                                f"row per kernel; the device was busy {opencl['device_ms']:.1f} ms of each "
                                f"{opencl['wall_ms']:.1f} ms step ({opencl['host_bound']:.0%} host-bound)")
    schedule = capture.schedule
    summary["notes"].append(f"schedule: {schedule['wait']} unprofiled and {schedule['warmup']} warm-up steps "
                            f"(compile, autotuning and first-call costs) ran before the {schedule['active']} "
                            "profiled steps and are outside the summary")
    if peak.get("note"):
        summary["notes"].append(f"MFU: {peak['note']}")
    if summary["device_timeline"] and not summary["total"]["flops"]["total"] and summary["total"]["busy_us"]:
        summary["notes"].append("no GEMM/conv host op in the window (a CUDA/HIP graph replays its kernels without "
                                "dispatching ops, so the trace has no shapes to count): FLOPs, TFLOP/s and MFU are "
                                "unknown here; take them from the eager profile or `fade bench models`")
    if lines:
        summary["notes"].append("host_lines: the user's lines of host reads, syncs and copies, recorded by "
                                "fade.hostwork's call sites during one step after the profiled window")
    summary["notes"].extend(capture.warnings)
    return summary


def step_times(summary: dict, capture: ProfileCapture) -> dict:
    """The step's time without the profiler and with it (device window, host span), and the profiler's
    overhead on each: the summary's `step_time`."""
    total = summary["total"]
    steps = max(1, total["steps"])
    unprofiled = capture.unprofiled_timing or {}
    unprofiled_s = (unprofiled.get("stats") or {}).get("median_s") or None
    window_s = total["window_us"] * 1e-6 / steps if total["window_us"] else None
    host_s = statistics.median(capture.profiled_step_s) if capture.profiled_step_s else None

    def overhead(profiled: Optional[float]) -> Optional[float]:
        return 100.0 * (profiled / unprofiled_s - 1.0) if profiled and unprofiled_s else None

    return {
        "unprofiled_s": unprofiled_s, "unprofiled_method": unprofiled.get("method"),
        "profiled_window_s": window_s, "profiled_host_span_s": host_s,
        "overhead_window_pct": overhead(window_s), "overhead_host_span_pct": overhead(host_s),
        "used_for_tflops": "unprofiled" if unprofiled_s else "profiled window",
        "note": ("step TFLOP/s and MFU use the unprofiled step time; the profiled window (mean per step) only "
                 "splits the step into busy and idle" if unprofiled_s else
                 "no unprofiled timing (--no-overhead, or a script's steps): TFLOP/s and MFU use the profiled "
                 "window, which includes the profiler's own cost"),
    }


def device_peak(device: str, dtype: Optional[str]) -> Optional[dict]:
    """The spec-table peak of `device` for `dtype` (fade.measure.session.device_truth_and_peaks), for a
    profile whose math dtype the caller names; None on the CPU or without a table row."""
    from fade.measure.session import device_truth_and_peaks

    _, peaks = device_truth_and_peaks(device)
    if not peaks:
        return None
    tflops = (peaks.get("tflops") or {}).get(dtype) if dtype else None
    note = None if tflops else (f"the spec table has no {dtype} peak for this device" if dtype else
                                "pass the dtype the step's math runs in (--dtype) for MFU")
    return {"tflops": tflops, "dtype": dtype, "note": note, "bandwidth_gbs": peaks.get("bandwidth_gbs"),
            "source": peaks.get("source")}
