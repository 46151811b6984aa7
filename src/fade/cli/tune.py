"""`fade tune`: a thin shell over fade.api.tune (search and write a tuning file) and read_tuning
(`--show`: print a tuning file's env lines, snippet and results), rendered by fade.report.tune. Exit codes are
fade.errors.ExitCode (EPILOG): 0 when the final check proved a configuration faster, 1 when the tuning file
recommends nothing (its knobs are the baseline's), 2 for bad input (an unknown model, a budget <= 0, an -o that
cannot be written, a corrupt tuning file or one from another device; one stderr line each), 3 when this machine
cannot run the request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from fade.cli.args import add_device_flag, check_writable, positive_float, positive_int
from fade.errors import ExitCode, FadeUsageError
from fade.report.tune import render_tuning

DEFAULT_PROFILE = "fade-tuning.json"
EPILOG = """exit codes:
  0  the final side-by-side check proved the chosen configuration faster than PyTorch's defaults
  1  the profile recommends nothing: its knobs are the baseline's (verdict baseline-kept: no candidate beat
     the defaults; not-proven or reverted: the final check did not confirm the search's choice; noisy-host:
     the baseline moved between search and final check, or other processes kept the cores busy)
  2  bad input (unknown model, budget <= 0, an -o that cannot be written, a corrupt profile): one line
  3  this machine cannot run the request (no such device)
The profile is written before the resume journal is cleared: a failed write loses no search.
"""


def cmd_tune(args) -> int:
    if args.batch is None:
        args.batch = 1 if args.generate else 64
    if args.show:
        return _show(args)
    if args.pretune:
        return _pretune(args)
    if not args.model:
        raise FadeUsageError("fade tune: give MODEL (a zoo name or module:function), or --show PROFILE")
    mode = args.mode
    if args.generate:  # a causal LM's greedy decode: MODEL is an LLM config, batch 1 unless given
        if args.mode != "train":
            raise FadeUsageError("fade tune --generate: no --mode (the decode loop is the workload)")
        mode = "generate"
    elif args.latency_ms is not None:
        raise FadeUsageError("fade tune --latency-ms: only with --generate")
    check_output(args.output)  # before minutes of search, not after
    from fade.api import tune

    def progress(message: str) -> None:
        print(f"fade tune: {message}", file=sys.stderr)

    try:
        result = tune(args.model, mode=mode, batch=args.batch, budget_min=args.budget, device=args.device,
                      size=args.size, exhaustive=args.exhaustive, quick=args.quick, resume=not args.fresh,
                      progress=progress, out=args.output, latency_ms=args.latency_ms)  # fmt: skip
    except RuntimeError as error:  # the worker could not start here: a valid request this machine cannot run
        print(f"fade: cannot run here: {error}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    except OSError as error:  # the tuning file could not be written after all: the journal keeps the search
        print(f"fade: cannot write {args.output}: {error.strerror or error}; the search is kept, "
              "run the same command with a writable -o to finish it", file=sys.stderr)  # fmt: skip
        return ExitCode.USAGE
    print(render_tuning(result.to_dict()))
    print(f"wrote {args.output}; apply it with fade.load_tuning({args.output!r})", file=sys.stderr)
    return ExitCode.OK if result.recommends else ExitCode.FINDINGS


def check_output(path: str) -> None:
    """FadeUsageError (one line) unless `path` names a file that can be written."""
    if path.endswith(os.sep) or os.path.isdir(path):
        raise FadeUsageError(f"-o {path}: is a directory; give a file name such as {os.path.join(path, DEFAULT_PROFILE)}")
    check_writable(path, "-o")


def _show(args) -> int:
    from fade.act.tune.device import static_fingerprint
    from fade.act.tune.tuning_file import TuningFileError, check_cache_paths, check_device, env_lines, read_tuning

    profile = read_tuning(args.show)
    check_device(profile, static_fingerprint(), path=args.show)  # TuningFileError: another device's profile, exit 2
    if args.json:
        print(json.dumps(profile, indent=2))
    elif args.env:  # lines for eval: what load_tuning would apply, and no more
        problem = check_cache_paths(profile["env"])
        if problem:
            raise TuningFileError(f"profile {args.show}: {problem}")
        print("\n".join(env_lines(profile)))
    else:
        print(render_tuning(profile))
    return ExitCode.OK


def _pretune(args) -> int:
    from fade.act.tune.pretune import run_pretune

    if not args.model:
        raise FadeUsageError("fade tune --pretune: give MODEL")
    if args.device and args.device.split(":", 1)[0] == "ocl":
        return _pretune_ocl(args)
    result = run_pretune(args.model, mode=args.mode, batch=args.batch, device=args.device, size=args.size)
    print(json.dumps(result, indent=2))
    return ExitCode.OK


def _pretune_ocl(args) -> int:
    """CLBlast's GEMM parameters for the model's step on fade.ocl, within --budget minutes (fade.act.tune.oclgemm)."""
    from fade.act.tune.oclgemm import run_ocl_pretune
    from fade.act.tune.tuner import check_request
    from fade.measure.ocldevice import check_ocl_index

    check_request(args.model, mode=args.mode, batch=args.batch, budget_min=args.budget)
    device = check_ocl_index(args.device)  # FadeUsageError: a malformed or missing ocl:N, exit 2

    def progress(message: str) -> None:
        print(f"fade tune: {message}", file=sys.stderr)

    workload = {"model": args.model, "mode": args.mode, "batch": args.batch, "size": args.size}
    try:
        result = run_ocl_pretune([workload], device=device, budget_s=60.0 * args.budget, progress=progress)
    except RuntimeError as error:  # a child could not run the step or the tuning here
        print(f"fade: cannot run here: {error}", file=sys.stderr)
        return ExitCode.CANNOT_RUN
    print(json.dumps(result, indent=2))
    for row in result["workloads"]:
        before, after = row["before"].get("median_step_s"), row["after"].get("median_step_s")
        if before and after:
            print(f"fade tune: {row['model']} step {before * 1e3:.1f} ms -> {after * 1e3:.1f} ms "
                  f"(x{before / after:.2f}); CLBlast: {result['verdict']}", file=sys.stderr)
    return ExitCode.OK


def add_verbs(verbs) -> None:
    tune = verbs.add_parser("tune", help="search the fastest sound knobs for a model on this device; write a profile",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    tune.add_argument("model", nargs="?", help="a zoo model (resnet50, ...) or module:function")
    tune.add_argument("--mode", default="train", choices=("train", "infer"))
    tune.add_argument("--batch", type=positive_int("--batch"), default=None, help="batch (default 64; 1 with --generate)")
    tune.add_argument("--latency-ms", type=positive_float("--latency-ms", not_a_number="not a number of milliseconds"),
                      default=None, help="with --generate: a per-token latency target; the batch is searched under it")
    tune.add_argument("--generate", action="store_true",
                      help="tune a causal LM's greedy decode (KV cache, compiled step, SDPA backend); MODEL is an LLM "
                           "config as `fade bench llm --config` takes it")
    tune.add_argument("--budget", type=positive_float("--budget", not_a_number="not a number of minutes",
                                                      too_small="the budget in minutes must be > 0"),
                      default=5.0, metavar="MIN", help="search time in minutes (default 5)")  # fmt: skip
    tune.add_argument("--size", type=positive_int("--size"), default=None,
                      help="image side in px or sequence length (default: the model's)")
    add_device_flag(tune, help=None)
    tune.add_argument("--exhaustive", action="store_true", help="measure every combination (verification; slow)")
    tune.add_argument("--quick", action="store_true", help="short timing (CPU smoke runs)")
    tune.add_argument("--fresh", action="store_true", help="ignore an interrupted search's journal and start over")
    tune.add_argument("-o", "--output", default=DEFAULT_PROFILE, help=f"profile to write (default {DEFAULT_PROFILE})")
    tune.add_argument("--show", metavar="PROFILE", help="print a profile (checked against this device) instead of tuning")
    tune.add_argument("--env", action="store_true", help="with --show: only the export lines, each value shell-quoted, for eval")
    tune.add_argument("--json", action="store_true", help="with --show: the profile as JSON")
    tune.add_argument("--pretune", action="store_true", help="exhaustive find/tuning of one step's shapes into the cache (ROCm; --device ocl: CLBlast's GEMM "
                      "parameters within --budget)")
    tune.set_defaults(func=cmd_tune)
