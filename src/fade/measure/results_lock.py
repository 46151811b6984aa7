"""One run at a time per results file: an OS file lock (the `filelock` package: flock on Unix, LockFileEx on
Windows) on `FILE.lock` beside it, held from before a run reads `--resume`'s finished cases until its last
record is appended, so that two runs of one file never measure the same case twice.

A second run does not wait: `holding_results` raises FadeUsageError at once (exit 2, one line) naming the
holder's pid, which the holder writes into the lock file. The lock is the kernel's, tied to the holder's
open file: a run killed with SIGKILL releases it when it dies, so a stale `FILE.lock` never blocks (the file
itself stays, as filelock leaves it, and holds the last holder's pid; only a live lock counts). Within one
process the lock is re-entrant (a multi-device models run holds it around its per-device runs). An output
that is not a regular file (/dev/null) or whose directory takes no new file is not locked: there is nothing
two runs could both resume from, or no place for the lock.
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from fade.errors import FadeUsageError

LOCK_SUFFIX = ".lock"  # results.jsonl -> results.jsonl.lock, beside it
PID_BYTES = 32  # a pid and a newline; more than that is not a pid this module wrote

_HELD: dict = {}  # realpath of a lock file -> [FileLock, nesting depth], for this process


def lock_path(out) -> Path:
    path = Path(out)
    return path.with_name(path.name + LOCK_SUFFIX)


@contextmanager
def holding_results(out) -> Iterator[Optional[Path]]:
    """Hold `out`'s run lock for the block (module docstring); yields the lock file, or None when `out` is not
    lockable. FadeUsageError when another live process holds it."""
    path = lock_path(out)
    key = os.path.realpath(path)
    if key in _HELD:  # this process holds it already: nest
        _HELD[key][1] += 1
        try:
            yield path
        finally:
            _HELD[key][1] -= 1
        return
    lock = _acquire(Path(out), path)
    if lock is None:
        yield None
        return
    _HELD[key] = [lock, 1]
    try:
        yield path
    finally:
        del _HELD[key]
        lock.release()


def _acquire(out: Path, path: Path):
    """The acquired FileLock, None when `out` is not lockable, FadeUsageError when another run holds it."""
    import filelock

    try:
        if not stat.S_ISREG(os.stat(out).st_mode):
            return None  # /dev/null, a FIFO: no file to resume from
    except FileNotFoundError:
        pass  # a new file: lock it as it is made
    holder_before = _holder(path)
    lock = filelock.FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        holder = _holder(path) or holder_before  # filelock 3.x truncates the file it opens; read it before too
        who = f"pid {holder}" if holder else "pid unknown"
        raise FadeUsageError(f"another fade run ({who}) is writing {out.name}; wait for it or use another -o") from None
    except OSError:
        return None  # the directory takes no new file (the output itself was checked writable): run unlocked
    _write_pid(path)
    return lock


def _holder(path: Path) -> Optional[int]:
    try:
        with open(path, "rb") as lock_file:
            text = lock_file.read(PID_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _write_pid(path: Path) -> None:
    """Our pid into the lock file, through a descriptor of our own: flock belongs to filelock's open file, so
    closing this one keeps the lock."""
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except OSError:
        return
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode("ascii"))
    except OSError:
        pass  # the pid is for the message only; a full disk must not stop the run here
    finally:
        os.close(descriptor)


__all__ = ["holding_results", "lock_path", "LOCK_SUFFIX"]
