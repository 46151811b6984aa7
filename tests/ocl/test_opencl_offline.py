"""fade.ocl and the OpenCL collector without an OpenCL device: clinfo parsing, the snapshot section's
validation, the doctor's facts, and the one-line error when no platform exists."""

import copy
import json
from pathlib import Path

import pytest

from fade.analyze.facts import opencl_facts
from fade.collect import opencl
from fade.collect.snapshot import validate_snapshot
from fade.errors import FadeUsageError

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_clinfo_raw_parses_platform_and_device():
    platforms = opencl.parse_clinfo_raw((FIXTURES / "opencl" / "clinfo_raw_pocl.txt").read_text())
    assert [p["name"] for p in platforms] == ["Portable Computing Language"]
    device = platforms[0]["devices"][0]
    assert device["kind"] == "cpu" and device["compute_units"] == 2 and device["clock_mhz"] == 2596
    assert device["fp64"] is True and device["fp16"] is False and device["global_memory_bytes"] > 0


def test_clinfo_without_platforms_gives_none():
    assert opencl.parse_clinfo_raw("Number of platforms                               0\n") == []


def _snapshot(name):
    return json.loads((FIXTURES / "snapshots" / f"{name}.json").read_text())


def test_opencl_section_validates_and_bad_types_are_one_line():
    snap = _snapshot("nvidia_h100_opencl_registered")
    validate_snapshot(snap)
    broken = copy.deepcopy(snap)
    broken["opencl"]["platforms"][0]["devices"][0]["compute_units"] = "132"
    with pytest.raises(FadeUsageError, match=r"opencl\.platforms\[0\]\.devices\[0\]\.compute_units must be int"):
        validate_snapshot(broken)
    old = _snapshot("nvidia_h100_cu130_healthy")  # no opencl section: still valid (schema stays compatible)
    validate_snapshot(old)


def test_opencl_facts():
    facts = opencl_facts(_snapshot("nvidia_h100_opencl_registered")["opencl"])
    assert facts["opencl_gpu_without_fp16"] and facts["opencl_fp16_missing_device"] == "NVIDIA H100 80GB HBM3"
    assert facts["opencl_no_icd"] is False and facts["opencl_icd_but_no_platform"] is False
    assert opencl_facts(None) == {}


def test_collector_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(opencl, "_has_pyopencl", lambda: False)
    monkeypatch.setattr(opencl.shutil, "which", lambda name: None)
    section = opencl.collect_opencl(root=str(tmp_path))
    assert section["icd_files"] == [] and section["platforms"] == []
    assert section["error"] == "neither pyopencl nor clinfo is installed"


def test_no_opencl_platform_is_one_clear_error(monkeypatch):
    cl = pytest.importorskip("pyopencl")
    from fade.ocl import runtime

    def no_platform():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    runtime._cl_devices.cache_clear()
    monkeypatch.setattr(cl, "get_platforms", no_platform)
    try:
        with pytest.raises(runtime.OclError, match=r"^no OpenCL platform found .*PLATFORM_NOT_FOUND_KHR"):
            runtime.devices()
    finally:
        runtime._cl_devices.cache_clear()
