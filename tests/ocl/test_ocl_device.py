"""Runs tests/ocl/device_checks.py in a child process on the first OpenCL device (PoCL in CI), and each zoo
network of zoo_checks.py in a child process of its own, or skips saying why no device is usable here."""

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fade.measure.zoo import ZOO

from .child import run_checks, why_no_device

CHECKS = Path(__file__).with_name("device_checks.py")
ZOO_CHECKS = Path(__file__).with_name("zoo_checks.py")
ZOO_TEST = "test_zoo_network_infers_and_trains_like_the_cpu_with_zero_fallbacks"
ZOO_CHILD_TIMEOUT_S = 280  # a network's child (the slowest cold, densenet161: 95 s alone on a 2-core VM)
# zoo children at once: a child spends much of its time building kernels on one core (PoCL compiles each new
# kernel source with LLVM) while its kernels run on every core, so two overlap well on the 2-core CI machine
ZOO_PARALLEL = max(2, min(4, (os.cpu_count() or 2) // 2))


def _outcome(checks: Path, timeout_s: int, test: str | None = None) -> str | None:
    """None when the checks pass in their child; else what to fail with."""
    try:
        child = run_checks(checks, timeout_s, test)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode(errors="replace") if isinstance(timeout.stdout, bytes) else timeout.stdout
        return f"{checks.name}::{test or ''} ran past {timeout_s} s and was killed\n{(output or '')[-4000:]}"
    return None if child.returncode == 0 else child.stdout[-6000:] + child.stderr[-2000:]


def _passes(checks: Path, timeout_s: int, test: str | None = None) -> None:
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    failure = _outcome(checks, timeout_s, test)
    assert failure is None, failure


def test_device_checks_in_a_child_process():
    _passes(CHECKS, 280)


_zoo_runs: dict = {}


def _zoo_run(name: str, session):
    """The child of zoo network `name`; the first call starts the child of every network selected in this
    session, ZOO_PARALLEL at a time, in the tests' order, so each test mostly waits for a child under way."""
    if name not in _zoo_runs:
        selected = [item.callspec.params["name"] for item in session.items
                    if getattr(item, "originalname", None) == "test_zoo_network_in_a_child_process"]
        pool = ThreadPoolExecutor(ZOO_PARALLEL, thread_name_prefix="zoo-child")
        for other in [name] + [n for n in selected if n not in _zoo_runs and n != name]:
            _zoo_runs[other] = pool.submit(_outcome, ZOO_CHECKS, ZOO_CHILD_TIMEOUT_S, f"{ZOO_TEST}[{other}]")
        pool.shutdown(wait=False)
    return _zoo_runs[name]


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_network_in_a_child_process(name, request):
    """One zoo network against the CPU (zoo_checks.py, its plan there), in a process of its own: its memory goes
    back to the system when the child exits, and a network that hangs is killed alone."""
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    failure = _zoo_run(name, request.session).result()
    assert failure is None, failure
