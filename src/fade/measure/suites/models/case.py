"""One model-bench case: a network trained (or run forward) under one variant, timed per step.

A variant is a knob configuration (fade.measure.step.config; variants.py parses the bench's names). The step,
its checked steps, the fp32 reference, the loss check, the finiteness sum and the pinned conditions are the
step core's (fade.measure.step, whose module docstrings give their method); this module times the step.
Method, in the order a case runs (constants below and in the core, cited by name):

Build
    torch.manual_seed(runner.WEIGHT_SEED), then the network is built and initialised on the device; the
    synthetic batch is generated there once (normal images or uniform token ids, zoo.workload.DATA_SEED) and
    reused by every step. No step copies input from the host: `extra.workload.input_copy_included` is false.
Reference
    runner.fp32_reference: the same weights run runner.checked_step_count eager steps (LOSS_CHECK_STEPS, or
    LOSS_CHECK_STEPS_QUICK with --quick; one forward pass when inferring) in fp32 with TF32 off, from the RNG
    state STEP_SEED; the first of them runs under torch.utils.flop_counter.FlopCounterMode, which gives the
    FLOPs of one step (forward + backward when training; the optimizer's elementwise work counts 0); a
    second fp32 run from weights perturbed by ROUNDING_PERTURBATION gives the rounding spread. The weights
    are then reset to their initial values. The `fp32` variant is its own reference.
Variant
    A knob the device ignores (variants.ignored_knobs: cudnn_benchmark on the CPU or fade.ocl) is left at its
    baseline, so `fp32+cudnn_benchmark=on` runs there as `fp32` (and is its own reference); the case id keeps
    the name asked for, and extra.variant says `not_applicable` and `ran_as`. The variant's flags are pinned (step.config.pinned: fp32 math, cudnn.benchmark), channels-last and
    torch.compile applied (runner.apply_config), a fresh optimizer made, and the same number of steps run
    from STEP_SEED. A non-finite loss makes the case invalid (status "error"). step.numerics.loss_check, the
    tuner's own, judges the last loss: it may differ from fp32's after as many optimizer updates (a
    GradScaler skips some while it finds its scale) by at most the larger of LOSS_RELATIVE_TOLERANCE of the
    reference's first loss and LOSS_ROUNDING_FACTOR times the rounding spread; otherwise the case is invalid.
    Inference compares the loss of one forward pass against the first bound.
Timing
    The optimizer's learning rate is set to 0 (runner.TIMED_LEARNING_RATE) for the timed steps: every kernel
    of the update still runs, but the weights stay where the checked steps left them (runner's docstring).
    fade.measure.timing.measure on one step per call (its docstring is the method: warm-up, CUDA events per
    block, blocks of >= min_block_s, rounds, stop rule, median + IQR), run as TIMING_SEGMENTS calls whose
    samples are pooled into one Timing. The run's timing settings are totals: each segment gets
    1/TIMING_SEGMENTS of the budget, the minimum run and the sample counts (at least 2 samples). The first
    segment warms up, sizes the block (k calls) and settles; later segments reuse its k (one call = k
    steps) with one warm-up call and no settle, since the same steps ran a moment before. A launch-bound
    step's host rate wanders by 10-30% over a second (H100, mobilenet_v2 amp training: 22 ms per step for
    0.6 s, then 17 ms); segments let a plain loop share every part of that wander (below), and
    `extra.timing_segments` shows it. When the first TIMING_SEGMENTS segments' figures lie more than
    NOISY_SEGMENT_SPREAD_PCT apart, further batches of segments run (up to MAX_TIMING_SEGMENTS; not with
    --quick), so the median spans more of the wander; the rule reads FADE's segments only. With the
    run's `max_timing_s` (TIMING_BUDGET_KEY, `fade bench models --timing-budget S`; unset by default) a further
    batch starts only while the case's segments so far took less than S seconds: a step of seconds (fade.ocl
    on the H100: 2 s per resnet50 training step) fills 52 s with its first batch, 12 timed steps, and each
    further one costs 24 s more. The first batch always runs whole. The segment
    logic reads time through an injected clock (time.perf_counter unless a test passes its own). A
    training step is zero_grad(set_to_none) + autocast forward + loss + backward (through a GradScaler for
    amp-fp16) + optimizer.step(); an inference step is a forward pass under torch.inference_mode in eval
    mode (runner.StepRunner.step).
Conditions
    cuDNN's algorithm choice is pinned (the cudnn_benchmark knob, off: heuristics, cached per shape), so
    the checked steps, FADE's segments and the plain loop run the same kernels; the flags in effect are in
    `extra.in_effect`. conditions.gc_frozen parks every object alive before the timing out of the
    collector's way (a full collection inside a sample costs 160 ms eager, 0.9 s compiled, on the H100
    host). Recorded in `extra.gc`.
Exclusions
    Not timed: building the network and its batch, the checked steps (torch.compile compiles there, so its
    compile time is in `duration_s`, never in a sample), the FLOP-counting step, reading the finiteness sum,
    and the plain loop. No input copy from the host happens at all.
Finiteness
    Every step's loss (training) or output (inference) stays on the device and joins a device-side sum
    (step.finite.FiniteTracker: outputs are kept by reference and summed 4 MB at a time, so no step launches
    a kernel of its own); no step waits on the host for it. The sum is read after the timing: NaN or inf means some
    step was not finite, and the case is invalid (status "error", no throughput reported).
Derived figures
    value = samples / median step time (samples/s). Achieved TFLOP/s = FLOPs per step / median step time;
    % of peak divides it by the spec-table peak of the dtype each FLOP ran in, weighted by FLOPs when
    convolutions and matmuls run in different dtypes (`default`: TF32 convolutions, fp32 matmuls).
    Peak memory is torch.cuda.max_memory_allocated over the timed steps and the plain loop's, the same
    steps (model, optimizer state and activations, and in inference up to 2 x FiniteTracker.KEEP_BYTES of
    outputs the finiteness check holds, `extra.memory.finite_check_bytes`; memory outside the caching
    allocator is not seen); not measured on the CPU.
Plain loop (validate=True)
    A textbook loop re-times the same model, interleaved with FADE's segments in the order PAIR_ORDER
    (FADE, plain, plain, FADE, ...), so drift of the host or the device hits both sides alike and a linear
    trend cancels inside each pair. It warms up with PLAIN_WARMUP_STEPS steps once. A plain segment runs
    back-to-back blocks of k steps (FADE's block size), each between its own two CUDA events (host clock on
    the CPU), as many as fill the timed work of the FADE segment before it (at least PLAIN_MIN_BLOCKS), and
    syncs after every timing.ROUND_S of blocks, as FADE's engine does. Its figure, `extra.plain_loop`, is
    the median over all its blocks. Same block length, same statistic, same sync cadence: the check
    compares FADE's machinery (warm-up, block sizing, settle, stop rule, segments, finiteness sum), not two
    ways of counting. Both matter on a launch-bound step, whose host hiccups (20-80 ms on the H100 host)
    a mean over a long repeat absorbs and a median of 25 ms blocks skips, and which a device queue left
    to fill for a quarter second can hide when host and device times are close (H100, an earlier form of
    this check, one event pair per 0.25 s segment: 8-9% slower than FADE on mobilenet_v2 training, 5%
    faster on its compiled inference, where FADE's own mean was 14% above its median). The sustained rate of both sides, steps / time over all their blocks, is
    recorded beside the medians (`mean_samples_per_s`, `fade_mean_samples_per_s`), as are each side's
    per-segment figures and their spread ((max - min) / median).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
from typing import Callable, Optional

from fade.measure.case import CaseResult, CaseSkipped
from fade.measure import timing as engine
from fade.measure import ocldevice
from fade.measure.step.conditions import flags_in_effect, gc_frozen
from fade.measure.step.config import StepConfig, pinned, reference_config
from fade.measure.step.finite import InvalidRun
from fade.measure.step.numerics import calibrate_batchnorm, loss_check
from fade.measure.step.runner import (
    TIMED_LEARNING_RATE,
    WEIGHT_SEED,
    StepRunner,
    apply_config,
    checked_step_count,
    fp32_reference,
    inference_context,
)
from fade.measure.suites.models.variants import ignored_knobs, parse_variant, run_as, skip_reason
from fade.measure.timing import Timing, measure

# FADE's timing in segments (see "Timing"): 6 segments of <= 0.33 s (2 s budget) are about as short as the
# spells in which a launch-bound step's host rate holds, so both sides of the plain-loop check see each
# spell; each later segment costs two unsampled blocks (its warm-up call and block-size trial)
TIMING_SEGMENTS = 6
# A step whose host rate wanders (segments more than NOISY_SEGMENT_SPREAD_PCT apart, (max - min) / median)
# gets further batches of TIMING_SEGMENTS segments, each at the same share of the budget, up to
# MAX_TIMING_SEGMENTS: the median then spans three times as many spells. Decided on FADE's own segments
# alone, never on the plain loop's. H100, batch 64, eager: 32 of 40 cases spread under 10% (most under 1%),
# the launch-bound AMP steps 10-49%.
NOISY_SEGMENT_SPREAD_PCT = 10.0
TIMING_BUDGET_KEY = "max_timing_s"  # a timing setting read here, never passed to measure(): see "Timing"
MAX_TIMING_SEGMENTS = 3 * TIMING_SEGMENTS
PAIR_ORDER = ("fade", "plain", "plain", "fade")  # repeated: ABBA, so a linear drift cancels within each pair
PLAIN_WARMUP_STEPS = 2  # once: the model is warm (FADE's first segment ran); a textbook loop still warms up
PLAIN_MIN_BLOCKS = 2  # per plain segment, when FADE's segment timed fewer blocks
CUDA_MEMORY_SOURCE = "torch.cuda.max_memory_allocated over the timed steps (caching allocator only)"
Clock = Callable[[], float]  # seconds; time.perf_counter unless a test injects its own


def model_case(
    ctx,
    *,
    model: str,
    mode: str,
    variant: str,
    batch: int,
    size: Optional[int] = None,
    validate: bool = False,
) -> CaseResult:
    """The case function run_models schedules: `model` (a zoo name or module:function) in `mode` ("train" or
    "infer") under `variant` (a variant name, knob aliases included), `batch` samples per step, inputs of
    `size` (pixels or tokens; None: default)."""
    import torch

    from fade.measure.zoo import ZOO
    from fade.measure.zoo.workload import build_workload

    device = ctx.device
    asked = parse_variant(variant)
    peaks, dtype_support = device_facts(device)
    reason = skip_reason(asked, device, dtype_support, mode)
    if reason:
        raise CaseSkipped(reason)
    parsed = run_as(asked, device)  # what runs: `asked` less the knobs this device ignores (variants.ignored_knobs)
    training = mode == "train"
    check_steps = checked_step_count(training, ctx.quick)  # inference: forwards repeat, one is checked

    no_4d = f"channels-last changes nothing for {model}: it has no 4-D input or weight"
    entry = ZOO.get(model)
    if parsed.uses_channels_last and entry is not None and entry.kind != "image":
        raise CaseSkipped(no_4d)
    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(model, batch, size, device)
    if parsed.uses_channels_last and not _has_4d(workload):
        raise CaseSkipped(no_4d)
    if not training:  # a realistic state, as the tuner's: BatchNorm statistics of the example batch
        calibrate_batchnorm(workload.model, workload.inputs)
    # The fp32 reference from the same weights and RNG stream; its first step also counts the FLOPs. The fp32
    # variant itself is its own reference: the same eager steps, so they run once.
    is_reference = parsed == reference_config()
    reference = None
    if not is_reference:
        reference = fp32_reference(workload, training, device, check_steps, count_flops=True)
        _require_finite("fp32", reference["losses"])
        _release(device)

    runnable = apply_config(workload, parsed)  # resets the compiler first: an earlier case's code must not count
    # flags (fp32 math, cuDNN's choice of algorithm) stay the same from the checked steps to the last timed one
    with pinned(parsed):
        runner = StepRunner(workload, runnable, parsed, training, device)
        checked = runner.checked_steps(check_steps, count_flops=is_reference)
        _require_finite(parsed.name, checked.losses)
        runner.tracker.check()
        if is_reference:
            reference = {"losses": checked.losses, "rounded_losses": None, "flops_by_op": checked.flops_by_op}
        flops_by_op = reference["flops_by_op"]
        loss_check_facts = _compare_losses(checked.losses, reference, checked, training)
        in_effect = {**flags_in_effect(), **runner.in_effect()}
        runner.freeze_weights()
        runner.tracker.reset()
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        on_ocl = ocldevice.is_ocl(device)
        fallbacks_before = ocldevice.fallback_counts() if on_ocl else None
        timing, segments, plain, gc_facts = time_step(runner, workload.samples, device, ctx.timing,
                                                      validate=validate, quick=ctx.quick)
        timed_fallbacks = ocldevice.fallback_delta(fallbacks_before, ocldevice.fallback_counts()) if on_ocl else None
        loss_check_facts["finite_checked_steps"] = runner.tracker.check()
        memory = _memory(device)
        # inference outputs the finiteness check held at once (their concatenation briefly doubles it)
        memory["finite_check_bytes"] = runner.tracker.kept_bytes_max
    if parsed.compile_mode is not None:
        torch._dynamo.reset()

    samples_per_s = workload.samples / timing.median_s
    flops_per_step = sum(flops_by_op.values())
    extra = {
        "mode": mode,
        "variant": _variant_facts(asked, parsed, device),
        "in_effect": in_effect,
        "workload": {
            "model": model,
            "description": workload.description,
            "samples": workload.samples,
            "params": sum(parameter.numel() for parameter in workload.model.parameters()),
            "input_on_device": True,
            "input_copy_included": False,
            "checked_learning_rate": runner.checked_learning_rate,
            "timed_learning_rate": TIMED_LEARNING_RATE if training else None,
            **workload.facts,
        },
        "flops": _flops_summary(flops_by_op, timing.median_s, parsed, peaks, dtype_support),
        "memory": memory,
        "loss_check": loss_check_facts,
        "timing_segments": segments,
        "gc": gc_facts,
    }
    if timed_fallbacks is not None:  # the timed steps alone (the record's ocl_fallbacks is the whole case)
        extra["ocl_fallbacks_timed"] = timed_fallbacks
    if plain is not None:
        plain["fade_vs_plain_pct"] = 100.0 * (samples_per_s - plain["samples_per_s"]) / plain["samples_per_s"]
        extra["plain_loop"] = plain
    return CaseResult(
        value=samples_per_s,
        unit="samples/s",
        formula="samples / median_s (samples per step = batch; median_s = median step time)",
        timing=timing,
        work={"flops": flops_per_step, "samples": workload.samples},
        extra=extra,
    )


def _variant_facts(asked: StepConfig, ran: StepConfig, device: str) -> dict:
    """extra.variant: what the variant asks for, plus, where the device ignores some of its knobs, which and why
    (`not_applicable`) and the configuration that ran (`ran_as`)."""
    facts = asked.record()
    ignored = ignored_knobs(asked, device)
    if ignored:
        facts.update(not_applicable=ignored, ran_as=ran.name)
    return facts


@functools.lru_cache(maxsize=4)
def device_facts(device: str) -> tuple:
    """(peaks or None, dtype support) of `device`, read once per worker process: the session reads the same
    at start-up but does not hand it to cases, and reading device truth costs a system snapshot."""
    from fade.measure.session import device_truth_and_peaks, supported_dtypes

    _, peaks = device_truth_and_peaks(device)
    return peaks, supported_dtypes(device, peaks)


def _require_finite(name: str, losses: list) -> None:
    if not all(math.isfinite(value) for value in losses):
        raise InvalidRun(f"{name}: loss is not finite in the checked steps: {losses}")


def _compare_losses(losses: list, reference: dict, checked, training: bool) -> dict:
    """The loss check (step.numerics.loss_check, the tuner's too) on finite losses; InvalidRun with its reason
    when the variant's last loss is too far from fp32's after as many optimizer updates."""
    result = loss_check(losses, reference["losses"], reference["rounded_losses"], training=training,
                        updates_before_last=checked.updates_before_last if training else None)  # fmt: skip
    if not result["ok"]:
        raise InvalidRun(result["reason"])
    return result


def _flops_summary(flops_by_op: dict, median_s: float, variant: StepConfig, peaks: Optional[dict], dtype_support: dict) -> dict:
    """FLOPs per step, achieved TFLOP/s and % of the peak of the dtype(s) the FLOPs ran in."""
    total = sum(flops_by_op.values())
    summary = {
        "per_step": total,
        "by_op": flops_by_op,
        "counter": "torch.utils.flop_counter.FlopCounterMode (matmul 2*M*N*K, conv 2*MACs, causal attention counted as full)",
        "achieved_tflops": total / median_s / 1e12 if total else None,
        "formula": "per_step / median_s / 1e12",
        "peak_tflops": None,
        "peak_dtype": None,
        "pct_of_peak": None,
    }
    by_family = {"conv": 0, "matmul": 0}
    for op, count in flops_by_op.items():
        by_family["conv" if "conv" in op else "matmul"] += count
    chosen = peak_for_flops(by_family, variant, peaks, dtype_support)
    if chosen["peak_tflops"] is None:
        summary["peak_note"] = chosen["note"]
        return summary
    summary.update(
        {
            "peak_tflops": chosen["peak_tflops"],
            "peak_dtype": chosen["peak_dtype"],
            "flops_by_family": by_family,
            "pct_of_peak": 100.0 * summary["achieved_tflops"] / chosen["peak_tflops"],
            "peak_basis": peaks.get("basis"),
            "peak_source": peaks.get("source"),
            "peak_formula": chosen["formula"],
        }
    )
    return summary


def peak_for_flops(by_family: dict, variant: StepConfig, peaks: Optional[dict], dtype_support: dict) -> dict:
    """The spec-table peak for FLOPs that ran under `variant`: {peak_tflops, peak_dtype, note, formula}.

    `by_family`: FLOPs of {"conv": n, "matmul": n}. Each family runs in the autocast dtype, else TF32 where
    the variant's math for it says tf32 and the device has TF32, else fp32; with both families in different
    dtypes the peak is FLOP-weighted (the peak if every FLOP ran at its dtype's). peak_tflops is None, with
    the reason in `note`, when there are no FLOPs, no peaks, or no peak for a dtype used. The model bench's
    % of peak and `fade profile`'s MFU both come from here."""
    chosen = {"peak_tflops": None, "peak_dtype": None, "note": None,
              "formula": "total / sum(family_flops / family_peak): the peak if every FLOP ran at its dtype's peak"}
    total = sum(by_family.values())
    if not total or not peaks:
        chosen["note"] = "no FLOPs counted" if not total else "no spec-table peak for this device"
        return chosen
    tflops_table = peaks.get("tflops") or {}
    tf32_available = not dtype_support.get("tf32")
    dtype_by_family = {}
    for family, math_mode in (("conv", variant.conv_math), ("matmul", variant.matmul_math)):
        if variant.autocast_dtype:
            dtype_by_family[family] = variant.autocast_dtype
        else:
            dtype_by_family[family] = "tf32" if math_mode == "tf32" and tf32_available else "fp32"
    seconds_at_peak = 0.0
    for family, count in by_family.items():
        peak = tflops_table.get(dtype_by_family[family])
        if count and not peak:
            chosen["note"] = f"the spec table has no {dtype_by_family[family]} peak for this device"
            return chosen
        if count:
            seconds_at_peak += count / (peak * 1e12)
    used = sorted({dtype_by_family[family] for family, count in by_family.items() if count})
    chosen["peak_tflops"] = total / seconds_at_peak / 1e12
    chosen["peak_dtype"] = used[0] if len(used) == 1 else ", ".join(
        f"{family} {dtype_by_family[family]}" for family in ("conv", "matmul") if by_family[family])
    return chosen


def _memory(device: str) -> dict:
    if not device.startswith("cuda"):
        return {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "source": f"not measured on {device}"}
    import torch

    return {
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
        "source": CUDA_MEMORY_SOURCE,
    }


def _timed_segments(runner: StepRunner, samples: int, device: str, settings: dict, *, validate: bool,
                    max_segments: int = MAX_TIMING_SEGMENTS, clock: Clock = time.perf_counter) -> tuple:
    """FADE's timing as batches of TIMING_SEGMENTS measure() calls (more batches while their spread exceeds
    NOISY_SEGMENT_SPREAD_PCT, up to `max_segments`) and, when `validate`, the plain loop's segments between
    them in PAIR_ORDER. Returns (the pooled Timing, extra.timing_segments, extra.plain_loop or None). `clock`
    is the host clock of both sides (device events keep their own)."""
    batch = (PAIR_ORDER * TIMING_SEGMENTS)[: 2 * TIMING_SEGMENTS] if validate else ("fade",) * TIMING_SEGMENTS
    plain_step = _plain_step(runner)
    fade_segments: list = []
    plain_segments: list = []  # seconds per step of each block, one list per plain segment
    order: list = []
    budget_s = settings.get(TIMING_BUDGET_KEY)
    started = clock()
    while True:
        for side in batch:
            order.append(side)
            if side == "fade":
                fade_segments.append(_fade_segment(runner.step, device, settings, fade_segments[0] if fade_segments else None, clock))
                continue
            warmup_steps = 0 if plain_segments else PLAIN_WARMUP_STEPS  # PAIR_ORDER starts with FADE
            plain_segments.append(_plain_segment_after(plain_step, device, fade_segments[-1], fade_segments[0].calls_per_sample,
                                                       warmup_steps, clock))  # fmt: skip
        fade_rates = [samples / segment.median_s for segment in fade_segments]
        # another batch only while FADE's own segments disagree (see "Timing")
        if _spread_pct(fade_rates) <= NOISY_SEGMENT_SPREAD_PCT:
            why_stopped = "segments agree"
            break
        if len(fade_rates) >= max_segments:
            why_stopped = "max segments"
            break
        if budget_s is not None and clock() - started >= budget_s:  # the run's timing budget is spent
            why_stopped = f"{TIMING_BUDGET_KEY} {budget_s:g} s spent"
            break
    timing = _pooled(fade_segments, settings)
    segments = {
        "segments": len(fade_segments),
        "order": "".join("F" if side == "fade" else "P" for side in order),  # F: a FADE segment, P: a plain one
        "calls_per_sample": timing.calls_per_sample,
        "samples_per_s": fade_rates,
        "n": [segment.n for segment in fade_segments],
        "stop_reasons": [segment.stop_reason for segment in fade_segments],
        "spread_pct": _spread_pct(fade_rates),
        "spread_formula": "100 * (max - min) / median of the segments' samples/s",
        "why_stopped": why_stopped,  # segments agree, max segments, or the run's timing budget spent
    }
    if not validate:
        return timing, segments, None
    block_s = [value for segment in plain_segments for value in segment]  # seconds per step, per block
    median_s = statistics.median(block_s)
    plain_rates = [samples / statistics.median(segment) for segment in plain_segments]
    plain = {
        "samples_per_s": samples / median_s,
        "step_ms_median": 1e3 * median_s,
        "step_ms_each": [1e3 * value for value in block_s],  # one per block, in the order they ran
        "calls_per_block": timing.calls_per_sample,
        "blocks_each": [len(segment) for segment in plain_segments],
        "repeats": len(block_s),
        "warmup_steps": PLAIN_WARMUP_STEPS,
        "mean_samples_per_s": samples / statistics.fmean(block_s),  # sustained: total steps / total time
        "fade_mean_samples_per_s": samples / timing.mean_s,
        "segment_samples_per_s": plain_rates,
        "spread_pct": _spread_pct(plain_rates),
        "fade_spread_pct": segments["spread_pct"],
        "order": segments["order"],
        "method": ("cuda-events" if device.startswith("cuda") else "host clock") + " around each block of "
        "back-to-back steps, a sync per timing.ROUND_S of blocks, segments interleaved with FADE's; median of the blocks",
    }
    return timing, segments, plain


def time_step(runner: StepRunner, samples: int, device: str, settings: dict, *, validate: bool = False,
              quick: bool = False, clock: Clock = time.perf_counter) -> tuple:
    """The bench's timing of `runner.step` ("Timing" and "Conditions" above): under conditions.gc_frozen,
    batches of TIMING_SEGMENTS measure() calls with `settings` as totals (suite.FULL_TIMING or QUICK_TIMING),
    more batches while they disagree, up to MAX_TIMING_SEGMENTS (TIMING_SEGMENTS when `quick`), and the
    plain loop between them when `validate`. The caller has pinned the flags (step.config.pinned), run the
    checked steps and frozen the weights (runner.freeze_weights), as model_case does; `fade profile` times
    its unprofiled step here; benchmarks/ocl_vendor_budget.py counts its steps with a simulated `clock`.
    Returns (pooled Timing, extra.timing_segments, extra.plain_loop or None, extra.gc)."""
    with gc_frozen() as gc_facts:
        max_segments = TIMING_SEGMENTS if quick else MAX_TIMING_SEGMENTS  # --quick: a smoke run, kept short
        timing, segments, plain = _timed_segments(runner, samples, device, settings, validate=validate,
                                                  max_segments=max_segments, clock=clock)
    return timing, segments, plain, gc_facts


def _segment_settings(settings: dict, first: bool) -> dict:
    """One FADE segment's measure() arguments: 1/TIMING_SEGMENTS of the totals in `settings` (the engine's
    defaults where unset), at least 2 samples; a later segment skips warm-up, settle and block sizing."""
    totals = {
        "budget_s": engine.BUDGET_S,
        "min_run_s": engine.MIN_RUN_S,
        "min_samples": engine.MIN_SAMPLES,
        "max_samples": engine.MAX_SAMPLES,
        **settings,
    }
    segment = {name: value for name, value in settings.items() if name != TIMING_BUDGET_KEY}
    segment["budget_s"] = totals["budget_s"] / TIMING_SEGMENTS
    segment["min_run_s"] = totals["min_run_s"] / TIMING_SEGMENTS
    segment["min_samples"] = max(2, math.ceil(totals["min_samples"] / TIMING_SEGMENTS))
    segment["max_samples"] = max(segment["min_samples"], totals["max_samples"] // TIMING_SEGMENTS)
    if not first:  # the same steps ran a moment ago: warm, at this load's clock, and the block size is known
        segment.update(warmup_s=0.0, min_warmup_calls=1, max_settle_s=0.0, min_block_s=0.0)
    return segment


def _fade_segment(step, device: str, settings: dict, first: Optional[Timing], clock: Clock = time.perf_counter) -> Timing:
    """One measure() call. After the first, one call is a block of the first segment's k steps, so every
    segment's samples are blocks of the same size; samples are rescaled to seconds per step."""
    if first is None:
        return measure(step, device=device, clock=clock, **_segment_settings(settings, True))
    calls = first.calls_per_sample

    def block() -> None:
        for _ in range(calls):
            step()

    timing = measure(block, device=device, clock=clock, **_segment_settings(settings, False))
    return dataclasses.replace(
        timing,
        samples_s=tuple(value / calls for value in timing.samples_s),
        calls_per_sample=timing.calls_per_sample * calls,
        warmup_calls=timing.warmup_calls * calls,
    )


def _pooled(segments: list, settings: dict) -> Timing:
    """The segments' samples as one Timing. stop_reason: "budget" if any segment ran out of budget, else
    "max_samples" if any reached it, else "converged" (each segment's is in extra.timing_segments)."""
    reasons = {segment.stop_reason for segment in segments}
    first = segments[0]
    return Timing(
        samples_s=tuple(value for segment in segments for value in segment.samples_s),
        calls_per_sample=first.calls_per_sample,
        warmup_calls=sum(segment.warmup_calls for segment in segments),
        warmup_s=sum(segment.warmup_s for segment in segments),
        method=first.method,
        stop_reason=next((reason for reason in ("budget", "max_samples") if reason in reasons), "converged"),
        noisy_cov=first.noisy_cov,
        settings={**settings, "segments": len(segments)},
    )


def _timed_s(timing: Timing) -> float:
    return sum(timing.samples_s) * timing.calls_per_sample


def _spread_pct(rates: list) -> float:
    return 100.0 * (max(rates) - min(rates)) / statistics.median(rates)


def _plain_step(runner: StepRunner):
    """A textbook step over the same model: no FADE timing code, no finiteness sum. Kept deliberately plain:
    it is the independent check of FADE's figure."""
    import torch

    module, workload, optimizer, scaler = runner.module, runner.workload, runner.optimizer, runner.scaler

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        with runner.autocast():
            loss = workload.loss(module(*workload.inputs))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    def infer_step():
        with inference_context(runner.device), runner.autocast():
            module(*workload.inputs)

    step = train_step if runner.training else infer_step
    if runner.sdpa_backend is None:
        return step

    def with_backend():  # the sdpa_backend knob: the same backend context as FADE's step
        with runner.sdpa():
            step()

    return with_backend


def _plain_segment_after(step, device: str, fade_segment: Timing, calls: int, warmup_steps: int,
                         clock: Clock = time.perf_counter) -> list:  # fmt: skip
    """A plain segment matched to `fade_segment`: blocks of `calls` steps filling its timed work (at least
    PLAIN_MIN_BLOCKS), a sync per the engine's round (timing.ROUND_S) of blocks."""
    block_s = calls * fade_segment.median_s
    blocks = max(PLAIN_MIN_BLOCKS, round(_timed_s(fade_segment) / block_s))
    per_sync = max(1, math.ceil(engine.ROUND_S / block_s))
    return _plain_segment(step, device, calls, blocks, per_sync, warmup_steps, clock)


def _plain_segment(step, device: str, calls: int, blocks: int, per_sync: int, warmup_steps: int,
                   clock: Clock = time.perf_counter) -> list:  # fmt: skip
    """Seconds per step of each of `blocks` back-to-back blocks of `calls` steps, after `warmup_steps`; a
    sync after every `per_sync` blocks. The host `clock` times blocks on the CPU, CUDA events on a GPU."""
    import torch

    for _ in range(warmup_steps):
        step()
    if not device.startswith("cuda"):
        per_step_s = []
        for _ in range(blocks):
            started = clock()
            for _ in range(calls):
                step()
            per_step_s.append((clock() - started) / calls)
        return per_step_s
    torch.cuda.synchronize(device)
    per_step_s = []
    for first in range(0, blocks, per_sync):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(min(per_sync, blocks - first))]  # fmt: skip
        for start, end in events:
            start.record()
            for _ in range(calls):
                step()
            end.record()
        torch.cuda.synchronize(device)  # sync point, as often as the engine's
        per_step_s += [start.elapsed_time(end) / 1e3 / calls for start, end in events]
    return per_step_s


def _has_4d(workload) -> bool:
    import torch

    inputs_4d = any(torch.is_tensor(value) and value.dim() == 4 for value in workload.inputs)
    weights_4d = any(parameter.dim() == 4 for parameter in workload.model.parameters())
    return inputs_4d or weights_4d


def _release(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
