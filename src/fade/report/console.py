"""Render reports for a terminal with rich: the doctor's device table, findings and measurements, and a bench
run's one-row-per-case table.

Reads report data only (the dicts that `fade.analyze.doctor.diagnose` returns, result records). Styles are semantic
names from THEME, never raw colours. The text layout is not a contract: use --json for machines.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from fade.report.compare import fitting_unit

THEME = Theme({
    "fade.fail": "bold red", "fade.warn": "yellow", "fade.info": "cyan", "fade.ok": "green",
    "fade.dim": "dim", "fade.fix": "bold", "fade.head": "bold",
})
SEVERITY_LABEL = {"fail": "FAIL", "warn": "WARN", "info": "INFO"}


MIN_CONSOLE_WIDTH = 20  # narrower (COLUMNS=0, a bogus terminal size) and rich prints nothing at all
FALLBACK_WIDTH = 80


def make_console(**kwargs) -> Console:
    """A rich Console in FADE's theme; a width below MIN_CONSOLE_WIDTH becomes FALLBACK_WIDTH."""
    console = Console(theme=THEME, highlight=False, **kwargs)
    if console.width < MIN_CONSOLE_WIDTH:
        console.width = FALLBACK_WIDTH
    return console


def _gib(nbytes) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes else "?"


def _units(dev: dict) -> str:
    units = dev.get("compute_units")
    runtime, label = dev.get("runtime_units"), dev.get("runtime_unit_label")
    kind = "SMs" if dev.get("vendor") == "nvidia" else "CUs"
    text = f"{units} {kind}" if units else "?"
    if runtime is not None and label == "WGP":
        text += f" (runtime: {runtime} WGPs)"
    return text


def _peaks(dev: dict) -> str:
    peaks = dev.get("peaks")
    if not peaks:
        return "unknown"
    parts = [f"{k} {v:.4g}" for k, v in peaks["tflops"].items() if k in ("fp32", "tf32", "fp16", "bf16", "fp8")]
    text = "TFLOP/s: " + ", ".join(parts)
    if peaks.get("bandwidth_gbs"):
        text += f"\nmemory: {peaks['bandwidth_gbs']:g} GB/s"
    if peaks.get("basis") == "computed":
        text += "\n(computed, not in spec table)"
    return text


def device_table(devices: list[dict]) -> Table:
    table = Table(title="Devices", title_justify="left", expand=False)
    for column in ("#", "GPU", "arch", "units", "wave", "memory", "peak (dense)"):
        table.add_column(column, overflow="fold")
    for dev in devices:
        arch = dev.get("arch") or "?"
        if dev.get("runtime_arch") and dev["runtime_arch"] != dev.get("arch"):
            arch += f"\n(runtime: {dev['runtime_arch']})"
        table.add_row(str(dev["index"]) if dev.get("index") is not None else "-",
                      escape(dev.get("name") or "?") + (f"\n[fade.dim]{escape(dev['family'])}[/]" if dev.get("family") else ""),
                      escape(arch), _units(dev), str(dev.get("wave_size") or "?"), _gib(dev.get("memory_bytes")),
                      _peaks(dev))
    return table


def render_opencl(section: dict, console: Console) -> None:
    """The doctor report's OpenCL platforms and devices, and what is missing (analyze.facts.opencl_missing)."""
    table = Table(title="OpenCL (fade.ocl)", title_justify="left", expand=False)
    for column in ("platform", "device", "kind", "version", "CUs", "clock", "memory", "fp16", "fp64"):
        table.add_column(column, overflow="fold")
    for platform in section.get("platforms") or []:
        for device in platform.get("devices") or []:
            clock = f"{device['clock_mhz']} MHz" if device.get("clock_mhz") else "?"
            flags = ["yes" if device.get(key) else "no" if device.get(key) is False else "?"
                     for key in ("fp16", "fp64")]
            table.add_row(escape(platform.get("name") or "?"),
                          escape(device.get("name") or "?") + (f"\n[fade.dim]{escape(device['vendor'])}[/]"
                                                               if device.get("vendor") else ""),
                          device.get("kind") or "?", escape(device.get("opencl_version") or "?"),
                          str(device.get("compute_units") or "?"), clock, _gib(device.get("global_memory_bytes")),
                          *flags)
    if table.row_count:
        console.print(table)
    missing = section.get("missing") or []
    if missing:
        console.print(Text("OpenCL missing: " + "; ".join(missing), style="fade.warn"))
    else:
        console.print(Text("OpenCL: ICD, loader, pyopencl and CLBlast present", style="fade.dim"))


def _finding_panel(finding: dict) -> Panel:
    severity = finding["severity"]
    where = f" [fade.dim](device {finding['device']})[/]" if finding.get("device") is not None else ""
    body = Group(
        Text(finding["detail"]),
        Text.assemble(("fix: ", "fade.dim"), (finding["fix"], "fade.fix")),
        Text("source: " + finding["source"], style="fade.dim"),
    )
    title = f"[fade.{severity}]{SEVERITY_LABEL[severity]}[/] [fade.head]{finding['id']}[/] {escape(finding['title'])}{where}"
    return Panel(body, title=title, title_align="left", border_style=f"fade.{severity}")


def measurement_table(measurements: dict) -> Table | None:
    devices = (measurements or {}).get("devices") or {}
    if not devices:
        return None
    table = Table(title="Quick measurements (median of 10 after warm-up; range in brackets)", title_justify="left")
    for column in ("device", "what", "measured", "% of peak"):
        table.add_column(column)
    for name, result in devices.items():
        if result.get("error"):
            table.add_row(name, "error", Text(result["error"], style="fade.fail"), "")
            continue
        for dtype, gemm in result.get("gemm", {}).items():
            pct = f"{gemm['pct_of_peak']:.0f}%" if gemm.get("pct_of_peak") is not None else "-"
            table.add_row(name, f"GEMM {dtype} {gemm['n']}³", _flops(gemm), pct)
        copy = result.get("copy")
        if copy:
            pct = f"{copy['pct_of_peak']:.0f}%" if copy.get("pct_of_peak") is not None else "-"
            table.add_row(name, f"copy {copy['bytes'] >> 20} MiB (r+w)",
                          f"{copy['value']:.0f} GB/s [{copy['min']:.0f}-{copy['max']:.0f}]", pct)
        test = result.get("selftest")
        if test:
            verdict = Text("ok", style="fade.ok") if test["ok"] else Text("WRONG RESULTS", style="fade.fail")
            table.add_row(name, f"self-test GEMM {test['rows']}×{test['k']}×{test['n']} vs fp64",
                          Text.assemble(verdict, f" (max rel err {float(test['max_rel_err']):.1e})"), "")
    return table


def _flops(figure: dict) -> str:
    """TFLOP/s with its range; GFLOP/s below 1 TFLOP/s so a CPU's figures keep their digits."""
    scale, unit = (1, "TFLOP/s") if figure["value"] >= 1 else (1e3, "GFLOP/s")
    return (f"{figure['value'] * scale:.1f} {unit} "
            f"[{figure['min'] * scale:.1f}-{figure['max'] * scale:.1f}]")


def render_doctor(report: dict, console: Console) -> None:
    stack = report["stack"]
    line = f"torch {stack['torch'] or 'not importable'}"
    if stack.get("hip"):
        line += f" · HIP {stack['hip']}"
    if stack.get("cuda"):
        line += f" · CUDA {stack['cuda']}"
    if stack.get("rocm"):
        line += f" · ROCm {stack['rocm']}"
    if stack.get("os"):
        line += f" · {stack['os'].get('system')} {stack['os'].get('release')}"
    probe = report.get("probe") or {}
    if probe.get("torch") == "cached":
        line += f" · torch probe cached {probe.get('cached_at')} (--fresh re-probes)"
    console.print(Text(line, style="fade.dim"))
    if probe.get("warning"):  # a corrupt probe cache entry was set aside
        console.print(Text(f"warning: {probe['warning']}", style="fade.warn"))
    if report["devices"]:
        console.print(device_table(report["devices"]))
        for dev in report["devices"]:
            for note in dev.get("notes") or []:
                console.print(Text(f"  note (device {dev['index'] if dev.get('index') is not None else '-'}): {note}",
                                   style="fade.dim"))
    else:
        console.print("No GPU found (PCI, kernel driver and torch all agree).")
    if report.get("opencl") is not None:
        render_opencl(report["opencl"], console)
    table = measurement_table(report.get("measurements"))
    if table is not None:
        console.print(table)
    elif (report.get("measurements") or {}).get("error"):
        console.print(Text(report["measurements"]["error"], style="fade.fail"))
    findings = report["findings"]
    counts = {s: sum(f["severity"] == s for f in findings) for s in SEVERITY_LABEL}
    if not findings:
        console.print(Text("No known issue applies.", style="fade.ok"))
    for finding in findings:
        console.print(_finding_panel(finding))
    console.print(Text(f"{counts['fail']} fail, {counts['warn']} warn, {counts['info']} info",
                       style="fade.fail" if counts["fail"] else "fade.ok"))


def _figure(row: dict) -> str:
    value, unit = row.get("value"), row.get("unit") or ""
    if value is None:
        return "-"
    value, unit = fitting_unit(value, unit)
    return f"{value:.4g} {unit}"


CONTENTION_PREFIX = "contended: "  # fade.results.summarize appends a contended case's reasons last, after this


def _split_contention(note: str) -> tuple:
    """(a row's note without its contention reasons, the reasons or ""): the table says "contended" per row and
    the reasons once, below it (at 80 columns the reasons, repeated on every row, were most of the output)."""
    head, found, reasons = note.partition(CONTENTION_PREFIX)
    return (head.rstrip("; "), reasons) if found else (note, "")


def render_bench_summary(rows: list[dict], summary: dict, console: Console) -> None:
    """One line per case: the figure, % of peak, spread, and what went wrong where it did."""
    table = Table(title=f"{summary.get('device')} · {summary.get('out')}", title_justify="left")
    wide = console.width >= 120
    table.add_column("case", no_wrap=wide, overflow="fold")  # ids are what users grep for: fold only if narrow
    for column in ("result", "% of peak", "median ms", "IQR %", "n", "note") if wide else ("result", "% of peak", "IQR %", "note"):
        table.add_column(column, overflow="fold")
    several_devices = len({row.get("torch_device") for row in rows}) > 1  # a run on ocl:0,cuda:0: say which
    contention_example = None  # (case, reasons) of the first contended case, for the line below the table
    for row in rows:
        status = row.get("status")
        case = f"{row['case_id']} [{row.get('torch_device')}]" if several_devices else row["case_id"]
        note, reasons = _split_contention(row.get("note") or "")
        if reasons and contention_example is None:
            contention_example = (case, reasons)
        if status != "ok":
            blanks = ("", "", "", "") if wide else ("", "")
            note = " ".join((["contended"] if row.get("contended") else []) + ([note] if note else []))
            table.add_row(escape(case), Text(status or "?", style="fade.fail"), *blanks, Text(note))
            continue
        pct = f"{row['pct_of_peak']:.0f}%" if row.get("pct_of_peak") is not None else "-"
        flags = [f for f, on in (("noisy", row.get("noisy")), ("throttled", row.get("throttled")),
                                 ("contended", row.get("contended"))) if on]
        note = " ".join(flags + ([note] if note else []))
        median = f"{row['median_ms']:.4g}" if row.get("median_ms") is not None else "-"
        iqr = f"{row['iqr_pct']:.1f}" if row.get("iqr_pct") is not None else "-"
        note_text = Text(note, style="fade.warn" if flags else "fade.dim")
        middle = (median, iqr, str(row.get("n") or "")) if wide else (iqr,)
        table.add_row(escape(case), _figure(row), pct, *middle, note_text)
    console.print(table)
    statuses = summary.get("statuses") or {}
    line = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    console.print(Text(f"{line} in {summary.get('wall_s', 0):.1f} s" + (" (interrupted)" if summary.get("interrupted") else ""),
                       style="fade.fail" if summary.get("failed") else "fade.ok"))
    contended = sum(1 for row in rows if row.get("contended"))
    if contended:
        example = f" (first, {contention_example[0]}: {contention_example[1]})" if contention_example else ""
        console.print(Text(f"{contended} of {len(rows)} case(s) ran while other work used the host or device "
                           f"(contended){example}: their figures understate this machine; rerun them on a quiet "
                           "one. Each record's telemetry.contention_reasons says why.", style="fade.warn"))
    for plot in summary.get("plots") or []:
        console.print(Text(f"plot: {plot}", style="fade.dim"))


def model_rows(records: list) -> list:
    """fade.results.summarize's rows, with a model record's % of peak and its TFLOP/s, peak memory and
    plain-loop difference in the note (they live in `extra` for the model suite)."""
    from fade.results import summarize

    extras = {(record["case_id"], record.get("torch_device")): record.get("extra") or {} for record in records}
    rows = summarize(records)
    for row in rows:
        extra = extras.get((row["case_id"], row.get("torch_device")), {})
        flops = extra.get("flops") or {}
        row["pct_of_peak"] = flops.get("pct_of_peak")
        if row["status"] != "ok":
            continue
        parts = []
        if flops.get("achieved_tflops"):
            dtype = f" ({flops['peak_dtype']} peak)" if flops.get("peak_dtype") else ""
            achieved, unit = fitting_unit(flops["achieved_tflops"], "TFLOP/s")
            parts.append(f"{achieved:.3g} {unit}{dtype}")
        peak_bytes = (extra.get("memory") or {}).get("peak_allocated_bytes")
        if peak_bytes:
            parts.append(f"{peak_bytes / 2**30:.1f} GiB peak")
        plain = extra.get("plain_loop") or {}
        if plain.get("fade_vs_plain_pct") is not None:
            parts.append(f"plain loop {plain['fade_vs_plain_pct']:+.1f}%")
        row["note"] = "; ".join(parts + ([row["note"]] if row.get("note") else [])) or None
    return rows


def dist_rows(records: list) -> list:
    """fade.results.summarize's rows for dist records: a collective's note gives its latency (the figure up to
    64 KiB), algbw and the busbw formula; a scaling case's note gives each process count's samples/s per
    process, efficiency and exposed communication."""
    from fade.results import summarize

    extras = {(record["case_id"], record.get("torch_device")): record.get("extra") or {} for record in records}
    rows = summarize(records)
    for row in rows:
        extra = extras.get((row["case_id"], row.get("torch_device")), {})
        if row["status"] != "ok":
            continue
        if "busbw_gbs" in extra:
            latency = f"latency {extra['latency_us']:.1f} us; " if extra.get("latency_us") is not None else ""
            parts = [f"{latency}algbw {extra['algbw_gbs']:.3g} GB/s; busbw = algbw x {extra['bus_factor']} (n={extra['world']})"]
        else:
            parts = [f"x{entry['world']}: {entry['samples_per_s_per_process']:.3g} samples/s/proc, "
                     f"{entry.get('efficiency_pct', 0):.0f}% eff, {entry['exposed_comm_pct']:.0f}% exposed comm"
                     for entry in extra.get("scaling") or []]  # fmt: skip
        row["note"] = "; ".join(parts + ([row["note"]] if row.get("note") else [])) or None
    return rows
