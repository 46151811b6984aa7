"""OpenCL C text for fade.ocl's kernels: the .cl files of fade/ocl/kernels, their types, and the defines a
geometry is compiled in with; and NoKernel, what a call raises when no kernel here can run it (it then runs on
the CPU: dispatch._cpu_fallback)."""

from __future__ import annotations

import functools
import re
from importlib import resources

import torch

FLOAT_LITERAL = re.compile(r"(\d\.\d*(?:e-?\d+)?)f\b")

CL_TYPES = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.int64: "long",
             torch.int32: "int", torch.int16: "short", torch.int8: "char", torch.uint8: "uchar",
             torch.bool: "uchar"}


@functools.lru_cache(maxsize=None)
def load(name: str) -> str:
    """The text of kernels/`name`, package data of fade.ocl (read once per process)."""
    return resources.files("fade.ocl").joinpath("kernels", name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def compiled_source(body: str, header: tuple, names: tuple = (), values: tuple = (),
                     wide_indices: bool = False) -> str:
    """A kernel source with its types and geometry compiled in: `#define` each of `header` ("T float", ...), then
    NAME value for each of `names` and `values` (as long literals where indices need 64 bits), then `body`. One
    object per argument set, so its hash, the kernel cache's key, is computed once."""
    suffix = "L" if wide_indices else ""
    return ("".join(f"#define {line}\n" for line in header) +
            "".join(f"#define {name} {value}{suffix}\n" for name, value in zip(names, values)) + body)


def cl_type(dtype) -> str:
    found = CL_TYPES.get(dtype)
    if found is None:
        raise NoKernel(f"no OpenCL type for {dtype}")
    return found


class NoKernel(Exception):
    """This call has no OpenCL kernel here; run it on the CPU."""
