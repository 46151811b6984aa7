"""The versioned result record (one JSON line per finished case), its reader, and a per-case summary.

docs/results.md is the public description of every field; the field comments here say the same briefly.
A reader accepts any record whose `schema_version` it knows and reports the others; renaming or retyping
a field bumps SCHEMA_VERSION, a new optional field does not.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Optional

import fade
from fade.errors import FadeUsageError

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "error", "oom", "timeout", "crashed")
FAILED_STATUSES = frozenset({"error", "oom", "timeout", "crashed"})
# `resume` skips these: rerunning cannot change the outcome. Failures are retried, since a resumed run
# usually follows a fix (a driver, an env variable, a freed GPU).
RESUME_SKIPS_STATUSES = frozenset({"ok", "skipped"})


def now_iso() -> str:
    """ISO-8601 UTC with milliseconds: "2026-11-22T02:30:00.123Z"."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def make_record(
    *,
    case,
    run_id: str,
    torch_device: str,
    status: str,
    started: str,
    finished: str,
    duration_s: float,
    device: dict,
    stack: dict,
    peaks: Optional[dict],
    telemetry: dict,
    result=None,
    error: Optional[str] = None,
    error_detail: Optional[str] = None,
    warnings: Iterable[str] = (),
) -> dict:
    """One record as a JSON-ready dict. `result` is a case.CaseResult for status "ok", else None."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    timing = getattr(result, "timing", None)
    record = {
        "schema_version": SCHEMA_VERSION,
        "fade_version": fade.__version__,
        "run_id": run_id,
        "case_id": case.case_id,
        "suite": case.suite,
        "status": status,
        "torch_device": torch_device,
        "params": dict(case.params),
        "value": None if result is None else result.value,
        "unit": None if result is None else result.unit,
        "formula": None if result is None else result.formula,
        "work": {} if result is None else dict(result.work),
        "stats": None if timing is None else timing.stats(),
        "timing": None if timing is None else timing.to_dict(),
        "peak": None if result is None else peak_for(result, peaks),
        "extra": {} if result is None else dict(result.extra),
        "device": device,
        "stack": stack,
        "telemetry": telemetry,
        "started": started,
        "finished": finished,
        "duration_s": duration_s,
        "error": error,
        "error_detail": error_detail,
        "warnings": list(warnings),
    }
    return finite(record)


def peak_for(result, peaks: Optional[dict]) -> Optional[dict]:
    """The record's `peak`: the spec-table peak that applies to `result`, and value as a % of it."""
    if peaks is None or result.peak_kind is None:
        return None
    if result.peak_kind == "tflops":
        peak_value = (peaks.get("tflops") or {}).get(result.peak_dtype)
        unit = "TFLOP/s"
    elif result.peak_kind == "bandwidth":
        peak_value = peaks.get("bandwidth_gbs")
        unit = "GB/s"
    else:
        raise ValueError(f"unknown peak kind {result.peak_kind!r}")
    if not peak_value:
        return None
    return {
        "value": peak_value,
        "unit": unit,
        "dtype": result.peak_dtype,
        "pct_of_peak": 100.0 * result.value / peak_value,
        "basis": peaks.get("basis"),
        "source": peaks.get("source"),
        "formula": "100 * value / peak.value",
    }


def finite(value):
    """A JSON-ready copy: NaN and infinity become null (JSON has neither); mappings and sequences become
    dicts and lists (device truth may hold read-only mappings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(key): finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [finite(item) for item in value]
    return value


def dumps_line(record: dict) -> str:
    return json.dumps(finite(record), allow_nan=False, separators=(",", ":"), default=str) + "\n"


@dataclass
class RecordFile:
    """Records read from a JSONL file, and one line of text per line that could not be used."""

    path: Path
    records: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # "results.jsonl:7: not valid JSON (...)"


def read_records(path, *, strict: bool = False) -> RecordFile:
    """Read a results JSONL file, keeping every good record.

    A corrupt line (a torn write, a stray edit) or a record of an unknown schema_version is reported in
    `problems` with its line number and skipped. With `strict=True` the first problem raises
    FadeUsageError instead. A missing or unreadable file always raises FadeUsageError.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise FadeUsageError(f"cannot read results file {path}: {error.strerror or error}") from None
    found = RecordFile(path)
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem = None
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"not valid JSON ({error.msg}; column {error.colno})"
        else:
            if not isinstance(record, dict):
                problem = "not a JSON object"
            elif record.get("schema_version") != SCHEMA_VERSION:
                problem = (
                    f"schema_version {record.get('schema_version')!r} is not one this FADE reads "
                    f"({SCHEMA_VERSION}); upgrade FADE to read it"
                )
            elif "case_id" not in record or "status" not in record:
                problem = "record has no case_id or status"
        if problem is None:
            found.records.append(record)
            continue
        message = f"{path}:{line_number}: {problem}"
        if strict:
            raise FadeUsageError(message)
        found.problems.append(message)
    return found


def record_key(record: dict) -> tuple:
    """Records of the same case on the same device share a key; the newest one is the current result."""
    return (record.get("case_id"), record.get("torch_device"))


def latest_records(records: Iterable[dict]) -> list:
    """The last record per (case_id, torch_device), in the order the cases first appeared."""
    latest: dict = {}
    for record in records:
        latest[record_key(record)] = record  # a dict keeps a key's first position when its value changes
    return list(latest.values())


def summarize(records: Iterable[dict]) -> list:
    """One flat row per case (its latest record) for a terminal or HTML table.

    Row keys: case_id, torch_device, status, value, unit, pct_of_peak, peak, median_ms, iqr_pct
    (IQR / median, %), cov_pct, n, noisy, throttled, note (error, skip reason or the SDPA backend that ran).
    """
    rows = []
    for record in latest_records(records):
        stats = record.get("stats") or {}
        peak = record.get("peak") or {}
        telemetry = record.get("telemetry") or {}
        median_s = stats.get("median_s")
        extra = record.get("extra") or {}
        note = record.get("error")
        if note is None and extra.get("backend_ran"):
            note = f"ran {extra['backend_ran']}"
        if note is None and telemetry.get("throttled"):
            note = "throttled: " + ", ".join(telemetry.get("throttle_reasons", []))
        rows.append(
            {
                "case_id": record.get("case_id"),
                "torch_device": record.get("torch_device"),
                "status": record.get("status"),
                "value": record.get("value"),
                "unit": record.get("unit"),
                "pct_of_peak": peak.get("pct_of_peak"),
                "peak": peak.get("value"),
                "median_ms": None if median_s is None else median_s * 1e3,
                "iqr_pct": None if not median_s else 100.0 * stats.get("iqr_s", 0.0) / median_s,
                "cov_pct": None if stats.get("cov") is None else 100.0 * stats["cov"],
                "n": stats.get("n"),
                "noisy": bool(stats.get("noisy")),
                "throttled": bool(telemetry.get("throttled")),
                "note": note,
            }
        )
    return rows


class JsonlAppender:
    """Appends one record per line to a JSONL file, each line flushed and fsynced before returning.

    The file is opened O_APPEND and each line goes out in one os.write loop with Ctrl-C deferred, so a
    Ctrl-C cannot tear a line and a kill -9 loses at most the line being written. If an earlier writer
    died mid-line, a newline is added first so the next record starts on its own line.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self.fd).st_size
        if size:
            with open(self.path, "rb") as existing:
                existing.seek(size - 1)
                if existing.read(1) != b"\n":
                    os.write(self.fd, b"\n")

    def append(self, record: dict) -> None:
        data = dumps_line(record).encode("utf-8")
        with _sigint_deferred():
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _sigint_deferred:
    """Hold a Ctrl-C that arrives during a write and deliver it (to the previous handler) right after.

    Only the main thread may install signal handlers; elsewhere this does nothing.
    """

    def __enter__(self):
        import signal
        import threading

        self.received = False
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._hold)
        return self

    def _hold(self, signum, frame) -> None:
        self.received = True

    def __exit__(self, *exc_info):
        import signal

        if self.previous is None:
            return
        signal.signal(signal.SIGINT, self.previous)
        if self.received and callable(self.previous):
            self.previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt here
