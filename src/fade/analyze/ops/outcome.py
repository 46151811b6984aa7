"""How one op × dtype outcome is classified: the classes, the exception rules, the slow rule and the
dtype-claim findings. torch-free, so the worker that measures and the parent that reads share it.

Classes, most severe first (CLASSES): a worker that died is `crash`, one that stopped answering is `hang`
(both decided by the parent from the runner's "crashed"/"timeout" status); otherwise the worst sample
decides: `error` > `mismatch` > `unsupported` > `fallback` > `ok`, and an `ok` that is far slower than it
should be is `slow`. `fallback` (fade.ocl) means it ran and matched, but through the backend's CPU fallback,
not a device kernel (the record's extra.fallback_ops names the ATen ops that fell back). `untested` means the
OpInfo made no sample input for this dtype, or only samples that are not really in it (empty tensors, or
inputs of another dtype), so the dtype was not tested.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Iterable, Optional

CLASSES = ("crash", "hang", "error", "mismatch", "unsupported", "slow", "fallback", "ok", "untested")
WORKS = frozenset({"ok", "slow", "fallback"})  # ran and matched the CPU (or was not comparable)
NATIVE = frozenset({"ok", "slow"})  # ran and matched on the device's own kernels
FAILS = frozenset({"crash", "hang", "error", "unsupported"})  # did not run to a result
RUNS = WORKS | {"mismatch"}  # ran to a result, right or wrong: the support side of a gap
SAMPLE_PRECEDENCE = ("error", "mismatch", "unsupported", "fallback", "ok")  # the worst sample class wins

# runner.py statuses of a record whose worker did not return a result -> the op's class.
CLASS_OF_RUNNER_STATUS = {"crashed": "crash", "timeout": "hang", "oom": "error", "error": "error"}

# An exception is `unsupported` (the op or dtype is not implemented here) rather than `error` when it is
# a NotImplementedError or its message says so. Messages from ATen's dispatcher and dtype switch
# ("not implemented for 'BFloat16'"), SDPA ("No available kernel"), cuFFT/hipFFT and the CUDA/HIP
# runtime ("no kernel image is available": the wheel lacks this GPU arch), fade.ocl ("lacks the OpenCL
# extension cl_khr_fp16": a float16 tensor on a device without it).
UNSUPPORTED_TYPES = frozenset({"NotImplementedError"})
UNSUPPORTED_MESSAGE = re.compile(
    r"not implemented for|Could not run '[^']+' with arguments from the|not (?:yet )?supported|"
    r"is unsupported|unsupported (?:dtype|type|scalar|device|layout)|does not support|doesn't support|"
    r"only supports|only supported (?:on|for|with)|No available kernel|No viable backend|not compiled with|was not compiled for|no kernel image is available|"
    r"hipErrorNoBinaryForGpu|not available for|no implementation for|lacks the OpenCL extension",
    re.IGNORECASE,
)
OUT_OF_MEMORY_MESSAGE = re.compile(r"out of memory", re.IGNORECASE)

# Ops whose outputs are random or uninitialized: running them tells whether they are supported, but their
# values are not compared with the CPU. OpInfo itself skips most of them in test_ops.py::test_compare_cpu
# (opdb.compare_policy reads those skips too); this list catches the rest by name.
NOT_COMPARED_PATTERNS = (
    ("bernoulli", "random"),
    ("normal*", "random"),
    ("rand*", "random"),
    ("uniform", "random"),
    ("cauchy", "random"),
    ("exponential", "random"),
    ("geometric", "random"),
    ("log_normal", "random"),
    ("multinomial", "random"),
    ("*dropout*", "random"),
    ("nn.functional.rrelu", "random"),
    ("*fractional_max_pool*", "random"),
    ("svd_lowrank", "random"),
    ("pca_lowrank", "random"),
    ("empty*", "uninitialized output"),
    ("new_empty*", "uninitialized output"),
    ("resize_*", "uninitialized output when it grows"),
)

# --- slow -------------------------------------------------------------------------------------------
# OpInfo samples are small (a few hundred elements), where a GPU call is bound by launch and sync
# latency (5-20 us) and loses to the CPU by design. So "slow" is flagged only where that excuse is gone:
SLOW_VS_CPU_RATIO = 10.0  # device median >= 10x the CPU's on the same input: far beyond timing noise
SLOW_VS_CPU_MIN_BYTES = 1 << 20  # ... on >= 1 MiB of input, where a GPU kernel should beat one CPU call
SLOW_LAUNCH_FLOOR_S = 50e-6  # size prediction: a few kernel launches plus one device sync ...
SLOW_FLOOR_BANDWIDTH_BYTES_PER_S = 50e9  # ... plus reading the input at 50 GB/s, a tenth of any current
#                                           datacenter GPU's memory bandwidth
SLOW_VS_SIZE_RATIO = 20.0  # device median >= 20x that prediction (>= 1 ms on a tiny input) and slower
#                            than the CPU: a CPU fallback, a host sync per element, a compile per call


def class_of_exception(type_name: str, message: str, *, claimed: Optional[bool]) -> str:
    """`unsupported` or `error` for an exception raised by the op (or its sample inputs) on the device.

    A dtype the OpInfo does not claim for this device failing is the expected `unsupported`, whatever the
    message; for a claimed dtype the message decides (UNSUPPORTED_MESSAGE).
    """
    if claimed is False:
        return "unsupported"
    if type_name in UNSUPPORTED_TYPES or UNSUPPORTED_MESSAGE.search(message or ""):
        return "unsupported"
    return "error"


def not_compared_reason(op_id: str) -> Optional[str]:
    """Why `op_id`'s values are not compared with the CPU (random or uninitialized output), or None."""
    for pattern, reason in NOT_COMPARED_PATTERNS:
        if fnmatch.fnmatchcase(op_id, pattern):
            return f"{reason} output (matched {pattern!r})"
    return None


def worst_sample_class(classes: Iterable[str]) -> Optional[str]:
    """The class of an op × dtype from its samples' classes; None when there were no samples."""
    seen = set(classes)
    for name in SAMPLE_PRECEDENCE:
        if name in seen:
            return name
    return None


def predicted_device_s(input_bytes: int) -> float:
    """The time an op on `input_bytes` of input should at most need on a GPU (SLOW_LAUNCH_FLOOR_S + bytes at
    SLOW_FLOOR_BANDWIDTH_BYTES_PER_S). A floor, not a model: compute-bound ops are excused by the CPU test."""
    return SLOW_LAUNCH_FLOOR_S + input_bytes / SLOW_FLOOR_BANDWIDTH_BYTES_PER_S


def slow_reason(device_type: str, device_s: Optional[float], cpu_s: Optional[float], input_bytes: int) -> Optional[str]:
    """Why a sample that ran correctly counts as `slow`, or None. Never on the CPU, which is the reference.

    See SLOW_VS_CPU_RATIO / SLOW_VS_CPU_MIN_BYTES (slower than the CPU on a large input) and
    SLOW_VS_SIZE_RATIO (far over what the input size predicts, and slower than the CPU).
    """
    if device_type == "cpu" or not device_s or not cpu_s:
        return None
    ratio = device_s / cpu_s
    if input_bytes >= SLOW_VS_CPU_MIN_BYTES and ratio >= SLOW_VS_CPU_RATIO:
        return f"{ratio:.0f}x the CPU's time on {input_bytes / 2**20:.1f} MiB of input"
    predicted_s = predicted_device_s(input_bytes)
    if device_s >= SLOW_VS_SIZE_RATIO * predicted_s and ratio > 1.0:
        return (
            f"{device_s * 1e3:.2f} ms where {input_bytes} B of input predicts <= {predicted_s * 1e6:.0f} us "
            f"({device_s / predicted_s:.0f}x), and {ratio:.1f}x the CPU's time"
        )
    return None


def claim_finding(op_class: str, claimed: Optional[bool]) -> Optional[str]:
    """A disagreement between the OpInfo's dtype claim for this device and what happened, or None.

    "claimed_fails": the OpInfo claims the dtype and it did not run (unsupported, error, crash, hang).
    "works_unclaimed": the OpInfo does not claim it and it ran (ok, slow, or mismatch: it ran, wrongly).
    """
    if claimed is None or op_class == "untested":
        return None
    if claimed and op_class in FAILS:
        return "claimed_fails"
    if not claimed and op_class not in FAILS:
        return "works_unclaimed"
    return None
