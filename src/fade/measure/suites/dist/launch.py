"""Where a dist run's ranks come from: the user's own launcher (its variables, read by rank_environment), or
torchrun started here (`launch`), watched with a wall limit so that nothing hangs.

`launch` starts `python -m torch.distributed.run --standalone --nproc-per-node N -m
fade.measure.suites.dist REQUEST.json` in its own session, with the environment of `dist_environment`
(every variable FADE sets is returned as fade.env_change.EnvChange; a value the user set wins). Rank 0 appends
each record to the results file and writes its progress to an event file (rank.EventFile), which this
process relays to the caller's RunProgress and reads to know the case in flight. Limits: the ranks must
report their start within STARTUP_TIMEOUT_S; a case may run case_wall_limit_s (the collective timeout,
the group's margin, and CASE_WORK_S of work). Past either, or on Ctrl-C, the whole process tree is killed
(SIGKILL to the session) and the case in flight gets a "timeout" record from here; ranks that ended
without a record for their case in flight give it a "crashed" record with the last lines they wrote.

Lifetimes (lifeline.py): torchrun gets SIGKILL when this process dies and each rank when torchrun dies
(parent-death signals), so a SIGKILL of `fade bench dist` leaves no process behind, and rank 0 appends a
record only while its parent chain is alive. A torchrun that dies of a signal is the launcher's death, not
the cases': the case in flight, if any, gets one "crashed" record saying so, and the run stops there.
Every failure record written here is first looked up in what the ranks appended since the launch, so a
case is never recorded twice (rank 0 may die between appending its record and reporting it).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from fade.errors import FadeUsageError

STARTUP_TIMEOUT_S = 180.0  # torchrun, N torch imports and the group's rendezvous; runner's worker gets as long
CASE_WORK_S = 300.0  # a 1 GiB gloo collective's ~20 calls on a slow CPU host, or a scaling case's model builds
POLL_S = 0.1  # how often the event file and the process are looked at
OUTPUT_TAIL_LINES = 40  # lines of the ranks' output kept in a failed case's error_detail
EXIT_GRACE_S = 5.0
# Variables FADE sets in every process it starts for a CUDA device, unless the user set them (their value
# wins). NVLink SHARP / multicast (NVLS) needs the fabric manager's multicast support; on hosts without it,
# NCCL and symmetric memory fail or hang at communicator set-up.
CUDA_ENV = (
    ("NCCL_NVLS_ENABLE", "0", "NCCL: no NVLink SHARP (multicast) algorithms; "
     "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-nvls-enable"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "torch symmetric memory: no multicast objects; "
     "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemory.cu"),
    ("NVSHMEM_DISABLE_NVLS", "1", "NVSHMEM: no NVLS; https://docs.nvidia.com/nvshmem/api/gen/env.html"),
)  # fmt: skip
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
SCRATCH_PREFIX = "fade-dist-"  # the run's temporary directory: request and event files
SCRATCH_OWNER = "launcher.pid"  # in it: the launcher's pid, so that a later run removes what a killed one left


def rank_environment(environ) -> Optional[dict]:
    """This process's rank, world size, local rank and rendezvous address when a launcher started it, else None.

    torchrun (and any launcher that sets RANK and WORLD_SIZE) first; then SLURM's SLURM_PROCID,
    SLURM_NTASKS and SLURM_LOCALID for a job step of more than one task, which also needs MASTER_ADDR and
    MASTER_PORT (FadeUsageError names them)."""
    if environ.get("RANK") is not None and environ.get("WORLD_SIZE") is not None:
        found = {"RANK": environ["RANK"], "WORLD_SIZE": environ["WORLD_SIZE"], "LOCAL_RANK": environ.get("LOCAL_RANK", "0")}
        launcher = "RANK and WORLD_SIZE are set"
    elif environ.get("SLURM_PROCID") is not None and int(environ.get("SLURM_NTASKS") or 1) > 1:
        found = {"RANK": environ["SLURM_PROCID"], "WORLD_SIZE": environ["SLURM_NTASKS"],
                 "LOCAL_RANK": environ.get("SLURM_LOCALID", "0")}  # fmt: skip
        launcher = "this is a SLURM step of several tasks"
    else:
        return None
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not environ.get(name)]
    if missing:
        raise FadeUsageError(f"{launcher} but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
                             "export MASTER_ADDR=<rank 0's host> MASTER_PORT=<a free port> for every task")  # fmt: skip
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if not str(found[name]).isdigit():
            raise FadeUsageError(f"{name}={found[name]!r} from the launcher is not a number")
    found.update(MASTER_ADDR=environ["MASTER_ADDR"], MASTER_PORT=environ["MASTER_PORT"])
    return found


def dist_environment(environ: dict, device_type: Optional[str]) -> list:
    """Set CUDA_ENV in `environ` for a CUDA device (or an unspecified one) unless already set; returns a
    fade.env_change.EnvChange per variable, "set" or "kept-user-value"."""
    from fade.env_change import EnvChange

    if device_type not in (None, "cuda"):
        return []
    changes = []
    for name, value, reason in CUDA_ENV:
        if name in environ:
            changes.append(EnvChange(name, environ[name], "kept-user-value", "DIST", reason))
        else:
            environ[name] = value
            changes.append(EnvChange(name, value, "set", "DIST", reason))
    return changes


def case_wall_limit_s(timeout_s: float) -> float:
    from fade.measure.suites.dist.rank import GROUP_TIMEOUT_MARGIN_S

    return timeout_s + GROUP_TIMEOUT_MARGIN_S + CASE_WORK_S


def torchrun_command(nproc: int, request_path: str, python: str = sys.executable) -> list:
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "fade.measure.suites.dist", request_path]  # fmt: skip


def launch(request: dict, nproc: int, environ: dict, *, progress=None, python: str = sys.executable,
           startup_timeout_s: float = STARTUP_TIMEOUT_S, case_limit_s: Optional[float] = None,
           clock: Callable[[], float] = time.monotonic):  # fmt: skip
    """Run `request` on `nproc` local ranks under torchrun (module docstring); returns the RunSummary. The
    caller has checked request["out"]. RuntimeError when the ranks never started (their last lines say why)."""
    from fade.measure.case import CaseContext
    from fade.measure.results_lock import holding_results
    from fade.measure.runner import RunSummary, failure_record
    from fade.measure.suites.dist.lifeline import LAUNCHER_PID, parent_death_preexec
    from fade.measure.suites.dist.suite import plan_cases
    from fade.results import FAILED_STATUSES, JsonlAppender, now_iso

    case_limit_s = case_wall_limit_s(request["timeout_s"]) if case_limit_s is None else case_limit_s
    started_clock = clock()
    cases = {case.case_id: case for case in plan_cases(request, nproc)}
    _remove_dead_scratch(Path(tempfile.gettempdir()))
    with holding_results(request["out"]), tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
        (Path(scratch) / SCRATCH_OWNER).write_text(f"{os.getpid()}\n", encoding="ascii")
        results_offset = _size(request["out"])  # what the ranks append starts here
        events_path = Path(scratch) / "events.jsonl"
        events_path.touch()
        request_path = Path(scratch) / "request.json"
        # launcher_pid: rank 0 leaves the results lock to this process, and each rank ties itself to it
        request_path.write_text(json.dumps({**request, "events": str(events_path), LAUNCHER_PID: os.getpid()}),
                                encoding="utf-8")  # fmt: skip
        package_root = str(Path(__file__).resolve().parents[4])  # the directory holding the `fade` package
        environment = dict(environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [package_root] + [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry])
        process = subprocess.Popen(torchrun_command(nproc, str(request_path), python), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                                   errors="replace", env=environment, start_new_session=True,
                                   preexec_fn=parent_death_preexec())  # fmt: skip
        output = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        said = collections.deque(maxlen=1)  # the ranks' last `fade: ...` line (a rank that cannot run says why)
        reader = threading.Thread(target=_read_lines, args=(process.stdout, output, said), daemon=True)
        reader.start()
        watch = _Watch(events_path, progress, clock)
        killed_for = None
        interrupted = False
        try:
            while True:
                watch.read()
                code = process.poll()
                if code is not None:
                    break
                now = clock()
                if watch.session is None and now - started_clock > startup_timeout_s:
                    killed_for = f"the ranks did not start within {startup_timeout_s:g} s"
                elif watch.in_flight is not None and now - watch.in_flight_since > case_limit_s:
                    killed_for = (f"no result after {case_limit_s:g} s (the case's wall limit: --timeout, the "
                                  "group's margin and the case's work); every rank was killed")  # fmt: skip
                if killed_for:
                    _kill_tree(process)
                    break
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            interrupted = True
            _kill_tree(process)
        process.wait()
        reader.join(timeout=EXIT_GRACE_S)
        watch.read()
        appended = _appended_case_ids(request["out"], results_offset, request["run_id"])
    tail = "\n".join(output) or None
    launcher_died = _launcher_death(process.returncode) if not (killed_for or interrupted) else None
    if watch.session is None and not interrupted and not launcher_died:  # torchrun's death is not "cannot run here"
        reason = killed_for or f"torchrun exited with status {process.returncode}"
        last = list(said) or [line for line in output if line.strip("=* ")]
        raise RuntimeError(f"the dist ranks did not start: {reason}" + (f"; {last[-1]}" if last else ""))
    device = (watch.session or {}).get("device") or "?"
    summary = RunSummary(out=request["out"], run_id=request["run_id"], device=device, selected=len(cases), resumed=0)
    if watch.summary is not None:
        for name in ("problems", "stopped", "write_error", "interrupted"):
            setattr(summary, name, watch.summary.get(name, getattr(summary, name)))
    summary.interrupted = summary.interrupted or interrupted
    summary.resumed = len(cases) - watch.total  # rank 0 ran (or was to run) `total` of them
    summary.records = list(watch.records)
    case = cases.get(watch.in_flight) if watch.in_flight is not None and not interrupted else None
    if case is not None and case.case_id not in appended:  # the ranks ended (or were ended) inside a case
        ctx = CaseContext(device=device, run_id=request["run_id"], quick=bool(request.get("quick")),
                          timing=dict(request.get("timing") or {}))  # fmt: skip
        if killed_for:
            status, error = "timeout", f"{case.case_id}: {killed_for}"
        elif launcher_died:
            status, error = "crashed", f"{launcher_died} during {case.case_id}; the case itself did not fail"
        else:
            status, error = "crashed", f"the ranks ended inside {case.case_id} (torchrun exit status {process.returncode})"
        record = failure_record(case, ctx, watch.session, status, error, tail, now_iso(), watch.in_flight_since)
        try:
            with JsonlAppender(request["out"]) as appender:
                appender.append(record)
        except OSError as write_error:  # OutputFull, or the newline JsonlAppender adds first: a full disk
            summary.write_error = summary.write_error or str(write_error)
        else:
            summary.records.append(record)
        summary.stopped = summary.stopped or error
    elif launcher_died:  # before the first case or between two: nothing to blame, the run stopped
        summary.stopped = summary.stopped or launcher_died
    for record in summary.records:
        summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
        if record["status"] in FAILED_STATUSES:
            summary.failures.append({"case_id": record["case_id"], "status": record["status"], "error": record.get("error")})
    if (not summary.records and process.returncode not in (0, None) and not interrupted and not summary.stopped
            and not summary.write_error):  # fmt: skip
        summary.stopped = f"torchrun exited with status {process.returncode}: {output[-1] if output else 'no output'}"
    summary.wall_s = clock() - started_clock
    if progress is not None and watch.started:
        progress.finished(summary)
    return summary


class _Watch:
    """Reads rank 0's event file (rank.EventFile) as it grows and relays it to `progress`."""

    def __init__(self, path: Path, progress, clock: Callable[[], float]):
        self.path = path
        self.clock = clock
        self.progress = progress
        self.offset = 0
        self.partial = ""
        self.session = None
        self.started = False
        self.total = 0
        self.records: list = []
        self.summary: Optional[dict] = None
        self.in_flight: Optional[str] = None
        self.in_flight_since = 0.0

    def read(self) -> None:
        with open(self.path, encoding="utf-8") as events:
            events.seek(self.offset)
            text = events.read()
            self.offset = events.tell()
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()  # a line still being written
        for line in lines:
            if line.strip():
                self._handle(json.loads(line))

    def _handle(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "start":
            self.session = event.get("session") or {}
            self.started = True
            self.total = event["total"]
            if self.progress is not None:
                self.progress.start(event["total"], event["device"])
        elif kind == "case_started":
            self.in_flight, self.in_flight_since = event["case_id"], self.clock()
            if self.progress is not None:
                self.progress.case_started(event["case_id"])
        elif kind == "case_finished":
            self.in_flight = None
            self.records.append(event["record"])
            if self.progress is not None:
                self.progress.case_finished(event["record"])
        elif kind == "finished":  # rank 0 ended its run in order: no case is in flight, even one it could not write
            self.summary = event.get("summary") or {}
            self.in_flight = None


def _launcher_death(returncode: Optional[int]) -> Optional[str]:
    """What to say when torchrun itself ended by a signal (killed from outside, the OOM killer), else None."""
    if returncode is None or returncode >= 0:
        return None
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"the launcher died: torchrun was killed by {name} (signal {-returncode}) and every rank with it"


def _remove_dead_scratch(temp: Path) -> None:
    """Remove this user's scratch directories whose launcher was killed (its pid is gone). A live run's, another
    user's, a link, or one whose owner file is missing or not a small regular file stays untouched."""
    import shutil
    import stat

    try:
        candidates = [entry for entry in os.scandir(temp) if entry.name.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for scratch in candidates:
        try:
            found = scratch.stat(follow_symlinks=False)
            owner_file = os.lstat(os.path.join(scratch.path, SCRATCH_OWNER))
            if not (stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid() and stat.S_ISREG(owner_file.st_mode)
                    and owner_file.st_size <= 32):  # fmt: skip
                continue
            with open(os.path.join(scratch.path, SCRATCH_OWNER), encoding="ascii") as text:
                owner = int(text.read(32).strip())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(scratch.path, ignore_errors=True)
        except (OSError, ValueError):
            continue  # not ours to judge: no owner file yet, unreadable, a live process of another user


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _appended_case_ids(out, offset: int, run_id: str) -> set:
    """The case ids of this run's records appended to `out` after byte `offset` (by rank 0); none when `out`
    is not a regular file (/dev/full reads zeros for ever, a FIFO blocks)."""
    import stat

    try:
        if not stat.S_ISREG(os.stat(out).st_mode):
            return set()
        with open(out, "rb") as results:
            results.seek(offset)
            text = results.read().decode("utf-8", "replace")
    except OSError:
        return set()
    found = set()
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a kill, or not ours
        if isinstance(record, dict) and record.get("run_id") == run_id:
            found.add(record.get("case_id"))
    return found


def _read_lines(stream, into: collections.deque, said: collections.deque) -> None:
    for line in stream:
        into.append(line.rstrip("\n"))
        if line.startswith("fade: "):
            said.append(line.rstrip("\n"))


def _kill_tree(process: subprocess.Popen) -> None:
    """End torchrun and every rank it started. torchrun starts each rank in a session of its own, so a signal
    to torchrun's session misses them: the ranks are found by walking /proc before anything is signalled.
    SIGTERM first (torchrun then stops its ranks itself), SIGKILL to whatever is left after EXIT_GRACE_S."""
    if process.poll() is not None:
        return
    family = descendants(process.pid)
    process.terminate()
    try:
        process.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    for pid in [process.pid] + family:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(pid: int, proc: str = "/proc") -> list:
    """Every process below `pid`, from the parent field of /proc/*/stat (Linux; [] elsewhere)."""
    children: dict = {}
    try:
        entries = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"{proc}/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))  # fields after "(comm)": state, ppid, ...
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
