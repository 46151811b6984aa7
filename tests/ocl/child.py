"""Runs a checks file of tests/ocl in a child pytest process on the first OpenCL device (PoCL in CI), or says why
no device is usable here: PrivateUse1 can be named once per process, and the guard's tests name it "standin".

The child suites (device, zoo networks, graph mode, attention, CLBlast, plug) share one pool: the first of them
to run starts the child of every selected test marked `ocl_child`, CHILD_PARALLEL at a time, in the tests'
order, and each test waits for its own. A child spends much of its time building kernels on one core (PoCL
compiles each new kernel source with LLVM) while its kernels run on every core, so two overlap well on the
2-core CI machine; in the tests' order, a test's child is under way (or done) by the time the test waits, so
no test waits longer than its own child runs."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CHILD_TIMEOUT_S = 280
CHILD_PARALLEL = max(2, min(4, (os.cpu_count() or 2) // 2))


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


def run_checks(checks: Path, timeout_s: int = CHILD_TIMEOUT_S, test: str | None = None,
               keyword: str | None = None) -> subprocess.CompletedProcess:
    """pytest on `checks` (or on its one test `test`, a node id within it: "test_x[name]", or on the tests
    `keyword` selects, a -k expression) in a child process; the child is killed past `timeout_s`
    (subprocess.TimeoutExpired, with what it printed so far)."""
    target = f"{checks}::{test}" if test else str(checks)
    selection = ["-k", keyword] if keyword else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *CHILD_PLUGINS, "-x", target, *selection],
                          capture_output=True,
                          text=True, env=dict(child_environment(), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"),
                          timeout=timeout_s, cwd=ROOT)


def outcome(checks: Path, timeout_s: int = CHILD_TIMEOUT_S, test: str | None = None,
            keyword: str | None = None) -> str | None:
    """None when the checks pass in their child; else what the test fails with."""
    try:
        child = run_checks(checks, timeout_s, test, keyword)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode(errors="replace") if isinstance(timeout.stdout, bytes) else timeout.stdout
        selected = test or (f"-k '{keyword}'" if keyword else "")
        return f"{checks.name}::{selected} ran past {timeout_s} s and was killed\n{(output or '')[-4000:]}"
    return None if child.returncode == 0 else child.stdout[-6000:] + child.stderr[-2000:]


def ocl_child(checks: Path, timeout_s: int = CHILD_TIMEOUT_S, test: str | None = None, keyword: str | None = None):
    """The mark of a test whose body is `assert_child_passes(request)`: the child it waits for (`test`: one node
    of `checks`; `keyword`: a -k expression over its tests)."""
    return pytest.mark.ocl_child(checks=checks, timeout_s=timeout_s, test=test, keyword=keyword)


_runs: dict = {}


def assert_child_passes(request) -> None:
    """Skip without a device; else wait for this test's child (started with every other selected one the first
    time) and fail with its output unless it passed."""
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    node = request.node
    if node.nodeid not in _runs:
        pool = ThreadPoolExecutor(CHILD_PARALLEL, thread_name_prefix="ocl-child")
        items = [node] + [item for item in request.session.items
                          if item.get_closest_marker("ocl_child") and item.nodeid not in _runs and item is not node]
        for item in items:
            mark = item.get_closest_marker("ocl_child").kwargs
            _runs[item.nodeid] = pool.submit(outcome, mark["checks"], mark["timeout_s"], mark["test"],
                                             mark.get("keyword"))
        pool.shutdown(wait=False)
    failure = _runs[node.nodeid].result()
    assert failure is None, failure
