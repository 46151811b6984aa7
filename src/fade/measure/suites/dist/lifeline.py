"""Ties every process of a `fade bench dist` run to the one that started it, so that none outlives its parent
and only a process whose parent chain is alive appends a record.

The chain FADE starts is `fade bench dist` (the launcher) -> torchrun -> one process per rank. torchrun
starts each rank in a session of its own, so a signal to a process group cannot reach them all; the kernel's
parent-death signal does (Linux prctl(PR_SET_PDEATHSIG), set through ctypes): torchrun gets SIGKILL when the
launcher dies (set between fork and exec, `parent_death_preexec`), each rank gets SIGKILL when torchrun
dies (set at the rank's start, `Lifeline.bind`). Both close the race of a parent that died before the
signal was set by checking the parent afterwards. A SIGKILL of either parent therefore ends everything
below it at once: no rank runs on, and none records the collectives its dead peers broke as the cases'
errors.

Before rank 0 hands a record to the results file it asks `Lifeline.alive()`: its parent is still the one
it started under and, when FADE launched it, that parent's parent is still the launcher. Where the
parent-death signal is not available (not Linux), this check alone keeps an orphaned rank from writing.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Optional

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHAN_EXIT = 70  # a rank whose parent chain is gone exits with this, writing nothing (rank.orphan_exit)
LAUNCHER_PID = "launcher_pid"  # the request's key: the pid of the `fade bench dist` that started torchrun

_PRCTL: list = []  # [the libc prctl function, or None], looked up once, before any fork


def _prctl():
    if not _PRCTL:
        function = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                function = ctypes.CDLL(None, use_errno=True).prctl
                function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
                function.restype = ctypes.c_int
            except (OSError, AttributeError):
                function = None
        _PRCTL.append(function)
    return _PRCTL[0]


def parent_death_preexec(parent_pid: Optional[int] = None) -> Optional[Callable[[], None]]:
    """A subprocess.Popen preexec_fn that makes the child get SIGKILL when this process dies, or None where
    prctl is not available. The libc function is looked up here, in the parent: the child, between fork and
    exec, only calls it (no import, no allocation to deadlock on)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent_pid = os.getpid() if parent_pid is None else parent_pid
    signal_number = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died between fork and prctl: nobody is left to signal us
            raise ProcessLookupError("the parent died before its child could tie itself to it")  # the child exits

    return preexec


def parent_of(pid: int, proc: str = "/proc") -> Optional[int]:
    """The parent pid of `pid` from /proc/PID/stat, or None when it cannot be read (gone, not Linux)."""
    try:
        with open(f"{proc}/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])  # fields after "(comm)": state, ppid, ...
    except (OSError, IndexError, ValueError):
        return None


class Lifeline:
    """This process's tie to its parent (and, under FADE's launcher, to the launcher above it)."""

    def __init__(self, launcher_pid: Optional[int] = None, *, getppid: Callable[[], int] = os.getppid,
                 proc: str = "/proc"):  # fmt: skip
        self.getppid = getppid
        self.proc = proc
        self.launcher_pid = launcher_pid
        self.parent = getppid()

    def bind(self) -> bool:
        """Ask for SIGKILL when the parent dies (under FADE's launcher only: a user's launcher may start ranks
        from a thread whose end would fire it), then check the chain; False when it is already broken."""
        if self.launcher_pid is not None:
            prctl = _prctl()
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        return self.alive()

    def alive(self) -> bool:
        """The parent is the one this process started under, and its parent is the launcher (when known).
        A chain that cannot be read (no /proc) counts as alive."""
        if self.getppid() != self.parent:
            return False
        if self.launcher_pid is None:
            return True
        grandparent = parent_of(self.parent, self.proc)
        return grandparent is None or grandparent == self.launcher_pid

    def describe(self) -> str:
        above = f" under the launcher (pid {self.launcher_pid})" if self.launcher_pid is not None else ""
        return f"the parent (pid {self.parent}){above} is gone"


__all__ = ["Lifeline", "parent_death_preexec", "parent_of", "ORPHAN_EXIT", "LAUNCHER_PID"]
