"""One `fade bench llm` case in the worker: a prefill timed as TFLOP/s, or greedy decoding under one variant
timed as tokens/s against the bandwidth roofline, with its greedy tokens checked against a reference.

Method, in the order a decode case runs (fade.analyze.llm gives the byte and FLOP counts):

Build
    generation.build_model: the config's model in fp32, weights from a fixed seed on the device (random:
    speed only, nothing is downloaded); the prompt is batch x prompt_tokens uniform token ids (a fixed seed).
Reference
    hf-generate in fp32, eager, from the same weights, new_tokens greedy tokens. The model is then cast to the
    case's dtype (the same weights, rounded) and the variant built (generation.variant_generator).
Check
    One untimed run of the variant's generate(prompt, new_tokens): it compiles what the variant compiles, and
    its free-running tokens are compared with the reference's (`extra.tokens`: match, the first position where
    any sequence differs, the mean matching prefix). In bf16 or fp16 a near-tie between two logits may round
    the other way and the sequences part there (with random weights at token 0 or 1), so this says little; the
    numerics check below is the one that judges.
Timing
    fade.measure.timing.measure (its docstring: warm-up, device sync, median + IQR, stop rule) on two calls:
    generate(prompt, 1), the time to first token (prefill + the first token, with what generate() does around
    it), and generate(prompt, new_tokens), in TIMING_ROUNDS alternating rounds whose samples are pooled per
    call (each round gets 1/TIMING_ROUNDS of the run's budget, minimum run and sample counts, at least 2
    samples): both medians then come from the same stretches of time, so a burst of other work cannot land
    on one call only (a shared 2-core VM under load: generate(1) once took longer than generate(8) measured
    a moment later). Decode time per step = (median(generate n) - median(generate 1)) /
    (n - 1): the decode steps only, as the caller sees them. The range beside it pairs the quartiles of the two
    (q1 of one with q3 of the other), a bound on the spread, not a confidence interval.
Derived figures
    value = batch / decode time per step (tokens/s over the batch). extra.roofline (analyze.llm.decode_roofline):
    the mean bytes a step reads over this run's contexts, the roofline tokens/s from the spec table's peak
    memory bandwidth and the % of it reached; without a known bandwidth (the CPU) the figure has no % and the
    record says why.
Memory
    CUDA/ROCm: torch.cuda.max_memory_allocated from the variant's build to the end of its timing (caching
    allocator only). Elsewhere no device counter exists: `extra.memory.process_max_rss_bytes` is the worker
    process's peak resident set since it started (torch, transformers and earlier cases included), labelled so.
Numerics
    After the timing and the memory reading, untimed (fade.measure.suites.llm.numerics): the variant run along
    the reference's greedy tokens through its own decode path, its per-step next-token distributions compared
    with the reference's (KL, top-1 agreement, near-ties) and with the dtype's own floor; `extra.numerics`
    holds the figures and the verdict, "ok" or "differ" with what failed (fade.analyze.llm_numerics). A
    "differ" does not fail the case: the record says it.
Prefill case
    model(prompt of `tokens`, use_cache=True, logits_to_keep=1) in the case's dtype, timed with measure;
    value = analyze.llm.prefill_flops / median / 1e12 TFLOP/s against the dtype's spec-table peak.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
from typing import Optional

from fade.analyze import llm as llm_math
from fade.analyze.llm_table import config_from_params
from fade.measure.case import CaseResult, CaseSkipped, synchronize, tflops_result
from fade.measure.suites.llm import generation, numerics
from fade.measure.suites.models.case import device_facts
from fade.measure.step.runner import inference_context
from fade.measure.timing import measure, split_settings

REFERENCE = numerics.REFERENCE
TOKEN_NOTE = ("free-running: a mismatch does not fail the case: in bf16/fp16 a near-tie between two logits may round "
              "the other way and the sequences part from there; extra.numerics is the teacher-forced check that judges")  # fmt: skip
CUDA_MEMORY_SOURCE = "torch.cuda.max_memory_allocated from the variant's build to the end of its timing (caching allocator only)"
TIMING_ROUNDS = 3  # alternating rounds of generate(1) and generate(n); see "Timing"
RSS_SOURCE = "process peak resident set (getrusage ru_maxrss) since the worker started: torch, transformers and earlier cases included"


def decode_case(ctx, *, config: dict, variant: str, dtype: str, batch: int, prompt_tokens: int, new_tokens: int) -> CaseResult:
    """Greedy generation of `new_tokens` tokens after a `prompt_tokens` prompt for `batch` sequences under
    `variant` (generation.VARIANTS) in `dtype` (fp32, bf16, fp16)."""
    shape = config_from_params(config)
    device = ctx.device
    peaks, dtype_support = device_facts(device)
    if dtype_support.get(dtype):
        raise CaseSkipped(dtype_support[dtype])
    model = generation.build_model(shape, device)
    ids = generation.prompt_ids(shape.vocab_size, batch, prompt_tokens, device)
    reference = numerics.reference_run(model, ids, new_tokens, numerics.check_steps(batch, shape.vocab_size, new_tokens))
    reference_tokens = reference.tokens
    generation.cast_model(model, dtype)
    _reset_peak_memory(device)
    generate, facts = generation.variant_generator(variant, model, batch=batch, prompt_tokens=prompt_tokens,
                                                   new_tokens=new_tokens, device=device)  # fmt: skip
    tokens = generate(ids, new_tokens)
    if tuple(tokens.shape) != (batch, new_tokens):
        raise RuntimeError(f"{variant} returned tokens of shape {tuple(tokens.shape)}, not ({batch}, {new_tokens})")
    if variant == "hf-static":
        facts["compiled"] = generation.hf_compiled(model)
    tokens_check = token_agreement(tokens.tolist(), reference_tokens.tolist())

    first, full = interleaved(lambda: generate(ids, 1), lambda: generate(ids, new_tokens), device, ctx.timing)
    steps = new_tokens - 1
    decode_s = (full.median_s - first.median_s) / steps
    if not decode_s > 0:
        raise RuntimeError(f"decode time not resolved: generate({new_tokens}) took {full.median_s * 1e3:.3g} ms, "
                           f"generate(1) {first.median_s * 1e3:.3g} ms; give more --new-tokens")
    tokens_per_s = batch / decode_s
    memory = peak_memory(device)
    variant_rows, path = numerics.variant_rows(generate, ids, reference)
    check = numerics.numerics_record(dtype, variant_rows, numerics.floor_rows(model, ids, reference),
                                     new_tokens=new_tokens, path=path)  # fmt: skip
    bandwidth = (peaks or {}).get("bandwidth_gbs")
    roofline = llm_math.decode_roofline(shape, dtype, batch, prompt_tokens, new_tokens, tokens_per_s, bandwidth,
                                    (peaks or {}).get("source"))  # fmt: skip
    extra = {
        "variant_ran": {"name": variant, **facts},
        "tokens": tokens_check,
        "numerics": check,
        "ttft_ms": first.median_s * 1e3,
        "ttft": first.stats(),
        "decode_ms_per_step": decode_s * 1e3,
        "decode_tokens_per_s_range": _range(first, full, steps, batch),
        "roofline": roofline,
        "memory": memory,
        "weights": {"parameters": llm_math.parameter_counts(shape).total, "bytes": llm_math.weight_bytes(shape, dtype),
                    "init": weights_init(shape)},  # fmt: skip
        "decode_flops_per_step": llm_math.decode_flops_per_step(shape, batch, prompt_tokens + new_tokens // 2),
    }
    return CaseResult(
        value=tokens_per_s,
        unit="tokens/s",
        formula="batch * (new_tokens - 1) / (median_s(generate new_tokens) - median_s(generate 1)); timing = generate(new_tokens)",
        timing=full,
        work={"decode_steps": steps, "batch": batch},
        extra=extra,
    )


def prefill_case(ctx, *, config: dict, dtype: str, batch: int, tokens: int) -> CaseResult:
    """One forward pass over a `tokens`-long prompt for `batch` sequences, filling a fresh cache, as TFLOP/s."""
    import torch

    shape = config_from_params(config)
    device = ctx.device
    _peaks, dtype_support = device_facts(device)
    if dtype_support.get(dtype):
        raise CaseSkipped(dtype_support[dtype])
    model = generation.cast_model(generation.build_model(shape, device), dtype)
    ids = generation.prompt_ids(shape.vocab_size, batch, tokens, device)
    _reset_peak_memory(device)

    def prefill():
        with inference_context(device):
            return model(ids, use_cache=True, logits_to_keep=1).logits

    timing = measure(prefill, device=device, **ctx.timing)
    flops = llm_math.prefill_flops(shape, batch, tokens)
    formula = ("prefill_flops / median_s / 1e12; prefill_flops = batch x (2 x matmul params x tokens + 2 x vocab x "
               "hidden + 4 x layers x heads x head_dim x tokens^2 / 2) (fade.analyze.llm)")  # fmt: skip
    memory = peak_memory(device)
    del model
    return tflops_result(timing, int(flops), formula, dtype, {"memory": memory,
                                                               "ttft_note": "a prefill alone; decode cases time the first token as users see it",
                                                               "attention": attention_truth(shape, dtype, batch, tokens, ctx)})


def attention_truth(shape, dtype: str, batch: int, tokens: int, ctx) -> dict:
    """The attention probe (fade.measure.attention) for this model's real attention: its head_dim, heads and KV
    heads (GQA) in the case's dtype, as the prefill runs it (q = kv = tokens, causal: transformers passes
    is_causal when no padding mask is given), as a decode step over a dynamic cache runs it (hf-generate: 1 query
    against `tokens` cached keys, no mask, enable_gqa) and as one over a static cache does (hf-static and FADE's
    loop: the cache is longer than what it holds, so transformers passes an explicit mask, and with a mask it
    repeats K and V to the query heads instead of enable_gqa). Each backend's row and the finding (a math
    fallback with its cause, or a slower default). On the H200 session 21's decode probe without the mask told
    to force the efficient kernel; in the static-cache step the tuner's forced efficient attention found no
    kernel (docs/performance.md)."""
    from fade.measure.attention import PROBE_TIMING, QUICK_PROBE_TIMING, probe_attention

    return {phase: probe_attention(attention_shape(shape, dtype, batch, tokens, phase), device=ctx.device,
                                   timing=QUICK_PROBE_TIMING if ctx.quick else PROBE_TIMING)
            for phase in ATTENTION_PHASES}  # fmt: skip


# how each phase calls SDPA (attention_truth): q_len (None: the `tokens` of the cache), mask, GQA path
ATTENTION_PHASES = {"prefill": (None, "causal", "auto"), "decode": (1, "none", "auto"),
                    "decode_static_cache": (1, "explicit", "repeat_kv")}  # fmt: skip


def attention_shape(shape, dtype: str, batch: int, tokens: int, phase: str):
    """The fade.measure.attention.AttentionShape of `phase` (ATTENTION_PHASES) for a model `shape` (LlmShape) over
    `tokens` keys: attention_truth's probes, and fade tune --generate's (generate_trial.decode_attention_probes)."""
    from fade.measure.attention import AttentionShape

    q_len, mask, gqa = ATTENTION_PHASES[phase]
    return AttentionShape(batch=batch, q_heads=shape.num_attention_heads, kv_heads=shape.num_key_value_heads,
                          head_dim=shape.head_dim, q_len=tokens if q_len is None else q_len, kv_len=tokens, mask=mask,
                          dtype=dtype, gqa=gqa)  # fmt: skip


def interleaved(first_call, second_call, device: str, settings: dict) -> tuple:
    """(Timing of first_call, Timing of second_call), each pooled over TIMING_ROUNDS alternating measure() rounds
    (module docstring, "Timing")."""
    share = split_settings(settings, TIMING_ROUNDS)
    rounds = {0: [], 1: []}
    for _ in range(TIMING_ROUNDS):
        for side, call in enumerate((first_call, second_call)):
            rounds[side].append(measure(call, device=device, **share))
    return tuple(_pooled(timings) for timings in rounds.values())


def _pooled(timings: list):
    """One Timing holding the samples of `timings` in the order they ran; warm-up counts added."""
    head = timings[0]
    return dataclasses.replace(head, samples_s=tuple(sample for timing in timings for sample in timing.samples_s),
                               warmup_calls=sum(timing.warmup_calls for timing in timings),
                               warmup_s=sum(timing.warmup_s for timing in timings),
                               stop_reason="+".join(timing.stop_reason for timing in timings))  # fmt: skip


def token_agreement(tokens: list, reference: list) -> dict:
    """`extra.tokens`: whether each sequence's greedy tokens equal the reference's, the first position where any
    differs (0-based, None when all match) and the mean matching prefix in tokens."""
    prefixes = []
    for row, reference_row in zip(tokens, reference):
        prefix = next((index for index, (a, b) in enumerate(zip(row, reference_row)) if a != b), len(row))
        prefixes.append(prefix)
    checked = len(tokens[0]) if tokens else 0
    first_mismatch = min(prefixes) if prefixes and min(prefixes) < checked else None
    return {
        "reference": REFERENCE,
        "match": first_mismatch is None,
        "first_mismatch": first_mismatch,
        "mean_matching_prefix": sum(prefixes) / len(prefixes) if prefixes else None,
        "checked_tokens": checked,
        "sequences": len(tokens),
        "note": TOKEN_NOTE,
    }


def peak_memory(device: str) -> dict:
    """`extra.memory` (module docstring, "Memory")."""
    if device.startswith("cuda"):
        import torch

        synchronize(device)
        return {"peak_allocated_bytes": torch.cuda.max_memory_allocated(device), "source": CUDA_MEMORY_SOURCE}
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"peak_allocated_bytes": None, "process_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            "source": RSS_SOURCE, "reason": f"{device} has no allocator peak counter"}  # fmt: skip


def _reset_peak_memory(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def _range(first, full, steps: int, batch: int) -> Optional[list]:
    """[low, high] tokens/s from the quartiles of the two timings (module docstring, "Timing"); None when the
    quartiles overlap so much that a bound is not positive."""
    slowest = (full.q3_s - first.q1_s) / steps
    fastest = (full.q1_s - first.q3_s) / steps
    if not (slowest > 0 and fastest > 0):
        return None
    return [batch / slowest, batch / fastest]


def weights_init(shape) -> str:
    """Where a case's weights came from, as its record says."""
    if shape.weights:
        return f"loaded from {shape.weights}"
    return "random (seeded), speed only: nothing downloaded"
