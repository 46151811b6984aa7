"""Runs tests/ocl/device_checks.py and zoo_checks.py, each in a child process on the first OpenCL device (PoCL
in CI), or skips saying why no device is usable here."""

from pathlib import Path

import pytest

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("device_checks.py")
ZOO_CHECKS = Path(__file__).with_name("zoo_checks.py")


def _passes(checks: Path, timeout_s: int) -> None:
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    child = run_checks(checks, timeout_s)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]


def test_device_checks_in_a_child_process():
    _passes(CHECKS, 280)


def test_zoo_networks_in_a_child_process():
    """The seven zoo networks against the CPU (zoo_checks.py): about 3 minutes on PoCL on 2 cores."""
    _passes(ZOO_CHECKS, 1500)
