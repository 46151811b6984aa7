"""Runs tests/ocl/device_checks.py in a child process on the first OpenCL device (PoCL in CI), and each zoo
network of zoo_checks.py in a child process of its own, or skips saying why no device is usable here. The
children run in child.py's shared pool."""

from pathlib import Path

import pytest

from fade.measure.zoo import ZOO

from .child import assert_child_passes, ocl_child

CHECKS = Path(__file__).with_name("device_checks.py")
ZOO_CHECKS = Path(__file__).with_name("zoo_checks.py")
ZOO_TEST = "test_zoo_network_infers_and_trains_like_the_cpu_with_zero_fallbacks"
ZOO_CHILD_TIMEOUT_S = 280  # a network's child (the slowest cold, densenet161: 95 s alone on a 2-core VM)


@pytest.mark.timeout(600)  # cold on PoCL: 134 s alone on 2 cores, past 280 s beside another child and other load
@ocl_child(CHECKS, 540)
def test_device_checks_in_a_child_process(request):
    assert_child_passes(request)


@pytest.mark.parametrize("name", [pytest.param(name, marks=ocl_child(ZOO_CHECKS, ZOO_CHILD_TIMEOUT_S,
                                                                      f"{ZOO_TEST}[{name}]")) for name in ZOO])
def test_zoo_network_in_a_child_process(name, request):
    """One zoo network against the CPU (zoo_checks.py, its plan there), in a process of its own: its memory goes
    back to the system when the child exits, and a network that hangs is killed alone."""
    assert_child_passes(request)
