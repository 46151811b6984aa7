"""One tuning trial in the benchmark worker: a network under one knob configuration, checked and timed.

Runs as a model-bench-style case (fade.measure.runner, one isolated worker per env set), so a compile
crash, an OOM or a hang becomes a failed trial, not the end of the tuner. The step, the checked steps, the
fp32 reference and the pinned flags are the step core's (fade.measure.step), the same the model bench runs.
Method:

Build
    torch.manual_seed(step.runner.WEIGHT_SEED), the zoo network (or module:function) and its resident batch,
    as the model bench builds them. The knobs become a step.config.StepConfig: channels_last and
    torch.compile(mode) are applied by step.runner.apply_config; the optimizer's foreach/fused flag, the SDPA
    backend (sdpa_kernel around every step), autocast and GradScaler by step.runner.StepRunner. Torch-flag
    knobs (TF32 math by precision, cudnn.benchmark, MIOpen immediate) are pinned for the trial
    (step.config.pinned); env knobs were set by the parent before the worker started.
Numerics (step.numerics decides in the parent; inference first calibrates BatchNorm on the example batch)
    Training: step.runner.checked_step_count steps from STEP_SEED at the workload's learning rate; the losses,
    how many optimizer updates a GradScaler let through and whether every gradient of the last step was
    finite are reported. fp32's losses come from `tune_reference`, run once per search. Inference: one
    forward pass, compared here with an fp32 (TF32 off) forward of the same eager weights: relative RMS
    error and finiteness.
Timing
    The model bench's conditions: learning rate 0 for the timed steps (StepRunner.freeze_weights), gc frozen
    (step.conditions.gc_frozen), fade.measure.timing.measure on one step per call with the run's timing
    settings (median + IQR of step time); a timing spread wider than RETIME_IQR is taken once more and the
    steadier of the two kept (extra["retimed"] says so). Compile time and the checked steps are outside every sample;
    `duration_s` of the record holds them.
"""

from __future__ import annotations

from typing import Optional

from fade.act.tune.search import round_settings
from fade.measure.case import CaseResult
from fade.measure.step.conditions import gc_frozen, pinned_flags
from fade.measure.step.config import StepConfig, pinned
from fade.measure.step.numerics import UNIT_ROUNDOFF, calibrate_batchnorm, output_error, output_math_dtype, output_rms
from fade.measure.step.runner import WEIGHT_SEED, StepRunner, apply_config, checked_step_count, fp32_reference, perturb


def tune_reference(ctx, *, model: str, mode: str, batch: int, size: Optional[int] = None) -> CaseResult:
    """fp32 (TF32 off) losses of the checked steps, and the same from weights perturbed by bf16's roundoff."""
    from fade.measure.zoo.workload import build_workload

    reference = measure_reference(lambda: build_workload(model, batch, size, ctx.device), mode, ctx.device, quick=ctx.quick)
    return CaseResult(value=reference["losses"][-1], unit="loss", formula="fp32 loss after the checked steps",
                      extra={"reference": reference})


def measure_reference(make_workload, mode: str, device: str, *, quick: bool = False) -> dict:
    """{"losses", "rounded_losses"} of fp32 from the workload `make_workload()` builds (after the weight seed)."""
    import torch

    training = mode == "train"
    torch.manual_seed(WEIGHT_SEED)
    workload = make_workload()
    reference = fp32_reference(workload, training, device, checked_step_count(training, quick), rounding=True)
    return {"losses": reference["losses"], "rounded_losses": reference["rounded_losses"]}


# a trial whose step times spread wider than this (IQR / median) is timed once more and the steadier timing kept:
# on an H200 running two cases at once, an eager transformer trial read a 40.7% spread (a compile of the other case
# took the host's cores), which set a 40.7% noise bar for every comparison with it (results/tune-h200-s10/)
RETIME_IQR = 0.10
DIAGNOSIS_STEPS = 2  # profiled steps of the baseline: a pattern (launch-bound, GEMM share) shows in one; two for a median


def tune_diagnose(ctx, *, model: str, mode: str, batch: int, size: Optional[int] = None) -> CaseResult:
    """The baseline step profiled for a short window: see diagnose_step."""
    from fade.measure.zoo.workload import build_workload

    diagnosis = diagnose_step(lambda: build_workload(model, batch, size, ctx.device), model, mode, batch, size, ctx.device)
    return CaseResult(value=float(len(diagnosis["verdicts"])), unit="verdicts", formula="verdicts of the baseline step's profile",
                      extra={"diagnosis": diagnosis})  # fmt: skip


def diagnose_step(make_workload, label: str, mode: str, batch: int, size: Optional[int], device: str) -> dict:
    """What `fade profile` says of the baseline step (PyTorch's defaults), from DIAGNOSIS_STEPS profiled steps after
    one unprofiled and one warm-up step, summarized by fade.analyze.profile (the same rules and thresholds as
    `fade profile`): {verdicts, device_timeline, platform, step_ms, busy_share, host_wait_share, gemm_conv_share,
    mfu_gemm_conv, peak_dtype, calls_sdpa}. The tuner orders its search by the verdicts (fade.analyze.tuneplan)
    and leaves the SDPA backend out when the step called no SDPA (tuner.drop_unused)."""
    from fade.measure.profile import profile_workload, summarize_capture

    profiled = profile_workload(label, mode=mode, variant="default", batch=batch, size=size, device=device, wait=1,
                                warmup=1, active=DIAGNOSIS_STEPS, quick=True, build=make_workload)  # fmt: skip
    summary = summarize_capture(profiled["capture"], lines=profiled["lines"], peak=profiled["peak"],
                                context={"workload": profiled["workload"], "variant": profiled["variant"]})  # fmt: skip
    return diagnosis_record(summary, profiled["capture"].trace)


def diagnosis_record(summary: dict, trace: dict) -> dict:
    """The tuner's diagnosis (diagnose_step's keys) from a profile summary (fade.measure.profile.summarize_capture)
    and its trace: shared by a step's diagnosis and a decode loop's (generate_trial.tune_generate_diagnose)."""
    total = summary["total"]
    window = total.get("window_us") or 0.0
    busy = total.get("busy_us")
    classes = total.get("class_us") or {}
    step_s = (summary.get("step_time") or {}).get("unprofiled_s")
    return {
        "verdicts": summary["verdicts"],
        "device_timeline": summary["device_timeline"],
        "platform": summary["platform"],
        "step_ms": 1e3 * step_s if step_s else None,
        "busy_share": busy / window if busy is not None and window else None,
        "host_wait_share": (total.get("idle_us") or {}).get("host_wait", 0.0) / window if busy is not None and window else None,
        "gemm_conv_share": (classes.get("gemm", 0.0) + classes.get("convolution", 0.0)) / busy if busy else None,
        "mfu_gemm_conv": (total.get("flops") or {}).get("mfu_gemm_conv"),
        "peak_dtype": (summary.get("peak") or {}).get("dtype"),
        "calls_sdpa": calls_sdpa(trace),
    }


def calls_sdpa(trace: dict) -> Optional[bool]:
    """Whether the profiled steps dispatched scaled_dot_product_attention (any of its aten ops, whichever backend
    ran), from the trace's host ops; None when the trace has no host ops to tell."""
    events = [event for event in trace.get("traceEvents") or [] if isinstance(event, dict) and event.get("cat") == "cpu_op"]
    if not events:
        return None
    return any("scaled_dot_product" in str(event.get("name", "")) for event in events)


def tune_trial(ctx, *, model: str, mode: str, batch: int, knobs: dict, size: Optional[int] = None) -> CaseResult:
    """`model` in `mode` under `knobs` (knob id -> value): numerics and timing, as the module docstring says."""
    from fade.measure.zoo.workload import build_workload

    return measure_trial(lambda: build_workload(model, batch, size, ctx.device), mode, knobs, ctx.device, ctx.timing, quick=ctx.quick)


def measure_trial(make_workload, mode: str, knobs: dict, device: str, timing_settings: dict, *, quick: bool = False) -> CaseResult:
    """The trial itself, on the workload `make_workload()` builds after the weight seed (in-process callers
    such as fade.tune pass their own)."""
    from fade.measure import compile_cache
    from fade.measure.timing import measure

    cache_before = compile_cache.counts()
    prepared = prepare(make_workload, mode, knobs, device, quick=quick, reset_compiler=True)
    retimed = None
    try:
        with pinned(StepConfig.from_knobs(knobs)), gc_frozen():
            timing = measure(prepared.step, device=device, **timing_settings)
            if timing.relative_iqr > RETIME_IQR:  # a burst on the host: once more, keep the steadier
                again = measure(prepared.step, device=device, **timing_settings)
                retimed = {"first_relative_iqr": timing.relative_iqr, "second_relative_iqr": again.relative_iqr}
                timing = min((timing, again), key=lambda item: item.relative_iqr)
    finally:
        prepared.release()
    return CaseResult(
        value=prepared.samples / timing.median_s,
        unit="samples/s",
        formula="samples / median_s (samples per step = batch)",
        timing=timing,
        work={"samples": prepared.samples},
        extra={"numerics": prepared.numerics, "knobs": dict(knobs), "samples_per_step": prepared.samples, "retimed": retimed,
               "compile_cache": compile_cache.since(cache_before)},
    )


def tune_side_by_side(ctx, *, model: str, mode: str, batch: int, configs: dict, rounds: int, size: Optional[int] = None) -> CaseResult:
    """Several configurations (name -> knobs) in this one worker, timed in turns: see side_by_side."""
    from fade.measure.zoo.workload import build_workload

    return side_by_side(lambda: build_workload(model, batch, size, ctx.device), mode, configs, ctx.device, ctx.timing,
                        rounds=rounds, quick=ctx.quick)  # fmt: skip


def in_rounds(names: list, rounds: int, timed) -> tuple:
    """({name: samples_s pooled over the rounds}, {name: each round's median_s}) of `timed(name)` (a Timing),
    every name once a round and the first one rotating (ABC, BCA, CAB, ...): side_by_side's order, and
    fade tune --generate's (generate_trial.tune_generate_side_by_side)."""
    pooled = {name: [] for name in names}
    round_medians = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % len(names):] + names[: index % len(names)]:
            timing = timed(name)
            pooled[name].extend(timing.samples_s)
            round_medians[name].append(timing.median_s)
    return pooled, round_medians


def side_by_side(make_workload, mode: str, configs: dict, device: str, timing_settings: dict, *, rounds: int,
                 quick: bool = False) -> CaseResult:  # fmt: skip
    """Build, compile and check every configuration once, then time them in `rounds` rounds, each round
    every configuration once and the first one rotating (ABC, BCA, CAB, ...), so a clock that drifts under
    a power cap slows all of them alike and nothing is compiled twice. The configurations must share their
    env knobs (one process, one runtime start). extra["sides"][name]: samples_s (pooled over the rounds),
    round_medians_s and numerics."""
    import torch

    import torch._dynamo

    from fade.measure.timing import measure

    torch._dynamo.reset()
    names = list(configs)
    prepared = {}
    try:
        for name in names:
            prepared[name] = prepare(make_workload, mode, configs[name], device, quick=quick, reset_compiler=False)

        def timed(name: str):
            with pinned(StepConfig.from_knobs(configs[name])), gc_frozen():
                return measure(prepared[name].step, device=device, **round_settings(timing_settings, rounds))

        pooled, round_medians = in_rounds(names, rounds, timed)
    finally:
        for item in prepared.values():
            item.release()
        torch._dynamo.reset()
    sides = {name: {"samples_s": pooled[name], "round_medians_s": round_medians[name], "numerics": prepared[name].numerics,
                    "knobs": dict(configs[name])} for name in names}  # fmt: skip
    first = prepared[names[0]]
    return CaseResult(value=float(len(names)), unit="configurations", formula="configurations timed side by side",
                      work={"samples": first.samples}, extra={"sides": sides, "samples_per_step": first.samples, "rounds": rounds})


class Prepared:
    """One configuration built, compiled and checked: `step()` runs one timed step; `release()` frees it."""

    def __init__(self, step, numerics: dict, samples: int, keep: list):
        self.step, self.numerics, self.samples, self._keep = step, numerics, samples, keep

    def release(self) -> None:
        self.step, self._keep = None, []


def prepare(make_workload, mode: str, knobs: dict, device: str, *, quick: bool = False, reset_compiler: bool = True) -> Prepared:
    """Seeded workload under `knobs`: layout, compile, the checked steps (numerics), then the learning rate
    set to step.runner.TIMED_LEARNING_RATE for the timed steps."""
    import copy

    import torch

    config = StepConfig.from_knobs(knobs)
    training = mode == "train"
    torch.manual_seed(WEIGHT_SEED)
    workload = make_workload()
    # a realistic state first: BatchNorm statistics of the example batch (step.numerics.calibrate_batchnorm)
    calibrated = 0 if training else calibrate_batchnorm(workload.model, workload.inputs)
    # eager fp32 weights for the output comparison, before any knob touches the module
    reference_module = None if training else copy.deepcopy(workload.model)
    runnable = apply_config(workload, config, reset_compiler=reset_compiler)
    with pinned(config):
        runner = StepRunner(workload, runnable, config, training, device, track_finite=False)
        checked = runner.checked_steps(checked_step_count(training, quick))
        numerics = checked.numerics(mode) if training else {**_output_error(reference_module, runner), "calibrated_batchnorm": calibrated}
    runner.freeze_weights()
    return Prepared(runner.step, numerics, workload.samples, [workload, runnable, runner])


def _output_error(reference_module, runner: StepRunner) -> dict:
    """Relative RMS error of the candidate's outputs against an fp32 (TF32 off) forward of the same weights,
    and the rounding spread (fp32 from weights perturbed by the math dtype's unit roundoff) that bounds it."""
    import torch
    from torch.utils._pytree import tree_leaves

    def floats(output) -> list:
        return [leaf.float() for leaf in tree_leaves(output) if torch.is_tensor(leaf) and leaf.is_floating_point()]

    math_dtype = output_math_dtype(runner.config.precision, runner.config.compile_mode is not None, runner.device)
    reference_module.eval()
    with torch.inference_mode(), pinned_flags("ieee", "ieee"):
        expected = floats(reference_module(*runner.workload.inputs))
    with torch.no_grad():
        perturb(reference_module, UNIT_ROUNDOFF[math_dtype])
    with torch.inference_mode(), pinned_flags("ieee", "ieee"):
        rounding_spread, _ = output_error(expected, floats(reference_module(*runner.workload.inputs)))
    got = floats(runner.step())  # inference mode, autocast and the SDPA backend of the candidate
    error, finite = output_error(expected, got)
    return {"mode": "infer", "relative_rms_error": error, "math_dtype": math_dtype, "finite": finite,
            "fp32_output_rms": output_rms(expected), "rounding_spread": rounding_spread}  # fmt: skip


__all__ = ["tune_trial", "tune_reference", "tune_diagnose", "diagnose_step", "tune_side_by_side", "measure_trial", "measure_reference", "side_by_side", "prepare"]
