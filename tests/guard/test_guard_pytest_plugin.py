"""`pytest --fade-guard`: a test that syncs, copies or computes on the CPU inside a GPU region fails, naming the
line; the `fade_allow` marker lists exceptions. Inner test sessions run in this process on the stand-in device."""

import importlib.metadata
import os

import pytest

pytest_plugins = ["pytester"]

INNER_TESTS = '''
import pytest
import torch

def test_item_in_a_gpu_region():
    torch.randn(4, device="standin").sum().item()

def test_clean_gpu_work():
    (torch.randn(4, device="standin") * 2).sum()

def test_cpu_only_work():
    torch.randn(64, 64).sum().item()

@pytest.mark.fade_allow("sync")
def test_allowed_by_kind():
    torch.randn(4, device="standin").sum().item()

@pytest.mark.fade_allow("aten::_local_scalar_dense")
def test_allowed_by_op():
    torch.randn(4, device="standin").sum().item()

@pytest.mark.fade_allow("copy d2h")
def test_allowed_direction_does_not_cover_a_sync():
    torch.randn(4, device="standin").sum().item()

def test_own_failure_is_kept():
    torch.randn(4, device="standin").sum().item()
    assert False, "the test's own failure"
'''


def _plugin_args() -> list[str]:
    """`-p fade.guard.pytest_plugin` unless the pytest11 entry point already loads it."""
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    registered = any(entry.value.startswith("fade.guard.pytest_plugin")
                     for entry in importlib.metadata.entry_points(group="pytest11"))
    return [] if autoload and registered else ["-p", "fade.guard.pytest_plugin"]


def test_fade_guard_fails_offending_tests_and_honours_fade_allow(device, pytester):
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*_plugin_args(), "--fade-guard", "--fade-guard-device", device)
    result.assert_outcomes(passed=4, failed=3)
    outcomes = {report.head_line: report.outcome for report in result.reprec.getreports("pytest_runtest_logreport")
                if report.when == "call"}
    assert outcomes == {
        "test_item_in_a_gpu_region": "failed", "test_clean_gpu_work": "passed", "test_cpu_only_work": "passed",
        "test_allowed_by_kind": "passed", "test_allowed_by_op": "passed",
        "test_allowed_direction_does_not_cover_a_sync": "failed", "test_own_failure_is_kept": "failed"}
    item_line = INNER_TESTS.strip().splitlines().index(
        '    torch.randn(4, device="standin").sum().item()') + 1
    result.stdout.fnmatch_lines(["*fade.guard: 1 offence in a GPU region:*",
                                 f"*sync at test_inner.py:{item_line}: aten::_local_scalar_dense*",
                                 "*@pytest.mark.fade_allow('sync')*"])
    result.stdout.fnmatch_lines(["*the test's own failure*"])


def test_without_the_flag_nothing_is_guarded(device, pytester):
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(passed=6, failed=1)
