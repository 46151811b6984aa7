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


# the children load pytest-timeout alone (the suite's --timeout and the checks' marks): hypothesis's and
# pytest-benchmark's plugins cost each child ~1.4 s of CPU at start, and the zoo starts seventeen
CHILD_PLUGINS = ["-p", "no:cacheprovider", "-p", "pytest_timeout"]


def run_checks(checks: Path, timeout_s: int = CHILD_TIMEOUT_S, test: str | None = None) -> subprocess.CompletedProcess:
    """pytest on `checks` (or on its one test `test`, a node id within it: "test_x[name]") in a child process; the
    child is killed past `timeout_s` (subprocess.TimeoutExpired, with what it printed so far)."""
    target = f"{checks}::{test}" if test else str(checks)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *CHILD_PLUGINS, "-x", target], capture_output=True,
                          text=True, env=dict(child_environment(), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"),
                          timeout=timeout_s, cwd=ROOT)
