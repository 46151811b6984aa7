"""Samples a GPU's clocks, power, temperature and throttle reasons in a background thread while a case runs.

Sources: NVML through `import pynvml` (the `nvidia-ml-py` package, extra `fade[nvidia]`) and AMD SMI
through `import amdsmi` (extra `fade[amd]`). Both are optional: without them, or on the CPU, the summary is
`{"available": false, "reason": ...}` and measuring goes on. Every reading is best effort: a field the
driver does not report is None, never an error.
"""

from __future__ import annotations

import statistics
import threading
import time
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

    return TelemetrySource("pynvml", read=read, close=lambda: _optional(pynvml.nvmlShutdown))


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

    return TelemetrySource("amdsmi", read=read, close=lambda: _optional(amdsmi.amdsmi_shut_down))


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
