"""`fade bench micro`: a thin shell over fade.measure.suites.micro.suite.run_micro; `fade bench models` registers beside it."""

from __future__ import annotations

from fade.errors import ExitCode, FadeUsageError


def cmd_bench_micro(args) -> int:
    from fade.measure.suites.micro.suite import run_micro
    from fade.results import summarize
    from fade.report.console import make_console, render_bench_summary

    console = make_console()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None
    try:
        summary = run_micro(args.device, quick=args.quick, only=args.only, out=args.output, resume=args.resume,
                            plot=args.plot, timeout_s=args.timeout, dtypes=dtypes, console=console)
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        console.print(f"[fade.fail]fade: cannot run here: {exc}[/]")
        return ExitCode.CANNOT_RUN
    render_bench_summary(summarize(summary.records), summary.to_dict(), console)
    if summary.interrupted:
        return 130
    return ExitCode.FINDINGS if summary.failed else ExitCode.OK


DEFAULT_OUTPUT = "results/micro.jsonl"


def _no_suite(args) -> int:
    raise FadeUsageError("fade bench: choose a suite: micro, models")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FadeUsageError(f"--timeout: not a number: {text!r}") from None
    if value <= 0:
        raise FadeUsageError(f"--timeout must be > 0, got {text}")
    return value


def add_verbs(verbs) -> None:
    bench = verbs.add_parser("bench", help="benchmarks as %% of the device's physical limits")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", parser_class=type(bench))
    bench.set_defaults(func=_no_suite)
    micro = suites.add_parser("micro", help="GEMM, bandwidth, transfers, launch, conv, attention, norms, CPU vs GPU")
    micro.add_argument("--device", help="torch device (default: cuda:0 if available, else cpu)")
    micro.add_argument("--quick", action="store_true", help="small sizes and short budgets (~10 s on a CPU)")
    micro.add_argument("--only", metavar="PATTERN", help="comma-separated case globs or substrings (e.g. 'gemm/bf16/*')")
    micro.add_argument("--dtypes", metavar="LIST", help="comma-separated dtypes to keep (fp32,tf32,fp16,bf16,fp8)")
    micro.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE", help="JSONL results file (appended)")
    micro.add_argument("--resume", action="store_true", help="skip cases already measured ok in FILE")
    micro.add_argument("--plot", action="store_true", help="write PNG plots next to FILE")
    micro.add_argument("--timeout", type=_positive_float, metavar="S", help="per-case timeout in seconds")
    micro.set_defaults(func=cmd_bench_micro)
    from fade.cli import models as cli_models

    cli_models.add_bench_models(suites)
