"""Model-bench variants: one precision plus optional channels-last and torch.compile, joined with `+`.

A variant name is explicit about every knob it turns (`amp-bf16+channels-last+compile`); a name without a
precision uses `default`. `fp32_math_flags` pins the fp32 math in a context manager and restores it after, and
`knobs_in_effect` reads back what torch actually has, for the record. `cudnn_benchmark` pins cuDNN's
algorithm choice (CUDNN_BENCHMARK) for every variant alike.

Precisions (fp32 math is "ieee" or "tf32", set through torch's fp32_precision API where it exists):
    fp32      matmul ieee, cuDNN convolutions ieee: no TF32 anywhere
    default   PyTorch's defaults, pinned: matmul ieee, cuDNN convolutions tf32 (torch has let cuDNN use TF32
              for fp32 convolutions since 1.7, and not cuBLAS since 1.12)
    tf32      matmul tf32, cuDNN convolutions tf32
    amp-fp16  torch.autocast(float16) with a GradScaler when training; fp32 leftovers as `default`
    amp-bf16  torch.autocast(bfloat16), no scaler; fp32 leftovers as `default`
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from typing import Iterator, Optional

from fade.errors import FadeUsageError

PRECISIONS = ("fp32", "default", "tf32", "amp-fp16", "amp-bf16")
MODIFIERS = ("channels-last", "compile")  # applied in this order: memory format first, then compile
# (matmul, convolution) fp32 math per precision; AMP's fp32 leftovers run as PyTorch's defaults do
FP32_MATH = {
    "fp32": ("ieee", "ieee"),
    "default": ("ieee", "tf32"),
    "tf32": ("tf32", "tf32"),
    "amp-fp16": ("ieee", "tf32"),
    "amp-bf16": ("ieee", "tf32"),
}
AUTOCAST_DTYPE = {"amp-fp16": "fp16", "amp-bf16": "bf16"}
# cuDNN algorithm choice for every variant: PyTorch's default, heuristics. torch caches the chosen plan per
# convolution shape, so a case's checked steps, timed steps and plain loop all run the same kernels; pinned
# so that a workload which turns benchmark mode on cannot make one case's sides differ in what they ran.
CUDNN_BENCHMARK = False


@dataclass(frozen=True)
class Variant:
    precision: str
    channels_last: bool = False
    compile: bool = False

    @property
    def name(self) -> str:
        """Canonical spelling: precision first (left out when `default` has company), then modifiers."""
        modifiers = [name for name, on in (("channels-last", self.channels_last), ("compile", self.compile)) if on]
        parts = modifiers if modifiers and self.precision == "default" else [self.precision] + modifiers
        return "+".join(parts)

    @property
    def autocast_dtype(self) -> Optional[str]:
        return AUTOCAST_DTYPE.get(self.precision)

    @property
    def matmul_math(self) -> str:
        return FP32_MATH[self.precision][0]

    @property
    def conv_math(self) -> str:
        return FP32_MATH[self.precision][1]

    def knobs(self) -> dict:
        """What this variant asks for (the record's `extra.variant`)."""
        return {
            "name": self.name,
            "precision": self.precision,
            "autocast": self.autocast_dtype,
            "matmul_fp32_math": self.matmul_math,
            "conv_fp32_math": self.conv_math,
            "channels_last": self.channels_last,
            "compile": self.compile,
        }


def parse_variant(text: str) -> Variant:
    """"amp-bf16+channels-last" -> Variant. FadeUsageError for an unknown part, a repeat or two precisions."""
    parts = [part.strip().lower().replace("_", "-") for part in text.split("+")]
    precision = None
    modifiers = set()
    for part in parts:
        if part in PRECISIONS:
            if precision is not None:
                raise FadeUsageError(f"--variants {text!r}: two precisions ({precision} and {part}); pick one")
            precision = part
        elif part in MODIFIERS:
            if part in modifiers:
                raise FadeUsageError(f"--variants {text!r}: {part} is given twice")
            modifiers.add(part)
        else:
            close = difflib.get_close_matches(part, PRECISIONS + MODIFIERS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(PRECISIONS + MODIFIERS)
            raise FadeUsageError(f"--variants {text!r}: unknown part {part!r}{hint} (known: {known}; join with +)")
    return Variant(precision or "default", "channels-last" in modifiers, "compile" in modifiers)


def parse_variants(texts) -> list:
    """Parse and de-duplicate (by canonical name), keeping the order given."""
    variants: dict = {}
    for text in texts:
        variant = parse_variant(text)
        variants.setdefault(variant.name, variant)
    return list(variants.values())


def skip_reason(variant: Variant, device: str, dtype_support: dict) -> Optional[str]:
    """Why `variant` cannot run on `device` (record it as skipped), or None. `dtype_support` is
    session.supported_dtypes: dtype name -> None or the reason it is unsupported."""
    device_type = device.split(":", 1)[0]
    if variant.precision == "amp-fp16" and device_type == "cpu":
        return "amp-fp16 is a GPU configuration: CPU autocast to float16 has no fast kernels and no GradScaler recipe"
    if variant.precision == "tf32" and dtype_support.get("tf32"):
        return f"tf32: {dtype_support['tf32']}"
    if variant.autocast_dtype and dtype_support.get(variant.autocast_dtype):
        return f"{variant.precision}: {dtype_support[variant.autocast_dtype]}"
    if variant.compile:
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


@contextlib.contextmanager
def fp32_math_flags(matmul: str, conv: str) -> Iterator[None]:
    """Pin matmul and convolution fp32 math ("ieee" or "tf32") separately; restore after.

    Through the legacy allow_tf32 flags where torch has them, else the fp32_precision API (>= 2.9), never
    both. Legacy first because Inductor still reads them (torch 2.11's max-autotune GEMM lowering): once
    the new API holds different values for matmul and conv, that read raises "you have used mix of the
    legacy and new APIs" and the compile fails. Set through the legacy flags, both APIs read back alike.
    """
    import torch

    matmul_backend = torch.backends.cuda.matmul
    conv_backend = getattr(torch.backends.cudnn, "conv", None)
    try:
        saved = (matmul_backend.allow_tf32, torch.backends.cudnn.allow_tf32)
    except (AttributeError, RuntimeError):  # no legacy flags, or the new API was already used in a mix
        saved = None
    if saved is not None:
        # Restored through the same legacy flags, plus the float32 matmul precision they also move. The new
        # API's raw values may then read "ieee" where they read "none" (inherit) before: the same math.
        # Restoring the raw values instead leaves torch in its "mixed APIs" state, unreadable again.
        saved_precision = torch.get_float32_matmul_precision()
        matmul_backend.allow_tf32 = matmul == "tf32"
        torch.backends.cudnn.allow_tf32 = conv == "tf32"
        try:
            yield
        finally:
            matmul_backend.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
            torch.set_float32_matmul_precision(saved_precision)
        return
    saved = (matmul_backend.fp32_precision, conv_backend.fp32_precision)
    matmul_backend.fp32_precision, conv_backend.fp32_precision = matmul, conv
    try:
        yield
    finally:
        matmul_backend.fp32_precision, conv_backend.fp32_precision = saved


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool) -> Iterator[None]:
    """Pin torch.backends.cudnn.benchmark to `enabled`; restore it after."""
    import torch

    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def knobs_in_effect() -> dict:
    """The fp32 math flags torch has right now (read inside fp32_math_flags), for the record. A flag torch
    refuses to read (it does once the legacy and the new precision APIs were mixed) reads as its error."""
    import torch

    def read(getter):
        try:
            return getter()
        except Exception as error:
            return f"unreadable: {type(error).__name__}: {error}".splitlines()[0][:160]

    found = {"cudnn_benchmark": torch.backends.cudnn.benchmark}
    matmul_backend = torch.backends.cuda.matmul
    conv_backend = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul_backend, "fp32_precision") and conv_backend is not None:  # "none" = inherits a parent setting
        found["matmul_fp32_precision"] = read(lambda: matmul_backend.fp32_precision)
        found["cudnn_conv_fp32_precision"] = read(lambda: conv_backend.fp32_precision)
    found["matmul_allow_tf32"] = read(lambda: matmul_backend.allow_tf32)  # what cuBLAS and Inductor act on
    found["cudnn_allow_tf32"] = read(lambda: torch.backends.cudnn.allow_tf32)
    found["float32_matmul_precision"] = read(torch.get_float32_matmul_precision)
    return found
