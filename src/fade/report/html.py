"""`fade report`: one self-contained HTML file from results files: device truth, stack fingerprint, micro and
model results with inline PNG plots, LLM decode against the bandwidth roofline, and comparisons. No script, no stylesheet or font from the network.

Reads result records only. Every string that comes from the system or the records (device names, env
values, error messages, case ids, file names) goes through `html.escape`; numbers are formatted here.
Plots are matplotlib PNGs embedded as data: URIs; without matplotlib the report says so and has tables only.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from fade.errors import FadeUsageError
from fade.files import atomic_write_text
from fade.results import latest_records, read_records, summarize
from fade.analyze.compare import VERDICTS, Comparison, compare_sets, llm_roofline_views, result_sets, row_and_column
from fade.report.compare import (DECODE_HEADER, PREFILL_HEADER, cell_text, column_title, decode_rows, fitting_unit,
                                 footer_lines, format_value, prefill_rows, roofline_lines)
from fade.version import __version__

FIGURE_DPI = 100
MODEL_PANEL_INCHES = (6.0, 2.6)  # one network, one mode: a bar per variant
DEVICE_KEYS = ("name", "vendor", "arch", "runtime_arch", "family", "compute_units", "runtime_units", "runtime_unit_label",
               "wave_size", "memory_bytes", "clock_mhz", "peaks", "notes", "type", "logical_cpus", "torch_threads",
               "error")  # fmt: skip
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #1d1d1f; max-width: 1400px; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.86em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #17803d; } .warn { color: #a15c00; } .fail { color: #b42318; font-weight: 600; } .dim { color: #777; }
.v-faster { background: #e7f6ec; } .v-slower { background: #fff4e0; } .v-regression, .v-failed { background: #fde8e7; }
.v-same { color: #555; } .v-baseline { font-weight: 600; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
code, pre { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9em; }
pre { background: #f7f7f9; padding: 0.6em; overflow-x: auto; max-height: 30em; }
.problems li { color: #b42318; }
"""


def escape(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class HtmlReport:
    path: str
    records: int
    problems: list = field(default_factory=list)


def write_report(paths: Sequence, out, *, baseline: Optional[str] = None) -> HtmlReport:
    """Render `paths` into one HTML file at `out`. FadeUsageError for an unreadable input or output."""
    text, count, problems = render_report(paths, baseline=baseline)
    out_path = Path(out)
    try:
        atomic_write_text(out_path, text)
    except OSError as error:
        raise FadeUsageError(f"-o {out}: cannot write there ({error.strerror or error})") from None
    return HtmlReport(str(out_path), count, problems)


def render_report(paths: Sequence, *, baseline: Optional[str] = None) -> tuple:
    """(HTML text, records read, problems)."""
    if not paths:
        raise FadeUsageError("report needs at least one results file")
    files = []
    problems: list = []
    profiles = []  # (path, summary): `fade profile` summaries, recognised by their schema keys
    for path in paths:
        summary = read_profile_summary(path)
        if summary is not None:
            profiles.append((str(path), summary))
            continue
        found = read_records(path)
        problems.extend(found.problems)
        files.append((str(path), found.records))
    everything = newest_run_last(files)
    latest = latest_records(everything)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>FADE report</title><style>{STYLE}</style></head><body>",
        "<h1>FADE report</h1>",
        _header(files, latest),
        _problems(problems),
        _devices(latest),
        _stacks(latest),
        _micro(latest),
        _models(files),
        _dist(latest),
        _llm(files),
        _comparisons(files, baseline),
        _profiles(profiles),
        "</body></html>",
    ]
    return "\n".join(part for part in parts if part), len(everything), problems


RUN_STARTED = re.compile(r"(\d{8}T\d{6}Z)-")  # a run id begins with its UTC start: 20261122T000000Z-abcdef


def newest_run_last(files: list) -> list:
    """Every file's records ordered by the start of the run that wrote each (its run id's UTC stamp), so that
    latest_records keeps the newest run's record of a case whichever file on the command line holds it (issue
    30: the last file named won). A record without a stamp takes its predecessor's in its file (the first ones
    sort first); within a file, append order stays."""
    stamped = []
    for _, records in files:
        stamp = ""
        for record in records:
            found = RUN_STARTED.match(str(record.get("run_id") or ""))
            stamp = found.group(1) if found else stamp
            stamped.append((stamp, record))
    stamped.sort(key=lambda item: item[0])  # stable: equal stamps keep the files' order
    return [record for _, record in stamped]


def read_profile_summary(path) -> Optional[dict]:
    """The `fade profile` summary at `path`, checked (fade.analyze.profile_file), else None: then it is read as
    a results file."""
    from fade.analyze.profile_file import sniff_summary

    return sniff_summary(path)


def _profiles(profiles: list) -> str:
    from fade.report.profile import profile_html_section  # report.profile imports this module's escape()

    return "".join(profile_html_section(summary, title=f"Profile: {Path(path).name}") for path, summary in profiles)


# -- sections ---------------------------------------------------------------------------------------------
def _header(files: list, latest: list) -> str:
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    rows = "".join(
        f"<tr><td>{escape(path)}</td><td class=num>{len(records)}</td>"
        f"<td>{escape(', '.join(sorted({str(r.get('run_id')) for r in records})))}</td>"
        f"<td>{escape(', '.join(sorted({str(r.get('suite')) for r in records})))}</td></tr>"
        for path, records in files
    )
    statuses: dict = {}
    for record in latest:
        statuses[record.get("status")] = statuses.get(record.get("status"), 0) + 1
    counts = ", ".join(f"{count} {escape(status)}" for status, count in sorted(statuses.items(), key=str)) or "no records"
    return (
        f"<p class=dim>Generated {escape(generated)} by FADE {escape(__version__)}. "
        f"Newest result per case and device (by the start of the run that wrote it): {counts}.</p>"
        "<table><tr><th>results file</th><th>records</th><th>runs</th><th>suites</th></tr>" + rows + "</table>"
    )


def _problems(problems: list) -> str:
    if not problems:
        return ""
    items = "".join(f"<li><code>{escape(problem)}</code></li>" for problem in problems)
    return f"<h2>Unreadable lines</h2><p>These lines were skipped; every other line was read.</p><ul class=problems>{items}</ul>"


def _distinct(records: list, key: str) -> list:
    """Distinct values of record[key] (dicts), each with the torch devices that reported it."""
    seen: dict = {}
    for record in records:
        value = record.get(key) or {}
        fingerprint = json.dumps(value, sort_keys=True, default=str)
        entry = seen.setdefault(fingerprint, (value, set()))
        entry[1].add(str(record.get("torch_device")))
    return list(seen.values())


def _devices(records: list) -> str:
    blocks = []
    for device, torch_devices in _distinct(records, "device"):
        rows = []
        for key in DEVICE_KEYS:
            if key in device and device[key] not in (None, "", [], {}):
                rows.append(f"<tr><th>{escape(key)}</th><td>{_value_html(device[key])}</td></tr>")
        torch_view = device.get("torch")
        if torch_view:
            rows.append(f"<tr><th>torch's view</th><td>{_value_html(torch_view)}</td></tr>")
        title = device.get("name") or (torch_view or {}).get("name") or "device"
        blocks.append(
            f"<h3>{escape(title)} <span class=dim>({escape(', '.join(sorted(torch_devices)))})</span></h3>"
            f"<table>{''.join(rows)}</table>" + _details("every field", device)
        )
    return "<h2>Device truth</h2>" + ("".join(blocks) or "<p class=dim>No device information in the records.</p>")


def _stacks(records: list) -> str:
    blocks = []
    for stack, torch_devices in _distinct(records, "stack"):
        torch_info = stack.get("torch") or {}
        fade_versions = sorted({str(record.get("fade_version")) for record in records
                                if (record.get("stack") or {}) == stack and record.get("fade_version")})
        summary = [  # FADE records its version, not its commit; torch.version.git_version is torch's commit
            ("FADE version", ", ".join(fade_versions)), ("python", stack.get("python")),
            ("platform", stack.get("platform")), ("torch", torch_info.get("version")),
            ("torch git commit", torch_info.get("git_version")), ("CUDA", torch_info.get("cuda")),
            ("HIP", torch_info.get("hip")),
            ("cuDNN", torch_info.get("cudnn")), ("MIOpen", torch_info.get("miopen")), ("threads", stack.get("threads")),
        ]  # fmt: skip
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{_value_html(v)}</td></tr>" for k, v in summary if v not in (None, ""))
        backends = stack.get("backends") or {}
        backend_rows = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{_value_html(v)}</td></tr>" for k, v in sorted(backends.items()))
        env = stack.get("env") or {}
        env_rows = "".join(f"<tr><td><code>{escape(k)}</code></td><td><code>{escape(v)}</code></td></tr>" for k, v in sorted(env.items()))
        errors = stack.get("errors") or {}
        error_rows = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{escape(v)}</td></tr>" for k, v in sorted(errors.items()))
        block = f"<h3>Stack <span class=dim>({escape(', '.join(sorted(torch_devices)))})</span></h3><table>{rows}</table>"
        if backend_rows:
            block += f"<h4>Backend flags</h4><table><tr><th>flag</th><th>value</th></tr>{backend_rows}</table>"
        block += f"<h4>Environment</h4><table>{env_rows}</table>" if env_rows else "<p class=dim>No relevant environment variable set.</p>"
        if error_rows:
            block += f"<h4>Flags that could not be read</h4><table>{error_rows}</table>"
        blocks.append(block)
    return "<h2>Stack fingerprint</h2>" + ("".join(blocks) or "<p class=dim>No stack information in the records.</p>")


def _figure_cells(row: dict) -> tuple:
    """(status, its css class, value and unit scaled to fit, "% of peak" text) of a summarize() row."""
    status = row.get("status")
    value, unit = row.get("value"), row.get("unit")
    if value is not None:
        value, unit = fitting_unit(value, unit or "")
    pct = "-" if row.get("pct_of_peak") is None else f"{row['pct_of_peak']:.0f}%"
    return status, "ok" if status == "ok" else "fail", value, unit, pct


def _micro(records: list) -> str:
    micro = [record for record in records if record.get("suite") == "micro"]
    if not micro:
        return ""
    rows = []
    for row in summarize(micro):
        status, css, value, unit, pct = _figure_cells(row)
        median = "" if row.get("median_ms") is None else f"{row['median_ms']:.4g}"
        iqr = "" if row.get("iqr_pct") is None else f"{row['iqr_pct']:.1f}"
        flags = " ".join(flag for flag, on in (("noisy", row.get("noisy")), ("throttled", row.get("throttled"))) if on)
        note = " ".join(part for part in (flags, row.get("note") or "") if part)  # a contended case says so here
        rows.append(
            f"<tr><td><code>{escape(row['case_id'])}</code></td><td>{escape(row.get('torch_device'))}</td>"
            f"<td class={css}>{escape(status)}</td><td class=num>{escape(format_value(value))}</td>"
            f"<td>{escape(unit or '')}</td><td class=num>{escape(pct)}</td>"
            f"<td class=num>{escape(median)}</td><td class=num>{escape(iqr)}</td><td>{escape(note)}</td></tr>"
        )
    table = (
        "<table><tr><th>case</th><th>device</th><th>status</th><th>value</th><th>unit</th><th>% of peak</th>"
        "<th>median ms</th><th>IQR %</th><th>note</th></tr>" + "".join(rows) + "</table>"
    )
    return "<h2>Micro benchmarks</h2>" + _micro_plots(micro) + table


def _micro_plots(records: list) -> str:
    try:
        from fade.report.plots import plot_micro

        with tempfile.TemporaryDirectory(prefix="fade-report-") as directory:
            paths = plot_micro(records, directory)
            images = [_img(path.read_bytes(), f"micro: {path.stem}") for path in paths]
    except FadeUsageError as error:  # matplotlib is missing
        return f"<p class=dim>{escape(error)}</p>"
    return "".join(images)


def _dist(records: list) -> str:
    """`fade bench dist`'s records: the busbw and scaling plots, then one row per case with its formula."""
    from fade.report.console import dist_rows

    dist = [record for record in records if record.get("suite") == "dist"]
    if not dist:
        return ""
    rows = [_dist_row(row) for row in dist_rows(dist)]
    note = ("<p>Collectives as nccl-tests reports them: algbw = size / median time; busbw = algbw x 2(n-1)/n for "
            "all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for broadcast and send/recv, so it "
            "compares with the link's bandwidth whatever n is. Each result was checked for exact values on every rank. "
            "Scaling: samples/s per process at k processes against 1 process (docs/dist.md).</p>")  # fmt: skip
    table = ("<table><tr><th>case</th><th>status</th><th>value</th><th>unit</th><th>% of link peak</th><th>note</th></tr>"
             + "".join(rows) + "</table>")  # fmt: skip
    try:
        from fade.report.plots import plot_dist

        with tempfile.TemporaryDirectory(prefix="fade-report-") as directory:
            images = "".join(_img(path.read_bytes(), f"dist: {path.stem}") for path in plot_dist(dist, directory))
    except FadeUsageError as error:  # matplotlib is missing
        images = f"<p class=dim>{escape(error)}</p>"
    return "<h2>Distributed: collectives and scaling</h2>" + note + images + table


def _dist_row(row: dict) -> str:
    status, css, value, unit, pct = _figure_cells(row)
    return (f"<tr><td><code>{escape(row['case_id'])}</code></td><td class={css}>{escape(status)}</td>"
            f"<td class=num>{escape(format_value(value))}</td><td>{escape(unit or '')}</td><td class=num>{escape(pct)}</td>"
            f"<td>{escape(row.get('note') or '')}</td></tr>")  # fmt: skip


def _llm(files: list) -> str:
    """`fade bench llm`'s records: per model (and file, dtype, device, sizes) a plot of decode tokens/s against
    the batch with the bandwidth roofline, the decode table (variant x batch) and the prefill table."""
    views = llm_roofline_views(result_sets(files, suite="llm"))
    if not views:
        return ""
    blocks = []
    try:
        from fade.report.plots import plot_llm_roofline

        with tempfile.TemporaryDirectory(prefix="fade-report-") as directory:
            with_decode = [view for view in views if view.decode]
            images = dict(zip(map(id, with_decode), (_img(path.read_bytes(), f"llm roofline: {path.stem}")
                                                     for path in plot_llm_roofline(with_decode, directory))))  # fmt: skip
    except FadeUsageError as error:  # matplotlib is missing
        images = {}
        blocks.append(f"<p class=dim>{escape(error)}</p>")
    for view in views:
        block = f"<h3>{escape(view.title)}</h3>" + images.get(id(view), "")
        for header, rows in ((DECODE_HEADER, decode_rows(view)), (PREFILL_HEADER, prefill_rows(view))):
            if rows:
                head = "".join(f"<th>{escape(name)}</th>" for name in header)
                body = "".join("<tr><td>" + escape(row[0]) + "</td>" + "".join(f"<td class=num>{escape(cell)}</td>" for cell in row[1:])
                               + "</tr>" for row in rows)  # fmt: skip
                block += f"<table><tr>{head}</tr>{body}</table>"
        block += "".join(f"<p class=dim>{escape(line)}</p>" for line in roofline_lines(view))
        blocks.append(block)
    note = ("<p>Greedy decode of a causal LM built from its config with random weights (speed only). Tokens/s over the "
            "batch = batch / decode time per step, decode time = (median generate(N) - median generate(1)) / (N - 1); "
            "the roofline is the device's memory bandwidth over the bytes a decode step must read (the weights once "
            "and each sequence's KV cache) times the batch (docs/llm.md).</p>")  # fmt: skip
    return "<h2>LLM inference: decode against the bandwidth roofline</h2>" + note + "".join(blocks)


def _models(files: list) -> str:
    sections = []
    for path, records in files:
        models = [record for record in latest_records(records) if record.get("suite") == "models"]
        if not models:
            continue
        sections.append(f"<h3>{escape(path)}</h3>" + _models_plot(models) + _models_table(models))
    if not sections:
        return ""
    note = (
        "<p>Samples/s from the median step time; a training step is forward, loss, backward and optimizer step on "
        "a synthetic batch resident on the device: <b>no input copy is included</b>. Every step's loss is checked "
        "for NaN/inf and the loss after the checked steps is compared with fp32 from the same seed; a case that "
        "fails either is an error, never a figure.</p>"
    )
    return "<h2>Model benchmarks</h2>" + note + "".join(sections)


def _models_table(records: list) -> str:
    header = (
        "<tr><th>network</th><th>mode</th><th>variant</th><th>batch</th><th>status</th><th>samples/s</th>"
        "<th>step ms median [q1-q3]</th><th>TFLOP/s</th><th>% of peak (dtype)</th><th>peak memory</th>"
        "<th>loss check</th><th>plain loop</th><th>note</th></tr>"
    )
    rows = []
    for record in records:
        params = record.get("params") or {}
        extra = record.get("extra") or {}
        status = record.get("status")
        stats = record.get("stats") or {}
        flops = extra.get("flops") or {}
        memory = extra.get("memory") or {}
        loss = extra.get("loss_check") or {}
        plain = extra.get("plain_loop") or {}
        step_text = ""
        if stats.get("median_s") is not None:
            step_text = f"{1e3 * stats['median_s']:.4g}"
            if stats.get("q1_s") is not None and stats.get("q3_s") is not None:
                step_text += f" [{1e3 * stats['q1_s']:.4g}-{1e3 * stats['q3_s']:.4g}]"
        tflops = format_value(flops.get("achieved_tflops")) if flops.get("achieved_tflops") is not None else ""
        pct = f"{flops['pct_of_peak']:.1f}% ({flops.get('peak_dtype')})" if flops.get("pct_of_peak") is not None else ""
        peak_bytes = memory.get("peak_allocated_bytes")
        memory_text = f"{peak_bytes / 2**30:.2f} GiB" if peak_bytes else ""
        loss_text = f"{loss['loss']:.4g} vs {loss['fp32_loss']:.4g}" if None not in (loss.get("loss"), loss.get("fp32_loss")) else ""
        plain_text = ""
        if plain.get("samples_per_s") is not None:
            plain_text = f"{format_value(plain['samples_per_s'])} ({plain.get('fade_vs_plain_pct') or 0:+.1f}%)"
        notes = [record.get("error") or ""]
        if stats.get("noisy"):
            notes.append("noisy")
        if (record.get("telemetry") or {}).get("throttled"):
            notes.append("throttled: " + ", ".join(map(str, (record.get("telemetry") or {}).get("throttle_reasons") or [])))
        if (record.get("telemetry") or {}).get("contended"):
            notes.append("contended: " + "; ".join(map(str, (record.get("telemetry") or {}).get("contention_reasons") or [])))
        css = "ok" if status == "ok" else ("dim" if status == "skipped" else "fail")
        cells = [
            params.get("model"), params.get("mode"), params.get("variant"), params.get("batch"), None,
            format_value(record.get("value")) if record.get("value") is not None else "", step_text, tflops, pct,
            memory_text, loss_text, plain_text, " ".join(note for note in notes if note),
        ]  # fmt: skip
        html_cells = []
        for index, cell in enumerate(cells):
            if index == 4:
                html_cells.append(f"<td class={css}>{escape(status)}</td>")
            elif index in (5, 6, 7, 8, 9, 11):
                html_cells.append(f"<td class=num>{escape(cell)}</td>")
            else:
                html_cells.append(f"<td>{escape(cell)}</td>")
        rows.append("<tr>" + "".join(html_cells) + "</tr>")
    return "<table>" + header + "".join(rows) + "</table>"


def _models_plot(records: list) -> str:
    """Per network and mode, a bar per variant (samples/s) with the IQR of the step time as error bars."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return "<p class=dim>plots need matplotlib: pip install 'torch-fade[plot]'</p>"
    ok = [record for record in records if record.get("status") == "ok" and record.get("value")]
    if not ok:
        return ""
    panels: dict = {}
    for record in ok:
        params = record.get("params") or {}
        label = row_and_column(record, "variant")[0]
        panels.setdefault((label, params.get("mode")), []).append(record)
    figure = Figure(figsize=(MODEL_PANEL_INCHES[0] * min(2, len(panels)), MODEL_PANEL_INCHES[1] * ((len(panels) + 1) // 2)), dpi=FIGURE_DPI)
    for index, ((label, mode), group) in enumerate(panels.items()):
        axis = figure.add_subplot((len(panels) + 1) // 2, min(2, len(panels)), index + 1)
        names = [str((record.get("params") or {}).get("variant")) for record in group]
        values = [record["value"] for record in group]
        below, above = zip(*(_rate_error(record) for record in group))
        axis.barh(range(len(group)), values, xerr=[below, above], capsize=3, color="#4c78a8")
        axis.set_yticks(range(len(group)))
        axis.set_yticklabels(names, fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel("samples/s (median step; bars: IQR)", fontsize=8)
        axis.set_title(f"{label} {mode}", fontsize=9)
        axis.grid(True, axis="x", alpha=0.3)
        for position, record in enumerate(group):
            pct = ((record.get("extra") or {}).get("flops") or {}).get("pct_of_peak")
            text = format_value(record["value"]) + (f"  {pct:.0f}% of peak" if pct is not None else "")
            axis.text(record["value"], position, " " + text, va="center", fontsize=7)
        axis.set_xlim(0, max(values) * 1.35)
    FigureCanvasAgg(figure)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return _img(buffer.getvalue(), "model throughput per variant")


def _rate_error(record: dict) -> tuple:
    """(below, above) value: the step time's IQR as a rate (value * median_s / q3_s .. value * median_s / q1_s)."""
    stats = record.get("stats") or {}
    value, median, q1, q3 = record.get("value"), stats.get("median_s"), stats.get("q1_s"), stats.get("q3_s")
    if not (value and median and q1 and q3):
        return 0.0, 0.0
    return max(0.0, value - value * median / q3), max(0.0, value * median / q1 - value)


def _comparisons(files: list, baseline: Optional[str]) -> str:
    blocks = []
    for path, records in files:  # the variants of one model run, against fp32 where it ran
        sets = result_sets([(path, records)], by="variant", suite="models")
        if len(sets) < 2:
            continue
        labels = [result_set.label for result_set in sets]
        comparison = compare_sets(sets, baseline="fp32" if "fp32" in labels else None, by="variant")
        title = f"Variants of {path}, as % of {comparison.baseline}"
        blocks.append(f"<h3>{escape(title)}</h3>" + comparison_table(comparison))
    suites = sorted({str(record.get("suite")) for _, records in files for record in records})
    for suite in suites:  # files side by side, one suite at a time, among the files that ran it
        with_suite = [(path, records) for path, records in files if any(r.get("suite") == suite for r in records)]
        if len(with_suite) < 2:
            continue
        names = {str(path) for path, _ in with_suite} | {Path(path).name for path, _ in with_suite}
        sets = result_sets(with_suite, suite=suite)
        comparison = compare_sets(sets, baseline=baseline if baseline in names else None)
        title = f"{suite} results by file, as % of {comparison.baseline}"
        blocks.append(f"<h3>{escape(title)}</h3>" + comparison_table(comparison))
    if not blocks:
        return ""
    return "<h2>Comparisons</h2>" + "".join(blocks)


def comparison_table(comparison: Comparison) -> str:
    """An HTML table of a Comparison, verdicts as CSS classes, with its footer."""
    header = "<tr><th>case</th>" + "".join(f"<th>{escape(column_title(column))}</th>" for column in comparison.columns) + "</tr>"
    rows = []
    for row in comparison.rows:
        cells = "".join(
            f'<td class="num v-{escape(cell.verdict)}" title="{escape(VERDICTS.get(cell.verdict, ""))}'
            f'{": " + escape(cell.note) if cell.note else ""}">{escape(cell_text(cell))}</td>'
            for cell in row["cells"]
        )
        rows.append(f"<tr><td>{escape(row['row'])}</td>{cells}</tr>")
    footer = "".join(f"<p class=dim>{escape(line)}</p>" for line in footer_lines(comparison))
    regressions = "".join(f"<p class=fail>regression: {escape(line)}</p>" for line in comparison.regressions)
    return "<table>" + header + "".join(rows) + "</table>" + footer + regressions


# -- helpers ----------------------------------------------------------------------------------------------
def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<div><img alt="{escape(alt)}" src="data:image/png;base64,{data}"></div>'


def _value_html(value) -> str:
    if isinstance(value, dict):
        return "<br>".join(f"<code>{escape(key)}</code>: {escape(_short(item))}" for key, item in value.items())
    return escape(_short(value))


def _short(value) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _details(summary: str, value) -> str:
    return f"<details><summary>{escape(summary)}</summary><pre>{escape(json.dumps(value, indent=2, default=str))}</pre></details>"
