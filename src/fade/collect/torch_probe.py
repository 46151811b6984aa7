"""Ask the installed torch what it was built for and what devices its runtime sees.

Run in a child process by default (`python -m fade.collect.torch_probe` prints JSON): importing torch
and initializing a GPU runtime can crash or hang on a broken driver, and the doctor must survive both.
Also callable in-process (`probe_torch()`) where the caller already runs torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

TORCH_PROBE_TIMEOUT_S = 120.0  # cold import of a ROCm wheel from a slow disk plus 8-GPU init


def _device(torch, index: int) -> dict:
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    pci_bus_id = None
    if isinstance(bus, int):
        pci_bus_id = (f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:"
                      f"{getattr(props, 'pci_device_id', 0):02x}.0")
    return {
        "index": index, "name": props.name, "gcnArchName": getattr(props, "gcnArchName", None),
        "major": props.major, "minor": props.minor,
        "multi_processor_count": props.multi_processor_count,
        "warp_size": getattr(props, "warp_size", None), "total_memory": props.total_memory,
        "is_integrated": getattr(props, "is_integrated", None),
        "L2_cache_size": getattr(props, "L2_cache_size", None), "pci_bus_id": pci_bus_id,
    }


def _arch_list(torch) -> list[str]:
    arches = torch.cuda.get_arch_list()
    if not arches:  # empty whenever the runtime is unavailable; the build flags still tell (pytorch#80498)
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
        arches = flags.split() if flags else []
    return list(arches)


def aotriton_library(torch) -> dict | None:
    """ROCm builds: the AOTriton library torch links ({"library": "libaotriton_v2.so.0.10.0", "version": "0.10.0"},
    read from the file name in torch/lib: ROCm/legacy-rocm-build#5404), None elsewhere or when absent."""
    if not getattr(torch.version, "hip", None):
        return None
    import pathlib
    import re

    names = sorted(p.name for p in (pathlib.Path(torch.__file__).parent / "lib").glob("libaotriton_v2.so*"))
    versioned = [n for n in names if re.search(r"\.so\.\d+\.\d+", n)]
    if not names:
        return None
    name = max(versioned, key=len) if versioned else names[0]
    match = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)", name)
    return {"library": name, "version": match.group(1) if match else None}


def probe_torch() -> dict | None:
    """The `torch` section of a snapshot, or None when torch cannot be imported."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - any import failure means "no usable torch"
        return None
    info = {"version": torch.__version__, "hip": getattr(torch.version, "hip", None),
            "cuda": torch.version.cuda, "available": False, "device_count": 0, "arch_list": [],
            "cudnn_version": None, "backends": {}, "devices": [], "warnings": [], "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            info["available"] = bool(torch.cuda.is_available())
            info["device_count"] = int(torch.cuda.device_count()) if info["available"] else 0
            info["arch_list"] = _arch_list(torch)
            info["backends"] = {
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                "cudnn_enabled": bool(torch.backends.cudnn.enabled),
            }
            info["cudnn_version"] = torch.backends.cudnn.version() if info["available"] else None
            info["devices"] = [_device(torch, i) for i in range(info["device_count"])]
            aotriton = aotriton_library(torch)
            if aotriton:
                info["aotriton"] = aotriton
        except Exception as exc:  # noqa: BLE001 - keep what was gathered; the doctor explains the rest
            info["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    info["warnings"] = sorted({str(w.message).strip().splitlines()[0] for w in caught})
    return info


def probe_torch_static() -> dict | None:
    """What the wheel was built for, without starting the GPU runtime (so env set afterwards still works).

    `import torch` does not initialize HIP/CUDA; `get_arch_list()` would, so read the build flags instead.
    """
    try:
        import torch
    except Exception:  # noqa: BLE001
        return None
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
    return {"version": torch.__version__, "hip": getattr(torch.version, "hip", None),
            "cuda": torch.version.cuda, "available": False, "device_count": 0,
            "arch_list": flags.split() if flags else [], "cudnn_version": None, "backends": {},
            "devices": [], "warnings": [], "error": "static probe: GPU runtime deliberately not started"}


def probe_torch_subprocess(timeout_s: float = TORCH_PROBE_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """→ (torch section, None) or (None, reason the probe failed)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    try:
        proc = subprocess.run([sys.executable, "-m", "fade.collect.torch_probe"], capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return None, f"torch probe timed out after {timeout_s:g} s (GPU runtime hung during init?)"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"torch probe died with exit {proc.returncode}: {tail}"
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return None, "torch probe printed no JSON"
    if result is None:
        return None, "torch is not importable in this Python"
    return result, None


if __name__ == "__main__":
    print(json.dumps(probe_torch()))
