"""Render a tuning file's content (fade.act.tune.tuning_file) as terminal text: the verdict, the final check, the
chosen knobs, every candidate and the env lines. The text is not a contract: the JSON is."""

from __future__ import annotations

import json

from fade.report.text import printable


def render_tuning(tuning: dict) -> str:
    """The terminal text of one tuning result (build_tuning's, or read_tuning's checked form of a file), one line
    per fact, without a trailing newline. Every string from the tuning goes through printable: a file may come
    from anyone, and its control characters must show, not act (issue 30)."""
    lines = diagnosis_lines(tuning)
    before, after = tuning.get("before"), tuning.get("after")
    device = tuning["device"].get("name")
    lines.append(f"{_text(tuning['model'])} {_text(tuning['mode'])} b{tuning['batch']} on {_text(device)}: "
                 f"{_text(tuning.get('verdict') or 'no verdict recorded')}")  # fmt: skip
    if tuning.get("verdict_reason"):
        lines.append(f"  {_text(tuning['verdict_reason'])}")
    final = tuning.get("final_check") or {}
    if before and after and final.get("speedup"):
        unit = "tokens/s" if tuning["mode"] == "generate" else "samples/s"  # a decode run's samples are its tokens
        lines.append(f"  final check: baseline {before['samples_per_s']:.4g} {unit}{_iqr(before)}"
                     f"  candidate {after['samples_per_s']:.4g}{_iqr(after)}  x{final['speedup']:.2f}")  # fmt: skip
    chosen = ", ".join(f"{_text(knob)}={_text(value)}" for knob, value in tuning["changed"].items())
    lines.append(f"  chosen: {chosen or 'PyTorch defaults (nothing recommended)'}")
    load = tuning.get("host_load")
    if load:
        lines.append(f"  host load: other processes {load['other_cores']:.2f} of {load['cores']} cores, run queue {load['run_queue']}")
    for row in tuning["candidates"]:
        if row["status"] in ("baseline",):
            continue
        name = f"{row['knob']}={row['value']}" if row["knob"] else json.dumps(row["config"], sort_keys=True)
        rate = f"{row['samples_per_s']:.4g}/s" if row.get("samples_per_s") else "-"
        lines.append(f"  {_text(row['status']):<13} {_text(name):<32} {rate:>10}  {_text(row['reason'])}")
    for knob, reason in tuning["left_out"].items():
        lines.append(f"  not searched  {_text(knob)}: {_text(reason)}")
    for line in tuning["env_lines"]:  # regenerated from the checked env by build_tuning and read_tuning
        lines.append(f"  {_text(line)}")
    return "\n".join(lines)


def diagnosis_lines(tuning: dict) -> list:
    """What the profiled baseline step said and the search order it gave, each knob with why it sits there: the
    first lines of the output (issue 26: the diagnosis first, then the verdict)."""
    plan = tuning.get("plan") or {}
    lines = []
    if plan.get("note"):
        lines.append(f"diagnosis: {_text(plan['note'])}")
    for verdict in plan.get("diagnosis") or []:
        share = f" ({100 * verdict['share']:.0f}% of the step)" if verdict.get("share") else ""
        lines.append(f"  {_text(verdict.get('rule'))}{share}: {_text(verdict.get('title'))}")
    for entry in plan.get("unanswered") or []:
        lines.append(f"  no knob fixes {_text(entry['rule'])}: {_text(entry['fix'])}")
    visits = plan.get("visits") or []
    if visits:
        lines.append("search order:")
        for visit in visits:
            lines.append(f"  {_text(visit['knob'])} ({_text('/'.join(visit['values']))}): {_text(visit['why'])}")
    return lines


def _iqr(measurement: dict) -> str:
    """' (IQR 1.2%)', or '' for a measurement that records no spread."""
    spread = measurement.get("relative_iqr")
    return "" if spread is None else f" (IQR {100 * spread:.1f}%)"


def _text(value) -> str:
    """`value` as it prints: str() of it with control characters escaped (fade.report.text.printable)."""
    return printable(str(value))
