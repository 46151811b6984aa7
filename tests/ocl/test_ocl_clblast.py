"""Runs tests/ocl/clblast_checks.py (CLBlast's parameters overridden, persisted and applied; the GEMM recorder) in a
child process on the first OpenCL device (PoCL in CI), or skips saying why no device or CLBlast is usable here."""

from pathlib import Path

import pytest

from .child import assert_child_passes, ocl_child, why_no_device


@ocl_child(Path(__file__).with_name("clblast_checks.py"), 240)
def test_clblast_tuning_checks_in_a_child_process(request):
    if why_no_device() is None:
        try:
            from fade.ocl import runtime

            runtime.clblast()
        except Exception as error:  # noqa: BLE001 - any reason is the skip's reason
            pytest.skip(f"no CLBlast: {error}")
    assert_child_passes(request)
