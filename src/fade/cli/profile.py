"""`fade profile`: where a step's time goes on the device, and the fix to try, in one screen.

    fade profile MODEL|module:function [--mode train|infer] [--variants V[,V...]] [--batch N] [--size N]
                 [--device D] [--wait N] [--warmup N] [--steps N] [-o DIR] [--json [FILE]]
    fade profile [--wait N] [--warmup N] [--steps N] [--dtype T] [-o DIR] -- python train.py ARGS
    fade profile compare A B [--json [FILE]]        (A, B: summary JSON files, or the DIRs that hold one)

Writes DIR/<name>.trace.json.gz (Chrome/Perfetto) and DIR/<name>.summary.json (versioned), and prints the
summary. The library does the work: fade.measure.profile (profile_workload, profile_script,
summarize_capture), fade.analyze.profile (compare_profiles); fade.report.profile renders.
"""

from __future__ import annotations

import os
import sys

from fade.cli.args import add_device_flag, add_json_flag, check_writable, positive_int, split_list, write_json
from fade.errors import ExitCode, FadeUsageError

DEFAULT_DIR = "fade-profile"
SUMMARY_SUFFIX = ".summary.json"
TRACE_SUFFIX = ".trace.json.gz"
SCRIPT_EXAMPLE = "fade profile -- python train.py ARGS"


def add_verbs(verbs) -> None:
    """Registered by fade.cli.build_parser."""
    profile = verbs.add_parser(
        "profile", help="profile a step: device time by kernel class, idle by cause, verdict with the fix to try",
        description="Profile a zoo model or module:function (the model bench's workload and step), a script "
                    f"({SCRIPT_EXAMPLE}), or compare two profiles (fade profile compare A B).")
    profile.add_argument("target", nargs="*", metavar="MODEL | compare A B | -- python SCRIPT ARGS")
    profile.add_argument("--mode", choices=("train", "infer"), default="train", help="training or inference step")
    profile.add_argument("--variants", default="default", metavar="V[,V...]",
                         help="variants as `fade bench models` names them: default, amp-bf16+channels-last, "
                              "compile=reduce-overhead, ... (one profile each)")
    profile.add_argument("--batch", type=positive_int("--batch"), default=32, metavar="N", help="samples per step")
    profile.add_argument("--size", type=positive_int("--size"), metavar="N",
                         help="image side in pixels or sequence length in tokens (default: the zoo's)")
    add_device_flag(profile)
    profile.add_argument("--wait", type=int, default=None, metavar="N",
                         help="unprofiled steps first (compile, first calls); default 2 for a model, 1 for a script")
    profile.add_argument("--warmup", type=int, default=None, metavar="N",
                         help="profiled but discarded steps; default 2 for a model, 1 for a script")
    profile.add_argument("--steps", "--active", dest="active", type=positive_int("--steps"), default=3, metavar="N",
                         help="steps recorded (default 3)")
    profile.add_argument("--dtype", help="script: the dtype its matmuls run in (bf16, fp16, tf32, fp32), for MFU")
    profile.add_argument("--no-overhead", action="store_true",
                         help="skip timing the step without the profiler (TFLOP/s and MFU then use the profiled "
                              "window, which includes the profiler's cost)")
    profile.add_argument("--quick", action="store_true",
                         help="model: the bench's --quick timing of the unprofiled step (short budget, fewer "
                              "checked steps); a smoke run, not a figure to compare with `fade bench models`")
    profile.add_argument("-o", "--output", default=DEFAULT_DIR, metavar="DIR",
                         help=f"directory for traces and summaries (default {DEFAULT_DIR}; created)")
    add_json_flag(profile, "the summary (a list with several variants; the comparison for compare)")
    profile.set_defaults(func=cmd_profile)


def cmd_profile(args) -> int:
    target = list(args.target)
    if not target:
        raise FadeUsageError(f"fade profile: name a model (fade profile resnet50), a script ({SCRIPT_EXAMPLE}) "
                             "or compare A B")
    if target[0] == "compare":
        return _compare(target[1:], args)
    if _is_script(target):
        return _script(target, args)
    if len(target) != 1:
        raise FadeUsageError(f"fade profile: one model at a time, got {' '.join(target)!r}; a script goes after --: "
                             f"{SCRIPT_EXAMPLE}")
    return _model(target[0], args)


def _is_script(target: list) -> bool:
    from fade.hostwork.process import is_python

    first = target[0]
    return first == "-m" or first.endswith(".py") or is_python(first)


def _prepare_dir(directory: str, names: list) -> list:
    """Create DIR and check every output in it can be written, before any work: the paths of `names`."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise FadeUsageError(f"-o {directory}: cannot create the directory ({error.strerror or error})") from None
    paths = [os.path.join(directory, name) for name in names]
    for path in paths:
        check_writable(path)
    return paths


def _schedule(args, default: int) -> tuple:
    wait = default if args.wait is None else args.wait
    warmup = default if args.warmup is None else args.warmup
    if wait < 0 or warmup < 0:
        raise FadeUsageError(f"--wait {wait} --warmup {warmup}: need whole numbers >= 0")
    return wait, warmup


def _console():
    from fade.report.console import make_console

    return make_console(stderr=True)


def _model(model: str, args) -> int:
    from fade.measure.profile import profile_workload, summarize_capture
    from fade.measure.zoo import ZOO
    from fade.measure.zoo.workload import is_user_spec
    from fade.report.profile import render_profile

    if not is_user_spec(model) and model not in ZOO:
        import difflib

        close = difflib.get_close_matches(model, list(ZOO), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; the zoo has {', '.join(ZOO)}, or pass module:function"
        raise FadeUsageError(f"fade profile: unknown model {model!r}{hint}")
    variants = split_list(args.variants) or ["default"]
    from fade.measure.suites.models.variants import parse_variant

    for variant in variants:
        parse_variant(variant)  # a bad name is one usage line before anything is built
    wait, warmup = _schedule(args, 2)
    device = args.device or _default_device()
    stems = [_stem(model, args.mode, variant) for variant in variants]
    outputs = _prepare_dir(args.output, [name for stem in stems for name in (stem + TRACE_SUFFIX, stem + SUMMARY_SUFFIX)])
    if args.json not in (None, "-"):
        check_writable(args.json)
    console = _console()
    summaries = []
    for index, variant in enumerate(variants):
        trace_path, summary_path = outputs[2 * index], outputs[2 * index + 1]
        result = profile_workload(model, mode=args.mode, variant=variant, batch=args.batch, size=args.size,
                                  device=device, wait=wait, warmup=warmup, active=args.active, trace_path=trace_path,
                                  measure_overhead=not args.no_overhead, quick=args.quick,
                                  on_progress=lambda line: console.print(f"[fade.dim]{line}[/]"))
        summary = summarize_capture(result["capture"], lines=result["lines"], peak=result["peak"],
                                    opencl=result.get("opencl"), context={
            "kind": "model", "device": device, "workload": result["workload"], "variant": result["variant"]})
        write_json(summary, summary_path)
        console.rule(f"{model} {args.mode} {variant} batch {args.batch} on {device}")
        console.print(render_profile(summary))
        console.print(f"[fade.dim]trace {trace_path}; summary {summary_path}[/]")
        summaries.append(summary)
    if args.json:
        write_json(summaries[0] if len(summaries) == 1 else summaries, args.json)
    return ExitCode.OK


def _script(command: list, args) -> int:
    from fade.hostwork.process import parse_command
    from fade.measure.profile import profile_script
    from fade.report.profile import render_profile

    kind, target, _ = parse_command(command)  # a missing script is a usage error before anything runs
    wait, warmup = _schedule(args, 1)
    stem = os.path.splitext(os.path.basename(target))[0] if kind == "path" else target.replace(".", "_")
    trace_path, summary_path = _prepare_dir(args.output, [stem + TRACE_SUFFIX, stem + SUMMARY_SUFFIX])
    if args.json not in (None, "-"):
        check_writable(args.json)
    device = args.device or _default_device()
    profiler, exit_code, exit_text = profile_script(command, device=device, wait=wait, warmup=warmup,
                                                    active=args.active, trace_path=trace_path, dtype=args.dtype)
    sys.stderr.write(exit_text)  # the script's traceback or sys.exit message, as Python would print it
    if profiler.capture is None:
        print(f"fade: error: {profiler.problem}" + (f" (the script exited {exit_code})" if exit_code else ""),
              file=sys.stderr)
        return ExitCode.USAGE
    summary = profiler.summary
    summary["context"]["exit_code"] = exit_code
    write_json(summary, summary_path)
    console = _console()
    console.rule(f"{' '.join(command)} on {device}")
    console.print(render_profile(summary))
    console.print(f"[fade.dim]trace {trace_path}; summary {summary_path}[/]")
    if args.json:
        write_json(summary, args.json)
    return exit_code


def _compare(paths: list, args) -> int:
    from fade.analyze.profile import compare_profiles
    from fade.report.profile import render_comparison

    if len(paths) != 2:
        raise FadeUsageError("fade profile compare: give two summaries, before and after: "
                             "fade profile compare A.summary.json B.summary.json (or two -o DIRs)")
    before, after = (read_summary(path) for path in paths)
    comparison = compare_profiles(before, after)
    comparison["files"] = {"before": paths[0], "after": paths[1]}
    if args.json not in (None, "-"):
        check_writable(args.json)
    _console().print(render_comparison(comparison))
    if args.json:
        write_json(comparison, args.json)
    return ExitCode.OK


def read_summary(path: str) -> dict:
    """A profile summary JSON, or the only one in directory `path`; FadeUsageError (one line) otherwise."""
    from fade.analyze.profile_file import read_summary as read_checked_summary

    return read_checked_summary(path)


def _stem(model: str, mode: str, variant: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{model}-{mode}-{variant}")
    return safe


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
