"""benchmarks/models_matrix.py without a GPU: its summary and Markdown from hand-made records (the run
itself needs a GPU), and its reference figures from benchmarks/reference.toml."""


import pytest

from tests.cliutil import load_benchmark

from .records import model_record

H100_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def script():
    return load_benchmark("models_matrix")


def with_plain_loop(record, plain_samples_per_s):
    diff = 100 * (record["value"] - plain_samples_per_s) / plain_samples_per_s
    record["extra"] = {"plain_loop": {"samples_per_s": plain_samples_per_s, "fade_vs_plain_pct": diff}}
    return record


def on(device_name, record):
    record["device"] = {"name": device_name}
    return record


def test_summary_flags_fade_outside_5_percent_of_the_plain_loop_and_ratios_to_reference_figures(script):
    records = [
        on(H100_NAME, with_plain_loop(model_record("resnet50", "train", "fp32", 880), 870)),
        on(H100_NAME, with_plain_loop(model_record("resnet50", "train", "amp-bf16+channels-last", 2650), 2400)),
        on(H100_NAME, model_record("vgg16", "train", "fp32", None, status="oom")),
    ]
    summary = script.summarize(records, wall_s=400.0, phases={"eager_s": 300.0})
    assert summary["disagreements"] == ["models/resnet50/train/amp-bf16+channels-last/b64"]
    assert summary["failed"] == 1
    reference = script.figures_for("models_matrix", H100_NAME)
    anchors = {row["case"]: row for row in summary["anchors"]}
    fp32 = reference["resnet50 train fp32"]
    assert anchors["resnet50 train fp32"]["pct_of_anchor_mid"] == pytest.approx(100 * 880 / ((fp32.low + fp32.high) / 2))
    assert anchors["resnet50 train amp-bf16+channels-last"]["anchor_low"] == reference["resnet50 train amp-bf16+channels-last"].low
    text = script.markdown(records, summary)
    assert "| resnet50 b64 | 880 | 2650 (301% ▲) |" in text
    assert "| models/resnet50/train/amp-bf16+channels-last/b64 | 2650 | 2400 | +10.4% **outside** | - | - |" in text
    assert "- models/vgg16/train/fp32/b64: oom" in text
    assert f"Reference (benchmarks/reference.toml): {fp32.machine}; {fp32.source}." in text


def test_another_device_is_never_compared_with_h100_figures(script):
    records = [on("AMD Instinct MI300X", with_plain_loop(model_record("resnet50", "train", "fp32", 880), 870))]
    summary = script.summarize(records, wall_s=1.0, phases={})
    assert summary["anchors"] == []
    assert "benchmarks/reference.toml has no figures for AMD Instinct MI300X." in script.markdown(records, summary)


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


def test_every_reference_figure_names_machine_date_command_and_source(script, tmp_path):
    from importlib import import_module

    reference = import_module("reference")  # benchmarks/, put on sys.path by the script
    rows = reference.load_reference()
    assert rows and all(all(getattr(figure, key) for key in reference.RUN_FIELDS) for _, _, figure in rows)
    broken = tmp_path / "reference.toml"
    broken.write_text('[[figure]]\nharness = "x"\nrun = "nowhere"\ndevice_contains = "H100"\ncase = "c"\n'
                      'low = 1\nhigh = 1\nunit = "u"\n')
    with pytest.raises(ValueError, match="unknown run 'nowhere'"):
        reference.load_reference(broken)
