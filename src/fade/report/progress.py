"""The one progress renderer of every suite run (micro, models, ops): a rich bar on stderr plus a line per
finished case, fed through fade.measure.runner.RunProgress's four calls (start, case_started,
case_finished, finished).

What a line says is a function of the record, so each suite picks its own (`case_line` for benchmark
records; fade.report.ops.ops_progress for the ops sweep); the terminal text is not a contract (the JSONL records are).
"""

from __future__ import annotations

from typing import Callable, Optional

from fade.report.compare import fitting_unit


def case_line(record: dict) -> str:
    """`status  case_id  value unit  (N% of peak)  noisy  throttled`, or the first line of a failed case's error;
    the figure in the unit the summary table gives it (console._figure)."""
    status = record.get("status")
    text = f"{status:>8}  {record.get('case_id')}"
    if status == "ok" and record.get("value") is not None:
        # scaled as the summary table scales it (0.52 GB/s -> 524.6 MB/s): one unit per case in both (issue 30)
        value, unit = fitting_unit(record["value"], record.get("unit") or "")
        text += f"  {value:.4g} {unit}"
        peak = record.get("peak") or {}
        if peak.get("pct_of_peak") is not None:
            text += f"  ({peak['pct_of_peak']:.0f}% of peak)"
        if (record.get("stats") or {}).get("noisy"):
            text += "  noisy"
        if (record.get("telemetry") or {}).get("throttled"):
            text += "  throttled"
    elif record.get("error"):
        lines = str(record["error"]).strip().splitlines() or [""]
        text += f"  {lines[0]}" + (" ..." if len(lines) > 1 else "")  # one line per case, also in a pipe or log
    return text


def cases_done_line(summary, records: list, total: int) -> str:
    """`done: N of T cases (counts, R already finished) in S s -> FILE`."""
    state = "interrupted" if summary.interrupted else "done"
    counts = ", ".join(f"{count} {status}" for status, count in sorted(summary.statuses.items())) or "nothing run"
    resumed = f", {summary.resumed} already finished" if summary.resumed else ""
    return f"{state}: {len(records)} of {total} cases ({counts}{resumed}) in {summary.wall_s:.1f} s -> {summary.out}"


class ProgressBar:
    """A transient rich bar (spinner, label, bar, done/total, elapsed) plus `line(record)` per finished case
    (None: no line) and `done_line(summary, records, total)` at the end. Implements RunProgress."""

    def __init__(
        self,
        console=None,
        *,
        label: str = "{device}",
        show_case: bool = True,
        line: Callable[[dict], object] = case_line,
        done_line: Callable = cases_done_line,
    ):
        self.console = console
        self.label = label
        self.show_case = show_case
        self.line = line
        self.done_line = done_line
        self.records: list = []
        self.total = 0
        self.progress = None

    def start(self, total: int, device: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        if self.console is None:
            from fade.report.console import make_console

            self.console = make_console(stderr=True)
        self.total, self.device, self.records = total, device, []
        self.description = self.label.format(device=device)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task(self.description, total=total)
        self.progress.start()

    def case_started(self, case_id: str) -> None:
        if self.progress is not None and self.show_case:
            self.progress.update(self.task, description=f"{self.description} {case_id}")

    def case_finished(self, record: dict) -> None:
        self.records.append(record)
        if self.progress is None:
            return
        self.progress.advance(self.task)
        text = self.line(record)
        if text is not None:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def finished(self, summary) -> None:
        if self.progress is None:
            return
        self.progress.stop()
        self.progress = None
        self.console.print(self.done_line(summary, self.records, self.total), markup=False, highlight=False,
                           soft_wrap=True)

