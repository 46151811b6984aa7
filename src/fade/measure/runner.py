"""Runs cases one by one, isolated in a worker process or in-process, appending one JSONL record per case.

Isolation: `IsolatedExecutor` keeps one worker process (fade.measure.worker) and sends it one case at a
time. A case that hangs past its timeout, a segfault, an abort or the OOM killer ends the worker; the case
is recorded as "timeout" or "crashed" with the worker's last stderr lines, and the next case starts a
fresh worker. One worker serves many cases, so torch is imported and the GPU initialized once, not per
case. `InProcessExecutor` runs cases in the caller's process: no timeout and no crash isolation.

No loss: each record is appended, flushed and fsynced as its case finishes (record.JsonlAppender); a kill -9
of this process loses only the case in flight. Ctrl-C stops after killing the worker, keeps the file, and
returns a summary with `interrupted=True`. A write that fails (a full disk: ENOSPC, EDQUOT) is cut back to
the last whole line and stops the run with `write_error` set; the CLI reports it in one line, exit 2. With `resume=True`, cases whose latest record on this device has
a status in record.RESUME_SKIPS_STATUSES ("ok", "skipped") are not run again; failed ones are retried.
One run at a time per file: run_cases holds `FILE.lock` (results_lock) from before the resume check to the
last record, and a second run of the same file stops at once with one line, exit 2.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence, Union

from fade.errors import FadeUsageError
from fade.measure.case import Case, CaseContext
from fade.measure.results_lock import holding_results
from fade.results import (
    FAILED_STATUSES,
    RESUME_SKIPS_STATUSES,
    JsonlAppender,
    OutputFull,
    latest_records,
    now_iso,
    read_records,
)

CASE_TIMEOUT_S = 120.0  # a first MIOpen/cuDNN call can compile kernels for tens of seconds; a hang is longer
STARTUP_TIMEOUT_S = 180.0  # torch import plus GPU runtime init; ROCm with a cold kernel cache is the slow one
EXIT_GRACE_S = 5.0  # time a worker gets to exit on request before it is killed
STDERR_TAIL_LINES = 40  # worker stderr lines kept in a failed case's `error_detail`
END_OF_STREAM = {"event": "end-of-stream"}  # what the stdout reader queues when the worker's stdout closes


class WorkerStartError(RuntimeError):
    """The worker process did not start on this device: a valid request this machine cannot run."""


class RunProgress(Protocol):
    """What a run tells whoever watches it, in this order: `start` once, `case_started` and `case_finished`
    per case, `finished` once (also after Ctrl-C). fade.report.progress.ProgressBar draws it; None is silent."""

    def start(self, total: int, device: str) -> None: ...

    def case_started(self, case_id: str) -> None: ...

    def case_finished(self, record: dict) -> None: ...

    def finished(self, summary: "RunSummary") -> None: ...


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


@dataclass
class RunSummary:
    """What a run did. `records` are the records written by this run, in order."""

    out: str
    run_id: str
    device: Optional[str]
    selected: int  # cases asked for
    resumed: int  # cases skipped because `resume` found them finished
    statuses: dict = field(default_factory=dict)  # status -> count, for this run's records
    failures: list = field(default_factory=list)  # {"case_id", "status", "error"} per failed case
    interrupted: bool = False
    wall_s: float = 0.0
    records: list = field(default_factory=list)
    problems: list = field(default_factory=list)  # unreadable lines found in `out` when resuming
    plots: list = field(default_factory=list)  # PNG paths, when plots were asked for
    unsupported: dict = field(default_factory=dict)  # reason -> number of cases left out for it
    write_error: Optional[str] = None  # why `out` stopped taking records (a full disk); earlier ones are whole
    stopped: Optional[str] = None  # why the run ended before its last case: the executor's `stop_reason`
    devices: list = field(default_factory=list)  # a run over several devices (combine_runs): each, in run order
    case_ids: list = field(default_factory=list)  # the cases asked for (resumed ones included), in order

    @property
    def failed(self) -> int:
        return sum(count for status, count in self.statuses.items() if status in FAILED_STATUSES)

    def to_dict(self, *, with_records: bool = False) -> dict:
        data = {
            "out": self.out,
            "run_id": self.run_id,
            "device": self.device,
            "selected": self.selected,
            "resumed": self.resumed,
            "statuses": dict(self.statuses),
            "failed": self.failed,
            "failures": list(self.failures),
            "interrupted": self.interrupted,
            "wall_s": self.wall_s,
            "problems": list(self.problems),
            "plots": [str(path) for path in self.plots],
            "unsupported": dict(self.unsupported),
            "write_error": self.write_error,
            "stopped": self.stopped,
        }
        if self.devices:
            data["devices"] = list(self.devices)
        if with_records:
            data["records"] = list(self.records)
        return data


def run_cases(
    cases: Union[Sequence[Case], Callable[[dict], Sequence[Case]]],
    *,
    executor,
    out,
    run_id: Optional[str] = None,
    quick: bool = False,
    timing: Optional[dict] = None,
    resume: bool = False,
    progress: Optional[RunProgress] = None,
    started: Optional[float] = None,
    lock: bool = True,
) -> RunSummary:
    """Every suite's run: check `out` (check_output_path), take its run lock (results_lock: FadeUsageError at
    once when another live run holds it), start `executor` if it is not yet, and run `cases` through it,
    appending one record per case to `out`. `lock=False` only for a process whose parent holds the lock
    for it (a dist run's rank 0 under FADE's launcher).

    `cases` is a list, or a plan `cases(session) -> list` asked once the worker has started and reported
    its session (Session.describe(): the device, its dtypes), since a suite's catalog depends on them. The
    executor is closed when this returns, or raises (a usage error found by the plan; WorkerStartError when
    the worker does not start). `timing` holds keyword arguments for timing.measure that every case
    receives through its CaseContext. `progress` hears of each case (RunProgress). `started` (a
    time.monotonic() reading) dates the run's wall time from the caller's set-up instead of from here.
    """
    wall_start = time.monotonic() if started is None else started
    out = check_output_path(out)
    with contextlib.ExitStack() as held:
        if lock:  # before the worker starts, so that a second run of `out` stops at once
            try:
                held.enter_context(holding_results(out))
            except FadeUsageError:
                executor.close()
                raise
        run_id = run_id or new_run_id()
        try:
            session = executor.start()
            if callable(cases):
                cases = list(cases(session))
        except BaseException:
            executor.close()
            raise
        device = session["device"]
        summary = RunSummary(out=str(out), run_id=run_id, device=device, selected=len(cases), resumed=0,
                             case_ids=[case.case_id for case in cases])  # fmt: skip
        finished = set()
        if resume:
            finished, summary.problems = finished_cases(out, device)
        todo = [case for case in cases if case.case_id not in finished]
        summary.resumed = len(cases) - len(todo)
        ctx = CaseContext(device=device, run_id=run_id, quick=quick, timing=dict(timing or {}))
        if progress is not None:
            progress.start(len(todo), device)
        try:
            with JsonlAppender(out) as appender:
                for case in todo:
                    if getattr(executor, "stop_reason", None):  # the executor cannot go on (a dist run's broken group)
                        summary.stopped = executor.stop_reason
                        break
                    if progress is not None:
                        progress.case_started(case.case_id)
                    record = executor.run(case, ctx)
                    summary.records.append(record)
                    appender.append(record)  # a Ctrl-C during the write is held until the line is on disk
                    summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
                    if record["status"] in FAILED_STATUSES:
                        summary.failures.append(
                            {"case_id": case.case_id, "status": record["status"], "error": record.get("error")}
                        )
                    if progress is not None:
                        progress.case_finished(record)
        except KeyboardInterrupt:
            summary.interrupted = True
        except OutputFull as error:  # full disk or quota: the records before it are whole; stop, say so in one line
            summary.write_error = str(error)
        finally:
            executor.close()
            summary.wall_s = time.monotonic() - wall_start
            if progress is not None:
                progress.finished(summary)  # also when a case raised past the executor: a bar never outlives its run
        return summary


def device_list(request) -> list:
    """`--device` as a list of requests: "ocl:0, cuda:0" or ["ocl:0", "cuda:0"] -> ["ocl:0", "cuda:0"]; None or
    "" -> [None] (the default device). FadeUsageError for an empty entry or a device named twice ("cuda" and
    "cuda:0" are one device; start_devices catches two names that resolve to one)."""
    if request is None or (isinstance(request, str) and not request.strip()):
        return [None]
    parts = request.split(",") if isinstance(request, str) else list(request)
    devices = [str(part).strip() for part in parts]
    if any(not device for device in devices):
        raise FadeUsageError(f"--device {','.join(devices)!r}: an empty entry; give devices as ocl:0,cuda:0")
    seen: dict = {}
    for device in devices:
        key = device if ":" in device or device in ("cpu", "mps") else f"{device}:0"
        if key in seen:
            raise FadeUsageError(f"--device {','.join(devices)!r}: {device!r} is the same device as {seen[key]!r}; "
                                 "name each device once")
        seen[key] = device
    return devices


def start_devices(executors: Sequence) -> list:
    """Start each executor's worker in turn, as its run would (the worker resolves its device), and close all but
    the first, which the run then uses: a device that is unknown or absent here (FadeUsageError) or cannot
    start (WorkerStartError) fails before any case runs on any device. Only one worker holds a device while
    cases run (a second process on the device would mark the cases contended). Returns the resolved devices;
    FadeUsageError when two requests resolve to one device."""
    resolved: list = []
    try:
        for position, executor in enumerate(executors):
            device = executor.start()["device"]
            if position:
                executor.close()
            if device in resolved:
                raise FadeUsageError(f"--device: {executor.device_request!r} is {device}, listed twice; name each device once")
            resolved.append(device)
    except BaseException:
        for executor in executors:
            executor.close()
        raise
    return resolved


def combine_runs(summaries: Sequence[RunSummary]) -> RunSummary:
    """The runs of one request on several devices, one after the other into one file, as one summary: counts
    added, records and failures in run order, `device` the devices joined with commas, `devices` each."""
    first = summaries[0]
    combined = RunSummary(out=first.out, run_id=first.run_id, device=",".join(str(run.device) for run in summaries),
                          selected=0, resumed=0, devices=[run.device for run in summaries], case_ids=list(first.case_ids))  # fmt: skip
    for run in summaries:
        combined.selected += run.selected
        combined.resumed += run.resumed
        for status, count in run.statuses.items():
            combined.statuses[status] = combined.statuses.get(status, 0) + count
        for reason, count in run.unsupported.items():
            combined.unsupported[reason] = combined.unsupported.get(reason, 0) + count
        combined.failures += run.failures
        combined.records += run.records
        combined.problems += [problem for problem in run.problems if problem not in combined.problems]
        combined.plots += run.plots
        combined.wall_s += run.wall_s
        combined.interrupted = combined.interrupted or run.interrupted
        combined.write_error = combined.write_error or run.write_error
        combined.stopped = combined.stopped or run.stopped
    return combined


def finished_cases(out, device: str) -> tuple:
    """(ids of the cases `resume` skips in `out` on `device`, unreadable lines of `out`). The latest record
    of a case decides, as in compare: a crash after an ok runs again."""
    if not (Path(out).exists() and Path(out).stat().st_size):
        return set(), []
    found = read_records(out)
    finished = {
        record["case_id"]
        for record in latest_records(found.records)
        if record.get("torch_device") == device and record.get("status") in RESUME_SKIPS_STATUSES
    }
    return finished, found.problems


def check_output_path(out) -> Path:
    """Create the parent directory and make sure `out` can be appended to; FadeUsageError if not."""
    path = Path(out)
    if path.is_dir():
        raise FadeUsageError(f"-o {out}: is a directory; give a file such as {path / 'micro.jsonl'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise FadeUsageError(f"-o {out}: cannot create directory {path.parent} ({error.strerror or error})") from None
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as error:
        raise FadeUsageError(f"-o {out}: cannot write there ({error.strerror or error})") from None
    return path


def make_executor(device: Optional[str], *, isolate: bool = True, timeout_s: Optional[float] = None,
                  default_timeout_s: float = CASE_TIMEOUT_S):
    """An IsolatedExecutor with `timeout_s` (or the suite's default) per case, or an InProcessExecutor."""
    if isolate:
        return IsolatedExecutor(device, timeout_s=timeout_s or default_timeout_s)
    return InProcessExecutor(device)


class InProcessExecutor:
    """Runs cases in this process. No timeout and no protection from crashes; cheapest to start."""

    def __init__(self, device: Optional[str]):
        self.device_request = device
        self.session = None

    def start(self) -> dict:
        if self.session is None:
            from fade.measure.session import open_session

            self.session = open_session(self.device_request)
        return self.session.describe()

    def run(self, case: Case, ctx: CaseContext) -> dict:
        from fade.measure.session import execute_case

        self.start()
        return execute_case(case, ctx, self.session)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


class IsolatedExecutor:
    """Runs each case in a worker process with a timeout; a dead worker is replaced for the next case."""

    def __init__(
        self,
        device: Optional[str],
        *,
        timeout_s: float = CASE_TIMEOUT_S,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        python: str = sys.executable,
    ):
        self.device_request = device
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.python = python
        self.session: Optional[dict] = None  # the first worker's Session.describe()
        self._process: Optional[subprocess.Popen] = None
        self._messages: "queue.Queue" = queue.Queue()
        self._stderr = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_lines_seen = 0
        self._in_flight = False

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> dict:
        """Start a worker if none is running; return the session it reported. FadeUsageError for a bad device."""
        if self._process is not None and self._process.poll() is None:
            return self.session
        self._spawn()
        message = self._next_message(self.startup_timeout_s)
        if message is None or message.get("event") != "ready":
            if message is None:
                reason = f"no answer within {self.startup_timeout_s:g} s"
            else:
                reason = message.get("error") or self._death_reason() or "it stopped without a reason"
            self._kill()
            if message is not None and message.get("event") == "fatal" and message.get("usage"):
                raise FadeUsageError(message["error"])
            raise WorkerStartError(f"the benchmark worker did not start: {reason}")
        if self.session is None:
            self.session = message["session"]
        return self.session

    def close(self) -> None:
        process = self._process
        if process is None:
            return
        if self._in_flight or process.poll() is not None:
            self._kill()
            return
        try:
            process.stdin.write(json.dumps({"op": "exit"}) + "\n")
            process.stdin.flush()
            process.wait(timeout=EXIT_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._kill()

    # -- one case ----------------------------------------------------------------------------------
    def run(self, case: Case, ctx: CaseContext) -> dict:
        started = now_iso()
        started_clock = time.monotonic()
        try:
            self.start()
        except RuntimeError as error:
            return self._failure(case, ctx, "crashed", str(error), None, started, started_clock)
        stderr_mark = self._stderr_lines_seen
        timeout_s = self.timeout_s
        self._in_flight = True
        try:
            self._send({"op": "run", "case": case.to_dict(), "ctx": ctx.to_dict()})
            message = self._next_message(timeout_s)
        except OSError:
            message = END_OF_STREAM  # the worker's stdin is closed: it died; the reason is read below
        except BaseException:
            self._kill()  # Ctrl-C or a broken pipe: the in-flight case is abandoned with its worker
            raise
        finally:
            self._in_flight = False
        if message is not None and message.get("event") == "record":
            if message.get("restart"):
                self._kill()  # the worker's device context is broken; the next case gets a new worker
            return message["record"]
        if message is None:
            self._kill()
            error = f"no result after {timeout_s:g} s (the case timeout); the worker was killed"
            return self._failure(case, ctx, "timeout", error, self._stderr_since(stderr_mark), started, started_clock)
        error = self._death_reason() or "the worker stopped without a result"
        self._kill()
        return self._failure(case, ctx, "crashed", error, self._stderr_since(stderr_mark), started, started_clock)

    # -- internals ---------------------------------------------------------------------------------
    def _spawn(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding the `fade` package
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [package_root] + [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]
        )
        self._messages = queue.Queue()
        self._process = subprocess.Popen(
            [self.python, "-X", "faulthandler", "-m", "fade.measure.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=environment,
            start_new_session=True,  # a terminal Ctrl-C reaches the runner only; it stops the worker itself
        )
        threading.Thread(target=self._read_stdout, args=(self._process, self._messages), daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(self._process,), daemon=True).start()
        self._send({"op": "init", "device": self.device_request, "sys_path": [p for p in sys.path if p]})

    def _send(self, message: dict) -> None:
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()

    def _next_message(self, timeout_s: float) -> Optional[dict]:
        """The worker's next message, END_OF_STREAM when it died, or None after `timeout_s`."""
        try:
            return self._messages.get(timeout=timeout_s)
        except queue.Empty:
            return None

    @staticmethod
    def _read_stdout(process: subprocess.Popen, messages: "queue.Queue") -> None:
        for line in process.stdout:
            try:
                messages.put(json.loads(line))
            except json.JSONDecodeError:
                continue  # not a protocol line; the worker's fd 1 is stderr, so this should not happen
        messages.put(END_OF_STREAM)

    def _read_stderr(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self._stderr.append(line.rstrip("\n"))
            self._stderr_lines_seen += 1

    def _stderr_since(self, mark: int) -> Optional[str]:
        time.sleep(0.05)  # let the reader thread drain what the dying worker wrote last
        new_lines = self._stderr_lines_seen - mark
        if new_lines <= 0:
            return None
        tail = list(self._stderr)[-min(new_lines, STDERR_TAIL_LINES):]
        return "\n".join(tail) or None

    def _death_reason(self) -> Optional[str]:
        process = self._process
        if process is None:
            return None
        try:
            code = process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return None
        if code < 0:
            name = _signal_name(-code)
            hint = " (the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
            return f"the worker died of {name} (signal {-code}){hint}"
        return f"the worker exited with code {code}"

    def _kill(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: this reaches only the worker's group
            except (ProcessLookupError, PermissionError, AttributeError):
                process.kill()
        try:
            process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        for stream in (process.stdin, process.stdout, process.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self._process = None

    def _failure(self, case, ctx, status, error, detail, started, started_clock) -> dict:
        return failure_record(case, ctx, self.session, status, error, detail, started, started_clock)


def failure_record(case, ctx, session: Optional[dict], status, error, detail, started, started_clock) -> dict:
    """The record of a case that did not finish in its process (timeout, crash): no result, no telemetry.
    `session` is the Session.describe() of the process that ran it, or None."""
    from fade.measure.session import case_record  # the worker's module; imports torch only when a case runs

    from fade.measure.telemetry import with_contention

    unknown = {"available": False, "contended": None, "reasons": [], "reason": "the case did not finish"}
    telemetry = with_contention({"available": False, "source": "none", "reason": "the case did not finish"}, unknown)
    described = {**(session or {}), "device": ctx.device}
    return case_record(case, ctx, described, status=status, started=started, started_clock=started_clock,
                       telemetry=telemetry, error=error, error_detail=detail)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
