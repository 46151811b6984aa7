"""Runs a checks file of tests/ocl in a child pytest process on the first OpenCL device (PoCL in CI), or says why
no device is usable here: PrivateUse1 can be named once per process, and the guard's tests name it "standin".

The child suites (device, zoo networks, graph mode, attention, CLBlast, plug) share one pool, started when
collection ends (conftest.py: the tests marked `ocl_child` also run last): the child of every selected test
marked `ocl_child`, CHILD_PARALLEL at a time, the longest first (start_children), while the rest of the suite
runs; each of those tests waits for its own. A child spends much of its time building kernels on one core (PoCL compiles each
new kernel source with LLVM) while its kernels run on every core, so they overlap well with each other and with
the other tests on the 2-core CI machine (the children were ~70% of the suite's time, and nothing else ran
beside them); they run at the lowest priority (CHILD_NICE), so the suite's own tests, some of which time host
work, keep their cores. Children still running when the session ends (a -x stop, Ctrl-C) are killed."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CHILD_TIMEOUT_S = 280
CHILD_PARALLEL = max(2, min(4, (os.cpu_count() or 2) // 2))
# the children run at the lowest priority: beside them, benchmarks/llm_reference.py's decode time (a difference of
# two host timings) went unresolved in the suite's tests/llm once (CI rehearsal on the 2-core VM)
CHILD_NICE = 19


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


_live: set = set()  # the children running now (killed by stop_children)
_stopping = False


def run_checks(checks: Path, timeout_s: int = CHILD_TIMEOUT_S, test: str | None = None,
               keyword: str | None = None) -> subprocess.CompletedProcess:
    """pytest on `checks` (or on its one test `test`, a node id within it: "test_x[name]", or on the tests
    `keyword` selects, a -k expression) in a child process; the child is killed past `timeout_s`
    (subprocess.TimeoutExpired, with what it printed so far)."""
    target = f"{checks}::{test}" if test else str(checks)
    command = [sys.executable, "-m", "pytest", "-q", *CHILD_PLUGINS, "-x", target, *(["-k", keyword] if keyword else [])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env=dict(child_environment(), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    if hasattr(os, "setpriority"):  # behind the suite's own tests, some of which time work on the host
        os.setpriority(os.PRIO_PROCESS, process.pid, CHILD_NICE)
    _live.add(process)
    try:
        if _stopping:
            process.kill()
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise subprocess.TimeoutExpired(command, timeout_s, output=out) from None
    finally:
        _live.discard(process)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


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
_pools: list = []


def start_children(items) -> None:
    """Start the child of every test among `items` marked `ocl_child` that has none yet, CHILD_PARALLEL at a
    time, the longest first by their timeouts (the device checks and the graph mode's, then the rest in their
    order: no long child left to start last), nothing without a usable device (those tests skip)."""
    marked = [item for item in items if item.get_closest_marker("ocl_child") and item.nodeid not in _runs]
    if not marked or why_no_device():
        return
    marked.sort(key=lambda item: -item.get_closest_marker("ocl_child").kwargs["timeout_s"])
    pool = ThreadPoolExecutor(CHILD_PARALLEL, thread_name_prefix="ocl-child")
    for item in marked:
        mark = item.get_closest_marker("ocl_child").kwargs
        _runs[item.nodeid] = pool.submit(outcome, mark["checks"], mark["timeout_s"], mark["test"], mark.get("keyword"))
    pool.shutdown(wait=False)
    _pools.append(pool)


def stop_children() -> None:
    """Cancel the children not started and kill those running (the session is over)."""
    global _stopping
    _stopping = True
    for pool in _pools:
        pool.shutdown(wait=False, cancel_futures=True)
    for process in list(_live):
        process.kill()


def assert_child_passes(request) -> None:
    """Skip without a device; else wait for this test's child (started when collection ended, or now with every
    other selected one) and fail with its output unless it passed."""
    reason = why_no_device()
    if reason:
        pytest.skip(reason)
    node = request.node
    if node.nodeid not in _runs:  # (the node is among the session's items: started once, with the others)
        start_children(request.session.items)
    failure = _runs[node.nodeid].result()
    assert failure is None, failure
