"""Per-kernel device time of fade.ocl work, from OpenCL profiling events: where an ocl step's time goes.

    with fade.ocl.profile() as times:       # every command on ocl:0 is recorded until the block ends
        step()
    times.table()                           # rows per kernel: calls, device ms, share, mean us
    times.host_bound                        # the share of the wall time the device sat idle

Each OpenCL command (a kernel, a CLBlast GEMM, a copy) is labelled: kernels by their name and, for
elementwise ones, their expression; CLBlast calls by routine, transposes and m x n x k (x batch); copies by
direction. The queue runs in order, so the device time of the block is the sum of its commands' times, and
what the wall time holds beyond that is the host: Python dispatch, kernel builds, allocation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Iterator

from fade.ocl import runtime


@dataclasses.dataclass
class KernelTimes:
    """The recorded commands of one profiled block: (label, device seconds) in launch order, and its wall time."""

    device: str = ""
    commands: list = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    steps: int = 1  # how many steps the block ran: the tables' per-step figures divide by it

    @property
    def device_s(self) -> float:
        return sum(seconds for _, seconds in self.commands)

    @property
    def host_bound(self) -> float:
        """The share of the block's wall time with no command running on the device (0 when not measured)."""
        return max(0.0, 1.0 - self.device_s / self.wall_s) if self.wall_s > 0 else 0.0

    def table(self, by: str = "label", top: int | None = None) -> list[dict]:
        """Rows {kernel, calls, device_ms, share, mean_us} per step (calls and device_ms divided by `steps`),
        the most device time first. `by` "label" keeps each shape and expression apart; "kernel" groups by the
        label's first word (Sgemm, im2col, pointwise, ...)."""
        if by not in ("label", "kernel"):
            raise ValueError(f"by={by!r}: use label or kernel")
        totals: dict = {}
        for label, seconds in self.commands:
            key = label if by == "label" else label.split(" ", 1)[0]
            calls, total = totals.get(key, (0, 0.0))
            totals[key] = (calls + 1, total + seconds)
        device_s = self.device_s or 1.0
        steps = max(self.steps, 1)
        rows = [{"kernel": key, "calls": calls / steps, "device_ms": total * 1e3 / steps, "share": total / device_s,
                 "mean_us": total / calls * 1e6} for key, (calls, total) in totals.items()]
        rows.sort(key=lambda row: -row["device_ms"])
        return rows[:top] if top else rows

    def as_dict(self, top: int | None = 40) -> dict:
        """Per step: wall and device ms, commands; the host-bound share; both tables."""
        steps = max(self.steps, 1)
        return {"device": self.device, "steps": self.steps, "wall_ms": self.wall_s * 1e3 / steps,
                "device_ms": self.device_s * 1e3 / steps, "host_bound": self.host_bound,
                "commands": len(self.commands) / steps,
                "by_kernel": self.table("kernel"), "by_label": self.table("label", top)}


@contextlib.contextmanager
def profile(index: int = 0, steps: int = 1) -> Iterator[KernelTimes]:
    """Record every OpenCL command fade.ocl issues on ocl:`index` inside the block (the queue is finished at
    both ends, so the wall time covers exactly the block's work); the KernelTimes fill in when it ends.
    `steps`: how many steps the block runs, for the per-step tables."""
    dev = runtime.device(index)
    times = KernelTimes(device=f"ocl:{index} ({dev.info.name})", steps=steps)
    dev.start_recording()
    start = time.perf_counter()
    try:
        yield times
    finally:
        try:
            dev.queue.finish()
            times.wall_s = time.perf_counter() - start
        finally:
            times.commands = dev.stop_recording()
