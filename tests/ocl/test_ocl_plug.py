"""Runs tests/ocl/plug_checks.py (fade.ocl inside FADE's session, bench, ops, guard and watch) in a child process
on the first OpenCL device, or skips saying why no device is usable here."""

from pathlib import Path

import pytest

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("plug_checks.py")


def test_plug_checks_in_a_child_process():
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    child = run_checks(CHECKS)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
