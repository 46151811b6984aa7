"""`fade compare`: a thin shell over fade.analyze.compare.compare_files; results files side by side as % of a
baseline. Exit codes: 1 a regression past --fail-under; 2 a file with unreadable lines (each reported as
`file:LINE: reason` on stderr, the rest still compared)."""

from __future__ import annotations

from fade.cli.args import add_json_flag, check_outputs, positive_float, report_problems, write_json, write_text
from fade.errors import ExitCode


def add_verbs(verbs) -> None:
    compare = verbs.add_parser("compare", help="results files side by side as %% of a baseline, with noise and regressions")
    compare.add_argument("files", nargs="+", metavar="RESULTS.jsonl")
    compare.add_argument("--baseline", metavar="SET", help="the file (or, with --by variant, the variant; with --by device, the device) others are %% of; default: the first")
    compare.add_argument("--fail-under", type=positive_float("--fail-under"), metavar="PCT",
                         help="exit 1 when a case is below PCT%% of the baseline outside the noise band, or failed where the baseline ran")  # fmt: skip
    compare.add_argument("--by", default="file", choices=("file", "variant", "device"),
                         help="a result set per file (default), per model-bench variant, or per torch device "
                              "(ocl:0 against cuda:0 from one `fade bench models --device ocl:0,cuda:0` file)")  # fmt: skip
    add_json_flag(compare, "the comparison")
    compare.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    compare.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from fade.analyze.compare import compare_files
    from fade.report.compare import render_markdown, render_terminal
    from fade.report.console import make_console

    check_outputs(("--json", args.json), ("--markdown", args.markdown))
    comparison = compare_files(args.files, baseline=args.baseline, fail_under=args.fail_under, by=args.by)
    if args.json:
        write_json(comparison.to_dict(), args.json)
    if args.markdown:
        write_text(args.markdown, render_markdown(comparison))
    if args.json != "-":
        render_terminal(comparison, make_console())
    report_problems(comparison.problems)
    if comparison.problems:
        return ExitCode.USAGE
    return ExitCode.FINDINGS if comparison.regressions else ExitCode.OK
