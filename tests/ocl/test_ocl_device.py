"""Runs tests/ocl/device_checks.py in a child process on the first OpenCL device (PoCL in CI), or skips saying
why no device is usable here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("device_checks.py")


def _why_no_device() -> str | None:
    try:
        from fade.ocl import runtime

        runtime.devices()
    except Exception as error:  # noqa: BLE001 - any reason is the skip's reason
        return f"no OpenCL device: {error}"
    return None


def test_device_checks_in_a_child_process():
    reason = _why_no_device()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[2] / "src"),
                                                                    os.environ.get("PYTHONPATH")])))
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:fade_guard",
                            "-x", str(CHECKS)], capture_output=True, text=True, env=env, timeout=280)
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-2000:]
