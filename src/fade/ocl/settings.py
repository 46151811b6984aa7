"""Every FADE_OCL_* environment variable fade.ocl reads, in one table (SETTINGS), read through `setting`.

Each row names the variable, its default, the values it takes and what it does. A module reads its setting
once, at import (convolution, philox, foreach), or when a device opens (tuning: CLBlast's tuned parameters),
so set them before the process imports fade.ocl. A value outside `allowed` warns and means the default: a
typo must not silently mean the default. docs/ocl.md's settings table is `markdown_table()`'s output
(tests/ocl/test_opencl_offline.py checks that they agree).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Mapping, Optional


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: str
    allowed: tuple
    does: str  # what it changes, and the measurement behind the default


SETTINGS = (
    Setting("FADE_OCL_CONV_BENCHMARK", "auto", ("on", "off", "auto"),
            "A convolution's GEMM layout (folded, per image, Winograd, own 1x1 GEMM) measured once per shape and "
            "the fastest kept, like cudnn.benchmark. auto: on GPUs only; elsewhere folded below FOLD_PIXELS output "
            "pixels, per image above."),
    Setting("FADE_OCL_CONV_WINOGRAD", "auto", ("on", "off", "auto"),
            "Winograd F(2x2, 3x3) for stride-1 3x3 convolutions. auto: one of the measured layouts (so used only "
            "where measured faster, GPUs); on: always where it applies (the tests); off: never."),
    Setting("FADE_OCL_CONV_OWN_GEMM", "auto", ("on", "off", "auto"),
            "FADE's own GEMM kernel for a 1x1 convolution's per-image GEMMs and weight gradient (it saves "
            "CLBlast's host cost per call). auto: one of the measured layouts; on: always where it applies (the "
            "tests); off: never."),
    Setting("FADE_OCL_CONV_GROUPED", "auto", ("on", "off", "auto"),
            "Direct kernels for grouped convolutions with several input channels a group (ResNeXt, RegNet): one "
            "launch for every group, no im2col, instead of a CLBlast GEMM per group. auto: one of the measured "
            "layouts (GPUs); on: always where it applies (the tests); off: never."),
    Setting("FADE_OCL_DROPOUT_RNG", "device", ("device", "cpu"),
            "device: dropout and bernoulli draw on the device by Philox, keyed from torch's CPU generator (seeded "
            "runs repeat; the masks differ from the CPU's, as CUDA's do). cpu: the CPU kernel's own draw, uploaded "
            "(masks identical to the CPU's; ~14 ns an element of host time)."),
    Setting("FADE_OCL_BUILD_BUDGET", "auto", ("auto", "off"),
            "How long measuring may build per-shape programs. auto: once a device has spent BUILD_BUDGET_S (180 s) "
            "building OpenCL programs, a new shape no longer measures layouts and kernels that each build a program "
            "of their own: a convolution takes its default layout, a GEMM is measured against the tiled kernel's "
            "runtime-geometry programs (shared by every shape) and CLBlast. densenet161's ~80 convolution widths "
            "kept its first eager step building for more than 540 s on the H200 (results/s22-h200/A). off: "
            "measure every shape with its own programs, however long the builds take."),
    Setting("FADE_OCL_GEMM_OWN", "auto", ("on", "off", "auto", "measure"),
            "FADE's tiled GEMM kernel (kernels/tiled_gemm.cl: any transposition read in place, one launch, no "
            "padded copies) or CLBlast, per GEMM shape. auto: measured once per shape on GPUs for products of at "
            "least 2^30 flops (kernel time and CLBlast's host cost both count), the tiled kernel unmeasured for "
            "smaller ones on GPUs (one program for every shape: CLBlast's 50-130 us of host time a call would "
            "cost more), CLBlast elsewhere; measure: measured on any device, any size; on: the tiled "
            "kernel always (the tests); off: CLBlast always."),
    Setting("FADE_OCL_FOREACH_FUSED", "auto", ("on", "off", "auto"),
            "torch.optim's foreach ops (SGD's, Adam's and AdamW's) as multi-tensor kernels, 16 tensors a launch. auto: "
            "GPUs only (resnet50's SGD step on the H100 61 -> 4-10 ms; on PoCL the branching kernel was slower "
            "than a kernel per tensor)."),
    Setting("FADE_OCL_GRAPH_REPLAY", "on", ("on", "off"),
            "The graph mode's capture and replay (fade/ocl/capture.py): a graph's second call is recorded and "
            "later calls issue its commands again with no per-node Python. off: every call runs node by node."),
    Setting("FADE_OCL_BN_FOLD", "on", ("on", "off"),
            "Inference graphs (graph mode): an eval-mode batch norm after a convolution folded into its weights at "
            "each call (one launch where the batch norm's was), its bias added in the kernel fused with what "
            "follows: the batch norm's pass over the activation is gone. off: the batch norm runs as it is."),
    Setting("FADE_OCL_FLUSH_EVERY", "8", ("0", "1", "2", "4", "8", "16", "32", "64"),
            "clFlush after this many enqueued commands (0: never; the queue is flushed when it is finished). An "
            "OpenCL driver may hold commands until a flush: the H200's eager resnet50 inference at 232 commands a "
            "step had its device busy 27.5 of 53.5 ms, as if the host's enqueueing and the kernels did not overlap "
            "(b46c1a6, with 54 CLBlast calls a step, kept it busy 26.3 of 27.1 ms). Not yet measured with the "
            "flush on a GPU."),
    Setting("FADE_OCL_CLBLAST_TUNED", "1", ("0", "1"),
            "1: when a device opens, apply the CLBlast parameters `fade tune MODEL --device ocl --pretune` "
            "persisted for it (fade.ocl.clblast_tuning(N) says what happened). 0: CLBlast's own parameters."),
)
BY_NAME = {row.name: row for row in SETTINGS}


def env_choice(name: str, default: str, allowed: tuple, environ: Optional[Mapping[str, str]] = None) -> str:
    """The value of environment variable `name` when it is one of `allowed`; else `default`, with a warning for a
    value set but not understood (a typo must not silently mean the default)."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or value in allowed:
        return value or default
    warnings.warn(f"{name}={value!r} is not one of {', '.join(allowed)}; using {default!r}", stacklevel=3)
    return default


def setting(name: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The value of SETTINGS' row `name` in `environ` (default: the process's environment)."""
    row = BY_NAME[name]
    return env_choice(row.name, row.default, row.allowed, environ)


def markdown_table() -> str:
    """SETTINGS as the table docs/ocl.md shows."""
    rows = ["| Variable | Default | Values | What it does |", "|---|---|---|---|"]
    rows += [f"| `{row.name}` | `{row.default}` | {' '.join(f'`{value}`' for value in row.allowed)} | {row.does} |"
             for row in SETTINGS]
    return "\n".join(rows) + "\n"
