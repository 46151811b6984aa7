"""Runs a checks file of tests/ocl in a child pytest process on the first OpenCL device (PoCL in CI), or says why
no device is usable here: PrivateUse1 can be named once per process, and the guard's tests name it "standin"."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
CHILD_TIMEOUT_S = 280


def why_no_device() -> str | None:
    try:
        from fade.ocl import runtime

        runtime.devices()
    except Exception as error:  # noqa: BLE001 - any reason is the skip's reason
        return f"no OpenCL device: {error}"
    return None


def child_environment() -> dict:
    """This environment with the worktree's src and tests/ocl (the checks' helper modules) on PYTHONPATH."""
    paths = [str(ROOT / "src"), str(Path(__file__).parent), os.environ.get("PYTHONPATH")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))


def run_checks(checks: Path, timeout_s: int = CHILD_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:fade_guard",
                           "-x", str(checks)], capture_output=True, text=True, env=child_environment(),
                          timeout=timeout_s, cwd=ROOT)
