"""Tuning profiles: round-trip, applying one (user values win), another device's, corrupt ones."""

import json

import pytest

from fade.act.tune.tuning_file import TuningFileError, build_tuning, read_tuning, load_tuning, save_tuning
from fade.act.tune.search import search
from tests.tune.fakes import KNOBS, REFERENCE, FakeTimer, knob

H100 = {"backend": "cuda", "name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "torch": "2.11.0+cu130", "cuda": "13.0",
        "hip": None, "cudnn": 91300, "miopen": None, "driver": "580.159.04"}
MI300 = {**H100, "backend": "rocm", "name": "AMD Instinct MI300X", "arch": "gfx942", "cuda": None, "hip": "6.4"}
ENV_KNOB = knob("tunableop", "backend", ["off", "on"], env={"on": {"PYTORCH_TUNABLEOP_ENABLED": "1"}})


def make_profile(tmp_path, speedups=None):
    knobs = KNOBS + [ENV_KNOB]
    timer = FakeTimer(speedups or {("precision", "amp-bf16"): 0.5, ("channels_last", "on"): 0.8, ("tunableop", "on"): 0.9})
    result = search(knobs, timer, reference=REFERENCE, budget_s=1000, clock=timer.clock)
    from fade.act.tune.cache import default_base

    profile = build_tuning(result, knobs, fingerprint=H100, model="resnet50", mode="train", batch=64, budget_s=1000,
                           cache_dir=str(default_base() / "h100"))  # fmt: skip
    path = tmp_path / "profile.json"
    save_tuning(profile, path)
    return profile, path


def test_a_profile_round_trips_with_every_field(tmp_path):
    profile, path = make_profile(tmp_path)
    loaded = read_tuning(path)
    assert loaded == json.loads(json.dumps(profile))
    assert loaded["schema_version"] == 1 and loaded["fade_version"]
    assert loaded["knobs"]["precision"] == "amp-bf16"
    assert loaded["changed"] == {"precision": "amp-bf16", "channels_last": "on", "tunableop": "on"}
    assert "export PYTORCH_TUNABLEOP_ENABLED=1" in loaded["env_lines"]
    assert loaded["env"]["PYTORCH_TUNABLEOP_FILENAME"].endswith("tunableop/tunableop_results%d.csv")
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in loaded["python_snippet"]
    assert "channels_last" in loaded["python_snippet"]
    assert loaded["after"]["samples_per_s"] > loaded["before"]["samples_per_s"]
    assert {row["status"] for row in loaded["candidates"]} >= {"baseline", "accepted"}
    compile(loaded["python_snippet"].replace("model(x)", "model").replace("loss_fn(", "(").replace("y)", ")"), "snippet", "exec")


def test_load_tuning_sets_env_but_a_user_value_wins(tmp_path):
    _, path = make_profile(tmp_path)
    environ = {"PYTORCH_TUNABLEOP_ENABLED": "0"}
    tuning = load_tuning(path, environ=environ, fingerprint=H100, set_torch_flags=False, verbose=False)
    assert tuning.applied
    assert environ["PYTORCH_TUNABLEOP_ENABLED"] == "0"
    assert ("PYTORCH_TUNABLEOP_ENABLED", "0", "kept-user-value") in tuning.env
    assert environ["PYTORCH_TUNABLEOP_FILENAME"].endswith(".csv")
    assert "PYTORCH_TUNABLEOP_FILENAME" in environ["FADE_APPLIED"]
    assert tuning.model_knobs["autocast"] == "bfloat16" and tuning.model_knobs["channels_last"]
    again = load_tuning(path, environ=environ, fingerprint=H100, set_torch_flags=False, verbose=False)
    assert {status for _, _, status in again.env} <= {"already-set", "kept-user-value"}


def test_a_profile_from_another_device_warns_and_applies_nothing(tmp_path):
    _, path = make_profile(tmp_path)
    environ = {}
    with pytest.warns(RuntimeWarning, match="another device"):
        tuning = load_tuning(path, environ=environ, fingerprint=MI300, verbose=False)
    assert not tuning.applied
    assert environ == {}
    assert tuning.model_knobs["autocast"] is None and not tuning.model_knobs["channels_last"]


def test_a_stack_change_applies_with_a_warning(tmp_path):
    _, path = make_profile(tmp_path)
    tuning = load_tuning(path, environ={}, fingerprint={**H100, "torch": "2.13.0+cu130"}, set_torch_flags=False, verbose=False)
    assert tuning.applied
    assert "torch 2.11.0+cu130 -> 2.13.0+cu130" in tuning.warnings[0]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"schema_version": 1, "kind": "fade-tuning-profile", "knobs": {', "not JSON"),
        ('{"hello": 1}', "not a FADE tuning profile"),
        ('{"schema_version": 99, "kind": "fade-tuning-profile"}', "schema_version 99"),
        ('{"schema_version": 1, "kind": "fade-tuning-profile", "model": "x"}', "missing field"),
    ],
)
def test_a_corrupt_profile_is_a_one_line_error(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TuningFileError, match=message) as caught:
        read_tuning(path)
    assert "\n" not in str(caught.value)


def test_a_missing_profile_is_an_error(tmp_path):
    with pytest.raises(TuningFileError, match="cannot read"):
        read_tuning(tmp_path / "nope.json")
