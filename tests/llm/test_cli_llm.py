"""`fade bench llm`: a tiny config end to end on the CPU through the CLI (records, one per case, schema-valid,
every variant's greedy tokens equal to the fp32 reference), and bad input as one line with exit 2."""

import builtins
import json

import pytest

from tests.cliutil import one_line

from fade.errors import ExitCode
from fade.results import record_problem


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One quick run shared by the record checks (it costs ~20 s on a 2-core CPU)."""
    from fade import cli

    out = tmp_path_factory.mktemp("llm") / "llm.jsonl"
    code = cli.main(["bench", "llm", "--config", "tiny-llama", "--device", "cpu", "--quick", "-o", str(out)])
    return code, [json.loads(line) for line in out.read_text().splitlines()]


def test_quick_cpu_run_writes_one_valid_record_per_case(quick_run):
    code, records = quick_run
    ids = [record["case_id"] for record in records]
    assert len(ids) == len(set(ids)) == 7  # one prefill + 3 variants x batch 1 and 2
    assert all(record_problem(record) is None for record in records)
    assert code == ExitCode.OK, [record.get("error") for record in records]
    assert all(record["status"] == "ok" for record in records)


def test_every_variant_decodes_and_agrees_with_the_fp32_reference(quick_run):
    _, records = quick_run
    decode = [record for record in records if record["unit"] == "tokens/s"]
    assert {record["params"]["variant"] for record in decode} == {"hf-generate", "hf-static", "fade-loop"}
    for record in decode:
        assert record["value"] > 0
        assert record["extra"]["tokens"]["match"] is True, record["case_id"]
        numerics = record["extra"]["numerics"]  # the teacher-forced check: fp32 variants agree on every token
        assert numerics["verdict"] == "ok" and numerics["top1_agreement"] == 1.0, (record["case_id"], numerics["failed"])
        assert numerics["steps"] == 16 and numerics["checked"] == 16 * record["params"]["batch"]
        assert record["extra"]["ttft_ms"] > 0
        roofline = record["extra"]["roofline"]
        assert roofline["pct_of_roofline"] is None and "no peak memory bandwidth" in roofline["reason"]
        assert record["extra"]["memory"]["process_max_rss_bytes"] > 0
    prefill = [record for record in records if record["unit"] == "TFLOP/s"]
    assert len(prefill) == 1 and prefill[0]["value"] > 0 and prefill[0]["work"]["flops"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--config", "tiny-lama"], "did you mean 'tiny-llama'"),
    (["--batch", "0"], "--batch 0: must be a positive integer"),
    (["--batch", "1,x"], "--batch 'x': not an integer"),
    (["--variants", "fade-lop"], "did you mean 'fade-loop'"),
    (["--new-tokens", "1"], "give at least 2"),
    (["--config", "tiny-llama", "--prompt-tokens", "250", "--new-tokens", "16"], "positions for 256 tokens"),
])
def test_bad_input_is_one_line_and_exit_2(fade, tmp_path, argv, message):
    code, _, err = fade("bench", "llm", "--quick", "-o", tmp_path / "out.jsonl", *argv)
    assert code == ExitCode.USAGE
    assert message in one_line(err)


def test_an_unreadable_config_file_is_one_line_and_exit_2(fade, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path in (tmp_path / "absent.json", broken):
        code, _, err = fade("bench", "llm", "--config", path, "-o", tmp_path / "out.jsonl")
        assert code == ExitCode.USAGE
        assert str(path) in one_line(err)


def test_without_transformers_the_suite_stops_with_one_line(fade, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "transformers" else real(name, *rest))
    code, _, err = fade("bench", "llm", "--quick", "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.USAGE
    assert "needs transformers" in one_line(err)


def _saved_tiny_llama(folder):
    """A tiny Llama with its own seeded weights and an eos token, saved as from_pretrained reads it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                         max_position_embeddings=256, eos_token_id=2, bos_token_id=1))
    model.save_pretrained(folder)
    return model


def test_a_local_model_folder_runs_on_its_own_weights(fade, tmp_path):
    """`--config DIR` (config.json + safetensors): the model is the folder's, not a random one of its shape, its
    eos token cannot end a greedy run early, and the records say where the weights came from."""
    import torch

    from fade.analyze.llm_table import resolve_config
    from fade.measure.suites.llm import generation

    folder = tmp_path / "tiny"
    saved = _saved_tiny_llama(folder)
    config = resolve_config(str(folder))
    assert config.weights == str(folder.resolve()) and config.hidden_size == 64
    built = generation.build_model(config, "cpu")
    for name, value in saved.state_dict().items():
        assert torch.equal(built.state_dict()[name], value), name
    assert built.generation_config.eos_token_id is None
    out = tmp_path / "out.jsonl"
    code, _, err = fade("bench", "llm", "--config", folder, "--device", "cpu", "--quick", "--variants", "fade-loop",
                        "--batch", "1", "-o", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == ExitCode.OK, err
    decode = [record for record in records if record["unit"] == "tokens/s"]
    assert decode and all(record["status"] == "ok" for record in records)
    assert decode[0]["extra"]["weights"]["init"] == f"loaded from {folder.resolve()}"
    assert decode[0]["extra"]["tokens"]["match"] is True


def test_a_folder_without_config_or_weights_is_one_line_and_exit_2(fade, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = fade("bench", "llm", "--config", empty, "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.USAGE and "without config.json" in one_line(err)
    from transformers import LlamaConfig

    (tmp_path / "bare").mkdir()
    LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=512).to_json_file(tmp_path / "bare" / "config.json")
    code, _, err = fade("bench", "llm", "--config", tmp_path / "bare", "-o", tmp_path / "out.jsonl")
    assert code == ExitCode.USAGE and "no weights in the folder" in one_line(err)


def test_decode_cases_run_before_the_prefill_cases_and_their_profiled_attention_probe():
    """The cases share one worker; the prefill cases' attention probe records under torch.profiler, which slowed
    a host-bound step timed after it in the same process (suite.build_cases)."""
    from fade.analyze.llm_table import resolve_config
    from fade.measure.suites.llm.suite import build_cases

    cases = build_cases(resolve_config("tiny-llama"), dtype="fp32", variants=["hf-generate", "fade-loop"],
                        batches=[1, 2], prompt_tokens=8, new_tokens=4, prefill_tokens=[8, 16])
    functions = [case.function for case in cases]
    assert functions == ["decode_case"] * 4 + ["prefill_case"] * 2
