"""The per-device tuning cache: TunableOp results, the MIOpen user DB, compile caches, search journals.

The directory itself (where it is, its identity hash, stack.json, the lock, stale entries moved aside) is
fade.device_cache's, a leaf module, because fade.ocl reads its CLBlast file (fade.ocl.tuning) in processes that
never import the tuner. This module adds what the tuner keeps there.

Layout: `$XDG_CACHE_HOME/fade/tune/<identity hash>/` (device_cache.identity_hash: backend, name, arch), with
    stack.json          the stack the entries were made with (device_cache.STACK_FIELDS)
    clblast.json        the CLBlast parameters `fade tune --device ocl --pretune` chose (fade.ocl.tuning's format)
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
import time
from typing import Mapping, Optional

from fade.device_cache import DeviceCache, default_base, open_device_cache  # noqa: F401 - default_base, for its callers
from fade.reading import NUMBER, Maybe, UnreadableFile, parse_json, read_bytes, schema_problem

INDEX_FILE = "index.json"
ENV_PATHS = {  # variable -> path under the device directory ("%d" is TunableOp's device ordinal)
    "PYTORCH_TUNABLEOP_FILENAME": "tunableop/tunableop_results%d.csv",
    "MIOPEN_USER_DB_PATH": "miopen/db",
    "MIOPEN_CUSTOM_CACHE_DIR": "miopen/cache",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
}
JOURNAL_MAX_BYTES = 64 * 2**20  # a search journals a few hundred trials of a few KB each
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


class TuneCache(DeviceCache):
    """The device directory (fade.device_cache.DeviceCache) with what the tuner keeps there."""

    def env(self) -> dict:
        """The variables that point TunableOp, MIOpen, Inductor and Triton at this cache (directories made)."""
        env = {}
        for name, relative in ENV_PATHS.items():
            path = self.root / relative
            directory = path.parent if path.suffix else path
            directory.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        return env

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
    """The cache directory for `fingerprint` (device.device_fingerprint), checked against its stack.json
    (fade.device_cache.open_device_cache: a temporary fallback, stale entries moved aside)."""
    return open_device_cache(fingerprint, base=base, environ=environ, now=now, cache_class=TuneCache)


def journal_key(model: str, mode: str, batch: int, size: Optional[int], exhaustive: bool = False) -> str:
    """A file-name-safe key for one search: `resnet50-train-b64`, `-224` for an explicit size."""
    safe = "".join(character if character.isalnum() or character in "-_." else "_" for character in model)
    parts = [safe, mode, f"b{batch}"]
    if size is not None:
        parts.append(str(size))
    if exhaustive:
        parts.append("exhaustive")
    return "-".join(parts)
