"""The micro suite: which cases exist per device (GEMM, memory, transfer, launch, conv, SDPA, norm,
CPU vs GPU), how `only`/`dtypes` select them, and `run_micro`, which validates the request and runs them.

Sizes are chosen so the whole suite takes under two minutes on an H100 and `quick` under a minute on a
2-core CPU, including process start-up; each family's comment says what its sizes show.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from typing import Optional, Sequence

from fade.errors import FadeUsageError
from fade.measure.case import GEMM_DTYPES, Case
from fade.measure.runner import CASE_TIMEOUT_S, RunProgress, RunSummary, check_output_path, make_executor, run_cases

SUITE = "micro"
FAMILIES = ("gemm", "memory", "transfer", "launch", "conv", "sdpa", "norm", "cpu_vs_gpu")
KNOWN_DTYPES = GEMM_DTYPES

# timing.measure settings per mode. Full: enough timed work (min_run_s) for clocks and power to settle on
# a large GEMM; quick: the least that still gives a median of >= 5 warm samples.
FULL_TIMING = {
    # Steadiness comes from the engine's settle phase (timing.MAX_SETTLE_S), not from a long fixed
    # warm-up: light cases settle in two windows, power-capped GEMMs take up to the cap.
    "warmup_s": 0.05,
    "min_warmup_calls": 3,
    "min_run_s": 0.2,
    "budget_s": 0.4,
    "min_samples": 5,
    "max_samples": 100,  # 300 cut run-to-run spread on an H100 (max 9.5% -> 5.1%) but took the suite to 132 s
    "target_cov": 0.01,
}
QUICK_TIMING = {
    "warmup_s": 0.02,
    "min_warmup_calls": 2,
    "min_run_s": 0.03,
    "budget_s": 0.15,
    "min_samples": 5,
    "max_samples": 40,
    "target_cov": 0.02,
    "max_settle_s": 0.1,  # quick runs trade steadiness for time: one or two settle windows
}
# Power-heavy GPU cases (large GEMMs, attention) under a power cap: the H100 at 700 W steps its SM clock
# every ~30-80 ms (one 8192^3 bf16 case's samples sat at 1.53 ms per call, then 1.69, then back), so
# per-call samples are a mixture of clock levels and their median jumps between levels from run to run
# (up to 5-10% between two back-to-back suites, docs/performance.md). A sample here is the mean over a
# 50 ms block instead, and sampling covers 0.8 s: the figure is the sustained rate under the cap, averaged
# over many controller steps. No settle phase: a capped clock never settles, it dithers. Large pinned
# transfers get the same treatment: their rate wanders with the host's memory traffic.
# (H100, two back-to-back suites: 1.0 s held every such case within 2.5%; docs/performance.md.)
SUSTAINED_TIMING = {
    "warmup_s": 0.1,
    "min_block_s": 0.05,
    "min_run_s": 0.8,
    "budget_s": 0.8,
    "min_samples": 10,
    "max_samples": 40,
    "target_cov": 0.0,  # run the whole second: an early "converged" would sample one clock level
    "max_settle_s": 0.0,
}
SUSTAINED_MIN_FLOP = 2.5e11  # 2mnk of 8192x4096x4096 and up: >= ~0.35 ms per call on an H100, all power-capped
QUICK_CASE_TIMEOUT_S = 60.0  # quick cases are small: one stuck for a minute is hung

MiB = 2**20
GiB = 2**30

# Llama-3-8B projections for 8192 tokens (hidden 4096, 8 KV heads x 128, intermediate 14336;
# https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json) and a 16-token decode GEMM:
# the non-square shapes a transformer runs. name -> (m, n, k)
TRANSFORMER_SHAPES = {
    "llama3-8b.qkv": (8192, 6144, 4096),
    "llama3-8b.attn_out": (8192, 4096, 4096),
    "llama3-8b.mlp_gate_up": (8192, 28672, 4096),
    "llama3-8b.mlp_down": (8192, 4096, 14336),
    "llama3-8b.decode_gate_up": (16, 28672, 4096),
}
# ResNet-50 v1.5 layers at 224x224 (torchvision names), one per distinct kind of shape:
# name -> (C, H=W, K, R=S, stride, padding)
RESNET50_LAYERS = {
    "conv1": (3, 224, 64, 7, 2, 3),
    "layer1.0.conv1": (64, 56, 64, 1, 1, 0),
    "layer1.0.conv2": (64, 56, 64, 3, 1, 1),
    "layer1.0.conv3": (64, 56, 256, 1, 1, 0),
    "layer2.0.conv2": (128, 56, 128, 3, 2, 1),
    "layer3.0.downsample.0": (512, 28, 1024, 1, 2, 0),
    "layer3.1.conv2": (256, 14, 256, 3, 1, 1),
    "layer4.0.conv3": (512, 7, 2048, 1, 1, 0),
    "layer4.1.conv2": (512, 7, 512, 3, 1, 1),
}
STREAM_OPS = ("copy", "scale", "add", "triad")
CONV_DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
CONV_LAYOUTS = ("nchw", "channels_last")
NORM_OPS = ("layer_norm", "softmax", "sum")
ALL_SDPA_BACKENDS = ("default", "math", "flash", "efficient", "cudnn")


@dataclass(frozen=True)
class SuitePlan:
    """Sizes and dtypes of one flavour of the suite (GPU or CPU, full or quick)."""

    gemm_squares: tuple  # n for n x n x n GEMMs: the size sweep
    gemm_shapes: dict  # named non-square (m, n, k)
    gemm_dtypes: tuple
    stream_array_bytes: tuple  # bytes per array; GPU sweeps from L2-resident to far past any LLC
    transfer_bytes: tuple  # host<->device payloads; empty on the CPU
    conv_layers: tuple  # keys of RESNET50_LAYERS
    conv_dtypes: tuple
    conv_batch: int
    sdpa_shape: dict  # batch, heads, seq, head_dim
    sdpa_backends: tuple
    sdpa_dtypes: tuple
    sdpa_causal: tuple
    norm_shapes: tuple  # (rows, hidden)
    norm_dtypes: tuple
    cpu_vs_gpu_sizes: tuple  # n for the CPU-vs-GPU GEMMs; empty on the CPU
    gemm_fp16_max_size: Optional[int] = None  # skip larger fp16 GEMMs (CPUs without a fast fp16 path)


GPU_SDPA_SHAPE = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}  # a Llama-class 4096-token prefill
CPU_SDPA_SHAPE = {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64}
OCL_SDPA_SHAPE = {"batch": 4, "heads": 12, "seq": 1024, "head_dim": 64}  # BERT-base heads at 1024 tokens
PLANS = {
    ("gpu", False): SuitePlan(
        gemm_squares=(1024, 2048, 4096, 8192), gemm_shapes=TRANSFORMER_SHAPES, gemm_dtypes=GEMM_DTYPES,
        stream_array_bytes=(1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB),
        transfer_bytes=(1 * MiB, 16 * MiB, 256 * MiB),
        conv_layers=tuple(RESNET50_LAYERS), conv_dtypes=("fp32", "bf16"), conv_batch=128,
        sdpa_shape=GPU_SDPA_SHAPE, sdpa_backends=ALL_SDPA_BACKENDS, sdpa_dtypes=("bf16", "fp16"), sdpa_causal=(False, True),
        norm_shapes=((4096, 4096), (16384, 8192)), norm_dtypes=("fp32", "bf16"),
        cpu_vs_gpu_sizes=(256, 1024, 2048),
    ),
    ("gpu", True): SuitePlan(
        gemm_squares=(2048, 8192), gemm_shapes={}, gemm_dtypes=GEMM_DTYPES,
        stream_array_bytes=(16 * MiB, 1 * GiB), transfer_bytes=(64 * MiB,),
        conv_layers=("layer1.0.conv2", "layer3.1.conv2"), conv_dtypes=("bf16",), conv_batch=64,
        sdpa_shape=GPU_SDPA_SHAPE, sdpa_backends=ALL_SDPA_BACKENDS, sdpa_dtypes=("bf16",), sdpa_causal=(False,),
        norm_shapes=((16384, 8192),), norm_dtypes=("bf16",),
        cpu_vs_gpu_sizes=(1024,),
    ),
    ("cpu", False): SuitePlan(
        gemm_squares=(256, 512, 1024, 2048), gemm_shapes={}, gemm_dtypes=("fp32", "tf32", "fp16", "bf16", "fp8"),
        stream_array_bytes=(1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB), transfer_bytes=(),
        conv_layers=tuple(RESNET50_LAYERS), conv_dtypes=("fp32", "bf16"), conv_batch=4,
        sdpa_shape=CPU_SDPA_SHAPE, sdpa_backends=("default", "math", "flash"), sdpa_dtypes=("fp32", "bf16"),
        sdpa_causal=(False, True), norm_shapes=((1024, 1024), (4096, 4096)), norm_dtypes=("fp32", "bf16"),
        cpu_vs_gpu_sizes=(), gemm_fp16_max_size=512,
    ),
    ("cpu", True): SuitePlan(
        gemm_squares=(256, 512, 1024), gemm_shapes={}, gemm_dtypes=("fp32", "tf32", "fp16", "bf16", "fp8"),
        stream_array_bytes=(4 * MiB, 64 * MiB), transfer_bytes=(),
        conv_layers=("layer3.1.conv2", "layer4.1.conv2"), conv_dtypes=("fp32",), conv_batch=2,
        sdpa_shape=CPU_SDPA_SHAPE, sdpa_backends=("default", "math", "flash"), sdpa_dtypes=("fp32",), sdpa_causal=(False,),
        norm_shapes=((2048, 2048),), norm_dtypes=("fp32",),
        cpu_vs_gpu_sizes=(), gemm_fp16_max_size=512,
    ),
    # fade.ocl (an OpenCL device, docs/ocl.md): fp32 only in practice (the session's dtypes say why each
    # other dtype is skipped); SDPA on its math path at a BERT-base shape, since the GPU shape's 4x32x4096^2
    # score matrix is 8.6 GB in fp32. Full: a GPU through its vendor's OpenCL (the H100); quick: sized for
    # PoCL on a 2-core CPU in CI.
    ("ocl", False): SuitePlan(
        gemm_squares=(1024, 2048, 4096, 8192), gemm_shapes=TRANSFORMER_SHAPES, gemm_dtypes=GEMM_DTYPES,
        stream_array_bytes=(1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB),
        transfer_bytes=(1 * MiB, 16 * MiB, 256 * MiB),
        conv_layers=tuple(RESNET50_LAYERS), conv_dtypes=("fp32",), conv_batch=128,  # the GPU plan's: same case ids
        sdpa_shape=OCL_SDPA_SHAPE, sdpa_backends=("default", "math"), sdpa_dtypes=("fp32",), sdpa_causal=(False, True),
        norm_shapes=((4096, 4096), (16384, 8192)), norm_dtypes=("fp32",),
        cpu_vs_gpu_sizes=(256, 1024, 2048),
    ),
    ("ocl", True): SuitePlan(
        gemm_squares=(256, 1024), gemm_shapes={}, gemm_dtypes=GEMM_DTYPES,
        stream_array_bytes=(4 * MiB, 64 * MiB), transfer_bytes=(16 * MiB,),
        conv_layers=("layer3.1.conv2", "layer4.1.conv2"), conv_dtypes=("fp32",), conv_batch=2,
        sdpa_shape=CPU_SDPA_SHAPE, sdpa_backends=("default", "math"), sdpa_dtypes=("fp32",), sdpa_causal=(False,),
        norm_shapes=((2048, 2048),), norm_dtypes=("fp32",),
        cpu_vs_gpu_sizes=(1024,),
    ),
}  # fmt: skip
# Notes on the CPU plans: efficient and cudnn SDPA are GPU kernels; most x86 CPUs have no fast fp16
# matmul (1-3 GFLOP/s measured on a 2-core EPYC VM), so fp16 GEMMs stop at 512. tf32 and fp8 are listed
# so that asking for them gives "not supported on cpu" rather than "no such case".


def build_catalog(device: str, *, quick: bool) -> list:
    """Every micro case for a device ("cpu", "cuda:0", "xpu:0", ...), unsupported dtypes included."""
    device_type = device.split(":", 1)[0]
    plan = PLANS[(device_type if device_type in ("cpu", "ocl") else "gpu", quick)]
    cases: list = []

    sustained = SUSTAINED_TIMING if device_type != "cpu" and not quick else None

    def add(case_id: str, module: str, function: str, params: dict, *, dtype=None, needs_gpu=False, timing=None) -> None:
        module = f"fade.measure.suites.micro.{module}"
        cases.append(Case(case_id, SUITE, module, function, params, dtype=dtype, needs_gpu=needs_gpu, timing=timing))

    shapes = {f"square{size}": (size, size, size) for size in plan.gemm_squares}
    shapes.update(plan.gemm_shapes)
    for dtype in plan.gemm_dtypes:
        for shape, (m, n, k) in shapes.items():
            if dtype == "fp16" and plan.gemm_fp16_max_size and max(m, n, k) > plan.gemm_fp16_max_size:
                continue
            params = {"m": m, "n": n, "k": k, "dtype": dtype, "shape": shape}
            timing = sustained if 2 * m * n * k >= SUSTAINED_MIN_FLOP else None
            add(f"gemm/{dtype}/{m}x{n}x{k}", "gemm", "gemm", params, dtype=dtype, timing=timing)

    for op in STREAM_OPS:
        for array_bytes in plan.stream_array_bytes:
            params = {"op": op, "elements": array_bytes // 4, "dtype": "fp32"}
            add(f"memory/{op}/{size_label(array_bytes)}", "memory", "stream", params)

    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for nbytes in plan.transfer_bytes:
                params = {"direction": direction, "memory": memory, "nbytes": nbytes}
                case_id = f"transfer/{direction}/{memory}/{size_label(nbytes)}"
                timing = sustained if memory == "pinned" and nbytes >= 256 * MiB else None
                add(case_id, "memory", "transfer", params, needs_gpu=True, timing=timing)

    launch_modes = ["eager"]
    if device_type == "cuda":
        launch_modes.append("graph")  # CUDA graphs exist on CUDA and ROCm only
    if device_type != "cpu":
        launch_modes.append("sync")
    for mode in launch_modes:
        add(f"launch/{mode}", "memory", "launch", {"mode": mode})

    for dtype in plan.conv_dtypes:
        for layout in CONV_LAYOUTS:
            for direction in CONV_DIRECTIONS:
                for layer in plan.conv_layers:
                    c, hw, k, rs, stride, padding = RESNET50_LAYERS[layer]
                    params = {
                        "layer": layer, "n": plan.conv_batch, "c": c, "h": hw, "w": hw, "k": k, "r": rs, "s": rs,
                        "stride": stride, "padding": padding, "dtype": dtype, "layout": layout, "direction": direction,
                    }  # fmt: skip
                    case_id = f"conv/{dtype}/{layout}/{direction}/{layer}/n{plan.conv_batch}"
                    add(case_id, "conv", "conv", params, dtype=dtype)

    shape_label = "b{batch}h{heads}s{seq}d{head_dim}".format(**plan.sdpa_shape)
    for dtype in plan.sdpa_dtypes:
        for causal in plan.sdpa_causal if dtype == plan.sdpa_dtypes[0] else plan.sdpa_causal[:1]:  # causal: first dtype only
            for backend in plan.sdpa_backends:
                params = {**plan.sdpa_shape, "dtype": dtype, "backend": backend, "causal": causal}
                case_id = f"sdpa/{dtype}/{backend}/{shape_label}" + ("-causal" if causal else "")
                add(case_id, "attention", "sdpa", params, dtype=dtype, timing=sustained)  # ~1 TFLOP per call

    for op in NORM_OPS:
        for dtype in plan.norm_dtypes:
            for rows, cols in plan.norm_shapes:
                params = {"op": op, "rows": rows, "cols": cols, "dtype": dtype}
                add(f"norm/{op}/{dtype}/{rows}x{cols}", "norm", "norm", params, dtype=dtype)

    for size in plan.cpu_vs_gpu_sizes:
        params = {"n": size, "dtype": "fp32"}
        add(f"cpu_vs_gpu/fp32/{size}x{size}x{size}", "gemm", "cpu_vs_gpu", params, dtype="fp32", needs_gpu=True)
    return cases


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


def unsupported_reason(case: Case, device: str, dtype_support: dict) -> Optional[str]:
    """Why `case` cannot run on `device`, or None."""
    if case.needs_gpu and device == "cpu":
        return f"{case.case_id.split('/')[0]} needs a GPU; the device is cpu"
    if case.dtype is not None:
        reason = dtype_support.get(case.dtype, f"{case.dtype} is not known on {device}")
        if reason:
            return reason
    return None


def split_patterns(only: Optional[str]) -> list:
    return [pattern.strip() for pattern in (only or "").split(",") if pattern.strip()]


def matches(pattern: str, case_id: str) -> bool:
    """A glob (`*`, `?`, `[`) matches the whole id or a prefix of whole segments; plain text is a substring."""
    if any(character in pattern for character in "*?["):
        return fnmatch.fnmatchcase(case_id, pattern) or fnmatch.fnmatchcase(case_id, pattern.rstrip("/") + "/*")
    return pattern in case_id


PLAN_EXAMPLES = (("cpu", True), ("cpu", False), ("cuda:0", True), ("cuda:0", False), ("ocl:0", True),
                 ("ocl:0", False))  # one device per plan


def check_patterns_exist(patterns: Sequence[str]) -> None:
    """FadeUsageError for a pattern that matches no case on any device, before anything starts."""
    every_case = [case.case_id for device, quick in PLAN_EXAMPLES for case in build_catalog(device, quick=quick)]
    for pattern in patterns:
        if not any(matches(pattern, case_id) for case_id in every_case):
            suggestion = _did_you_mean(pattern, every_case)
            raise FadeUsageError(f"--only {pattern!r} matches no case{suggestion}; families: {', '.join(FAMILIES)}")


def select_cases(
    catalog: Sequence[Case],
    *,
    device: str,
    dtype_support: dict,
    patterns: Sequence[str] = (),
    dtypes: Optional[Sequence[str]] = None,
    quick: bool = False,
) -> tuple:
    """(cases to run, {reason: count} of matching cases this device cannot run).

    Each pattern must match at least one case this device can run, and each dtype must be supported:
    otherwise FadeUsageError with a one-line reason.
    """
    if dtypes:
        check_dtype_names(dtypes)
        for dtype in dtypes:
            if dtype_support.get(dtype):
                raise FadeUsageError(f"dtype {dtype} is not supported on {device}: {dtype_support[dtype]}")
    runnable = {case.case_id: unsupported_reason(case, device, dtype_support) is None for case in catalog}
    for pattern in patterns:
        matched = [case for case in catalog if matches(pattern, case.case_id)]
        if not matched:
            other = build_catalog(device, quick=not quick)
            hint = ""
            if any(matches(pattern, case.case_id) for case in other):
                hint = " (it matches cases of the full suite; drop --quick)" if quick else " (it matches --quick cases)"
            suggestion = _did_you_mean(pattern, [case.case_id for case in catalog])
            raise FadeUsageError(f"--only {pattern!r} matches no case on {device}{hint}{suggestion}")
        usable = [case for case in matched if runnable[case.case_id]]
        if not usable:
            reason = unsupported_reason(matched[0], device, dtype_support)
            raise FadeUsageError(f"--only {pattern!r} selects only cases {device} cannot run: {reason}")
    selected = []
    unsupported: dict = {}
    for case in catalog:
        if patterns and not any(matches(pattern, case.case_id) for pattern in patterns):
            continue
        if dtypes and case.dtype is not None and case.dtype not in dtypes:
            continue
        reason = unsupported_reason(case, device, dtype_support)
        if reason:
            unsupported[reason] = unsupported.get(reason, 0) + 1
            continue
        selected.append(case)
    if not selected:
        raise FadeUsageError("no case left to run: --only and --dtype together exclude every case")
    return selected, unsupported


def check_dtype_names(dtypes: Sequence[str]) -> None:
    for dtype in dtypes:
        if dtype not in KNOWN_DTYPES:
            suggestion = _did_you_mean(dtype, KNOWN_DTYPES)
            raise FadeUsageError(f"unknown dtype {dtype!r}{suggestion}; known: {', '.join(KNOWN_DTYPES)}")


def _did_you_mean(text: str, candidates: Sequence[str]) -> str:
    pool = set(candidates)
    for candidate in candidates:  # also offer every prefix ("gemm", "gemm/bf16") as a suggestion
        parts = candidate.split("/")
        pool.update("/".join(parts[:depth]) for depth in range(1, len(parts)))
    close = difflib.get_close_matches(text, sorted(pool), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def run_micro(
    device: Optional[str] = None,
    *,
    quick: bool = False,
    only: Optional[str] = None,
    out="results.jsonl",
    resume: bool = False,
    timeout_s: Optional[float] = None,
    isolate: bool = True,
    dtypes: Optional[Sequence[str]] = None,
    progress: Optional[RunProgress] = None,
    run_id: Optional[str] = None,
) -> RunSummary:
    """Run the micro suite on `device` (None: the first GPU, else the CPU) and append records to `out`.

    `only` is a comma-separated list of case-id patterns (globs, or substrings such as "gemm/bf16");
    `dtypes` keeps only cases of those dtypes (cases without a dtype stay). Usage errors raise
    FadeUsageError before any case runs: an unwritable `out`, a pattern that matches no case, a dtype or a
    device that is unknown or unsupported here. `isolate` runs cases in a worker process with `timeout_s` per
    case. `progress` hears of each case (fade.measure.runner.RunProgress). Returns the RunSummary.
    """
    check_output_path(out)
    patterns = split_patterns(only)
    check_patterns_exist(patterns)
    check_dtype_names(dtypes or ())
    unsupported: dict = {}

    def plan(session: dict) -> list:
        catalog = build_catalog(session["device"], quick=quick)
        cases, left_out = select_cases(
            catalog,
            device=session["device"],
            dtype_support=session["dtypes"],
            patterns=patterns,
            dtypes=dtypes,
            quick=quick,
        )
        unsupported.update(left_out)
        return cases

    executor = make_executor(device, isolate=isolate, timeout_s=timeout_s,
                             default_timeout_s=QUICK_CASE_TIMEOUT_S if quick else CASE_TIMEOUT_S)
    summary = run_cases(plan, executor=executor, out=out, run_id=run_id, quick=quick,
                        timing=QUICK_TIMING if quick else FULL_TIMING, resume=resume, progress=progress)
    summary.unsupported = unsupported
    return summary
