"""Argument helpers every verb shares: value parsers with one-line errors, the flags common to the bench
suites, output files checked before minutes of work, and JSON written to a file or stdout."""

from __future__ import annotations

import json
import os
import sys
import tempfile

from fade.errors import ExitCode, FadeUsageError


def positive_int(flag: str):
    """An argparse `type` for a positive integer; a bad value is one usage line naming `flag`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise FadeUsageError(f"{flag} {text!r}: not an integer") from None
        if value <= 0:
            raise FadeUsageError(f"{flag} {text}: must be a positive integer")
        return value

    return parse


def positive_float(flag: str, *, not_a_number: str = "not a number", too_small: str = "must be > 0"):
    """An argparse `type` for a number > 0; the two messages say what the number is (`--budget`: minutes)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise FadeUsageError(f"{flag} {text!r}: {not_a_number}") from None
        if not value > 0:  # also rejects nan
            raise FadeUsageError(f"{flag} {text}: {too_small}")
        return value

    return parse


def split_list(text: str | None) -> list:
    """`a, b,,c` -> ["a", "b", "c"]: a comma-separated flag value (models, variants, dtypes)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def add_device_flag(parser, help: str = "torch device: cuda:N, xpu, mps, cpu, ocl:N (fade.ocl) (default: cuda:0 if "
                                        "available, else cpu)", metavar=None) -> None:
    parser.add_argument("--device", help=help, metavar=metavar)


def add_run_flags(parser, *, default_output: str, device_help: str | None = None) -> None:
    """The flags of every suite run: --device (`device_help` replaces its help), -o/--output (JSONL, appended),
    --resume, --timeout."""
    if device_help:
        add_device_flag(parser, help=device_help)
    else:
        add_device_flag(parser)
    parser.add_argument("-o", "--output", default=default_output, metavar="FILE", help="JSONL results file (appended)")
    parser.add_argument("--resume", action="store_true", help="skip cases already measured ok in FILE")
    parser.add_argument("--timeout", type=positive_float("--timeout"), metavar="S", help="per-case timeout in seconds")


def add_json_flag(parser, what: str, *, dest: str | None = None) -> None:
    """`--json [FILE]`: write `what` as JSON to FILE, or to stdout without one."""
    options = {"dest": dest} if dest else {}
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE", help=f"write {what} as JSON (stdout if no FILE)",
                        **options)


def check_writable(path, flag: str | None = None) -> None:
    """FadeUsageError unless `path` can be written: checked before minutes of work, not after.

    Every verb calls it for each output it will write (a JSONL file, --json FILE, -o FILE, --markdown FILE)
    before anything runs; None and "-" (stdout) pass. A missing parent directory is fine when it can be
    created (the writers create it). The check creates and removes a temp file, so a read-only mount or a
    root-owned directory is caught even where os.access would say yes.
    """
    if path in (None, "-"):
        return
    name = f"{flag} {path}" if flag else str(path)
    path = os.fspath(path)
    if os.path.isdir(path):
        raise FadeUsageError(f"cannot write {name}: it is a directory; give a file name")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise FadeUsageError(f"cannot write {name}: permission denied")
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(directory):
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        raise FadeUsageError(f"cannot write {name}: {directory} is not a directory")
    try:
        descriptor, probe = tempfile.mkstemp(dir=directory, prefix=".fade-write-check.")
    except OSError as error:
        raise FadeUsageError(f"cannot write {name}: {error.strerror or error} ({directory})") from None
    os.close(descriptor)
    os.unlink(probe)


def check_outputs(*outputs) -> None:
    """check_writable for each (flag, path) pair; the common first line of a verb that writes files."""
    for flag, path in outputs:
        check_writable(path, flag)


def report_run_problems(summary) -> int:
    """After a suite run: each unreadable line `--resume` skipped and a write that failed (full disk), one
    stderr line each. Returns ExitCode.USAGE when the output stopped taking records, else 0."""
    report_problems(getattr(summary, "problems", None) or [])
    error = getattr(summary, "write_error", None)
    if error:
        print(f"fade: error: {error}", file=sys.stderr)
        return ExitCode.USAGE
    return ExitCode.OK


def write_text(path: str, text: str) -> None:
    from fade.files import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as error:
        raise FadeUsageError(f"cannot write {path}: {error.strerror or error}") from None


def write_json(data, path: str | None) -> None:
    """Indented JSON to `path`, or to stdout when `path` is None or "-"."""
    text = json.dumps(data, indent=2, default=str)
    if path in (None, "-"):
        print(text)
    else:
        write_text(path, text + "\n")


MAX_PROBLEM_LINES_PER_FILE = 10  # enough to see the pattern; a file that is not JSONL at all would print every line


def report_problems(problems) -> None:
    """One `fade: error: file:LINE: reason` line on stderr per unreadable line of an input file, at most
    MAX_PROBLEM_LINES_PER_FILE per file, then one line counting the rest."""
    import re

    shown: dict = {}
    for problem in problems:
        match = re.match(r"(.*?):(\d+): ", str(problem))
        source = match.group(1) if match else None
        shown[source] = shown.get(source, 0) + 1
        if source is None or shown[source] <= MAX_PROBLEM_LINES_PER_FILE:
            print(f"fade: error: {problem}", file=sys.stderr)
    for source, count in shown.items():
        if source is not None and count > MAX_PROBLEM_LINES_PER_FILE:
            print(f"fade: error: {source}: {count - MAX_PROBLEM_LINES_PER_FILE} more unreadable lines "
                  f"({count} in all; is it a FADE results file?)", file=sys.stderr)
