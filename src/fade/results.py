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

from fade.errors import FadeUsageError
from fade.reading import FLOAT_MAX, FLOAT_MIN, MAX_BYTES, UnreadableFile, gunzip, parse_json, read_bytes
from fade.version import __version__

SCHEMA_VERSION = 1
RESULTS_MAX_BYTES = MAX_BYTES  # a day of benchmarks is a few MB; decompressed, a .jsonl.gz is held to it too
GZIP_MAGIC = b"\x1f\x8b"  # a gzip member's first two bytes (RFC 1952)
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
        "fade_version": __version__,
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
    """The record's `peak`: the spec-table peak that applies to `result`, and value as a % of it. A "link"
    peak (dist suite: busbw against the slowest link between the ranks) travels in result.extra["link"]."""
    if result.peak_kind == "link":
        peaks = {"link_gbs": (result.extra.get("link") or {}).get("peak_gbs"),
                 "basis": "link table", "source": (result.extra.get("link") or {}).get("source")}  # fmt: skip
    if peaks is None or result.peak_kind is None:
        return None
    if result.peak_kind == "link":
        peak_value = peaks["link_gbs"]
        unit = "GB/s"
    elif result.peak_kind == "tflops":
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
    data = read_bytes(path, what="cannot read results file", max_bytes=RESULTS_MAX_BYTES)  # never a FIFO, /dev/zero
    if data[:2] == GZIP_MAGIC:  # results kept compressed (results/*/*.jsonl.gz) read as they are
        data = gunzip(data, what=f"cannot read results file {path}", max_bytes=RESULTS_MAX_BYTES)
    text = data.decode("utf-8", errors="replace")
    found = RecordFile(path)
    not_results = _other_document(text)
    if not_results:
        message = f"{path}: {not_results}, not a results file (JSONL, one record per line)"
        if strict:
            raise FadeUsageError(message)
        found.problems.append(message)
        return found
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record, problem = parse_record(line)
        if problem is None:
            found.records.append(record)
            continue
        message = f"{path}:{line_number}: {problem}"
        if strict:
            raise FadeUsageError(message)
        found.problems.append(message)
    return found


def parse_record(line: str) -> tuple:
    """(record, None) for a line holding a record this FADE can use, else (None, one-line reason)."""
    try:
        record = parse_json(line, what="line")
    except UnreadableFile as error:  # not JSON, NaN/1e400, a huge integer, nested too deep: fade.reading's limits
        return None, str(error).removeprefix("line: ")
    return (record, None) if (problem := record_problem(record)) is None else (None, problem)


# Each top-level field a reader uses, with the JSON types it may hold (None: null allowed). A record whose
# field has another type is reported and skipped instead of crashing compare, report or a plot.
_NUMBER = (int, float)
_SCALAR = (str, int, float, bool, type(None))
FIELD_TYPES = {
    "case_id": (str,), "status": (str,), "run_id": (str, type(None)), "suite": (str, type(None)),
    "torch_device": (str, type(None)), "params": (dict,), "value": (*_NUMBER, type(None)),
    "unit": (str, type(None)), "formula": (str, type(None)), "work": (dict,), "stats": (dict, type(None)),
    "timing": (dict, type(None)), "peak": (dict, type(None)), "extra": (dict,), "device": (dict,),
    "stack": (dict,), "telemetry": (dict,), "started": (str, type(None)), "finished": (str, type(None)),
    "duration_s": (*_NUMBER, type(None)), "error": (str, type(None)), "error_detail": (str, type(None)),
    "warnings": (list,),
}  # fmt: skip
# Nested fields the readers compute with: (parent, key) -> allowed types.
NESTED_TYPES = {
    ("stats", "median_s"): (*_NUMBER, type(None)), ("stats", "iqr_s"): (*_NUMBER, type(None)),
    ("stats", "cov"): (*_NUMBER, type(None)), ("stats", "n"): (int, type(None)),
    ("stats", "q1_s"): (*_NUMBER, type(None)), ("stats", "q3_s"): (*_NUMBER, type(None)),
    ("stack", "torch"): (dict, type(None)), ("extra", "loss_check"): (dict, type(None)),
    ("params", "model"): _SCALAR, ("params", "mode"): _SCALAR, ("params", "variant"): _SCALAR,
    ("params", "batch"): _SCALAR,
    ("stats", "noisy"): (bool, type(None)), ("peak", "value"): (*_NUMBER, type(None)),
    ("peak", "pct_of_peak"): (*_NUMBER, type(None)), ("telemetry", "throttled"): (bool, type(None)),
    ("telemetry", "throttle_reasons"): (list, type(None)), ("telemetry", "contended"): (bool, type(None)),
    ("telemetry", "contention_reasons"): (list, type(None)), ("extra", "backend_ran"): (str, type(None)),
    ("extra", "plain_loop"): (dict, type(None)), ("extra", "flops"): (dict, type(None)),
    ("extra", "memory"): (dict, type(None)),
    # dist suite (docs/dist.md): a collective's figures, a scaling case's per-process-count list
    ("extra", "busbw_gbs"): (*_NUMBER, type(None)), ("extra", "algbw_gbs"): (*_NUMBER, type(None)),
    ("extra", "latency_us"): (*_NUMBER, type(None)), ("extra", "world"): (int, type(None)),
    ("extra", "size_bytes"): (int, type(None)), ("extra", "collective"): (str, type(None)),
    ("extra", "scaling"): (list, type(None)), ("extra", "link"): (dict, type(None)),
    ("extra", "variant"): (dict, type(None)), ("extra", "backend_ran"): (str, type(None)),
    ("peak", "unit"): (str, type(None)), ("work", "flops"): (*_NUMBER, type(None)),
    ("work", "bytes"): (*_NUMBER, type(None)),
}  # fmt: skip
# Inside extra's dicts (models suite), the numbers the report and the plots read.
EXTRA_NUMBERS = {
    "plain_loop": ("fade_vs_plain_pct", "samples_per_s"), "flops": ("pct_of_peak", "achieved_tflops"),
    "memory": ("peak_allocated_bytes",), "loss_check": ("loss", "fp32_loss"),
}

# The dtypes the GEMM plot has a panel for (measure.case.GEMM_DTYPES; tests/reliability/test_readers.py holds
# the two equal): a GEMM record of another dtype could not be drawn.
GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
_COUNT = "a positive integer"
_POSITIVE = "a positive number"
# What the micro suite's plots (report.plots) read of an "ok" record with a value, by family (the case id's
# first part): dotted path -> a JSON type, _COUNT, _POSITIVE, or the tuple of values allowed.
MICRO_DRAWN = {
    "gemm": {"params.dtype": GEMM_DTYPES, "work.flops": _POSITIVE},  # a square GEMM's m too: its label, its order
    "memory": {"params.elements": _COUNT},
    "transfer": {"params.direction": str, "params.memory": str, "params.nbytes": _COUNT},
    "conv": {"params.dtype": str, "params.layout": str, "params.layer": str, "params.direction": str, "params.n": _COUNT},
    "sdpa": {"params.dtype": str, "params.backend": str, "params.batch": _COUNT, "params.heads": _COUNT,
             "params.seq": _COUNT, "params.head_dim": _COUNT, "extra.backend_ran": str},
    "cpu_vs_gpu": {"params.n": _COUNT, "params.dtype": str, "extra.cpu.tflops": _POSITIVE,
                   "extra.gpu.tflops": _POSITIVE},
}  # fmt: skip
# What the dist plots read of a collective's "ok" record (one with extra.collective).
DIST_DRAWN = {"extra.world": _COUNT, "extra.size_bytes": _COUNT}

# Each entry of a dist scaling record's extra.scaling: the numbers compare, report and plots read.
SCALING_NUMBERS = ("world", "samples_per_s_per_process", "efficiency_pct", "exposed_comm_pct", "median_step_s")


def record_problem(record) -> Optional[str]:
    """None when `record` can be read by every FADE reader, else the first reason it cannot (one line)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("schema_version") != SCHEMA_VERSION:
        return (f"schema_version {_short(record.get('schema_version'))} is not one this FADE reads "
                f"({SCHEMA_VERSION}); upgrade FADE to read it")  # fmt: skip
    if "case_id" not in record or "status" not in record:
        return "record has no case_id or status"
    for name, types in FIELD_TYPES.items():
        if name in record and not _is(record[name], types):
            return f"field {name!r} is {_kind(record[name])}, expected {_names(types)}"
    if record["status"] not in STATUSES:
        return f"status {_short(record['status'])} is none of {', '.join(STATUSES)}"
    for (parent, name), types in NESTED_TYPES.items():
        holder = record.get(parent) or {}
        if name in holder and not _is(holder[name], types):
            return f"field {parent}.{name} is {_kind(holder[name])}, expected {_names(types)}"
    for reason_list in ("throttle_reasons", "contention_reasons"):
        if not all(isinstance(item, str) for item in (record.get("telemetry") or {}).get(reason_list) or []):
            return f"field telemetry.{reason_list} holds a non-string"
    for entry in (record.get("extra") or {}).get("scaling") or []:
        if not isinstance(entry, dict) or not all(_is(entry.get(name), (*_NUMBER, type(None))) for name in SCALING_NUMBERS):
            return f"field extra.scaling holds an entry without numbers for {', '.join(SCALING_NUMBERS)}"
    for parent, names in EXTRA_NUMBERS.items():
        holder = (record.get("extra") or {}).get(parent) or {}
        if not isinstance(holder, dict):
            return f"field extra.{parent} is {_kind(holder)}, expected an object or null"
        for name in names:
            if name in holder and not _is(holder[name], (*_NUMBER, type(None))):
                return f"field extra.{parent}.{name} is {_kind(holder[name])}, expected a number or null"
    return _variant_problem(record) or _range_problem(record) or _drawn_problem(record)


def _variant_problem(record: dict) -> Optional[str]:
    """extra.variant (models suite): compare's note joins its not_applicable knobs (the bench writes an object of
    "knob=value" -> why; a list of names reads the same)."""
    variant = (record.get("extra") or {}).get("variant") or {}
    knobs = variant.get("not_applicable")
    if isinstance(knobs, dict):
        knobs = list(knobs) if all(isinstance(why, str) for why in knobs.values()) else None
        if knobs is None:
            return "field extra.variant.not_applicable is an object whose reasons are not all strings"
    if knobs is not None and not (isinstance(knobs, list) and all(isinstance(knob, str) for knob in knobs)):
        return "field extra.variant.not_applicable is neither a list of strings nor an object of strings"
    for name in ("name", "ran_as"):
        if not _is(variant.get(name), _SCALAR):
            return f"field extra.variant.{name} is {_kind(variant[name])}, expected a string or null"
    return None


def _range_problem(record: dict) -> Optional[str]:
    """The first float the readers compute with that lies outside FLOAT_MIN..FLOAT_MAX (0 allowed)."""
    numbers = [(name, record.get(name)) for name in ("value", "duration_s")]
    numbers += [(f"{parent}.{name}", (record.get(parent) or {}).get(name)) for parent, name in NESTED_TYPES]
    extra = record.get("extra") or {}
    numbers += [(f"extra.{parent}.{name}", (extra.get(parent) or {}).get(name))
                for parent, names in EXTRA_NUMBERS.items() for name in names]  # fmt: skip
    numbers += [(f"extra.scaling.{name}", entry.get(name)) for entry in extra.get("scaling") or [] for name in SCALING_NUMBERS]
    for side in ("cpu", "gpu"):
        if isinstance(extra.get(side), dict):
            numbers.append((f"extra.{side}.tflops", extra[side].get("tflops")))
    for name, number in numbers:
        if isinstance(number, float) and number and not FLOAT_MIN <= abs(number) <= FLOAT_MAX:
            return f"field {name} is {number:g}, outside the {FLOAT_MIN:g}..{FLOAT_MAX:g} FADE computes with"
    return None


def _drawn_problem(record: dict) -> Optional[str]:
    """What the plots read of an "ok" record with a value (MICRO_DRAWN, DIST_DRAWN): present and of its type."""
    if record.get("status") != "ok" or record.get("value") is None:
        return None
    wanted: dict = {}
    if record.get("suite") == "micro":
        family = str(record.get("case_id")).split("/", 1)[0]
        wanted = MICRO_DRAWN.get(family, {})
        if family == "gemm" and str((record.get("params") or {}).get("shape", "")).startswith("square"):
            wanted = {**wanted, "params.m": _COUNT}
    elif record.get("suite") == "dist" and (record.get("extra") or {}).get("collective"):
        wanted = DIST_DRAWN
    peak = record.get("peak")
    if peak:  # drawn as a dashed line labelled with its value and unit
        wanted = {**wanted, "peak.value": _POSITIVE, "peak.unit": str}
    for dotted, kind in wanted.items():
        value = record
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not _drawable(value, kind):
            what = ("one of " + ", ".join(kind)) if isinstance(kind, tuple) else kind if isinstance(kind, str) else _names((kind,))
            found = "missing or null" if value is None else _short(value) if isinstance(value, (str, int, float)) else _kind(value)
            return f"field {dotted} is {found}, expected {what} (the plots draw it)"
    return None


def _drawable(value, kind) -> bool:
    if isinstance(kind, tuple):
        return isinstance(value, str) and value in kind
    if kind is _COUNT:
        return _is(value, (int,)) and value > 0
    if kind is _POSITIVE:
        return _is(value, _NUMBER) and value > 0
    return _is(value, (kind,))


def _is(value, types: tuple) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number here
    return isinstance(value, types)


_JSON_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "an array",
               bool: "true/false", type(None): "null"}  # fmt: skip


def _kind(value) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _names(types: tuple) -> str:
    names = [_JSON_NAMES[kind] for kind in types if not (kind is float and int in types)]
    return " or ".join(dict.fromkeys("a number" if name == "an integer" and float in types else name for name in names))


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _other_document(text: str) -> Optional[str]:
    """What the file is when it holds one indented JSON document (a snapshot, a tuning profile, a --json
    report) instead of one record per line; None for a JSONL file."""
    first_line = text.lstrip().split("\n", 1)[0].strip()
    if first_line not in ("{", "["):
        return None
    try:
        document = parse_json(text)
    except UnreadableFile:
        return None
    if isinstance(document, dict) and "kfd_nodes" in document and "pci" in document:
        return "this is a snapshot (fade doctor --snapshot reads it)"
    if isinstance(document, dict) and "knobs" in document and "env" in document:
        return "this is a tuning profile (fade tune --show reads it)"
    return "this is one indented JSON document"


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
    (IQR / median, %), cov_pct, n, noisy, throttled, contended (other work on the host or device during the
    case: telemetry.contended), note (error, skip reason or the SDPA backend that ran).
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
        fallbacks = fallback_note(extra)
        if fallbacks:
            note = fallbacks if note is None else f"{note}; {fallbacks}"
        if note is None and telemetry.get("throttled"):
            note = "throttled: " + ", ".join(map(str, telemetry.get("throttle_reasons") or []))
        if telemetry.get("contended"):
            reasons = "contended: " + "; ".join(map(str, telemetry.get("contention_reasons") or []))
            note = reasons if note is None else f"{note}; {reasons}"
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
                "iqr_pct": None if not median_s else 100.0 * (stats.get("iqr_s") or 0.0) / median_s,
                "cov_pct": None if stats.get("cov") is None else 100.0 * stats["cov"],
                "n": stats.get("n"),
                "noisy": bool(stats.get("noisy")),
                "throttled": bool(telemetry.get("throttled")),
                "contended": bool(telemetry.get("contended")),
                "note": note,
            }
        )
    return rows


FALLBACK_OPS_SHOWN = 3  # ops named in a row's fallback note; the record's extra.ocl_fallbacks has them all


def fallback_note(extra: dict) -> Optional[str]:
    """"ocl fallbacks: 23 (aten::cat.out 3, ...)" for a case on fade.ocl (extra.ocl_fallbacks: ops that ran on
    the CPU for lack of an OpenCL kernel), "ocl fallbacks: 0" when none did; None for other devices."""
    fallbacks = extra.get("ocl_fallbacks")
    if not isinstance(fallbacks, dict):
        return None
    ops = list((fallbacks.get("ops") or {}).items())
    named = ", ".join(f"{op} {count}" for op, count in ops[:FALLBACK_OPS_SHOWN])
    named += ", ..." if len(ops) > FALLBACK_OPS_SHOWN else ""
    note = f"ocl fallbacks: {fallbacks.get('total', 0)}" + (f" ({named})" if named else "")
    timed = extra.get("ocl_fallbacks_timed")  # the model bench's timed steps alone
    return note + (f", {timed.get('total', 0)} in the timed steps" if isinstance(timed, dict) else "")


class OutputFull(OSError):
    """A results file stopped taking lines (full disk, quota, I/O error); the lines before are whole."""


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte of `data` is out (the one place a results line is written)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


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
        """Write one line; OutputFull when it cannot (the file is cut back to its last whole line first)."""
        data = dumps_line(record).encode("utf-8")
        with _sigint_deferred():
            size_before = os.fstat(self.fd).st_size
            try:
                write_all(self.fd, data)
                os.fsync(self.fd)
            except OSError as error:
                try:
                    os.ftruncate(self.fd, size_before)  # no torn last line: the file ends on a whole record
                except OSError:
                    pass
                raise OutputFull(f"cannot write {self.path}: {error.strerror or error}; "
                                 f"the {self.path.name} records before this case are intact") from None

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
