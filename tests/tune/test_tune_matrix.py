"""benchmarks/tune_matrix.py without a GPU: its CPU path (--smoke) end to end with a fake search and real
side-by-side trials in a worker, and its bars on hand-made results."""

import json

import pytest

from tests.cliutil import load_benchmark

from fade.act.tune.tuning_file import build_tuning
from fade.act.tune.search import search
from tests.tune.fakes import FakeTimer, knob

CPU = {"backend": "cpu", "name": "cpu", "arch": "x86_64", "torch": "2.13.0"}


@pytest.fixture(scope="module")
def script():
    return load_benchmark("tune_matrix")


def fake_tune(model, *, mode, batch, budget_min, output, **kwargs):
    """run_tune's signature; a fake search that finds channels_last faster, written where asked."""
    from fade.act.tune.tuning_file import save_tuning

    knobs = [knob("precision", "precision", ["default", "tf32", "amp-bf16"]), knob("channels_last", "layout", ["off", "on"])]
    timer = FakeTimer({("channels_last", "on"): 0.5}, cost_s=1.0)
    infer = FakeTimer.__call__

    def measure(config):
        trial = infer(timer, config)
        return type(trial)(trial.config, trial.samples_s, "ok", None, {"mode": "infer", "relative_rms_error": 0.0,
                           "math_dtype": "fp32", "finite": True}, batch, trial.cost_s)  # fmt: skip

    result = search(knobs, measure, budget_s=60 * budget_min, clock=timer.clock)
    profile = build_tuning(result, knobs, fingerprint=CPU, model=model, mode=mode, batch=batch, budget_s=60 * budget_min)
    save_tuning(profile, output)
    return profile


def test_the_smoke_run_writes_every_file_and_the_table(script, tmp_path, capsys):
    """The CPU path: the search faked, the comparison real (resnet18 infer, 32 px, batch 2, eager sides)."""
    script.main([str(tmp_path), "--smoke"], tune=fake_tune)
    result = json.loads((tmp_path / "resnet18-infer.json").read_text())
    assert set(result["figures"]) == {"default", "fp32", "tf32", "bf16+cl", "fade"}
    assert result["sides"]["fade"]["channels_last"] == "on"
    assert result["compared"] == "side by side in one worker"
    assert all(figures["numerics"] is None for figures in result["figures"].values())
    assert (tmp_path / "resnet18-infer.profile.json").exists()
    table = (tmp_path / "tune-table.md").read_text()
    assert "| resnet18/infer |" in table and "channels_last=on" in table
    assert "resnet18/infer" in capsys.readouterr().out


def hand_made(model="mobilenet_v2", mode="infer", tune_s=250.0, **rates):
    numerics = rates.pop("unsound", ())
    figures = {name: {"samples_per_s": rate, "relative_iqr": 0.01, "n": 9, "numerics": "bad" if name in numerics else None}
               for name, rate in rates.items()}  # fmt: skip
    return {"model": model, "mode": mode, "figures": figures, "failures": {}, "tune_s": tune_s, "budget_s": 300.0}


def test_the_bars(script):
    issue = hand_made(ro=22870, **{"bf16+cl+ro": 33700, "fp16+cl+ro": 33000}, fade=33500)
    verdict = script.judge(issue)
    assert verdict["ok"] and verdict["best_hand"] == "bf16+cl+ro"
    before = script.judge(hand_made(ro=22870, **{"bf16+cl+ro": 33700}, fade=23320))  # the choice before issue 14
    assert not before["ok"] and any("below 1.3x" in bar for bar in before["bars"])
    unsound = script.judge(hand_made("resnet50", "train", ro=100, **{"fp16+cl+ro": 300}, fade=100, unsound=("fp16+cl+ro",)))
    assert unsound["best_hand"] == "ro" and unsound["ok"]
    assert not script.judge(hand_made("resnet50", "train", tune_s=400, ro=100, fade=100))["ok"]


def test_unknown_cases_are_refused(script):
    with pytest.raises(SystemExit, match="unknown case 'resnet50/both'"):
        script.parse_cases("mobilenet_v2/infer,resnet50/both")
    assert len(script.CASES) == 12
