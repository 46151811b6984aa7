"""PyTorch's own operator database (OpInfo `op_db` from torch.testing._internal), as FADE reads it: stable
op ids, the dtypes each op claims per device, and how test_ops.py::test_compare_cpu treats the op.

op_db is a private, unversioned API that needs the `expecttest` package and takes seconds to import; the
module cache makes that once per process. On a ROCm build the dtype claims for "cuda" are the ROCm ones
only if PYTORCH_TEST_WITH_ROCM=1 is set before the first import (ROCm's CI does the same), so
`load_ops` sets it for the rest of the process when torch.version.hip is set.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Optional

ROCM_TEST_FLAG = "PYTORCH_TEST_WITH_ROCM"
COMMON_UTILS = "torch.testing._internal.common_utils"
# test_ops.py::TestCommon.test_compare_cpu: the test whose skips, expected failures and tolerances say how
# the OpInfo authors expect a device to compare with the CPU.
COMPARE_TEST = ("TestCommon", "test_compare_cpu")
COMPARE_CPU_TOLERANCE = (1e-3, 1e-3)  # (atol, rtol) that test_compare_cpu passes to assertEqual


class OpDbUnavailable(RuntimeError):
    """op_db cannot be imported here (most often: `expecttest` is missing)."""


def op_id(op) -> str:
    """"add", "nn.functional.conv2d", "as_strided.partial_views": name plus variant, unique in op_db."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.cache
def load_ops() -> dict:
    """op id -> OpInfo for every entry of op_db, plus FADE's sized probes (sized.py). OpDbUnavailable if
    op_db cannot be imported. Built once per process (op_db itself is immutable once imported)."""
    import torch

    if torch.version.hip and not os.environ.get(ROCM_TEST_FLAG):
        if COMMON_UTILS in sys.modules:
            raise OpDbUnavailable(
                f"{COMMON_UTILS} was imported before {ROCM_TEST_FLAG}=1 was set, so op_db holds the CUDA dtype "
                f"claims on this ROCm build; set {ROCM_TEST_FLAG}=1 before starting"
            )
        os.environ[ROCM_TEST_FLAG] = "1"  # read once, at import of common_utils, below
    first_import = COMMON_UTILS not in sys.modules
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ModuleNotFoundError as error:
        hint = "; install it: pip install expecttest" if error.name == "expecttest" else ""
        raise OpDbUnavailable(f"torch's OpInfo database needs the {error.name!r} package{hint}") from None
    from fade.measure.suites.ops.sized import SIZED_PROBES

    if first_import:
        gc.freeze()  # op_db is ~450k long-lived objects: keep them out of every later gc.collect (0.2 s each)
    ops = {op_id(op): op for op in op_db}
    ops.update({probe.name: probe for probe in SIZED_PROBES})
    return ops


def device_type_of(device: str) -> str:
    return device.split(":", 1)[0]


# Decorators on an OpInfo that restrict all its tests to one device type: its dtype sets for other device
# types are then not claims at all (jiterator_* are CUDA-only, sparse.mm is CPU-only).
DEVICE_ONLY_DECORATORS = {"onlyCUDA": "cuda", "onlyCPU": "cpu"}


def claimed_dtypes(op, device_type: str) -> Optional[set]:
    """The dtype names (e.g. "float32") the op claims for `device_type`; None for a probe without claims.

    Empty when a DEVICE_ONLY_DECORATORS decorator limits the op's tests to another device type.
    """
    dtypes = op.supported_dtypes(device_type)
    if dtypes is None:
        return None
    for decorator in getattr(op, "decorators", ()) or ():
        only = DEVICE_ONLY_DECORATORS.get(getattr(decorator, "__name__", ""))
        if only is not None and only != device_type:
            return set()
    return {str(dtype).removeprefix("torch.") for dtype in dtypes}


@dataclass(frozen=True)
class ComparePolicy:
    """How the device's values are compared with the CPU's for one op, dtype and device."""

    compare: bool  # False: random or uninitialized output; only "did it run" counts
    reason: Optional[str]  # why not compared
    known_mismatch: Optional[str]  # why OpInfo expects this op × dtype to misbehave here, or None
    tolerance_override: Optional[tuple]  # (atol, rtol) from a toleranceOverride/precisionOverride, or None


def compare_policy(op, op_id_text: str, device_type: str, dtype) -> ComparePolicy:
    """Read the OpInfo's decorators that apply to test_compare_cpu on this device and dtype, and FADE's own
    NOT_COMPARED_PATTERNS.

    A skip aimed at test_compare_cpu itself means the values cannot be compared (random output, undefined
    order): not compared. An expected failure, or a skip of a whole test class or of every test for this
    dtype, means the OpInfo authors know it misbehaves: compared, and a mismatch is marked known.
    Conditional skips (skipCUDAIfNoMagma, ...) are about the build, not the values, and are ignored.
    """
    from fade.analyze.ops.outcome import not_compared_reason

    reason = not_compared_reason(op_id_text)
    if reason is None and getattr(op, "has_nondeterministic_output", False):
        reason = "OpInfo marks its output nondeterministic"
    known = None
    tolerance = None
    for info in getattr(op, "decorators", ()) or ():
        if type(info).__name__ != "DecorateInfo":
            if type(info).__name__ in ("toleranceOverride", "precisionOverride"):
                tolerance = _override_tolerance(info, dtype) or tolerance
            continue
        if not info.is_active(*COMPARE_TEST, device_type, dtype, {}):
            continue
        aimed = info.test_name == COMPARE_TEST[1]
        for decorator in info.decorators:
            kind = type(decorator).__name__
            if kind in ("toleranceOverride", "precisionOverride"):
                tolerance = _override_tolerance(decorator, dtype) or tolerance
            elif getattr(decorator, "__name__", "") == "expectedFailure":
                known = known or "OpInfo expects test_compare_cpu to fail here"
            elif getattr(decorator, "__qualname__", "") == "skip.<locals>.decorator":
                why = _skip_reason(decorator)
                if aimed:
                    reason = reason or f"OpInfo skips test_compare_cpu: {why}"
                else:
                    known = known or f"OpInfo skips {info.cls_name or 'every test'} here: {why}"
    return ComparePolicy(reason is None, reason, known, tolerance)


def _override_tolerance(decorator, dtype) -> Optional[tuple]:
    value = getattr(decorator, "d", {}).get(dtype)
    if value is None:
        return None
    if isinstance(value, (int, float)):  # precisionOverride: an atol
        return (float(value), 0.0)
    return (float(value.atol), float(value.rtol))  # toleranceOverride: tol(atol, rtol)


def _skip_reason(decorator) -> str:
    """unittest.skip(reason) returns a closure over `reason`; read it back for the record."""
    try:
        reason = inspect.getclosurevars(decorator).nonlocals.get("reason")
    except (TypeError, ValueError):
        reason = None
    return str(reason) if reason else "no reason given"
