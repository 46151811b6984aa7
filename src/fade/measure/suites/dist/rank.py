"""One rank of a `fade bench dist` run: join the process group its launcher set up, run every case in step
with the other ranks, and (rank 0 only) append the records through runner.run_cases.

Started by torchrun (`python -m torch.distributed.run ... -m fade.measure.suites.dist REQUEST.json`,
fade.measure.suites.dist.launch) or, under the user's own launcher, called in-process as `run_rank`. Each
rank reads its place from the launcher's variables (launch.rank_environment: torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or SLURM's), picks its device (cuda:LOCAL_RANK, cpu, xpu:LOCAL_RANK)
and the backend torch pairs with it (BACKENDS: nccl, which is RCCL on ROCm builds; gloo; xccl). The process
group's timeout is the run's timeout plus GROUP_TIMEOUT_MARGIN_S, so that the case's own wait, which names
the ranks that did not arrive (collectives.py, "Arrival"), fires before the backend's watchdog.

Every rank builds the same case list from the request; rank 0 decides which ones `resume` skips and
broadcasts the ids. After a collective timed out, the group is unusable: the executor's `stop_reason` ends
the run there, rank 0 keeps the timeout record, and the process ends with TIMED_OUT_EXIT without tearing
the group down (a peer may never return). A write that failed (a full disk) ends the run the same way.

Every rank carries a lifeline.Lifeline: under FADE's launcher it dies with torchrun (parent-death signal),
and rank 0 returns a case's record for appending only while its parent chain is alive; an orphan exits
without a word in the results file. Rank 0 holds the results file's run lock (results_lock) under the
user's launcher; under FADE's, the launcher holds it for the whole run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
from dataclasses import dataclass
from typing import Optional

from fade.errors import FadeUsageError

BACKENDS = {"cuda": "nccl", "cpu": "gloo", "xpu": "xccl"}  # torch's backend per device type
GROUP_TIMEOUT_MARGIN_S = 10.0  # the backend's own timeout, after FADE's check has named the missing ranks
STORE_PREFIX = "fade-dist"  # keys FADE puts in the launcher's store
TIMED_OUT_EXIT = 1  # exit status of a rank whose run stopped at a collective that timed out
WRITE_ERROR_EXIT = 2  # rank 0's exit status when the results file stopped taking records (a full disk)
TEST_HANG_RANK = "FADE_DIST_TEST_HANG_RANK"  # test-only: this rank sleeps before its first case
TEST_HANG_S = 3600.0  # how long the test hook's rank sleeps: longer than any test's timeout


@dataclass
class RankState:
    """This process's place in the run; case functions read it through current()."""

    rank: int
    world: int
    local_rank: int
    backend: str
    device: str
    store: object  # a torch.distributed.Store with the run's arrival keys
    timeout_s: float
    dtypes: tuple  # the dtypes this backend's collectives are measured in
    link: Optional[dict] = None  # the slowest link between the ranks' GPUs (collect.topology), if known
    min_block_s: float = 1e-3
    arrival_key: str = ""  # set per case by RankExecutor: where a case marks its arrival
    serial: int = 0  # cases started on this rank


_STATE: Optional[RankState] = None  # the process group is process-wide in torch; so is its description
_LIFELINE = None  # this process's lifeline.Lifeline: bound in main() under torchrun, made in run_rank otherwise


def current() -> RankState:
    if _STATE is None:
        raise RuntimeError("no dist run in this process: case functions of the dist suite run under run_rank")
    return _STATE


def join(request: dict, environment: dict) -> RankState:
    """init_process_group for this rank (module docstring); returns the state case functions read."""
    global _STATE
    import torch
    import torch.distributed as dist

    rank, world, local_rank = int(environment["RANK"]), int(environment["WORLD_SIZE"]), int(environment["LOCAL_RANK"])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.setdefault(name, str(environment[name]))  # env:// reads them; a SLURM-only launch lacks them
    from fade.measure.session import resolve_device

    device_type = request.get("device_type") or ("cuda" if torch.cuda.is_available() else "cpu")
    device = resolve_device("cpu" if device_type == "cpu" else f"{device_type}:{local_rank}")  # FadeUsageError if absent
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    elif device_type == "xpu":
        torch.xpu.set_device(local_rank)
    timeout_s = float(request["timeout_s"])
    backend = BACKENDS[device_type]
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s + GROUP_TIMEOUT_MARGIN_S),
                            rank=rank, world_size=world)  # fmt: skip
    store = dist.TCPStore(environment["MASTER_ADDR"], int(environment["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=timeout_s + GROUP_TIMEOUT_MARGIN_S))  # fmt: skip
    dtypes = tuple(request.get("dtypes") or ())
    link = request.get("link")
    if link is None and rank == 0 and device_type == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", world)) == world:
        link = gpu_link(torch, world)
    _STATE = RankState(rank=rank, world=world, local_rank=local_rank, backend=backend, device=device,
                       store=dist.PrefixStore(STORE_PREFIX, store), timeout_s=timeout_s, dtypes=dtypes,
                       link=link, min_block_s=float(request.get("min_block_s") or 1e-3))  # fmt: skip
    return _STATE


def gpu_link(torch, world: int) -> Optional[dict]:
    """The slowest link between GPUs 0..world-1 of this host (collect.topology, analyze.links), or None when
    the topology or the link's peak is unknown. Assumes rank r runs on GPU r (torchrun's LOCAL_RANK with no
    CUDA_VISIBLE_DEVICES reordering)."""
    from fade.analyze.links import slowest_link
    from fade.collect.topology import collect_topology

    if os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES"):
        return None  # GPU r of torch is not row r of the tools' matrix
    properties = torch.cuda.get_device_properties(0)
    if torch.version.hip is not None:  # "gfx942:sramecc+:xnack-" -> "gfx942"; CUDA builds put the name there
        key = properties.gcnArchName.split(":", 1)[0]
    else:
        key = f"{properties.major}.{properties.minor}"
    topology = collect_topology()
    return slowest_link(topology["links"], list(range(world)), key)


class RankExecutor:
    """runner.run_cases's executor on one rank: runs each case in this process, in step with the other ranks.

    A case that raised CollectiveTimeout (FADE's wait) or a backend error saying "timed out" becomes status
    "timeout" and sets `stop_reason`: the run stops there, on every rank."""

    def __init__(self, state: RankState):
        self.state = state
        self.session = None
        self.stop_reason: Optional[str] = None

    def start(self) -> dict:
        if self.session is None:
            from fade.measure.session import open_session

            self.session = open_session(self.state.device)
        return self.session.describe()

    def run(self, case, ctx) -> dict:
        from fade.measure.session import execute_case

        self.start()
        hang_rank = os.environ.get(TEST_HANG_RANK)
        if self.state.serial == 0 and hang_rank is not None and hang_rank.strip() == str(self.state.rank):
            import time

            time.sleep(TEST_HANG_S)  # test-only (docs/dist.md): this rank never reaches its first case's collective
        self.state.serial += 1
        self.state.arrival_key = f"{ctx.run_id}/{self.state.serial}"
        record = execute_case(case, ctx, self.session)
        if _LIFELINE is not None and not _LIFELINE.alive():  # the launcher died: its death is not this case's
            orphan_exit(self.state.rank)
        error = record.get("error") or ""
        if error.startswith("CollectiveTimeout: "):  # FADE's own wait, which names the missing ranks
            record["status"], record["error"] = "timeout", error[len("CollectiveTimeout: "):]
        elif record["status"] == "error" and "timed out" in error.lower():  # the backend's timeout, later in the case
            record["status"] = "timeout"
        if record["status"] == "timeout":
            self.stop_reason = f"{case.case_id} timed out; the process group cannot be used after that"
        return record

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


class EventFile:
    """runner.RunProgress that appends each call as a JSON line to a file the launching parent reads
    (launch.py relays it to the user's progress bar and knows from it which case is in flight)."""

    def __init__(self, path: str, session: dict):
        self.path = path
        self.session = session

    def _write(self, event: dict) -> None:
        from fade.results import dumps_line

        with open(self.path, "a", encoding="utf-8") as events:
            events.write(dumps_line(event))
            events.flush()
            os.fsync(events.fileno())

    def start(self, total: int, device: str) -> None:
        self._write({"event": "start", "total": total, "device": device, "session": self.session})

    def case_started(self, case_id: str) -> None:
        self._write({"event": "case_started", "case_id": case_id})

    def case_finished(self, record: dict) -> None:
        self._write({"event": "case_finished", "record": record})

    def finished(self, summary) -> None:
        self._write({"event": "finished", "summary": summary.to_dict()})


def run_rank(request: dict, environment: dict, *, progress=None):
    """Join the group, run the request's cases on every rank; rank 0 returns runner.run_cases's RunSummary
    (appended to request["out"]), the other ranks a summary without records. `progress` is rank 0's."""
    global _LIFELINE
    from fade.measure.results_lock import holding_results
    from fade.measure.suites.dist.lifeline import LAUNCHER_PID, Lifeline

    if _LIFELINE is None:  # in-process under the user's launcher: its parent is the launcher (main() binds torchrun's)
        _LIFELINE = Lifeline()
    launched_here = request.get(LAUNCHER_PID) is not None  # FADE's launcher holds the results lock for us
    with contextlib.ExitStack() as held:
        if int(environment["RANK"]) == 0 and not launched_here:  # before joining: a busy file stops rank 0 at once
            held.enter_context(holding_results(request["out"]))
        return _run_rank(request, environment, progress=progress)


def _run_rank(request: dict, environment: dict, *, progress):
    import torch.distributed as dist

    from fade.measure.case import CaseContext
    from fade.measure.runner import RunSummary, finished_cases, run_cases
    from fade.measure.suites.dist.suite import plan_cases

    state = join(request, environment)
    cases = plan_cases(request, state.world)
    executor = RankExecutor(state)
    described = executor.start()
    todo_ids = [None]
    if state.rank == 0:
        finished, _ = finished_cases(request["out"], described["device"]) if request.get("resume") else (set(), [])
        todo_ids = [[case.case_id for case in cases if case.case_id not in finished]]
    dist.broadcast_object_list(todo_ids, src=0)
    todo = [case for case in cases if case.case_id in set(todo_ids[0])]
    if state.rank == 0:
        if request.get("events"):
            progress = EventFile(request["events"], described)
        # lock=False: the results lock is run_rank's (under the user's launcher) or FADE's launcher's
        summary = run_cases(todo, executor=executor, out=request["out"], run_id=request["run_id"],
                            quick=bool(request.get("quick")), timing=request.get("timing"), progress=progress,
                            lock=False)  # fmt: skip
        summary.resumed = len(cases) - len(todo)
        summary.selected = len(cases)
        summary.stopped = summary.stopped or executor.stop_reason  # also when the last case timed out
        return summary
    ctx = CaseContext(device=described["device"], run_id=request["run_id"], quick=bool(request.get("quick")),
                      timing=dict(request.get("timing") or {}))  # fmt: skip
    summary = RunSummary(out=request["out"], run_id=request["run_id"], device=described["device"], selected=len(cases),
                         resumed=len(cases) - len(todo))  # fmt: skip
    try:
        for case in todo:
            record = executor.run(case, ctx)
            summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
            if executor.stop_reason:
                summary.stopped = executor.stop_reason
                break
    finally:
        executor.close()
    return summary


def close_group(summary) -> None:
    """Tear the group down after a run that did not stop early; after a timeout leave it as it is (a peer may
    never return, and the teardown would wait for it). Every rank calls this, rank 0 last of all its work."""
    import torch.distributed as dist

    if not (summary.stopped or summary.write_error) and dist.is_initialized():
        dist.barrier()  # no rank leaves while another still needs the group
        dist.destroy_process_group()


def finish(summary) -> int:
    """The rank's exit status: WRITE_ERROR_EXIT when the results file took no more records, TIMED_OUT_EXIT after
    a timeout, 1 when a case failed, else 0 (close_group first). A non-zero status also makes torchrun end
    the other ranks, which would otherwise wait in their next collective for a rank 0 that has stopped."""
    close_group(summary)
    if summary.write_error:
        return WRITE_ERROR_EXIT
    if summary.stopped:
        return TIMED_OUT_EXIT
    return 1 if summary.failed else 0


def orphan_exit(rank: int) -> None:
    """End this rank at once, writing nothing: its launcher is gone (lifeline.py)."""
    try:
        print(f"fade: rank {rank}: {_LIFELINE.describe() if _LIFELINE else 'the launcher is gone'}; exiting without "
              "writing a record", file=sys.stderr, flush=True)  # fmt: skip
    except OSError:
        pass  # the launcher that read our output is gone too
    from fade.measure.suites.dist.lifeline import ORPHAN_EXIT

    os._exit(ORPHAN_EXIT)


def main(argv=None) -> int:
    global _LIFELINE
    from fade.measure.suites.dist.launch import rank_environment
    from fade.measure.suites.dist.lifeline import LAUNCHER_PID, Lifeline

    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], encoding="utf-8") as request_file:
        request = json.load(request_file)
    _LIFELINE = Lifeline(request.get(LAUNCHER_PID))
    if not _LIFELINE.bind():  # torchrun (or the launcher above it) died before this rank could tie itself to it
        orphan_exit(int(os.environ.get("RANK", "-1")))
    try:
        summary = run_rank(request, rank_environment(os.environ))
    except FadeUsageError as error:  # this rank cannot run here (no such device): one line for the parent
        print(f"fade: error: {error}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(2)
    code = finish(summary)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: a hung peer's group must not block this rank's exit

