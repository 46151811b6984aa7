"""`fade report`: a thin shell over fade.report.html.write_report; one self-contained HTML file from results
files. Exit code 2 when a file has unreadable lines (each reported on stderr; the rest is still rendered)."""

from __future__ import annotations

import sys

from fade.cli.args import check_outputs, report_problems
from fade.errors import ExitCode

DEFAULT_REPORT = "report.html"


def add_verbs(verbs) -> None:
    report = verbs.add_parser("report", help="one self-contained HTML file: device, stack, micro and model results, comparisons")
    report.add_argument("files", nargs="+", metavar="RESULTS.jsonl")
    report.add_argument("-o", "--output", default=DEFAULT_REPORT, metavar="FILE", help=f"HTML file to write (default {DEFAULT_REPORT})")
    report.add_argument("--baseline", metavar="SET", help="baseline of the comparison between files; default: the first")
    report.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from fade.report.html import write_report

    check_outputs(("-o", args.output))
    report = write_report(args.files, args.output, baseline=args.baseline)
    print(f"wrote {args.output} ({report.records} records from {len(args.files)} file(s))", file=sys.stderr)
    report_problems(report.problems)
    return ExitCode.USAGE if report.problems else ExitCode.OK
