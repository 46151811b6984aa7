"""fade.analyze.llm: parameters, bytes and FLOPs of bundled shapes, each expected value worked out here from the
shape by hand (not by calling the function twice)."""

import pytest

from fade.analyze import llm
from fade.analyze.llm_table import load_llm_table

TABLE = load_llm_table()


def test_llama_3_1_8b_has_8_03_billion_parameters_and_16_06_gb_of_bf16_weights():
    # embed 128256 x 4096; per layer q, o 4096^2, k, v 4096 x 1024, MLP 3 x 4096 x 14336, two RMSNorms of 4096;
    # final norm 4096; untied LM head 128256 x 4096
    embedding = 128256 * 4096
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    expected = embedding + 32 * layer + 4096 + embedding
    config = TABLE.configs["llama-3.1-8b"]
    assert llm.parameter_counts(config).total == expected == 8_030_261_248
    assert llm.weight_bytes(config, "bf16") == 2 * expected  # 16.06 GB


def test_gpt2_reproduces_its_124_million_parameters_with_biases_layernorms_and_a_tied_head():
    wte, wpe = 50257 * 768, 1024 * 768
    attention = 768 * 3 * 768 + 3 * 768 + 768 * 768 + 768  # c_attn and c_proj with biases
    mlp = 768 * 3072 + 3072 + 3072 * 768 + 768
    layer = attention + mlp + 2 * 2 * 768  # two LayerNorms, weight and bias
    assert llm.parameter_counts(TABLE.configs["gpt2"]).total == wte + wpe + 12 * layer + 2 * 768 == 124_439_808


def test_qwen2_counts_its_qkv_biases():
    counts = llm.parameter_counts(TABLE.configs["qwen2.5-7b"])
    query, kv = 28 * 128, 4 * 128  # head_dim 3584 / 28 = 128
    assert counts.attention_per_layer == 3584 * query * 2 + 3584 * kv * 2 + query + 2 * kv


def test_tiny_llama_matches_what_transformers_builds():
    # 512 x 64 embedding and head, per layer 64^2 x 2 + 64 x 32 x 2 + 3 x 64 x 128 + 2 x 64, final norm 64
    assert llm.parameter_counts(TABLE.configs["tiny-llama"]).total == 2 * 512 * 64 + 2 * (2 * 4096 + 2 * 2048 + 3 * 8192 + 128) + 64


def test_kv_cache_of_llama_3_1_8b_is_128_kib_per_token_in_bf16():
    assert llm.kv_bytes_per_token(TABLE.configs["llama-3.1-8b"], "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072


def test_h200_roofline_of_llama_3_1_8b_at_batch_1_is_near_300_tokens_per_s():
    """4.8 TB/s over the ~15 GB a step reads (the input embedding table is not read: one row per sequence)."""
    config = TABLE.configs["llama-3.1-8b"]
    read = (8_030_261_248 - 128256 * 4096 + 4096) * 2  # all weights but the embedding table, plus one row
    kv = 131_072 * 1024  # 1024 cached tokens
    step = llm.decode_bytes_per_step(config, "bf16", 1, 1024)
    assert step == read + kv
    roofline = llm.roofline_tokens_per_s(step, 1, 4800.0)
    assert roofline == pytest.approx(4.8e12 / (read + kv))
    assert 300 < roofline < 330  # 16.06 GB whole would give 4.8e12 / 16.06e9 = 299


def test_batch_reads_the_weights_once_and_each_sequence_its_own_cache():
    config = TABLE.configs["llama-3.1-8b"]
    one, thirty_two = (llm.decode_bytes_per_step(config, "bf16", batch, 512) for batch in (1, 32))
    weights_1 = llm.weight_bytes_read_per_step(config, "bf16", 1)
    assert thirty_two - one == 31 * 131_072 * 512 + 31 * 4096 * 2  # 31 more caches, 31 more embedding rows
    assert llm.roofline_tokens_per_s(thirty_two, 32, 4800.0) > 20 * llm.roofline_tokens_per_s(one, 1, 4800.0)
    assert weights_1 > 0


def test_a_tied_head_reads_the_shared_table_every_step():
    config = TABLE.configs["llama-3.2-1b"]  # tied
    total = llm.parameter_counts(config).total
    assert llm.weight_bytes_read_per_step(config, "bf16", 1) == (total + 2048) * 2  # every weight + one row


def test_mistral_reads_its_cache_only_over_the_sliding_window():
    config = TABLE.configs["mistral-7b"]
    assert llm.attended_tokens(config, 10_000) == 4096
    extra = llm.decode_bytes_per_step(config, "bf16", 1, 10_000) - llm.decode_bytes_per_step(config, "bf16", 1, 4096)
    assert extra == 0


def test_prefill_flops_are_two_per_weight_per_token_plus_causal_attention():
    config = TABLE.configs["llama-3.1-8b"]
    linear_per_token = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    tokens = 2048
    expected = 2 * linear_per_token * tokens + 2 * 128256 * 4096 + 4 * 32 * 32 * 128 * tokens**2 / 2
    assert llm.prefill_flops(config, 1, tokens) == pytest.approx(expected)
    assert llm.prefill_flops(config, 4, tokens) == pytest.approx(4 * expected)


def test_mean_bytes_per_step_follow_the_growing_cache():
    config = TABLE.configs["tiny-llama"]
    weights = llm.weight_bytes_read_per_step(config, "fp32", 2)
    kv = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 kv heads, head_dim 16, fp32
    # prompt 16, 4 new tokens: steps attend to 17, 18, 19 tokens
    assert llm.mean_decode_bytes_per_step(config, "fp32", 2, 16, 4) == weights + 2 * kv * 18


def test_roofline_without_a_bandwidth_says_why_and_gives_no_percent():
    facts = llm.decode_roofline(TABLE.configs["tiny-llama"], "fp32", 1, 16, 8, 100.0, None)
    assert facts["pct_of_roofline"] is None and facts["roofline_tokens_per_s"] is None
    assert "no peak memory bandwidth" in facts["reason"]
    with_peak = llm.decode_roofline(TABLE.configs["tiny-llama"], "fp32", 1, 16, 8, 100.0, 1000.0)
    assert with_peak["pct_of_roofline"] == pytest.approx(100 * 100.0 / with_peak["roofline_tokens_per_s"])
