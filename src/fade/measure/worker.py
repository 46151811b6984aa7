"""The child process that runs cases for runner.IsolatedExecutor: JSON lines in on stdin, JSON lines out.

Protocol (one JSON object per line):
    parent -> worker  {"op": "init", "device": "cuda"|null, "sys_path": [...]}   once, first
                      {"op": "run", "case": {...Case...}, "ctx": {...CaseContext...}}
                      {"op": "exit"}
    worker -> parent  {"event": "ready", "session": {...Session.describe()...}}
                      {"event": "fatal", "usage": bool, "error": "one line"}   instead of ready
                      {"event": "record", "record": {...}, "restart": bool}    one per run; restart:
                          the device context broke, this worker exits, start a new one

The protocol uses a duplicate of the original stdout; fd 1 itself is pointed at stderr, so a library that
prints cannot corrupt it. The worker dies with its parent (PR_SET_PDEATHSIG on Linux, plus a watchdog
thread that polls the parent's pid), so a kill -9 of the parent leaves no orphan holding the GPU.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

PARENT_POLL_S = 1.0  # how often the watchdog checks that the parent is still alive


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    die_with_parent()

    def send(message: dict) -> None:
        from fade.results import dumps_line

        protocol.write(dumps_line(message))
        protocol.flush()

    init = json.loads(sys.stdin.readline() or "{}")
    for entry in reversed(init.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)

    from fade.errors import FadeUsageError
    from fade.measure.case import Case, CaseContext
    from fade.measure.session import execute_case, open_session

    try:
        session = open_session(init.get("device"))
    except FadeUsageError as error:
        send({"event": "fatal", "usage": True, "error": str(error)})
        return 2
    except Exception as error:
        send({"event": "fatal", "usage": False, "error": f"{type(error).__name__}: {error}".splitlines()[0]})
        return 1
    send({"event": "ready", "session": session.describe()})
    try:
        for line in sys.stdin:
            message = json.loads(line)
            if message.get("op") == "exit":
                break
            if message.get("op") == "run":
                case = Case.from_dict(message["case"])
                ctx = CaseContext(**message["ctx"])
                record = execute_case(case, ctx, session)
                send({"event": "record", "record": record, "restart": session.broken})
                if session.broken:
                    break  # the parent starts a fresh worker for the next case
    finally:
        session.close()
    return 0


def die_with_parent() -> None:
    """End this process when its parent dies (PR_SET_PDEATHSIG, and a watchdog thread where prctl is missing)."""
    parent = os.getppid()
    try:  # Linux: the kernel sends SIGKILL to this process when its parent dies
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="fade-parent-watchdog", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
