"""Diagnose a snapshot: the device truth table plus every known issue that applies, with its fix.

Pure: data in, data out. The same function serves `fade doctor` live and `--snapshot FILE`.
"""

from __future__ import annotations

from fade.analyze import facts as facts_mod
from fade.analyze.devices import device_truths
from fade.analyze.rules import RULES_FILE, SEVERITIES, condition_holds, load_rules, render


def _finding(rule, facts: dict, device: int | None) -> dict:
    return {"id": rule.id, "severity": rule.severity, "title": render(rule.title, facts),
            "detail": render(rule.explain, facts), "fix": render(rule.fix, facts),
            "fix_env": {k: render(v, facts) for k, v in rule.fix_env.items()},
            "fix_safety": rule.fix_safety, "source": rule.source, "device": device}


def evaluate(snapshot: dict, measurements: dict | None = None, rules_path=RULES_FILE, truths=None):
    """→ (truths, findings). `measurements`: {"devices": {"cuda:0": {...}}} from fade.measure.suites.quick."""
    truths = device_truths(snapshot) if truths is None else truths
    system = facts_mod.system_facts(snapshot, truths)
    rules = load_rules(rules_path)
    findings = [_finding(r, system, None) for r in rules if r.scope == "system" and condition_holds(r.when, system)]
    per_device = (measurements or {}).get("devices", {})
    for position, truth in enumerate(truths):
        key = truth.index if truth.index is not None else f"os{position}"
        measured = per_device.get(f"cuda:{truth.index}") if truth.index is not None else None
        device = {**system, **facts_mod.device_facts(truth, snapshot, measured)}
        for rule in rules:
            if rule.scope == "device" and condition_holds(rule.when, device):
                findings.append(_finding(rule, device, truth.index if truth.index is not None else key))
    fired = {f["id"] for f in findings}
    by_id = {r.id: r for r in rules}
    findings = [f for f in findings if not fired & set(by_id[f["id"]].suppressed_by)]
    findings.sort(key=lambda f: (SEVERITIES.index(f["severity"]), f["id"], str(f["device"])))
    return truths, findings


def with_percent_of_peak(measurements: dict | None, truths) -> dict | None:
    """Add pct_of_peak to each GEMM/copy figure whose device has a spec-table (or computed) peak."""
    if not measurements:
        return measurements
    peaks = {f"cuda:{t.index}": t.peaks for t in truths if t.index is not None and t.peaks}
    out = {**measurements, "devices": {}}
    for name, result in measurements.get("devices", {}).items():
        result = {**result, "gemm": {k: dict(v) for k, v in (result.get("gemm") or {}).items()}}
        peak = peaks.get(name)
        for dtype, gemm in result["gemm"].items():
            tflops = peak.tflops.get(dtype) if peak else None
            gemm["peak"] = tflops
            gemm["pct_of_peak"] = round(100 * gemm["value"] / tflops, 1) if tflops else None
        if result.get("copy"):
            result["copy"] = dict(result["copy"])
            bandwidth = peak.bandwidth_gbs if peak else None
            result["copy"]["peak"] = bandwidth
            result["copy"]["pct_of_peak"] = round(100 * result["copy"]["value"] / bandwidth, 1) if bandwidth else None
        out["devices"][name] = result
    return out


def diagnose(snapshot: dict, measurements: dict | None = None, rules_path=RULES_FILE) -> dict:
    """The doctor's report: {devices, findings, measurements, snapshot_source, stack, ..., opencl (the snapshot's
    optional OpenCL section with `missing`, what keeps fade.ocl from a full set-up; None when not collected)}."""
    truths = device_truths(snapshot)
    measurements = with_percent_of_peak(measurements, truths)
    truths, findings = evaluate(snapshot, measurements, rules_path, truths)
    torch = snapshot.get("torch") or {}
    return {
        "devices": [t.to_dict() for t in truths],
        "findings": findings,
        "measurements": measurements,
        "stack": {"torch": torch.get("version"), "hip": torch.get("hip"), "cuda": torch.get("cuda"),
                  "rocm": (snapshot.get("rocm") or {}).get("version"), "os": snapshot.get("os"),
                  "python": snapshot.get("python")},
        "snapshot_source": snapshot.get("source"),
        "probe": snapshot.get("probe") or {"torch": "live"},
        "collection_errors": snapshot.get("errors") or {},
        "opencl": None if snapshot.get("opencl") is None else {**snapshot["opencl"],
                                                               "missing": facts_mod.opencl_missing(snapshot["opencl"])},
    }


def exit_code(report: dict) -> int:
    return 1 if any(f["severity"] == "fail" for f in report["findings"]) else 0
