"""What a benchmark case is (an importable function plus JSON parameters) and the helpers cases share.

A case is found by (module, function, params) so a worker process can import and run it: nothing is
pickled. The function is called as `function(ctx, **params)` and returns a `CaseResult`, or raises
`CaseSkipped` when this device cannot run it (an SDPA backend that does not accept the inputs).
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional

# FADE's dtype names -> torch dtype attribute. tf32 is fp32 storage with TF32 tensor-core math allowed.
TORCH_DTYPE_NAMES = {
    "fp64": "float64",
    "fp32": "float32",
    "tf32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
}
GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
RANDOM_SEED = 0  # fixed so two runs time the same data


@dataclass(frozen=True)
class Case:
    """One benchmark case: a stable id and what a worker needs to run it."""

    case_id: str  # stable across runs: "gemm/bf16/8192x8192x8192"
    suite: str  # "micro"
    module: str  # importable module that holds `function`
    function: str
    params: dict = field(default_factory=dict)  # JSON values only; passed as keyword arguments
    dtype: Optional[str] = None  # the dtype the case needs, checked against the device before running
    needs_gpu: bool = False  # True for cases that compare with or move data to a GPU
    timing: Optional[dict] = None  # overrides of the run's timing.measure settings for this case only

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Case":
        return cls(**data)


@dataclass(frozen=True)
class CaseContext:
    """Run-wide settings handed to every case function."""

    device: str  # resolved torch device: "cuda:0", "cpu"
    run_id: str
    quick: bool = False
    timing: dict = field(default_factory=dict)  # keyword arguments for timing.measure (budget_s, ...)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CaseResult:
    """What a case measured. `value` derives from `timing` by `formula`."""

    value: float
    unit: str  # "TFLOP/s", "GB/s", "us", "x"
    formula: str  # how value follows from the timing: "2*m*n*k / median_s / 1e12"
    timing: Any = None  # timing.Timing of the primary measurement
    work: dict = field(default_factory=dict)  # {"flops": ...} or {"bytes": ...} per call
    peak_kind: Optional[str] = None  # "tflops" (peak of peak_dtype) or "bandwidth"; None: no peak applies
    peak_dtype: Optional[str] = None
    extra: dict = field(default_factory=dict)  # case-specific facts: the SDPA backend that ran, ...


class CaseSkipped(Exception):
    """This device or build cannot run the case; the record gets status "skipped" and this reason."""


def torch_dtype(name: str):
    import torch

    return getattr(torch, TORCH_DTYPE_NAMES[name])


def random_tensor(shape, dtype_name: str, device: str, *, seed: int = RANDOM_SEED):
    """Normal random data made on the device itself, never zeros: some kernels and the power draw depend
    on the values. fp8 is drawn in fp32 and cast."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    storage = "float32" if dtype_name in ("fp8", "tf32") else TORCH_DTYPE_NAMES[dtype_name]
    values = torch.randn(tuple(shape), generator=generator, dtype=getattr(torch, storage), device=device)
    return values if storage == TORCH_DTYPE_NAMES[dtype_name] else values.to(torch_dtype(dtype_name))


def synchronize(device: str) -> None:
    """Wait for `device`'s queued work through its own torch module (a no-op on the CPU)."""
    import torch

    device_type = device.split(":", 1)[0]
    if device_type == "cpu":
        return
    module = getattr(torch, device_type)
    module.synchronize()


@contextlib.contextmanager
def fp32_math(mode: str) -> Iterator[None]:
    """Pin fp32 matmul and convolution math to "ieee" or "tf32", restoring the previous flags after.

    Uses the fp32_precision API where torch has it (>= 2.9), else the legacy allow_tf32 flags; torch
    refuses to read the legacy flags once the new API was used, so only one API is ever touched.
    """
    import torch

    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if hasattr(matmul, "fp32_precision") and conv is not None and hasattr(conv, "fp32_precision"):
        saved = (matmul.fp32_precision, conv.fp32_precision)
        matmul.fp32_precision = mode
        conv.fp32_precision = mode
        try:
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
    else:
        saved = (matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
        try:
            yield
        finally:
            matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def fp32_mode_for(dtype_name: str) -> Optional[str]:
    """The fp32 math mode a dtype name implies: "tf32" for tf32, "ieee" for fp32, None otherwise."""
    return {"tf32": "tf32", "fp32": "ieee"}.get(dtype_name)


@contextlib.contextmanager
def maybe_fp32_math(dtype_name: str) -> Iterator[None]:
    mode = fp32_mode_for(dtype_name)
    if mode is None:
        yield
    else:
        with fp32_math(mode):
            yield
