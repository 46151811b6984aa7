"""The LLM roofline view of `fade compare` and `fade report` (issue 28): a tiny config through
`fade.bench("llm", "cpu", quick=True)` (the API, so fade.api.bench's llm suite is tested by the same run; ~20 s on
2 cores), its records, then compare (terminal, Markdown, JSON) and report (HTML with the plot). The CPU has no
bandwidth peak, so the same records with a GPU's roofline written in check the % columns and the roofline line."""

import copy
import json

import pytest

import fade
from fade.analyze.compare import ResultSet, compare_files, compare_sets, llm_roofline_views, result_sets
from fade.errors import FadeUsageError
from fade.report.compare import render_markdown, roofline_markdown
from fade.report.html import render_report

VARIANTS = ["hf-generate", "hf-static", "fade-loop"]


@pytest.fixture(scope="module")
def quick_llm(tmp_path_factory):
    """(results path, BenchResult) of one quick CPU run through the API."""
    out = tmp_path_factory.mktemp("llm") / "llm.jsonl"
    result = fade.bench("llm", "cpu", quick=True, out=out, progress=False)
    return out, result


@pytest.fixture(scope="module")
def gpu_like(quick_llm, tmp_path_factory):
    """The quick run's records as if an H200 had run them: a roofline per batch, % of it, a prefill peak."""
    out, _ = quick_llm
    records = [json.loads(line) for line in out.read_text().splitlines()]
    for record in records:
        record["device"] = dict(record["device"], name="NVIDIA H200")
        roofline = record["extra"].get("roofline")
        if roofline:
            line = 1000.0 * record["params"]["batch"]
            roofline.update(bandwidth_gbs=4800.0, bandwidth_source="gpus.toml: H200 SXM", roofline_tokens_per_s=line,
                            pct_of_roofline=100.0 * record["value"] / line)  # fmt: skip
            roofline.pop("reason", None)
        elif record["unit"] == "TFLOP/s":
            record["peak"] = {"value": 989.0, "unit": "TFLOP/s", "pct_of_peak": 100.0 * record["value"] / 989.0}
    path = tmp_path_factory.mktemp("gpu") / "h200.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path, records


def test_bench_llm_through_the_api_writes_the_suites_records(quick_llm):
    out, result = quick_llm
    assert isinstance(result, fade.BenchResult) and result.suite == "llm" and result.exit_status == 0
    assert len(result.records) == 7 and all(record["status"] == "ok" for record in result.records)
    assert [row["case_id"] for row in result.summary] == [record["case_id"] for record in result.records]
    assert out.read_text().count("\n") == 7
    assert result.to_dict()["suite"] == "llm"


def test_bench_llm_refuses_an_unknown_selection_before_anything_runs(tmp_path):
    with pytest.raises(FadeUsageError, match="'batch'.*batches"):
        fade.bench("llm", "cpu", llm={"batch": 2}, out=tmp_path / "never.jsonl")
    with pytest.raises(FadeUsageError, match="--variants 'fade-lop'"):
        fade.bench("llm", "cpu", quick=True, variants=["fade-lop"], out=tmp_path / "never.jsonl")
    assert not (tmp_path / "never.jsonl").exists()


def test_compare_of_a_cpu_run_has_one_view_variant_by_batch(quick_llm):
    out, result = quick_llm
    comparison = compare_files([out])
    (view,) = comparison.roofline
    assert (view.model, view.dtype, view.torch_device, view.prompt_tokens, view.new_tokens) == ("tiny-llama", "fp32", "cpu", 16, 16)
    assert view.variants == VARIANTS and view.batches == [1, 2]
    assert [(point.variant, point.batch) for point in view.decode] == [(v, b) for v in VARIANTS for b in (1, 2)]
    by_case = {record["case_id"]: record for record in result.records}
    for point in view.decode:
        record = by_case[f"llm/tiny-llama/fp32/{point.variant}/b{point.batch}/p16+n16"]
        assert point.tokens_per_s == record["value"] > 0
        assert point.ttft_ms == record["extra"]["ttft_ms"] > 0
        assert point.tokens_match is True and point.pct_of_roofline is None
        assert point.tokens_check == "ok 100%"  # the numerics verdict and top-1 agreement (near-ties counted)
    assert view.roofline == [] and "no peak memory bandwidth" in view.reason
    (prefill,) = view.prefill
    assert (prefill.tokens, prefill.batch) == (16, 1) and prefill.tflops > 0 and prefill.pct_of_peak is None
    json.dumps(comparison.to_dict())  # the view travels in `fade compare --json`
    assert comparison.to_dict()["roofline"][0]["decode"][0]["variant"] == "hf-generate"


def test_the_markdown_and_terminal_compare_show_the_view(quick_llm, capsys, tmp_path):
    from fade import cli

    out, result = quick_llm
    markdown = render_markdown(compare_files([out]))
    assert "### LLM roofline: tiny-llama fp32 on" in markdown
    assert "| variant | batch | tokens/s | roofline tokens/s | % of roofline | TTFT ms | tokens |" in markdown
    assert markdown.count("| hf-static | ") == 2 and "| 16 | 1 |" in markdown and "FLOP/s |" in markdown
    assert "no roofline: no peak memory bandwidth" in markdown
    code = cli.main(["compare", str(out), "--markdown", str(tmp_path / "compare.md")])
    stdout = capsys.readouterr().out
    assert code == 0 and "LLM roofline: tiny-llama fp32" in stdout and "fade-loop" in stdout
    assert (tmp_path / "compare.md").read_text() == markdown


def test_a_gpu_record_shows_its_roofline_and_percentages(gpu_like):
    path, records = gpu_like
    (view,) = compare_files([path]).roofline
    assert view.roofline == [[1, 1000.0], [2, 2000.0]] and view.bandwidth_gbs == 4800.0 and view.reason is None
    assert view.title.startswith("tiny-llama fp32 on NVIDIA H200 (cpu), prompt 16 + 16 new tokens")
    for point in view.decode:
        assert point.pct_of_roofline == pytest.approx(100.0 * point.tokens_per_s / (1000.0 * point.batch))
    assert view.prefill[0].pct_of_peak == pytest.approx(100.0 * view.prefill[0].tflops / 989.0)
    text = roofline_markdown(view)
    first = view.decode[0]
    assert f"| hf-generate | 1 | {first.tokens_per_s:.4g} | 1000 | {first.pct_of_roofline:.1f}% |" in text
    assert text.count(" | ok 100% |") == len(view.decode)
    assert "roofline = 4800 GB/s (gpus.toml: H200 SXM) / bytes per decode step x batch" in text


def test_the_report_has_the_llm_section_with_its_plot(quick_llm, gpu_like):
    out, _ = quick_llm
    path, _ = gpu_like
    text, count, problems = render_report([out, path])
    assert count == 14 and problems == []
    section = text[text.index("<h2>LLM inference: decode against the bandwidth roofline</h2>"):]
    section = section[: section.index("<h2>", 5)] if "<h2>" in section[5:] else section
    assert section.count("<h3>") == 2 and "NVIDIA H200" in section
    assert section.count('alt="llm roofline: llm_roofline_') == 2 and "data:image/png;base64," in section
    assert section.count("<th>% of roofline</th>") == 2 and "<th>% of peak</th>" in section
    assert "no roofline: no peak memory bandwidth" in section and "roofline = 4800 GB/s" in section


def test_failed_cases_and_odd_fields_keep_their_row_and_crash_nothing(gpu_like):
    _, records = gpu_like
    odd = copy.deepcopy(records)
    decode = [record for record in odd if record["unit"] == "tokens/s"]
    decode[0].update(status="error", value=None, error="CUDA out of memory")
    decode[1]["extra"]["roofline"] = "not a dict"
    decode[2]["extra"] = {"ttft_ms": float("nan"), "tokens": [], "variant_ran": None}
    odd.append(dict(records[1], case_id="llm/not-the-bench's-id"))  # left out of the view, kept in the table
    sets = result_sets([("odd.jsonl", odd)])
    (view,) = llm_roofline_views(sets)
    points = {(point.variant, point.batch): point for point in view.decode}  # the file: b1's three variants first
    failed = points["hf-generate", 1]
    assert (failed.status, failed.tokens_per_s, failed.note) == ("error", None, "CUDA out of memory")
    assert points["hf-static", 1].roofline_tokens_per_s is None and points["hf-static", 1].tokens_per_s > 0
    assert points["fade-loop", 1].ttft_ms is None and points["fade-loop", 1].tokens_match is None
    assert points["fade-loop", 1].tokens_check is None
    assert points["fade-loop", 2].roofline_tokens_per_s == 2000.0
    text = roofline_markdown(view)
    assert "| hf-generate | 1 | error |" in text and "hf-generate b1: CUDA out of memory" in text
    comparison = compare_sets(sets)
    assert any(row["row"] == "llm/not-the-bench's-id" for row in comparison.rows)


def test_prefill_only_records_make_a_view_of_their_own_and_other_suites_none(gpu_like):
    _, records = gpu_like
    prefill = [record for record in records if record["unit"] == "TFLOP/s"]
    (view,) = llm_roofline_views([ResultSet("p", "p.jsonl", {(r["case_id"], ""): r for r in prefill})])
    assert view.decode == [] and view.prompt_tokens is None and len(view.prefill) == 1
    assert "| prefill tokens | batch | FLOP/s | % of peak |" in roofline_markdown(view)
    others = [dict(record, suite="micro") for record in records]
    assert llm_roofline_views([ResultSet("m", "m.jsonl", {(r["case_id"], ""): r for r in others})]) == []
