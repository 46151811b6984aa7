"""Exit codes and the one error type that reaches the user as a single line."""

import enum


class ExitCode(enum.IntEnum):
    OK = 0  # nothing failed
    FINDINGS = 1  # a `fail` finding, a regression past --fail-under, or a failed case
    USAGE = 2  # bad flags, bad input file, unknown name: one stderr line, no traceback
    CANNOT_RUN = 3  # the request is valid but this machine cannot run it (no such device)
    INTERNAL = 4  # a bug in FADE


class FadeUsageError(Exception):
    """Bad input from the user. The CLI prints `fade: error: <message>` and exits 2."""
