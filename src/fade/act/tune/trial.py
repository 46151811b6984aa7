"""One tuning trial in the benchmark worker: a network under one knob configuration, checked and timed.

Runs as a model-bench-style case (fade.measure.runner, one isolated worker per env set), so a compile
crash, an OOM or a hang becomes a failed trial, not the end of the tuner. Method:

Build
    torch.manual_seed(models_case.WEIGHT_SEED), the zoo network (or module:function) and its resident batch,
    as the model bench builds them. Model-level knobs applied: channels_last, the optimizer's foreach/fused
    flag, torch.compile(mode), the SDPA backend (sdpa_kernel around every step), autocast and GradScaler.
    Torch-flag knobs (TF32 math, cudnn.benchmark, MIOpen immediate) are pinned for the trial; env knobs
    were set by the parent before the worker started.
Numerics (numerics.py decides in the parent)
    Training: CHECK_STEPS steps from models_case.STEP_SEED at the workload's learning rate; the losses and
    whether every gradient of the last step was finite are reported. fp32's losses come from
    `tune_reference`, run once per search. Inference: one forward pass, compared here with an fp32
    (TF32 off) forward of the same eager weights: relative RMS error and finiteness.
Timing
    models_case's method: learning rate 0 for the timed steps, gc frozen, fade.measure.timing.measure on
    one step per call with the run's timing settings (median + IQR of step time). Compile time and the
    checked steps are outside every sample; `duration_s` of the record holds them.
"""

from __future__ import annotations

import contextlib
import math
from typing import Optional

from fade.measure.case import CaseResult

CHECK_STEPS = 5  # as models_case.LOSS_CHECK_STEPS: enough for momentum to move the weights
CHECK_STEPS_QUICK = 2


def tune_reference(ctx, *, model: str, mode: str, batch: int, size: Optional[int] = None) -> CaseResult:
    """fp32 (TF32 off) losses of the checked steps, and the same from weights perturbed by bf16's roundoff."""
    from fade.measure.zoo.workload import build_workload

    reference = measure_reference(lambda: build_workload(model, batch, size, ctx.device), mode, ctx.device, quick=ctx.quick)
    return CaseResult(value=reference["losses"][-1], unit="loss", formula="fp32 loss after the checked steps",
                      extra={"reference": reference})


def measure_reference(make_workload, mode: str, device: str, *, quick: bool = False) -> dict:
    """{"losses", "rounded_losses"} of fp32 from the workload `make_workload()` builds (after the weight seed)."""
    import torch

    from fade.measure.suites.models.case import ROUNDING_PERTURBATION, WEIGHT_SEED, _perturb
    from fade.measure.suites.models.variants import fp32_math_flags

    steps = (CHECK_STEPS_QUICK if quick else CHECK_STEPS) if mode == "train" else 1
    torch.manual_seed(WEIGHT_SEED)
    workload = make_workload()
    initial = {name: value.clone() for name, value in workload.model.state_dict().items()}
    with fp32_math_flags("ieee", "ieee"):
        losses, _ = _checked_steps(workload, workload.model, {}, mode, device, steps)
        workload.model.load_state_dict(initial)
        _perturb(workload.model, ROUNDING_PERTURBATION)
        rounded, _ = _checked_steps(workload, workload.model, {}, mode, device, steps)
    return {"losses": losses, "rounded_losses": rounded}


def tune_trial(ctx, *, model: str, mode: str, batch: int, knobs: dict, size: Optional[int] = None) -> CaseResult:
    """`model` in `mode` under `knobs` (knob id -> value): numerics and timing, as the module docstring says."""
    from fade.measure.zoo.workload import build_workload

    return measure_trial(lambda: build_workload(model, batch, size, ctx.device), mode, knobs, ctx.device, ctx.timing, quick=ctx.quick)


def measure_trial(make_workload, mode: str, knobs: dict, device: str, timing_settings: dict, *, quick: bool = False) -> CaseResult:
    """The trial itself, on the workload `make_workload()` builds after the weight seed (in-process callers
    such as fade.tune pass their own)."""
    from fade.measure.suites.models.case import _gc_frozen
    from fade.measure.timing import measure

    prepared = prepare(make_workload, mode, knobs, device, quick=quick, reset_compiler=True)
    try:
        with _pinned_flags(knobs), _gc_frozen():
            timing = measure(prepared.step, device=device, **timing_settings)
    finally:
        prepared.release()
    return CaseResult(
        value=prepared.samples / timing.median_s,
        unit="samples/s",
        formula="samples / median_s (samples per step = batch)",
        timing=timing,
        work={"samples": prepared.samples},
        extra={"numerics": prepared.numerics, "knobs": dict(knobs), "samples_per_step": prepared.samples},
    )


def tune_side_by_side(ctx, *, model: str, mode: str, batch: int, configs: dict, rounds: int, size: Optional[int] = None) -> CaseResult:
    """Several configurations (name -> knobs) in this one worker, timed in turns: see side_by_side."""
    from fade.measure.zoo.workload import build_workload

    return side_by_side(lambda: build_workload(model, batch, size, ctx.device), mode, configs, ctx.device, ctx.timing,
                        rounds=rounds, quick=ctx.quick)  # fmt: skip


def side_by_side(make_workload, mode: str, configs: dict, device: str, timing_settings: dict, *, rounds: int,
                 quick: bool = False) -> CaseResult:  # fmt: skip
    """Build, compile and check every configuration once, then time them in `rounds` rounds, each round
    every configuration once and the first one rotating (ABC, BCA, CAB, ...), so a clock that drifts under
    a power cap slows all of them alike and nothing is compiled twice. The configurations must share their
    env knobs (one process, one runtime start). extra["sides"][name]: samples_s (pooled over the rounds),
    round_medians_s and numerics."""
    import torch

    from fade.measure.suites.models.case import _gc_frozen
    from fade.measure.timing import measure

    import torch._dynamo

    torch._dynamo.reset()
    names = list(configs)
    prepared = {}
    try:
        for name in names:
            prepared[name] = prepare(make_workload, mode, configs[name], device, quick=quick, reset_compiler=False)
        pooled = {name: [] for name in names}
        round_medians = {name: [] for name in names}
        for index in range(rounds):
            for name in names[index % len(names):] + names[: index % len(names)]:
                with _pinned_flags(configs[name]), _gc_frozen():
                    timing = measure(prepared[name].step, device=device, **timing_settings)
                pooled[name].extend(timing.samples_s)
                round_medians[name].append(timing.median_s)
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
    set to models_case.TIMED_LEARNING_RATE for the timed steps."""
    import torch

    from fade.measure.suites.models.case import TIMED_LEARNING_RATE, WEIGHT_SEED

    training = mode == "train"
    torch.manual_seed(WEIGHT_SEED)
    workload = make_workload()
    reference_module = None
    if not training:  # eager fp32 weights for the output comparison, before any knob touches the module
        import copy

        reference_module = copy.deepcopy(workload.model)
    runnable = workload.model
    if knobs.get("channels_last") == "on":
        runnable = runnable.to(memory_format=torch.channels_last)
        workload.inputs = tuple(
            value.contiguous(memory_format=torch.channels_last) if torch.is_tensor(value) and value.dim() == 4 and value.is_floating_point() else value
            for value in workload.inputs
        )
    compile_mode = knobs.get("compile", "off")
    if compile_mode != "off":
        import torch._dynamo

        if reset_compiler:
            torch._dynamo.reset()
        runnable = torch.compile(runnable) if compile_mode == "default" else torch.compile(runnable, mode=compile_mode)
    steps = (CHECK_STEPS_QUICK if quick else CHECK_STEPS) if training else 1
    with _pinned_flags(knobs):
        losses, state = _checked_steps(workload, runnable, knobs, mode, device, steps)
        numerics = {"mode": mode, "losses": losses, "grads_finite": state["grads_finite"], "updates_before_last": state["updates_before_last"]}
        if not training:
            numerics = _output_error(reference_module, runnable, workload, knobs, device)
    if state["optimizer"] is not None:
        for group in state["optimizer"].param_groups:
            group["lr"] = TIMED_LEARNING_RATE
    return Prepared(state["step"], numerics, workload.samples, [workload, runnable, state])


@contextlib.contextmanager
def _pinned_flags(knobs: dict):
    """The torch-flag knobs for this trial: fp32 math by precision, cudnn.benchmark, MIOpen immediate."""
    import torch

    from fade.measure.suites.models.variants import FP32_MATH, cudnn_benchmark, fp32_math_flags

    precision = knobs.get("precision", "default")
    matmul, conv = FP32_MATH[precision]
    with contextlib.ExitStack() as stack:
        stack.enter_context(fp32_math_flags(matmul, conv))
        stack.enter_context(cudnn_benchmark(knobs.get("cudnn_benchmark") == "on"))
        miopen = getattr(torch.backends, "miopen", None)
        if knobs.get("miopen_immediate") == "on" and miopen is not None and hasattr(miopen, "immediate"):
            saved = miopen.immediate
            miopen.immediate = True
            stack.callback(setattr, miopen, "immediate", saved)
        yield


def _sdpa_context(knobs: dict):
    backend = knobs.get("sdpa_backend", "default")
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return sdpa_kernel(getattr(SDPBackend, names[backend]))


def _make_optimizer(workload, knobs: dict):
    """The workload's optimizer, rebuilt with foreach=True or fused=True when the knob asks."""
    optimizer = workload.optimizer()
    implementation = knobs.get("optimizer_impl", "default")
    if implementation == "default":
        return optimizer
    import inspect

    # Only what the constructor takes: torch 2.11's AdamW keeps `decoupled_weight_decay` in its defaults
    # (it subclasses Adam) but AdamW(...) refuses it as an argument.
    accepted = set(inspect.signature(type(optimizer).__init__).parameters) - {"self", "params", "foreach", "fused"}
    groups = [{key: value for key, value in group.items() if key not in ("foreach", "fused")} for group in optimizer.param_groups]
    defaults = {key: value for key, value in optimizer.defaults.items() if key in accepted}
    return type(optimizer)(groups, **{**defaults, implementation: True})


def _checked_steps(workload, module, knobs: dict, mode: str, device: str, steps: int) -> tuple:
    """Losses of `steps` steps from STEP_SEED; returns (losses, {"step", "optimizer", "grads_finite"})."""
    import torch

    from fade.measure.suites.models.case import STEP_SEED

    training = mode == "train"
    device_type = device.split(":", 1)[0]
    precision = knobs.get("precision", "default")
    dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)
    module.train(training)
    optimizer = _make_optimizer(workload, knobs) if training else None
    scaler = torch.amp.GradScaler(device_type) if training and precision == "amp-fp16" else None

    def autocast():
        return torch.autocast(device_type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def step():
        with _sdpa_context(knobs):
            if not training:
                with torch.inference_mode(), autocast():
                    return module(*workload.inputs)
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = workload.loss(module(*workload.inputs))
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            return loss

    torch.manual_seed(STEP_SEED)
    losses = []
    applied = []  # per step: did the optimizer update (a GradScaler skips steps with inf gradients)
    for _ in range(steps):
        scale_before = scaler.get_scale() if scaler is not None else None  # a sync; checked steps only
        result = step()
        if not training:
            with torch.inference_mode():
                result = workload.loss(result.float())
        losses.append(result.detach())
        applied.append(scaler is None or scaler.get_scale() >= scale_before)  # a skipped step halves the scale
    grads_finite = True
    if training:
        norms = [parameter.grad.detach().float().abs().sum() for parameter in workload.model.parameters() if parameter.grad is not None]
        if scaler is None and norms:  # with a scaler, a skipped step's inf gradients are the recipe working
            grads_finite = bool(torch.isfinite(torch.stack(norms).sum()))
    values = [float(loss) for loss in losses]  # sync point, outside every timed region
    return values, {"step": step, "optimizer": optimizer, "grads_finite": grads_finite, "updates_before_last": sum(applied[:-1])}


def _output_error(reference_module, runnable, workload, knobs: dict, device: str) -> dict:
    """Relative RMS error of the candidate's outputs against an fp32 (TF32 off) forward of the same weights."""
    import torch
    from torch.utils._pytree import tree_leaves

    from fade.act.tune.numerics import PRECISION_MATH_DTYPE
    from fade.measure.suites.models.variants import fp32_math_flags

    reference_module.eval()
    with torch.inference_mode(), fp32_math_flags("ieee", "ieee"):
        expected = [leaf.float() for leaf in tree_leaves(reference_module(*workload.inputs)) if torch.is_tensor(leaf) and leaf.is_floating_point()]
    precision = knobs.get("precision", "default")
    dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)
    context = torch.autocast(device.split(":", 1)[0], dtype=dtype) if dtype else contextlib.nullcontext()
    with torch.inference_mode(), _sdpa_context(knobs), context:
        got = [leaf.float() for leaf in tree_leaves(runnable(*workload.inputs)) if torch.is_tensor(leaf) and leaf.is_floating_point()]
    difference = math.sqrt(sum(float(((g - e) ** 2).sum()) for g, e in zip(got, expected)))
    scale = math.sqrt(sum(float((e**2).sum()) for e in expected)) or 1.0
    finite = all(bool(torch.isfinite(g).all()) for g in got)
    math_dtype = PRECISION_MATH_DTYPE[precision]
    if math_dtype == "tf32" and device.startswith("cpu"):
        math_dtype = "fp32"  # TF32 exists only on GPUs
    if math_dtype == "fp32" and knobs.get("compile", "off") != "off":
        math_dtype = "tf32"  # fused reductions reorder sums; allow TF32-sized error (admitted: generous)
    return {"mode": "infer", "relative_rms_error": difference / scale, "math_dtype": math_dtype, "finite": finite}


__all__ = ["tune_trial", "tune_reference", "tune_side_by_side", "measure_trial", "measure_reference", "side_by_side", "prepare"]
