"""Render a profile summary and a before/after comparison (fade.analyze.profile's dicts) for a terminal with
rich, and as an HTML section with an inline PNG of the step's time split (matplotlib, Agg canvas).

Reads the summary dicts only (ProfileSummary.to_dict(), compare_profiles()). The terminal layout is not a
contract: the JSON summary is.
"""

from __future__ import annotations

import base64
import io
from typing import Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fade.report.html import escape

# class -> colour of its bar segment; idle causes in greys. Plot colours only: the terminal uses THEME styles.
SPLIT_COLOURS = {
    "gemm": "#4c78a8", "convolution": "#72b7b2", "attention": "#54a24b", "normalization": "#eeca3b",
    "elementwise": "#f58518", "reduction": "#e45756", "copy": "#b279a2", "communication": "#9d755d",
    "other": "#bab0ac", "host_wait": "#555555", "sync_wait": "#888888", "idle_other": "#cccccc",
}
IDLE_LABELS = {
    "host_wait": "idle: waiting on host (launch)", "sync_wait": "idle: sync/copy wait", "other": "idle: other",
}
FIGURE_DPI = 110
FIGURE_INCHES = (8.0, 2.4)
TOP_ROWS = 10  # kernels and host ops shown per table


def _us(value) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f} s"
    if value >= 1e3:
        return f"{value / 1e3:.2f} ms"
    return f"{value:.1f} us"


def _pct(part, whole) -> str:
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "-"


def _short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def time_split(summary: dict) -> list:
    """(label, us, colour key) segments of one step (mean over the profiled steps): kernel classes scaled to
    busy time (so concurrent streams do not push the bar past the window), then the idle causes."""
    total = summary["total"]
    steps = max(1, total["steps"])
    if not summary.get("device_timeline") or total.get("busy_us") is None:
        return []
    class_sum = sum(total["class_us"].values())
    scale = total["busy_us"] / class_sum if class_sum else 0.0
    segments = [(name, us * scale / steps, name) for name, us in total["class_us"].items() if us > 0]
    for cause, us in total["idle_us"].items():
        if us > 0:
            segments.append((IDLE_LABELS[cause], us / steps, "idle_other" if cause == "other" else cause))
    return segments


def render_profile(summary: dict) -> Group:
    """A rich renderable: verdict, time split, top kernels, top host ops, launches, FLOPs, copies and syncs."""
    total = summary["total"]
    steps = max(1, total["steps"])
    parts = []
    verdict = summary.get("verdict")
    if verdict:
        parts.append(Text.assemble(("verdict: ", "fade.head"), (verdict["title"], "fade.warn")))
        parts.append(Text.assemble(("fix: ", "fade.head"), (verdict["fix"], "fade.fix")))
    for other in summary.get("verdicts", [])[1:]:
        parts.append(Text(f"also: {other['title']}; fix: {other['fix']}", style="fade.dim"))
    head = f"{summary.get('platform', '?')} device {summary.get('device_index')}, {total['steps']} step(s); "
    head += f"step {_us(total['window_us'] / steps)} (host {_us(total['host_us'] / steps)}), per-step means"
    parts.append(Text(head, style="fade.dim"))
    for note in summary.get("notes", []):
        parts.append(Text(note, style="fade.info"))

    split = time_split(summary)
    if split:
        table = Table(title="Time split of the device (per step)", title_justify="left")
        for column in ("", "time", "share"):
            table.add_column(column, justify="right" if column else "left")
        window = total["window_us"] / steps
        for label, us, _ in sorted(split, key=lambda s: -s[1]):
            table.add_row(label, _us(us), _pct(us, window))
        parts.append(table)

    if total["top_kernels"]:
        table = Table(title="Top kernels", title_justify="left")
        for column in ("kernel", "class", "library", "total", "count", "mean"):
            table.add_column(column, justify="right" if column in ("total", "count", "mean") else "left",
                             overflow="fold")
        for kernel in total["top_kernels"][:TOP_ROWS]:
            kind = kernel["class"] + (f" ({kernel['direction']})" if kernel.get("direction") else "")
            table.add_row(_short(kernel["name"]), kind, kernel.get("library") or "-", _us(kernel["total_us"]),
                          str(kernel["count"]), _us(kernel["mean_us"]))
        parts.append(table)
    opencl = summary.get("opencl")
    if opencl:
        for key, title in (("by_kernel", "OpenCL kernels (profiling events, per step)"),
                           ("by_label", "OpenCL commands by shape and expression (per step)")):
            table = Table(title=title, title_justify="left")
            for column in ("kernel", "device", "share", "calls", "mean"):
                table.add_column(column, justify="left" if column == "kernel" else "right", overflow="fold")
            for row in opencl[key][:TOP_ROWS]:
                table.add_row(_short(row["kernel"]), _us(row["device_ms"] * 1e3), f"{row['share']:.1%}",
                              f"{row['calls']:g}", _us(row["mean_us"]))
            parts.append(table)
    if total["top_host_ops"]:
        table = Table(title="Top host ops (self time)", title_justify="left")
        for column in ("op", "self", "count", "mean"):
            table.add_column(column, justify="left" if column == "op" else "right", overflow="fold")
        for op in total["top_host_ops"][:TOP_ROWS]:
            table.add_row(_short(op["name"]), _us(op["self_us"]), str(op["count"]), _us(op["mean_us"]))
        parts.append(table)
    if summary.get("host_lines"):
        table = Table(title="Your lines: host reads, syncs and copies (one step after the window)",
                      title_justify="left")
        for column in ("line", "kind", "count", "code"):
            table.add_column(column, justify="right" if column == "count" else "left", overflow="fold")
        for entry in summary["host_lines"][:TOP_ROWS]:
            table.add_row(f"{entry['file']}:{entry['line']}", entry["kind"], str(entry["count"]), entry.get("code") or "")
        parts.append(table)
    parts.append(Text(_facts_line(summary), style="fade.dim"))
    return Group(*parts)


def _facts_line(summary: dict) -> str:
    total = summary["total"]
    launches = total["launches"]
    flops = total["flops"]
    facts = [f"kernels: {launches['kernels']}, {launches['shorter_than_overhead']} shorter than "
             f"{launches['threshold_us']:g} us"]
    if launches.get("median_launch_call_us") is not None:
        facts.append(f"median launch call {launches['median_launch_call_us']:.1f} us")
    if flops.get("tflops_step") is not None:
        text = f"step {flops['tflops_step']:.3g} TFLOP/s"
        if flops.get("mfu_step") is not None:
            text += f" ({100 * flops['mfu_step']:.3g}% of peak)"
        facts.append(text)
    if flops.get("tflops_attention") is not None:
        text = f"attention kernels {flops['tflops_attention']:.3g} TFLOP/s"
        if flops.get("mfu_attention") is not None:
            text += f" ({100 * flops['mfu_attention']:.3g}% of peak)"
        facts.append(text)
    if flops.get("tflops_gemm_conv") is not None:
        text = f"GEMM/conv kernels {flops['tflops_gemm_conv']:.3g} TFLOP/s"
        if flops.get("mfu_gemm_conv") is not None:
            text += f" ({100 * flops['mfu_gemm_conv']:.3g}% of peak)"
        facts.append(text)
    for kind, entry in sorted(total["copies"].items()):
        text = f"{kind} x{entry['count']} {entry['bytes'] / 2**20:.1f} MiB"
        if entry.get("pct_of_bandwidth") is not None:
            text += f" ({entry['pct_of_bandwidth']:.0f}% of bandwidth)"
        facts.append(text)
    facts.append(f"syncs: {total['syncs']['count']}")
    if total["syncs"].get("host_reads") is not None:
        facts.append(f"host reads: {total['syncs']['host_reads']}")
    times = summary.get("step_time") or {}
    if times.get("unprofiled_s") and times.get("profiled_window_s"):
        text = (f"step {1e3 * times['unprofiled_s']:.3g} ms unprofiled (TFLOP/s and MFU use it), "
                f"{1e3 * times['profiled_window_s']:.3g} ms profiled window")
        if times.get("overhead_window_pct") is not None:
            text += ": " + overhead_text(times["overhead_window_pct"], "window")
        facts.append(text)
    else:
        overhead = (summary.get("capture") or {}).get("overhead_fraction")
        if overhead is not None:
            facts.append(overhead_text(100 * overhead, "step"))
    return "; ".join(facts)


def overhead_text(pct: float, profiled: str) -> str:
    """The profiler's overhead, `pct` = profiled / unprofiled - 1 in percent, said as an overhead only when the
    profiled `profiled` ("window", "step") took longer. Shorter, it is no overhead (issue 30 printed "-37%"):
    the device window spans the kernels, not the host's time between steps, and the host span is a few steps'
    median against the bench's; the two figures are not comparable, so none is given as the profiler's cost."""
    if pct >= 0:
        return f"profiler overhead {pct:+.0f}%"
    return (f"the profiled {profiled} was {-pct:.0f}% shorter than the unprofiled step, so it gives no "
            "profiler overhead (the two are not comparable here)")


def render_comparison(comparison: dict) -> Group:
    """A rich renderable of compare_profiles(): step, busy, idle, classes and the kernels that moved most."""
    table = Table(title="Before -> after, per step", title_justify="left")
    for column in ("", "before", "after", "delta", "speedup"):
        table.add_column(column, justify="left" if not column else "right", overflow="fold")

    def add(row: dict, label: Optional[str] = None) -> None:
        speedup = row.get("speedup")
        style = "fade.ok" if speedup and speedup > 1.0 else "fade.warn" if speedup and speedup < 1.0 else None
        delta = row["delta_us"]
        table.add_row(label or row["name"], _us(row["before_us"]), _us(row["after_us"]),
                      "-" if delta is None else ("+" if delta >= 0 else "-") + _us(abs(delta)),
                      f"{speedup:.2f}x" if speedup else "-", style=style)

    add(comparison["step"], "step")
    add(comparison["busy"], "busy")
    for row in comparison["idle"]:
        add(row, IDLE_LABELS.get(row["name"], row["name"]))
    for row in comparison["classes"]:
        add(row)
    kernels = Table(title="Kernels that moved most", title_justify="left")
    for column in ("kernel", "class", "before", "after", "speedup"):
        kernels.add_column(column, justify="left" if column in ("kernel", "class") else "right", overflow="fold")
    for row in comparison["kernels"][:TOP_ROWS]:
        speedup = row.get("speedup")
        kernels.add_row(_short(row["name"]), row["class"], _us(row["before_us"]), _us(row["after_us"]),
                        f"{speedup:.2f}x" if speedup else (f"only {row['only_in']}" if row.get("only_in") else "-"))
    verdicts = comparison.get("verdict") or {}
    lines = [Text(f"verdict {side}: {(verdicts.get(side) or {}).get('title', '-')}", style="fade.dim")
             for side in ("before", "after")]
    return Group(table, kernels, *lines, Text(comparison.get("note", ""), style="fade.dim"))


def split_plot_png(summary: dict) -> Optional[bytes]:
    """PNG bytes of a horizontal stacked bar of the per-step time split; None without matplotlib or a timeline."""
    segments = time_split(summary)
    if not segments:
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=FIGURE_INCHES, dpi=FIGURE_DPI)
    axis = figure.add_subplot(1, 1, 1)
    left = 0.0
    scale, unit = (1e-3, "ms") if sum(us for _, us, _ in segments) >= 1e3 else (1.0, "us")
    for label, us, key in segments:
        axis.barh(0, us * scale, left=left, color=SPLIT_COLOURS.get(key, "#999999"), label=label, height=0.5)
        left += us * scale
    axis.set_yticks([])
    axis.set_xlabel(f"{unit} per step (kernel classes scaled to busy time; idle by cause)", fontsize=8)
    axis.set_xlim(0, left * 1.001 if left else 1)
    axis.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.55), frameon=False)  # below the x label
    axis.set_title("Where the step's device time went", fontsize=9)
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=0.04, right=0.98, top=0.86, bottom=0.5)  # the lower half holds the label and legend
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def profile_html_section(summary: dict, *, title: str = "Profile") -> str:
    """An HTML <section> for `fade report`: verdict, time-split plot, top kernels and host ops, facts."""
    total = summary["total"]
    steps = max(1, total["steps"])
    out = [f"<section class=profile><h2>{escape(title)}</h2>"]
    verdict = summary.get("verdict")
    if verdict:
        out.append(f"<p><b>Verdict:</b> {escape(verdict['title'])}<br>"
                   f"<b>Fix:</b> <code>{escape(verdict['fix'])}</code></p>")
    for other in summary.get("verdicts", [])[1:]:
        out.append(f"<p class=dim>Also: {escape(other['title'])}; fix: <code>{escape(other['fix'])}</code></p>")
    for note in summary.get("notes", []):
        out.append(f"<p class=dim>{escape(note)}</p>")
    if summary.get("host_lines"):
        rows = "".join(f"<tr><td><code>{escape(entry['file'])}:{entry['line']}</code></td><td>{escape(entry['kind'])}</td>"
                       f"<td>{entry['count']}</td><td><code>{escape(entry.get('code') or '')}</code></td></tr>"
                       for entry in summary["host_lines"][:TOP_ROWS])
        out.append("<h3>Your lines: host reads, syncs and copies</h3><table><tr><th>line</th><th>kind</th>"
                   "<th>count</th><th>code</th></tr>" + rows + "</table>")
    png = split_plot_png(summary)
    if png:
        data = base64.b64encode(png).decode("ascii")
        out.append(f'<div><img alt="time split of the profiled step" src="data:image/png;base64,{data}"></div>')
    elif summary.get("device_timeline"):
        out.append("<p class=dim>plots need matplotlib: pip install 'torch-fade[plot]'</p>")
    split = time_split(summary)
    if split:
        window = total["window_us"] / steps
        rows = "".join(f"<tr><td>{escape(label)}</td><td>{_us(us)}</td><td>{_pct(us, window)}</td></tr>"
                       for label, us, _ in sorted(split, key=lambda s: -s[1]))
        out.append("<table><tr><th>per step</th><th>time</th><th>share</th></tr>" + rows + "</table>")
    if total["top_kernels"]:
        rows = "".join(
            f"<tr><td><code>{escape(_short(k['name'], 100))}</code></td><td>{escape(k['class'])}"
            f"{escape(' (' + k['direction'] + ')') if k.get('direction') else ''}</td>"
            f"<td>{escape(k.get('library') or '-')}</td><td>{_us(k['total_us'])}</td><td>{k['count']}</td>"
            f"<td>{_us(k['mean_us'])}</td></tr>" for k in total["top_kernels"][:TOP_ROWS])
        out.append("<h3>Top kernels</h3><table><tr><th>kernel</th><th>class</th><th>library</th><th>total</th>"
                   "<th>count</th><th>mean</th></tr>" + rows + "</table>")
    if total["top_host_ops"]:
        rows = "".join(f"<tr><td><code>{escape(_short(op['name'], 100))}</code></td><td>{_us(op['self_us'])}</td>"
                       f"<td>{op['count']}</td><td>{_us(op['mean_us'])}</td></tr>"
                       for op in total["top_host_ops"][:TOP_ROWS])
        out.append("<h3>Top host ops (self time)</h3><table><tr><th>op</th><th>self</th><th>count</th>"
                   "<th>mean</th></tr>" + rows + "</table>")
    out.append(f"<p class=dim>{escape(_facts_line(summary))}</p></section>")
    return "".join(out)
