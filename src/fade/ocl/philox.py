"""Random ops on the device: dropout, bernoulli, uniform_ and normal_ draw by Philox4x32-10 (kernels/philox.cl),
keyed by one draw of torch's CPU generator, so torch.manual_seed repeats a run (FADE_OCL_DROPOUT_RNG=cpu: the
CPU's own draws instead).
"""

from __future__ import annotations

import numpy as np
import torch

from fade.ocl.memory import block_of, contiguous_strides, device_of, empty, NAME
from fade.ocl.meta import written_arguments
from fade.ocl.pointwise import contiguous, pointwise
from fade.ocl.settings import setting
from fade.ocl.sources import cl_type, load, NoKernel
from fade.ocl.transfers import upload

aten = torch.ops.aten


_PHILOX_SOURCE = load("philox.cl")

_DROPOUT_SOURCE = _PHILOX_SOURCE + load("dropout.cl")

# device: the mask drawn on the device by Philox, seeded from torch's CPU generator (seeded runs repeat, but the
# masks differ from the CPU's, as CUDA's do); cpu: the CPU kernel's own draw, uploaded (masks identical to the
# CPU's; the draw costs the host ~14 ns an element: 8 ms for alexnet's 64 x 9216 activations on this VM)
DROPOUT_RNG = setting("FADE_OCL_DROPOUT_RNG")


def _philox_key() -> tuple:
    """Philox's two key words from one draw of torch's CPU generator per call: torch.manual_seed repeats a run."""
    seed = int(torch.empty((), dtype=torch.int64).random_())
    return np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32)


def dropout(op, args, kwargs, bound):
    """native_dropout: the output computed on the device with a mask from DROPOUT_RNG's generator."""
    x, p, train = bound["input"], bound["p"], bound["train"]
    if x.dtype not in (torch.float32, torch.float64) or written_arguments(op, bound):
        raise NoKernel("dropout dtype")
    index = x.device.index
    out = empty(x.shape, contiguous_strides(x.shape), x.dtype, index)
    mask = empty(x.shape, contiguous_strides(x.shape), torch.bool, index)
    if not (train is None or train):
        pointwise("a", out, [x])
        pointwise("1", mask, [])
        return out, mask
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    if DROPOUT_RNG == "cpu":  # the CPU kernel's own draw (torch.empty_like(x).bernoulli_(1 - p)), then x * mask * s
        upload(torch.empty(x.shape, dtype=x.dtype).bernoulli_(1 - p).bool(), mask, owned=True)
        pointwise("a * b * scale", out, [x, mask], scalars={"scale": scale})
        return out, mask
    if x.numel():
        x = contiguous(x)
        key = _philox_key()
        dev = device_of(x)
        source = f"#define T {cl_type(x.dtype)}\n" + _DROPOUT_SOURCE
        np_t = np.float64 if x.dtype == torch.float64 else np.float32
        dev.launch(dev.kernel("dropout", source), (-(-x.numel() // 4),), None, block_of(x).buffer,
                   np.int64(x.storage_offset()), block_of(out).buffer, block_of(mask).buffer,
                   *key, np.float32(1 - p), np_t(scale),
                   np.int64(x.numel()))
    return out, mask


_BERNOULLI_SOURCE = _PHILOX_SOURCE + load("bernoulli.cl")


def bernoulli(op, args, kwargs, bound):
    """bernoulli_(p float or tensor) and bernoulli(probs) / bernoulli(self, p): 0/1 in the output's dtype, drawn
    on the device by dropout's Philox keyed by one draw of torch's CPU generator (torch.manual_seed repeats a
    run; the values differ from the CPU's, as CUDA's do). With a generator= argument or FADE_OCL_DROPOUT_RNG=cpu:
    the CPU fallback (the CPU's own draws)."""
    x = bound["self"]
    if DROPOUT_RNG == "cpu":  # the CPU generator's own draws, as dropout's masks (the zoo's step-by-step checks)
        raise NoKernel("FADE_OCL_DROPOUT_RNG=cpu")
    if bound.get("generator") is not None or x.dtype in (torch.float16, torch.bfloat16) or x.is_complex():
        raise NoKernel("bernoulli with a generator or a half dtype")
    cl_type(x.dtype)
    index = x.device.index
    if op is aten.bernoulli_.float or op is aten.bernoulli.p:
        p, probs = float(bound["p"]), None
    elif op is aten.bernoulli_.Tensor:
        p, probs = 0.0, bound["p"]
    elif op is aten.bernoulli.default:
        p, probs = 0.0, x
    else:
        raise NoKernel(op.name())
    if probs is not None and (not isinstance(probs, torch.Tensor) or probs.device.type != NAME or
                              not probs.dtype.is_floating_point or probs.dtype == torch.bfloat16):
        raise NoKernel("bernoulli's probabilities")
    if not 0 <= p <= 1:
        raise NoKernel("p outside [0, 1]: the CPU raises torch's error")
    in_place = op is aten.bernoulli_.float or op is aten.bernoulli_.Tensor
    target = x if in_place and x.is_contiguous() else empty(x.shape, contiguous_strides(x.shape), x.dtype, index)
    n = x.numel()
    if n:
        dev = device_of(x)
        wide = "double" if probs is not None and (probs.dtype == torch.float64 or x.dtype == torch.float64) and \
            dev.info.fp64 else "float"
        if probs is not None:
            dense = empty(x.shape, contiguous_strides(x.shape), torch.float64 if wide == "double" else torch.float32,
                          index)
            pointwise("a", dense, [probs])  # broadcast to self's shape
        key = _philox_key()
        source = f"#define T {cl_type(x.dtype)}\n#define P {wide}\n" + \
            ("#define PROBS\n" if probs is not None else "") + _BERNOULLI_SOURCE
        probs_block = block_of(dense).buffer if probs is not None else block_of(target).buffer
        dev.launch(dev.kernel("bernoulli", source), (-(-n // 4),), None, block_of(target).buffer,
                   np.int64(target.storage_offset()), *key,
                   np.float32(p), probs_block, np.int64(dense.storage_offset() if probs is not None else 0),
                   np.int64(n))
    if in_place and target is not x:
        pointwise("a", x, [target])
    return x if in_place else target


_RANDOM_FILL_SOURCE = _PHILOX_SOURCE + load("random_fill.cl")


def random_fill(op, args, kwargs, bound):
    """uniform_(from, to) and normal_(mean, std) in place, drawn on the device by dropout's Philox keyed by one
    draw of torch's CPU generator (torch.rand, torch.randn and nn.init's uniform and normal initializers reach
    these: a model built on the device initializes there). The values differ from the CPU's, as CUDA's do; their
    distribution is the same. With a generator= argument, FADE_OCL_DROPOUT_RNG=cpu, a dtype other than float32 or
    float64, or arguments torch refuses (std < 0, from > to: the CPU raises torch's error): the CPU fallback."""
    if op not in (aten.uniform_.default, aten.normal_.default):  # normal's out-of-place overloads: the fallback
        raise NoKernel(op.name())
    x = bound["self"]
    uniform = op is aten.uniform_.default
    if DROPOUT_RNG == "cpu" or bound.get("generator") is not None or x.dtype not in (torch.float32, torch.float64):
        raise NoKernel("uniform_ / normal_ with a generator, FADE_OCL_DROPOUT_RNG=cpu or a dtype beyond float")
    a, b = (float(bound["from"]), float(bound["to"])) if uniform else (float(bound["mean"]), float(bound["std"]))
    if (uniform and not a <= b) or (not uniform and not b >= 0) or not all(np.isfinite((a, b))):
        raise NoKernel("arguments torch refuses: its own error")
    n = x.numel()
    if not n:
        return x
    dev = device_of(x)
    double = x.dtype == torch.float64
    if double and not dev.info.fp64:
        raise NoKernel("float64 draws without the device's fp64")
    target = x if x.is_contiguous() else empty(x.shape, contiguous_strides(x.shape), x.dtype, x.device.index)
    per = 2 if double else 4
    source = (f"#define T {cl_type(x.dtype)}\n#define ACC {'double' if double else 'float'}\n"
              f"#define IS_DOUBLE {int(double)}\n#define UNIFORM {int(uniform)}\n") + _RANDOM_FILL_SOURCE
    scalar = np.float64 if double else np.float32
    dev.launch(dev.kernel("random_fill", source), (-(-n // per),), None, block_of(target).buffer,
               np.int64(target.storage_offset()), *_philox_key(), scalar(a), scalar(b), np.int64(n))
    if target is not x:
        pointwise("a", x, [target])
    return x
