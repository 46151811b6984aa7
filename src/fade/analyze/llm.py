"""What a causal language model's shape implies for inference: parameters, weight and KV-cache bytes, the bytes a
decode step reads and the bandwidth roofline it sets, and prefill FLOPs (docs/llm.md gives each formula's source).

Pure arithmetic over fade.analyze.llm_table.LlmConfig; no torch. Counting conventions, stated once here:

Parameters
    Embedding vocab x hidden (+ max_positions x hidden for learned positions); per layer the attention
    projections q: hidden x (heads x head_dim), k and v: hidden x (kv_heads x head_dim) each (grouped-query
    attention: kv_heads <= heads), o: (heads x head_dim) x hidden, and their biases where the architecture has
    them; the MLP, gated (gate, up, down: 3 x hidden x intermediate) or plain (up, down: 2 x); two norms per layer
    and one final (RMSNorm: hidden, LayerNorm: 2 x hidden); the LM head vocab x hidden unless tied to the
    embedding. This reproduces `sum(p.numel() for p in model.parameters())` of transformers' models.
Bytes read per decode step
    Every weight a step multiplies with is read once per step, for the whole batch (one GEMM per projection
    with the batch as its M): all parameters except the embedding tables, of which a step reads only the
    batch's rows (a tied LM head reads the shared table whole, so it counts then). Each sequence then reads
    its own KV cache: 2 (K and V) x layers x kv_heads x head_dim x dtype bytes per cached token, over
    min(context, sliding_window) tokens. Activations, logits and the cache write of the new token are left
    out: at batch 32 they are < 1% of a 7B model's weights. Like gpt-fast's "bandwidth achieved" (model bytes
    x tokens/s), the roofline assumes the weights stream from memory every step, which holds once they are
    larger than the last-level cache.
Roofline
    tokens/s <= bandwidth / bytes per step x batch: a step cannot finish before its bytes have streamed.
FLOPs
    A matmul of an (M x K) input by a (K x N) weight is 2 x M x N x K. Prefill of S tokens: 2 x (the layers'
    projection and MLP weights) x S per sequence, plus the LM head for the positions whose logits are
    computed (generate() computes the last one only), plus attention's two matmuls (QK^T and PV,
    4 x layers x heads x head_dim per query-key pair) over S^2 / 2 pairs (causal: the convention of
    FlashAttention's benchmarks, which count half the square). Biases, norms, RoPE, softmax and activations
    are elementwise and count 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class ParameterCounts:
    """Parameters by part; `total` is the sum, `layer` one decoder layer's."""

    embedding: int  # vocab x hidden token table
    position_embedding: int  # learned position table (0 with RoPE)
    attention_per_layer: int  # q, k, v, o weights and biases
    mlp_per_layer: int
    norms_per_layer: int
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    layers: int

    @property
    def layer(self) -> int:
        return self.attention_per_layer + self.mlp_per_layer + self.norms_per_layer

    @property
    def total(self) -> int:
        return self.embedding + self.position_embedding + self.layers * self.layer + self.final_norm + self.lm_head

    def to_dict(self) -> dict:
        return {**asdict(self), "layer": self.layer, "total": self.total}


def parameter_counts(config) -> ParameterCounts:
    """The parameters of `config` by part (module docstring, "Parameters")."""
    architecture = config.architecture
    hidden = config.hidden_size
    query_width = config.num_attention_heads * config.head_dim
    kv_width = config.num_key_value_heads * config.head_dim
    attention = hidden * query_width + 2 * hidden * kv_width + query_width * hidden
    if architecture.qkv_bias:
        attention += query_width + 2 * kv_width
    if architecture.output_bias:
        attention += hidden
    matrices = 3 if architecture.mlp == "gated" else 2
    mlp = matrices * hidden * config.intermediate_size
    if architecture.mlp_bias:
        mlp += (matrices - 1) * config.intermediate_size + hidden  # gate and up (or up) to intermediate, down to hidden
    norm = hidden if architecture.norm == "rmsnorm" else 2 * hidden
    return ParameterCounts(
        embedding=config.vocab_size * hidden,
        position_embedding=config.max_position_embeddings * hidden if architecture.positions == "learned" else 0,
        attention_per_layer=attention,
        mlp_per_layer=mlp,
        norms_per_layer=2 * norm,
        final_norm=norm,
        lm_head=0 if config.tie_word_embeddings else config.vocab_size * hidden,
        layers=config.num_hidden_layers,
    )


def weight_bytes(config, dtype: str) -> int:
    """Bytes of all parameters in `dtype` (what the model occupies)."""
    return parameter_counts(config).total * DTYPE_BYTES[dtype]


def weight_bytes_read_per_step(config, dtype: str, batch: int) -> int:
    """Weight bytes one decode step reads for a batch (module docstring, "Bytes read per decode step")."""
    counts = parameter_counts(config)
    streamed = counts.total - counts.embedding - counts.position_embedding
    if config.tie_word_embeddings:
        streamed += counts.embedding  # the LM head multiplies by the shared table
    tables = 2 if counts.position_embedding else 1
    looked_up = batch * tables * config.hidden_size  # one row per sequence from each table
    return (streamed + looked_up) * DTYPE_BYTES[dtype]


def kv_bytes_per_token(config, dtype: str) -> int:
    """KV-cache bytes one cached token takes, all layers: 2 x layers x kv_heads x head_dim x dtype bytes."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * DTYPE_BYTES[dtype]


def attended_tokens(config, context_tokens: int) -> int:
    """Cached tokens a new token reads: the context, or the sliding window where the model has one."""
    window = config.sliding_window
    return context_tokens if window is None else min(context_tokens, window)


def decode_bytes_per_step(config, dtype: str, batch: int, context_tokens: int) -> int:
    """Bytes one decode step reads: the weights once for the batch plus each sequence's KV cache over
    `context_tokens` (the cached tokens the new token attends to, itself included)."""
    kv = batch * kv_bytes_per_token(config, dtype) * attended_tokens(config, context_tokens)
    return weight_bytes_read_per_step(config, dtype, batch) + kv


def decode_contexts(prompt_tokens: int, new_tokens: int) -> range:
    """The context of each decode step of a greedy run: the prefill yields token 1 from the prompt; step i
    (1..new_tokens-1) feeds token i at position prompt+i-1 and attends to prompt+i tokens."""
    return range(prompt_tokens + 1, prompt_tokens + new_tokens)


def mean_decode_bytes_per_step(config, dtype: str, batch: int, prompt_tokens: int, new_tokens: int) -> float:
    """decode_bytes_per_step averaged over the decode steps of a run (its KV cache grows by one token a step)."""
    contexts = decode_contexts(prompt_tokens, new_tokens)
    if not contexts:
        raise ValueError("a run of fewer than 2 new tokens has no decode step")
    return sum(decode_bytes_per_step(config, dtype, batch, context) for context in contexts) / len(contexts)


def roofline_tokens_per_s(bytes_per_step: float, batch: int, bandwidth_gbs: Optional[float]) -> Optional[float]:
    """The bandwidth roofline: bandwidth / bytes per step x batch tokens/s (None without a bandwidth)."""
    if not bandwidth_gbs or bytes_per_step <= 0:
        return None
    return bandwidth_gbs * 1e9 / bytes_per_step * batch


def matmul_params_per_token(config) -> int:
    """Weights every token multiplies with in the decoder layers: the projections and the MLP, no biases."""
    hidden = config.hidden_size
    query_width = config.num_attention_heads * config.head_dim
    kv_width = config.num_key_value_heads * config.head_dim
    attention = 2 * hidden * query_width + 2 * hidden * kv_width
    matrices = 3 if config.architecture.mlp == "gated" else 2
    return config.num_hidden_layers * (attention + matrices * hidden * config.intermediate_size)


def causal_pairs(config, tokens: int) -> float:
    """Query-key pairs a causal prefill of `tokens` computes: tokens^2 / 2 (module docstring), or, past a
    sliding window w, w x tokens - w^2 / 2."""
    window = config.sliding_window
    if window is None or tokens <= window:
        return tokens * tokens / 2
    return window * tokens - window * window / 2


def prefill_flops(config, batch: int, tokens: int, logits_tokens: int = 1) -> float:
    """FLOPs of a prefill of `tokens` per sequence (module docstring, "FLOPs"): 2 x matmul params x tokens +
    2 x vocab x hidden x logits_tokens + 4 x layers x heads x head_dim x causal pairs, times the batch."""
    linear = 2 * matmul_params_per_token(config) * tokens
    lm_head = 2 * config.vocab_size * config.hidden_size * logits_tokens
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * causal_pairs(config, tokens)
    return batch * (linear + lm_head + attention)


def decode_flops_per_step(config, batch: int, context_tokens: int) -> float:
    """FLOPs of one decode step: 2 x (matmul params + LM head) + 4 x layers x heads x head_dim x attended tokens,
    per sequence."""
    linear = 2 * (matmul_params_per_token(config) + config.vocab_size * config.hidden_size)
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * attended_tokens(config, context_tokens)
    return batch * (linear + attention)


def pct(value: Optional[float], limit: Optional[float]) -> Optional[float]:
    """100 x value / limit, or None when either is unknown."""
    if value is None or not limit:
        return None
    return 100.0 * value / limit


def decode_roofline(config, dtype: str, batch: int, prompt_tokens: int, new_tokens: int, tokens_per_s: float,
                    bandwidth_gbs: Optional[float], bandwidth_source: Optional[str] = None) -> dict:
    """The record's `extra.roofline` of a decode case: bytes per step (mean over the run's steps), the
    roofline and the measured tokens/s as a % of it, and the bandwidth the measurement implies."""
    bytes_per_step = mean_decode_bytes_per_step(config, dtype, batch, prompt_tokens, new_tokens)
    roofline = roofline_tokens_per_s(bytes_per_step, batch, bandwidth_gbs)
    facts = {
        "bytes_per_step": bytes_per_step,
        "weight_bytes_read_per_step": weight_bytes_read_per_step(config, dtype, batch),
        "kv_bytes_per_token": kv_bytes_per_token(config, dtype),
        "mean_context_tokens": sum(decode_contexts(prompt_tokens, new_tokens)) / (new_tokens - 1),
        "achieved_gbs": bytes_per_step * tokens_per_s / batch / 1e9,
        "bandwidth_gbs": bandwidth_gbs,
        "bandwidth_source": bandwidth_source,
        "roofline_tokens_per_s": roofline,
        "pct_of_roofline": pct(tokens_per_s, roofline),
        "formula": "roofline = bandwidth / bytes_per_step x batch; bytes_per_step = weights read once + batch x "
                   "kv_bytes_per_token x attended tokens, averaged over the decode steps (fade.analyze.llm)",
    }
    if roofline is None:
        facts["reason"] = "no peak memory bandwidth is known for this device (the spec table has none): the figure has no %"
    return facts
