"""Collect a schema-v1 snapshot of the live system, and load/validate a saved one (docs/snapshot.md).

The doctor never looks at the live system directly: it analyzes a snapshot, so `fade doctor` and
`fade doctor --snapshot FILE` run the same analysis on the same data.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import platform
from pathlib import Path

from fade.version import __version__
from fade.collect import system, tools
from fade.errors import FadeUsageError
from fade.kfd import KFD_PROPERTY_MAX
from fade.reading import parse_json, read_text

SCHEMA_VERSION = 1
SNAPSHOT_MAX_BYTES = 16 * 2**20  # a snapshot of an 8-GPU host is ~100 KB; anything near this is not one


def _section(snapshot: dict, errors: dict, key: str, probe, default):
    try:
        snapshot[key] = probe()
    except Exception as exc:  # noqa: BLE001 - a probe failure is data, never a crash
        snapshot[key] = default
        errors[key] = f"{type(exc).__name__}: {exc}".splitlines()[0]


def collect_snapshot(*, torch="subprocess", root: str = "/", environ: dict | None = None,
                     run_tools: bool = True, probe_cache: bool = False) -> dict:
    """Describe this machine. `torch`: "subprocess" (safe default), "inprocess", "static", "skip", or a
    callable returning (torch section, failure reason).

    "static" reads only what the wheel was built for, without starting the GPU runtime: that is what
    `apply_fade_patches()` uses, since env it sets afterwards must still reach the runtime.
    """
    snap: dict = {"schema_version": SCHEMA_VERSION, "fade_version": __version__,
                  "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "source": "live", "os": system.os_info(), "python": platform.python_version()}
    errors: dict = {}
    snap["env"] = system.gpu_env(environ)
    # the tools and the torch probe are both child processes of a second or so: run them side by side
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    tools_future = pool.submit(tools.collect_tools) if run_tools else None
    _section(snap, errors, "pci", lambda: system.pci_devices(root), [])
    _section(snap, errors, "kfd_nodes", lambda: system.kfd_nodes(root), [])
    _section(snap, errors, "device_files", lambda: system.device_files(root), {})
    _section(snap, errors, "groups", system.user_groups, [])
    _section(snap, errors, "user", system.user_info, {})
    _section(snap, errors, "rocm", lambda: system.rocm_install(root, environ), None)
    _section(snap, errors, "mounts",
             lambda: system.filesystem_types(system.miopen_paths(environ), root), {})
    _section(snap, errors, "memory", lambda: system.memory_info(root), {})
    if callable(torch):  # a caller-supplied probe, e.g. the doctor's probe-and-measure child
        snap["torch"], reason = torch()
        if reason:
            errors["torch"] = reason
    elif torch == "subprocess":
        snap["torch"], reason = _torch_subprocess_cached(snap, environ) if probe_cache else _torch_subprocess()
        if reason:
            errors["torch"] = reason
    elif torch == "inprocess":
        from fade.collect.torch_probe import probe_torch

        _section(snap, errors, "torch", probe_torch, None)
        if snap["torch"] is None:
            errors.setdefault("torch", "torch is not importable in this Python")
    elif torch == "static":
        from fade.collect.torch_probe import probe_torch_static

        _section(snap, errors, "torch", probe_torch_static, None)
    else:
        snap["torch"] = None
        errors["torch"] = "not probed (collected without starting a GPU runtime)"
    if run_tools:  # OpenCL platforms and devices, for fade.ocl (an optional section)
        from fade.collect.opencl import collect_opencl

        _section(snap, errors, "opencl", lambda: collect_opencl(root), None)
        from fade.collect.topology import collect_topology  # GPU-to-GPU links, for the dist rules

        _section(snap, errors, "topology", lambda: collect_topology(root, environ=environ), None)
    if tools_future is not None:
        snap["tools"], tool_errors = tools_future.result()
        errors.update(tool_errors)
    else:
        snap["tools"] = {name: None for name in tools.TOOL_COMMANDS}
    pool.shutdown()
    snap["errors"] = errors
    return snap


def _torch_subprocess():
    from fade.collect.torch_probe import probe_torch_subprocess

    return probe_torch_subprocess()


def _torch_subprocess_cached(snap: dict, environ: dict | None):
    from fade.collect import probe_cache

    key = probe_cache.probe_key(snap)
    warnings: list = []  # a corrupt cache entry set aside: one line the doctor prints
    entry = probe_cache.load(key, environ, warnings=warnings) if key else None
    if entry is not None:
        saved = datetime.datetime.fromtimestamp(entry["saved_at"], datetime.timezone.utc)
        snap["probe"] = {"torch": "cached", "cached_at": saved.isoformat(timespec="seconds")}
        return entry["torch"], None
    section, reason = _torch_subprocess()
    if key and section is not None and not reason:
        probe_cache.save(key, section, environ)
    snap["probe"] = {"torch": "live", **({"warning": warnings[0]} if warnings else {})}
    return section, reason


def snapshot_text(snapshot: dict) -> str:
    """The snapshot as the indented JSON text FADE writes."""
    return json.dumps(snapshot, indent=2, sort_keys=False) + "\n"


def save_snapshot(snapshot: dict, path: str | Path) -> None:
    from fade.files import atomic_write_text

    atomic_write_text(path, snapshot_text(snapshot))


# ---- validation: what a reader may rely on. Anything beyond these keys is optional. ----

_TOP = {"schema_version": int, "os": dict, "env": dict, "pci": list, "kfd_nodes": list,
        "device_files": dict, "groups": list, "tools": dict}
_TOP_NULLABLE = {"torch": dict, "rocm": dict}
_TOP_OPTIONAL = {"probe": dict, "mounts": dict, "memory": dict, "errors": dict, "user": dict, "source": str,
                 "created": str, "fade_version": str, "python": str, "opencl": dict, "topology": dict}
_TORCH = {"version": str, "available": bool, "device_count": int, "arch_list": list, "devices": list}
_TORCH_NULLABLE = {"hip": str, "cuda": str, "cudnn_version": int, "error": str, "backends": dict,
                   "warnings": list}
_DEVICE = {"index": int, "name": str, "major": int, "minor": int, "multi_processor_count": int,
           "total_memory": int}
_DEVICE_NULLABLE = {"gcnArchName": str, "warp_size": int, "is_integrated": int, "L2_cache_size": int,
                    "pci_bus_id": str}


def _short_value(value) -> str:
    text = _type_name(value) if not isinstance(value, int) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(value) -> str:
    return "null" if value is None else type(value).__name__


def _check(obj: dict, where: str, required: dict, nullable: dict, optional: dict | None = None):
    for key, kind in required.items():
        if key not in obj:
            raise FadeUsageError(f"{where}: missing key '{key}'")
        _check_type(obj[key], kind, f"{where}.{key}", nullable=False)
    for key, kind in nullable.items():
        if key in obj:
            _check_type(obj[key], kind, f"{where}.{key}", nullable=True)
    for key, kind in (optional or {}).items():
        if key in obj:
            _check_type(obj[key], kind, f"{where}.{key}", nullable=True)


def _check_type(value, kind, where: str, nullable: bool):
    if value is None and nullable:
        return
    # bool is an int subclass in Python; a JSON true where a count belongs is still wrong
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise FadeUsageError(f"{where} must be {kind.__name__}, got {_type_name(value)}")


def _check_strings(items, where: str):
    for i, item in enumerate(items):
        _check_type(item, str, f"{where}[{i}]", nullable=False)


def validate_snapshot(snap, where: str = "snapshot") -> dict:
    """Raise FadeUsageError (one line, naming the key) unless `snap` is a usable schema-v1 snapshot."""
    if not isinstance(snap, dict):
        raise FadeUsageError(f"{where}: top level must be a JSON object, got {_type_name(snap)}")
    version = snap.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        raise FadeUsageError(f"{where}: schema_version {version} is not supported "
                             f"(this FADE reads {SCHEMA_VERSION}); upgrade FADE or re-collect")
    _check(snap, where, _TOP, _TOP_NULLABLE, _TOP_OPTIONAL)
    for key in ("env",):
        for name, value in snap[key].items():
            _check_type(value, str, f"{where}.{key}.{name}", nullable=False)
    for name, value in snap["tools"].items():
        _check_type(value, str, f"{where}.tools.{name}", nullable=True)
    _check_strings(snap["groups"], f"{where}.groups")
    for i, dev in enumerate(snap["pci"]):
        _check_type(dev, dict, f"{where}.pci[{i}]", nullable=False)
        _check(dev, f"{where}.pci[{i}]", {"vendor": str, "device": str, "class": str}, {"address": str})
    for i, node in enumerate(snap["kfd_nodes"]):
        _check_type(node, dict, f"{where}.kfd_nodes[{i}]", nullable=False)
        node.setdefault("node", i)  # the position in the list is the KFD node number the collector wrote
        _check(node, f"{where}.kfd_nodes[{i}]", {"node": int, "properties": dict}, {"name": str})
        for key, value in node["properties"].items():
            text_or_int = isinstance(value, (int, str)) and not isinstance(value, bool)
            if not text_or_int or (isinstance(value, int) and not 0 <= value <= KFD_PROPERTY_MAX):
                raise FadeUsageError(f"{where}.kfd_nodes[{i}].properties.{key} must be an integer in 0..2**64-1 "
                                     f"or text (a line the collector could not parse), got {_short_value(value)}")
    for path, access in snap["device_files"].items():
        _check_type(access, dict, f"{where}.device_files.{path}", nullable=False)
        _check(access, f"{where}.device_files.{path}",
               {"exists": bool, "readable": bool, "writable": bool}, {"group": str})
    for key in ("mounts",):
        for path, fstype in (snap.get(key) or {}).items():
            _check_type(fstype, str, f"{where}.{key}.{path}", nullable=True)
    if snap.get("memory") is not None:
        _check(snap["memory"], f"{where}.memory", {}, {"total_bytes": int})
    if snap.get("rocm") is not None:
        _check(snap["rocm"], f"{where}.rocm", {"path": str}, {"version": str})
    _check(snap["os"], f"{where}.os", {}, {"system": str, "release": str, "machine": str})
    if snap.get("opencl") is not None:
        _check_opencl(snap["opencl"], f"{where}.opencl")
    if snap.get("topology") is not None:
        _check_topology(snap["topology"], f"{where}.topology")
    if snap.get("torch") is not None:
        check_torch_section(snap["torch"], f"{where}.torch")
    return snap


def check_torch_section(torch, where: str) -> None:
    """The `torch` section (fade.collect.torch_probe), from a snapshot file or the probe cache."""
    _check_type(torch, dict, where, nullable=False)
    _check(torch, where, _TORCH, _TORCH_NULLABLE)
    _check_strings(torch["arch_list"], f"{where}.arch_list")
    if torch.get("warnings") is not None:
        _check_strings(torch["warnings"], f"{where}.warnings")
    for i, dev in enumerate(torch["devices"]):
        _check_type(dev, dict, f"{where}.devices[{i}]", nullable=False)
        dev.setdefault("index", i)  # torch numbers its devices in list order
        _check(dev, f"{where}.devices[{i}]", _DEVICE, _DEVICE_NULLABLE)


_OPENCL = {"icd_files": list, "platforms": list}
_OPENCL_NULLABLE = {"loader": bool, "clblast": bool, "pyopencl": bool, "source": str, "error": str}
_OPENCL_DEVICE = {"name": str}
_OPENCL_DEVICE_NULLABLE = {"vendor": str, "kind": str, "opencl_version": str, "driver_version": str,
                           "compute_units": int, "clock_mhz": int, "global_memory_bytes": int, "fp16": bool,
                           "fp64": bool}


def _check_opencl(opencl, where: str) -> None:
    """The optional `opencl` section (fade.collect.opencl)."""
    _check_type(opencl, dict, where, nullable=False)
    _check(opencl, where, _OPENCL, _OPENCL_NULLABLE)
    _check_strings(opencl["icd_files"], f"{where}.icd_files")
    for i, platform in enumerate(opencl["platforms"]):
        _check_type(platform, dict, f"{where}.platforms[{i}]", nullable=False)
        _check(platform, f"{where}.platforms[{i}]", {"name": str, "devices": list}, {"vendor": str, "version": str})
        for j, device in enumerate(platform["devices"]):
            _check_type(device, dict, f"{where}.platforms[{i}].devices[{j}]", nullable=False)
            _check(device, f"{where}.platforms[{i}].devices[{j}]", _OPENCL_DEVICE, _OPENCL_DEVICE_NULLABLE)


def _check_topology(topology, where: str) -> None:
    """The optional `topology` section (fade.collect.topology)."""
    _check_type(topology, dict, where, nullable=False)
    _check(topology, where, {"outputs": dict, "links": list}, {"links_from": str, "iommu": dict, "errors": dict, "nccl": dict})
    for i, link in enumerate(topology["links"]):
        _check_type(link, dict, f"{where}.links[{i}]", nullable=False)
        _check(link, f"{where}.links[{i}]", {"gpus": list, "kind": str}, {"detail": str, "count": int})


def load_snapshot(path: str | Path) -> dict:
    """Read and validate a snapshot file; every problem is one FadeUsageError line."""
    path = Path(path)
    text = read_text(path, what="snapshot", max_bytes=SNAPSHOT_MAX_BYTES)  # FADE writes UTF-8, whatever the locale
    if not text.strip():
        raise FadeUsageError(f"snapshot {path}: file is empty")
    data = parse_json(text, what=f"snapshot {path}")  # depth and number limits: no 5,000-digit integer, no 1e400
    return validate_snapshot(data, where=f"snapshot {path}")
