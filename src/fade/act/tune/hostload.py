"""How busy the host was during a tuning run, measured from Linux's /proc (through the bench's reader,
fade.measure.telemetry.ProcReader): the CPU time other processes used
(all cores' busy time from /proc/stat minus this process tree's from /proc/<pid>/stat) and the run queue
(/proc/loadavg's runnable count), so a result measured while something else held the cores says so.

Method
    `HostLoadProbe.start()` and `.stop()` each read /proc/stat's aggregate "cpu" line (user + nice + system +
    irq + softirq + steal jiffies) and the CPU time of this process and its live descendants (utime + stime
    + cutime + cstime of each: a child's time moves into its parent's cutime when it is reaped). Other processes'
    CPU time is the busy delta minus this tree's delta; `other_cores` divides it by the wall time (1.0: one
    core kept busy all along). The run queue is sampled at stop (procs_running less this tree's running
    workers is not separable there, so it is reported, not judged).
Judgement (`is_busy`)
    On a CPU device the step uses every core: busy when others took more than BUSY_SHARE_CPU of them. On a
    GPU the step needs one host core to launch kernels: busy when others left less than one core free.
Elsewhere (no /proc), or over a run shorter than MIN_JUDGED_WALL_S, nothing is judged.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional

from fade.measure.telemetry import HostReading, ProcReader, clock_ticks

MIN_JUDGED_WALL_S = 5.0  # shorter runs: a few 10 ms jiffies decide the ratio, so nothing is judged
BUSY_SHARE_CPU = 0.25  # of the cores: another process this busy moves a CPU step's time by far more than the noise bar
PROC = Path("/proc")


def _stat_fields(proc: Path, pid: str) -> Optional[list]:
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from state on: comm may hold spaces


def read_tree_cpu_s(root_pid: int, proc: Path = PROC) -> Optional[float]:
    """CPU seconds of `root_pid` and its live descendants, each with the children it reaped, or None."""
    parents: dict = {}
    cpu: dict = {}
    try:
        entries = [entry.name for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return None
    for pid in entries:
        fields = _stat_fields(proc, pid)
        if fields is None or len(fields) < 15:
            continue
        parents[int(pid)] = int(fields[1])  # ppid
        utime, stime, cutime, cstime = (int(fields[index]) for index in (11, 12, 13, 14))
        cpu[int(pid)] = (utime + stime, cutime + cstime)
    if root_pid not in cpu:
        return None
    tree = {root_pid}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                changed = True
    ticks = sum(sum(cpu[pid]) for pid in tree)  # a reaped child's time is in its parent's cutime, never twice
    return ticks / clock_ticks()


class HostLoadProbe:
    """start() before the run, stop() after: {"other_cores", "other_cpu_s", "own_cpu_s", "wall_s", "cores",
    "run_queue", "source"} or None where /proc is not there."""

    def __init__(self, *, proc: Path = PROC, clock: Callable[[], float] = time.monotonic, pid: Optional[int] = None):
        pid = pid or os.getpid()
        # The bench's /proc reader, with this process tree's CPU time as "own": the tuner's trials run in workers.
        self.reader = ProcReader(proc, own_cpu_s=lambda: read_tree_cpu_s(pid, Path(proc)), clock=clock)
        self._start: Optional[HostReading] = None

    def start(self) -> None:
        self._start = self.reader.read()

    def stop(self) -> Optional[dict]:
        if self._start is None:
            return None
        start, end = self._start, self.reader.read()
        if None in (start.busy_cpu_s, end.busy_cpu_s, start.own_cpu_s, end.own_cpu_s) or end.t_s <= start.t_s:
            return None
        own_s = max(end.own_cpu_s - start.own_cpu_s, 0.0)
        other_s = max((end.busy_cpu_s - start.busy_cpu_s) - own_s, 0.0)
        wall_s = end.t_s - start.t_s
        return {
            "other_cores": round(other_s / wall_s, 3),
            "other_cpu_s": round(other_s, 2),
            "own_cpu_s": round(own_s, 2),
            "wall_s": round(wall_s, 2),
            "cores": end.cpus,
            "run_queue": end.runnable,
            "source": "/proc/stat busy time minus this process tree's /proc/<pid>/stat CPU time, over the run",
        }


def is_busy(load: Optional[dict], device: str) -> Optional[str]:
    """Why the host was too busy to trust timings (module docstring), or None."""
    if not load or load["wall_s"] < MIN_JUDGED_WALL_S:
        return None
    cores, other = load["cores"], load["other_cores"]
    if str(device or "").startswith("cpu"):
        if other > BUSY_SHARE_CPU * cores:
            return (f"other processes kept {other:.2f} of the {cores} cores busy during the run (more than "
                    f"{100 * BUSY_SHARE_CPU:.0f}%), and a CPU step needs them all")  # fmt: skip
        return None
    if cores - other < 1:
        return f"other processes kept {other:.2f} of the {cores} cores busy during the run: less than one left to launch kernels"
    return None
