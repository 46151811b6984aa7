"""The attention probe: for one attention shape (a model's real head_dim, dtype, mask and GQA layout), run
torch.nn.functional.scaled_dot_product_attention under each backend and record what actually ran.

Per backend ("default" = torch's own choice, then flash, efficient, cudnn and math forced one at a time with
torch.nn.attention.sdpa_kernel([backend])):

Inputs
    q (batch, q_heads, q_len, head_dim), k and v (batch, kv_heads, kv_len, head_dim), contiguous, drawn from a
    fixed seed in the case's dtype. Mask "causal": is_causal=True (with q_len != kv_len torch aligns it
    top-left, and flash refuses it); "none": no mask; "explicit": a boolean (q_len, kv_len) mask, causal
    aligned bottom-right (query i sees keys up to kv_len - q_len + i), the kind of tensor transformers passes
    when it builds the mask itself.
GQA
    kv_heads < q_heads, shape.gqa "auto": enable_gqa=True where this torch has it ("enable_gqa"); when a backend
    refuses it, the call is repeated with k and v repeated to q_heads (transformers' repeat_kv: "repeat_kv", with
    the refusal recorded). Without enable_gqa in torch, repeat_kv from the start. shape.gqa "repeat_kv": repeat_kv
    only, as transformers calls SDPA whenever it passes a mask (integrations/sdpa_attention.py,
    use_gqa_in_sdpa: enable_gqa only without one), e.g. every decode step over a static cache.
Could it run
    One call with Python warnings recorded: a refused forced backend raises RuntimeError ("No available
    kernel" / "No viable backend"); torch's TORCH_WARN lines before it give the reasons (sdp_utils.cpp). Both
    are kept: `error` and `reasons`. Nothing is raised out of the probe.
What ran
    One more call under torch.profiler (CPU + CUDA activities on a GPU): the aten op names (which backend
    dispatch picked: fade.analyze.attention.backend_of_ops) and the device kernel names, classified by
    data/kernels.toml (fade.analyze.attention.classify_kernels).
Time
    fade.measure.timing.measure on the same call (device events on CUDA/ROCm, warm-up first): median, IQR.
    CUDA/ROCm also record torch.cuda.max_memory_allocated over one call, from a reset (the math backend
    holds batch x heads x q_len x kv_len scores).

The finding over the rows (math fallback with its cause, or a slower default) is
fade.analyze.attention.attention_finding.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

from fade.analyze import attention as analysis
from fade.measure.step.runner import inference_context
from fade.measure.timing import measure

REQUESTS = ("default", "flash", "efficient", "cudnn", "math")
MASKS = ("causal", "none", "explicit")
GQA_MODES = ("auto", "repeat_kv")
SEED = 20261128
# one SDPA call is microseconds to milliseconds: short runs are enough for a median and quartiles
PROBE_TIMING = {"warmup_s": 0.1, "min_warmup_calls": 2, "min_run_s": 0.2, "budget_s": 1.0, "min_samples": 5,
                "max_samples": 30, "target_cov": 0.03}  # fmt: skip
QUICK_PROBE_TIMING = {"warmup_s": 0.0, "min_warmup_calls": 1, "min_run_s": 0.02, "budget_s": 0.2, "min_samples": 3,
                      "max_samples": 10, "target_cov": 0.1, "max_settle_s": 0.0}  # fmt: skip
MAX_REASONS = 20  # torch's lines kept per backend
TORCH_BACKEND = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "math": "MATH"}  # fmt: skip


@dataclass(frozen=True)
class AttentionShape:
    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int
    q_len: int
    kv_len: int
    mask: str  # one of MASKS
    dtype: str  # "bf16", "fp16", "fp32"
    gqa: str = "auto"  # one of GQA_MODES (module docstring, GQA)

    def label(self) -> str:
        gqa = f"{self.q_heads}q/{self.kv_heads}kv" + (" repeat_kv" if self.gqa == "repeat_kv" else "")
        return f"d{self.head_dim} {self.dtype} b{self.batch} {gqa} q{self.q_len}/kv{self.kv_len} {self.mask}"

    def check(self) -> None:
        for name in ("batch", "q_heads", "kv_heads", "head_dim", "q_len", "kv_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"attention shape: {name} must be a positive integer, not {value!r}")
        if self.q_heads % self.kv_heads:
            raise ValueError(f"attention shape: q_heads {self.q_heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.mask not in MASKS:
            raise ValueError(f"attention shape: mask {self.mask!r} is not one of {', '.join(MASKS)}")
        if self.dtype not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"attention shape: dtype {self.dtype!r} is not bf16, fp16 or fp32")
        if self.gqa not in GQA_MODES:
            raise ValueError(f"attention shape: gqa {self.gqa!r} is not one of {', '.join(GQA_MODES)}")


def attention_flops(shape: AttentionShape) -> int:
    """2 matmuls (QK^T, PV) of 2 FLOPs per multiply-add, all q x kv pairs (torch.utils.flop_counter's
    sdpa_flop_count; causal not halved, as there)."""
    return 4 * shape.batch * shape.q_heads * shape.q_len * shape.kv_len * shape.head_dim


def _dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _inputs(torch, shape: AttentionShape, device: str):
    generator = torch.Generator().manual_seed(SEED)
    dtype = _dtype(torch, shape.dtype)

    def draw(heads, length):
        return torch.randn(shape.batch, heads, length, shape.head_dim, generator=generator).to(device=device, dtype=dtype)

    q, k, v = draw(shape.q_heads, shape.q_len), draw(shape.kv_heads, shape.kv_len), draw(shape.kv_heads, shape.kv_len)
    mask = None
    if shape.mask == "explicit":
        offset = shape.kv_len - shape.q_len
        mask = torch.ones(shape.q_len, shape.kv_len, dtype=torch.bool).tril(diagonal=offset).to(device)
    return q, k, v, mask


def _has_enable_gqa(torch) -> bool:
    return "enable_gqa" in (torch.nn.functional.scaled_dot_product_attention.__doc__ or "")


def _call(torch, q, k, v, mask, shape: AttentionShape, gqa: str) -> Callable:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    options = {"attn_mask": mask, "is_causal": shape.mask == "causal"}
    if gqa == "repeat_kv" and shape.kv_heads != shape.q_heads:
        groups = shape.q_heads // shape.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    elif gqa == "enable_gqa":
        options["enable_gqa"] = True

    grad_mode = inference_context(str(q.device))

    def call():
        with grad_mode:
            return sdpa(q, k, v, **options)

    return call


def _context(torch, request: str):
    import contextlib

    if request == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, TORCH_BACKEND[request])])


def _try(torch, call: Callable, request: str, device: str):
    """(ok, error text, warning lines) of one synchronized call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _context(torch, request):
                call()
                _sync(torch, device)
            error = None
        except RuntimeError as exc:
            error = str(exc).strip()
    lines = []
    for item in caught:
        for line in str(item.message).splitlines():
            line = line.strip()
            if line and line not in lines:
                lines.append(line)
    if error:
        for line in error.splitlines():
            line = line.strip()
            if line and line not in lines:
                lines.append(line)
    return error is None, error, lines[:MAX_REASONS]


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _profile(torch, call: Callable, request: str, device: str):
    """(aten op names, device kernel names) of one call, in the order first seen."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    gpu = device.startswith("cuda")
    if gpu:
        activities.append(ProfilerActivity.CUDA)
    with _context(torch, request):
        with profile(activities=activities) as prof:
            call()
            _sync(torch, device)
    ops, kernels = [], []
    for event in prof.events():
        name = event.name
        device_type = str(getattr(event, "device_type", "")).rsplit(".", 1)[-1]
        if device_type in ("CUDA", "HIP", "PrivateUse1") or (gpu and device_type not in ("CPU", "")):
            if name not in kernels:
                kernels.append(name)
        elif name.startswith("aten::") and name not in ops:
            ops.append(name)
    return ops, kernels


def _peak_memory(torch, call: Callable, request: str, device: str) -> Optional[int]:
    if not device.startswith("cuda"):
        return None
    _sync(torch, device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    with _context(torch, request):
        call()
    _sync(torch, device)
    return int(torch.cuda.max_memory_allocated(device) - base)


def probe_backend(torch, shape: AttentionShape, request: str, device: str, inputs, timing: dict) -> dict:
    """One row: can `request` run this shape, what ran, how long it took. Never raises for a torch failure."""
    q, k, v, mask = inputs
    gqa_paths = ["none"] if shape.kv_heads == shape.q_heads else (
        ["enable_gqa", "repeat_kv"] if _has_enable_gqa(torch) and shape.gqa == "auto" else ["repeat_kv"])
    row = {"requested": request, "ran": False, "backend": None, "gqa_path": None, "error": None, "reasons": [],
           "gqa_refused": None}  # fmt: skip
    for path in gqa_paths:
        call = _call(torch, q, k, v, mask, shape, path)
        ok, error, lines = _try(torch, call, request, device)
        if ok:
            row.update(ran=True, gqa_path=path, reasons=lines, error=None)
            break
        row.update(error=error, reasons=lines, gqa_path=path)
        if path == "enable_gqa":
            row["gqa_refused"] = {"error": error, "reasons": lines}
    if not row["ran"] and request in analysis.FUSED:
        row["reasons"] = analysis.reasons_for(row["reasons"], request)
    row["causes"] = analysis.causes_of(row["reasons"]) if not row["ran"] else []
    if not row["ran"]:
        return row
    try:
        ops, kernels = _profile(torch, call, request, device)
        row.update(analysis.classify_run(ops, kernels))
        row["ops"] = ops
    except Exception as exc:  # a profiler failure leaves the timing useful
        row["profile_error"] = f"{type(exc).__name__}: {exc}"
    try:
        with _context(torch, request):
            result = measure(call, device=device, **timing)
        row["timing"] = result.stats()
        row["timing_method"] = result.method
        row["median_ms"] = result.median_s * 1e3
        row["tflops"] = attention_flops(shape) / result.median_s / 1e12 if result.median_s > 0 else None
        row["peak_memory_bytes"] = _peak_memory(torch, call, request, device)
    except Exception as exc:
        row["timing_error"] = f"{type(exc).__name__}: {exc}"
    return row


# fade.ocl registers no fused attention kernel, and torch gives no reason on its device (a PrivateUse1 backend):
# the probe says it, and fade/data/attention.toml's no_fused_kernel_on_backend row names the cause
OCL_MATH_LINE = ("fade.ocl has no fused attention kernel: scaled_dot_product_attention takes its math path on this "
                 "device (torch._fused_sdp_choice answers with the CPU's choice through fade.ocl's CPU fallback)")


def probe_attention(shape: AttentionShape, *, device: str = "cpu", requests: Sequence[str] = REQUESTS,
                    timing: Optional[dict] = None, on_row: Optional[Callable[[dict], None]] = None) -> dict:
    """All rows for one shape plus the finding: {shape, device, torch, backends: [row, ...], finding}.

    `on_row` hears of each row as it finishes. A torch failure is recorded in its row, never raised; a bad
    shape raises ValueError before anything runs."""
    import torch

    shape.check()
    for request in requests:
        if request not in REQUESTS:
            raise ValueError(f"attention probe: unknown backend {request!r} (known: {', '.join(REQUESTS)})")
    started = time.time()
    inputs = _inputs(torch, shape, device)
    rows = []
    for request in requests:
        try:
            row = probe_backend(torch, shape, request, device, inputs, timing or PROBE_TIMING)
        except Exception as exc:  # anything else (out of memory, a driver error): recorded, the next backend runs
            row = {"requested": request, "ran": False, "backend": None, "error": f"{type(exc).__name__}: {exc}",
                   "reasons": [], "causes": []}  # fmt: skip
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        rows.append(row)
        if on_row is not None:
            on_row(row)
    if device.startswith("ocl"):  # torch prints nothing there: say why math runs (fade/data/attention.toml)
        for row in rows:
            if row.get("ran") and row.get("backend") == "math" and row["requested"] != "math":
                row["reasons"] = list(row.get("reasons") or []) + [OCL_MATH_LINE]
    return {"shape": asdict(shape), "label": shape.label(), "device": device, "torch": environment(torch, device),
            "flops": attention_flops(shape), "backends": rows, "finding": analysis.attention_finding(rows),
            "elapsed_s": time.time() - started}  # fmt: skip


def environment(torch, device: str) -> dict:
    """The torch facts that decide SDPA's choice: version, build, the global switches (which report the
    switch, not whether a kernel exists), and on ROCm the AOTriton variable and the preferred FA library."""
    import os

    backends = torch.backends.cuda
    info = {"version": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
            "switches": {}}  # fmt: skip
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "cudnn_sdp_enabled", "math_sdp_enabled"):
        probe = getattr(backends, name, None)
        info["switches"][name] = probe() if callable(probe) else None
    available = getattr(backends, "is_flash_attention_available", None)
    info["flash_attention_available"] = available() if callable(available) else None
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        info["device_name"] = props.name
        info["arch"] = (getattr(props, "gcnArchName", "") or "").split(":")[0] if info["hip"] else f"sm_{props.major}{props.minor}"
    if info["hip"]:
        info["env"] = {name: os.environ.get(name) for name in (analysis.EXPERIMENTAL_ENV, "TORCH_ROCM_FA_PREFER_CK")}
    return info
