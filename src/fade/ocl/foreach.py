"""torch._foreach_* ops (torch.optim's multi-tensor steps): per tensor through the single-tensor kernels, or,
for the ops of SGD's, Adam's and AdamW's steps, as multi-tensor kernels, FOREACH_WIDTH tensors a launch
(FADE_OCL_FOREACH_FUSED).
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl.memory import contiguous_strides, device_of, empty, NAME, storage_table
from fade.ocl.meta import bind_arguments, has_out_arguments
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
    fused = _foreach_fused(op, name, args, kwargs)
    if fused is not False:
        return None if fused is True else fused
    length = len(lists[0])
    results = []
    for i in range(length):
        item_args = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
        item_kwargs = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
        if name.rstrip("_") in ("addcmul", "addcdiv") and len(item_args) == 4:  # their value is keyword-only
            item_kwargs["value"] = item_args.pop()
        results.append(per_item(*item_args, **item_kwargs))
    if name.endswith("_"):
        return None
    return results


# foreach overload -> its expression over a (self), b and c (the other tensor lists, in order) and s (the scalar,
# the alpha or value, or this tensor's entry of a scalar list), in the CPU kernels' forms (lerp's two branches)
FOREACH_FUSED_EXPRESSIONS = {
    "add_.List": "a + s * b", "add_.Scalar": "a + s", "add_.ScalarList": "a + s",
    "mul_.List": "a * b", "mul_.Scalar": "a * s", "mul_.ScalarList": "a * s",
    "div_.List": "a / b", "div_.Scalar": "a / s", "div_.ScalarList": "a / s",
    "lerp_.Scalar": "(fabs(s) < 0.5 ? a + s * (b - a) : b - (b - a) * (1 - s))",
    "addcmul_.Scalar": "a + s * b * c", "addcmul_.ScalarList": "a + s * b * c",
    "addcdiv_.Scalar": "a + s * (b / c)", "addcdiv_.ScalarList": "a + s * (b / c)",
    "sqrt_.default": "sqrt(a)",
}
FOREACH_FUSED_EXPRESSIONS.update({key.replace("_.", "."): expr for key, expr in list(FOREACH_FUSED_EXPRESSIONS.items())})
# (each also out of place: Adam's weight decay makes new gradients by _foreach_add, its step _foreach_sqrt)

FOREACH_WIDTH = 16  # tensors per multi-tensor launch

FOREACH_ALONE = 1 << 20  # elements from which a tensor gets a launch of its own

# on | off | auto: GPUs only. Measured: resnet50's SGD step on the H100 61 -> 4-10 ms (train step 392-415 ->
# 262-328 ms); on PoCL (a CPU device) the branching kernel was slower than one simple kernel per tensor
FOREACH_FUSED = setting("FADE_OCL_FOREACH_FUSED")


_SCALAR_ARGUMENTS = ("alpha", "value", "scalar", "scalars", "weight")  # the fused ops' scalar (or scalar list)


def _bind(op, args, kwargs) -> tuple:
    """(tensor lists after self, scalar or scalar list or None) of a fused foreach call: every argument after
    self of those ops is a tensor list or one of _SCALAR_ARGUMENTS."""
    bound = bind_arguments(op, args, kwargs)
    lists = [value for name, value in list(bound.items())[1:] if name not in _SCALAR_ARGUMENTS]
    return lists, next((bound[name] for name in _SCALAR_ARGUMENTS if name in bound), None)


def _foreach_fused(op, name: str, args, kwargs) -> bool | list:
    """A foreach op of torch.optim's steps (SGD's add_ and mul_; Adam's and AdamW's lerp_, addcmul_, sqrt, div_
    by a list of scalars, addcdiv_) over contiguous float tensors of one dtype, shape and device as
    multi-tensor kernels: FOREACH_WIDTH tensors per launch over one flat index, instead of one full dispatch
    per tensor (gpt2 has 148 parameters, and AdamW makes 8 such ops a step). False: not handled; the results
    of an out-of-place op (a list), else True."""
    expr = FOREACH_FUSED_EXPRESSIONS.get(f"{name}.{op._overloadname}")
    if expr is None or FOREACH_FUSED == "off":
        return False
    selves = args[0]
    lists, scalar = _bind(op, args, kwargs)
    if not selves or any(not isinstance(other, (list, tuple)) or len(other) != len(selves) for other in lists):
        return False
    scalars = list(scalar) if isinstance(scalar, (list, tuple)) else [scalar] * len(selves)
    if len(scalars) != len(selves) or any(isinstance(v, (torch.Tensor, complex)) for v in scalars):
        return False
    first = selves[0]
    dtype = first.dtype
    if dtype not in (torch.float32, torch.float64) or first.device.type != NAME:
        return False
    dev = device_of(first)
    if FOREACH_FUSED != "on" and dev.info.kind != "gpu":
        return False
    index = first.get_device()  # get_device: -1 for a CPU tensor, the index otherwise
    rows = list(zip(selves, *lists)) if lists else [(t,) for t in selves]
    in_place = name.endswith("_")
    # per tensor: its element count and its arguments (output, inputs, scalar), checked and gathered in one pass
    # (a step of SGD walks three lists of every parameter: the per-tensor Python is the op's host cost); a large
    # tensor runs alone (a one-case kernel): in a shared launch every one of its elements would walk the chain of
    # cases (vgg16's 103M-element classifier weight: 5.1 ms a launch on the H100, ~10x its bytes)
    backing = storage_table.backing
    cells = []
    for row, value in zip(rows, scalars):
        shape = row[0].shape
        cell = [None, None]  # the target's pair, filled below
        for t in row:
            if t.dtype is not dtype or t.shape != shape or not t.is_contiguous() or t.get_device() != index:
                return False
            cell.append(backing(t).buffer)
            cell.append(t.storage_offset())
        cell.append(1.0 if value is None else float(value))
        cells.append((shape.numel(), cell))
    outputs = selves if in_place else [empty(list(t.shape), contiguous_strides(t.shape), dtype, t.device.index)
                                       for t in selves]
    ct = cl_type(dtype)
    names = "abc"[:1 + len(lists)]
    alone, small = [], []
    for out, (count, cell) in zip(outputs, cells):
        if not count:
            continue
        if in_place:  # self's pair reused
            cell[0], cell[1] = cell[2], cell[3]
        else:
            cell[0], cell[1] = backing(out).buffer, out.storage_offset()
        (alone if count >= FOREACH_ALONE else small).append((count, cell))
    for group in [[entry] for entry in alone] + [small[start:start + FOREACH_WIDTH]
                                                 for start in range(0, len(small), FOREACH_WIDTH)]:
        width = len(group)
        key = ("foreach", expr, ct, width, len(lists), in_place)
        kernel = flat_kernels.get(key)
        if kernel is None:
            params = ", ".join(
                f"__global {ct}* d{t}, long do{t}" + "".join(
                    f", __global const {ct}* {x}{t}, long {x}o{t}" for x in names) + f", {ct} s{t}, long e{t}"
                for t in range(width))
            body = FLOAT_LITERAL.sub(r"\1", expr) if ct == "double" else expr
            # one flat index over the group's tensors (e{t}: where tensor t ends), so no work item idles
            cases = " else ".join(
                f"if (i < e{t}) {{ long j = i{f' - e{t - 1}' if t else ''}; {ct} s = s{t}"
                + "".join(f", {x} = {x}{t}[{x}o{t} + j]" for x in names)
                + f"; d{t}[do{t} + j] = ({ct})({body}); }}" for t in range(width))
            source = f"""
__kernel void foreach_fused({params}) {{
    long i = get_global_id(0);
    {cases}
}}"""
            kernel = flat_kernels[key] = dev.kernel("foreach_fused", source)
            # the scalar arguments' types declared here, so that a call passes Python numbers (no numpy scalar
            # made per argument: ~0.2 us each, ~100 a launch)
            scalar_type = np.float64 if dtype == torch.float64 else np.float32
            kernel.set_scalar_arg_dtypes(([None, np.int64] * (1 + len(names)) + [scalar_type, np.int64]) * width)
            dev.typed_kernels.add(id(kernel))
        arguments, end = [], 0
        for count, cell in group:
            end += count
            arguments += cell
            arguments.append(end)
        dev.launch(kernel, (end,), None, *arguments, label=f"foreach {expr}")
    return True if in_place else outputs
