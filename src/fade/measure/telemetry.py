"""Samples a GPU's clocks, power, temperature and throttle reasons in a background thread while a case runs,
and measures how busy the host (and the GPU) was with other work during the case.

Sources: NVML through `import pynvml` (the `nvidia-ml-py` package, extra `fade[nvidia]`) and AMD SMI
through `import amdsmi` (extra `fade[amd]`). Both are optional: without them, or on the CPU, the summary is
`{"available": false, "reason": ...}` and measuring goes on. Every reading is best effort: a field the
driver does not report is None, never an error.

Contention (ContentionMonitor): /proc/stat's busy CPU time (user, nice, system, irq, softirq, steal) over
the case, less this process's own CPU time (os.times), is the CPU time other processes took; divided by
the case's wall time × the CPUs, it is their share of the machine. Above CONTENDED_OTHER_CPU_SHARE the
case is `contended`. On a GPU, another process holding a context on the device (NVML compute and
graphics processes, amdsmi's process list) makes it contended too (CONTENDED_GPU_OTHER_PROCESSES). The
run queue (/proc/loadavg, /proc/stat procs_running) is recorded alongside. Windows shorter than
CONTENTION_MIN_WINDOW_S are recorded but not judged: /proc/stat counts in clock ticks (10 ms).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Optional

SAMPLE_PERIOD_S = 0.05  # rocblas-bench's frequency monitor also samples every 50 ms: fine enough for a 100 ms case

# NVML clocks-event (throttle) reason bits, from nvml.h `nvmlClocksEventReason*` (formerly ThrottleReason).
NVML_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the clocks were pulled down under load. Idle, a user's clock setting, sync boost and
# display clocks are recorded but do not mark a figure as throttled.
SLOWDOWN_REASONS = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "amd_power_throttle",
        "amd_current_throttle",
        "amd_other_throttle",
    }
)
# AMD SMI `indep_throttle_status` groups 16 bits per cause (Linux amdgpu_smu.h SMU_THROTTLER_*_BIT ranges).
AMD_INDEPENDENT_THROTTLE_GROUPS = {0: "power", 16: "current", 32: "temperature", 48: "other"}


@dataclass(frozen=True)
class TelemetrySample:
    """One reading; None where the source does not report the field."""

    t_s: float
    sm_clock_mhz: Optional[float] = None  # SM (NVIDIA) or GFX (AMD) clock
    mem_clock_mhz: Optional[float] = None
    power_w: Optional[float] = None
    temperature_c: Optional[float] = None
    reasons: tuple = ()  # active clocks-event reasons, by name


@dataclass
class TelemetrySource:
    """An opened telemetry library for one device: `read()` returns one sample; `close()` releases it."""

    name: str  # "pynvml", "amdsmi" or "none"
    read: Optional[Callable[[], TelemetrySample]] = None
    reason: Optional[str] = None  # why `read` is None
    close: Callable[[], None] = field(default=lambda: None)
    processes: Optional[Callable[[], list]] = None  # pids holding a context on the device, where readable


def open_telemetry(device: str, pci_bus_id: Optional[str] = None) -> TelemetrySource:
    """Open pynvml or amdsmi for the torch device `device` ("cuda:0"); never raises."""
    device_type, _, index_text = device.partition(":")
    if device_type != "cuda":
        return TelemetrySource("none", reason=f"no GPU telemetry for a {device_type} device")
    index = int(index_text or 0)
    try:
        import torch

        is_rocm = torch.version.hip is not None
    except ImportError as error:
        return TelemetrySource("none", reason=f"torch not importable: {error}")
    opener = _open_amdsmi if is_rocm else _open_nvml
    try:
        return opener(index, pci_bus_id)
    except ImportError:
        package = "amdsmi" if is_rocm else "nvidia-ml-py"
        extra = "amd" if is_rocm else "nvidia"
        return TelemetrySource("none", reason=f"{package} is not installed (pip install 'torch-fade[{extra}]')")
    except Exception as error:  # a driver/library mismatch must not stop the measurement
        return TelemetrySource("none", reason=f"{type(error).__name__}: {error}".splitlines()[0])


class TelemetrySampler:
    """Reads `source` every `period_s` in a daemon thread between `__enter__` and `__exit__`.

    It reads once on entry and once on exit as well, so even a short case has two samples.
    """

    def __init__(self, source: TelemetrySource, *, period_s: float = SAMPLE_PERIOD_S):
        self.source = source
        self.period_s = period_s
        self.samples: list = []
        self.errors: list = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "TelemetrySampler":
        if self.source.read is not None:
            self._read_once()
            self._thread = threading.Thread(target=self._loop, name="fade-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._read_once()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._read_once()

    def _read_once(self) -> None:
        try:
            self.samples.append(self.source.read())
        except Exception as error:  # keep sampling; one failed read is not a failed case
            if len(self.errors) < 3:
                self.errors.append(f"{type(error).__name__}: {error}")

    def summary(self) -> dict:
        return summarize_samples(self.samples, source=self.source, errors=self.errors)


def summarize_samples(samples: list, *, source: TelemetrySource, errors: list = ()) -> dict:
    """The record's `telemetry` object: min/median/max per field and the union of throttle reasons."""
    if source.read is None:
        return {"available": False, "source": source.name, "reason": source.reason}
    if not samples:
        return {"available": False, "source": source.name, "reason": "; ".join(errors) or "no sample was read"}
    reasons_seen = sorted({reason for sample in samples for reason in sample.reasons})
    slowdown = [reason for reason in reasons_seen if reason in SLOWDOWN_REASONS]
    summary = {
        "available": True,
        "source": source.name,
        "samples": len(samples),
        "period_s": SAMPLE_PERIOD_S,
        "throttled": bool(slowdown),
        "throttle_reasons": slowdown,
        "reasons_seen": reasons_seen,
    }
    for name in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c"):
        values = [getattr(sample, name) for sample in samples if getattr(sample, name) is not None]
        summary[name] = (
            {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else None
        )
    if errors:
        summary["errors"] = list(errors)
    return summary


def _open_nvml(index: int, pci_bus_id: Optional[str]) -> TelemetrySource:
    import pynvml

    pynvml.nvmlInit()
    handle = None
    if pci_bus_id:  # CUDA_VISIBLE_DEVICES renumbers devices; the bus id does not
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
        except Exception:
            handle = None
    if handle is None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    reasons_getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
    )

    def read() -> TelemetrySample:
        mask = _optional(lambda: int(reasons_getter(handle)))
        reasons = tuple(name for bit, name in NVML_REASON_BITS.items() if mask is not None and mask & bit)
        return TelemetrySample(
            t_s=time.monotonic(),
            sm_clock_mhz=_optional(lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))),
            mem_clock_mhz=_optional(lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM))),
            power_w=_optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),  # mW -> W
            temperature_c=_optional(
                lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
            ),
            reasons=reasons,
        )

    def processes() -> list:
        found = []
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            found += [int(entry.pid) for entry in (_optional(lambda: getattr(pynvml, getter)(handle)) or [])]
        return sorted(set(found))

    return TelemetrySource("pynvml", read=read, close=lambda: _optional(pynvml.nvmlShutdown), processes=processes)


def _open_amdsmi(index: int, pci_bus_id: Optional[str]) -> TelemetrySource:
    import amdsmi

    amdsmi.amdsmi_init()
    handles = amdsmi.amdsmi_get_processor_handles()
    handle = None
    if pci_bus_id:
        for candidate in handles:
            bdf = _optional(lambda: str(amdsmi.amdsmi_get_gpu_device_bdf(candidate)))
            if bdf and bdf.lower().endswith(pci_bus_id.lower()[-7:]):
                handle = candidate
                break
    if handle is None:
        handle = handles[index]

    def read() -> TelemetrySample:
        metrics = _optional(lambda: amdsmi.amdsmi_get_gpu_metrics_info(handle)) or {}
        power = _number(metrics.get("current_socket_power")) or _number(metrics.get("average_socket_power"))
        return TelemetrySample(
            t_s=time.monotonic(),
            sm_clock_mhz=_number(metrics.get("current_gfxclk")) or _number(metrics.get("average_gfxclk_frequency")),
            mem_clock_mhz=_number(metrics.get("current_uclk")) or _number(metrics.get("average_uclk_frequency")),
            power_w=power,
            temperature_c=_number(metrics.get("temperature_hotspot")) or _number(metrics.get("temperature_edge")),
            reasons=_amd_reasons(metrics),
        )

    def processes() -> list:
        entries = _optional(lambda: amdsmi.amdsmi_get_gpu_process_list(handle)) or []
        pids = [entry.get("pid") if isinstance(entry, dict) else getattr(entry, "pid", None) for entry in entries]
        return sorted({int(pid) for pid in pids if isinstance(pid, int)})

    return TelemetrySource("amdsmi", read=read, close=lambda: _optional(amdsmi.amdsmi_shut_down), processes=processes)


def _amd_reasons(metrics: dict) -> tuple:
    """Throttle causes from `indep_throttle_status` (ASIC-independent bits); approximate by 16-bit group."""
    status = _number(metrics.get("indep_throttle_status"))
    if not status:
        return ()
    status = int(status)
    names = []
    for shift, group in AMD_INDEPENDENT_THROTTLE_GROUPS.items():
        if (status >> shift) & 0xFFFF:
            names.append("hw_thermal_slowdown" if group == "temperature" else f"amd_{group}_throttle")
    return tuple(names)



def _number(value) -> Optional[float]:
    """amdsmi reports missing fields as "N/A" or as all-ones sentinels; both become None."""
    if isinstance(value, (list, tuple)):
        value = next((item for item in value if _number(item) is not None), None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF):
        return None
    return float(value)


def _optional(read: Callable):
    try:
        return read()
    except Exception:
        return None


# -- contention: other work on the host and the device while a case ran ----------------------------------
CONTENDED_OTHER_CPU_SHARE = 0.25  # others took > 1/4 of all CPUs' time: a CPU figure, or a GPU's launch path, is off
CONTENDED_GPU_OTHER_PROCESSES = 1  # one other process with a context on the device already shares its SMs/CUs
CONTENTION_MIN_WINDOW_S = 0.2  # /proc/stat ticks are 10 ms: a shorter window is recorded but not judged
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat cpu: user nice system [idle iowait] irq softirq steal


@dataclass(frozen=True)
class HostReading:
    """One reading of the host: busy CPU seconds of all CPUs, this process's CPU seconds, the clock."""

    t_s: float
    busy_cpu_s: Optional[float]
    own_cpu_s: float
    cpus: int
    procs_running: Optional[int] = None
    load_1min: Optional[float] = None
    runnable: Optional[int] = None  # /proc/loadavg's fourth field, before the slash: runnable tasks now


class ProcReader:
    """Reads /proc (or a stand-in directory with the same files, for tests) and this process's CPU time."""

    def __init__(self, root="/proc", *, own_cpu_s: Optional[Callable[[], float]] = None,
                 clock: Callable[[], float] = time.monotonic, cpus: Optional[int] = None):
        self.root = Path(root)
        self.own_cpu_s = own_cpu_s or (lambda: sum(os.times()[:2]))
        self.clock = clock
        self.cpus = cpus or os.cpu_count() or 1

    def read(self) -> HostReading:
        busy = procs_running = None
        try:
            stat = (self.root / "stat").read_text(encoding="ascii", errors="replace").splitlines()
        except OSError:
            stat = []
        tick_s = 1.0 / clock_ticks()
        for line in stat:
            parts = line.split()
            if parts[:1] == ["cpu"]:
                values = [int(value) for value in parts[1:] if value.isdigit()]
                busy = sum(values[index] for index in BUSY_FIELDS if index < len(values)) * tick_s
            elif parts[:1] == ["procs_running"] and len(parts) > 1 and parts[1].isdigit():
                procs_running = int(parts[1])
        try:
            loadavg = (self.root / "loadavg").read_text(encoding="ascii").split()
        except OSError:
            loadavg = []
        load, runnable = _parsed(loadavg, 0, float), _parsed(loadavg[3].split("/") if len(loadavg) > 3 else [], 0, int)
        return HostReading(t_s=self.clock(), busy_cpu_s=busy, own_cpu_s=self.own_cpu_s(), cpus=self.cpus,
                           procs_running=procs_running, load_1min=load, runnable=runnable)


def _parsed(fields: list, index: int, kind):
    try:
        return kind(fields[index])
    except (IndexError, ValueError):
        return None


def clock_ticks() -> int:
    """SC_CLK_TCK: the jiffies per second /proc's CPU times count in (100 where it cannot be read)."""
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


class ContentionMonitor:
    """Reads the host at `__enter__` and `__exit__` (and the device's processes at exit); `summary()` is the
    record's `telemetry.contention` with the verdict. Never raises: an unreadable /proc gives a reason."""

    def __init__(self, reader: Optional[ProcReader] = None, *, processes: Optional[Callable[[], list]] = None,
                 own_pid: Optional[int] = None):
        self.reader = reader or ProcReader()
        self.processes = processes
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self.start: Optional[HostReading] = None
        self.end: Optional[HostReading] = None
        self.device_pids: Optional[list] = None

    def __enter__(self) -> "ContentionMonitor":
        self.start = _optional(self.reader.read)
        return self

    def __exit__(self, *exc_info) -> None:
        self.end = _optional(self.reader.read)
        if self.processes is not None:
            self.device_pids = _optional(self.processes)

    def summary(self) -> dict:
        return judge_contention(self.start, self.end, device_pids=self.device_pids, own_pid=self.own_pid)


def judge_contention(start: Optional[HostReading], end: Optional[HostReading], *,
                     device_pids: Optional[list] = None, own_pid: int = 0) -> dict:
    """The contention summary: what others took of the host (and device) between two readings, and whether
    that makes the case `contended` (thresholds CONTENDED_OTHER_CPU_SHARE, CONTENDED_GPU_OTHER_PROCESSES)."""
    summary: dict = {"available": False, "contended": False, "reasons": [], "source": "/proc/stat, os.times"}
    if device_pids is not None:
        # Inside a container NVML may report host pids, so this process may not be listed as itself: then
        # one listed process is taken to be this one.
        others = [pid for pid in device_pids if pid != own_pid]
        other_count = len(others) if own_pid in device_pids else max(0, len(device_pids) - 1)
        summary["gpu_processes"] = len(device_pids)
        summary["gpu_other_processes"] = other_count
        if other_count >= CONTENDED_GPU_OTHER_PROCESSES:
            summary["reasons"].append(f"{other_count} other process(es) on the device "
                                      f"(CONTENDED_GPU_OTHER_PROCESSES {CONTENDED_GPU_OTHER_PROCESSES})")
    if start is None or end is None or start.busy_cpu_s is None or end.busy_cpu_s is None:
        summary["reason"] = "/proc/stat not readable here"
    else:
        window_s = end.t_s - start.t_s
        own_s = max(0.0, end.own_cpu_s - start.own_cpu_s)
        other_s = max(0.0, (end.busy_cpu_s - start.busy_cpu_s) - own_s)
        summary.update({
            "available": True, "window_s": window_s, "cpus": end.cpus, "own_cpu_s": own_s, "other_cpu_s": other_s,
            "other_cpu_share": other_s / (window_s * end.cpus) if window_s > 0 else None,
            "procs_running": [start.procs_running, end.procs_running], "load_1min": end.load_1min,
            "threshold_other_cpu_share": CONTENDED_OTHER_CPU_SHARE,
        })  # fmt: skip
        share = summary["other_cpu_share"]
        if window_s < CONTENTION_MIN_WINDOW_S or share is None:
            summary["judged"] = False
            summary["reason"] = f"window {window_s:.3f} s is below CONTENTION_MIN_WINDOW_S {CONTENTION_MIN_WINDOW_S:g} s"
        else:
            summary["judged"] = True
            if share > CONTENDED_OTHER_CPU_SHARE:
                summary["reasons"].append(
                    f"other processes used {100 * share:.0f}% of the {end.cpus} CPUs' time "
                    f"(CONTENDED_OTHER_CPU_SHARE {100 * CONTENDED_OTHER_CPU_SHARE:.0f}%)"
                )
    summary["contended"] = bool(summary["reasons"])
    return summary


def with_contention(telemetry: dict, contention: dict) -> dict:
    """The record's telemetry with `contention` added and the verdict lifted to `contended` and
    `contention_reasons`, beside `throttled` and `throttle_reasons`."""
    return {**telemetry, "contention": contention, "contended": contention["contended"],
            "contention_reasons": list(contention["reasons"])}
