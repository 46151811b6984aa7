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


def test_docs_settings_table_is_the_settings_module_table():
    """docs/ocl.md shows fade.ocl.settings.SETTINGS as markdown_table() writes it: a setting added, renamed or
    changed in one place and not the other fails here."""
    from fade.ocl import settings

    text = (Path(__file__).parents[2] / "docs" / "ocl.md").read_text(encoding="utf-8")
    start = text.index("<!-- settings table: fade.ocl.settings.markdown_table() -->\n")
    shown = text[text.index("\n", start) + 1:text.index("<!-- end settings table -->")]
    assert shown == settings.markdown_table()


def test_every_fade_ocl_variable_the_package_names_is_in_the_settings_table():
    """No FADE_OCL_* variable is read outside the table: every name in src/fade/ocl is one of its rows."""
    import re

    from fade.ocl import settings

    source = Path(__file__).parents[2] / "src" / "fade" / "ocl"
    named = {name for path in source.rglob("*.py") for name in re.findall(r"FADE_OCL_[A-Z0-9_]+", path.read_text())}
    assert named <= set(settings.BY_NAME), named - set(settings.BY_NAME)
    assert {row.name for row in settings.SETTINGS} <= named


def test_an_unknown_setting_value_warns_and_keeps_the_default():
    from fade.ocl import settings

    with pytest.warns(UserWarning, match="FADE_OCL_CLBLAST_TUNED='yes' is not one of 0, 1"):
        assert settings.setting("FADE_OCL_CLBLAST_TUNED", {"FADE_OCL_CLBLAST_TUNED": "yes"}) == "1"
    assert settings.setting("FADE_OCL_CLBLAST_TUNED", {"FADE_OCL_CLBLAST_TUNED": "0"}) == "0"
    assert settings.setting("FADE_OCL_CONV_WINOGRAD", {}) == "auto"


def test_the_queue_is_flushed_every_few_commands_so_the_device_starts_while_the_host_enqueues():
    """Device.enqueued (FADE_OCL_FLUSH_EVERY): a clFlush after every FLUSH_EVERY commands, none with 0."""
    from fade.ocl import runtime

    class Queue:
        flushes = 0

        def flush(self):
            Queue.flushes += 1

    dev = runtime.Device.__new__(runtime.Device)
    dev.queue, dev.unflushed = Queue(), 0
    for every, commands, flushes in ((8, 20, 2), (1, 3, 3), (0, 50, 0)):
        Queue.flushes, dev.unflushed = 0, 0
        original = runtime.FLUSH_EVERY
        runtime.FLUSH_EVERY = every
        try:
            for _ in range(commands):
                dev.enqueued()
        finally:
            runtime.FLUSH_EVERY = original
        assert Queue.flushes == flushes
