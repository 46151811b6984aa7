"""Model-bench variants: a variant name is an alias of a knob configuration (fade.measure.step.config), a
precision plus optional modifiers joined with `+`, and whether this device can run it.

A variant name is explicit about every knob it turns (`amp-bf16+channels-last+compile`); a name without a
precision uses `default`. Each part maps onto knobs.toml's names (the table is step.config's docstring):

    fp32 | default | tf32 | amp-fp16 | amp-bf16    precision=<the same>
    channels-last                                 channels_last=on
    compile                                       compile=default
    <knob>=<value>                                that knob: compile=max-autotune, sdpa_backend=flash, ...

so `parse_variant("amp-bf16+channels-last+compile")` is the configuration precision=amp-bf16,
channels_last=on, compile=default, whose canonical name (the case id's part) is the same string again.
Precisions (fp32 math is "ieee" or "tf32", pinned by step.config.pinned):
    fp32      matmul ieee, cuDNN convolutions ieee: no TF32 anywhere (the numerics reference)
    default   PyTorch's defaults, pinned: matmul ieee, cuDNN convolutions tf32 (torch has let cuDNN use TF32
              for fp32 convolutions since 1.7, and not cuBLAS since 1.12)
    tf32      matmul tf32, cuDNN convolutions tf32
    amp-fp16  torch.autocast(float16) with a GradScaler when training; fp32 leftovers as `default`
    amp-bf16  torch.autocast(bfloat16), no scaler; fp32 leftovers as `default`
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Optional

from fade.errors import FadeUsageError
from fade.measure.step.config import FP32_MATH, VARIANT_MODIFIERS, ConfigError, StepConfig, step_knobs

PRECISIONS = tuple(FP32_MATH)  # fp32, default, tf32, amp-fp16, amp-bf16
MODIFIERS = tuple(VARIANT_MODIFIERS)  # channels-last, compile
Variant = StepConfig  # a variant is a knob configuration


def parse_variant(text: str) -> StepConfig:
    """"amp-bf16+channels-last" -> StepConfig. FadeUsageError for an unknown part, a repeat, two precisions
    or a knob value the table does not have."""
    knobs: dict = {}
    for raw in text.split("+"):
        if "=" in raw:
            name, value = (piece.strip().lower() for piece in raw.split("=", 1))
            name = name.replace("-", "_")
        else:
            part = raw.strip().lower().replace("_", "-")
            if part in PRECISIONS:
                name, value = "precision", part
            elif part in MODIFIERS:
                name, value = VARIANT_MODIFIERS[part]
            else:
                close = difflib.get_close_matches(part, PRECISIONS + MODIFIERS, n=1, cutoff=0.5)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                known = ", ".join(PRECISIONS + MODIFIERS)
                raise FadeUsageError(f"--variants {text!r}: unknown part {part!r}{hint} (known: {known}, or knob=value; join with +)")
        if name in knobs:
            if name == "precision":
                raise FadeUsageError(f"--variants {text!r}: two precisions ({knobs[name]} and {value}); pick one")
            raise FadeUsageError(f"--variants {text!r}: {name} is given twice")
        if name not in step_knobs():
            close = difflib.get_close_matches(name, list(step_knobs()), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise FadeUsageError(f"--variants {text!r}: {name!r} is not a knob a step applies{hint} (knobs: {', '.join(step_knobs())})")
        knobs[name] = value
    try:
        return StepConfig.from_knobs(knobs)
    except ConfigError as error:
        raise FadeUsageError(f"--variants {text!r}: {error}") from None


def parse_variants(texts) -> list:
    """Parse and de-duplicate (by canonical name), keeping the order given."""
    variants: dict = {}
    for text in texts:
        variant = parse_variant(text)
        variants.setdefault(variant.name, variant)
    return list(variants.values())


NO_GPU_KNOBS_DEVICE_TYPES = ("cpu", "ocl")  # devices where a knob the table marks for GPUs changes nothing


def _outside_where(knob, device_type: str) -> bool:
    return device_type in NO_GPU_KNOBS_DEVICE_TYPES and knob.where != "any"


def ignored_knobs(variant: Variant, device: str) -> dict:
    """knob id -> why, for the knobs `variant` turns that `device` ignores: a knob outside its `where` whose table
    row says `ignored_elsewhere` (cudnn_benchmark on the CPU or fade.ocl). The variant runs there as
    `run_as(variant, device)`, and the record lists these under extra.variant.not_applicable."""
    device_type = device.split(":", 1)[0]
    ignored = {}
    for knob_id, value in variant.changed.items():
        knob = step_knobs()[knob_id]
        if knob.ignored_elsewhere and _outside_where(knob, device_type):
            ignored[f"{knob_id}={value}"] = (f"a {knob.where} knob (data/knobs.toml) that {device_type} ignores: "
                                             f"ran at {knob_id}={knob.baseline}")
    return ignored


def run_as(variant: Variant, device: str) -> Variant:
    """The configuration `variant` runs as on `device`: the same, with its ignored knobs (ignored_knobs) at their
    baselines, so `fp32+cudnn_benchmark=on` runs on fade.ocl as `fp32`, and is there its own fp32 reference."""
    ignored = {text.split("=", 1)[0] for text in ignored_knobs(variant, device)}
    if not ignored:
        return variant
    return dataclasses.replace(variant, **{knob_id: step_knobs()[knob_id].baseline for knob_id in ignored})


def skip_reason(variant: Variant, device: str, dtype_support: dict, mode: Optional[str] = None) -> Optional[str]:
    """Why `variant` cannot run on `device` in `mode` (record it as skipped), or None. `dtype_support` is
    session.supported_dtypes: dtype name -> None or the reason it is unsupported. A knob the table marks
    for GPUs only, or for the other mode, changes nothing here; one the table marks `ignored_elsewhere` is no
    reason to skip (ignored_knobs)."""
    device_type = device.split(":", 1)[0]
    if variant.precision == "amp-fp16" and device_type == "cpu":
        return "amp-fp16 is a GPU configuration: CPU autocast to float16 has no fast kernels and no GradScaler recipe"
    for knob_id, value in variant.changed.items():
        knob = step_knobs()[knob_id]
        if knob.ignored_elsewhere and _outside_where(knob, device_type):
            continue
        if device_type == "cpu" and knob.where != "any":
            return f"{knob_id}={value} is a {knob.where} knob (data/knobs.toml): it changes nothing on the cpu"
        if device_type == "ocl" and knob.where != "any":
            return (f"{knob_id}={value} is a {knob.where} knob (data/knobs.toml): it changes nothing on fade.ocl's "
                    "OpenCL device")
        if mode is not None and mode not in knob.modes:
            return f"{knob_id}={value} is a {'/'.join(knob.modes)} knob (data/knobs.toml): it changes nothing in {mode}"
    if variant.precision == "tf32" and dtype_support.get("tf32"):
        return f"tf32: {dtype_support['tf32']}"
    if variant.autocast_dtype and dtype_support.get(variant.autocast_dtype):
        return f"{variant.precision}: {dtype_support[variant.autocast_dtype]}"
    if variant.compile_mode is not None:
        if device_type == "ocl":  # compile=default runs fade.ocl's graph mode (runner.apply_config)
            if variant.compile_mode != "default":
                return (f"compile={variant.compile_mode} is an Inductor mode: on fade.ocl, compile=default runs its "
                        "graph mode (backend fade_ocl, docs/ocl.md \"Graph mode\")")
            return None
        return compile_unavailable_reason(device_type)
    return None


def compile_unavailable_reason(device_type: str) -> Optional[str]:
    """None if torch.compile's default backend (Inductor) can build kernels for `device_type` here."""
    import shutil

    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this Python/platform (torch._dynamo.is_dynamo_supported() is False)"
    except Exception as error:
        return f"torch.compile is unavailable: {type(error).__name__}: {error}".splitlines()[0]
    if device_type == "cpu":
        if not any(shutil.which(compiler) for compiler in ("g++", "c++", "clang++")):
            return "torch.compile on the CPU needs a C++ compiler (g++, c++ or clang++ on PATH); none was found"
        return None
    try:
        from torch.utils._triton import has_triton

        if not has_triton():
            return f"torch.compile on {device_type} needs Triton with a backend for this GPU; `import triton` failed or found none"
    except Exception as error:
        return f"torch.compile: cannot check for Triton ({type(error).__name__}: {error})".splitlines()[0]
    return None
