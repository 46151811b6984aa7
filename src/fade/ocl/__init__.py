"""fade.ocl: an open OpenCL device for PyTorch, `torch.device("ocl:N")`, registered by `fade.ocl.register()`.

`register()` names torch's PrivateUse1 device "ocl" (once per process; importing fade.ocl registers nothing).
See docs/ocl.md for what runs on the device, what falls back to the CPU, and how to set it up.
"""

from __future__ import annotations

import warnings

import torch

from fade.ocl import dispatch, graph, runtime, tuning  # tuning: persisted CLBlast parameters apply as a device opens
from fade.ocl.graph import graph_backend, graph_fallback_counts, graph_stats, reset_graph_stats
from fade.ocl.profiling import KernelTimes, profile
from fade.ocl.runtime import DeviceInfo, OclError, OutOfMemoryError

__all__ = ["register", "is_registered", "devices", "device_count", "fallback_counts", "reset_fallback_counts",
           "synchronize", "empty_cache", "manual_seed", "memory_allocated", "DeviceInfo", "OclError",
           "OutOfMemoryError", "add_fallback_listener", "remove_fallback_listener", "profile", "KernelTimes",
           "clblast_tuning", "graph_backend", "graph_fallback_counts", "graph_stats", "reset_graph_stats"]


def register() -> None:
    """Name PrivateUse1 "ocl" in this process and route its ops here (idempotent), and name the graph mode's
    torch.compile backend "fade_ocl" (`torch.compile(model, backend="fade_ocl")`, docs/ocl.md "Graph mode").
    OclError if there is no OpenCL device or PrivateUse1 already has another name."""
    dispatch.register()
    try:
        graph.register_backend()
    except (ImportError, RuntimeError) as error:  # dynamo unsupported here: the eager device still works
        warnings.warn(f"fade.ocl: the graph mode's backend name \"fade_ocl\" is not registered ({error}); "
                      "eager ocl works", UserWarning, stacklevel=2)


is_registered = dispatch.is_registered
fallback_counts = dispatch.fallback_counts
reset_fallback_counts = dispatch.reset_fallback_counts
add_fallback_listener = dispatch.add_fallback_listener
remove_fallback_listener = dispatch.remove_fallback_listener


def devices() -> list[DeviceInfo]:
    """The OpenCL devices, GPUs first: ocl:N is devices()[N]. OclError when there is no OpenCL platform."""
    return runtime.devices()


def device_count() -> int:
    return len(runtime.devices())


def synchronize() -> None:
    """Wait for every queued OpenCL command."""
    dispatch.BackendModule().synchronize()


def empty_cache() -> None:
    """Return the allocator's cached buffers (and those of dead tensors) to the driver."""
    dispatch.BackendModule().empty_cache()


def manual_seed(seed: int) -> None:
    """Seed the random ops of the ocl device (they run on the CPU generator)."""
    torch.manual_seed(seed)


def memory_allocated() -> int:
    """Bytes held by live ocl tensors' buffers (rounded to the allocator's sizes)."""
    return dispatch.BackendModule().memory_allocated()


def clblast_tuning(index: int = 0) -> dict:
    """What fade.ocl did with tuned CLBlast parameters when it opened ocl:`index` (opening it if needed):
    {applied, kernels, cache, reason}. FADE_OCL_CLBLAST_TUNED=0 turns the tuned parameters off."""
    runtime.device(index)
    return dict(tuning.applied[index])
