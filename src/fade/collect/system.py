"""Probe what the OS and kernel driver say about the GPUs, without torch and without root.

Every probe takes `root` (a filesystem prefix, "/" on a live machine) so tests can point it at a fake
sysfs/dev tree, and returns plain data. A probe that cannot read something raises; `snapshot.py`
records the reason under `errors` and carries on, so one unreadable file never loses the rest.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Variables that change what the GPU stack does. Listed in docs/snapshot.md; keep the two in step.
ENV_PREFIXES = (
    "HSA_", "HIP_", "ROCR_", "ROCM_", "GPU_", "CUDA_", "MIOPEN_", "PYTORCH_", "TORCH_", "NCCL_", "RCCL_",
    "AMD_", "HIPBLASLT_", "NVIDIA_", "FADE_",
)

# PCI classes that can be a compute device: VGA 0x0300, 3D 0x0302, display 0x0380, accelerator 0x12.
GPU_PCI_CLASS_PREFIXES = ("0x0300", "0x0302", "0x0380", "0x12")


def os_info() -> dict:
    return {"system": platform.system(), "release": platform.release(), "machine": platform.machine()}


def gpu_env(environ: dict | None = None) -> dict:
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES)}


def _read(path: Path) -> str:
    return path.read_text(errors="replace").strip()


def pci_devices(root: str = "/") -> list[dict]:
    base = Path(root, "sys/bus/pci/devices")
    out = []
    for dev in sorted(base.iterdir()):
        try:
            cls = _read(dev / "class").lower()
            if not cls.startswith(GPU_PCI_CLASS_PREFIXES):
                continue
            out.append({"address": dev.name, "vendor": _read(dev / "vendor").lower(),
                        "device": _read(dev / "device").lower(), "class": cls})
        except OSError:
            continue  # a device that vanished or hides its files is not ours to report
    return out


def parse_kfd_properties(text: str) -> dict:
    """`key value` lines of a KFD topology properties file → {key: int} (non-integers kept as text)."""
    props: dict = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        key, value = parts
        try:
            props[key] = int(value)
        except ValueError:
            props[key] = value
    return props


def kfd_nodes(root: str = "/") -> list[dict]:
    base = Path(root, "sys/class/kfd/kfd/topology/nodes")
    nodes = []
    for node_dir in sorted(base.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        if not node_dir.name.isdigit():
            continue
        try:
            props = parse_kfd_properties((node_dir / "properties").read_text(errors="replace"))
        except OSError:
            continue
        try:
            name = _read(node_dir / "name")
        except OSError:
            name = ""
        nodes.append({"node": int(node_dir.name), "name": name, "properties": props})
    return nodes


def _file_access(path: Path) -> dict:
    exists = path.exists()
    group = None
    if exists:
        try:
            import grp

            group = grp.getgrgid(path.stat().st_gid).gr_name
        except (KeyError, OSError, ImportError):
            group = None
    return {"exists": exists, "readable": exists and os.access(path, os.R_OK),
            "writable": exists and os.access(path, os.W_OK), "group": group}


def device_files(root: str = "/") -> dict:
    dev = Path(root, "dev")
    files = {"/dev/kfd": _file_access(dev / "kfd")}
    dri = dev / "dri"
    if dri.is_dir():
        for node in sorted(dri.glob("renderD*")):
            files[f"/dev/dri/{node.name}"] = _file_access(node)
    if (dev / "dxg").exists():  # WSL2's GPU paravirtualization device
        files["/dev/dxg"] = _file_access(dev / "dxg")
    return files


def user_groups() -> list[str]:
    import grp

    names = []
    for gid in sorted(set(os.getgroups()) | {os.getgid()}):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return names


def user_info() -> dict:
    import pwd

    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return {"name": name, "uid": uid}


def rocm_install(root: str = "/", environ: dict | None = None) -> dict | None:
    environ = os.environ if environ is None else environ
    candidates = [environ.get("ROCM_PATH"), "/opt/rocm"]
    for path in filter(None, candidates):
        base = Path(root, path.lstrip("/"))
        if base.is_dir():
            version_file = base / ".info" / "version"
            version = _read(version_file) if version_file.is_file() else None
            return {"path": path, "version": version}
    return None


def filesystem_types(paths: list[str], root: str = "/") -> dict:
    """path → fstype of the mount that holds it, from /proc/mounts (longest mount-point prefix wins)."""
    mounts = []
    for line in Path(root, "proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append((parts[1].replace("\\040", " "), parts[2]))
    out = {}
    for path in paths:
        best = ("", None)
        for mountpoint, fstype in mounts:
            inside = path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")
            if inside and len(mountpoint) > len(best[0]):
                best = (mountpoint, fstype)
        out[path] = best[1]
    return out


def miopen_paths(environ: dict | None = None) -> list[str]:
    """Where MIOpen keeps its user DB and kernel cache (ROCm/MIOpen docs: perfdb.rst, cache.rst)."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME", os.path.expanduser("~"))
    return [home,
            environ.get("MIOPEN_USER_DB_PATH", os.path.join(home, ".config", "miopen")),
            environ.get("MIOPEN_CUSTOM_CACHE_DIR", os.path.join(home, ".cache", "miopen"))]


def memory_info(root: str = "/") -> dict:
    for line in Path(root, "proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return {"total_bytes": int(line.split()[1]) * 1024}
    return {"total_bytes": None}
