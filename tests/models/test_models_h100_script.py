"""benchmarks/models_h100.py without a GPU: its summary and Markdown from hand-made records (the run
itself is the lead's, on an H100)."""

import importlib.util
from pathlib import Path

import pytest

from .records import model_record

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "models_h100.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("models_h100", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_plain_loop(record, plain_samples_per_s):
    diff = 100 * (record["value"] - plain_samples_per_s) / plain_samples_per_s
    record["extra"] = {"plain_loop": {"samples_per_s": plain_samples_per_s, "fade_vs_plain_pct": diff}}
    return record


def test_summary_flags_fade_outside_5_percent_of_the_plain_loop_and_ratios_to_anchors(script):
    records = [
        with_plain_loop(model_record("resnet50", "train", "fp32", 880), 870),
        with_plain_loop(model_record("resnet50", "train", "amp-bf16+channels-last", 2650), 2400),
        model_record("vgg16", "train", "fp32", None, status="oom"),
    ]
    summary = script.summarize(records, wall_s=400.0, phases={"eager_s": 300.0})
    assert summary["disagreements"] == ["models/resnet50/train/amp-bf16+channels-last/b64"]
    assert summary["failed"] == 1
    anchors = {row["case"]: row for row in summary["anchors"]}
    assert anchors["resnet50 train fp32"]["pct_of_anchor_mid"] == pytest.approx(100 * 880 / 882)
    assert anchors["resnet50 train amp-bf16+channels-last"]["anchor_low"] == 2509
    text = script.markdown(records, summary)
    assert "| resnet50 b64 | 880 | 2650 (301% ▲) |" in text
    assert "| models/resnet50/train/amp-bf16+channels-last/b64 | 2650 | 2400 | +10.4% **outside** | - | - |" in text
    assert "- models/vgg16/train/fp32/b64: oom" in text


def test_each_sides_spread_over_its_segments_is_shown_next_to_the_difference(script):
    record = with_plain_loop(model_record("mobilenet_v2", "train", "compile", 2400), 2380)
    record["extra"]["plain_loop"].update(fade_spread_pct=14.2, spread_pct=11.6)
    summary = script.summarize([record], wall_s=10.0, phases={})
    assert summary["agreement"][0]["fade_spread_pct"] == 14.2
    assert "| models/mobilenet_v2/train/compile/b64 | 2400 | 2380 | +0.8% | 14% | 12% |" in script.markdown([record], summary)


def test_only_that_matches_no_case_exits_2_without_running_anything(script, tmp_path, capsys):
    assert script.main([str(tmp_path), "--smoke", "--only", "models/lenet/*"]) == 2
    assert "--only models/lenet/*: matches no case" in capsys.readouterr().err
    out = tmp_path / "models.jsonl"
    assert not out.exists() or not out.read_text()
