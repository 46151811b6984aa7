"""Render a GuardReport: a rich table for the terminal (stderr, so a script's stdout stays its own) and JSON.

The table layout is not a contract; the JSON (`GuardReport.to_dict`) is.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from fade.hostwork.report import KINDS, GuardReport

MAX_OPS_SHOWN = 3  # op names per row; the JSON has them all


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _ops(ops: dict[str, int]) -> str:
    ranked = sorted(ops.items(), key=lambda item: -item[1])
    text = ", ".join(f"{name.replace('aten::', '')} ×{count}" for name, count in ranked[:MAX_OPS_SHOWN])
    if len(ranked) > MAX_OPS_SHOWN:
        text += f", +{len(ranked) - MAX_OPS_SHOWN} more"
    return text


def render_report(report: GuardReport):
    """A rich renderable: one row per (kind, line), then the units and a legend."""
    steps = ""
    if report.steps_seen:
        steps = f", {report.steps_inspected} of {report.steps_seen} steps inspected"
    header = f"fade guard ({report.mode}, device {report.device or 'none'}{steps})"
    if not report.records:
        lines = [Text(f"{header}: no CPU compute, cross-device copies, syncs or device mixing seen",
                      style="fade.ok")]
        lines += [Text(f"note: {note}", style="fade.dim") for note in report.notes]
        return Group(*lines)
    offences, sites = report.offence_count, len(report.records)
    table = Table(title=f"{header}: {offences} offence{'s' * (offences != 1)} at {sites} site{'s' * (sites != 1)}",
                  title_justify="left", expand=False)
    for column, justify in (("kind", "left"), ("where (user code)", "left"), ("count", "right"),
                            ("steps", "right"), ("time ms", "right"), ("bytes", "right"), ("ops", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for record in report.records:
        where = Text(record.site + (" (in backward)" if record.in_backward else ""))
        if record.code:
            where.append("\n" + record.code, style="fade.dim")
        what = record.what + (" (host waits)" if record.syncs else "")
        table.add_row(Text(what, style="fade.warn"), where, str(record.count), str(record.steps),
                      f"{record.total_ms:.2f}",
                      _bytes(record.total_bytes) if record.total_bytes else "", _ops(record.ops))
    legend = [Text("steps: training steps it happened in (steps end at optimizer.step() or guard.step()); time: "
                   "host wall time of the ops (a sync's time is its wait); bytes: data moved (copies) or CPU "
                   "operands (device_mix); (host waits): a blocking copy, its sync is counted with it. The "
                   "first stack of each site is in the JSON.", style="fade.dim")]
    legend += [Text(f"{kind}: {meaning}", style="fade.dim") for kind, meaning in KINDS.items()
               if any(r.kind == kind for r in report.records)]
    legend += [Text(f"note: {note}", style="fade.dim") for note in report.notes]
    return Group(table, *legend)


def print_summary(report: GuardReport, console: Console | None = None) -> None:
    if console is None:
        from fade.report.console import make_console

        console = make_console(stderr=True)
    console.print(render_report(report))

