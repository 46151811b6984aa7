"""Reuse a torch probe while nothing it depends on has changed, so `fade doctor --no-measure` is instant.

`import torch` alone costs 1-3 s (3.05 s measured on an H200 host), and the probe must also start the
GPU runtime. What the probe reports is fixed by: the interpreter, the installed torch build, the driver,
the GPU environment variables, the PCI devices and /dev access, and the boot (a reboot or driver reload
can change everything). All of those go into the cache key; any change is a miss. Entries also expire
after MAX_AGE_S. The doctor says when it used a cached probe; `--fresh` bypasses the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from fade.errors import FadeUsageError
from fade.files import atomic_write_text
from fade.reading import NUMBER, read_json, schema_problem

MAX_AGE_S = 24 * 3600  # a day: long enough to matter, short enough that a silent change ages out
ENTRY_MAX_BYTES = 4 * 2**20  # an entry is a few KB (the torch section of a snapshot)
CLOCK_SLACK_S = 3600.0  # an entry saved up to an hour "in the future" (a clock stepped back) still counts


def cache_dir(environ: dict | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME", os.path.expanduser("~")), ".cache")
    return Path(base, "fade", "probe")


def _stat(path: Path) -> list:
    try:
        st = path.stat()
        return [str(path), st.st_mtime_ns, st.st_size]
    except OSError:
        return [str(path), None]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def probe_key(snapshot_so_far: dict) -> str | None:
    """A digest of everything the torch probe's answer depends on; None when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    torch_dir = Path(spec.origin).parent
    libs = sorted((torch_dir / "lib").glob("libtorch*.so*")) + sorted(torch_dir.glob("_C*.so"))
    material = {
        "python": [sys.executable, sys.version],
        "torch": [_stat(torch_dir / "version.py")] + [_stat(p) for p in libs],
        "env": snapshot_so_far.get("env"),
        "pci": snapshot_so_far.get("pci"),
        "device_files": snapshot_so_far.get("device_files"),
        "kfd_nodes": snapshot_so_far.get("kfd_nodes"),
        "groups": snapshot_so_far.get("groups"),
        "nvidia_driver": _read("/proc/driver/nvidia/version"),
        "amdgpu": _read("/sys/module/amdgpu/version"),
        "boot": _read("/proc/sys/kernel/random/boot_id"),
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]


def load(key: str, environ: dict | None = None, *, warnings: list | None = None, now=time.time) -> dict | None:
    """The cached entry {saved_at, torch} for `key`, or None (missing, expired). An entry that cannot be read
    or does not hold a torch section (fade.collect.snapshot.check_torch_section) is renamed to
    `<key>.json.corrupt-<time>` with one line appended to `warnings`, and is a miss: the probe runs again."""
    from fade.collect.snapshot import check_torch_section

    path = cache_dir(environ) / f"{key}.json"
    if not os.path.lexists(path):
        return None
    try:
        entry = read_json(path, what="probe cache", max_bytes=ENTRY_MAX_BYTES)
        if not isinstance(entry, dict) or schema_problem(entry.get("saved_at"), NUMBER) is not None:
            raise FadeUsageError(f"probe cache {path}: no saved_at time")
        if not 0 <= entry["saved_at"] <= now() + CLOCK_SLACK_S:
            raise FadeUsageError(f"probe cache {path}: saved_at {entry['saved_at']:g} is not a time up to now")
        check_torch_section(entry.get("torch"), f"probe cache {path}: torch")
    except FadeUsageError as error:  # UnreadableFile too: not a regular file, too large, not JSON
        _set_aside(path, str(error), warnings, now)
        return None
    if now() - entry["saved_at"] > MAX_AGE_S:
        return None
    return entry


def _set_aside(path: Path, reason: str, warnings: list | None, now) -> None:
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now()))}")
    try:
        os.replace(path, aside)
        message = f"{reason}; moved it to {aside.name} and probed torch afresh"
    except OSError as error:
        message = f"{reason}; ignored it (cannot rename it: {error.strerror or error}) and probed torch afresh"
    if warnings is not None:
        warnings.append(message)


def save(key: str, torch_section: dict, environ: dict | None = None) -> None:
    """Atomic write (temp + rename); a cache that cannot be written is simply not used."""
    directory = cache_dir(environ)
    try:
        atomic_write_text(directory / f"{key}.json", json.dumps({"saved_at": time.time(), "torch": torch_section}))
    except OSError:
        pass
