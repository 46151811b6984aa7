"""Scaled-dot-product attention forward per backend (TFLOP/s), recording which backend actually ran.

A forced backend runs alone inside `sdpa_kernel([backend])`; when it cannot take the inputs, torch raises
and the case is "skipped" with torch's reasons. "default" lets dispatch choose and records its choice
(torch._fused_sdp_choice, a private API: "unknown" if it is missing).
FLOPs = 4*B*H*S^2*D for the two matmuls, halved when causal (FlashAttention's convention).
"""

from __future__ import annotations

import warnings

from fade.measure.case import CaseResult, CaseSkipped, random_tensor, tflops_result
from fade.measure.timing import measure

BACKEND_NAMES = {  # FADE's name -> torch.nn.attention.SDPBackend member
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}


def sdpa(ctx, *, batch: int, heads: int, seq: int, head_dim: int, dtype: str, backend: str, causal: bool) -> CaseResult:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = (batch, heads, seq, head_dim)
    q = random_tensor(shape, dtype, ctx.device)
    k = random_tensor(shape, dtype, ctx.device, seed=1)
    v = random_tensor(shape, dtype, ctx.device, seed=2)
    call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    if backend == "default":
        ran = _dispatch_choice(q, k, v, causal, ctx.device)
        timing = measure(call, device=ctx.device, **ctx.timing)
    else:
        member = getattr(SDPBackend, BACKEND_NAMES[backend])
        with sdpa_kernel([member]):
            with warnings.catch_warnings(record=True) as reasons:
                warnings.simplefilter("always")
                try:
                    call()
                except RuntimeError as error:
                    details = [str(reason.message).splitlines()[0] for reason in reasons]
                    first = details[0] if details else str(error).splitlines()[0]
                    more = "".join(f"\n{detail}" for detail in details[1:])
                    raise CaseSkipped(f"{backend} cannot run these inputs: {first}{more}") from None
            timing = measure(call, device=ctx.device, **ctx.timing)
        ran = member.name
    flops = 4 * batch * heads * seq * seq * head_dim // (2 if causal else 1)
    return tflops_result(timing, flops, "4*B*H*S^2*D (/2 if causal) / median_s / 1e12", dtype,
                         {"backend_requested": backend, "backend_ran": ran})  # fmt: skip


def _dispatch_choice(q, k, v, causal: bool, device: str) -> str:
    import torch
    from torch.nn.attention import SDPBackend

    if device.split(":", 1)[0] == "ocl":
        # torch composes attention from matmul and softmax on a PrivateUse1 device; asking _fused_sdp_choice
        # there would run it through fade.ocl's CPU fallback and answer for the CPU (FLASH_ATTENTION)
        return "MATH"

    try:
        return SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, causal)).name
    except Exception:
        return "unknown"
