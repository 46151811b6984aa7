"""Runs tests/ocl/attention_checks.py in a child process on the first OpenCL device (PoCL in CI), or skips saying
why no device is usable here."""

from pathlib import Path

from .child import assert_child_passes, ocl_child


@ocl_child(Path(__file__).with_name("attention_checks.py"), 240)
def test_attention_checks_in_a_child_process(request):
    assert_child_passes(request)
