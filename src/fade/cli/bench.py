"""`fade bench micro` and `fade bench models`: thin shells over fade.api.bench; each renders the run's table
and returns 0, 1 when a case failed, 3 when the worker cannot start here, 130 when interrupted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fade.analyze.attention import why_not_run
from fade.cli.args import (add_device_flag, add_json_flag, add_run_flags, check_outputs, positive_float, positive_int,
                           report_run_problems, split_list, write_json)
from fade.errors import ExitCode, FadeUsageError
from fade.measure.zoo import ZOO

MICRO_OUTPUT = "results/micro.jsonl"
MODELS_OUTPUT = "results/models.jsonl"
DIST_OUTPUT = "results/dist.jsonl"
LLM_OUTPUT = "results/llm.jsonl"


def add_verbs(verbs) -> None:
    bench = verbs.add_parser("bench", help="benchmarks as %% of the device's physical limits")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE", parser_class=type(bench))
    bench.set_defaults(func=_no_suite)
    _add_micro(suites)
    _add_models(suites)
    _add_dist(suites)
    _add_llm(suites)


def _no_suite(args) -> int:
    raise FadeUsageError("fade bench: choose a suite: micro, models, dist, llm")


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
                        help=f"comma-separated zoo names ({', '.join(ZOO)}) or module:function (default: the whole "
                             "zoo)")  # fmt: skip
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
    models.add_argument("--timing-budget", type=positive_float("--timing-budget"), metavar="S",
                        help="a case whose timing segments disagree by > 10%% gets further batches of them only while "
                             "its timing has used less than S seconds (the first batch, >= 12 timed steps, always "
                             "runs; default: no bound). For steps of seconds: fade.ocl on a GPU")  # fmt: skip
    models.add_argument("--validate", action="store_true",
                        help="also time each case with a plain event-timed loop (extra.plain_loop)")  # fmt: skip
    add_run_flags(models, default_output=MODELS_OUTPUT,
                  device_help="torch device: cuda:N, xpu, mps, cpu, ocl:N (fade.ocl) (default: cuda:0 if available, "
                              "else cpu); or several, comma-separated (ocl:0,cuda:0): each runs the cases in turn "
                              "into FILE, then a table shows each as %% of the LAST one (the vendor stack)")  # fmt: skip
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
    from fade.analyze.compare import compare_variants
    from fade.report.compare import render_terminal
    from fade.results import read_records
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import ProgressBar

    check_outputs(("-o", args.output), ("--json", args.json))  # before minutes of work, not after
    console = make_console()
    try:
        result = bench("models", args.device, models=split_list(args.models) or None, batch=args.batch,
                       mode=args.mode, variants=split_list(args.variants) or None, quick=args.quick,
                       image_size=args.image_size, sequence_length=args.seq_len, validate=args.validate,
                       out=args.output, resume=args.resume, timeout_s=args.timeout, progress=ProgressBar(console),
                       timing_budget_s=args.timing_budget)
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        print(f"fade: cannot run here: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    run = result.run
    render_bench_summary(result.summary, run.to_dict(), console)
    if result.comparison is not None:  # the devices side by side, as % of the last one listed
        render_terminal(result.comparison, console)
        console.print(f"[fade.dim]the same table: fade compare {run.out} --by device --baseline "
                      f"{result.comparison.baseline}[/]", soft_wrap=True)
    elif run.records:  # this run's variants side by side, against the first variant asked for; with the file's
        # records, so that a --resume run keeps the original run's baseline (its new records alone may lack it)
        render_terminal(compare_variants(run.out, read_records(run.out).records + run.records, run.device,
                                         case_ids=run.case_ids), console)
    if args.json:
        summary = run.to_dict()
        if result.comparison is not None:
            summary["comparison"] = result.comparison.to_dict()
        write_json(summary, args.json)
    return report_run_problems(run) or result.exit_status


def _add_dist(suites) -> None:
    dist = suites.add_parser(
        "dist",
        help="collectives (algbw, busbw, latency) and DDP/FSDP2 scaling through torch.distributed",
        description="Collectives through torch.distributed (nccl/RCCL on GPUs, gloo on the CPU, xccl on XPUs) "
        "as nccl-tests reports them: algbw = bytes / time, busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n "
        "(all_gather, reduce_scatter, all_to_all), 1 (broadcast, send/recv); each result checked. --scaling "
        "trains zoo models data-parallel on 1, 2, 4, ... N processes. Starts torchrun with --nproc N, or runs "
        "as one rank under your own launcher (torchrun, srun). docs/dist.md.",
    )
    dist.add_argument("--nproc", type=positive_int("--nproc"), metavar="N",
                      help="processes to start here under torchrun (one per GPU); not under a launcher")  # fmt: skip
    dist.add_argument("--collectives", metavar="LIST",
                      help="comma-separated: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv "
                           "(default: all, unless --scaling is given)")  # fmt: skip
    dist.add_argument("--dtypes", metavar="LIST", help="comma-separated: fp32, fp16, bf16 (default fp32, as nccl-tests)")
    dist.add_argument("--sizes", metavar="LIST", help="comma-separated buffer sizes: 8, 4K, 64M, 1G (default 8 B to 1 GiB)")
    dist.add_argument("--scaling", metavar="MODELS", help="comma-separated zoo models (resnet50, gpt2-small) or module:function to "
                                                         "train data-parallel on 1, 2, 4, ... N processes")  # fmt: skip
    dist.add_argument("--strategies", metavar="LIST", help="comma-separated: ddp, fsdp2 (default ddp)")
    dist.add_argument("--batch", type=positive_int("--batch"), metavar="N", help="samples per process per step (scaling)")
    dist.add_argument("--image-size", type=positive_int("--image-size"), metavar="PX", help="image side (scaling)")
    dist.add_argument("--seq-len", type=positive_int("--seq-len"), metavar="TOKENS", help="sequence length (scaling)")
    dist.add_argument("--quick", action="store_true", help="three small sizes, 5 samples, tiny scaling inputs")
    dist.add_argument("--plot", action="store_true", help="write busbw-vs-size PNGs next to FILE")
    add_device_flag(dist, help="device type: cuda (nccl; RCCL on ROCm), cpu (gloo), xpu (xccl); default cuda if available")
    dist.add_argument("-o", "--output", default=DIST_OUTPUT, metavar="FILE", help="JSONL results file (appended, rank 0)")
    dist.add_argument("--resume", action="store_true", help="skip cases already measured ok in FILE")
    dist.add_argument("--timeout", type=positive_float("--timeout"), metavar="S",
                      help="seconds a collective waits for its peers before the run stops with a timeout record (default 60)")  # fmt: skip
    add_json_flag(dist, "the run summary")
    dist.set_defaults(func=cmd_bench_dist)


def cmd_bench_dist(args) -> int:
    from fade.api import bench
    from fade.measure.suites.dist.suite import parse_size
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import ProgressBar

    check_outputs(("-o", args.output), ("--json", args.json))
    if args.plot:
        from fade.report.plots import require_matplotlib

        require_matplotlib("--plot")
    sizes = [parse_size(text) for text in split_list(args.sizes)] or None
    selection = {"nproc": args.nproc, "collectives": split_list(args.collectives) or None, "sizes": sizes,
                 "scaling": split_list(args.scaling) or None, "strategies": split_list(args.strategies) or None,
                 "batch": args.batch, "image_size": args.image_size, "sequence_length": args.seq_len}  # fmt: skip
    console = make_console()
    try:
        result = bench("dist", args.device, quick=args.quick, dtypes=split_list(args.dtypes) or None, out=args.output,
                       resume=args.resume, timeout_s=args.timeout, progress=ProgressBar(console), dist=selection)  # fmt: skip
    except RuntimeError as exc:  # the ranks could not start on this machine: valid request, cannot run here
        print(f"fade: cannot run here: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    if result.rank != 0:  # one report per run: rank 0's
        return _leave(result.run, result.exit_status)
    for change in result.env:
        print(str(change), file=sys.stderr)
    run = result.run
    render_bench_summary(result.summary, run.to_dict(), console)
    if run.stopped and not run.write_error:  # a full disk says so in report_run_problems' one line
        print(f"fade: the run stopped early: {run.stopped}", file=sys.stderr)
    if args.plot and run.records:
        from fade.report.plots import plot_dist

        for path in plot_dist(run.records, Path(args.output).parent / f"{Path(args.output).stem}-plots"):
            print(f"fade: wrote {path}", file=sys.stderr)
    if args.json:
        write_json(result.to_dict(), args.json)
    return _leave(run, report_run_problems(run) or result.exit_status)


def _leave(run, code: int) -> int:
    """`code`, or, when this process was a rank whose group broke (a collective timed out, or rank 0 stopped at
    a full disk), exit at once: the interpreter's teardown of a group with a hung peer waits out the backend's
    timeout."""
    if (run.stopped or run.write_error) and dist_group_alive():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def dist_group_alive() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized())


def _add_llm(suites) -> None:
    from fade.measure.suites.llm.suite import DEFAULT_VARIANTS, FULL_PLAN, QUICK_PLAN
    from fade.measure.suites.llm.generation import VARIANTS

    llm = suites.add_parser(
        "llm",
        help="LLM inference: prefill TFLOP/s, decode tokens/s vs the bandwidth roofline, time to first token",
        description="Hugging Face causal LMs from a config (random weights, speed only: nothing is downloaded) or a "
        "local model folder (its own weights): "
        "prefill as TFLOP/s and %% of peak, greedy decode as tokens/s and %% of the bandwidth roofline (bytes per "
        "step = weights + each sequence's KV cache), time to first token and peak memory, per variant; each "
        "variant's greedy tokens checked against an fp32 hf-generate run of the same weights. docs/llm.md.",
    )
    llm.add_argument("--config", metavar="NAME|FILE|DIR",
                     help=f"a bundled model (llama-3.2-1b, llama-3.1-8b, qwen2.5-7b, mistral-7b, gpt2, tiny-llama), a "
                          f".toml file of one [[config]] row, a Hugging Face config.json, or a local model folder (config.json and its "
                          f"weights, loaded instead of random ones) (default {FULL_PLAN.config}; "
                          f"{QUICK_PLAN.config} with --quick)")  # fmt: skip
    llm.add_argument("--variants", metavar="LIST",
                     help=f"comma-separated: {', '.join(VARIANTS)} (default {','.join(DEFAULT_VARIANTS)})")
    llm.add_argument("--batch", metavar="LIST",
                     help=f"comma-separated decode batch sizes (default {','.join(map(str, FULL_PLAN.batches))}; "
                          f"{','.join(map(str, QUICK_PLAN.batches))} with --quick)")  # fmt: skip
    llm.add_argument("--prompt-tokens", type=positive_int("--prompt-tokens"), metavar="N",
                     help=f"prompt length before decoding (default {FULL_PLAN.prompt_tokens}; {QUICK_PLAN.prompt_tokens} with --quick)")
    llm.add_argument("--new-tokens", type=positive_int("--new-tokens"), metavar="N",
                     help=f"tokens generated per sequence, >= 2 (default {FULL_PLAN.new_tokens}; {QUICK_PLAN.new_tokens} with --quick)")
    llm.add_argument("--prefill-tokens", metavar="LIST",
                     help=f"comma-separated prefill lengths at batch 1 (default {','.join(map(str, FULL_PLAN.prefill_tokens))} "
                          f"up to the model's context; {','.join(map(str, QUICK_PLAN.prefill_tokens))} with --quick)")  # fmt: skip
    llm.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                     help=f"weights and activations (default {FULL_PLAN.dtype}; {QUICK_PLAN.dtype} with --quick)")
    llm.add_argument("--quick", action="store_true",
                     help="tiny-llama (unless --config), a 16-token prompt, 16 new tokens, batch 1 and 2, one prefill, fp32, "
                          "short timing: seconds on 2 CPU cores")  # fmt: skip
    add_run_flags(llm, default_output=LLM_OUTPUT)
    add_json_flag(llm, "the run summary")
    llm.set_defaults(func=cmd_bench_llm)


def _int_list(text, flag: str):
    """A comma-separated list of positive integers (None when the flag was not given); one usage line otherwise."""
    if text is None:
        return None
    numbers = [positive_int(flag)(part) for part in split_list(text)]
    if not numbers:
        raise FadeUsageError(f"{flag} {text!r}: give at least one positive integer")
    return numbers


def cmd_bench_llm(args) -> int:
    from fade.api import BenchResult
    from fade.measure.suites.llm.suite import run_llm
    from fade.report.console import make_console, render_bench_summary
    from fade.report.progress import ProgressBar
    from fade.results import summarize

    check_outputs(("-o", args.output), ("--json", args.json))
    console = make_console()
    try:
        run = run_llm(args.device, config=args.config, variants=split_list(args.variants) or None,
                      batches=_int_list(args.batch, "--batch"), prompt_tokens=args.prompt_tokens,
                      new_tokens=args.new_tokens, prefill_tokens=_int_list(args.prefill_tokens, "--prefill-tokens"),
                      dtype=args.dtype, quick=args.quick, out=args.output, resume=args.resume, timeout_s=args.timeout,
                      progress=ProgressBar(console))  # fmt: skip
    except RuntimeError as exc:  # the worker could not start on this device: valid request, cannot run here
        print(f"fade: cannot run here: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    result = BenchResult("llm", run, summary=summarize(run.records))
    render_bench_summary(result.summary, run.to_dict(), console)
    for record in run.records:  # the decode figures the table has no column for
        extra = record.get("extra") or {}
        roofline, tokens = extra.get("roofline") or {}, extra.get("tokens") or {}
        if record.get("status") != "ok" or not roofline:
            continue
        pct = roofline.get("pct_of_roofline")
        share = f"{pct:.0f}% of the {roofline['roofline_tokens_per_s']:.4g} tokens/s roofline" if pct is not None else "no roofline (no bandwidth peak)"
        agreement = "tokens match" if tokens.get("match") else f"tokens differ from token {tokens.get('first_mismatch')}"
        console.print(f"[fade.dim]{record['case_id']}: {share}; first token {extra.get('ttft_ms', 0):.3g} ms; {agreement}[/]",
                      soft_wrap=True, markup=True)
    for record in run.records:  # the attention truth of the prefill cases (fade.measure.attention)
        for phase, probe in ((record.get("extra") or {}).get("attention") or {}).items():
            for line in attention_lines(record["case_id"], phase, probe):
                console.print(line, soft_wrap=True, markup=False, style="fade.warn" if "MATH" in line else None)
    if args.json:
        write_json(run.to_dict(), args.json)
    return report_run_problems(run) or result.exit_status


def attention_lines(case_id: str, phase: str, probe: dict) -> list:
    """One line per backend (what ran, its kernel library, median) and the finding, for one probed shape."""
    lines = [f"{case_id}: attention {phase} ({probe.get('label')})"]
    for row in probe.get("backends") or []:
        if row.get("ran"):
            library = ", ".join(row.get("attention_libraries") or []) or ("bmm + softmax" if row.get("backend") == "math" else "")
            median = row.get("median_ms")
            ran = "MATH" if row.get("backend") == "math" else row.get("backend")
            lines.append(f"  {row['requested']:>9}: ran {ran}" + (f" [{library}]" if library else "")
                         + (f" {median:.3g} ms" if median is not None else ""))  # fmt: skip
        else:
            lines.append(f"  {row['requested']:>9}: cannot run ({why_not_run(row)})")
    finding = probe.get("finding") or {}
    if finding.get("status") == "math_fallback":
        lines.append(f"  finding: MATH fallback: {finding.get('message')}")
        lines += [f"    fix ({cause['cause']}): {cause['fix']}" for cause in finding.get("causes") or []]
    elif finding.get("status") not in (None, "ok"):
        lines.append(f"  finding: {finding.get('status')}: {finding.get('message')}")
    return lines
