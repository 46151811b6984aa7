"""pytest plugin: `pytest --fade-guard` fails a test whose code under test computed on the CPU, copied between
host and device, synced or mixed devices inside a GPU region.

A test body (not its fixtures) runs under a quiet fade.guard. A test counts as a GPU region once it touches
an accelerator tensor; memory a fixture left on the GPU does not make a CPU-only test one. Only hidden work
fails a test: an offence charged to a line of the test file itself (or a conftest.py), such as building an
input with torch.tensor(..., device=...) or asserting on `.item()`, is the test's own doing. Exceptions in
the code under test are listed per test with a marker:

    @pytest.mark.fade_allow("sync")                       # a kind: sync, copy, cpu_compute, device_mix, ...
    @pytest.mark.fade_allow("copy d2h", "aten::nonzero")  # a kind with a copy direction, or op names

Registered through the `pytest11` entry point, so it is loaded (not active) wherever FADE is installed;
importing it does not import torch.
"""

from __future__ import annotations

import os

import pytest

ALLOW_MARKER = "fade_allow"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("fade", "fade.guard")
    group.addoption("--fade-guard", action="store_true", default=False,
                    help="fail tests whose code under test does CPU compute, host<->device copies, syncs or "
                         "device mixing while accelerator tensors are in use")
    group.addoption("--fade-guard-device", default=None, metavar="TYPE",
                    help="the accelerator's device type for --fade-guard (default: torch's current accelerator)")


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{ALLOW_MARKER}(*allowed): fade.guard offences this test may commit: kinds (sync, copy, "
                   "cpu_compute, device_mix, backend_fallback), 'copy h2d'-style kind and direction, or op "
                   "names such as 'aten::nonzero'")


def allowed_names(item) -> set[str]:
    names: set[str] = set()
    for marker in item.iter_markers(name=ALLOW_MARKER):
        names.update(str(arg) for arg in marker.args)
    return names


def is_allowed(record, allowed: set[str]) -> bool:
    """A record is allowed by its kind, its kind and direction ('copy h2d'), or when all its ops are listed."""
    if record.kind in allowed or record.what in allowed:
        return True
    return bool(record.ops) and all(op in allowed or op.split(".")[0] in allowed for op in record.ops)


def is_test_code(file: str, test_file: str) -> bool:
    """Lines of the test module or of a conftest.py: the test's own setup and assertions, not hidden work."""
    return os.path.abspath(file) == os.path.abspath(test_file) or os.path.basename(file) == "conftest.py"


def failure_message(records: list) -> str:
    count = sum(record.count for record in records)
    lines = [f"fade.guard: {count} offence{'s' * (count != 1)} in a GPU region:"]
    for record in records:
        ops = ", ".join(f"{name} ×{count}" for name, count in record.ops.items())
        lines.append(f"  {record.what} at {record.site}: {ops}" + (" (in backward)" if record.in_backward else ""))
        if record.code:
            lines.append(f"      {record.code}")
    kinds = sorted({record.what for record in records})
    lines.append(f"allow them with @pytest.mark.{ALLOW_MARKER}({', '.join(repr(kind) for kind in kinds)})")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not item.config.getoption("fade_guard"):
        return (yield)
    from fade.hostwork.session import Guard

    watched = Guard("warn", item.config.getoption("fade_guard_device"), quiet=True, memory_counts_as_use=False)
    with watched:
        result = yield  # a failing test raises here and keeps its own failure
    allowed = allowed_names(item)
    offences = [record for record in watched.report.records
                if not is_allowed(record, allowed) and not is_test_code(record.file, str(item.path))]
    if offences:
        pytest.fail(failure_message(offences), pytrace=False)
    return result
