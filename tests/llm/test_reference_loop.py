"""benchmarks/llm_reference.py, the hand-written decode loop FADE's figures are held against: a CPU run of
tiny-llama (small sizes, eager, ~15 s) writes one row per (batch, variant) with a positive tokens/s, and its
hand loop's greedy tokens equal model.generate's from the same weights, generated here by the test itself.
`--against` pairs FADE's records with the rows and flags a pair outside the bar."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliutil import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "llm_reference.py"
SIZES = {"prompt_tokens": 8, "new_tokens": 16}  # 16: decode time is a difference of two timings (as --quick)


@pytest.fixture(scope="module")
def cpu_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference") / "reference.jsonl"
    argv = [sys.executable, str(SCRIPT), "--config", "tiny-llama", "--device", "cpu", "--dtype", "fp32", "--batch", "1,2",
            "--prompt-tokens", str(SIZES["prompt_tokens"]), "--new-tokens", str(SIZES["new_tokens"]), "--repeats", "5",
            "--keep-tokens", "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, [json.loads(line) for line in out.read_text().splitlines()], done.stdout


def test_one_row_per_batch_and_variant_with_positive_tokens_per_s(cpu_rows):
    _, rows, table = cpu_rows
    assert sorted((row["batch"], row["variant"]) for row in rows) == sorted(
        (batch, variant) for batch in (1, 2) for variant in ("hf-generate", "hf-static", "fade-loop"))
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["decode_ms_per_step"] > 0 and row["ttft_ms"] > 0, row
        assert row["tokens_per_s"] == pytest.approx(row["batch"] * 1e3 / row["decode_ms_per_step"])
        assert len(row["samples_full_s"]) == len(row["samples_first_s"]) == 5
        assert (row["prompt_tokens"], row["new_tokens"], row["model"], row["dtype"]) == (8, 16, "tiny-llama", "fp32")
        assert row["compiled"] is False  # the CPU runs the loop eager (--compile auto)
        assert f"| tiny-llama | fp32 | {row['batch']} | {row['variant']} |" in table


def test_the_hand_loop_decodes_what_model_generate_decodes(cpu_rows):
    """fp32, same weights (the script's seeded build, rebuilt here): the loop's greedy tokens are generate()'s."""
    import torch

    _, rows, _ = cpu_rows
    script = load_benchmark("llm_reference")
    model = script.build_model("tiny-llama", "cpu", torch.float32)
    for batch in (1, 2):
        ids = script.prompt(model.config.vocab_size, batch, SIZES["prompt_tokens"], "cpu")
        with torch.inference_mode():
            expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=SIZES["new_tokens"],
                                      do_sample=False)[:, ids.shape[1]:].tolist()  # fmt: skip
        assert len(expected[0]) == SIZES["new_tokens"] and len(set(expected[0])) > 1  # a real sequence, not one id
        by_variant = {row["variant"]: row for row in rows if row["batch"] == batch}
        for variant in ("fade-loop", "hf-static", "hf-generate"):
            assert by_variant[variant]["tokens"] == expected, variant
            assert by_variant[variant]["tokens_match_hf_generate"] is True


def test_the_hand_loop_on_other_weights_decodes_other_tokens():
    """The token check can fail: the loop on a model with different weights gives other tokens."""
    import torch

    script = load_benchmark("llm_reference")
    model = script.build_model("tiny-llama", "cpu", torch.float32)
    ids = script.prompt(model.config.vocab_size, 1, SIZES["prompt_tokens"], "cpu")
    loop = script.hand_loop(model, SIZES["prompt_tokens"], SIZES["new_tokens"], "cpu", compile_step=False, fullgraph=True)
    before = loop(ids, SIZES["new_tokens"]).tolist()
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)
    assert loop(ids, SIZES["new_tokens"]).tolist() != before


def test_resume_skips_rows_already_written(cpu_rows, tmp_path):
    out, rows, _ = cpu_rows
    copy = tmp_path / "reference.jsonl"
    copy.write_text(out.read_text() + '{"cut short')  # a kill mid-line is ignored
    script = load_benchmark("llm_reference")
    assert len(script.done_keys(copy)) == len(rows) == 6


def _fade_record(batch, variant, value, roofline=None):
    return {"suite": "llm", "unit": "tokens/s", "status": "ok", "value": value,
            "case_id": f"llm/tiny-llama/fp32/{variant}/b{batch}/p8+n16",
            "params": {"dtype": "fp32", "batch": batch, "variant": variant, "prompt_tokens": 8, "new_tokens": 16},
            "extra": {"roofline": {"roofline_tokens_per_s": roofline}}}  # fmt: skip


def test_against_pairs_fade_records_with_the_rows_and_flags_a_gap(cpu_rows, tmp_path):
    out, rows, _ = cpu_rows
    script = load_benchmark("llm_reference")
    fade = tmp_path / "llm.jsonl"
    figures = {(row["batch"], row["variant"]): row["tokens_per_s"] for row in rows}
    fade.write_text("".join(json.dumps(_fade_record(b, v, tps * 1.02, roofline=4 * tps)) + "\n" for (b, v), tps in figures.items()))
    text, ok = script.against(str(fade), str(out), 5.0)
    assert ok and text.count("| yes |") == 6 and "102.0%" in text and "25.0%" in text
    fade.write_text(fade.read_text() + json.dumps(_fade_record(1, "fade-loop", figures[(1, "fade-loop")] * 0.9)) + "\n")
    text, ok = script.against(str(fade), str(out), 5.0)
    assert not ok and "90.0%" in text and "| NO |" in text


def test_against_a_file_that_is_not_there_is_one_line_and_exit_2(tmp_path, capsys):
    """Session 22's call C gave the reference --against with an --out it had not written yet: --against measures
    nothing, and the script died with a FileNotFoundError traceback. It now says which file is missing."""
    import pytest

    script = load_benchmark("llm_reference")
    fade_rows = tmp_path / "fade.jsonl"
    fade_rows.write_text("")
    with pytest.raises(SystemExit) as stopped:
        script.main(["--against", str(fade_rows), "--out", str(tmp_path / "ref.jsonl")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "ref.jsonl does not exist" in err and "Traceback" not in err
