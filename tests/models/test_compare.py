"""`fade compare` as a library: cases matched by key, % of baseline, noise band, regressions, layouts."""

import pytest

from fade.errors import FadeUsageError
from fade.analyze.compare import NOISE_FLOOR_PCT, compare_files
from fade.report.compare import render_markdown

from .records import model_record, record, write_jsonl


def cells_by_column(comparison, row):
    found = next(item for item in comparison.rows if item["row"] == row)
    return {f"{label} {sub}".strip(): cell for (label, sub), cell in zip(comparison.columns, found["cells"])}


def test_model_results_are_laid_out_networks_by_train_and_infer_per_file(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [model_record("resnet50", "train", "fp32", 800), model_record("resnet50", "infer", "fp32", 2500)])
    b = write_jsonl(tmp_path / "b.jsonl", [model_record("resnet50", "infer", "fp32", 2600), model_record("resnet50", "train", "fp32", 880)])
    comparison = compare_files([a, b])
    assert comparison.columns == [["a.jsonl", "train"], ["a.jsonl", "infer"], ["b.jsonl", "train"], ["b.jsonl", "infer"]]
    cells = cells_by_column(comparison, "resnet50 fp32 b64")
    assert cells["a.jsonl train"].verdict == "baseline"
    assert cells["b.jsonl train"].pct_of_baseline == pytest.approx(110.0)
    assert cells["b.jsonl train"].verdict == "faster"
    assert cells["b.jsonl infer"].pct_of_baseline == pytest.approx(104.0)


def test_a_difference_inside_the_noise_band_is_flagged_as_noise(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("gemm/bf16/8192", 700, unit="TFLOP/s", spread=0.02)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("gemm/bf16/8192", 690, unit="TFLOP/s", spread=0.02)])
    cell = cells_by_column(compare_files([a, b]), "gemm/bf16/8192")["b.jsonl"]
    assert cell.verdict == "same"
    assert cell.noise_band_pct == NOISE_FLOOR_PCT


def test_a_wide_spread_widens_the_noise_band(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100, spread=0.2)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("x/1", 88, spread=0.2)])
    cell = cells_by_column(compare_files([a, b], fail_under=95), "x/1")["b.jsonl"]
    assert cell.noise_band_pct == pytest.approx(20.0)
    assert cell.verdict == "same"  # 88% is below --fail-under but inside the noise: not a regression
    assert cell.noisy


def test_below_fail_under_and_outside_noise_is_a_regression(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100), record("x/2", 100)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("x/1", 80), record("x/2", 93)])
    comparison = compare_files([a, b], fail_under=90)
    assert cells_by_column(comparison, "x/1")["b.jsonl"].verdict == "regression"
    assert cells_by_column(comparison, "x/2")["b.jsonl"].verdict == "slower"
    assert comparison.regressions == ["x/1 / b.jsonl: 80.0% of baseline"]


def test_latency_is_inverted_so_above_100_is_always_faster(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("launch/eager", 10.0, unit="us")])
    b = write_jsonl(tmp_path / "b.jsonl", [record("launch/eager", 5.0, unit="us")])
    cell = cells_by_column(compare_files([a, b]), "launch/eager")["b.jsonl"]
    assert cell.pct_of_baseline == pytest.approx(200.0)
    assert cell.verdict == "faster"


def test_a_case_that_failed_where_the_baseline_ran_is_a_regression_under_fail_under(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100), record("x/2", 100)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("x/1", None, status="oom")])
    comparison = compare_files([a, b], fail_under=95)
    assert cells_by_column(comparison, "x/1")["b.jsonl"].verdict == "regression"
    assert cells_by_column(comparison, "x/2")["b.jsonl"].verdict == "missing"
    assert comparison.regressions == ["x/1 / b.jsonl: status oom"]


def test_baseline_can_be_named_and_moves_first(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("x/1", 50)])
    comparison = compare_files([a, b], baseline="b.jsonl")
    assert comparison.sets == ["b.jsonl", "a.jsonl"]
    assert cells_by_column(comparison, "x/1")["a.jsonl"].pct_of_baseline == pytest.approx(200.0)
    with pytest.raises(FadeUsageError, match="none of the result sets"):
        compare_files([a, b], baseline="c.jsonl")


def test_by_variant_compares_the_variants_of_one_run(tmp_path):
    run = write_jsonl(tmp_path / "run.jsonl", [
        model_record("vgg16", "train", "fp32", 608), model_record("vgg16", "train", "amp-bf16+channels-last", 2772),
        model_record("vgg16", "infer", "fp32", 2000), model_record("vgg16", "infer", "amp-bf16+channels-last", 6000),
    ])  # fmt: skip
    comparison = compare_files([run], by="variant", baseline="fp32")
    assert comparison.sets == ["fp32", "amp-bf16+channels-last"]
    cells = cells_by_column(comparison, "vgg16 b64")
    assert cells["amp-bf16+channels-last train"].pct_of_baseline == pytest.approx(100 * 2772 / 608)


def test_the_latest_record_of_a_case_wins(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100), record("x/1", None, status="error"), record("x/1", 120)])
    comparison = compare_files([a])
    assert cells_by_column(comparison, "x/1")["a.jsonl"].value == 120


def test_a_corrupt_line_is_reported_with_its_number_and_the_rest_is_read(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100), record("x/2", 100)], corrupt_line_at=1)
    comparison = compare_files([a])
    assert [row["row"] for row in comparison.rows] == ["x/1", "x/2"]
    assert len(comparison.problems) == 1 and comparison.problems[0].startswith(f"{a}:2: not valid JSON")


def test_markdown_has_one_row_per_case_and_the_legend(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [record("x/1", 100)])
    b = write_jsonl(tmp_path / "b.jsonl", [record("x/1", 150)])
    text = render_markdown(compare_files([a, b]))
    assert "| x/1 | 100 | 150 (150% ▲) |" in text
    assert "within noise" in text and "Units: samples/s" in text
