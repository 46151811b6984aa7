"""The measuring process's view of its device: which device, what it supports, its peaks, and running a case.

One Session per process (the worker, or the caller's process when cases run in-process). It reads device
truth and peaks the doctor's way (`fade.analyze.devices` over an in-process snapshot, the spec table), the
stack fingerprint, and opens telemetry once; `execute_case` then turns one Case into one record.
"""

from __future__ import annotations

import gc
import dataclasses
import importlib
import os
import platform
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Optional

from fade.errors import FadeUsageError
from fade.measure.case import Case, CaseContext, CaseSkipped, torch_dtype
from fade.measure.fingerprint import stack_fingerprint
from fade.measure import ocldevice
from fade.results import make_record, now_iso
from fade.measure.telemetry import ContentionMonitor, TelemetrySampler, TelemetrySource, open_telemetry, with_contention

MAX_WARNINGS_PER_CASE = 10  # distinct warning messages kept in a record; more are repeats of a pattern
TRACEBACK_LINES = 20  # tail of a failing case's traceback kept in `error_detail`


@dataclass
class Session:
    device: str  # resolved torch device, "cuda:0" or "cpu"
    device_info: dict  # the record's `device`: device truth plus torch's view of the device
    peaks: Optional[dict]  # {"tflops": {dtype: TFLOP/s}, "bandwidth_gbs": float|None, "basis": str} or None
    stack: dict
    dtypes: dict  # dtype name -> None when supported here, else the reason it is not
    telemetry: TelemetrySource = field(default_factory=lambda: TelemetrySource("none", reason="not opened"))
    broken: bool = False  # a case left the device context unusable (a sticky CUDA error): start afresh

    def describe(self) -> dict:
        """What a worker reports to its parent once it is ready (JSON)."""
        return {
            "device": self.device,
            "device_info": self.device_info,
            "peaks": self.peaks,
            "stack": self.stack,
            "dtypes": self.dtypes,
            "telemetry": {"source": self.telemetry.name, "reason": self.telemetry.reason},
        }

    def close(self) -> None:
        self.telemetry.close()


def open_session(device_request: Optional[str]) -> Session:
    """Resolve the device, read its truth, peaks, dtypes and stack. FadeUsageError for a bad device."""
    device = resolve_device(device_request)
    device_info, peaks = device_truth_and_peaks(device)
    return Session(
        device=device,
        device_info=device_info,
        peaks=peaks,
        stack=stack_fingerprint(),
        dtypes=supported_dtypes(device, peaks),
        telemetry=open_telemetry(device, (device_info.get("torch") or {}).get("pci_bus_id")),
    )


def resolve_device(request: Optional[str]) -> str:
    """"cuda" -> "cuda:0"; None -> the first available accelerator, else "cpu". FadeUsageError if unusable.
    "ocl" / "ocl:N" registers fade.ocl in this process (ocldevice.resolve_ocl)."""
    if ocldevice.is_ocl(request):
        return ocldevice.resolve_ocl(request)
    import torch

    if request is None or request == "":
        for device_type in ("cuda", "xpu", "mps"):
            module = getattr(torch, device_type, None)
            if module is not None and _available(module):
                return f"{device_type}:0" if device_type != "mps" else "mps"
        return "cpu"
    try:
        device = torch.device(request)
    except (RuntimeError, ValueError) as error:
        known = "cpu, cuda, cuda:N, xpu, mps, ocl, ocl:N"
        raise FadeUsageError(f"unknown device {request!r} ({str(error).splitlines()[0]}); use one of {known}") from None
    if device.type == "cpu":
        return "cpu"
    module = getattr(torch, device.type, None)
    if module is None or not _available(module):
        raise FadeUsageError(
            f"device {request!r} is not available here (torch {torch.__version__} sees no {device.type} device)"
        )
    if device.type == "mps":
        return "mps"
    index = device.index if device.index is not None else 0
    count = module.device_count()
    if index >= count:
        raise FadeUsageError(f"device {request!r} does not exist: torch sees {count} {device.type} device(s)")
    return f"{device.type}:{index}"


def _available(module) -> bool:
    try:
        return bool(module.is_available())
    except Exception:
        return False


def device_truth_and_peaks(device: str):
    """(the record's `device` dict, peaks dict or None). Never raises: a failure leaves {"error": ...}.

    GPU peaks come from the device truth of an in-process snapshot (`fade.analyze.devices.torch_device_truth`,
    the doctor's spec table). The CPU has no peak.
    """
    device_type, _, index_text = device.partition(":")
    if device_type == "cpu":
        return _cpu_info(), None
    index = int(index_text or 0)
    if device_type == ocldevice.DEVICE_TYPE:
        return ocldevice.ocl_truth_and_peaks(index)
    info: dict = {}
    peaks = None
    try:
        from fade.analyze.devices import torch_device_truth
        from fade.collect.snapshot import collect_snapshot

        truth = torch_device_truth(collect_snapshot(torch="inprocess"), index)
        info = dict(truth.to_dict())
        peaks = peaks_to_dict(truth.peaks)
    except Exception as error:  # device truth is the lead's module; measuring goes on without it
        info = {"error": f"device_truth({index}) failed: {type(error).__name__}: {error}".splitlines()[0]}
    info["torch"] = _torch_device_properties(device_type, index)
    return info, peaks


def peaks_to_dict(peaks) -> Optional[dict]:
    if peaks is None:
        return None
    return {
        "tflops": {name: float(value) for name, value in dict(peaks.tflops or {}).items() if value},
        "bandwidth_gbs": None if peaks.bandwidth_gbs is None else float(peaks.bandwidth_gbs),
        "basis": getattr(peaks, "basis", None),  # "table" (a sourced row) or "computed" (units x clock)
        "source": getattr(peaks, "source", None),
    }


def _torch_device_properties(device_type: str, index: int) -> dict:
    try:
        import torch

        module = getattr(torch, device_type)
        properties = module.get_device_properties(index)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
    names = (
        "name",
        "major",
        "minor",
        "gcnArchName",
        "multi_processor_count",
        "total_memory",
        "L2_cache_size",
        "warp_size",
        "pci_bus_id",
    )
    found = {name: getattr(properties, name) for name in names if hasattr(properties, name)}
    pci = [getattr(properties, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(number, int) for number in pci):
        # torch gives three numbers; NVML and amd-smi take "domain:bus:device.function"
        found["pci_bus_id"] = f"{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}.0"
    plain = (int, float, str, bool, type(None))
    return {key: value if isinstance(value, plain) else str(value) for key, value in found.items()}


def _cpu_info() -> dict:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"type": "cpu", "name": name, "logical_cpus": os.cpu_count()}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def supported_dtypes(device: str, peaks: Optional[dict]) -> dict:
    """dtype name -> None if this device runs it, else a one-line reason.

    GPU support is probed by running a tiny op (fp8 through torch._scaled_mm), so no architecture list
    is needed; tf32 has no probe (fp32 runs either way), so it needs CUDA compute capability >= 8.0
    (Ampere introduced TF32) or, on ROCm, a tf32 peak in the spec table.
    """
    import torch

    device_type = device.split(":", 1)[0]
    if device_type == "cpu":
        return {
            "fp32": None,
            "fp16": None,
            "bf16": None,
            "tf32": "tf32 is a GPU tensor-core mode; the cpu has none",
            "fp8": "fp8 GEMM needs GPU fp8 tensor cores; the cpu has none (torch._scaled_mm there is a reference path)",
        }
    if device_type == ocldevice.DEVICE_TYPE:
        return ocldevice.ocl_dtypes(int(device.split(":")[1]))
    support = {"fp32": None}
    for name in ("fp16", "bf16"):
        support[name] = _probe(lambda: _tiny_matmul(torch, device, torch_dtype(name)), name, device)
    table_tflops = (peaks or {}).get("tflops") or {}
    if device_type != "cuda":
        support["tf32"] = f"tf32 is a CUDA/ROCm mode; {device_type} has none"
        support["fp8"] = f"fp8 GEMM is measured on CUDA/ROCm only, not {device_type}"
        return support
    if torch.version.hip is not None:
        support["tf32"] = None if "tf32" in table_tflops else "the spec table lists no tf32 peak for this GPU"
    else:
        major, _minor = torch.cuda.get_device_capability(device)
        support["tf32"] = None if major >= 8 else f"tf32 needs compute capability >= 8.0, this GPU is {major}.x"
    support["fp8"] = _probe(lambda: _tiny_scaled_mm(torch, device), "fp8", device)
    return support


def _probe(run, name: str, device: str) -> Optional[str]:
    try:
        run()
        return None
    except Exception as error:
        return f"{name} does not run on {device}: {str(error).splitlines()[0][:160]}"


def _tiny_matmul(torch, device: str, dtype) -> None:
    a = torch.randn(16, 16, device=device).to(dtype)
    (a @ a).sum().item()


def _tiny_scaled_mm(torch, device: str) -> None:
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no float8_e4m3fn/_scaled_mm")
    a = torch.randn(16, 16, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(16, 16, device=device).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=device)
    torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16).float().sum().item()


def case_record(case: Case, ctx: CaseContext, described: dict, *, status: str, started: str, started_clock: float,
                telemetry: dict, result=None, error: Optional[str] = None, error_detail: Optional[str] = None,
                warnings=()) -> dict:
    """make_record for `case`, run on the session `described` (Session.describe(), or {} when no worker
    started): its device, stack and peaks; the duration is the time since `started_clock` (monotonic)."""
    return make_record(
        case=case,
        run_id=ctx.run_id,
        torch_device=described.get("device") or ctx.device,
        status=status,
        started=started,
        finished=now_iso(),
        duration_s=time.monotonic() - started_clock,
        device=described.get("device_info") or {},
        stack=described.get("stack") or {},
        peaks=described.get("peaks"),
        telemetry=telemetry,
        result=result,
        error=error,
        error_detail=error_detail,
        warnings=warnings,
    )


def execute_case(case: Case, ctx: CaseContext, session: Session) -> dict:
    """Run one case in this process and return its record; exceptions become failure records."""
    started = now_iso()
    started_clock = time.monotonic()
    result = None
    status = "ok"
    error = error_detail = None
    caught_warnings: list = []
    sampler = TelemetrySampler(session.telemetry)
    contention = ContentionMonitor(processes=session.telemetry.processes)
    on_ocl = ocldevice.is_ocl(session.device)
    fallbacks_before = ocldevice.fallback_counts() if on_ocl else None
    try:
        function = getattr(importlib.import_module(case.module), case.function)
        with warnings.catch_warnings(record=True) as caught_warnings, sampler, contention:
            warnings.simplefilter("always")
            case_ctx = dataclasses.replace(ctx, timing={**ctx.timing, **case.timing}) if case.timing else ctx
            result = function(case_ctx, **case.params)
        if on_ocl and result is not None:  # ops that ran on the CPU for lack of an OpenCL kernel, this case's
            fallbacks = ocldevice.fallback_delta(fallbacks_before, ocldevice.fallback_counts())
            result = dataclasses.replace(result, extra={**result.extra, "ocl_fallbacks": fallbacks})
    except CaseSkipped as skipped:
        status, error = "skipped", str(skipped).splitlines()[0] if str(skipped) else "skipped"
        error_detail = str(skipped) if "\n" in str(skipped) else None
    except KeyboardInterrupt:
        raise
    except Exception as exception:
        status = "oom" if _is_out_of_memory(exception) else "error"
        error = f"{type(exception).__name__}: {exception}".splitlines()[0][:500]
        lines = traceback.format_exception(type(exception), exception, exception.__traceback__)
        error_detail = "".join(lines[-TRACEBACK_LINES:])
    finally:
        if not _release_memory(session.device, collect_cycles=status != "ok"):
            session.broken = True
    return case_record(case, ctx, session.describe(), status=status, started=started, started_clock=started_clock,
                       telemetry=with_contention(sampler.summary(), contention.summary()), result=result, error=error, error_detail=error_detail,
                       warnings=_distinct_messages(caught_warnings))


def _distinct_messages(caught: list) -> list:
    messages: list = []
    for warning in caught or []:
        text = f"{warning.category.__name__}: {warning.message}".splitlines()[0][:300]
        if text not in messages:
            messages.append(text)
        if len(messages) >= MAX_WARNINGS_PER_CASE:
            break
    return messages


OUT_OF_MEMORY_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")  # CUDA/HIP, c10 CPU, errno


def _is_out_of_memory(exception: BaseException) -> bool:
    """A device OOM, Python's MemoryError, or torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory")."""
    text = str(exception).lower()
    return (isinstance(exception, MemoryError) or type(exception).__name__ == "OutOfMemoryError"
            or any(marker in text for marker in OUT_OF_MEMORY_TEXT))


def _release_memory(device: str, *, collect_cycles: bool) -> bool:
    """Return cached device blocks so the next case starts with the device empty.

    A finished case's tensors are already freed by reference counting; a failed one's traceback frames
    may sit in reference cycles, so only then does a full gc run (it costs ~75 ms with torch loaded).
    False when the device no longer synchronizes: after an illegal address or a launch failure the CUDA
    context is unusable for the rest of the process.
    """
    if collect_cycles:
        gc.collect()
    if ocldevice.is_ocl(device):
        return ocldevice.synchronize_and_empty_cache()
    if device.startswith("cuda"):
        try:
            import torch

            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        except Exception:
            return False
    return True
