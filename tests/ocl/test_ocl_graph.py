"""Runs tests/ocl/graph_checks.py (fade.ocl's graph mode) in a child process on the first OpenCL device (PoCL in
CI), or skips saying why no device is usable here."""

from pathlib import Path

import pytest

from .child import assert_child_passes, ocl_child


@pytest.mark.timeout(600)  # cold on PoCL beside another child: the replay checks train six steps twice
@ocl_child(Path(__file__).with_name("graph_checks.py"), 540)
def test_graph_mode_in_a_child_process(request):
    assert_child_passes(request)
