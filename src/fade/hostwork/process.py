"""Guards that outlive a `with` block: one over the whole process (summary at exit), and `fade watch`'s runner,
which runs an unmodified script in this interpreter under a guard.

Why in this interpreter (runpy) and not a child process: the guard is a dispatch mode on the script's own
thread, so it must live in the script's interpreter; running it here keeps stdout, stderr and stdin the
script's own, keeps `if __name__ == "__main__":` true, and lets a `finally` produce the summary whether the
script returns, calls sys.exit() or raises. Not covered: os._exit() and fatal signals end the process
before any summary.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from typing import Callable, Optional

from fade.errors import FadeUsageError
from fade.hostwork.report import GuardReport
from fade.hostwork.session import DEFAULT_SAMPLE_EVERY, Guard

_process_guard: Guard | None = None


def enable_process_guard(mode: str = "warn", device=None, *, sample_every: int = DEFAULT_SAMPLE_EVERY,
                         json_path: str | None = None,
                         at_exit: Optional[Callable[[GuardReport], None]] = None) -> Guard:
    """Guard the calling thread (normally the main one) until the interpreter exits, then hand the report to
    `at_exit` (fade.api passes the summary table's renderer) and write the JSON report to `json_path` if
    given. A second call returns the same guard.

    Call it before the training loop; it does not start the GPU runtime, so it is safe next to
    `apply_fade_patches()`, which must run before that.
    """
    global _process_guard
    if _process_guard is not None:
        return _process_guard
    process_guard = Guard(mode, device, sample_every=sample_every)
    process_guard.__enter__()
    atexit.register(_summarize_at_exit, process_guard, json_path, at_exit)
    _process_guard = process_guard
    return process_guard


def _summarize_at_exit(process_guard: Guard, json_path: str | None, at_exit) -> None:
    report = process_guard.report
    if at_exit is not None:
        at_exit(report)
    if json_path:
        report.write_json(json_path)


@dataclass
class WatchResult:
    exit_code: int  # what the script's process would have exited with
    report: GuardReport
    command: list[str]
    # what Python would have written to stderr as the script ended: its traceback (without the runner's
    # frames) or the message of sys.exit("message"); the caller writes it before the summary
    exit_text: str = ""


def is_python(word: str) -> bool:
    name = os.path.basename(word).lower()
    if name.endswith(".exe"):
        name = name[:-4]
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[len("python"):])


def parse_command(command: list[str]) -> tuple[str, str, list[str]]:
    """("path", script, argv) or ("module", name, argv) from `python train.py ARGS` / `python -m pkg ARGS`.
    The leading `python` is optional; the script always runs in this interpreter."""
    words = list(command)
    if words and words[0] == "--":
        words = words[1:]
    if words and is_python(words[0]):
        words = words[1:]
    if not words:
        raise FadeUsageError("nothing to run: put the command after --, e.g. fade watch -- python train.py ARGS")
    if words[0] == "-m":
        if len(words) < 2:
            raise FadeUsageError("-m needs a module name: fade watch -- python -m package.module ARGS")
        return "module", words[1], words[1:]
    if words[0].startswith("-"):
        raise FadeUsageError(f"python option {words[0]} is not supported: fade watch runs the script in its own "
                             "interpreter and understands only `python SCRIPT ARGS` and `python -m MODULE ARGS`")
    script = words[0]
    if not os.path.isfile(script):
        if not script.endswith(".py") and os.sep not in script:
            raise FadeUsageError(f"fade watch runs Python scripts: expected `python SCRIPT ARGS` after --, got "
                                 f"{script!r}")
        raise FadeUsageError(f"script not found: {script}")
    return "path", script, words


def _exit_status(code) -> tuple[int, str]:
    """What the interpreter would exit with for sys.exit(code), and what it would write to stderr."""
    if code is None:
        return 0, ""
    if isinstance(code, int):  # bool included: sys.exit(True) exits 1
        return int(code), ""
    return 1, f"{code}\n"


def _script_traceback(exc: BaseException) -> str:
    """The traceback Python would print, without the runner's own frames on top."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_globals.get("__name__", "").partition(".")[0]
                              in ("fade", "runpy", "contextlib")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def run_watched(command: list[str], *, mode: str = "warn", device=None,
                sample_every: int = DEFAULT_SAMPLE_EVERY, quiet: bool = False) -> WatchResult:
    """Run `python SCRIPT ARGS` (or `python -m MODULE ARGS`) here under a guard; never raises for the
    script's own errors: they become the exit code, and the text Python would print for them `exit_text`."""
    watched = Guard(mode, device, sample_every=sample_every, quiet=quiet)
    exit_code, exit_text = run_script(command, watched)
    return WatchResult(exit_code, watched.report, list(command), exit_text)


def run_script(command: list[str], context) -> tuple[int, str]:
    """Run `python SCRIPT ARGS` (or `python -m MODULE ARGS`) in this interpreter inside the context manager
    `context` (a guard for `fade watch`, a step profiler for `fade profile --`), with the script's argv and
    sys.path as Python would set them. Returns (exit code, the text Python would print as the script ended);
    never raises for the script's own errors."""
    kind, target, argv = parse_command(command)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = list(argv)
    if kind == "path":
        sys.path[0:1] = [os.path.dirname(os.path.abspath(target))]  # as `python SCRIPT` sets it
    else:
        sys.path[0:1] = [os.getcwd()]  # as `python -m` sets it
    exit_code, exit_text = 0, ""
    try:
        with context:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        exit_code, exit_text = _exit_status(exc.code)
    except KeyboardInterrupt as exc:
        exit_code, exit_text = 130, _script_traceback(exc)  # 130: as a shell reports a SIGINT death
    except BaseException as exc:  # noqa: BLE001 - the script's own error: shown as Python would, then exit 1
        exit_code, exit_text = 1, _script_traceback(exc)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return exit_code, exit_text
