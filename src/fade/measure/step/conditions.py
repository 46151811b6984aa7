"""Pins and restores the process state a timed step depends on: fp32 math (TF32), cuDNN's algorithm choice,
MIOpen's immediate mode and the garbage collector; and reads back what torch has in effect, for the record.

fp32 math is "ieee" (no TF32) or "tf32", set separately for matmul (cuBLAS) and convolutions (cuDNN). The
policy, the same for every caller (micro cases, the op probe, the doctor's quick GEMMs, the model bench,
the tuner): set it through the legacy allow_tf32 flags where torch has them, else through the
fp32_precision API (torch >= 2.9), never both. Legacy first because Inductor still reads them (torch 2.11's
max-autotune GEMM lowering): once the new API holds different values for matmul and conv, that read raises
"you have used mix of the legacy and new APIs" and every max-autotune compile fails (H100, fade tune).
Set through the legacy flags, both APIs read back alike.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

FP32_MATH_MODES = ("ieee", "tf32")


def fp32_math_for_dtype(dtype_name: str) -> Optional[str]:
    """The fp32 math mode a dtype name implies: "tf32" for tf32, "ieee" for fp32, None otherwise."""
    return {"tf32": "tf32", "fp32": "ieee"}.get(dtype_name)


@contextlib.contextmanager
def pinned_flags(matmul: Optional[str] = None, conv: Optional[str] = None, *, cudnn_benchmark: Optional[bool] = None,
                 miopen_immediate: Optional[bool] = None) -> Iterator[dict]:  # fmt: skip
    """Pin what is given (None leaves a flag alone) and restore every pinned flag after, also when the block
    raises. matmul/conv: fp32 math "ieee" or "tf32" (one given pins both to it when the other is None).
    Yields flags_in_effect() as read inside the pin: what the record should say ran."""
    import torch

    if matmul is None and conv is None:
        fp32 = contextlib.nullcontext()
    else:
        fp32 = _fp32_math(matmul or conv, conv or matmul)
    with contextlib.ExitStack() as stack:
        stack.enter_context(fp32)
        if cudnn_benchmark is not None:
            stack.enter_context(_pinned(lambda: torch.backends.cudnn.benchmark, lambda value: _set_cudnn("benchmark", value),
                                        bool(cudnn_benchmark)))  # fmt: skip
        miopen = getattr(torch.backends, "miopen", None)
        if miopen_immediate and miopen is not None and hasattr(miopen, "immediate"):
            stack.enter_context(_pinned(lambda: miopen.immediate, lambda value: setattr(miopen, "immediate", value), True))
        yield flags_in_effect()


@contextlib.contextmanager
def pinned_fp32_math(dtype_name: str) -> Iterator[dict]:
    """Pin matmul and convolution fp32 math to what `dtype_name` implies (fp32_math_for_dtype); a dtype that
    implies none (fp16, bf16, fp8) pins nothing. Yields flags_in_effect()."""
    mode = fp32_math_for_dtype(dtype_name)
    with pinned_flags(mode, mode) as in_effect:
        yield in_effect


@contextlib.contextmanager
def _pinned(get, set_to, value) -> Iterator[None]:
    saved = get()
    set_to(value)
    try:
        yield
    finally:
        set_to(saved)


def _set_cudnn(name: str, value: bool) -> None:
    """torch.backends.cudnn.<name> = value, also where torch froze its global flags (disable_global_flags, as
    its OpInfo test harness does, which the op probe imports): then through cudnn.set_flags, which the
    freeze does not guard, touching nothing else."""
    import inspect

    import torch

    if not torch.backends.flags_frozen():
        setattr(torch.backends.cudnn, name, value)
        return
    keep = {"_fp32_precision": None} if "_fp32_precision" in inspect.signature(torch.backends.cudnn.set_flags).parameters else {}
    torch.backends.cudnn.set_flags(**{f"_{name}": value}, **keep)  # its default would reset fp32_precision


@contextlib.contextmanager
def _fp32_math(matmul: str, conv: str) -> Iterator[None]:
    """The fp32 math policy of the module docstring: legacy flags first, the new API only without them."""
    import torch

    for mode in (matmul, conv):
        if mode not in FP32_MATH_MODES:
            raise ValueError(f"fp32 math {mode!r}: expected one of {', '.join(FP32_MATH_MODES)}")
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
        _set_cudnn("allow_tf32", conv == "tf32")
        try:
            yield
        finally:
            matmul_backend.allow_tf32 = saved[0]
            _set_cudnn("allow_tf32", saved[1])
            torch.set_float32_matmul_precision(saved_precision)
        return
    saved = (matmul_backend.fp32_precision, conv_backend.fp32_precision)
    matmul_backend.fp32_precision, conv_backend.fp32_precision = matmul, conv
    try:
        yield
    finally:
        matmul_backend.fp32_precision, conv_backend.fp32_precision = saved


def flags_in_effect() -> dict:
    """The fp32 math flags and cudnn.benchmark torch has right now, for the record. A flag torch refuses to
    read (it does once the legacy and the new precision APIs were mixed) reads as its error."""
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


@contextlib.contextmanager
def gc_frozen() -> Iterator[dict]:
    """gc.freeze() until the block ends; yields the record's `extra.gc`. Frozen, the collector parks every
    object alive now (garbage included, until the block ends) and walks only what the block allocates: a full
    collection otherwise walks the whole heap (torch, the model, Inductor's graphs), 160 ms in an eager model
    case and 0.9 s after torch.compile on the H100 host, all inside one timing sample."""
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
