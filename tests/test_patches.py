"""apply_fade_patches(): only safe env fixes, never over a user's value, idempotent, loud about what it sets."""

import json
import subprocess
import sys
import textwrap

import pytest

import fade.act.patches as patches
from fade import apply_fade_patches  # the facade: it reports each change on stderr
from fade.act.patches import APPLIED_MARKER

WHEEL_ARCHES = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100", "gfx942"]


def _static_rocm_snapshot(gfx_target_versions, env=None, rocm="6.2.4-120"):
    """What collect_snapshot(torch="static") sees on a ROCm box: sysfs GPUs, a wheel's arch flags, no runtime."""
    nodes = [{"node": 0, "name": "", "properties": {"simd_count": 0, "cpu_cores_count": 16}}]
    for i, version in enumerate(gfx_target_versions, start=1):
        nodes.append({"node": i, "name": "", "properties": {
            "simd_count": 80, "simd_per_cu": 2, "gfx_target_version": version, "vendor_id": 4098,
            "max_engine_clk_fcompute": 2500, "device_id": 29663}})
    return {"schema_version": 1, "os": {"system": "Linux"}, "env": env or {},
            "torch": {"version": "2.5.1+rocm6.2", "hip": "6.2.41133-dd7f95766", "cuda": None,
                      "available": False, "device_count": 0, "arch_list": WHEEL_ARCHES, "devices": [],
                      "error": "static probe"},
            "pci": [{"address": "0000:03:00.0", "vendor": "0x1002", "device": "0x73df", "class": "0x030000"}],
            "kfd_nodes": nodes, "device_files": {}, "groups": [], "rocm": {"path": "/opt/rocm", "version": rocm},
            "tools": {}}


def test_gfx1031_on_a_wheel_without_it_gets_the_rdna2_override():
    environ = {}
    changes = apply_fade_patches(environ=environ, snapshot=_static_rocm_snapshot([100301]), verbose=False)
    assert environ["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    assert [(c.name, c.status, c.rule) for c in changes] == [("HSA_OVERRIDE_GFX_VERSION", "set", "ARCH001")]
    assert environ[APPLIED_MARKER] == "HSA_OVERRIDE_GFX_VERSION"


def test_a_value_the_user_set_wins():
    environ = {"HSA_OVERRIDE_GFX_VERSION": "10.3.1"}
    snap = _static_rocm_snapshot([100301], env={})  # the user's value is not visible to the analysis here
    changes = apply_fade_patches(environ=environ, snapshot=snap, verbose=False)
    assert environ["HSA_OVERRIDE_GFX_VERSION"] == "10.3.1"
    assert changes[0].status == "kept-user-value" and changes[0].value == "10.3.1"
    assert APPLIED_MARKER not in environ


def test_applying_twice_changes_nothing_the_second_time():
    environ = {}
    snap = _static_rocm_snapshot([100301])
    apply_fade_patches(environ=environ, snapshot=snap, verbose=False)
    before = dict(environ)
    changes = apply_fade_patches(environ=environ, snapshot=snap, verbose=False)
    assert environ == before
    assert [c.status for c in changes] == ["already-set-by-fade"]


def test_a_native_arch_gets_no_env_at_all():
    environ = {}
    assert apply_fade_patches(environ=environ, snapshot=_static_rocm_snapshot([100300]), verbose=False) == []
    assert environ == {}


def test_mixed_gpus_get_a_per_node_override():
    """gfx1031 next to a native gfx1100: a global override would also retarget the gfx1100."""
    environ = {}
    apply_fade_patches(environ=environ, snapshot=_static_rocm_snapshot([110000, 100301]), verbose=False)
    assert environ.get("HSA_OVERRIDE_GFX_VERSION_2") == "10.3.0"
    assert "HSA_OVERRIDE_GFX_VERSION" not in environ


def test_mi300_on_rocm_630_gets_the_find_mode_workaround():
    environ = {}
    snap = _static_rocm_snapshot([90402], rocm="6.3.0-39")
    apply_fade_patches(environ=environ, snapshot=snap, verbose=False)
    assert environ["MIOPEN_FIND_MODE"] == "3" and environ["MIOPEN_FIND_ENFORCE"] == "3"


def test_every_set_variable_is_reported_on_stderr(capsys):
    apply_fade_patches(environ={}, snapshot=_static_rocm_snapshot([100301]))
    err = capsys.readouterr().err
    assert "fade: set HSA_OVERRIDE_GFX_VERSION=10.3.0  (ARCH001:" in err


def test_warns_when_torch_already_started_the_gpu(monkeypatch):
    monkeypatch.setattr(patches, "_gpu_runtime_started", lambda: True)
    with pytest.warns(RuntimeWarning, match="after torch initialized the GPU"):
        apply_fade_patches(environ={}, snapshot=_static_rocm_snapshot([100300]), verbose=False)


def test_live_call_before_import_torch_does_not_start_a_gpu_runtime():
    """In a fresh process: the live path imports torch only statically and never initializes CUDA/HIP."""
    code = textwrap.dedent("""
        import json, sys
        import fade
        changes = fade.apply_fade_patches(verbose=False)
        import torch
        print(json.dumps({"initialized": torch.cuda.is_initialized(), "changes": len(changes)}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["initialized"] is False


def test_device_truth_names_the_range_when_the_index_does_not_exist():
    import torch

    from fade import device_truth

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(IndexError, match=f"torch sees {count}"):
        device_truth(count)


def test_a_tuning_profile_adds_its_env_lines_after_the_doctors_fixes(tmp_path, monkeypatch):
    from fade.act.tune import device as tune_device
    from tests.tune.test_tuning_file import H100, make_profile

    _, path = make_profile(tmp_path)
    monkeypatch.setattr(tune_device, "static_fingerprint", lambda environ=None: dict(H100))
    environ = {}
    changes = apply_fade_patches(environ=environ, snapshot=_static_rocm_snapshot([100301]), verbose=False,
                                 profile=path)
    assert [c.rule for c in changes][0] == "ARCH001"
    assert ("PYTORCH_TUNABLEOP_ENABLED", "1", "set", "TUNE") in [(c.name, c.value, c.status, c.rule) for c in changes]
    assert environ["PYTORCH_TUNABLEOP_ENABLED"] == "1"


def test_a_profile_from_another_device_applies_nothing(tmp_path, monkeypatch):
    from fade.act.tune import device as tune_device
    from tests.tune.test_tuning_file import MI300, make_profile

    _, path = make_profile(tmp_path)
    monkeypatch.setattr(tune_device, "static_fingerprint", lambda environ=None: dict(MI300))
    environ = {}
    with pytest.warns(RuntimeWarning, match="tuned on another device"):
        changes = apply_fade_patches(environ=environ, snapshot=_static_rocm_snapshot([100300]), verbose=False,
                                     profile=path)
    assert changes == [] and "PYTORCH_TUNABLEOP_ENABLED" not in environ
