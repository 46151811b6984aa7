"""The `fade` command: each verb parses its flags, calls one library function, renders, returns an exit code.

Exit codes are fade.errors.ExitCode. Usage errors and bad input files are one stderr line, never a
traceback (set FADE_DEBUG=1 to see one for internal errors).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fade import __version__
from fade.errors import ExitCode, FadeUsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message; we want one line
        raise FadeUsageError(f"{self.prog}: {message}")


def _write_json(data, path: str | None) -> None:
    text = json.dumps(data, indent=2, default=str)
    if path in (None, "-"):
        print(text)
    else:
        try:
            with open(path, "w") as f:
                f.write(text + "\n")
        except OSError as exc:
            raise FadeUsageError(f"cannot write {path}: {exc.strerror}") from None


def cmd_snapshot(args) -> int:
    from fade.collect.snapshot import collect_snapshot, save_snapshot

    if args.output and args.output != "-":
        check_writable(args.output)
    snap = collect_snapshot(torch="subprocess")
    if args.output in (None, "-"):
        print(json.dumps(snap, indent=2))
    else:
        save_snapshot(snap, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return ExitCode.OK


def check_writable(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FadeUsageError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise FadeUsageError(f"cannot write {path}: permission denied")


def cmd_doctor(args) -> int:
    from fade.analyze.doctor import diagnose, exit_code
    from fade.collect.snapshot import collect_snapshot, load_snapshot
    from fade.report.console import make_console, render_doctor

    started = time.perf_counter()
    if args.json not in (None, "-"):
        check_writable(args.json)  # before minutes of work, not after
    measurements = None
    if args.snapshot:
        snapshot = load_snapshot(args.snapshot)
    elif args.no_measure:
        snapshot = collect_snapshot(torch="subprocess", probe_cache=not args.fresh)
    else:
        from fade.measure.suites.quick import run_quick_subprocess

        child = {}

        def probe_and_measure():  # one child process imports torch once for both jobs
            child.update(run_quick_subprocess(with_probe=True))
            if child.get("torch") is None:
                return None, child.get("error") or "torch is not importable in this Python"
            return child["torch"], None

        snapshot = collect_snapshot(torch=probe_and_measure)
        measurements = {k: v for k, v in child.items() if k != "torch"}
    report = diagnose(snapshot, measurements, rules_path=_rules_path(args.rules))
    report["elapsed_s"] = round(time.perf_counter() - started, 3)
    if args.json:
        _write_json(report, args.json)
    else:
        console = make_console()
        render_doctor(report, console)
        if not args.snapshot:
            console.print(f"[fade.dim]doctor took {report['elapsed_s']:.1f} s[/]")
    return exit_code(report)


def _rules_path(path: str | None):
    from fade.analyze.rules import RULES_FILE, RuleError, load_rules

    if path is None:
        return RULES_FILE
    try:
        load_rules(path)
    except RuleError as exc:
        raise FadeUsageError(f"rules file {exc}") from None
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fade", description="Find and close the gap between your GPU's peak and what PyTorch gets.")
    parser.add_argument("--version", action="version", version=f"fade {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    doctor = verbs.add_parser("doctor", help="the truth about this machine's GPUs and stack, with exact fixes")
    doctor.add_argument("--snapshot", metavar="FILE", help="analyze a saved snapshot instead of this machine")
    doctor.add_argument("--no-measure", action="store_true", help="skip the quick GEMM/copy/self-test measurements")
    doctor.add_argument("--fresh", action="store_true", help="re-probe torch even if a cached probe is still valid")
    doctor.add_argument("--json", nargs="?", const="-", metavar="FILE", help="write the report as JSON (stdout if no FILE)")
    doctor.add_argument("--rules", metavar="FILE", help="use this rules file instead of the bundled one")
    doctor.set_defaults(func=cmd_doctor)

    snapshot = verbs.add_parser("snapshot", help="write a JSON description of this machine (docs/snapshot.md)")
    snapshot.add_argument("-o", "--output", metavar="FILE", help="output file (stdout if omitted)")
    snapshot.set_defaults(func=cmd_snapshot)

    from fade.cli import bench as cli_bench, models as cli_models, ops as cli_ops, tune as cli_tune, watch as cli_guard

    cli_bench.add_verbs(verbs)
    cli_models.add_verbs(verbs)
    cli_tune.add_verbs(verbs)
    cli_guard.add_verbs(verbs)
    cli_ops.add_verbs(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return ExitCode.USAGE
        return int(args.func(args))
    except FadeUsageError as exc:
        message = str(exc)
        print(message if message.startswith("fade") else f"fade: error: {message}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        print("fade: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as exc:  # noqa: BLE001 - last resort: one line, unless debugging
        if os.environ.get("FADE_DEBUG"):
            raise
        print(f"fade: internal error: {type(exc).__name__}: {exc} (FADE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
