"""`pytest --fade-guard`: a test whose code under test syncs, copies or computes on the CPU inside a GPU region
fails, naming the line; the test's own lines do not count, and the `fade_allow` marker lists exceptions. Inner
test sessions run in this process on the stand-in device."""

import importlib.metadata
import os

pytest_plugins = ["pytester"]

CODE_UNDER_TEST = '''
import torch

def mean_loss(values):
    return values.mean().item()

def scaled(values):
    return values * 2
'''

INNER_TESTS = '''
import pytest
import torch

from mylib import mean_loss, scaled

def test_hidden_sync_in_the_code_under_test():
    mean_loss(torch.randn(4, device="standin"))

def test_clean_gpu_work():
    scaled(torch.randn(4, device="standin")).sum()

def test_the_tests_own_syncs_and_copies_are_fine():
    expected = torch.tensor([2.0, 4.0], device="standin")
    assert torch.equal(scaled(torch.tensor([1.0, 2.0], device="standin")), expected)
    assert scaled(torch.ones(2, device="standin")).sum().item() == 4.0

def test_cpu_only_work():
    mean_loss(torch.randn(64, 64))

@pytest.mark.fade_allow("sync")
def test_allowed_by_kind():
    mean_loss(torch.randn(4, device="standin"))

@pytest.mark.fade_allow("aten::_local_scalar_dense")
def test_allowed_by_op():
    mean_loss(torch.randn(4, device="standin"))

@pytest.mark.fade_allow("copy d2h")
def test_allowed_direction_does_not_cover_a_sync():
    mean_loss(torch.randn(4, device="standin"))

def test_own_failure_is_kept():
    mean_loss(torch.randn(4, device="standin"))
    assert False, "the test's own failure"
'''


def _plugin_args() -> list[str]:
    """`-p fade.hostwork.pytest_plugin` unless the pytest11 entry point already loads it."""
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    registered = any(entry.value.startswith("fade.hostwork.pytest_plugin")
                     for entry in importlib.metadata.entry_points(group="pytest11"))
    return [] if autoload and registered else ["-p", "fade.hostwork.pytest_plugin"]


def test_fade_guard_fails_hidden_work_and_honours_fade_allow(device, pytester):
    pytester.makepyfile(mylib=CODE_UNDER_TEST, test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*_plugin_args(), "--fade-guard", "--fade-guard-device", device)
    result.assert_outcomes(passed=5, failed=3)
    outcomes = {report.head_line: report.outcome for report in result.reprec.getreports("pytest_runtest_logreport")
                if report.when == "call"}
    assert outcomes == {
        "test_hidden_sync_in_the_code_under_test": "failed", "test_clean_gpu_work": "passed",
        "test_the_tests_own_syncs_and_copies_are_fine": "passed", "test_cpu_only_work": "passed",
        "test_allowed_by_kind": "passed", "test_allowed_by_op": "passed",
        "test_allowed_direction_does_not_cover_a_sync": "failed", "test_own_failure_is_kept": "failed"}
    item_line = CODE_UNDER_TEST.strip().splitlines().index("    return values.mean().item()") + 1
    result.stdout.fnmatch_lines(["*fade.guard: 1 offence in a GPU region:*",
                                 f"*sync at mylib.py:{item_line}: aten::_local_scalar_dense*",
                                 "*@pytest.mark.fade_allow('sync')*"])
    result.stdout.fnmatch_lines(["*the test's own failure*"])


def test_without_the_flag_nothing_is_guarded(device, pytester):
    pytester.makepyfile(mylib=CODE_UNDER_TEST, test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(passed=7, failed=1)
