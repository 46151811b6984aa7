"""Runs tests/ocl/plug_checks.py (fade.ocl inside FADE's session, bench, ops, guard and watch) in a child process
on the first OpenCL device, or skips saying why no device is usable here."""

from pathlib import Path

from .child import assert_child_passes, ocl_child


@ocl_child(Path(__file__).with_name("plug_checks.py"))
def test_plug_checks_in_a_child_process(request):
    assert_child_passes(request)
