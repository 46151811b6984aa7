"""Runs tests/ocl/device_checks.py in a child process on the first OpenCL device (PoCL in CI), and each zoo
network of zoo_checks.py in a child process of its own, or skips saying why no device is usable here."""

import subprocess
from pathlib import Path

import pytest

from fade.measure.zoo import ZOO

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("device_checks.py")
ZOO_CHECKS = Path(__file__).with_name("zoo_checks.py")
ZOO_TEST = "test_zoo_network_infers_and_trains_like_the_cpu_with_zero_fallbacks"
ZOO_CHILD_TIMEOUT_S = 240  # a network's child, within the suite's 300 s a test (the slowest, vgg16: 37 s on PoCL)


def _passes(checks: Path, timeout_s: int, test: str | None = None) -> None:
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    try:
        child = run_checks(checks, timeout_s, test)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode(errors="replace") if isinstance(timeout.stdout, bytes) else timeout.stdout
        pytest.fail(f"{checks.name}::{test or ''} ran past {timeout_s} s and was killed\n{(output or '')[-4000:]}")
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]


def test_device_checks_in_a_child_process():
    _passes(CHECKS, 280)


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_network_in_a_child_process(name):
    """One zoo network against the CPU (zoo_checks.py, its plan there), in a process of its own: its memory goes
    back to the system when the child exits, and a network that hangs is killed alone."""
    _passes(ZOO_CHECKS, ZOO_CHILD_TIMEOUT_S, f"{ZOO_TEST}[{name}]")
