"""Render a Comparison (fade.analyze.compare) for a terminal (rich) and as Markdown; the layout is not a contract,
`Comparison.to_dict()` is."""

from __future__ import annotations

from typing import Optional

from fade.analyze.compare import Cell, Comparison, RooflineView
from fade.report.text import printable

VERDICT_STYLE = {
    "baseline": "fade.head", "same": "fade.dim", "faster": "fade.ok", "slower": "fade.warn",
    "regression": "fade.fail", "failed": "fade.fail", "no-baseline": "fade.dim", "missing": "fade.dim",
}  # fmt: skip
VERDICT_MARK = {"same": "≈", "faster": "▲", "slower": "▼", "regression": "✗"}


# A rate below 1 of its unit reads in the next smaller one, so a CPU's 0.0007738 TFLOP/s shows as 773.8 MFLOP/s.
SMALLER_UNITS = {"TFLOP/s": ("GFLOP/s", 1e3), "GFLOP/s": ("MFLOP/s", 1e3), "TB/s": ("GB/s", 1e3),
                 "GB/s": ("MB/s", 1e3)}  # fmt: skip


def fitting_unit(value: float, unit: str) -> tuple:
    """(value, unit) scaled down while below 1 and a smaller unit exists: (0.0007738, "TFLOP/s") ->
    (773.8, "MFLOP/s"); a value >= 1, zero or an unknown unit is returned as it is."""
    while value and abs(value) < 1 and unit in SMALLER_UNITS:
        unit, factor = SMALLER_UNITS[unit]
        value *= factor
    return value, unit


def format_value(value: Optional[float]) -> str:
    """Four significant digits, no exponent below a million: 12.35, 882.4, 14190."""
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"


def cell_text(cell: Cell) -> str:
    """Plain text of a cell: `2509 (98% ≈)`, `oom`, `-`."""
    if cell.status == "missing":
        return "-"
    if cell.value is None or cell.status != "ok":
        return cell.status
    text = format_value(cell.value)
    if cell.pct_of_baseline is not None and cell.verdict != "baseline":
        text += f" ({cell.pct_of_baseline:.0f}% {VERDICT_MARK.get(cell.verdict, '')})".replace(" )", ")")
    if cell.noisy:
        text += " noisy"
    if cell.contended:
        text += " contended"
    return text


def column_title(column: list) -> str:
    label, sub = column
    return f"{label} {sub}".strip()


def footer_lines(comparison: Comparison) -> list:
    units = ", ".join(comparison.units) or "none"
    lines = [
        f"Units: {units}; % = speed as % of the baseline {comparison.baseline!r} (> 100 is faster; latencies inverted).",
        f"≈ within noise (|% - 100| <= half the relative IQR of each side, at least {comparison.noise_floor_pct:g}%), "
        "▲ faster, ▼ slower, ✗ regression; noisy: a CoV above 5%, do not read small differences.",
    ]
    if comparison.contended:
        lines.append(f"contended: {comparison.contended} cell(s) ran, or their baseline ran, while other work used the "
                     "host or device (telemetry.contention); their % says little.")
    lines += [f"note: {note}" for note in comparison.notes]
    if comparison.fail_under is not None:
        lines.append(f"Regression: below {comparison.fail_under:g}% of the baseline and outside the noise band, or failed where the baseline ran.")
    return lines


def render_terminal(comparison: Comparison, console) -> None:
    """A rich table; styles are fade.report.console's semantic names. Every text from the files (labels, case
    names, statuses, notes) goes through `printable`: a results file must not drive the terminal."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(printable(f"Compared with {comparison.baseline}")), title_justify="left")
    table.add_column("case")
    for column in comparison.columns:
        table.add_column(Text(printable(column_title(column))), justify="right")
    for row in comparison.rows:
        cells = [Text(printable(str(row["row"])))]
        for cell in row["cells"]:
            cells.append(Text(printable(cell_text(cell)), style=VERDICT_STYLE.get(cell.verdict, "")))
        table.add_row(*cells)
    console.print(table)
    for line in footer_lines(comparison):
        console.print(Text(printable(line), style="fade.dim"))
    for regression in comparison.regressions:
        console.print(Text(printable(f"regression: {regression}"), style="fade.fail"))
    for view in comparison.roofline:
        render_roofline_terminal(view, console)


def render_markdown(comparison: Comparison) -> str:
    """A GitHub-flavoured Markdown table with the footer below it (for docs/performance.md)."""
    header = ["case"] + [column_title(column) for column in comparison.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * len(comparison.columns)) + "|"]
    for row in comparison.rows:
        lines.append("| " + " | ".join([row["row"]] + [cell_text(cell) for cell in row["cells"]]) + " |")
    lines.append("")
    lines += footer_lines(comparison)
    for view in comparison.roofline:
        lines += ["", roofline_markdown(view).rstrip("\n")]
    return "\n".join(lines) + "\n"


# -- the LLM roofline view (fade.analyze.compare.RooflineView) ------------------------------------------------
DECODE_HEADER = ("variant", "batch", "tokens/s", "roofline tokens/s", "% of roofline", "TTFT ms", "tokens")
PREFILL_HEADER = ("prefill tokens", "batch", "FLOP/s", "% of peak")


def _number_text(value: Optional[float], suffix: str = "") -> str:
    return "-" if value is None else format_value(value) + suffix


def decode_rows(view: RooflineView) -> list:
    """The decode table's rows as text, DECODE_HEADER's columns: one per (variant, batch)."""
    rows = []
    for point in view.decode:
        pct = "-" if point.pct_of_roofline is None else f"{point.pct_of_roofline:.1f}%"
        tokens = point.tokens_check or "-"
        figure = _number_text(point.tokens_per_s) if point.status == "ok" else point.status
        rows.append([point.variant, str(point.batch), figure, _number_text(point.roofline_tokens_per_s), pct,
                     _number_text(point.ttft_ms), tokens])  # fmt: skip
    return rows


def prefill_rows(view: RooflineView) -> list:
    """The prefill table's rows as text, PREFILL_HEADER's columns."""
    rows = []
    for point in view.prefill:
        figure = point.status
        if point.status == "ok" and point.tflops is not None:
            value, unit = fitting_unit(point.tflops, "TFLOP/s")  # a CPU's 5.6e-05 TFLOP/s reads 56.09 MFLOP/s
            figure = f"{format_value(value)} {unit}"
        rows.append([str(point.tokens), str(point.batch), figure,
                     "-" if point.pct_of_peak is None else f"{point.pct_of_peak:.1f}%"])  # fmt: skip
    return rows


def roofline_lines(view: RooflineView) -> list:
    """What the reader must know below a view's tables: where the roofline comes from, or why there is none."""
    lines = []
    if view.decode:
        if view.bandwidth_gbs is not None:
            source = f" ({view.bandwidth_source})" if view.bandwidth_source else ""
            lines.append(f"roofline = {format_value(view.bandwidth_gbs)} GB/s{source} / bytes per decode step x batch; "
                         "bytes per step = the weights once + each sequence's KV cache (fade.analyze.llm)")  # fmt: skip
        else:
            lines.append(f"no roofline: {view.reason or 'the records hold no memory bandwidth for this device'}")
        lines.append("tokens/s over the batch = batch / decode time per step; TTFT: generate(prompt, 1) as the caller "
                     "sees it; tokens: greedy tokens against the fp32 hf-generate reference")  # fmt: skip
        failed = [point for point in view.decode if point.note]
        lines += [f"{point.variant} b{point.batch}: {point.note}" for point in failed]
    lines += [f"prefill s{point.tokens} b{point.batch}: {point.note}" for point in view.prefill if point.note]
    return lines


def roofline_markdown(view: RooflineView) -> str:
    """A view as Markdown: a heading, the decode table, the prefill table, its notes."""
    lines = [f"### LLM roofline: {view.title}", ""]
    for header, rows in ((DECODE_HEADER, decode_rows(view)), (PREFILL_HEADER, prefill_rows(view))):
        if not rows:
            continue
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|")
        lines += ["| " + " | ".join(printable(cell) for cell in row) + " |" for row in rows]
        lines.append("")
    lines += roofline_lines(view)
    return "\n".join(lines) + "\n"


def render_roofline_terminal(view: RooflineView, console) -> None:
    """A view as rich tables, % of roofline styled (>= 80% ok, < 50% warn); text from files through printable."""
    from rich.table import Table
    from rich.text import Text

    for title, header, rows in ((f"LLM roofline: {view.title}", DECODE_HEADER, decode_rows(view)),
                                (f"LLM prefill: {view.model} {view.dtype} [{view.set}]", PREFILL_HEADER, prefill_rows(view))):  # fmt: skip
        if not rows:
            continue
        table = Table(title=Text(printable(title)), title_justify="left")
        for index, name in enumerate(header):
            table.add_column(name, justify="left" if index == 0 else "right")
        for row in rows:
            table.add_row(*(Text(printable(cell), style=_pct_style(cell) if cell.endswith("%") else "") for cell in row))
        console.print(table)
    for line in roofline_lines(view):
        console.print(Text(printable(line), style="fade.dim"))


def _pct_style(text: str) -> str:
    try:
        pct = float(text.rstrip("%"))
    except ValueError:
        return ""
    return "fade.ok" if pct >= 80 else ("fade.warn" if pct < 50 else "")
