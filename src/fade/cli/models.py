"""`fade bench models`, `fade compare` and `fade report`: thin shells over fade.measure.suites.models.suite and fade.report.

fade.cli.bench registers `bench models` through `add_bench_models`; fade.cli registers `compare` and
`report` through `add_verbs`. Exit codes are fade.errors.ExitCode: a results file with corrupt lines is
still read and rendered, each bad line is reported as `file:LINE: reason` on stderr, and the verb exits 2.
"""

from __future__ import annotations

import json
import os
import sys

from fade.errors import ExitCode, FadeUsageError

DEFAULT_OUTPUT = "results/models.jsonl"
DEFAULT_REPORT = "report.html"


def _split(text):
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _positive_int(flag: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise FadeUsageError(f"{flag} {text!r}: not an integer") from None
        if value <= 0:
            raise FadeUsageError(f"{flag} {text}: must be a positive integer")
        return value

    return parse


def _positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise FadeUsageError(f"{flag} {text!r}: not a number") from None
        if value <= 0:
            raise FadeUsageError(f"{flag} {text}: must be > 0")
        return value

    return parse


def _report_problems(problems) -> None:
    for problem in problems:
        print(f"fade: error: {problem}", file=sys.stderr)


# -- fade bench models ------------------------------------------------------------------------------------
def cmd_bench_models(args) -> int:
    from fade.measure.suites.models.suite import run_models
    from fade.analyze.compare import compare_sets, result_sets
    from fade.report.compare import render_terminal
    from fade.report.console import make_console, render_bench_summary

    console = make_console()
    if args.output == DEFAULT_OUTPUT:
        os.makedirs(os.path.dirname(DEFAULT_OUTPUT), exist_ok=True)
    try:
        summary = run_models(
            args.device,
            models=_split(args.models) or None,
            batch=args.batch,
            mode=args.mode,
            variants=_split(args.variants) or None,
            quick=args.quick,
            image_size=args.image_size,
            sequence_length=args.seq_len,
            validate=args.validate,
            out=args.output,
            resume=args.resume,
            timeout_s=args.timeout,
            console=console,
        )
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        print(f"fade: cannot run here: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    render_bench_summary(_model_rows(summary.records), summary.to_dict(), console)
    if summary.records:  # this run's variants side by side, against the first variant asked for
        render_terminal(compare_sets(result_sets([(summary.out, summary.records)], by="variant"), by="variant"), console)
    if args.json:
        text = json.dumps(summary.to_dict(), indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
    if summary.interrupted:
        return 130
    return ExitCode.FINDINGS if summary.failed else ExitCode.OK


def _model_rows(records: list) -> list:
    """record.summarize's rows, with a model record's % of peak and its TFLOP/s, peak memory and plain-loop
    difference in the note (they live in `extra` for this suite)."""
    from fade.results import summarize

    extras = {record["case_id"]: record.get("extra") or {} for record in records}
    rows = summarize(records)
    for row in rows:
        extra = extras.get(row["case_id"], {})
        flops = extra.get("flops") or {}
        row["pct_of_peak"] = flops.get("pct_of_peak")
        if row["status"] != "ok":
            continue
        parts = []
        if flops.get("achieved_tflops"):
            dtype = f" ({flops['peak_dtype']} peak)" if flops.get("peak_dtype") else ""
            parts.append(f"{flops['achieved_tflops']:.3g} TFLOP/s{dtype}")
        peak_bytes = (extra.get("memory") or {}).get("peak_allocated_bytes")
        if peak_bytes:
            parts.append(f"{peak_bytes / 2**30:.1f} GiB peak")
        plain = extra.get("plain_loop") or {}
        if plain.get("fade_vs_plain_pct") is not None:
            parts.append(f"plain loop {plain['fade_vs_plain_pct']:+.1f}%")
        row["note"] = "; ".join(parts + ([row["note"]] if row.get("note") else [])) or None
    return rows


def add_bench_models(suites) -> None:
    """Register `fade bench models` under the `bench` verb's sub-parsers."""
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
    models.add_argument("--batch", type=_positive_int("--batch"), metavar="N",
                        help=f"samples per step (default {DEFAULT_BATCH}; {QUICK_BATCH} with --quick)")  # fmt: skip
    models.add_argument("--mode", default="both", choices=("train", "infer", "both"), help="default: both")
    models.add_argument("--variants", metavar="LIST",
                        help="comma-separated variants, parts joined with + (fp32, default, tf32, amp-fp16, amp-bf16, "
                             f"channels-last, compile); default {','.join(DEFAULT_VARIANTS)}; "
                             f"{','.join(QUICK_VARIANTS)} with --quick")  # fmt: skip
    models.add_argument("--quick", action="store_true",
                        help="the five CNNs (unless --models), batch 2, 64 px images, 32-token sequences, short timing: "
                             "1-3 min on 2 CPU cores")  # fmt: skip
    models.add_argument("--image-size", type=_positive_int("--image-size"), metavar="PX", help="image side (default 224)")
    models.add_argument("--seq-len", type=_positive_int("--seq-len"), metavar="TOKENS", help="sequence length (default 512)")
    models.add_argument("--validate", action="store_true",
                        help="also time each case with a plain event-timed loop (extra.plain_loop)")  # fmt: skip
    models.add_argument("--device", help="torch device (default: cuda:0 if available, else cpu)")
    models.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE", help="JSONL results file (appended)")
    models.add_argument("--resume", action="store_true", help="skip cases already measured ok in FILE")
    models.add_argument("--timeout", type=_positive_float("--timeout"), metavar="S", help="per-case timeout in seconds")
    models.add_argument("--json", nargs="?", const="-", metavar="FILE", help="write the run summary as JSON (stdout if no FILE)")
    models.set_defaults(func=cmd_bench_models)


# -- fade compare -----------------------------------------------------------------------------------------
def cmd_compare(args) -> int:
    from fade.analyze.compare import compare_files
    from fade.report.compare import render_markdown, render_terminal
    from fade.report.console import make_console

    comparison = compare_files(args.files, baseline=args.baseline, fail_under=args.fail_under, by=args.by)
    if args.json:
        text = json.dumps(comparison.to_dict(), indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            _write(args.json, text + "\n")
    if args.markdown:
        _write(args.markdown, render_markdown(comparison))
    if not args.json or args.json != "-":
        render_terminal(comparison, make_console())
    _report_problems(comparison.problems)
    if comparison.problems:
        return ExitCode.USAGE
    return ExitCode.FINDINGS if comparison.regressions else ExitCode.OK


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise FadeUsageError(f"cannot write {path}: {error.strerror or error}") from None


# -- fade report ------------------------------------------------------------------------------------------
def cmd_report(args) -> int:
    from fade.report.html import write_report

    report = write_report(args.files, args.output, baseline=args.baseline)
    print(f"wrote {args.output} ({report.records} records from {len(args.files)} file(s))", file=sys.stderr)
    _report_problems(report.problems)
    return ExitCode.USAGE if report.problems else ExitCode.OK


def add_verbs(verbs) -> None:
    """Register the top-level `compare` and `report` verbs."""
    compare = verbs.add_parser("compare", help="results files side by side as %% of a baseline, with noise and regressions")
    compare.add_argument("files", nargs="+", metavar="RESULTS.jsonl")
    compare.add_argument("--baseline", metavar="SET", help="the file (or, with --by variant, the variant) others are %% of; default: the first")
    compare.add_argument("--fail-under", type=_positive_float("--fail-under"), metavar="PCT",
                         help="exit 1 when a case is below PCT%% of the baseline outside the noise band, or failed where the baseline ran")  # fmt: skip
    compare.add_argument("--by", default="file", choices=("file", "variant"),
                         help="a result set per file (default) or per model-bench variant")  # fmt: skip
    compare.add_argument("--json", nargs="?", const="-", metavar="FILE", help="write the comparison as JSON (stdout if no FILE)")
    compare.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    compare.set_defaults(func=cmd_compare)

    report = verbs.add_parser("report", help="one self-contained HTML file: device, stack, micro and model results, comparisons")
    report.add_argument("files", nargs="+", metavar="RESULTS.jsonl")
    report.add_argument("-o", "--output", default=DEFAULT_REPORT, metavar="FILE", help=f"HTML file to write (default {DEFAULT_REPORT})")
    report.add_argument("--baseline", metavar="SET", help="baseline of the comparison between files; default: the first")
    report.set_defaults(func=cmd_report)
