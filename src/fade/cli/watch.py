"""`fade watch`: run an unmodified Python script under fade.guard and summarize what it did on the host.

    fade watch [--strict | --sampled N] [--device TYPE] [--json FILE] [--quiet] -- python train.py ARGS

The script's own output and exit code pass through; the summary table goes to stderr after it ends, also
when it raises or calls sys.exit().
"""

from __future__ import annotations

import argparse
import sys

from fade.cli.args import check_writable, write_json
from fade.errors import FadeUsageError

WATCH_EXAMPLE = "fade watch -- python train.py ARGS"


def add_verbs(verbs) -> None:
    """Registered by fade.cli.build_parser."""
    watch = verbs.add_parser(
        "watch", help="run a Python script under fade.guard: CPU compute, copies and syncs per line of your code",
        description="Run `python SCRIPT ARGS` in this interpreter under fade.guard. The script's output and "
                    "exit code pass through; a summary table prints to stderr at the end.")
    mode = watch.add_mutually_exclusive_group()
    mode.add_argument("--strict", action="store_true", help="stop the script at the first offence")
    mode.add_argument("--sampled", metavar="N", type=int,
                      help="inspect one training step in N (steps end at optimizer.step()); low overhead")
    watch.add_argument("--device", metavar="TYPE",
                       help="the accelerator's device type: cuda (NVIDIA and ROCm), xpu, mps, ...; default: "
                            "torch's current accelerator. 'ocl' is fade.ocl's OpenCL device (registered before the "
                            "script runs); 'standin' is FADE's host-backed test device")
    watch.add_argument("--json", metavar="FILE", help="also write the report as JSON")  # a file only: stdout is the script's
    watch.add_argument("--quiet", action="store_true", help="no warning per new offence, only the summary")
    watch.add_argument("command", nargs=argparse.REMAINDER, help=f"-- python SCRIPT ARGS (e.g. {WATCH_EXAMPLE})")
    watch.set_defaults(func=cmd_watch)


def cmd_watch(args) -> int:
    from fade.hostwork.process import parse_command, run_watched
    from fade.report.guard import print_summary

    command = args.command
    if not command or command[0] != "--":
        given = f" (got {' '.join(command)!r})" if command else ""
        raise FadeUsageError(f"fade watch: put the command after --, e.g. {WATCH_EXAMPLE}{given}")
    if args.sampled is not None and args.sampled < 1:
        raise FadeUsageError(f"fade watch: --sampled needs a positive step count, got {args.sampled}")
    check_writable(args.json, "--json")  # a file only: stdout is the script's
    parse_command(command[1:])  # a missing script is a usage error before anything runs
    if args.device == "standin":
        from fade.hostwork import standin

        standin.register()
    if args.device is not None and args.device.split(":", 1)[0] == "ocl":
        from fade.measure.ocldevice import resolve_ocl

        resolve_ocl(args.device)  # names PrivateUse1 "ocl" (fade.ocl.register) before the script runs
    mode = "strict" if args.strict else "sampled" if args.sampled else "warn"
    options = {"sample_every": args.sampled} if args.sampled else {}
    if args.quiet:
        options["quiet"] = True
    result = run_watched(command[1:], mode=mode, device=args.device, **options)
    sys.stderr.write(result.exit_text)  # the script's traceback or sys.exit message, as Python would print it
    print_summary(result.report)
    if args.json:
        data = result.report.to_dict()
        data["command"] = result.command
        data["exit_code"] = result.exit_code
        try:
            write_json(data, args.json)
        except FadeUsageError as error:  # a full disk at the end: say so, keep the script's own exit code
            print(f"fade: error: {error}", file=sys.stderr)
    return result.exit_code
