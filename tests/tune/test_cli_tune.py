"""`fade tune` from the command line: bad input is one stderr line and exit 2; --show checks the device."""

import argparse
import json

import pytest

import fade.cli as cli
from fade.cli import tune as cli_tune
from tests.tune.test_tuning_file import H100, make_profile


@pytest.fixture
def fade_main(monkeypatch):
    """fade.cli.main with `tune` registered (the lead wires cli_tune.add_verbs into cli.py)."""
    original = cli.build_parser

    def build():
        parser = original()
        verbs = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        if "tune" not in verbs.choices:
            cli_tune.add_verbs(verbs)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    return cli.main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "resnet5O"], "unknown model; did you mean 'resnet50'"),
        (["tune", "resnet50", "--budget", "0"], "--budget 0: the budget in minutes must be > 0"),
        (["tune", "resnet50", "--budget", "-3"], "must be > 0"),
        (["tune", "resnet50", "--batch", "0"], "--batch 0"),
        (["tune", "no_such_module_xyz:build"], "no_such_module_xyz"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fade_main, capsys, argv, message):
    assert fade_main(argv) == 2
    error = capsys.readouterr().err
    assert message in error
    assert error.count("\n") == 1


def test_show_rejects_a_corrupt_profile(fade_main, capsys, tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    assert fade_main(["tune", "--show", str(path)]) == 2
    error = capsys.readouterr().err
    assert "not JSON" in error and error.count("\n") == 1


def test_show_rejects_another_devices_profile(fade_main, capsys, tmp_path):
    """The profile says H100; this CPU-only machine is not one."""
    _, path = make_profile(tmp_path)
    assert fade_main(["tune", "--show", str(path)]) == 2
    error = capsys.readouterr().err
    assert "another device" in error and error.count("\n") == 1


def test_show_prints_a_matching_profiles_env_lines(fade_main, capsys, tmp_path, monkeypatch):
    _, path = make_profile(tmp_path)
    monkeypatch.setattr("fade.act.tune.device.static_fingerprint", lambda *args, **kwargs: dict(H100))
    monkeypatch.delenv("PYTORCH_TUNABLEOP_ENABLED", raising=False)
    assert fade_main(["tune", "--show", str(path), "--env"]) == 0
    assert "export PYTORCH_TUNABLEOP_ENABLED=1" in capsys.readouterr().out


def test_tune_writes_a_profile(fade_main, capsys, tmp_path, monkeypatch):
    """The search runs on a fake timer (run_tune's measure is injectable); the CLI writes and renders."""
    from fade.act.tune import tuner as tune_package
    from tests.tune.fakes import REFERENCE, FakeTimer, FixedHost

    timer = FakeTimer({("precision", "amp-bf16"): 0.5})
    real = tune_package.run_tune

    def fake_run_tune(model, **kwargs):
        kwargs.pop("device")
        kwargs.pop("quick")
        return real(model, **kwargs, fingerprint=dict(H100), measure=timer, reference=REFERENCE, clock=timer.clock,
                    cache_base=tmp_path / "cache", host_probe=FixedHost())

    monkeypatch.setattr(tune_package, "run_tune", fake_run_tune)
    out = tmp_path / "profile.json"
    assert fade_main(["tune", "resnet50", "--budget", "2", "-o", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert profile["knobs"]["precision"] == "amp-bf16"
    assert profile["left_out"]["tunableop"].startswith("no real candidates on CUDA with torch 2.11")
    assert "miopen_find_mode" in profile["left_out"]
