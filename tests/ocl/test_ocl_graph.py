"""Runs tests/ocl/graph_checks.py (fade.ocl's graph mode) in a child process on the first OpenCL device (PoCL in
CI), or skips saying why no device is usable here."""

from pathlib import Path

import pytest

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("graph_checks.py")


def test_graph_mode_in_a_child_process():
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    child = run_checks(CHECKS, 280)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
