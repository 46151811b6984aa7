"""Reads `fade ops` result files back: one flat row per op × dtype (the latest record), with its class.

An ops file is a results JSONL (record.py, docs/results.md) whose records have suite "opinfo" and keep
the op's classification in `extra` (docs/ops.md). A record whose worker died or hung has runner status
"crashed" / "timeout" and no `extra`; its class (crash / hang) comes from the status. torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from fade.errors import FadeUsageError
from fade.analyze.ops.curated import curated_rows_for
from fade.analyze.ops.families import family_of
from fade.analyze.ops.outcome import CLASS_OF_RUNNER_STATUS, CLASSES, claim_finding
from fade.results import latest_records, read_records

SUITE = "opinfo"
CASE_PREFIX = "opinfo/"  # case ids are "opinfo/<op id>/<dtype>"


def case_id(op_id: str, dtype: str) -> str:
    return f"{CASE_PREFIX}{op_id}/{dtype}"


def split_case_id(identifier: str) -> tuple:
    """"opinfo/nn.functional.conv2d/float16" -> ("nn.functional.conv2d", "float16")."""
    body = identifier[len(CASE_PREFIX):] if identifier.startswith(CASE_PREFIX) else identifier
    op_id, _, dtype = body.rpartition("/")
    return op_id, dtype


def mismatch_reason(ratio: Optional[float], structural_notes: list) -> Optional[str]:
    """Why a mismatch is one: values out of tolerance ("2.45x tolerance"), or, when every value is inside
    it, the structural difference (an output's dtype or shape differs from the CPU's)."""
    if ratio is not None and ratio > 1:
        return f"{ratio:.3g}x tolerance"
    if structural_notes:
        return structural_notes[0]
    return None if ratio is None else f"{ratio:.3g}x tolerance"


def ops_row(record: dict) -> dict:
    """The flat row of one ops record. Keys: op, dtype, family, class, claimed, claim_finding, curated,
    message, note, max_tolerance_ratio, mismatch_reason, device_median_s, cpu_median_s, timed_input_bytes, timed_sample,
    slow_reason, known_mismatch, fallback_ops (ATen op -> calls through fade.ocl's CPU fallback), torch_device."""
    extra = record.get("extra") or {}
    op_id, dtype = split_case_id(record.get("case_id", ""))
    op_id = extra.get("op") or op_id
    dtype = extra.get("dtype") or dtype
    status = record.get("status")
    if status == "ok" and extra.get("class") in CLASSES:
        op_class = extra["class"]
        message = extra.get("message")
    else:
        op_class = CLASS_OF_RUNNER_STATUS.get(status, "error")
        message = record.get("error")
    claimed = extra.get("claimed", (record.get("params") or {}).get("claimed"))
    samples = extra.get("samples") or []
    ratios = [
        (sample.get("closeness") or {}).get("max_tolerance_ratio")
        for sample in samples
        if sample.get("class") == "mismatch"
    ]
    ratios = [ratio for ratio in ratios if ratio is not None]
    notes = [sample.get("note") for sample in samples if sample.get("note")]
    structural = [note for sample in samples if sample.get("class") == "mismatch"
                  for note in (sample.get("closeness") or {}).get("notes") or []]
    timing = extra.get("timing") or {}
    return {
        "op": op_id,
        "dtype": dtype,
        "family": extra.get("family") or (record.get("params") or {}).get("family") or family_of(op_id),
        "class": op_class,
        "claimed": claimed,
        "claim_finding": claim_finding(op_class, claimed),
        "curated": extra.get("curated", curated_rows_for(op_id, dtype)),
        "message": message,
        "note": extra.get("untested_reason") or (notes[0] if notes else None),
        "max_tolerance_ratio": max(ratios) if ratios else None,
        "mismatch_reason": mismatch_reason(max(ratios) if ratios else None, structural),
        "known_mismatch": bool(extra.get("known_mismatch")) and op_class == "mismatch",
        "device_median_s": timing.get("device_median_s"),
        "cpu_median_s": timing.get("cpu_median_s"),
        "timed_input_bytes": timing.get("input_bytes"),
        "timed_sample": timing.get("sample"),
        "slow_reason": extra.get("slow_reason"),
        "fallback_ops": extra.get("fallback_ops") or {},
        "torch_device": record.get("torch_device"),
    }


def load_ops_file(path, *, strict: bool = True, device: Optional[str] = None, allow_empty: bool = False) -> dict:
    """{"path", "device", "label", "rows", "problems"} for one ops results file.

    strict: a corrupt line or a record of another suite raises FadeUsageError naming the file and line;
    otherwise they are skipped (and corrupt lines listed in `problems`). A file with no ops records raises
    unless `allow_empty`; a file holding several devices needs `device` to pick one.
    """
    path = Path(path)
    if not path.is_file():
        raise FadeUsageError(f"{path}: no such results file; write one with `fade ops -o {path.name}`")
    found = read_records(path, strict=strict)
    records = []
    for number, record in enumerate(found.records, start=1):
        if record.get("suite") != SUITE:
            if strict:
                raise FadeUsageError(
                    f"{path}: record {number} ({record.get('case_id')!r}) is suite {record.get('suite')!r}, "
                    f"not an ops result; `fade ops compare` reads files written by `fade ops`"
                )
            continue
        records.append(record)
    devices = sorted({record.get("torch_device") for record in records if record.get("torch_device")})
    if device is not None:
        records = [record for record in records if record.get("torch_device") == device]
    elif len(devices) > 1:
        raise FadeUsageError(f"{path}: holds results of {len(devices)} devices ({', '.join(devices)}); use one file per device")
    if not records and not allow_empty:
        raise FadeUsageError(f"{path}: no ops results in it; run `fade ops -o {path.name}` first")
    latest = latest_records(records)
    return {
        "path": str(path),
        "device": latest[-1].get("torch_device") if latest else device,
        "label": side_label(latest[-1]) if latest else str(device),
        "rows": [ops_row(record) for record in latest],
        "problems": list(found.problems),
    }


def side_label(record: dict) -> str:
    """"cuda:0 NVIDIA H100 80GB HBM3, torch 2.13.0+cu130": the device and stack a file was measured on."""
    device_info = record.get("device") or {}
    name = device_info.get("name") or (device_info.get("torch") or {}).get("name")
    torch_info = (record.get("stack") or {}).get("torch") or {}
    parts = [record.get("torch_device") or "?"]
    if name:
        parts.append(str(name))
    label = " ".join(parts)
    if torch_info.get("version"):
        runtime = f" HIP {torch_info['hip']}" if torch_info.get("hip") else ""
        label += f", torch {torch_info['version']}{runtime}"
    return label
