"""Runs tests/ocl/attention_checks.py in a child process on the first OpenCL device (PoCL in CI), or skips saying
why no device is usable here."""

from pathlib import Path

import pytest

from .child import run_checks, why_no_device


def test_attention_checks_in_a_child_process():
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    child = run_checks(Path(__file__).with_name("attention_checks.py"), 240)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
