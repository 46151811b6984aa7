"""Small hand-made result records for the compare and report tests (the fields those readers use)."""

import json


def record(case_id, value, *, unit="samples/s", status="ok", spread=0.01, suite=None, params=None, torch_device="cuda:0", **extra_fields):
    """A record whose per-call time has a relative IQR of `spread`; `extra_fields` replace record fields."""
    median_s = 1.0 / value if value else None
    stats = None
    if value:
        stats = {"median_s": median_s, "q1_s": median_s * (1 - spread / 2), "q3_s": median_s * (1 + spread / 2),
                 "iqr_s": median_s * spread, "noisy": spread > 0.1, "cov": spread, "n": 10}  # fmt: skip
    data = {
        "schema_version": 1,
        "fade_version": "0.1.0",
        "run_id": "20261122T000000Z-abcdef",
        "case_id": case_id,
        "suite": suite or case_id.split("/", 1)[0],
        "status": status,
        "torch_device": torch_device,
        "params": params or {},
        "value": value if status == "ok" else None,
        "unit": unit if status == "ok" else None,
        "stats": stats if status == "ok" else None,
        "extra": {},
        "device": {"name": "Test GPU"},
        "stack": {"python": "3.11", "torch": {"version": "2.13.0"}},
        "telemetry": {"available": False},
        "error": None if status == "ok" else f"{status} happened",
    }
    data.update(extra_fields)
    return data


def model_record(model, mode, variant, value, *, batch=64, **kwargs):
    params = {"model": model, "mode": mode, "variant": variant, "batch": batch, "size": None}
    return record(f"models/{model}/{mode}/{variant}/b{batch}", value, suite="models", params=params, **kwargs)


def write_jsonl(path, records, *, corrupt_line_at=None):
    lines = [json.dumps(item) for item in records]
    if corrupt_line_at is not None:
        lines.insert(corrupt_line_at, '{"schema_version": 1, "case_id": "torn')
    path.write_text("\n".join(lines) + "\n")
    return path
