"""One `fade tune --generate` trial in the benchmark worker (issue 29): a causal LM's greedy decode under one
configuration of the `generate` knobs of data/knobs.toml, timed and checked by the generation gate.

Build
    The model of an LLM config (fade.analyze.llm_table.resolve_config: a bundled shape with random weights, a
    config.json, or a local model folder), from the weight seed, in `dtype`; its decode loop
    (fade.measure.suites.llm.generation.FadeLoop) with the knobs as options: kv_cache -> cache, decode_compile ->
    compile mode, sdpa_backend -> a forced SDPA backend; weight_quant -> a copy of the model with its linear
    weights quantized by torchao (generation.quantize_weights), the unquantized model kept as the gate's
    reference; the record's `decode` facts give both models' weight bytes (the bytes-per-token cut).
Timing
    A whole greedy run (prefill of `prompt_tokens` random tokens, then `new_tokens` decoded) per call, timed by
    fade.measure.timing.measure with the run's settings after a warm-up run (compile, cache set-up); the value is
    batch x new_tokens / the median run: generated tokens per second, as a user's generate() call sees them.
Numerics
    The generation gate (fade.measure.suites.llm.gate) at batch 1 over the shipped text: the same weights'
    plain forward, no cache, is the reference, and their fp32 forward (taken before the cast) the floor; the
    trial's own loop (the same options, a loop of the gate's length) is fed the text. The record goes to the search as {"mode": "generate", ...};
    fade.measure.step.numerics.check_generation rejects a "differ".
"""

from __future__ import annotations

import statistics
from typing import Optional

from fade.act.tune.search import round_settings
from fade.act.tune.trial import in_rounds
from fade.measure.case import CaseResult

GENERATE_KNOBS = ("kv_cache", "decode_compile", "sdpa_backend", "weight_quant", "decode_batch")


def decode_options(knobs: dict) -> dict:
    """FadeLoop's options for a configuration of the generate knobs (knob id -> value; a knob left out is at
    its baseline)."""
    unknown = sorted(set(knobs) - set(GENERATE_KNOBS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a knob of a decode loop ({', '.join(GENERATE_KNOBS)})")
    compile_mode = knobs.get("decode_compile", "off")
    backend = knobs.get("sdpa_backend", "default")
    return {"cache": knobs.get("kv_cache", "dynamic"), "compile": None if compile_mode == "off" else compile_mode,
            "sdpa": None if backend == "default" else backend}


def candidate_model(reference, knobs: dict):
    """The model a configuration decodes with: `reference` itself, or a quantized copy (weight_quant), so the
    gate's reference stays the unquantized model."""
    import copy

    from fade.measure.suites.llm import generation

    kind = knobs.get("weight_quant", "none")
    if kind == "none":
        return reference
    return generation.quantize_weights(copy.deepcopy(reference), kind)


def batch_of(knobs: dict, batch: int) -> int:
    """The batch a configuration decodes: its decode_batch knob (a latency-target search), else `batch`."""
    return int(knobs["decode_batch"]) if "decode_batch" in knobs else batch


def latency_numerics(numerics: dict, median_run_s: float, new_tokens: int, latency_ms) -> dict:
    """The gate's record with the per-token latency (a run's median time over its new tokens) and the target."""
    if latency_ms is None:
        return numerics
    return {**numerics, "latency_ms": 1e3 * median_run_s / new_tokens, "latency_target_ms": float(latency_ms)}


def tune_generate_trial(ctx, *, config: str, batch: int, knobs: dict, prompt_tokens: int = 128,
                        new_tokens: int = 64, dtype: str = "bf16", latency_ms=None) -> CaseResult:
    """The trial (module docstring) of the LLM config `config` under `knobs`; with `latency_ms`, the per-token
    latency joins its numerics (numerics.check_generation rejects a configuration slower than the target)."""
    from fade.analyze.llm_table import resolve_config

    result = measure_generate_trial(resolve_config(config), knobs, batch=batch_of(knobs, batch),
                                    prompt_tokens=prompt_tokens, new_tokens=new_tokens, dtype=dtype,
                                    device=ctx.device, timing_settings=ctx.timing)
    result.extra["numerics"] = latency_numerics(result.extra["numerics"], result.timing.median_s, new_tokens,
                                                latency_ms)
    return result


class PreparedDecode:
    """One decode configuration built and checked: `run()` is one timed greedy run; `numerics` the gate's record."""

    def __init__(self, run, numerics: dict, facts: dict, generated: int):
        self.run, self.numerics, self.facts, self.generated = run, numerics, facts, generated


def prepare_decode(model, shape, knobs: dict, *, batch: int, prompt_tokens: int, new_tokens: int, dtype: str,
                   device: str, floor=None) -> PreparedDecode:
    """The decode loop of `knobs` over `model` (already in `dtype`): a warm-up run (compile, the cache's first
    allocation) and the generation gate (module docstring) with `floor` (the fp32 reference: _model)."""
    import torch

    from fade.measure.suites.llm import gate, generation

    options = decode_options(knobs)
    reference = model
    model = candidate_model(reference, knobs)
    loop = generation.FadeLoop(model, prompt_tokens=prompt_tokens, new_tokens=new_tokens, device=device, **options)
    ids = generation.prompt_ids(shape.vocab_size, batch, prompt_tokens, device)
    loop.generate(ids, new_tokens)
    tokens, source = gate.gate_tokens(shape)
    checked = generation.FadeLoop(model, prompt_tokens=gate.GATE_PROMPT, new_tokens=len(tokens) - gate.GATE_PROMPT,
                                  device=device, **options)
    record = gate.gate(reference, checked.forced, torch.tensor([tokens], device=device), dtype=dtype,
                       perplexity=bool(shape.weights), floor=floor)
    facts = {**loop.facts(), "weight_quant": knobs.get("weight_quant", "none"),
             "weight_bytes": generation.weight_bytes(model), "reference_weight_bytes": generation.weight_bytes(reference)}
    return PreparedDecode(lambda: loop.generate(ids, new_tokens), {"mode": "generate", "tokens": source, **record},
                          facts, batch * new_tokens)


def _model(shape, dtype: str, device: str, *, with_floor: bool = True) -> tuple:
    """(the model in `dtype`, the gate's floor: the fp32 weights' reference over the gate text, taken before the
    cast; None when `dtype` is fp32 or not `with_floor`)."""
    import torch

    from fade.measure.suites.llm import gate, generation

    torch._dynamo.reset()
    model = generation.build_model(shape, device)
    floor = None
    if with_floor and dtype != "fp32":
        tokens, _ = gate.gate_tokens(shape)
        floor = gate.reference_of(model, torch.tensor([tokens], device=device), gate.GATE_PROMPT)
    return generation.cast_model(model, dtype), floor


DIAGNOSIS_TOKENS = 8  # new tokens of each profiled greedy run: a decode step's pattern shows in a few


def tune_generate_diagnose(ctx, *, config: str, batch: int, prompt_tokens: int = 128, new_tokens: int = 64,
                           dtype: str = "bf16") -> CaseResult:
    """The baseline decode (every generate knob at its first value: model.generate()'s dynamic cache, eager)
    profiled as `fade profile` profiles a step: a greedy run of DIAGNOSIS_TOKENS new tokens is the step, one
    unprofiled and one warm-up run before DIAGNOSIS_STEPS profiled ones, summarized by fade.analyze.profile (the
    same rules). An eager batch-1 decode is launch-bound on a fast GPU (the verdict launch_bound, which
    decode_compile=reduce-overhead answers in data/knobs.toml); the plan then compiles first
    (fade.analyze.tuneplan). The gate is not run: the diagnosis only orders the search."""
    from fade.act.tune.trial import DIAGNOSIS_STEPS, diagnosis_record
    from fade.analyze.llm_table import resolve_config
    from fade.measure.profile import device_peak, profile_steps, summarize_capture
    from fade.measure.suites.llm import generation

    shape = resolve_config(config)
    model, _ = _model(shape, dtype, ctx.device, with_floor=False)
    loop = generation.FadeLoop(model, prompt_tokens=prompt_tokens, new_tokens=DIAGNOSIS_TOKENS, device=ctx.device,
                               **decode_options({}))  # fmt: skip
    ids = generation.prompt_ids(shape.vocab_size, batch, prompt_tokens, ctx.device)
    capture = profile_steps(lambda: loop.generate(ids, DIAGNOSIS_TOKENS), device=ctx.device, wait=1, warmup=1,
                            active=DIAGNOSIS_STEPS, measure_overhead=False)  # fmt: skip
    summary = summarize_capture(capture, peak=device_peak(ctx.device, dtype),
                                context={"workload": {"config": shape.name, "batch": batch, "prompt_tokens": prompt_tokens,
                                                      "new_tokens": DIAGNOSIS_TOKENS, "dtype": dtype}})  # fmt: skip
    diagnosis = diagnosis_record(summary, capture.trace)
    if ctx.device.startswith("cuda"):  # CUDA and ROCm: sdpa_backend is searched only there (data/knobs.toml)
        diagnosis["attention"] = decode_attention_probes(shape, dtype, batch, prompt_tokens + new_tokens, ctx)
    return CaseResult(value=float(len(diagnosis["verdicts"])), unit="verdicts",
                      formula="verdicts of the baseline decode's profile", extra={"diagnosis": diagnosis})


def decode_attention_probes(shape, dtype: str, batch: int, kv_len: int, ctx) -> list:
    """The attention probe (fade.measure.attention) of one decode step as the searched configurations call SDPA,
    each backend forced in turn: over a static cache first (an explicit mask, K/V repeated to the query heads:
    fade bench llm's decode_static_cache phase), then over a dynamic one (no mask, enable_gqa: the baseline's
    cache), both as long as a trial's cache (`kv_len`). The probe's short timing: it only orders the values, in a
    diagnosis whose time counts against the budget. The search keeps the sdpa_backend values that ran in either
    (tuner.narrow_by_probe). A probe that fails is left out: with none, the search tries every value."""
    from fade.measure.attention import QUICK_PROBE_TIMING, probe_attention
    from fade.measure.suites.llm.case import attention_shape

    probes = []
    for phase in ("decode_static_cache", "decode"):
        try:
            probes.append(probe_attention(attention_shape(shape, dtype, batch, kv_len, phase), device=ctx.device,
                                          timing=QUICK_PROBE_TIMING))  # fmt: skip
        except Exception:  # the diagnosis only orders the search
            continue
    return probes


def measure_generate_trial(shape, knobs: dict, *, batch: int, prompt_tokens: int, new_tokens: int, dtype: str,
                           device: str, timing_settings: dict) -> CaseResult:
    from fade.measure import compile_cache
    from fade.measure.timing import measure

    cache_before = compile_cache.counts()
    model, floor = _model(shape, dtype, device)
    prepared = prepare_decode(model, shape, knobs, batch=batch, prompt_tokens=prompt_tokens, new_tokens=new_tokens,
                              dtype=dtype, device=device, floor=floor)
    timing = measure(prepared.run, device=device, **timing_settings)
    return CaseResult(
        value=prepared.generated / timing.median_s,
        unit="tokens/s",
        formula="batch x new_tokens / the median time of a whole greedy run (prefill + decode)",
        timing=timing,
        work={"tokens": prepared.generated},
        extra={"numerics": prepared.numerics, "knobs": dict(knobs), "samples_per_step": prepared.generated,
               "decode": prepared.facts, "shape": {"config": shape.name, "batch": batch,
                                                   "prompt_tokens": prompt_tokens, "new_tokens": new_tokens,
                                                   "dtype": dtype},
               "compile_cache": compile_cache.since(cache_before)},
    )


def tune_generate_side_by_side(ctx, *, config: str, batch: int, configs: dict, rounds: int, prompt_tokens: int = 128,
                               new_tokens: int = 64, dtype: str = "bf16", latency_ms=None) -> CaseResult:
    """Several decode configurations (name -> knobs) over one model in this worker, each built, warmed and checked
    once, then timed in `rounds` rounds with the first rotating, as trial.side_by_side does for steps."""
    from fade.analyze.llm_table import resolve_config
    from fade.measure.timing import measure

    shape = resolve_config(config)
    model, floor = _model(shape, dtype, ctx.device)
    names = list(configs)
    prepared = {name: prepare_decode(model, shape, configs[name], batch=batch_of(configs[name], batch),
                                     prompt_tokens=prompt_tokens, new_tokens=new_tokens, dtype=dtype,
                                     device=ctx.device, floor=floor) for name in names}
    pooled, round_medians = in_rounds(names, rounds,
                                      lambda name: measure(prepared[name].run, device=ctx.device, **round_settings(ctx.timing, rounds)))
    sides = {name: {"samples_s": pooled[name], "round_medians_s": round_medians[name],
                    "numerics": latency_numerics(prepared[name].numerics, statistics.median(pooled[name]),
                                                 new_tokens, latency_ms),
                    "knobs": dict(configs[name]), "samples_per_step": prepared[name].generated} for name in names}
    generated = prepared[names[0]].generated
    return CaseResult(value=float(len(names)), unit="configurations", formula="configurations timed side by side",
                      work={"tokens": generated}, extra={"sides": sides, "samples_per_step": generated,
                                                         "rounds": rounds})
