"""The `fade` command: each verb parses its flags, calls one library function, renders, returns an exit code.

One module per verb (doctor, snapshot, bench, compare, report, ops, tune, watch), each with `add_verbs`;
shared flags and parsers live in fade.cli.args. Exit codes are fade.errors.ExitCode. Usage errors and bad
input files are one stderr line, never a traceback (set FADE_DEBUG=1 to see one for internal errors).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from fade import __version__
from fade.errors import ExitCode, FadeUsageError


# A write the user's disk refused (full, over quota, read-only, too big): one line and exit 2, not a bug.
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse prints usage + message; we want one line
        raise FadeUsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from fade.cli import bench, compare, doctor, ops, report, snapshot, tune, watch

    parser = _Parser(prog="fade", description="Find and close the gap between your GPU's peak and what PyTorch gets.")
    parser.add_argument("--version", action="version", version=f"fade {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb in (doctor, snapshot, bench, compare, report, tune, watch, ops):
        verb.add_verbs(verbs)
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
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS:
            return _internal(exc)
        where = f" {exc.filename}" if exc.filename else ""
        print(f"fade: error: cannot write{where}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception as exc:  # noqa: BLE001 - last resort: one line, unless debugging
        return _internal(exc)


def _internal(exc: BaseException) -> int:
    if os.environ.get("FADE_DEBUG"):
        raise exc
    print(f"fade: internal error: {type(exc).__name__}: {exc} (FADE_DEBUG=1 shows the traceback)", file=sys.stderr)
    return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
