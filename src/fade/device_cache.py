"""The per-device cache directory `fade tune` fills and fade.ocl reads: where it is, how a device names it, and
how a stack change retires what it holds. What goes in it is its writers' business: the tuner's journals,
profiles and library caches (fade.act.tune.cache), the CLBlast parameters fade.ocl applies when a device opens
(fade.ocl.tuning, whose file the tuner writes through it). A leaf module, so that both may import it: fade.ocl
reads the file in every process (a bench worker, a user's script) without importing the tuner.

Layout: `$XDG_CACHE_HOME/fade/tune/<identity hash>/` (identity_hash: backend, name, arch), holding `stack.json`
(the stack its entries were made with: STACK_FIELDS) and `.lock`. Every write is atomic (fade.files) under the
lock, so two writers cannot corrupt it. A stack change moves every entry into `stale-<UTC time>/` with one
message naming what changed; a directory that cannot be written falls back to a fresh temporary one, with a
message that nothing will persist.

The device fingerprint it is keyed by (fade.act.tune.device reads it from torch; fade.ocl.tuning from OpenCL):
identity (backend, name, arch) says whether an entry belongs to this device at all, the stack (torch, CUDA/HIP,
cuDNN/MIOpen, driver) whether it is still valid.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from filelock import FileLock

from fade.files import atomic_write_text
from fade.reading import UnreadableFile, read_json

IDENTITY_FIELDS = ("backend", "name", "arch")
STACK_FIELDS = ("torch", "cuda", "hip", "cudnn", "miopen", "driver")
LOCK_TIMEOUT_S = 120.0  # a writer holds the lock for one small write; two minutes means a stuck holder
STACK_FILE = "stack.json"
LOCK_FILE = ".lock"
KEEP_ON_STACK_CHANGE = (STACK_FILE, LOCK_FILE)
SMALL_FILE_MAX_BYTES = 4 * 2**20  # stack.json and index.json: a few KB


def identity(fingerprint: dict) -> dict:
    return {name: fingerprint.get(name) for name in IDENTITY_FIELDS}


def stack(fingerprint: dict) -> dict:
    return {name: fingerprint.get(name) for name in STACK_FIELDS}


def identity_hash(fingerprint: dict) -> str:
    """12 hex digits naming the device's cache directory (backend, name, arch only)."""
    text = json.dumps(identity(fingerprint), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def differences(recorded: dict, current: dict, fields=IDENTITY_FIELDS + STACK_FIELDS) -> list:
    """['torch 2.11.0 -> 2.13.0', ...] for each field that differs."""
    return [
        f"{name} {recorded.get(name)} -> {current.get(name)}"
        for name in fields
        if recorded.get(name) != current.get(name)
    ]


def default_base(environ: Optional[Mapping[str, str]] = None) -> Path:
    """$XDG_CACHE_HOME/fade/tune, else ~/.cache/fade/tune."""
    environ = os.environ if environ is None else environ
    root = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "fade" / "tune"


def device_root(fingerprint: dict, base=None, environ: Optional[Mapping[str, str]] = None) -> Path:
    """The device's directory under `base` (default_base when None); nothing is made."""
    return (Path(base) if base is not None else default_base(environ)) / identity_hash(fingerprint)


@dataclass
class DeviceCache:
    root: Path  # the device directory
    fingerprint: dict
    messages: list = field(default_factory=list)  # what the user must be told: fallbacks, invalidations
    temporary: bool = False  # True after a fall-back to a temp dir: nothing persists

    def lock(self) -> FileLock:
        return FileLock(str(self.root / LOCK_FILE), timeout=LOCK_TIMEOUT_S)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def write_text(self, relative: str, text: str) -> Path:
        """Atomic replace of one file, under the lock."""
        with self.lock():
            return atomic_write_text(self.root / relative, text)

    def update_json(self, relative: str, update: Callable[[dict], dict]) -> dict:
        """Read-modify-write of a JSON object under the lock; a missing or corrupt file reads as {}."""
        path = self.root / relative
        with self.lock():
            try:
                data = read_json(path, what="tuning cache file", max_bytes=SMALL_FILE_MAX_BYTES)
                if not isinstance(data, dict):
                    data = {}
            except UnreadableFile:  # missing, or corrupt: FADE's own index, rebuilt from what is written next
                data = {}
            data = update(data)
            atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        return data

    def remove_if_temporary(self) -> None:
        """Delete a fallback temporary cache (open_device_cache's /tmp/fade-tune-*): nothing in it persists."""
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)


def open_device_cache(fingerprint: dict, *, base=None, environ: Optional[Mapping[str, str]] = None, now=time.gmtime,
                      cache_class=DeviceCache):
    """The cache directory for `fingerprint`, checked against its stack.json, as a `cache_class`.

    A directory that cannot be made or written falls back to a temporary one (a message says so). A
    stack.json naming another stack moves the old entries aside (a message names what changed).
    """
    root = device_root(fingerprint, base, environ)
    messages: list = []
    temporary = False
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe.", delete=True)
        probe.close()
    except OSError as error:
        fallback = Path(tempfile.mkdtemp(prefix="fade-tune-"))
        messages.append(
            f"tuning cache {root} is not writable ({error.strerror or error}); using {fallback} for this run: "
            "tuned results will not persist (set XDG_CACHE_HOME to a writable directory)"
        )
        root, temporary = fallback, True
    cache = cache_class(root=root, fingerprint=dict(fingerprint), messages=messages, temporary=temporary)
    _check_stack(cache, now)
    return cache


def _check_stack(cache: DeviceCache, now) -> None:
    current = stack(cache.fingerprint)
    stack_path = cache.root / STACK_FILE
    with cache.lock():
        try:
            recorded = read_json(stack_path, what="stack file", max_bytes=SMALL_FILE_MAX_BYTES)
        except UnreadableFile:
            recorded = {"unreadable": True} if os.path.lexists(stack_path) else None
        if not isinstance(recorded, (dict, type(None))):
            recorded = {"unreadable": True}
        if recorded is not None and recorded != current:
            entries = [entry for entry in cache.root.iterdir() if entry.name not in KEEP_ON_STACK_CHANGE
                       and not entry.name.startswith(("stale-", ".probe.", f".{STACK_FILE}."))]  # fmt: skip
            changed = ", ".join(differences(recorded, current, STACK_FIELDS)) or "stack.json unreadable"
            if entries:
                stale = cache.root / time.strftime("stale-%Y%m%dT%H%M%SZ", now())
                suffix = 1
                while stale.exists():
                    stale = stale.with_name(f"{stale.name.split('.')[0]}.{suffix}")
                    suffix += 1
                stale.mkdir()
                for entry in entries:
                    shutil.move(str(entry), str(stale / entry.name))
                cache.messages.append(
                    f"the stack changed since {cache.root} was tuned ({changed}): moved {len(entries)} stale "
                    f"entries to {stale.name}/; they will be tuned again"
                )
            else:
                cache.messages.append(f"the stack changed since {cache.root} was tuned ({changed}); it held no entries")
        if recorded != current:
            atomic_write_text(stack_path, json.dumps(current, indent=2, sort_keys=True) + "\n")
