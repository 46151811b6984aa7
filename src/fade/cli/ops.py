"""`fade ops` (sweep every OpInfo op × dtype on a device against the CPU) and `fade ops compare A B` (the gap
table between two sweeps): thin shells over fade.measure.suites.ops.

Exit codes (fade.errors.ExitCode): 0 the sweep or comparison completed, whatever it found (findings are
the data); 2 bad usage or input file; 3 this machine cannot sweep (op_db not importable); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from fade.cli.args import add_device_flag, add_json_flag, check_outputs, report_run_problems, write_json
from fade.errors import ExitCode

INTERRUPTED = 130  # what fade.cli returns for Ctrl-C


def add_verbs(verbs) -> None:
    """Register `fade ops` on fade.cli's subparsers. `fade ops [flags]` sweeps; `fade ops compare A B` compares.

    The sweep flags live on `ops` itself and `compare` is an optional sub-verb, so both forms parse.
    """
    ops = verbs.add_parser(
        "ops",
        help="sweep PyTorch's OpInfo ops × dtypes on a device against the CPU; `fade ops compare A B` for the gap",
        description="Run every OpInfo op × dtype on DEVICE and on the CPU and classify each: ok, mismatch, "
        "unsupported, error, crash, hang or slow. `fade ops compare A.jsonl B.jsonl` prints the gap table.",
    )
    add_device_flag(ops, help="torch device: cuda, cuda:1, cpu, ocl:N (default: the first GPU, else cpu)", metavar="D")
    ops.add_argument(
        "--dtypes",
        nargs="+",
        metavar="DTYPE",
        help="dtypes to sweep, space- or comma-separated (default: float32 float16 bfloat16 int64; aliases fp32, bf16, ...)",
    )
    ops.add_argument("--only", metavar="PATTERN", help="comma-separated globs or substrings of op ids (e.g. 'linalg.*,conv')")
    ops.add_argument("--samples", type=int, default=None, metavar="K", help="sample inputs per op × dtype (default: 3)")
    ops.add_argument("-o", "--output", default="ops.jsonl", metavar="FILE", help="results JSONL, appended to (default: ops.jsonl)")
    ops.add_argument("--resume", action="store_true", help="skip op × dtypes that FILE already holds for this device")
    ops.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per op × dtype before it counts as a hang (default: 60)")
    ops.add_argument("--no-curated", action="store_true", help="with --only: do not add the curated ops (grid_sample, sparse, attention)")
    add_json_flag(ops, "the summary")
    ops.add_argument("--quiet", action="store_true", help="no progress lines")
    ops.add_argument("--inject", metavar="FILE", help=argparse.SUPPRESS)  # tests: a file with wrap_op(op_id, call)
    ops.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # tests: no worker process
    ops.set_defaults(func=cmd_ops)

    sub = ops.add_subparsers(dest="ops_verb", title="sub-verb (optional)", metavar="compare A B", parser_class=type(ops))
    compare = sub.add_parser("compare", help="the gap table between two `fade ops` result files")
    compare.add_argument("a", metavar="A.jsonl")
    compare.add_argument("b", metavar="B.jsonl")
    add_json_flag(compare, "the gap", dest="compare_json")
    compare.set_defaults(func=cmd_ops_compare)


def cmd_ops(args) -> int:
    from fade.measure.suites.ops import OpsCannotRun, run_ops_sweep
    from fade.measure.suites.ops.sweep import DEFAULT_SAMPLES
    from fade.report.console import make_console
    from fade.report.ops import ops_progress, render_sweep

    check_outputs(("-o", args.output), ("--json", args.json))
    try:
        sweep = run_ops_sweep(
            args.device,
            dtypes=args.dtypes,
            only=args.only,
            samples=DEFAULT_SAMPLES if args.samples is None else args.samples,
            out=args.output,
            resume=args.resume,
            timeout_s=args.timeout,
            curated=not args.no_curated,
            isolate=not args.in_process,
            inject=args.inject,
            progress=None if args.quiet else ops_progress(make_console(stderr=True)),
        )
    except OpsCannotRun as error:
        print(f"fade: cannot run here: {error}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    if args.json:
        write_json(sweep.to_dict(), args.json)
    if args.json != "-":
        render_sweep(sweep, make_console())
    if sweep.run.write_error:
        return report_run_problems(sweep.run)  # render_sweep already listed the unreadable lines
    return INTERRUPTED if sweep.run.interrupted else ExitCode.OK


def cmd_ops_compare(args) -> int:
    from fade.measure.suites.ops import compare_ops
    from fade.report.ops import render_gap
    from fade.report.console import make_console

    check_outputs(("--json", args.compare_json))
    gap = compare_ops(args.a, args.b)
    if args.compare_json:
        write_json(gap, args.compare_json)
    if args.compare_json != "-":
        render_gap(gap, make_console())
    return ExitCode.OK

