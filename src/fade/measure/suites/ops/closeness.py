"""Whether a device's output matches the CPU reference, by OpInfo's tolerance conventions, and by how much.

Both outputs are flattened with torch's pytree (tuples, lists, dicts, torch.return_types) and compared leaf
by leaf on the CPU. A floating leaf matches where |actual - expected| <= atol + rtol * |expected| (the rule
of torch.testing.assert_close and torch.isclose), with NaN equal to NaN and infinities equal only to
themselves; integer and bool leaves must be equal. The tolerance of a floating leaf is the largest of:
test_compare_cpu's (atol, rtol) = (1e-3, 1e-3), assert_close's default for the leaf's dtype (bf16 rtol
1.6e-2), and the OpInfo's own toleranceOverride for test_compare_cpu, when it has one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from fade.measure.suites.ops.opdb import COMPARE_CPU_TOLERANCE


@dataclass
class Closeness:
    """The comparison of one sample's outputs. `matches` decides; the rest explains."""

    matches: bool = True
    max_abs_error: Optional[float] = None  # over finite positions of all floating and integer leaves
    max_tolerance_ratio: Optional[float] = None  # max |a-e| / (atol + rtol |e|): > 1 is a mismatch
    bad_elements: int = 0  # elements out of tolerance, including NaN/inf disagreements
    atol: Optional[float] = None  # the tolerance of the worst leaf
    rtol: Optional[float] = None
    notes: list = field(default_factory=list)  # structural differences: shape, dtype, leaf count

    def to_dict(self) -> dict:
        return {
            "max_abs_error": self.max_abs_error,
            "max_tolerance_ratio": self.max_tolerance_ratio,
            "bad_elements": self.bad_elements,
            "atol": self.atol,
            "rtol": self.rtol,
            "notes": list(self.notes),
        }


def tolerance_for(dtype, override: Optional[tuple] = None) -> tuple:
    """(atol, rtol) for a floating or complex leaf of `dtype`; (0, 0) for integers and bool."""
    import torch
    from torch.testing._comparison import default_tolerances

    if not (dtype.is_floating_point or dtype.is_complex):
        return (0.0, 0.0)
    rtol, atol = default_tolerances(dtype)
    atol = max(atol, COMPARE_CPU_TOLERANCE[0], (override or (0.0, 0.0))[0])
    rtol = max(rtol, COMPARE_CPU_TOLERANCE[1], (override or (0.0, 0.0))[1])
    return (float(atol), float(rtol))


def compare_outputs(actual, expected, *, override: Optional[tuple] = None) -> Closeness:
    """Compare a device output with the CPU reference output; see the module docstring for the rule."""
    import torch
    from torch.utils._pytree import tree_flatten

    result = Closeness()
    actual_leaves, actual_spec = tree_flatten(actual)
    expected_leaves, expected_spec = tree_flatten(expected)
    if len(actual_leaves) != len(expected_leaves):
        result.matches = False
        result.notes.append(f"{len(actual_leaves)} output leaves where the CPU gives {len(expected_leaves)}")
        return result
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
            _compare_tensors(got, want, override, result, index)
        elif isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor):
            result.matches = False
            result.notes.append(f"leaf {index}: {type(got).__name__} where the CPU gives {type(want).__name__}")
        else:
            _compare_scalars(got, want, result, index)
    return result


def _compare_tensors(got, want, override, result: Closeness, index: int) -> None:
    import torch

    got = _dense_cpu(got)
    want = _dense_cpu(want)
    if got.shape != want.shape:
        result.matches = False
        result.notes.append(f"leaf {index}: shape {tuple(got.shape)} where the CPU gives {tuple(want.shape)}")
        return
    if got.dtype != want.dtype:
        result.matches = False
        result.notes.append(f"leaf {index}: dtype {got.dtype} where the CPU gives {want.dtype}")
        return
    if got.numel() == 0:
        return
    atol, rtol = tolerance_for(want.dtype, override)
    if want.dtype.is_floating_point or want.dtype.is_complex:
        wide = torch.complex128 if want.dtype.is_complex else torch.float64
        a, e = got.to(wide), want.to(wide)
        both_finite = torch.isfinite(a) & torch.isfinite(e)
        same_nonfinite = (a == e) | (torch.isnan(a) & torch.isnan(e))
        nonfinite_bad = int((~both_finite & ~same_nonfinite).sum())
        difference = torch.where(both_finite, (a - e).abs(), torch.zeros((), dtype=torch.float64))
        allowed = atol + rtol * torch.where(both_finite, e.abs(), torch.zeros((), dtype=torch.float64))
        bad = int((difference > allowed).sum()) + nonfinite_bad
        max_error = float(difference.max())
        ratio = float((difference / allowed).max()) if atol > 0 else (math.inf if max_error > 0 else 0.0)
    else:
        difference = (got.to(torch.float64) - want.to(torch.float64)).abs()
        bad = int((got != want).sum())
        max_error = float(difference.max())
        ratio = math.inf if bad else 0.0
    result.bad_elements += bad
    if result.max_abs_error is None or max_error > result.max_abs_error:
        result.max_abs_error = max_error
    if result.max_tolerance_ratio is None or ratio > result.max_tolerance_ratio:
        result.max_tolerance_ratio = ratio
        result.atol, result.rtol = atol, rtol
    if bad:
        result.matches = False


def _compare_scalars(got, want, result: Closeness, index: int) -> None:
    if isinstance(got, float) or isinstance(want, float):
        if isinstance(got, (int, float)) and isinstance(want, (int, float)):
            atol, rtol = COMPARE_CPU_TOLERANCE
            same = (math.isnan(got) and math.isnan(want)) or abs(got - want) <= atol + rtol * abs(want)
            if not same:
                result.matches = False
                result.bad_elements += 1
                result.notes.append(f"leaf {index}: {got!r} where the CPU gives {want!r}")
            return
    if got != want:
        result.matches = False
        result.bad_elements += 1
        result.notes.append(f"leaf {index}: {_short(got)} where the CPU gives {_short(want)}")


def _dense_cpu(tensor):
    import torch

    tensor = tensor.detach()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    return tensor.to("cpu")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
