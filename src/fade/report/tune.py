"""Render a tuning file's content (fade.act.tune.tuning_file) as terminal text: the verdict, the final check, the
chosen knobs, every candidate and the env lines. The text is not a contract: the JSON is."""

from __future__ import annotations

import json


def render_tuning(tuning: dict) -> str:
    """The terminal text of one tuning result, one line per fact, without a trailing newline."""
    lines = diagnosis_lines(tuning)
    before, after = tuning.get("before"), tuning.get("after")
    lines.append(f"{tuning['model']} {tuning['mode']} b{tuning['batch']} on {tuning['device'].get('name')}: {tuning['verdict']}")
    if tuning.get("verdict_reason"):
        lines.append(f"  {tuning['verdict_reason']}")
    final = tuning.get("final_check") or {}
    if before and after and final.get("speedup"):
        lines.append(f"  final check: baseline {before['samples_per_s']:.4g} samples/s (IQR {100 * before['relative_iqr']:.1f}%)"
                     f"  candidate {after['samples_per_s']:.4g} (IQR {100 * after['relative_iqr']:.1f}%)  x{final['speedup']:.2f}")  # fmt: skip
    lines.append(f"  chosen: {', '.join(f'{k}={v}' for k, v in tuning['changed'].items()) or 'PyTorch defaults (nothing recommended)'}")
    load = tuning.get("host_load")
    if load:
        lines.append(f"  host load: other processes {load['other_cores']:.2f} of {load['cores']} cores, run queue {load['run_queue']}")
    for row in tuning["candidates"]:
        if row["status"] in ("baseline",):
            continue
        name = f"{row['knob']}={row['value']}" if row["knob"] else json.dumps(row["config"], sort_keys=True)
        rate = f"{row['samples_per_s']:.4g}/s" if row.get("samples_per_s") else "-"
        lines.append(f"  {row['status']:<13} {name:<32} {rate:>10}  {row['reason']}")
    for knob, reason in tuning.get("left_out", {}).items():
        lines.append(f"  not searched  {knob}: {reason}")
    for line in tuning.get("env_lines", []):
        lines.append(f"  {line}")
    return "\n".join(lines)


def diagnosis_lines(tuning: dict) -> list:
    """What the profiled baseline step said and the search order it gave, each knob with why it sits there: the
    first lines of the output (issue 26: the diagnosis first, then the verdict)."""
    plan = tuning.get("plan") or {}
    lines = []
    if plan.get("note"):
        lines.append(f"diagnosis: {plan['note']}")
    for verdict in plan.get("diagnosis") or []:
        share = f" ({100 * verdict['share']:.0f}% of the step)" if verdict.get("share") else ""
        lines.append(f"  {verdict.get('rule')}{share}: {verdict.get('title')}")
    for entry in plan.get("unanswered") or []:
        lines.append(f"  no knob fixes {entry['rule']}: {entry['fix']}")
    visits = plan.get("visits") or []
    if visits:
        lines.append("search order:")
        for visit in visits:
            lines.append(f"  {visit['knob']} ({'/'.join(visit['values'])}): {visit['why']}")
    return lines
