"""Runs tests/ocl/device_checks.py and zoo_checks.py, each in a child process on the first OpenCL device (PoCL
in CI), or skips saying why no device is usable here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("device_checks.py")
ZOO_CHECKS = Path(__file__).with_name("zoo_checks.py")


def _why_no_device() -> str | None:
    try:
        from fade.ocl import runtime

        runtime.devices()
    except Exception as error:  # noqa: BLE001 - any reason is the skip's reason
        return f"no OpenCL device: {error}"
    return None


def _run_in_a_child(checks: Path, timeout_s: int) -> None:
    reason = _why_no_device()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2] / "src"),
                                                                    os.environ.get("PYTHONPATH")])))
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:fade_guard",
                            "-x", str(checks)], capture_output=True, text=True, env=env, timeout=timeout_s)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]


def test_device_checks_in_a_child_process():
    _run_in_a_child(CHECKS, 280)


def test_zoo_networks_in_a_child_process():
    """The seven zoo networks against the CPU (zoo_checks.py): about 3 minutes on PoCL on 2 cores."""
    _run_in_a_child(ZOO_CHECKS, 1500)
