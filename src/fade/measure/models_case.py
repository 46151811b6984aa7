"""One model-bench case: a network trained (or run forward) under one variant, timed per step.

Method, in the order a case runs (constants below, cited by name):

Build
    torch.manual_seed(WEIGHT_SEED), then the network is built and initialised on the device; the synthetic
    batch is generated there once (normal images or uniform token ids, zoo.workload.DATA_SEED) and reused by
    every step. No step copies input from the host: `extra.workload.input_copy_included` is false.
Reference
    The same weights run LOSS_CHECK_STEPS eager steps (LOSS_CHECK_STEPS_QUICK with --quick; one forward pass
    when inferring) in fp32 with TF32 off, from the RNG state STEP_SEED; the first of them runs under
    torch.utils.flop_counter.FlopCounterMode, which gives the FLOPs of one step (forward + backward when
    training; the optimizer's elementwise work counts 0). The weights are then reset to their initial values.
    The `fp32` variant is its own reference.
Variant
    The variant's fp32 math is pinned (models_variants.fp32_math_flags), channels-last and torch.compile applied,
    a fresh optimizer made, and the same number of steps run from STEP_SEED. The variant's last loss may
    differ from the reference's by at most the larger of LOSS_RELATIVE_TOLERANCE of the reference's first
    loss and LOSS_ROUNDING_FACTOR times the spread rounding alone causes (a second fp32 run from weights
    perturbed by ROUNDING_PERTURBATION); otherwise the case is invalid (status "error"). Inference compares
    the loss of one forward pass against the first bound.
Timing
    The optimizer's learning rate is set to 0 (TIMED_LEARNING_RATE) for the timed steps: every kernel of the
    update still runs (SGD's and AdamW's foreach updates have no zero-rate shortcut), but the weights stay
    where the checked steps left them. Hundreds of steps on one fixed batch otherwise drive a network
    without batch norm to divergence (VGG-16 at batch 2 and lr 0.01 reaches NaN by step 8 on the CPU), which
    would make a healthy variant look invalid.
    fade.measure.timing.measure on one step per call (its docstring is the method: warm-up, CUDA events per
    block, blocks of >= min_block_s, rounds, stop rule, median + IQR). A training step is
    zero_grad(set_to_none) + autocast forward + loss + backward (through a GradScaler for amp-fp16) +
    optimizer.step(); an inference step is a forward pass under torch.inference_mode in eval mode.
Exclusions
    Not timed: building the network and its batch, the checked steps (torch.compile compiles there, so its
    compile time is in `duration_s`, never in a sample), the FLOP-counting step, reading the finiteness sum,
    and the plain loop. No input copy from the host happens at all.
Finiteness
    Every step adds its loss (training) or a sample of its output (inference, CHECK_SAMPLE_ELEMENTS) into a
    device-side sum; no step waits on the host for it. The sum is read after the timing: NaN or inf means
    some step was not finite, and the case is invalid (status "error", no throughput reported).
Derived figures
    value = samples / median step time (samples/s). Achieved TFLOP/s = FLOPs per step / median step time;
    % of peak divides it by the spec-table peak of the dtype each FLOP ran in, weighted by FLOPs when
    convolutions and matmuls run in different dtypes (`default`: TF32 convolutions, fp32 matmuls).
    Peak memory is torch.cuda.max_memory_allocated over the timed steps (model, optimizer state and
    activations; memory outside the caching allocator is not seen); not measured on the CPU.
Plain loop (validate=True)
    After FADE's timing, a textbook loop re-times the same model: PLAIN_WARMUP_STEPS steps, then
    PLAIN_REPEATS repeats of back-to-back steps between two CUDA events (host clock on the CPU), sized to
    about PLAIN_REPEAT_S each; its median is `extra.plain_loop`, with FADE's difference from it in %.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import statistics
import time
from typing import Optional

from fade.measure.case import CaseResult, CaseSkipped
from fade.measure.models_variants import Variant, fp32_math_flags, knobs_in_effect, parse_variant, skip_reason
from fade.measure.timing import measure

WEIGHT_SEED = 0  # weights; the fp32 reference and the variant start from the same ones
STEP_SEED = 1234  # dropout masks of the checked steps: the reference and the variant draw the same stream
LOSS_CHECK_STEPS = 5  # steps before the loss is compared; enough for momentum to move the weights
LOSS_CHECK_STEPS_QUICK = 2
# The loss check. Training on one fixed batch amplifies rounding, the more the smaller the batch: with batch
# norm over a handful of values one SGD step can move the loss from 6.7 to 4.9 or to 5.5 depending on the last
# bit (resnet18 at batch 2, 32 px, CPU). So the allowed distance from fp32 is the larger of a fixed share of the
# starting loss and a multiple of what rounding alone does to fp32: the spread between fp32 and fp32 started
# from weights perturbed by ROUNDING_PERTURBATION (bf16's unit roundoff). A variant that diverges, stalls or
# computes something else lands farther away than both; one that only rounds differently does not.
LOSS_RELATIVE_TOLERANCE = 0.05  # of fp32's starting loss: bf16 autocast stays within 1% at batch 16+ (CPU)
ROUNDING_PERTURBATION = 2.0**-8  # relative weight noise: the unit roundoff of bfloat16
LOSS_ROUNDING_FACTOR = 4.0  # fp16/bf16 round every activation, not only the weights once: a few times more
TIMED_LEARNING_RATE = 0.0  # see "Timing" above: same work per step, no divergence on a fixed batch
CHECK_SAMPLE_ELEMENTS = 2**20  # inference: outputs larger than this are checked on an evenly strided sample
PLAIN_WARMUP_STEPS = 2  # the model is warm already (FADE's timing ran); two steps refill the queue
PLAIN_REPEATS = 5  # event pairs; their median is the plain loop's figure
PLAIN_REPEAT_S = 0.2  # back-to-back steps per repeat: as many as fill about this much time, at least 3
PLAIN_MIN_STEPS = 3
CUDA_MEMORY_SOURCE = "torch.cuda.max_memory_allocated over the timed steps (caching allocator only)"


class InvalidRun(Exception):
    """The numbers are not trustworthy (a non-finite loss, a loss far from fp32's); the record is "error"."""


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
    "infer") under `variant`, `batch` samples per step, inputs of `size` (pixels or tokens; None: default)."""
    import torch

    from fade.measure.zoo import ZOO
    from fade.measure.zoo.workload import build_workload

    device = ctx.device
    parsed = parse_variant(variant)
    peaks, dtype_support = device_facts(device)
    reason = skip_reason(parsed, device, dtype_support)
    if reason:
        raise CaseSkipped(reason)
    training = mode == "train"
    check_steps = (LOSS_CHECK_STEPS_QUICK if ctx.quick else LOSS_CHECK_STEPS) if training else 1  # forwards repeat

    no_4d = f"channels-last changes nothing for {model}: it has no 4-D input or weight"
    entry = ZOO.get(model)
    if parsed.channels_last and entry is not None and entry.kind != "image":
        raise CaseSkipped(no_4d)
    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(model, batch, size, device)
    if parsed.channels_last and not _has_4d(workload):
        raise CaseSkipped(no_4d)
    # The fp32 reference from the same weights and RNG stream; its first step also counts the FLOPs. The
    # fp32 variant itself is its own reference: the same eager steps, so they run once.
    is_reference = parsed == Variant("fp32")
    reference_losses = flops_by_op = rounding_losses = None
    if not is_reference:
        initial_state = copy.deepcopy(workload.model.state_dict())
        with fp32_math_flags("ieee", "ieee"):
            reference = _Runner(workload, workload.model, Variant("fp32"), training, device)
            reference_losses, flops_by_op = reference.checked_steps(check_steps, count_flops=True)
            del reference
            if training:  # how far rounding alone moves fp32's own trajectory: the loss check's noise
                workload.model.load_state_dict(initial_state)
                _perturb(workload.model, ROUNDING_PERTURBATION)
                rounded = _Runner(workload, workload.model, Variant("fp32"), training, device)
                rounding_losses, _ = rounded.checked_steps(check_steps)
                del rounded
        workload.model.load_state_dict(initial_state)
        del initial_state
        _release(device)

    runnable = workload.model
    if parsed.channels_last:
        runnable = runnable.to(memory_format=torch.channels_last)
        workload.inputs = tuple(_channels_last(value) for value in workload.inputs)
    if parsed.compile:
        import torch._dynamo

        torch._dynamo.reset()  # compiled code of an earlier case (same forward, other module) must not count
        runnable = torch.compile(runnable)
    with fp32_math_flags(parsed.matmul_math, parsed.conv_math):
        runner = _Runner(workload, runnable, parsed, training, device)
        losses, counted = runner.checked_steps(check_steps, count_flops=is_reference)
        if is_reference:
            reference_losses, flops_by_op = losses, counted
        loss_check = _compare_losses(losses, reference_losses, rounding_losses, check_steps, training)
        in_effect = {**knobs_in_effect(), **runner.in_effect()}
        runner.freeze_weights()
        runner.tracker.reset()
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        timing = measure(runner.step, device=device, **ctx.timing)
        loss_check["finite_checked_steps"] = runner.tracker.check()
        memory = _memory(device)
        plain = _plain_loop(runner, workload.samples, device, timing.median_s) if validate else None
    if parsed.compile:
        torch._dynamo.reset()

    samples_per_s = workload.samples / timing.median_s
    flops_per_step = sum(flops_by_op.values())
    extra = {
        "mode": mode,
        "variant": parsed.knobs(),
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
        "loss_check": loss_check,
    }
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


@functools.lru_cache(maxsize=4)
def device_facts(device: str) -> tuple:
    """(peaks or None, dtype support) of `device`, read once per worker process: the session reads the same
    at start-up but does not hand it to cases, and reading device truth costs a system snapshot."""
    from fade.measure.session import device_truth_and_peaks, supported_dtypes

    _, peaks = device_truth_and_peaks(device)
    return peaks, supported_dtypes(device, peaks)


class _Runner:
    """Steps of one workload under one variant, with the device-side finiteness sum."""

    def __init__(self, workload, module, variant: Variant, training: bool, device: str):
        import torch

        self.workload = workload
        self.module = module
        self.variant = variant
        self.training = training
        self.device = device
        self.tracker = _FiniteTracker(device)
        module.train(training)
        self.autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(variant.autocast_dtype)
        self.optimizer = workload.optimizer() if training else None
        self.scaler = None
        self.checked_learning_rate = None  # the optimizer's rate in the checked steps, once frozen
        if training and variant.autocast_dtype == "fp16":
            self.scaler = torch.amp.GradScaler(device.split(":", 1)[0])

    def autocast(self):
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.split(":", 1)[0], dtype=self.autocast_dtype)

    def step(self):
        """One timed step. Its loss (or output sample) joins the finiteness sum without a host sync."""
        import torch

        workload = self.workload
        if not self.training:
            with torch.inference_mode(), self.autocast():
                output = self.module(*workload.inputs)
            self.tracker.add_output(output)
            return output
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            output = self.module(*workload.inputs)
            loss = workload.loss(output)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.tracker.add_loss(loss)
        return loss

    def freeze_weights(self) -> None:
        """Learning rate TIMED_LEARNING_RATE from now on (the timed steps); see the module docstring."""
        if self.optimizer is None:
            return
        self.checked_learning_rate = self.optimizer.param_groups[0]["lr"]
        for group in self.optimizer.param_groups:
            group["lr"] = TIMED_LEARNING_RATE

    def checked_steps(self, steps: int, *, count_flops: bool = False) -> tuple:
        """Losses of `steps` steps from STEP_SEED (inference: the loss of the forward output), and FLOPs by
        op of the first step when `count_flops`."""
        import torch

        torch.manual_seed(STEP_SEED)
        flops_by_op: dict = {}
        losses = []
        for index in range(steps):
            if count_flops and index == 0:
                from torch.utils.flop_counter import FlopCounterMode

                with FlopCounterMode(display=False) as counter:
                    result = self.step()
                flops_by_op = {str(op): int(count) for op, count in counter.get_flop_counts().get("Global", {}).items()}
            else:
                result = self.step()
            if not self.training:
                with torch.inference_mode():
                    result = self.workload.loss(result.float() if torch.is_tensor(result) else result)
            losses.append(result.detach())
        values = [float(loss) for loss in losses]  # sync point, outside every timed region
        if not all(math.isfinite(value) for value in values):
            raise InvalidRun(f"{self.variant.name}: loss is not finite in the checked steps: {values}")
        self.tracker.check()
        return values, flops_by_op

    def in_effect(self) -> dict:
        """What ran, read from the objects themselves."""
        import torch

        first_input = next((value for value in self.workload.inputs if torch.is_tensor(value)), None)
        parameter = next(self.workload.model.parameters(), None)
        memory_format = None
        if first_input is not None and first_input.dim() == 4:
            strided_last = first_input.is_contiguous(memory_format=torch.channels_last) and not first_input.is_contiguous()
            memory_format = "channels_last" if strided_last else "contiguous"
        return {
            "autocast_dtype": None if self.autocast_dtype is None else str(self.autocast_dtype).replace("torch.", ""),
            "grad_scaler": self.scaler is not None,
            "parameter_dtype": None if parameter is None else str(parameter.dtype).replace("torch.", ""),
            "input_memory_format": memory_format,
            "compiled": type(self.module).__name__ == "OptimizedModule",
            "training": self.training,
        }


class _FiniteTracker:
    """A device-side running sum of every step's loss (or output sample): one small kernel per step, read once."""

    def __init__(self, device: str):
        import torch

        self.total = torch.zeros((), dtype=torch.float32, device=device)
        self.steps = 0

    def reset(self) -> None:
        self.total.zero_()
        self.steps = 0

    def add_loss(self, loss) -> None:
        self.total.add_(loss.detach().float())
        self.steps += 1

    def add_output(self, output) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        for leaf in tree_leaves(output):
            if torch.is_tensor(leaf) and leaf.is_floating_point():
                sample = leaf.detach()
                if sample.numel() > CHECK_SAMPLE_ELEMENTS and sample.is_contiguous():
                    sample = sample.view(-1)[:: sample.numel() // CHECK_SAMPLE_ELEMENTS]
                self.total.add_(sample.float().sum())
        self.steps += 1

    def check(self) -> int:
        """Steps checked; InvalidRun if any of them was not finite. A sync point."""
        total = float(self.total)
        if not math.isfinite(total):
            raise InvalidRun(
                f"a loss or output was {total} in one of {self.steps} timed steps: the run is invalid and its speed is not reported"
            )
        return self.steps


def _compare_losses(losses: list, reference: list, rounding: Optional[list], steps: int, training: bool) -> dict:
    """The loss check (module docstring): InvalidRun when the variant's last loss is farther from fp32's than
    both LOSS_RELATIVE_TOLERANCE of the starting loss and LOSS_ROUNDING_FACTOR x the rounding spread."""
    last, reference_last, start = losses[-1], reference[-1], abs(reference[0])
    rounding_spread = 0.0 if rounding is None else abs(rounding[-1] - reference_last)
    allowed = max(LOSS_RELATIVE_TOLERANCE * start, LOSS_ROUNDING_FACTOR * rounding_spread)
    difference = abs(last - reference_last)
    result = {
        "steps": steps if training else 0,
        "loss": last,
        "fp32_loss": reference_last,
        "fp32_first_loss": reference[0],
        "fp32_rounded_loss": None if rounding is None else rounding[-1],
        "difference": difference,
        "allowed": allowed,
        "formula": "ok when |loss - fp32_loss| <= max(tolerance * |fp32_first_loss|, rounding_factor * |fp32_rounded_loss - fp32_loss|)",
        "tolerance": LOSS_RELATIVE_TOLERANCE,
        "rounding_factor": LOSS_ROUNDING_FACTOR,
        "losses": losses,
        "fp32_losses": reference,
        "ok": difference <= allowed,
    }
    if not result["ok"]:
        what = f"after {steps} steps" if training else "of the forward pass"
        raise InvalidRun(
            f"loss {what} is {last:.5g}, fp32 from the same seed gives {reference_last:.5g}: {difference:.3g} apart, "
            f"more than {allowed:.3g} ({100 * LOSS_RELATIVE_TOLERANCE:g}% of the starting loss {start:.5g}, or "
            f"{LOSS_ROUNDING_FACTOR:g}x the {rounding_spread:.3g} that rounding alone moves fp32): the variant computes something else"
        )
    return result


def _perturb(model, relative: float) -> None:
    """Multiply every floating parameter by (1 + relative * N(0, 1)): rounding-sized noise, from STEP_SEED."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(STEP_SEED)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point():
                noise = torch.randn(parameter.shape, generator=generator).to(parameter.device, parameter.dtype)
                parameter.mul_(1 + relative * noise)


def _flops_summary(flops_by_op: dict, median_s: float, variant: Variant, peaks: Optional[dict], dtype_support: dict) -> dict:
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
    if not total or not peaks:
        summary["peak_note"] = "no FLOPs counted" if not total else "no spec-table peak for this device"
        return summary
    tflops_table = peaks.get("tflops") or {}
    tf32_available = not dtype_support.get("tf32")
    dtype_by_family = {}
    for family, math_mode in (("conv", variant.conv_math), ("matmul", variant.matmul_math)):
        if variant.autocast_dtype:
            dtype_by_family[family] = variant.autocast_dtype
        else:
            dtype_by_family[family] = "tf32" if math_mode == "tf32" and tf32_available else "fp32"
    by_family = {"conv": 0, "matmul": 0}
    for op, count in flops_by_op.items():
        by_family["conv" if "conv" in op else "matmul"] += count
    seconds_at_peak = 0.0
    for family, count in by_family.items():
        peak = tflops_table.get(dtype_by_family[family])
        if count and not peak:
            summary["peak_note"] = f"the spec table has no {dtype_by_family[family]} peak for this device"
            return summary
        if count:
            seconds_at_peak += count / (peak * 1e12)
    peak_tflops = total / seconds_at_peak / 1e12
    used = sorted({dtype_by_family[family] for family, count in by_family.items() if count})
    summary.update(
        {
            "peak_tflops": peak_tflops,
            "peak_dtype": used[0] if len(used) == 1 else ", ".join(f"{family} {dtype_by_family[family]}" for family in ("conv", "matmul") if by_family[family]),
            "flops_by_family": by_family,
            "pct_of_peak": 100.0 * summary["achieved_tflops"] / peak_tflops,
            "peak_basis": peaks.get("basis"),
            "peak_source": peaks.get("source"),
            "peak_formula": "per_step / sum(family_flops / family_peak): the peak if every FLOP ran at its dtype's peak",
        }
    )
    return summary


def _memory(device: str) -> dict:
    if not device.startswith("cuda"):
        return {"peak_allocated_bytes": None, "peak_reserved_bytes": None, "source": f"not measured on {device}"}
    import torch

    return {
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(device),
        "source": CUDA_MEMORY_SOURCE,
    }


def _plain_loop(runner: _Runner, samples: int, device: str, fade_median_s: float) -> dict:
    """A textbook loop over the same model: no FADE timing code, no finiteness sum, just steps between two
    events. Kept deliberately plain: it is the independent check of FADE's figure."""
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
        with torch.inference_mode(), runner.autocast():
            module(*workload.inputs)

    step = train_step if runner.training else infer_step
    steps = max(PLAIN_MIN_STEPS, math.ceil(PLAIN_REPEAT_S / fade_median_s))
    on_cuda = device.startswith("cuda")
    for _ in range(PLAIN_WARMUP_STEPS):
        step()
    if on_cuda:
        torch.cuda.synchronize(device)
    per_step_s = []
    for _ in range(PLAIN_REPEATS):
        if on_cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                step()
            end.record()
            end.synchronize()
            per_step_s.append(start.elapsed_time(end) / 1e3 / steps)
        else:
            started = time.perf_counter()
            for _ in range(steps):
                step()
            per_step_s.append((time.perf_counter() - started) / steps)
    median_s = statistics.median(per_step_s)
    return {
        "samples_per_s": samples / median_s,
        "step_ms_median": 1e3 * median_s,
        "step_ms_each": [1e3 * value for value in per_step_s],
        "steps_per_repeat": steps,
        "repeats": PLAIN_REPEATS,
        "warmup_steps": PLAIN_WARMUP_STEPS,
        "method": "cuda-events around back-to-back steps" if on_cuda else "host clock around back-to-back steps",
    }


def _has_4d(workload) -> bool:
    import torch

    inputs_4d = any(torch.is_tensor(value) and value.dim() == 4 for value in workload.inputs)
    weights_4d = any(parameter.dim() == 4 for parameter in workload.model.parameters())
    return inputs_4d or weights_4d


def _channels_last(value):
    import torch

    if torch.is_tensor(value) and value.dim() == 4 and value.is_floating_point():
        return value.contiguous(memory_format=torch.channels_last)
    return value


def _release(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
