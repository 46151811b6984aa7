"""What a benchmark case is (an importable function plus JSON parameters) and the helpers cases share.

A case is found by (module, function, params) so a worker process can import and run it: nothing is
pickled. The function is called as `function(ctx, **params)` and returns a `CaseResult`, or raises
`CaseSkipped` when this device cannot run it (an SDPA backend that does not accept the inputs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

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
# Devices without a generator of their own (fade.ocl's random ops run on the CPU generator): random data is
# drawn on the CPU and copied there, so it equals the CPU's for the same seed.
HOST_GENERATOR_DEVICES = ("ocl",)


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


def uses_host_generator(device: str) -> bool:
    """Whether `device` draws random numbers with the CPU generator (HOST_GENERATOR_DEVICES)."""
    return device.split(":", 1)[0] in HOST_GENERATOR_DEVICES


def random_tensor(shape, dtype_name: str, device: str, *, seed: int = RANDOM_SEED):
    """Normal random data made on the device itself, never zeros: some kernels and the power draw depend
    on the values. fp8 is drawn in fp32 and cast."""
    import torch

    storage = "float32" if dtype_name in ("fp8", "tf32") else TORCH_DTYPE_NAMES[dtype_name]
    if uses_host_generator(device):  # drawn on the CPU, then copied (not timed)
        generator = torch.Generator().manual_seed(seed)
        values = torch.randn(tuple(shape), generator=generator, dtype=getattr(torch, storage)).to(device)
    else:
        generator = torch.Generator(device=device).manual_seed(seed)
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


def tflops_result(timing, flops: int, formula: str, dtype: str, extra: Optional[dict] = None) -> CaseResult:
    """A compute-bound case's result: TFLOP/s = flops / median_s / 1e12 (`formula` says how `flops` is
    counted), against the spec-table peak of `dtype`."""
    return CaseResult(flops / timing.median_s / 1e12, "TFLOP/s", formula, timing, {"flops": flops},
                      peak_kind="tflops", peak_dtype=dtype, extra=dict(extra or {}))  # fmt: skip


def bandwidth_result(timing, moved_bytes: int, formula: str, work: Optional[dict] = None) -> CaseResult:
    """A memory-bound case's result: GB/s = moved_bytes / median_s / 1e9 (`formula` says which bytes count),
    against the device's peak bandwidth. `work` adds facts beside {"bytes": moved_bytes}."""
    return CaseResult(moved_bytes / timing.median_s / 1e9, "GB/s", formula, timing, {"bytes": moved_bytes, **(work or {})},
                      peak_kind="bandwidth")  # fmt: skip
