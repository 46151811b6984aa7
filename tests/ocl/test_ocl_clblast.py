"""Runs tests/ocl/clblast_checks.py (CLBlast's parameters overridden, persisted and applied; the GEMM recorder) in a
child process on the first OpenCL device (PoCL in CI), or skips saying why no device or CLBlast is usable here."""

from pathlib import Path

import pytest

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("clblast_checks.py")


def test_clblast_tuning_checks_in_a_child_process():
    reason = why_no_device()
    if reason is None:
        try:
            from fade.ocl import runtime

            runtime.clblast()
        except Exception as error:  # noqa: BLE001 - any reason is the skip's reason
            reason = f"no CLBlast: {error}"
    if reason:
        pytest.skip(reason)
    child = run_checks(CHECKS, 240)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
