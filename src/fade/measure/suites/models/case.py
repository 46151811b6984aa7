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
    block, blocks of >= min_block_s, rounds, stop rule, median + IQR), run as TIMING_SEGMENTS calls whose
    samples are pooled into one Timing. The run's timing settings are totals: each segment gets
    1/TIMING_SEGMENTS of the budget, the minimum run and the sample counts (at least 2 samples). The first
    segment warms up, sizes the block (k calls) and settles; later segments reuse its k (one call = k
    steps) with one warm-up call and no settle, since the same steps ran a moment before. A launch-bound
    step's host rate wanders by 10-30% over a second (H100, mobilenet_v2 amp training: 22 ms per step for
    0.6 s, then 17 ms); segments let a plain loop share every part of that wander (below), and
    `extra.timing_segments` shows it. When the first TIMING_SEGMENTS segments' figures lie more than
    NOISY_SEGMENT_SPREAD_PCT apart, further batches of segments run (up to MAX_TIMING_SEGMENTS; not with
    --quick), so the median spans more of the wander; the rule reads FADE's segments only. A training
    step is zero_grad(set_to_none) + autocast forward + loss + backward (through a GradScaler for
    amp-fp16) + optimizer.step(); an inference step is a forward pass under torch.inference_mode in eval
    mode.
Conditions
    cuDNN's algorithm choice is pinned (models_variants.CUDNN_BENCHMARK: heuristics, cached per shape), so
    the checked steps, FADE's segments and the plain loop run the same kernels. gc.freeze() parks every
    object alive before the timing (garbage included, until the timing ends), out of the collector's way: a
    full collection walks the whole heap (torch, the model, Inductor's graphs): 160 ms in an eager case and
    0.9 s after torch.compile on the H100 host, all in one sample; frozen, it walks only what the steps
    allocate. Recorded in `extra.gc`.
Exclusions
    Not timed: building the network and its batch, the checked steps (torch.compile compiles there, so its
    compile time is in `duration_s`, never in a sample), the FLOP-counting step, reading the finiteness sum,
    and the plain loop. No input copy from the host happens at all.
Finiteness
    Every step's loss (training) or output (inference) stays on the device and joins a device-side sum
    (_FiniteTracker: outputs are kept by reference and summed 4 MB at a time, so no step launches a kernel
    of its own); no step waits on the host for it. The sum is read after the timing: NaN or inf means some
    step was not finite, and the case is invalid (status "error", no throughput reported).
Derived figures
    value = samples / median step time (samples/s). Achieved TFLOP/s = FLOPs per step / median step time;
    % of peak divides it by the spec-table peak of the dtype each FLOP ran in, weighted by FLOPs when
    convolutions and matmuls run in different dtypes (`default`: TF32 convolutions, fp32 matmuls).
    Peak memory is torch.cuda.max_memory_allocated over the timed steps and the plain loop's, the same
    steps (model, optimizer state and activations, and in inference up to 2 x _FiniteTracker.KEEP_BYTES of
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

import contextlib
import copy
import dataclasses
import functools
import math
import statistics
import time
from typing import Optional

from fade.measure.case import CaseResult, CaseSkipped
from fade.measure import timing as engine
from fade.measure.suites.models.variants import (
    CUDNN_BENCHMARK,
    Variant,
    cudnn_benchmark,
    fp32_math_flags,
    knobs_in_effect,
    parse_variant,
    skip_reason,
)
from fade.measure.timing import Timing, measure

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
MAX_TIMING_SEGMENTS = 3 * TIMING_SEGMENTS
PAIR_ORDER = ("fade", "plain", "plain", "fade")  # repeated: ABBA, so a linear drift cancels within each pair
PLAIN_WARMUP_STEPS = 2  # once: the model is warm (FADE's first segment ran); a textbook loop still warms up
PLAIN_MIN_BLOCKS = 2  # per plain segment, when FADE's segment timed fewer blocks
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
    # cuDNN's choice of algorithm stays the same from the checked steps to the last timed one
    with cudnn_benchmark(CUDNN_BENCHMARK):
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
            with _gc_frozen() as gc_facts:
                max_segments = TIMING_SEGMENTS if ctx.quick else MAX_TIMING_SEGMENTS  # --quick: a smoke run, kept short
                timed = _timed_segments(runner, workload.samples, device, ctx.timing, validate=validate, max_segments=max_segments)
            timing, segments, plain = timed
            loss_check["finite_checked_steps"] = runner.tracker.check()
            memory = _memory(device)
            # inference outputs the finiteness check held at once (their concatenation briefly doubles it)
            memory["finite_check_bytes"] = runner.tracker.kept_bytes_max
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
        "timing_segments": segments,
        "gc": gc_facts,
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
    """Every step's loss (or output), kept on the device and summed once in a while: NaN or inf in any step
    makes the sum non-finite. No step launches a kernel of its own. A training step's 0-dim loss is kept as
    it is. An inference step's output is kept by reference, without a copy, until KEEP_BYTES of outputs are
    held; then one concatenation and one sum fold them (two kernels per 16 steps of a 256 KB output). An
    output larger than KEEP_BYTES belongs to a step heavy enough that one sum of a sample of it
    (CHECK_SAMPLE_ELEMENTS) costs nothing visible, and gets one. The 0-dim sums are folded into the total
    every FOLD_STEPS of them.

    Why no kernel per step: on a launch-bound step every host microsecond counts, and more than its share.
    H100, mobilenet_v2 compiled inference, batch 64 (benchmarks/step_overhead.py and the bench's own segments,
    repeated): the step's host time wanders between 2.5 and 4.5 ms against a device floor of 2.85 ms, so its
    block times are bimodal and their median sits on the edge between the modes. With one sum per step (13 us
    of host time, 0.5% of the step), 18 repeats put FADE a median 1.9% below the plain loop, 5 of them past
    -2.8%; FADE's timing of the same step without the sum landed within 0.8% in five of six. With outputs
    kept instead, six of eight repeats landed within 0.6%, one at -2.4% and one at -14.3%: a 9 s slow spell
    of the host that FADE's median fell inside and the plain loop's only touched
    (results/models-h100/diagnostics).
    The kept outputs are in the peak memory figure (at most 2 x KEEP_BYTES: the kept outputs and their
    concatenation); `extra.memory.finite_check_bytes` says how much."""

    FOLD_STEPS = 1024  # pending 0-dim tensors (512 bytes each in the caching allocator) before a fold
    KEEP_BYTES = 4 * 2**20  # outputs held by reference before they are folded: 0.1-1% of a zoo model's peak memory

    def __init__(self, device: str):
        import torch

        self.total = torch.zeros((), dtype=torch.float32, device=device)
        self.pending: list = []
        self.kept: list = []
        self.kept_bytes = 0
        self.kept_bytes_max = 0
        self.steps = 0

    def reset(self) -> None:
        self.total.zero_()
        self.pending.clear()
        self.kept.clear()
        self.kept_bytes = self.kept_bytes_max = 0
        self.steps = 0

    def add_loss(self, loss) -> None:
        self.pending.append(loss.detach())
        self._stepped()

    def add_output(self, output) -> None:
        """An inference output (a tensor or a pytree of them), made under inference_mode: no autograd graph
        hangs off it, so keeping it holds its memory and nothing else."""
        import torch

        if torch.is_tensor(output):
            leaves = (output,)
        else:
            from torch.utils._pytree import tree_leaves

            leaves = tree_leaves(output)
        for leaf in leaves:
            if not (torch.is_tensor(leaf) and leaf.is_floating_point()):
                continue
            size = leaf.nbytes
            if size > self.KEEP_BYTES:
                sample = leaf.detach()
                if sample.numel() > CHECK_SAMPLE_ELEMENTS and sample.is_contiguous():
                    sample = sample.view(-1)[:: sample.numel() // CHECK_SAMPLE_ELEMENTS]
                self.pending.append(sample.sum(dtype=torch.float32))  # one kernel: no cast of a bf16 output first
                continue
            if self.kept_bytes + size > self.KEEP_BYTES:
                self._fold_kept()
            self.kept.append(leaf)
            self.kept_bytes += size
        self._stepped()

    def _stepped(self) -> None:
        self.steps += 1
        if len(self.pending) >= self.FOLD_STEPS:
            self._fold()

    def _fold_kept(self) -> None:
        import torch

        if self.kept:
            # one concatenation (it promotes mixed dtypes) and one sum, not a kernel per kept output
            self.pending.append(torch.cat([leaf.reshape(-1) for leaf in self.kept]).sum(dtype=torch.float32))
            self.kept_bytes_max = max(self.kept_bytes_max, self.kept_bytes)  # held is largest just before a fold
            self.kept.clear()
            self.kept_bytes = 0

    def _fold(self) -> None:
        import torch

        if self.pending:
            # one stack (it promotes mixed dtypes), not a cast per value: a fold runs inside a timed block
            self.total.add_(torch.stack(self.pending).sum(dtype=torch.float32))
            self.pending.clear()

    def check(self) -> int:
        """Steps checked; InvalidRun if any of them was not finite. A sync point."""
        self._fold_kept()
        self._fold()
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


def _timed_segments(runner: _Runner, samples: int, device: str, settings: dict, *, validate: bool,
                    max_segments: int = MAX_TIMING_SEGMENTS) -> tuple:
    """FADE's timing as batches of TIMING_SEGMENTS measure() calls (more batches while their spread exceeds
    NOISY_SEGMENT_SPREAD_PCT, up to `max_segments`) and, when `validate`, the plain loop's segments between
    them in PAIR_ORDER. Returns (the pooled Timing, extra.timing_segments, extra.plain_loop or None)."""
    batch = (PAIR_ORDER * TIMING_SEGMENTS)[: 2 * TIMING_SEGMENTS] if validate else ("fade",) * TIMING_SEGMENTS
    plain_step = _plain_step(runner)
    fade_segments: list = []
    plain_segments: list = []  # seconds per step of each block, one list per plain segment
    order: list = []
    while True:
        for side in batch:
            order.append(side)
            if side == "fade":
                fade_segments.append(_fade_segment(runner.step, device, settings, fade_segments[0] if fade_segments else None))
                continue
            warmup_steps = 0 if plain_segments else PLAIN_WARMUP_STEPS  # PAIR_ORDER starts with FADE
            plain_segments.append(_plain_segment_after(plain_step, device, fade_segments[-1], fade_segments[0].calls_per_sample, warmup_steps))
        fade_rates = [samples / segment.median_s for segment in fade_segments]
        # another batch only while FADE's own segments disagree (see "Timing")
        if len(fade_rates) >= max_segments or _spread_pct(fade_rates) <= NOISY_SEGMENT_SPREAD_PCT:
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
    segment = dict(settings)
    segment["budget_s"] = totals["budget_s"] / TIMING_SEGMENTS
    segment["min_run_s"] = totals["min_run_s"] / TIMING_SEGMENTS
    segment["min_samples"] = max(2, math.ceil(totals["min_samples"] / TIMING_SEGMENTS))
    segment["max_samples"] = max(segment["min_samples"], totals["max_samples"] // TIMING_SEGMENTS)
    if not first:  # the same steps ran a moment ago: warm, at this load's clock, and the block size is known
        segment.update(warmup_s=0.0, min_warmup_calls=1, max_settle_s=0.0, min_block_s=0.0)
    return segment


def _fade_segment(step, device: str, settings: dict, first: Optional[Timing]) -> Timing:
    """One measure() call. After the first, one call is a block of the first segment's k steps, so every
    segment's samples are blocks of the same size; samples are rescaled to seconds per step."""
    if first is None:
        return measure(step, device=device, **_segment_settings(settings, True))
    calls = first.calls_per_sample

    def block() -> None:
        for _ in range(calls):
            step()

    timing = measure(block, device=device, **_segment_settings(settings, False))
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


def _plain_step(runner: _Runner):
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
        with torch.inference_mode(), runner.autocast():
            module(*workload.inputs)

    return train_step if runner.training else infer_step


def _plain_segment_after(step, device: str, fade_segment: Timing, calls: int, warmup_steps: int) -> list:
    """A plain segment matched to `fade_segment`: blocks of `calls` steps filling its timed work (at least
    PLAIN_MIN_BLOCKS), a sync per the engine's round (timing.ROUND_S) of blocks."""
    block_s = calls * fade_segment.median_s
    blocks = max(PLAIN_MIN_BLOCKS, round(_timed_s(fade_segment) / block_s))
    per_sync = max(1, math.ceil(engine.ROUND_S / block_s))
    return _plain_segment(step, device, calls, blocks, per_sync, warmup_steps)


def _plain_segment(step, device: str, calls: int, blocks: int, per_sync: int, warmup_steps: int) -> list:
    """Seconds per step of each of `blocks` back-to-back blocks of `calls` steps, after `warmup_steps`; a
    sync after every `per_sync` blocks."""
    import torch

    for _ in range(warmup_steps):
        step()
    if not device.startswith("cuda"):
        per_step_s = []
        for _ in range(blocks):
            started = time.perf_counter()
            for _ in range(calls):
                step()
            per_step_s.append((time.perf_counter() - started) / calls)
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


@contextlib.contextmanager
def _gc_frozen():
    """gc.freeze() until the block ends (see "Conditions"); yields extra.gc."""
    import gc

    gc.freeze()  # O(1): moves every tracked object to the permanent generation
    facts = {
        "frozen_objects": gc.get_freeze_count(),
        "method": "gc.freeze() for the timing: the collector stays on but walks only objects made since",
    }
    try:
        yield facts
    finally:
        gc.unfreeze()


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
