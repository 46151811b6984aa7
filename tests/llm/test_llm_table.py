"""fade.analyze.llm_table: the bundled rows load and carry sources; a bad row is one line naming file, row and
field; a Hugging Face config.json reads back into the same shape."""

import json

import pytest

from fade.analyze.llm_table import LlmTableError, config_from_params, config_to_params, load_llm_table, resolve_config

GOOD_ROW = """
[[config]]
name = "mine"
model_type = "llama"
hidden_size = 64
intermediate_size = 128
num_hidden_layers = 2
num_attention_heads = 4
num_key_value_heads = 2
vocab_size = 512
max_position_embeddings = 256
tie_word_embeddings = false
source = "a test"
"""


def test_every_bundled_row_loads_with_a_source():
    table = load_llm_table()
    assert {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "gpt2", "tiny-llama"} <= set(table.configs)
    for config in table.configs.values():
        assert config.source.strip()
    for architecture in table.architectures.values():
        assert architecture.source.startswith("https://")


@pytest.mark.parametrize("edit, message", [
    (("hidden_size = 64", "hidden_size = 0"), "config 1 (mine): field 'hidden_size' is 0"),
    (("hidden_size = 64", "hidden_size = \"64\""), "config 1 (mine): field 'hidden_size'"),
    (("num_key_value_heads = 2", "num_key_value_heads = 3"), "field 'num_key_value_heads' 3 does not divide"),
    (("model_type = \"llama\"", "model_type = \"lama\""), "did you mean 'llama'"),
    (("source = \"a test\"", "sauce = \"a test\""), "unknown field(s) ['sauce']"),
    (("tie_word_embeddings = false", ""), "field 'tie_word_embeddings' is missing"),
])
def test_a_bad_row_is_one_line_naming_the_row_and_the_field(tmp_path, edit, message):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD_ROW.replace(*edit))
    with pytest.raises(LlmTableError) as raised:
        resolve_config(str(path))
    assert message in str(raised.value)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_a_user_toml_row_resolves(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(GOOD_ROW)
    config = resolve_config(str(path))
    assert (config.name, config.head_dim, config.model_type) == ("mine", 16, "llama")


def test_a_hugging_face_config_json_reads_back_in_its_own_names(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
                                "n_inner": None, "vocab_size": 50257, "layer_norm_epsilon": 1e-5}))
    config = resolve_config(str(path))
    bundled = load_llm_table().configs["gpt2"]
    assert (config.hidden_size, config.intermediate_size, config.num_key_value_heads, config.tie_word_embeddings) == (
        bundled.hidden_size, bundled.intermediate_size, bundled.num_key_value_heads, True)


def test_an_unknown_name_suggests_the_closest():
    with pytest.raises(LlmTableError, match="did you mean 'tiny-llama'"):
        resolve_config("tiny-lama")


def test_case_parameters_round_trip():
    config = load_llm_table().configs["mistral-7b"]
    assert config_from_params(config_to_params(config)) == config


def test_hf_fields_use_the_model_types_own_names():
    fields = load_llm_table().configs["gpt2"].hf_fields()
    assert fields["n_embd"] == 768 and fields["n_inner"] == 3072 and "num_key_value_heads" not in fields
    assert fields["eos_token_id"] is None
