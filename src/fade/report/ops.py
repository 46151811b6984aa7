"""Terminal views of an ops sweep (progress, per-class and per-family counts, curated highlights) and of the
gap table between two sweeps. Reads the dicts of gap.py only; the terminal text is not a contract (the
JSON of `--json` is).
"""

from __future__ import annotations

from typing import Optional

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fade.analyze.ops.families import FAMILIES
from fade.analyze.ops.outcome import CLASSES
from fade.analyze.ops.rows import ops_row
from fade.report.progress import ProgressBar

CLASS_STYLES = {
    "ok": "fade.ok",
    "slow": "fade.warn",
    "fallback": "fade.warn",
    "mismatch": "fade.fail",
    "unsupported": "fade.dim",
    "error": "fade.fail",
    "crash": "fade.fail",
    "hang": "fade.fail",
    "untested": "fade.dim",
}
NOTABLE = frozenset({"mismatch", "error", "crash", "hang", "slow"})  # printed as they happen
GAP_ROWS_SHOWN = 40  # rows per gap list on the terminal; --json has all
MESSAGE_WIDTH = 90


def ops_line(record: dict) -> Optional[Text]:
    """The progress line of a notable op × dtype (NOTABLE classes, or a dtype claim that failed); None for
    the others."""
    row = ops_row(record)
    if row["class"] not in NOTABLE and row["claim_finding"] != "claimed_fails":
        return None
    line = Text.assemble((f"{row['class']:>11}  ", CLASS_STYLES.get(row["class"], "")), f"{row['op']} {row['dtype']}")
    detail = row.get("slow_reason") or row.get("message") or row.get("note")
    if row["class"] == "mismatch" and row.get("mismatch_reason"):
        detail = row["mismatch_reason"] + (" (known)" if row.get("known_mismatch") else "")
    if row.get("claim_finding"):
        detail = f"[{row['claim_finding']}] " + (detail or "")
    if detail:
        line.append("  " + _cut(detail), style="fade.dim")
    return line


def ops_done_line(summary, records: list, total: int) -> Text:
    """`done: N op × dtypes (per-class counts, R already in the file) in S s -> FILE`."""
    counts: dict = {}
    for record in records:
        name = ops_row(record)["class"]
        counts[name] = counts.get(name, 0) + 1
    state = "interrupted" if summary.interrupted else "done"
    listed = ", ".join(f"{count} {name}" for name, count in sorted(counts.items())) or "nothing run"
    resumed = f", {summary.resumed} already in the file" if summary.resumed else ""
    return Text(f"{state}: {len(records)} op × dtypes ({listed}{resumed}) in {summary.wall_s:.0f} s -> {summary.out}",
                style="fade.dim")


def ops_progress(console=None) -> ProgressBar:
    """The sweep's progress (fade.report.progress.ProgressBar): `ops on DEVICE`, a line per notable op × dtype
    as it finishes, per-class counts at the end."""
    return ProgressBar(console, label="ops on {device}", show_case=False, line=ops_line, done_line=ops_done_line)


def render_sweep(sweep, console) -> None:
    """Per-class counts, the per-family table, dtype-claim findings and the curated highlights."""
    summary = sweep.summary
    console.print(
        Text(
            f"fade ops on {sweep.device}: {summary['ops']} ops × {len(summary['dtypes'])} dtypes "
            f"({', '.join(summary['dtypes'])}) = {summary['op_dtypes']} op × dtypes",
            style="fade.head",
        )
    )
    console.print(Text("  ".join(f"{name} {count}" for name, count in summary["classes"].items())))
    console.print(family_table(summary["families"]))
    claims = summary["claims"]
    if claims:
        console.print(
            Text(
                f"dtype claims: {claims.get('claimed_fails', 0)} claimed by OpInfo but failed here, "
                f"{claims.get('works_unclaimed', 0)} not claimed but ran",
                style="fade.warn",
            )
        )
    for entry in summary["curated"]:
        if not entry["tried"]:
            continue
        style = "fade.ok" if entry["ok"] == entry["tried"] else "fade.warn"
        text = Text.assemble((f"curated {entry['name']}: ", "fade.head"), (f"{entry['ok']}/{entry['tried']} ran correctly", style))
        failing = [f"{item['op']} {item['dtype']} {item['class']}" for item in entry["not_ok"][:6]]
        if failing:
            more = f" (+{len(entry['not_ok']) - 6})" if len(entry["not_ok"]) > 6 else ""
            text.append("; not: " + "; ".join(failing) + more, style="fade.dim")
        console.print(text, soft_wrap=True)
    findings = summary["findings"]
    if findings:
        table = Table(title="Findings (mismatch, error, crash, hang, slow)", title_justify="left", show_edge=False)
        for column in ("class", "op", "dtype", "family", "detail"):
            table.add_column(column)
        for item in findings[:GAP_ROWS_SHOWN]:
            table.add_row(Text(item["class"], style=CLASS_STYLES.get(item["class"], "")), escape(item["op"]), item["dtype"],
                          item["family"], Text(_cut(_detail(item)), style="fade.dim"))
        console.print(table)
        if len(findings) > GAP_ROWS_SHOWN:
            console.print(Text(f"... {len(findings) - GAP_ROWS_SHOWN} more in --json", style="fade.dim"))
    coverage = summary.get("coverage") or {}
    if coverage.get("fallback_aten_ops"):
        console.print(coverage_table(coverage))
    if sweep.run.problems:
        console.print(Text(f"{len(sweep.run.problems)} unreadable line(s) in {sweep.run.out}: {sweep.run.problems[0]}", style="fade.warn"))


def coverage_table(coverage: dict) -> Table:
    """Per dtype: native / fallback / mismatch / failed / untested op x dtypes, and the top fallback ATen ops."""
    table = Table(title="Coverage per dtype (fallback: ran through the backend's CPU fallback)", title_justify="left",
                  show_edge=False)
    columns = ("native", "fallback", "mismatch", "failed", "untested")
    table.add_column("dtype")
    for column in columns:
        table.add_column(column, justify="right")
    for dtype, counts in coverage["per_dtype"].items():
        table.add_row(dtype, *(str(counts[column]) for column in columns))
    top = ", ".join(f"{escape(op)} ({n})" for op, n, _calls in coverage["top_fallback_ops"])
    table.caption = f"{coverage['fallback_aten_ops']} ATen ops fell back; most op x dtypes: {top}"
    table.caption_justify = "left"
    return table


def family_table(families: dict, title: str = "Per family") -> Table:
    """One row per family that was tried; one column per class that occurred at all."""
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("family")
    table.add_column("tried", justify="right")
    table.add_column("% ok", justify="right")
    shown = [name for name in CLASSES if families["all"]["classes"].get(name)]
    for name in shown:
        table.add_column(name, justify="right")
    for family in FAMILIES + ("all",):
        data = families[family]
        if not data["tried"] and family != "all":
            continue
        table.add_row(family, str(data["tried"]), _pct(data["pct_ok"]), *(str(data["classes"].get(name, "")) for name in shown))
    return table


def render_gap(gap: dict, console) -> None:
    """The gap table: per-family summary, then the lists (runs on one side only, mismatch on one side only,
    speed ratios), then the curated ops side by side."""
    a, b = gap["a"], gap["b"]
    console.print(Text.assemble(("A: ", "fade.head"), a["label"], ("  ", ""), (a["path"], "fade.dim")))
    console.print(Text.assemble(("B: ", "fade.head"), b["label"], ("  ", ""), (b["path"], "fade.dim")))
    console.print(Text(f"{gap['common']} op × dtypes in both files ({gap['only_in_a']} only in A, {gap['only_in_b']} only in B)", style="fade.dim"))
    table = Table(title="Gap per family (op × dtypes in both files)", title_justify="left", show_edge=False)
    for column in ("family", "tried", "% ok A", "% ok B", "runs A not B", "runs B not A", "mismatch A only", "mismatch B only", "speed ≥5x"):
        table.add_column(column, justify="left" if column == "family" else "right")
    for family in FAMILIES + ("all",):
        data = gap["families"][family]
        if not data["a"]["tried"] and not data["b"]["tried"] and family != "all":
            continue
        table.add_row(
            family,
            str(max(data["a"]["tried"], data["b"]["tried"])),
            _pct(data["a"]["pct_ok"]),
            _pct(data["b"]["pct_ok"]),
            str(data["works_a_not_b"] or ""),
            str(data["works_b_not_a"] or ""),
            str(data["mismatch_a_only"] or ""),
            str(data["mismatch_b_only"] or ""),
            str(data["speed"] or ""),
        )
    console.print(table)
    _pair_table(console, "Runs on A, not on B", gap["works_a_not_b"], "b")
    _pair_table(console, "Runs on B, not on A", gap["works_b_not_a"], "a")
    _pair_table(console, "Mismatch on A only", gap["mismatch_a_only"], "a")
    _pair_table(console, "Mismatch on B only", gap["mismatch_b_only"], "b")
    if gap["speed"]:
        table = Table(title="Speed ratios (same sample, ≥5x, slower side ≥200 us)", title_justify="left", show_edge=False)
        for column in ("op", "dtype", "family", "A", "B", "B/A"):
            table.add_column(column, justify="right" if column in ("A", "B", "B/A") else "left")
        for pair in gap["speed"][:GAP_ROWS_SHOWN]:
            table.add_row(escape(pair["op"]), pair["dtype"], pair["family"], _us(pair["a_median_s"]), _us(pair["b_median_s"]), _ratio(pair["b_over_a"]))
        console.print(table)
    for entry in gap["curated_rows"]:
        if entry["a_tried"] or entry["b_tried"]:
            console.print(Text.assemble((f"curated {entry['name']}: ", "fade.head"),
                                        f"ran correctly on A {entry['a_ok']}/{entry['a_tried']}, on B {entry['b_ok']}/{entry['b_tried']}",
                                        (f"  ({entry['why']})", "fade.dim")))
    if gap["curated"]:
        table = Table(title="Curated ops (named weak on ROCm by the seeds)", title_justify="left", show_edge=False)
        for column in ("op", "dtype", "A", "B", "A time", "B time"):
            table.add_column(column)
        for pair in gap["curated"]:
            table.add_row(escape(pair["op"]), pair["dtype"], _class_text(pair["a_class"]), _class_text(pair["b_class"]),
                          _us(pair["a_median_s"]), _us(pair["b_median_s"]))
        console.print(table)
    console.print(Text(
        "classes: ok | slow (ran, far slower than it should) | fallback (ran right, through the backend's CPU "
        "fallback) | mismatch (differs from the CPU beyond the OpInfo tolerance) | "
        "unsupported (not implemented here) | error | crash | hang. Times: median host time of one call plus a device "
        "synchronize, on the largest sample that matched.",
        style="fade.dim",
    ), soft_wrap=True)


def _pair_table(console, title: str, pairs: list, failing_side: str) -> None:
    if not pairs:
        return
    table = Table(title=f"{title} ({len(pairs)})", title_justify="left", show_edge=False)
    for column in ("family", "op", "dtype", "A", "B", "why"):
        table.add_column(column)
    for pair in pairs[:GAP_ROWS_SHOWN]:
        why = pair[f"{failing_side}_message"] or pair.get(f"{failing_side}_mismatch_reason")
        table.add_row(pair["family"], escape(pair["op"]), pair["dtype"], _class_text(pair["a_class"]), _class_text(pair["b_class"]),
                      Text(_cut(why or ""), style="fade.dim"))
    console.print(table)
    if len(pairs) > GAP_ROWS_SHOWN:
        console.print(Text(f"... {len(pairs) - GAP_ROWS_SHOWN} more in --json", style="fade.dim"))


def _detail(item: dict) -> str:
    if item["class"] == "slow":
        return item.get("slow_reason") or ""
    if item["class"] == "mismatch" and item.get("mismatch_reason"):
        return item["mismatch_reason"] + (" (known)" if item.get("known_mismatch") else "")
    return item.get("message") or item.get("note") or ""


def _class_text(name: str) -> Text:
    return Text(name, style=CLASS_STYLES.get(name, ""))


def _ratio(value: float) -> str:
    """"12.5" or "1/50": B's time over A's."""
    return f"{value:.3g}" if value >= 1 else f"1/{1 / value:.3g}"


def _pct(value) -> str:
    return "" if value is None else f"{value:.0f}"


def _us(seconds) -> str:
    """"471 us", "78.1 ms", "1.20 s"."""
    if not seconds:
        return ""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_WIDTH else text[: MESSAGE_WIDTH - 3] + "..."
