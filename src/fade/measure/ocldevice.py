"""The measuring session's view of an `ocl:N` device (fade.ocl): resolving it, its record, dtypes and peaks, and
the CPU-fallback count a case leaves behind.

fade.ocl names torch's PrivateUse1 device "ocl" once per process, so resolving `ocl` registers it in the
measuring process (the worker). Device facts come from fade.ocl.devices()[N] (OpenCL's own queries); peaks
come from the doctor's spec table (analyze.specs) when a row's name matches the OpenCL device name (NVIDIA's
OpenCL reports the marketing name, "NVIDIA H100 80GB HBM3"; AMD's reports the gfx codename, which no row
matches; a CPU driver such as PoCL matches none): only the fp32 peak and the memory bandwidth are kept,
because OpenCL C has no tensor-core path and the table's fp64/fp16 figures are tensor rates.
"""

from __future__ import annotations

from typing import Optional

from fade.errors import FadeUsageError

DEVICE_TYPE = "ocl"
OCL_PEAK_DTYPES = ("fp32",)  # the table's fp32 is the vector (CUDA-core / shader) rate OpenCL C can reach


def is_ocl(device: Optional[str]) -> bool:
    return bool(device) and device.split(":", 1)[0] == DEVICE_TYPE


def resolve_ocl(request: str) -> str:
    """"ocl" / "ocl:N" -> "ocl:N", with fade.ocl registered in this process. FadeUsageError (one line) when
    pyopencl is missing, there is no OpenCL platform or device N, or PrivateUse1 already has another name."""
    device = check_ocl_index(request)
    try:
        import fade.ocl as ocl

        ocl.register()
    except (ImportError, RuntimeError) as error:  # fade.ocl needs numpy; OclError: PrivateUse1 taken
        raise unavailable(request, error) from None
    return device


def check_ocl_index(request: str) -> str:
    """"ocl" / "ocl:N" -> "ocl:N" when fade.ocl sees device N, without registering it in this process (the work
    runs in children). FadeUsageError (one line) otherwise."""
    _, _, index_text = request.partition(":")
    if index_text and not index_text.isdigit():
        raise FadeUsageError(f"unknown device {request!r}: use ocl or ocl:N (N an OpenCL device index)")
    index = int(index_text or 0)
    try:
        import fade.ocl as ocl

        count = len(ocl.devices())
    except (ImportError, RuntimeError) as error:  # no pyopencl, torch or numpy; OclError: no platform
        raise unavailable(request, error) from None
    if index >= count:
        raise FadeUsageError(f"device {request!r} does not exist: fade.ocl sees {count} OpenCL device(s)")
    return f"{DEVICE_TYPE}:{index}"


def unavailable(request: str, error: Exception) -> FadeUsageError:
    """The one-line error for an ocl device this process cannot use."""
    if isinstance(error, ImportError):
        return FadeUsageError(f"device {request!r} is not available here: fade.ocl cannot be imported ({error}); "
                              "pip install 'fade[ocl]'")
    return FadeUsageError(f"device {request!r} is not available here: {str(error).splitlines()[0]}")


def ocl_truth_and_peaks(index: int) -> tuple:
    """(the record's `device` dict, peaks dict or None) for ocl:index. Never raises."""
    try:
        import fade.ocl as ocl

        info = ocl.devices()[index].as_dict()
    except Exception as error:  # the session opened, so this is unexpected; measuring goes on without it
        return {"type": DEVICE_TYPE, "error": f"fade.ocl.devices()[{index}]: {type(error).__name__}: {error}"
                .splitlines()[0]}, None
    record = {"type": DEVICE_TYPE, **info}
    peaks, record["peaks_note"] = peaks_for_ocl(info["name"])
    try:  # whether tuned CLBlast parameters apply to this run's GEMMs (fade tune --device ocl --pretune)
        record["clblast_tuning"] = ocl.clblast_tuning(index)
    except Exception as error:  # noqa: BLE001 - the record goes on without it
        record["clblast_tuning"] = {"applied": False, "reason": f"{type(error).__name__}: {error}".splitlines()[0]}
    return record, peaks


def peaks_for_ocl(name: str) -> tuple:
    """(peaks dict or None, a note saying where they come from or why there are none)."""
    from fade.analyze.specs import peaks_for

    found = peaks_for(name)  # by name only: a table row, or None (no arch given, so nothing is computed)
    if found is None:
        return None, f"no spec-table row matches the OpenCL device name {name!r}: no peaks"
    tflops = {dtype: float(value) for dtype, value in found.tflops.items() if dtype in OCL_PEAK_DTYPES and value}
    peaks = {"tflops": tflops, "bandwidth_gbs": found.bandwidth_gbs, "basis": found.basis, "source": found.source}
    return peaks, (f"{found.explanation} matched by name; fp32 and bandwidth only (OpenCL C has no tensor-core "
                   "path, and the table's fp64/fp16 figures are tensor rates)")


def ocl_dtypes(index: int) -> dict:
    """dtype name -> None when fade.ocl computes it on ocl:index, else the reason it does not."""
    import fade.ocl as ocl

    device_info = ocl.devices()[index].as_dict()
    name = device_info["name"]
    return {
        "fp32": None,
        "fp64": None if device_info.get("fp64") else f"{name} lacks cl_khr_fp64: no float64 on ocl",
        "fp16": None if device_info.get("fp16") else
        f"{name} lacks cl_khr_fp16: fade.ocl refuses float16 tensors there",
        "bf16": "fade.ocl stores bfloat16 but computes it through the CPU fallback: not a device measurement",
        "tf32": "tf32 is a CUDA/ROCm tensor-core mode; OpenCL has none",
        "fp8": "fp8 GEMM needs tensor cores and torch._scaled_mm; fade.ocl has neither",
    }


def fallback_counts() -> dict:
    """fade.ocl's per-op CPU-fallback counts so far in this process."""
    import fade.ocl as ocl

    return ocl.fallback_counts()


def fallback_delta(before: dict, after: dict) -> dict:
    """{"total": n, "ops": {op: n}}: the fallbacks between two fallback_counts() readings."""
    ops = {op: count - before.get(op, 0) for op, count in after.items() if count - before.get(op, 0) > 0}
    ops = dict(sorted(ops.items(), key=lambda item: (-item[1], item[0])))
    return {"total": sum(ops.values()), "ops": ops}


def synchronize_and_empty_cache() -> bool:
    """After a case: wait for the queue and return cached buffers; False when the device no longer syncs."""
    try:
        import fade.ocl as ocl

        ocl.synchronize()
        ocl.empty_cache()
    except Exception:
        return False
    return True
