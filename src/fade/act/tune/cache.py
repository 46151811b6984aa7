"""The per-device tuning cache: TunableOp results, the MIOpen user DB, compile caches, search journals.

Layout: `$XDG_CACHE_HOME/fade/tune/<identity hash>/` (device.identity_hash: backend, name, arch), with
    stack.json          the stack the entries were made with (device.STACK_FIELDS)
    tunableop/          PYTORCH_TUNABLEOP_FILENAME=tunableop/tunableop_results%d.csv (%d: device ordinal)
    miopen/db/          MIOPEN_USER_DB_PATH (find DB and perf DB)
    miopen/cache/       MIOPEN_CUSTOM_CACHE_DIR (compiled kernels)
    inductor/, triton/  TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR
    journal/<key>.jsonl one line per finished search trial, for resume
    profiles/           profiles `fade tune` wrote
    index.json          which profiles exist (read-modify-write under the lock)
Rules
    Every write FADE makes is atomic (a temp file in the same directory, fsync, os.replace) or an append of
    one whole line, and happens under `.lock` (filelock), so two tuners on one cache cannot corrupt it.
    The libraries write their own files (TunableOp appends per tuned GEMM, MIOpen locks its DB itself);
    FADE only points them here. A stack change (torch, CUDA/HIP, cuDNN/MIOpen or driver version) moves
    every entry into `stale-<UTC time>/` with one message naming what changed: TunableOp rejects a CSV
    whose validators differ and MIOpen's DB and Inductor's kernels are built for one stack, so stale
    entries would be ignored or misleading, never silently reused. A cache directory that cannot be
    written falls back to a fresh temporary directory, with a warning that nothing will persist.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from filelock import FileLock

from fade.act.tune import device as device_facts
from fade.files import atomic_write_text
from fade.reading import NUMBER, Maybe, UnreadableFile, parse_json, read_bytes, read_json, schema_problem

LOCK_TIMEOUT_S = 120.0  # a tuner holds the lock for one small write; two minutes means a stuck holder
STACK_FILE = "stack.json"
LOCK_FILE = ".lock"
INDEX_FILE = "index.json"
ENV_PATHS = {  # variable -> path under the device directory ("%d" is TunableOp's device ordinal)
    "PYTORCH_TUNABLEOP_FILENAME": "tunableop/tunableop_results%d.csv",
    "MIOPEN_USER_DB_PATH": "miopen/db",
    "MIOPEN_CUSTOM_CACHE_DIR": "miopen/cache",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
}
KEEP_ON_STACK_CHANGE = (STACK_FILE, LOCK_FILE)
JOURNAL_MAX_BYTES = 64 * 2**20  # a search journals a few hundred trials of a few KB each
SMALL_FILE_MAX_BYTES = 4 * 2**20  # stack.json and index.json: a few KB
# One journal line: the fields search.Trial.from_dict and numerics.check read. A line that does not hold it is
# skipped as torn (the trial is measured again).
TRIAL = {
    "config": dict, "samples_s": Maybe([NUMBER]), "status": Maybe(str), "reason": Maybe(str), "samples_per_step": Maybe(int),
    "cost_s": Maybe(NUMBER), "extra": Maybe(dict),
    "numerics": Maybe({"mode": Maybe(str), "losses": Maybe([Maybe(NUMBER)]), "grads_finite": Maybe(bool),
                       "updates_before_last": Maybe(int), "finite": Maybe(bool), "relative_rms_error": Maybe(NUMBER),
                       "math_dtype": Maybe(str), "rounding_spread": Maybe(NUMBER), "fp32_output_rms": Maybe(NUMBER)}),
}  # fmt: skip


def finite_or_none(value):
    """`value` with every NaN or infinite float replaced by None (the journal's trial schema takes null there)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def default_base(environ: Optional[Mapping[str, str]] = None) -> Path:
    """$XDG_CACHE_HOME/fade/tune, else ~/.cache/fade/tune."""
    environ = os.environ if environ is None else environ
    root = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "fade" / "tune"


@dataclass
class TuneCache:
    root: Path  # the device directory
    fingerprint: dict
    messages: list = field(default_factory=list)  # what the user must be told: fallbacks, invalidations
    temporary: bool = False  # True after a fall-back to a temp dir: nothing persists

    def lock(self) -> FileLock:
        return FileLock(str(self.root / LOCK_FILE), timeout=LOCK_TIMEOUT_S)

    def path(self, relative: str) -> Path:
        return self.root / relative

    def env(self) -> dict:
        """The variables that point TunableOp, MIOpen, Inductor and Triton at this cache (directories made)."""
        env = {}
        for name, relative in ENV_PATHS.items():
            path = self.root / relative
            directory = path.parent if path.suffix else path
            directory.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        return env

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
        """Delete a fallback temporary cache (open_cache's /tmp/fade-tune-*): nothing in it persists anyway."""
        if self.temporary:
            import shutil

            shutil.rmtree(self.root, ignore_errors=True)

    def journal(self, key: str) -> "Journal":
        return Journal(self, f"journal/{key}.jsonl")


class Journal:
    """Finished search trials, one JSON line each, appended under the cache lock.

    A journal that cannot be read at all (not a regular file, over JOURNAL_MAX_BYTES) is renamed to
    `<name>.corrupt-<UTC time>` and the search starts afresh; a line that is not a TRIAL is skipped. Either way
    one line in `messages` says so (the search prints them through its progress channel)."""

    def __init__(self, cache: TuneCache, relative: str, now=time.gmtime):
        self.cache = cache
        self.path = cache.root / relative
        self.now = now
        self.torn_lines = 0  # lines that did not parse or hold no trial (a process killed mid-write); skipped
        self.messages: list = []

    def append(self, trial: dict) -> None:
        # strict JSON (a diverged loss is NaN): the journal's reader, fade.reading, refuses NaN and Infinity
        line = json.dumps(finite_or_none(trial), sort_keys=True, default=str, allow_nan=False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.cache.lock(), open(self.path, "a+b") as handle:
            handle.seek(0, os.SEEK_END)
            torn = False
            if handle.tell() > 0:  # a line torn by a kill has no newline: end it, or this trial joins it
                handle.seek(-1, os.SEEK_END)
                torn = handle.read(1) != b"\n"
            handle.seek(0, os.SEEK_END)
            handle.write((("\n" if torn else "") + line + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def load(self) -> dict:
        """{config key: trial dict}; the last line for a config wins. Every trial returned holds TRIAL."""
        from fade.act.tune.search import config_key

        trials: dict = {}
        self.torn_lines = 0
        if not os.path.lexists(self.path):
            return trials
        try:
            data = read_bytes(self.path, what="tune journal", max_bytes=JOURNAL_MAX_BYTES)
        except UnreadableFile as error:
            self._set_aside(str(error))
            return trials
        for line in data.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                trial = parse_json(line, what="journal line")
            except UnreadableFile:
                trial = None
            if schema_problem(trial, TRIAL) is not None:
                self.torn_lines += 1
                continue
            trials[config_key(trial["config"])] = trial
        if self.torn_lines:
            self._say(f"tune journal {self.path}: skipped {self.torn_lines} unreadable line(s) (a run killed "
                      "mid-write, or an edit); those trials are measured again")  # fmt: skip
        return trials

    def _set_aside(self, reason: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', self.now())}")
        try:
            os.replace(self.path, aside)
        except OSError as error:
            self._say(f"{reason}; ignored it (cannot rename it: {error.strerror or error}); the search starts afresh")
            return
        self._say(f"{reason}; moved it to {aside.name} and the search starts afresh")

    def _say(self, message: str) -> None:
        self.messages.append(message)
        self.cache.messages.append(message)  # the tuning file's cache_messages keep it too

    def clear(self) -> None:
        with self.cache.lock():
            self.path.unlink(missing_ok=True)


def open_cache(fingerprint: dict, *, base=None, environ: Optional[Mapping[str, str]] = None, now=time.gmtime) -> TuneCache:
    """The cache directory for `fingerprint` (device.device_fingerprint), checked against its stack.json.

    A directory that cannot be made or written falls back to a temporary one (a message says so). A
    stack.json naming another stack moves the old entries aside (a message names what changed).
    """
    base = Path(base) if base is not None else default_base(environ)
    root = base / device_facts.identity_hash(fingerprint)
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
    cache = TuneCache(root=root, fingerprint=dict(fingerprint), messages=messages, temporary=temporary)
    _check_stack(cache, now)
    return cache


def _check_stack(cache: TuneCache, now) -> None:
    current = device_facts.stack(cache.fingerprint)
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
            changed = ", ".join(device_facts.differences(recorded, current, device_facts.STACK_FIELDS)) or "stack.json unreadable"
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


def journal_key(model: str, mode: str, batch: int, size: Optional[int], exhaustive: bool = False) -> str:
    """A file-name-safe key for one search: `resnet50-train-b64`, `-224` for an explicit size."""
    safe = "".join(character if character.isalnum() or character in "-_." else "_" for character in model)
    parts = [safe, mode, f"b{batch}"]
    if size is not None:
        parts.append(str(size))
    if exhaustive:
        parts.append("exhaustive")
    return "-".join(parts)
