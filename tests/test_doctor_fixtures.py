"""The doctor on recorded snapshots of real machines (tests/fixtures/snapshots/README.md cites each dump).

Each case states the situation, the findings that must appear (fail and warn exactly; info as a subset)
and the exact fix line a user would copy.
"""

import pytest

from fade.analyze.doctor import diagnose, exit_code
from fade.cli import main


def _report(fixture_snapshot, name):
    return diagnose(fixture_snapshot(name + ".json"))


def _ids(report, *severities):
    return {f["id"] for f in report["findings"] if f["severity"] in severities}


def _fix(report, rule_id):
    return next(f["fix"] for f in report["findings"] if f["id"] == rule_id)


CASES = {
    # fixture: (fail+warn ids exactly, info ids that must be among the infos)
    "rdna2_rx6800xt_rocm62_healthy": (set(), {"PERF001", "PERF002", "PERF003"}),
    "rdna2_rx6750xt_gfx1031_override_healthy": (set(), {"PERF001"}),
    "rdna2_w6600_gfx1032_no_override_missing_arch": ({"ARCH001"}, set()),
    "rdna3_rx7900xtx_rocm62_healthy": (set(), {"PERF004"}),
    "rdna3_igpu_780m_gfx1103_override_11_0_0": ({"ARCH004"}, set()),
    "rdna4_rx9070xt_gfx1201_wheel_lacks_arch": ({"ARCH002", "MIOPEN003"}, set()),
    "cdna2_mi250x_one_oam_two_gcds": (set(), set()),
    "cdna3_mi300x_rocm630_bwd_weight_conv": ({"MIOPEN001"}, set()),
    "nvidia_h100_cu130_healthy": (set(), {"NV002"}),
    "nvidia_rtx3050_laptop_driver_too_old": ({"NV001"}, set()),
    "nvidia_a100_tf32_matmul_off": (set(), {"NV002"}),
    "cpu_only_server_cpu_wheel": (set(), set()),
    "amd_rx6800_cpu_wheel_installed": ({"WHEEL001"}, set()),
    "amd_mi100_kfd_permission_denied": ({"PERM002"}, set()),
    "igpu_gfx1036_device0_rx7900xtx_device1_windows": ({"DEVSEL001"}, set()),
    "rdna2_rx6800xt_fade_env_overrides": ({"FADE001", "FADE002"}, set()),
    "amd_mi50_miopen_userdb_on_nfs": ({"MIOPEN002"}, {"PERF006"}),
    "wsl2_rx7900xtx_dxg_no_kfd": ({"WSL001"}, set()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_findings_per_fixture(fixture_snapshot, name):
    report = _report(fixture_snapshot, name)
    must_fire, infos = CASES[name]
    assert _ids(report, "fail", "warn") == must_fire
    assert infos <= _ids(report, "info")
    for finding in report["findings"]:
        assert "?" not in finding["title"] + finding["fix"], finding  # every placeholder had its fact
    assert exit_code(report) == (1 if _ids(report, "fail") else 0)


def test_rx6800xt_reports_72_cus_where_hip_reports_36_wgps(fixture_snapshot):
    device, = _report(fixture_snapshot, "rdna2_rx6800xt_rocm62_healthy")["devices"]
    assert (device["compute_units"], device["runtime_units"], device["runtime_unit_label"]) == (72, 36, "WGP")
    assert device["wave_size"] == 32
    assert device["peaks"]["basis"] == "table" and device["peaks"]["tflops"]["fp32"] == pytest.approx(20.74, rel=0.01)
    assert any("WGP" in note for note in device["notes"])


def test_override_shows_the_real_chip_next_to_what_the_runtime_reports(fixture_snapshot):
    device, = _report(fixture_snapshot, "rdna2_rx6750xt_gfx1031_override_healthy")["devices"]
    assert (device["arch"], device["runtime_arch"]) == ("gfx1031", "gfx1030")


def test_missing_gfx1032_gets_the_rdna2_override_as_its_fix(fixture_snapshot):
    report = _report(fixture_snapshot, "rdna2_w6600_gfx1032_no_override_missing_arch")
    assert _fix(report, "ARCH001") == "export HSA_OVERRIDE_GFX_VERSION=10.3.0"


def test_gfx1201_on_an_old_wheel_is_told_to_upgrade_not_to_override(fixture_snapshot):
    report = _report(fixture_snapshot, "rdna4_rx9070xt_gfx1201_wheel_lacks_arch")
    assert _fix(report, "ARCH002").startswith("pip install --force-reinstall torch --index-url")
    assert "HSA_OVERRIDE" not in _fix(report, "ARCH002")


def test_gfx1103_override_is_flagged_dangerous_with_unset_as_fix(fixture_snapshot):
    report = _report(fixture_snapshot, "rdna3_igpu_780m_gfx1103_override_11_0_0")
    assert _fix(report, "ARCH004").startswith("unset HSA_OVERRIDE_GFX_VERSION")


def test_mi300x_on_rocm_630_gets_find_mode_fix(fixture_snapshot):
    report = _report(fixture_snapshot, "cdna3_mi300x_rocm630_bwd_weight_conv")
    assert _fix(report, "MIOPEN001").startswith("export MIOPEN_FIND_MODE=3 MIOPEN_FIND_ENFORCE=3")
    device, = report["devices"]
    assert device["compute_units"] == 304 and device["wave_size"] == 64


def test_mi250x_is_two_devices_with_per_gcd_peaks(fixture_snapshot):
    devices = _report(fixture_snapshot, "cdna2_mi250x_one_oam_two_gcds")["devices"]
    assert [d["compute_units"] for d in devices] == [110, 110]
    assert all(d["peaks"]["tflops"]["bf16"] == pytest.approx(191.5, rel=0.01) for d in devices)


def test_wrong_wheel_fix_installs_from_the_rocm_index(fixture_snapshot):
    report = _report(fixture_snapshot, "amd_rx6800_cpu_wheel_installed")
    assert _fix(report, "WHEEL001").startswith("pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/rocm")


def test_permission_denied_names_the_user_and_the_groups(fixture_snapshot):
    report = _report(fixture_snapshot, "amd_mi100_kfd_permission_denied")
    assert _fix(report, "PERM002").startswith("sudo usermod -a -G render,video hpcuser")
    assert "WHEEL004" not in _ids(report, "fail")  # the specific cause suppresses the generic one


def test_igpu_first_fix_selects_the_discrete_gpu(fixture_snapshot):
    report = _report(fixture_snapshot, "igpu_gfx1036_device0_rx7900xtx_device1_windows")
    assert _fix(report, "DEVSEL001").startswith("export HIP_VISIBLE_DEVICES=1")


def test_driver_too_old_names_both_cuda_versions(fixture_snapshot):
    report = _report(fixture_snapshot, "nvidia_rtx3050_laptop_driver_too_old")
    title = next(f["title"] for f in report["findings"] if f["id"] == "NV001")
    assert "12.1" in title and "11.4" in title


def test_h100_has_its_datasheet_peaks(fixture_snapshot):
    device, = _report(fixture_snapshot, "nvidia_h100_cu130_healthy")["devices"]
    assert device["name"] == "NVIDIA H100 80GB HBM3" and device["compute_units"] == 132
    assert device["peaks"]["tflops"]["bf16"] == pytest.approx(989.4, rel=0.01)
    assert device["peaks"]["bandwidth_gbs"] == pytest.approx(3350, rel=0.01)


def test_cpu_only_box_has_no_gpu_and_no_findings(fixture_snapshot):
    report = _report(fixture_snapshot, "cpu_only_server_cpu_wheel")
    assert report["devices"] == [] and report["findings"] == []


@pytest.mark.parametrize("name, code", [("amd_rx6800_cpu_wheel_installed", 1), ("rdna3_rx7900xtx_rocm62_healthy", 0)])
def test_cli_exit_code_follows_fail_findings(capsys, name, code):
    from conftest import FIXTURES

    assert main(["doctor", "--snapshot", str(FIXTURES / f"{name}.json"), "--json"]) == code
    import json

    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"devices", "findings", "measurements"}
    assert all(set(f) >= {"id", "severity", "title", "detail", "fix", "source"} for f in report["findings"])


def test_rich_report_renders_every_fixture(fixture_snapshot):
    import io

    from fade.report.console import make_console, render_doctor

    for name in CASES:
        console = make_console(file=io.StringIO(), width=120)
        render_doctor(_report(fixture_snapshot, name), console)
        assert "fail," in console.file.getvalue()
