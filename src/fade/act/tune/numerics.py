"""Whether a tuning candidate still computes the same thing: the step core's judge (fade.measure.step.numerics),
the one the model bench uses too, so a variant the bench accepts, the tuner accepts too.

The worker measures (trial.py); these functions only decide, from plain numbers, so tests need no torch.
Training: every loss and gradient finite, and the last loss within loss_check's bound of fp32's after as many
optimizer updates as ran (a GradScaler's skipped steps are not counted against fp16). Inference: the outputs'
relative RMS error within OUTPUT_TOLERANCE of the dtype the math ran in.
"""

from __future__ import annotations

from fade.measure.step.numerics import (
    OUTPUT_TOLERANCE,
    PRECISION_MATH_DTYPE,
    check,
    check_inference,
    check_training,
    loss_check,
)

__all__ = ["OUTPUT_TOLERANCE", "PRECISION_MATH_DTYPE", "check", "check_inference", "check_training", "loss_check"]
