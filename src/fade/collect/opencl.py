"""Collect the OpenCL picture for the snapshot's optional `opencl` section: ICD files, the loader, platforms,
devices (pyopencl in a child process when importable, else `clinfo --raw`), and CLBlast."""

from __future__ import annotations

import ctypes.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Run in a child process: enumerating OpenCL loads every vendor's driver into the process that does it.
_PYOPENCL_PROBE = r"""
import json, pyopencl as cl
out = []
try:
    platforms = cl.get_platforms()
except cl.Error as error:
    platforms, out = [], str(error)
for p in platforms:
    devices = []
    for d in p.get_devices():
        ext = d.extensions.split()
        kind = "gpu" if d.type & cl.device_type.GPU else "cpu" if d.type & cl.device_type.CPU else (
            "accelerator" if d.type & cl.device_type.ACCELERATOR else "other")
        devices.append({"name": d.name.strip(), "vendor": d.vendor.strip(), "kind": kind,
                        "opencl_version": d.version.strip(), "driver_version": d.driver_version.strip(),
                        "compute_units": d.max_compute_units, "clock_mhz": d.max_clock_frequency,
                        "global_memory_bytes": d.global_mem_size, "fp16": "cl_khr_fp16" in ext,
                        "fp64": "cl_khr_fp64" in ext})
    out.append({"name": p.name.strip(), "vendor": p.vendor.strip(), "version": p.version.strip(),
                "devices": devices})
print(json.dumps(out))
"""
_CLINFO_KINDS = {"CL_DEVICE_TYPE_GPU": "gpu", "CL_DEVICE_TYPE_CPU": "cpu", "CL_DEVICE_TYPE_ACCELERATOR": "accelerator"}
_CLINFO_FIELDS = {"CL_DEVICE_NAME": ("name", str), "CL_DEVICE_VENDOR": ("vendor", str),
                  "CL_DEVICE_VERSION": ("opencl_version", str), "CL_DRIVER_VERSION": ("driver_version", str),
                  "CL_DEVICE_MAX_COMPUTE_UNITS": ("compute_units", int),
                  "CL_DEVICE_MAX_CLOCK_FREQUENCY": ("clock_mhz", int),
                  "CL_DEVICE_GLOBAL_MEM_SIZE": ("global_memory_bytes", int)}
_CLINFO_LINE = re.compile(r"^\[(?P<tag>[^/\]]+)/(?P<index>[^\]]+)\]\s+(?P<key>CL_\w+)\s+(?P<value>.*)$")


def parse_clinfo_raw(text: str) -> list[dict]:
    """Platforms and their devices from `clinfo --raw` output (device lines are tagged [PLATFORM/N])."""
    platforms: dict[str, dict] = {}
    for line in text.splitlines():
        match = _CLINFO_LINE.match(line.strip())
        if not match:
            continue
        tag, index, key, value = match["tag"], match["index"], match["key"], match["value"].strip()
        platform = platforms.setdefault(tag, {"name": "", "vendor": "", "version": "", "devices": {}})
        if index == "*":
            if key in ("CL_PLATFORM_NAME", "CL_PLATFORM_VENDOR", "CL_PLATFORM_VERSION"):
                platform[key.split("_")[-1].lower()] = value
            continue
        device = platform["devices"].setdefault(index, {"fp16": False, "fp64": False})
        if key in _CLINFO_FIELDS:
            name, kind = _CLINFO_FIELDS[key]
            try:
                device[name] = kind(value.split()[0]) if kind is int else value
            except (ValueError, IndexError):
                continue
        elif key == "CL_DEVICE_TYPE":
            device["kind"] = next((k for t, k in _CLINFO_KINDS.items() if t in value), "other")
        elif key == "CL_DEVICE_EXTENSIONS":
            extensions = value.split()
            device["fp16"], device["fp64"] = "cl_khr_fp16" in extensions, "cl_khr_fp64" in extensions
    found = [dict(p, devices=list(p["devices"].values())) for p in platforms.values()]
    return [p for p in found if p["name"] or p["devices"]]


def _probe_pyopencl(timeout: float) -> tuple[list | None, str | None]:
    try:
        done = subprocess.run([sys.executable, "-c", _PYOPENCL_PROBE], capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"pyopencl probe: {error}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"pyopencl probe failed: {last}"
    result = json.loads(done.stdout)
    if isinstance(result, str):
        return [], f"no OpenCL platform: {result}"
    return result, None


def _probe_clinfo(timeout: float) -> tuple[list | None, str | None]:
    if shutil.which("clinfo") is None:
        return None, "neither pyopencl nor clinfo is installed"
    try:
        done = subprocess.run(["clinfo", "--raw"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"clinfo: {error}"
    return parse_clinfo_raw(done.stdout), None


def _has_pyopencl() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyopencl") is not None


def collect_opencl(root: str = "/", timeout: float = 30.0) -> dict:
    """The snapshot's `opencl` section (docs/snapshot.md)."""
    vendors = Path(root) / "etc/OpenCL/vendors"
    icd_files = sorted(path.name for path in vendors.glob("*.icd")) if vendors.is_dir() else []
    section = {"icd_files": icd_files, "loader": ctypes.util.find_library("OpenCL") is not None,
               "clblast": _has_clblast(), "pyopencl": _has_pyopencl(),
               "source": None, "platforms": [], "error": None}
    if section["pyopencl"]:
        platforms, error = _probe_pyopencl(timeout)
        section["source"] = "pyopencl"
    else:
        platforms, error = _probe_clinfo(timeout)
        section["source"] = "clinfo" if platforms is not None else None
    section["platforms"] = platforms or []
    section["error"] = error
    return section


def _has_clblast() -> bool:
    """Whether the dynamic loader finds CLBlast, as fade.ocl will load it: dlopen honours LD_LIBRARY_PATH, which
    find_library's ldconfig lookup does not (a CLBlast unpacked beside the user's, as on the H100 machine)."""
    for name in ("libclblast.so.1", "libclblast.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return ctypes.util.find_library("clblast") is not None
