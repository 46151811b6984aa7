"""How FADE treats an `ocl` device without one: peaks by name, dtype and variant reasons, the micro plan, the
fallback count and note, the ops `fallback` class and coverage, the guard's fallback listener, the doctor's
OpenCL view. Needs no OpenCL (the device itself: test_ocl_plug.py)."""

import sys
import types

import pytest

import fade
from fade.analyze.doctor import diagnose
from fade.analyze.facts import opencl_missing
from fade.analyze.ops.gap import coverage_summary, sweep_summary
from fade.analyze.ops.outcome import WORKS, class_of_exception, worst_sample_class
from fade.errors import FadeUsageError
from fade.measure import ocldevice
from fade.measure.step.config import StepConfig
from fade.measure.suites.micro.suite import build_catalog, select_cases
from fade.measure.suites.models.variants import parse_variant, skip_reason
from fade.report.console import make_console, render_opencl
from fade.results import fallback_note

OCL_DTYPES = {  # ocldevice.ocl_dtypes of a device with cl_khr_fp64 and without cl_khr_fp16 (PoCL, NVIDIA)
    "fp32": None, "fp64": None, "fp16": "lacks cl_khr_fp16", "bf16": "computes it through the CPU fallback",
    "tf32": "tf32 is a CUDA/ROCm tensor-core mode; OpenCL has none", "fp8": "no tensor cores",
}


def test_peaks_come_from_the_table_by_opencl_name_fp32_and_bandwidth_only():
    peaks, note = ocldevice.peaks_for_ocl("NVIDIA H100 80GB HBM3")  # NVIDIA's OpenCL CL_DEVICE_NAME on the H100
    assert peaks["tflops"] == {"fp32": 66.9} and peaks["bandwidth_gbs"] == 3350 and peaks["basis"] == "table"
    assert "matched by name" in note and peaks["source"]
    none, why = ocldevice.peaks_for_ocl("pthread-skylake-avx512-AMD EPYC")  # PoCL
    assert none is None and "no spec-table row" in why


def test_fallback_delta_counts_only_new_calls():
    before = {"aten::cumsum.out": 2, "aten::cat.out": 1}
    after = {"aten::cumsum.out": 5, "aten::cat.out": 1, "aten::sort.values": 1}
    assert ocldevice.fallback_delta(before, after) == {"total": 4, "ops": {"aten::cumsum.out": 3,
                                                                          "aten::sort.values": 1}}


def test_unusable_ocl_requests_are_one_usage_line(monkeypatch):
    with pytest.raises(FadeUsageError, match="use ocl or ocl:N"):
        ocldevice.resolve_ocl("ocl:x")
    fake = types.ModuleType("fade.ocl")

    def no_platform():
        raise RuntimeError("no OpenCL platform found (is an ICD installed under /etc/OpenCL/vendors?)\ndetail")

    fake.devices = no_platform
    monkeypatch.setitem(sys.modules, "fade.ocl", fake)  # `import fade.ocl as ocl` reads the package attribute
    monkeypatch.setattr(fade, "ocl", fake, raising=False)  # first: this must never register PrivateUse1 here
    with pytest.raises(FadeUsageError) as caught:
        ocldevice.resolve_ocl("ocl")
    assert str(caught.value) == ("device 'ocl' is not available here: no OpenCL platform found (is an ICD "
                                 "installed under /etc/OpenCL/vendors?)")


def test_micro_plan_for_ocl_runs_fp32_and_says_why_other_dtypes_do_not():
    catalog = build_catalog("ocl:0", quick=True)
    ids = {case.case_id for case in catalog}
    assert {"gemm/fp32/256x256x256", "launch/eager", "launch/sync", "memory/copy/4MiB",
            "conv/fp32/nchw/fwd/layer4.1.conv2/n2", "sdpa/fp32/math/b1h8s512d64"} <= ids
    assert "launch/graph" not in ids  # CUDA graphs are CUDA's
    selected, left_out = select_cases(catalog, device="ocl:0", dtype_support=OCL_DTYPES)
    assert all(case.dtype in (None, "fp32") for case in selected)
    assert left_out[OCL_DTYPES["bf16"]] > 0 and left_out[OCL_DTYPES["tf32"]] > 0


@pytest.mark.parametrize("variant, reason", [
    ("tf32", "tf32: tf32 is a CUDA/ROCm tensor-core mode"),
    ("amp-bf16+channels-last", "amp-bf16: computes it through the CPU fallback"),
    ("compile=reduce-overhead", "is an Inductor mode: on fade.ocl, compile=default runs its graph mode"),
    ("sdpa_backend=flash", "it changes nothing on fade.ocl's OpenCL device"),
])
def test_model_variants_that_do_not_apply_on_ocl_are_skipped_with_reasons(variant, reason):
    assert reason in skip_reason(parse_variant(variant), "ocl:0", OCL_DTYPES, "train")


def test_fp32_default_and_channels_last_run_on_ocl():
    for variant in ("fp32", "default", "channels-last", "compile", "fp32+compile"):  # compile: the graph mode
        assert skip_reason(parse_variant(variant), "ocl:0", OCL_DTYPES, "train") is None
    assert skip_reason(StepConfig(), "ocl:0", OCL_DTYPES) is None


def test_summary_note_names_the_ops_that_fell_back():
    extra = {"ocl_fallbacks": {"total": 9, "ops": {"aten::a": 5, "aten::b": 2, "aten::c": 1, "aten::d": 1}}}
    assert fallback_note(extra) == "ocl fallbacks: 9 (aten::a 5, aten::b 2, aten::c 1, ...)"
    assert fallback_note({"ocl_fallbacks": {"total": 0, "ops": {}}}) == "ocl fallbacks: 0"
    assert fallback_note({}) is None  # other devices: no note
    timed = {"ocl_fallbacks": {"total": 2, "ops": {"aten::cat.out": 2}}, "ocl_fallbacks_timed": {"total": 0, "ops": {}}}
    assert fallback_note(timed) == "ocl fallbacks: 2 (aten::cat.out 2), 0 in the timed steps"


def test_fallback_class_works_but_loses_to_a_mismatch_and_is_not_a_finding():
    assert "fallback" in WORKS
    assert worst_sample_class(["ok", "fallback"]) == "fallback"
    assert worst_sample_class(["fallback", "mismatch"]) == "mismatch"
    message = "OclError: ocl:0 (PoCL) lacks the OpenCL extension cl_khr_fp16: float16 tensors cannot live there"
    assert class_of_exception("OclError", message, claimed=True) == "unsupported"


def row(op, dtype, op_class, fallback_ops=None):
    return {"op": op, "dtype": dtype, "family": "pointwise", "class": op_class, "claim_finding": None,
            "curated": [], "message": None, "fallback_ops": fallback_ops or {}}


def test_coverage_counts_native_fallback_and_mismatch_per_dtype():
    rows = [row("add", "float32", "ok"), row("cumsum", "float32", "fallback", {"aten::cumsum.out": 3}),
            row("cummax", "float32", "fallback", {"aten::cummax": 1, "aten::cumsum.out": 1}),
            row("sub", "float32", "mismatch"), row("sort", "int64", "error"), row("mul", "int64", "slow")]
    coverage = coverage_summary(rows)
    assert coverage["per_dtype"]["float32"] == {"native": 1, "fallback": 2, "mismatch": 1, "failed": 0,
                                                "untested": 0}
    assert coverage["per_dtype"]["int64"]["native"] == 1 and coverage["per_dtype"]["int64"]["failed"] == 1
    assert coverage["top_fallback_ops"][0] == ["aten::cumsum.out", 2, 4] and coverage["fallback_aten_ops"] == 2
    assert all(item["class"] != "fallback" for item in sweep_summary(rows)["findings"])


def test_guard_hears_a_listening_backend_once_per_process(monkeypatch):
    from fade.hostwork import hooks

    listeners = []
    fake = types.ModuleType("fake_backend")
    fake.add_fallback_listener = listeners.append
    fake.remove_fallback_listener = listeners.remove
    monkeypatch.setitem(sys.modules, "fake_backend", fake)
    monkeypatch.setitem(hooks.FALLBACK_LISTENER_MODULES, "fakedev", "fake_backend")
    hooks.install_fallback_listener("fakedev")
    hooks.install_fallback_listener("fakedev")
    assert len(listeners) == 1
    heard = []
    monkeypatch.setattr(hooks, "_route", lambda kind, text: heard.append((kind, text)) or True)
    listeners[0]("aten::cumsum.out")
    assert heard == [("backend_fallback", "'aten::cumsum.out' ran on the CPU: the backend has no kernel for it")]
    hooks.remove_fallback_listener("fakedev")
    hooks.remove_fallback_listener("fakedev")
    assert listeners == []
    hooks.install_fallback_listener("cuda")  # a device type without a listener: nothing to do


def test_doctor_lists_opencl_devices_and_what_is_missing(fixture_snapshot):
    report = diagnose(fixture_snapshot("nvidia_h100_opencl_registered.json"))
    section = report["opencl"]
    assert section["platforms"][0]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert section["missing"] == ["no cl_khr_fp16 on NVIDIA H100 80GB HBM3: float32 only there"]
    console = make_console(record=True, width=160)
    render_opencl(section, console)
    text = console.export_text()
    assert "NVIDIA H100 80GB HBM3" in text and "OpenCL 3.0 CUDA" in text and "no cl_khr_fp16" in text
    assert diagnose(fixture_snapshot("nvidia_h100_cu130_healthy.json"))["opencl"] is None  # not collected


def test_opencl_missing_names_each_absent_piece():
    empty = {"icd_files": [], "loader": False, "clblast": False, "pyopencl": False, "platforms": [],
             "error": "neither pyopencl nor clinfo is installed"}
    missing = " | ".join(opencl_missing(empty))
    for piece in ("no ICD registered", "no OpenCL loader", "pyopencl not installed", "CLBlast not installed",
                  "no OpenCL platform or device (neither pyopencl nor clinfo is installed)"):
        assert piece in missing
