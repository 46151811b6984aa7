"""Whether a configuration still computes the same thing as fp32: its loss after the checked steps against
fp32's from the same weights and seed, or its inference outputs against fp32's. One judge for the model
bench and the tuner, so a variant the bench accepts, the tuner accepts too.

The loss check. Training on one fixed batch amplifies rounding, the more the smaller the batch: with batch
norm over a handful of values one SGD step can move the loss from 6.7 to 4.9 or to 5.5 depending on the last
bit (resnet18 at batch 2, 32 px, CPU). So the allowed distance from fp32 is the larger of a fixed share of the
starting loss (LOSS_RELATIVE_TOLERANCE) and a multiple (LOSS_ROUNDING_FACTOR) of what rounding alone does to
fp32: the spread between fp32 and fp32 started from weights perturbed by reference.ROUNDING_PERTURBATION
(bf16's unit roundoff). A variant that diverges, stalls or computes something else lands farther away than
both; one that only rounds differently does not. The last loss follows as many optimizer updates as were
applied: fewer than the steps when a GradScaler skipped steps while it searched for a scale (fp16; resnet50
on an H100: 6.81 after 5 steps against fp32's 4.86, yet only 2 updates had happened), so it is compared with
fp32's loss after as many updates. An inference case compares the loss of one forward pass against the first
bound alone.

The output check (the tuner's inference trials): the outputs against fp32's from the same weights and batch,
as a relative RMS error ||out - ref|| / ||ref||, must stay within OUTPUT_TOLERANCE of the dtype the math ran
in. These bounds are engineering margins for deep networks (a few times each format's unit roundoff, grown
over ~50 layers), not derived bounds; a wrong kernel or an overflow lands orders of magnitude beyond them.

A realistic state first (calibrate_batchnorm). An eval-mode network fresh from random initialisation is
not what users run: BatchNorm's default running statistics (mean 0, variance 1) do not normalise anything,
so activations shrink layer after layer (a random torchvision mobilenet_v2 in eval mode gives logits with a
norm of 2.4e-7, below fp16's smallest subnormal 6e-8 per element: fp16 returns zeros and its relative error
is 1; issue 14). Before any inference comparison, the bench and the tuner run CALIBRATION_FORWARDS
train-mode forward passes (no gradients) over the example batch with each BatchNorm's momentum set to None
(a cumulative average), so the running statistics are that batch's, as after training; the batch is fixed, so
one pass gives its statistics exactly. Both fp32's and the candidate's outputs then come from that state. The
error stays relative (||out - ref|| / ||ref||, scale-free), and a rejection whose fp32 outputs are still below
the dtype's smallest normal says so.

The output bound is model-aware, as the loss check is: a randomly initialised network with calibrated
BatchNorm is far more sensitive to rounding than a trained one (mobilenet_v2, batch 4, 64 px, CPU: weights
perturbed by bf16's unit roundoff move fp32's logits by 61% relative RMS; bf16 autocast by 45%, fp16 by
7.5%). So the allowed error is max(OUTPUT_TOLERANCE[dtype], OUTPUT_ROUNDING_FACTOR x the `rounding_spread`:
fp32's outputs from weights perturbed by the dtype's UNIT_ROUNDOFF), never above MAX_OUTPUT_ERROR: what
rounding does to this model is allowed; zeros, infinities and wrong kernels are not.

Deciding needs only plain numbers, so tests need no torch; output_error and calibrate_batchnorm use torch
(lazily).
"""

from __future__ import annotations

import math
from typing import Optional

LOSS_RELATIVE_TOLERANCE = 0.05  # of fp32's starting loss: bf16 autocast stays within 1% at batch 16+ (CPU)
LOSS_ROUNDING_FACTOR = 4.0  # fp16/bf16 round every activation, not only the weights once: a few times more
# relative RMS error allowed for inference outputs, by the dtype the math ran in
OUTPUT_TOLERANCE = {
    "fp32": 1e-4,  # IEEE fp32 with a different summation order (compile fusions): a few ulps x depth
    "tf32": 1e-2,  # 10-bit mantissa (unit roundoff 4.9e-4), ~20x over a deep network
    "fp16": 1e-2,  # same mantissa as TF32
    "bf16": 5e-2,  # 7-bit mantissa (unit roundoff 3.9e-3), ~10x over a deep network
}
# what rounding alone does to this model: fp32 from weights perturbed by the dtype's unit roundoff, times this
OUTPUT_ROUNDING_FACTOR = 2.0  # the candidate rounds every activation, not the weights once
MAX_OUTPUT_ERROR = 0.5  # never more: zeros from an underflow, a wrong kernel or uncorrelated outputs give ~1
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11, "bf16": 2.0**-8}
CALIBRATION_FORWARDS = 1  # train-mode passes over the (fixed) example batch: one gives its statistics exactly
SMALLEST_NORMAL = {"fp16": 6.1e-5, "bf16": 1.2e-38, "tf32": 1.2e-38, "fp32": 1.2e-38}  # IEEE 754 / bfloat16 formats
PRECISION_MATH_DTYPE = {"fp32": "fp32", "default": "tf32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16"}
LOSS_FORMULA = ("ok when |loss - fp32_loss| <= max(tolerance * |fp32_first_loss|, rounding_factor * "
                "|fp32_rounded_loss - fp32_loss|); fp32_loss and fp32_rounded_loss after updates_before_last updates")  # fmt: skip


def loss_check(losses: list, fp32_losses: list, fp32_rounded_losses: Optional[list], *, training: bool = True,
               updates_before_last: Optional[int] = None) -> dict:  # fmt: skip
    """The loss check (module docstring) of finite losses: the bench's `extra.loss_check`, with "ok" and
    "reason" (None when ok). updates_before_last: optimizer updates before the last step (None: every step
    updated); fp32's losses after as many updates are the reference."""
    steps = len(losses)
    updates = steps - 1 if updates_before_last is None else updates_before_last
    index = min(max(updates, 0), len(fp32_losses) - 1)
    last, reference_last, start = losses[-1], fp32_losses[index], abs(fp32_losses[0])
    rounded = None if not fp32_rounded_losses else fp32_rounded_losses[index]
    rounding_spread = 0.0 if rounded is None else abs(rounded - reference_last)
    allowed = max(LOSS_RELATIVE_TOLERANCE * start, LOSS_ROUNDING_FACTOR * rounding_spread)
    difference = abs(last - reference_last)
    result = {
        "steps": steps if training else 0,
        "updates_before_last": updates if training else 0,
        "loss": last,
        "fp32_loss": reference_last,
        "fp32_first_loss": fp32_losses[0],
        "fp32_rounded_loss": rounded,
        "difference": difference,
        "allowed": allowed,
        "formula": LOSS_FORMULA,
        "tolerance": LOSS_RELATIVE_TOLERANCE,
        "rounding_factor": LOSS_ROUNDING_FACTOR,
        "losses": list(losses),
        "fp32_losses": list(fp32_losses),
        "ok": difference <= allowed,
        "reason": None,
    }
    if not result["ok"]:
        skipped = steps - 1 - updates
        what = f"after {steps} steps" + (f" ({skipped} skipped by the grad scaler)" if skipped > 0 else "") if training else "of the forward pass"
        after = f" after {index} updates" if training else ""
        result["reason"] = (
            f"loss {what} is {last:.5g}, fp32 from the same seed{after} gives {reference_last:.5g}: {difference:.3g} apart, "
            f"more than the {allowed:.3g} allowed ({100 * LOSS_RELATIVE_TOLERANCE:g}% of the starting loss {start:.5g}, or "
            f"{LOSS_ROUNDING_FACTOR:g}x the {rounding_spread:.3g} that rounding alone moves fp32): the configuration computes something else"
        )
    return result


def check_training(numerics: dict, reference: dict) -> Optional[str]:
    """None if the candidate trains soundly, else the reason: every loss finite, every gradient finite, and
    loss_check passed.

    numerics: {"losses": [...], "grads_finite": bool, "updates_before_last": int}; reference: {"losses":
    fp32's, "rounded_losses": fp32's from perturbed weights, or None}.
    """
    losses = numerics.get("losses") or []
    if not losses:
        return "no loss was reported"
    if not all(math.isfinite(value) for value in losses):
        return f"loss is not finite: {losses}"
    if not numerics.get("grads_finite", True):
        return "a gradient is not finite"
    return loss_check(losses, reference["losses"], reference.get("rounded_losses"),
                      updates_before_last=numerics.get("updates_before_last"))["reason"]  # fmt: skip


def check_inference(numerics: dict) -> Optional[str]:
    """None if the outputs match fp32's within OUTPUT_TOLERANCE of their math dtype, else the reason.

    numerics: {"relative_rms_error": float, "math_dtype": "bf16", "finite": bool}.
    """
    if not numerics.get("finite", True):
        return "an output is not finite"
    error = numerics.get("relative_rms_error")
    if error is None or not math.isfinite(error):
        return f"output error could not be computed ({error})"
    dtype = numerics.get("math_dtype", "fp32")
    allowed = output_allowed(dtype, numerics.get("rounding_spread"))
    if error > allowed:
        reason = f"outputs differ from fp32 by {error:.3g} (relative RMS), more than the {allowed:.3g} allowed for {dtype}"
        scale = numerics.get("fp32_output_rms")
        if scale is not None and scale < SMALLEST_NORMAL[dtype]:
            reason += (f"; fp32's outputs have an RMS of {scale:.3g}, below {dtype}'s smallest normal {SMALLEST_NORMAL[dtype]:g}: "
                       "the model's outputs are too small for this dtype")  # fmt: skip
        return reason
    return None


def output_allowed(dtype: str, rounding_spread: Optional[float] = None) -> float:
    """The relative RMS error allowed for outputs computed in `dtype` (module docstring: model-aware bound)."""
    allowed = OUTPUT_TOLERANCE[dtype]
    if rounding_spread is not None and math.isfinite(rounding_spread):
        allowed = max(allowed, min(MAX_OUTPUT_ERROR, OUTPUT_ROUNDING_FACTOR * rounding_spread))
    return allowed


def check(numerics: Optional[dict], reference: Optional[dict]) -> Optional[str]:
    """Dispatch on numerics["mode"] ("train" needs `reference`). None: sound."""
    if numerics is None:
        return "no numerics were reported"
    if numerics.get("mode") == "train":
        if reference is None:
            return "no fp32 reference to compare the loss with"
        return check_training(numerics, reference)
    if numerics.get("mode") == "generate":
        return check_generation(numerics)
    return check_inference(numerics)


def check_generation(numerics: dict) -> Optional[str]:
    """None if a decode configuration passed the generation gate (fade.measure.suites.llm.gate), else the reason.

    numerics: the gate's record, with "verdict" ("ok" or "differ") and "failed" (what did not hold); with a
    latency target, "latency_ms" and "latency_target_ms" (a configuration slower than the target is rejected)."""
    latency, target = numerics.get("latency_ms"), numerics.get("latency_target_ms")
    if latency is not None and target is not None and latency > target:
        return f"per-token latency {latency:.4g} ms, more than the {target:g} ms target"
    verdict = numerics.get("verdict")
    if verdict == "ok":
        return None
    if verdict == "differ":
        return "the generation gate: " + "; ".join(numerics.get("failed") or ["differs from the reference"])
    return f"the generation gate gave no verdict ({verdict!r})"


def output_math_dtype(precision: str, compiled: bool, device: str) -> str:
    """The dtype whose OUTPUT_TOLERANCE applies: the precision's math dtype, fp32 where TF32 does not exist
    (the CPU), and TF32-sized error for compiled fp32 (fused reductions reorder sums; admitted: generous)."""
    math_dtype = PRECISION_MATH_DTYPE[precision]
    if math_dtype == "tf32" and device.startswith("cpu"):
        math_dtype = "fp32"  # TF32 exists only on GPUs
    if math_dtype == "fp32" and compiled:
        math_dtype = "tf32"
    return math_dtype


def output_error(expected: list, got: list) -> tuple:
    """(relative RMS error, all finite) of the float tensors `got` against `expected` (same order)."""
    import torch

    difference = math.sqrt(sum(float(((g - e) ** 2).sum()) for g, e in zip(got, expected)))
    scale = math.sqrt(sum(float((e**2).sum()) for e in expected)) or 1.0
    finite = all(bool(torch.isfinite(g).all()) for g in got)
    return difference / scale, finite


def output_rms(tensors: list) -> float:
    """Root mean square over every element of `tensors` (the fp32 outputs' scale)."""
    count = sum(tensor.numel() for tensor in tensors)
    return math.sqrt(sum(float((tensor.double() ** 2).sum()) for tensor in tensors) / count) if count else 0.0


def calibrate_batchnorm(model, inputs: tuple, forwards: int = CALIBRATION_FORWARDS) -> int:
    """Give `model`'s BatchNorm layers the running statistics of `inputs` (module docstring): `forwards`
    train-mode passes without gradients at momentum None, then momentum and train/eval mode as they were.
    Returns how many layers were calibrated (0: nothing to do, or a batch too small for train mode: one value
    per channel; the statistics are then left as they were)."""
    import torch

    norms = [module for module in model.modules()
             if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.track_running_stats]  # fmt: skip
    if not norms:
        return 0
    momenta = [module.momentum for module in norms]
    saved = [(module.running_mean.clone(), module.running_var.clone()) for module in norms]
    was_training = model.training
    for module in norms:
        module.reset_running_stats()
        module.momentum = None  # cumulative average over the passes
    model.train()
    calibrated = len(norms)
    try:
        with torch.no_grad():
            for _ in range(forwards):
                model(*inputs)
    except ValueError:  # "Expected more than 1 value per channel when training": batch 1 at a 1x1 map
        for module, (mean, variance) in zip(norms, saved):
            module.running_mean.copy_(mean)
            module.running_var.copy_(variance)
        calibrated = 0
    finally:
        for module, momentum in zip(norms, momenta):
            module.momentum = momentum
        model.train(was_training)
    return calibrated
