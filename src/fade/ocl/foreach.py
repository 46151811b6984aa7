"""torch._foreach_* ops (torch.optim's multi-tensor steps): per tensor through the single-tensor kernels, or
for SGD's in-place add_/mul_ as multi-tensor kernels, FOREACH_WIDTH tensors a launch (FADE_OCL_FOREACH_FUSED).
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl.memory import block_of, device_of, NAME
from fade.ocl.meta import has_out_arguments
from fade.ocl.pointwise import flat_kernels
from fade.ocl.settings import setting
from fade.ocl.sources import cl_type, FLOAT_LITERAL, NoKernel

aten = torch.ops.aten


def foreach(op, args, kwargs):
    """torch._foreach_X(lists, ...): X on each index in turn, each through its own ocl kernel. torch.optim
    picks foreach for the ocl device by default (it counts PrivateUse1 among the foreach devices)."""
    name = op._schema.name.split("::")[1][len("_foreach_"):]
    per_item = getattr(aten, name, None)
    lists = [a for a in args if isinstance(a, (list, tuple))]
    if per_item is None or not lists or kwargs.get("out") is not None or has_out_arguments(op):
        raise NoKernel(f"_foreach_{name}")
    if _foreach_fused(op, name, args, kwargs):
        return None
    length = len(lists[0])
    results = []
    for i in range(length):
        item_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        item_kwargs = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
        results.append(per_item(*item_args, **item_kwargs))
    if name.endswith("_"):
        return None
    return results


FOREACH_FUSED_EXPRESSIONS = {  # in-place foreach overload -> expression over a (self) and b (other), alpha the scalar
    "add_.List": "a + alpha * b", "add_.Scalar": "a + alpha", "mul_.List": "a * b", "mul_.Scalar": "a * alpha",
}

FOREACH_WIDTH = 16  # tensors per multi-tensor launch

FOREACH_ALONE = 1 << 20  # elements from which a tensor gets a launch of its own

# on | off | auto: GPUs only. Measured: resnet50's SGD step on the H100 61 -> 4-10 ms (train step 392-415 ->
# 262-328 ms); on PoCL (a CPU device) the branching kernel was slower than one simple kernel per tensor
FOREACH_FUSED = setting("FADE_OCL_FOREACH_FUSED")


def _foreach_fused(op, name: str, args, kwargs) -> bool:
    """An in-place foreach op of torch.optim's SGD (add_, mul_) over contiguous float tensors of one dtype as
    multi-tensor kernels: FOREACH_WIDTH tensors per launch over one flat index, instead of one full dispatch per
    tensor (resnet50 has 161 parameters, and SGD with momentum makes 3 such ops a step). False: not handled."""
    expr = FOREACH_FUSED_EXPRESSIONS.get(f"{name}.{op._overloadname}")
    if expr is None or FOREACH_FUSED == "off":
        return False
    selves = args[0]
    others = args[1] if isinstance(args[1], (list, tuple)) else None
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1) if others is not None else args[1]
    if not selves or isinstance(alpha, torch.Tensor) or (others is not None and len(others) != len(selves)):
        return False
    dtype = selves[0].dtype
    pairs = list(zip(selves, others if others is not None else selves))
    if dtype not in (torch.float32, torch.float64) or not all(
            a.device.type == NAME and b.device.type == NAME and a.dtype == b.dtype == dtype and a.is_contiguous()
            and b.is_contiguous() and a.shape == b.shape and a.device == selves[0].device for a, b in pairs):
        return False
    dev = device_of(selves[0])
    if FOREACH_FUSED != "on" and dev.info.kind != "gpu":
        return False
    ct = cl_type(dtype)
    scalar = np.float64 if dtype == torch.float64 else np.float32
    pairs = [pair for pair in pairs if pair[0].numel()]
    # a large tensor runs alone (a one-case kernel): in a shared launch every one of its elements would walk
    # the chain of cases (vgg16's 103M-element classifier weight: 5.1 ms a launch on the H100, ~10x its bytes)
    alone = [[pair] for pair in pairs if pair[0].numel() >= FOREACH_ALONE]
    small = [pair for pair in pairs if pair[0].numel() < FOREACH_ALONE]
    for group in alone + [small[start:start + FOREACH_WIDTH] for start in range(0, len(small), FOREACH_WIDTH)]:
        width = len(group)
        key = ("foreach", expr, ct, width, others is not None)
        kernel = flat_kernels.get(key)
        if kernel is None:
            params = "".join(f", __global {ct}* a{t}, long ao{t}, __global const {ct}* b{t}, long bo{t}, long e{t}"
                             for t in range(width))
            body = FLOAT_LITERAL.sub(r"\1", expr) if ct == "double" else expr
            # one flat index over the group's tensors (e{t}: where tensor t ends), so no work item idles
            cases = " else ".join(
                f"if (i < e{t}) {{ long j = i{f' - e{t - 1}' if t else ''}; {ct} a = a{t}[ao{t} + j], "
                f"b = b{t}[bo{t} + j]; a{t}[ao{t} + j] = ({ct})({body}); }}" for t in range(width))
            source = f"""
__kernel void foreach_inplace({ct} alpha{params}) {{
    long i = get_global_id(0);
    {cases}
}}"""
            kernel = flat_kernels[key] = dev.kernel("foreach_inplace", source)
        arguments, end = [scalar(1 if alpha is None else alpha)], 0
        for a, b in group:
            end += a.numel()
            arguments += [block_of(a).buffer, np.int64(a.storage_offset()), block_of(b).buffer,
                          np.int64(b.storage_offset()), np.int64(end)]
        dev.launch(kernel, (end,), None, *arguments, label=f"foreach {expr}")
    return True
