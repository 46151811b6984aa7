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


# device_checks.py in two children of about equal time (cold on PoCL, 2 cores: ~150 s each alone): its GEMM,
# convolution and generation checks, whose kernels take longest to build, and the rest. Whole, it took ~300 s
# alone and ran past 540 s in a CI rehearsal beside the rest of the suite and another child
HEAVY_CHECKS = "gemm or conv or winograd or clblast or llama"


@pytest.mark.timeout(960)
@pytest.mark.parametrize("part", [pytest.param("gemm-conv", marks=ocl_child(CHECKS, 900, keyword=HEAVY_CHECKS)),
                                  pytest.param("rest", marks=ocl_child(CHECKS, 900, keyword=f"not ({HEAVY_CHECKS})"))])
def test_device_checks_in_a_child_process(part, request):
    assert_child_passes(request)


@pytest.mark.parametrize("name", [pytest.param(name, marks=ocl_child(ZOO_CHECKS, ZOO_CHILD_TIMEOUT_S,
                                                                      f"{ZOO_TEST}[{name}]")) for name in ZOO])
def test_zoo_network_in_a_child_process(name, request):
    """One zoo network against the CPU (zoo_checks.py, its plan there), in a process of its own: its memory goes
    back to the system when the child exits, and a network that hangs is killed alone."""
    assert_child_passes(request)
