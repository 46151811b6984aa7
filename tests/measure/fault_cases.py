"""Cases that misbehave on purpose, for the runner's fault-handling tests. Imported by the worker by name."""

import os
import time
from pathlib import Path

from fade.measure.case import CaseResult


def fine(ctx, *, value: float = 1.0) -> CaseResult:
    return CaseResult(value=value, unit="x", formula="constant")


def sleep(ctx, *, seconds: float, pid_file: str = "") -> CaseResult:
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    time.sleep(seconds)
    return fine(ctx)


def abort(ctx) -> CaseResult:
    os.abort()


def raise_error(ctx) -> CaseResult:
    raise ValueError("this case always fails")


def out_of_memory(ctx) -> CaseResult:
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def report_timing(ctx) -> CaseResult:
    """Echoes the timing settings the case was handed, so a test can see per-case overrides arrive."""
    return CaseResult(value=1.0, unit="x", formula="constant", extra={"timing": dict(ctx.timing)})


def memory_error(ctx) -> CaseResult:
    raise MemoryError()


def cpu_allocator_error(ctx) -> CaseResult:
    raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes")
