"""The device fingerprint a tuning profile and cache are keyed by: which GPU, and which stack drives it.

Identity (backend, name, arch) says whether a profile belongs to this device at all; the stack (torch,
CUDA/HIP, cuDNN/MIOpen, driver) says whether tuned results (TunableOp CSVs, the MIOpen user DB, compile
caches) are still valid (fade.device_cache: IDENTITY_FIELDS, STACK_FIELDS, identity_hash, differences). Read
from torch's getters and the kernel driver's version file, in the process that tunes; `device_fingerprint` is
the only function here that imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

# identity, stack, identity_hash and differences live with the cache directory they key (a leaf fade.ocl reads too)
from fade.device_cache import differences  # noqa: F401 - device_facts.differences, for the tuning file

DRIVER_VERSION_FILES = {  # the kernel module's own version: what the user-space runtime talks to
    "cuda": "/proc/driver/nvidia/version",
    "rocm": "/sys/module/amdgpu/version",
}


def device_fingerprint(device: str = "cuda", *, read_file=None) -> dict:
    """{backend, name, arch, torch, cuda, hip, cudnn, miopen, driver} of torch device `device`."""
    import platform

    import torch

    device_type = device.split(":", 1)[0]
    is_rocm = torch.version.hip is not None
    backend = "cpu"
    name, arch = platform.processor() or platform.machine(), platform.machine()
    if device_type == "cuda" and torch.cuda.is_available():
        backend = "rocm" if is_rocm else "cuda"
        properties = torch.cuda.get_device_properties(device)
        name = properties.name
        arch = getattr(properties, "gcnArchName", None) if is_rocm else f"sm_{properties.major}{properties.minor}"
        arch = (arch or "").split(":", 1)[0]  # "gfx942:sramecc+:xnack-" -> "gfx942"
    try:
        library = torch.backends.cudnn.version() if backend != "cpu" else None
    except Exception:  # noqa: BLE001 - no cuDNN/MIOpen in this build
        library = None
    return {
        "backend": backend,
        "name": name,
        "arch": arch,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cudnn": None if is_rocm else library,
        "miopen": library if is_rocm else None,
        "driver": driver_version(backend, read_file=read_file),
    }


def driver_version(backend: str, *, read_file=None) -> Optional[str]:
    """The first line of the driver's version file, or None (CPU, or no such file)."""
    path = DRIVER_VERSION_FILES.get(backend)
    if path is None:
        return None
    read_file = read_file or (lambda name: Path(name).read_text(encoding="utf-8", errors="replace"))
    try:
        return read_file(path).strip().splitlines()[0][:200]
    except (OSError, IndexError):
        return None


def static_fingerprint(environ: Optional[dict] = None, *, snapshot: Optional[dict] = None) -> dict:
    """The fingerprint without starting the GPU runtime (fade's static snapshot: sysfs, the wheel's build
    info), for applying a profile before the first torch.cuda call. cuDNN/MIOpen versions read as None."""
    from fade.analyze.devices import device_truths
    from fade.collect.snapshot import collect_snapshot

    if snapshot is None:
        snapshot = collect_snapshot(torch="static", environ=dict(environ) if environ is not None else None, run_tools=False)
    torch_facts = snapshot.get("torch") or {}
    backend = "rocm" if torch_facts.get("hip") else ("cuda" if torch_facts.get("cuda") else "cpu")
    vendor = {"rocm": "amd", "cuda": "nvidia"}.get(backend)
    truth = next((t for t in device_truths(snapshot) if t.vendor == vendor), None) if vendor else None
    if truth is None:
        backend = "cpu"
    return {
        "backend": backend,
        "name": truth.name if truth else None,
        "arch": truth.arch if truth else None,
        "torch": torch_facts.get("version"),
        "cuda": torch_facts.get("cuda"),
        "hip": torch_facts.get("hip"),
        "cudnn": None,
        "miopen": None,
        "driver": driver_version(backend),
    }


def device_mismatch(recorded: dict, current: dict) -> list:
    """Differences that make a profile another device's: backend and arch (the name where an arch is
    unknown; sysfs and torch spell names differently, so names alone decide only then)."""
    fields = ["backend", "arch"]
    if not recorded.get("arch") or not current.get("arch"):
        fields = ["backend", "name"]
    return [
        f"{name} {recorded.get(name)!r} here {current.get(name)!r}"
        for name in fields
        if recorded.get(name) != current.get(name) and current.get(name) is not None
    ]
