"""Whether a tuning candidate still computes the same thing: its loss against fp32's, or its outputs.

Training: the candidate's last loss after the checked steps must lie within the larger of
LOSS_RELATIVE_TOLERANCE of fp32's starting loss and LOSS_ROUNDING_FACTOR x the distance that rounding alone
moves fp32 (fp32 rerun from weights perturbed by bf16's unit roundoff). Both constants and the reasoning are
the model bench's (fade.measure.suites.models.case: LOSS_RELATIVE_TOLERANCE, LOSS_ROUNDING_FACTOR), so a variant the
bench accepts, the tuner accepts too. Every loss must be finite, and so must every gradient.

Inference: the candidate's outputs against fp32's from the same weights and batch, as a relative RMS error
||out - ref|| / ||ref||, must stay within OUTPUT_TOLERANCE of the dtype the math ran in. These bounds are
engineering margins for deep networks (a few times each format's unit roundoff, grown over ~50 layers), not
derived bounds; a wrong kernel or an overflow lands orders of magnitude beyond them.

The worker measures; these functions only decide, from plain numbers, so tests need no torch.
"""

from __future__ import annotations

import math
from typing import Optional

from fade.measure.suites.models.case import LOSS_RELATIVE_TOLERANCE, LOSS_ROUNDING_FACTOR

# relative RMS error allowed for inference outputs, by the dtype the math ran in
OUTPUT_TOLERANCE = {
    "fp32": 1e-4,  # IEEE fp32 with a different summation order (compile fusions): a few ulps x depth
    "tf32": 1e-2,  # 10-bit mantissa (unit roundoff 4.9e-4), ~20x over a deep network
    "fp16": 1e-2,  # same mantissa as TF32
    "bf16": 5e-2,  # 7-bit mantissa (unit roundoff 3.9e-3), ~10x over a deep network
}
PRECISION_MATH_DTYPE = {"fp32": "fp32", "default": "tf32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16"}


def check_training(numerics: dict, reference: dict) -> Optional[str]:
    """None if the candidate trains soundly, else the reason.

    numerics: {"losses": [...], "grads_finite": bool}; reference: {"losses": fp32's, "rounded_losses": fp32's
    from perturbed weights, or None}.
    """
    losses = numerics.get("losses") or []
    if not losses:
        return "no loss was reported"
    if not all(math.isfinite(value) for value in losses):
        return f"loss is not finite: {losses}"
    if not numerics.get("grads_finite", True):
        return "a gradient is not finite"
    reference_losses = reference["losses"]
    # The last loss follows `updates` optimizer updates: fewer than the steps when a GradScaler skipped
    # steps while it searched for a scale (fp16). fp32's loss after as many updates is the fair reference.
    updates = numerics.get("updates_before_last", len(losses) - 1)
    index = min(max(updates, 0), len(reference_losses) - 1)
    start, reference_last = abs(reference_losses[0]), reference_losses[index]
    rounded = reference.get("rounded_losses")
    rounding_spread = abs(rounded[index] - reference_last) if rounded else 0.0
    allowed = max(LOSS_RELATIVE_TOLERANCE * start, LOSS_ROUNDING_FACTOR * rounding_spread)
    difference = abs(losses[-1] - reference_last)
    if difference > allowed:
        skipped = f" ({len(losses) - 1 - updates} skipped by the grad scaler)" if updates != len(losses) - 1 else ""
        return (
            f"loss after {len(losses)} steps{skipped} is {losses[-1]:.5g}, fp32 from the same seed after {index} updates gives "
            f"{reference_last:.5g}: {difference:.3g} apart, more than the {allowed:.3g} allowed"
        )
    return None


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
    allowed = OUTPUT_TOLERANCE[dtype]
    if error > allowed:
        return f"outputs differ from fp32 by {error:.3g} (relative RMS), more than the {allowed:g} allowed for {dtype}"
    return None


def check(numerics: Optional[dict], reference: Optional[dict]) -> Optional[str]:
    """Dispatch on numerics["mode"] ("train" needs `reference`). None: sound."""
    if numerics is None:
        return "no numerics were reported"
    if numerics.get("mode") == "train":
        if reference is None:
            return "no fp32 reference to compare the loss with"
        return check_training(numerics, reference)
    return check_inference(numerics)
