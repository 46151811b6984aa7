"""The op-coverage gap between two sweeps (devices or stacks), and the per-family summary of one sweep.

Input: the flat rows of results.py. The gap lists, per op × dtype present in both files: what runs on A and
not on B and the reverse (outcome.RUNS vs FAILS classes), mismatches on one side only, and speed ratios
of at least GAP_SPEED_RATIO. Rows present in only one file are counted, not compared. torch-free.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from fade.analyze.ops.curated import CURATED

OP_ROWS = frozenset(row.name for row in CURATED if row.ops)  # curated rows that name ops (not a dtype)
from fade.analyze.ops.families import FAMILIES
from fade.analyze.ops.outcome import CLASSES, FAILS, NATIVE, RUNS, WORKS
from fade.analyze.ops.rows import load_ops_file

# A speed ratio is listed when one side takes >= GAP_SPEED_RATIO times the other's time on the same sample
# (same sample index and input bytes) and the slower side takes >= GAP_MIN_SLOWER_S: below that both are
# launch- and sync-bound (5-20 us on any GPU), and a GPU losing to a CPU by 10 us is no gap.
GAP_SPEED_RATIO = 5.0
GAP_MIN_SLOWER_S = 200e-6
TOP_FALLBACK_OPS = 15  # ATen ops listed in a sweep's coverage (those that fell back in the most op x dtypes)


def family_summary(rows: list) -> dict:
    """family -> {"tried", "ok", "pct_ok", "classes": {class: n}}; plus "all". `tried` leaves out
    `untested` (no sample input was made); `ok` counts ok, slow and fallback (it ran and matched)."""
    summary = {}
    for family in FAMILIES + ("all",):
        selected = [row for row in rows if family == "all" or row["family"] == family]
        classes = Counter(row["class"] for row in selected)
        tried = sum(count for name, count in classes.items() if name != "untested")
        working = sum(classes[name] for name in WORKS)
        summary[family] = {
            "tried": tried,
            "ok": working,
            "pct_ok": 100.0 * working / tried if tried else None,
            "classes": {name: classes[name] for name in CLASSES if classes[name]},
        }
    return summary


def sweep_summary(rows: list) -> dict:
    """What one sweep found: counts per class and per family, dtype-claim findings, curated rows."""
    ops = {row["op"] for row in rows}
    dtypes = sorted({row["dtype"] for row in rows})
    claims = Counter(row["claim_finding"] for row in rows if row["claim_finding"])
    return {
        "ops": len(ops),
        "dtypes": dtypes,
        "op_dtypes": len(rows),
        "classes": {name: count for name, count in Counter(row["class"] for row in rows).most_common()},
        "families": family_summary(rows),
        "claims": dict(claims),
        "claim_findings": [_brief(row) for row in rows if row["claim_finding"]],
        "findings": [_brief(row) for row in rows if row["class"] not in ("ok", "unsupported", "untested", "fallback")],
        "curated": curated_summary(rows),
        "coverage": coverage_summary(rows),
    }


def coverage_summary(rows: list) -> dict:
    """Per dtype, how many op x dtypes ran natively (ok, slow), through the backend's CPU fallback (fade.ocl),
    mismatched, failed (error, unsupported, crash, hang) or were untested; and the ATen ops that fell back in
    the most op x dtypes (`top_fallback_ops`: [op, op x dtypes, calls]), TOP_FALLBACK_OPS of them."""
    per_dtype: dict = {}
    for row in rows:
        counts = per_dtype.setdefault(row["dtype"], {"native": 0, "fallback": 0, "mismatch": 0, "failed": 0,
                                                     "untested": 0})
        name = row["class"]
        key = "native" if name in NATIVE else name if name in ("fallback", "mismatch", "untested") else "failed"
        counts[key] += 1
    op_dtypes: Counter = Counter()
    calls: Counter = Counter()
    for row in rows:
        for aten_op, count in (row.get("fallback_ops") or {}).items():
            op_dtypes[aten_op] += 1
            calls[aten_op] += count
    ranked = sorted(op_dtypes.items(), key=lambda item: (-item[1], item[0]))
    top = [[aten_op, n, calls[aten_op]] for aten_op, n in ranked]
    return {"per_dtype": dict(sorted(per_dtype.items())), "fallback_aten_ops": len(op_dtypes),
            "top_fallback_ops": top[:TOP_FALLBACK_OPS]}


def curated_summary(rows: list) -> list:
    """One entry per curated row: its op × dtypes and how many worked, with the ones that did not."""
    entries = []
    for curated in CURATED:
        selected = [row for row in rows if curated.name in (row.get("curated") or [])]
        tried = [row for row in selected if row["class"] != "untested"]
        working = [row for row in tried if row["class"] in WORKS]
        entries.append(
            {
                "name": curated.name,
                "why": curated.why,
                "source": curated.source,
                "tried": len(tried),
                "ok": len(working),
                "not_ok": [_brief(row) for row in tried if row["class"] not in WORKS],
            }
        )
    return entries


def compare_ops(path_a, path_b) -> dict:
    """The gap table between two ops result files; FadeUsageError for a missing, corrupt or foreign file."""
    return compare_sweeps(load_ops_file(path_a), load_ops_file(path_b))


def compare_sweeps(side_a: dict, side_b: dict) -> dict:
    """The gap table between two loaded files (results.load_ops_file). A and B keep their order."""
    rows_a = {(row["op"], row["dtype"]): row for row in side_a["rows"]}
    rows_b = {(row["op"], row["dtype"]): row for row in side_b["rows"]}
    common = [key for key in rows_a if key in rows_b]
    gap = {
        "a": {"label": side_a["label"], "path": side_a["path"], "device": side_a["device"]},
        "b": {"label": side_b["label"], "path": side_b["path"], "device": side_b["device"]},
        "common": len(common),
        "only_in_a": len(rows_a) - len(common),
        "only_in_b": len(rows_b) - len(common),
        "works_a_not_b": [],
        "works_b_not_a": [],
        "mismatch_a_only": [],
        "mismatch_b_only": [],
        "speed": [],
        "families": {},
        "curated": [],
    }
    for key in common:
        a, b = rows_a[key], rows_b[key]
        pair = _pair(a, b)
        if a["class"] in RUNS and b["class"] in FAILS:
            gap["works_a_not_b"].append(pair)
        elif b["class"] in RUNS and a["class"] in FAILS:
            gap["works_b_not_a"].append(pair)
        if a["class"] == "mismatch" and b["class"] != "mismatch" and b["class"] not in FAILS:
            gap["mismatch_a_only"].append(pair)
        elif b["class"] == "mismatch" and a["class"] != "mismatch" and a["class"] not in FAILS:
            gap["mismatch_b_only"].append(pair)
        ratio = speed_ratio(a, b)
        if ratio is not None:
            gap["speed"].append(dict(pair, b_over_a=ratio))
        if set(pair["curated"]) & OP_ROWS:  # the bf16 row covers every op: it is summarized, not listed
            gap["curated"].append(pair)
    for name in ("works_a_not_b", "works_b_not_a", "mismatch_a_only", "mismatch_b_only", "curated"):
        gap[name].sort(key=lambda pair: (FAMILIES.index(pair["family"]) if pair["family"] in FAMILIES else 99, pair["op"], pair["dtype"]))
    gap["speed"].sort(key=lambda pair: -max(pair["b_over_a"], 1.0 / pair["b_over_a"]))
    common_a = [rows_a[key] for key in common]
    common_b = [rows_b[key] for key in common]
    gap["curated_rows"] = [
        {
            "name": entry_a["name"],
            "why": entry_a["why"],
            "source": entry_a["source"],
            "a_tried": entry_a["tried"],
            "a_ok": entry_a["ok"],
            "b_tried": entry_b["tried"],
            "b_ok": entry_b["ok"],
        }
        for entry_a, entry_b in zip(curated_summary(common_a), curated_summary(common_b))
    ]
    summary_a, summary_b = family_summary(common_a), family_summary(common_b)
    for family in FAMILIES + ("all",):
        gap["families"][family] = {
            "a": summary_a[family],
            "b": summary_b[family],
            "works_a_not_b": sum(1 for pair in gap["works_a_not_b"] if family in ("all", pair["family"])),
            "works_b_not_a": sum(1 for pair in gap["works_b_not_a"] if family in ("all", pair["family"])),
            "mismatch_a_only": sum(1 for pair in gap["mismatch_a_only"] if family in ("all", pair["family"])),
            "mismatch_b_only": sum(1 for pair in gap["mismatch_b_only"] if family in ("all", pair["family"])),
            "speed": sum(1 for pair in gap["speed"] if family in ("all", pair["family"])),
        }
    return gap


def speed_ratio(a: dict, b: dict) -> Optional[float]:
    """B's time over A's on the same timed sample, when it passes GAP_SPEED_RATIO and GAP_MIN_SLOWER_S."""
    a_s, b_s = a.get("device_median_s"), b.get("device_median_s")
    if not a_s or not b_s or a["class"] not in WORKS or b["class"] not in WORKS:
        return None
    if a.get("timed_sample") != b.get("timed_sample") or a.get("timed_input_bytes") != b.get("timed_input_bytes"):
        return None  # different samples: the times do not compare
    ratio = b_s / a_s
    if max(ratio, 1.0 / ratio) < GAP_SPEED_RATIO or max(a_s, b_s) < GAP_MIN_SLOWER_S:
        return None
    return ratio


def _pair(a: dict, b: dict) -> dict:
    return {
        "op": a["op"],
        "dtype": a["dtype"],
        "family": a["family"],
        "curated": sorted(set(a.get("curated") or []) | set(b.get("curated") or [])),
        "a_class": a["class"],
        "b_class": b["class"],
        "a_message": a["message"] if a["class"] not in WORKS else None,
        "b_message": b["message"] if b["class"] not in WORKS else None,
        "a_tolerance_ratio": a["max_tolerance_ratio"],
        "b_tolerance_ratio": b["max_tolerance_ratio"],
        "a_mismatch_reason": a.get("mismatch_reason"),
        "b_mismatch_reason": b.get("mismatch_reason"),
        "a_median_s": a["device_median_s"],
        "b_median_s": b["device_median_s"],
    }


def _brief(row: dict) -> dict:
    keys = ("op", "dtype", "family", "class", "claimed", "claim_finding", "message", "note", "max_tolerance_ratio", "mismatch_reason",
            "known_mismatch", "slow_reason", "device_median_s", "cpu_median_s", "curated")
    return {key: row.get(key) for key in keys}
