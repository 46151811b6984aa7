"""`fade bench micro` and `fade bench models`: thin shells over fade.api.bench; each renders the run's table
and returns 0, 1 when a case failed, 3 when the worker cannot start here, 130 when interrupted."""

from __future__ import annotations

import sys

from fade.cli.args import add_json_flag, add_run_flags, check_outputs, positive_int, report_run_problems, split_list, write_json
from fade.errors import ExitCode, FadeUsageError

MICRO_OUTPUT = "results/micro.jsonl"
MODELS_OUTPUT = "results/models.jsonl"


def add_verbs(verbs) -> None:
    bench = verbs.add_parser("bench", help="benchmarks as %% of the device's physical limits")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", parser_class=type(bench))
    bench.set_defaults(func=_no_suite)
    _add_micro(suites)
    _add_models(suites)


def _no_suite(args) -> int:
    raise FadeUsageError("fade bench: choose a suite: micro, models")


def _add_micro(suites) -> None:
    micro = suites.add_parser("micro", help="GEMM, bandwidth, transfers, launch, conv, attention, norms, CPU vs GPU")
    micro.add_argument("--quick", action="store_true", help="small sizes and short timing budgets; measured: 18 s for 35 cases on a busy "
                            "2-core AVX-512 EPYC, 44 s on a 2-core AVX2 host (one bf16 GEMM case 27 s there); "
                            "a GPU runs it faster")  # fmt: skip
    micro.add_argument("--only", metavar="PATTERN", help="comma-separated case globs or substrings (e.g. 'gemm/bf16/*')")
    micro.add_argument("--dtypes", metavar="LIST", help="comma-separated dtypes to keep (fp32,tf32,fp16,bf16,fp8)")
    micro.add_argument("--plot", action="store_true", help="write PNG plots next to FILE")
    add_run_flags(micro, default_output=MICRO_OUTPUT)
    micro.set_defaults(func=cmd_bench_micro)


def _add_models(suites) -> None:
    from fade.measure.suites.models.suite import DEFAULT_BATCH, DEFAULT_VARIANTS, QUICK_BATCH, QUICK_VARIANTS

    models = suites.add_parser(
        "models",
        help="train/infer throughput of real networks per variant (fp32, tf32, AMP, channels-last, compile)",
        description="Samples/s, step time (median, IQR), achieved TFLOP/s and peak memory of whole networks. "
        "Synthetic data stays on the device (no input copy is timed).",
    )
    models.add_argument("--models", metavar="LIST",
                        help="comma-separated zoo names (alexnet, resnet18, resnet50, vgg16, mobilenet_v2, gpt2-small, "
                             "bert-base) or module:function (default: the whole zoo)")  # fmt: skip
    models.add_argument("--batch", type=positive_int("--batch"), metavar="N",
                        help=f"samples per step (default {DEFAULT_BATCH}; {QUICK_BATCH} with --quick)")  # fmt: skip
    models.add_argument("--mode", default="both", choices=("train", "infer", "both"), help="default: both")
    models.add_argument("--variants", metavar="LIST",
                        help="comma-separated variants, parts joined with + (fp32, default, tf32, amp-fp16, amp-bf16, "
                             f"channels-last, compile); default {','.join(DEFAULT_VARIANTS)}; "
                             f"{','.join(QUICK_VARIANTS)} with --quick")  # fmt: skip
    models.add_argument("--quick", action="store_true",
                        help="the five CNNs (unless --models), batch 2, 64 px images, 32-token sequences, short timing: "
                             "1-3 min on 2 CPU cores")  # fmt: skip
    models.add_argument("--image-size", type=positive_int("--image-size"), metavar="PX", help="image side (default 224)")
    models.add_argument("--seq-len", type=positive_int("--seq-len"), metavar="TOKENS", help="sequence length (default 512)")
    models.add_argument("--validate", action="store_true",
                        help="also time each case with a plain event-timed loop (extra.plain_loop)")  # fmt: skip
    add_run_flags(models, default_output=MODELS_OUTPUT)
    add_json_flag(models, "the run summary")
    models.set_defaults(func=cmd_bench_models)


def cmd_bench_micro(args) -> int:
    from fade.api import bench
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import ProgressBar

    check_outputs(("-o", args.output))
    console = make_console()
    try:
        result = bench("micro", args.device, quick=args.quick, only=args.only, dtypes=split_list(args.dtypes) or None,
                       out=args.output, resume=args.resume, plot=args.plot, timeout_s=args.timeout,
                       progress=ProgressBar(console))
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        console.print(f"[fade.fail]fade: cannot run here: {exc}[/]")
        return ExitCode.CANNOT_RUN
    render_bench_summary(result.summary, result.run.to_dict(), console)
    return report_run_problems(result.run) or result.exit_status


def cmd_bench_models(args) -> int:
    from fade.api import bench
    from fade.analyze.compare import compare_sets, result_sets
    from fade.report.compare import render_terminal
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import ProgressBar

    check_outputs(("-o", args.output), ("--json", args.json))  # before minutes of work, not after
    console = make_console()
    try:
        result = bench("models", args.device, models=split_list(args.models) or None, batch=args.batch,
                       mode=args.mode, variants=split_list(args.variants) or None, quick=args.quick,
                       image_size=args.image_size, sequence_length=args.seq_len, validate=args.validate,
                       out=args.output, resume=args.resume, timeout_s=args.timeout, progress=ProgressBar(console))
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        print(f"fade: cannot run here: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    run = result.run
    render_bench_summary(result.summary, run.to_dict(), console)
    if run.records:  # this run's variants side by side, against the first variant asked for
        render_terminal(compare_sets(result_sets([(run.out, run.records)], by="variant"), by="variant"), console)
    if args.json:
        write_json(run.to_dict(), args.json)
    return report_run_problems(run) or result.exit_status
