"""FADE's sized probes: the ops the seeds name as weak on ROCm (SDPA per backend, grid_sample, sparse
matmul), at sizes a model runs, so that "slow" can be judged; OpInfo's own samples are a few hundred
elements, where every GPU call is launch-bound.

Each probe looks enough like an OpInfo for probe.py (name, sample_inputs, supported_dtypes, a call) and
adds `cpu_reference` (the CPU computation it is compared with, in float32) and `tolerances`. Inputs are
drawn on the CPU from a fixed seed and then moved, so every device sees the same values. A probe makes no
dtype claim (supported_dtypes is None): it has no OpInfo to hold one.

grid_sample and sparse mm get inputs whose results are exact in every dtype swept (small integers,
sample points on a 1/64 lattice): any accumulation order and any internal precision then gives the
float32 answer, so a difference is a wrong result, never rounding. SDPA's softmax has no such inputs; it
is compared within SIZED_TOLERANCES.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

SEED = 0
FLOATING = ("float32", "float16", "bfloat16")
# (atol, rtol) against a float32 CPU reference: the low-precision result is rounded once to 2^-11 (fp16)
# or 2^-8 (bf16) of its magnitude, plus accumulation order; fp32 differs by accumulation order only.
SIZED_TOLERANCES = {"float32": (1e-3, 1e-3), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 2e-2)}
# B, heads, sequence, head dim: one layer of a small GPT at 1k context (causal), about 4 GFLOP.
SDPA_SHAPE = (2, 8, 1024, 64)
GRID_SAMPLE_SHAPE = (4, 32, 128, 128)  # N, C, H, W: a feature map warped by a dense flow field (8 MiB fp32)
SPARSE_SHAPE = (4096, 4096, 128, 0.01)  # rows, cols, dense columns, density: a graph-sized SpMM


@dataclass(frozen=True)
class SizedProbe:
    name: str  # op id, "fade." prefix
    make_inputs: Callable  # (dtype name) -> tuple of CPU tensors, drawn from SEED
    run: Callable  # (*inputs) -> output; the call on the device under test
    cpu_reference: Callable  # (*inputs on the CPU) -> output in the inputs' dtype, computed in float32
    dtypes: tuple = FLOATING  # the dtypes this probe is run for
    tolerances: dict = field(default_factory=lambda: dict(SIZED_TOLERANCES))
    variant_test_name: str = ""

    def supported_dtypes(self, device_type: str):
        return None  # no claim to check

    def sample_inputs(self, device: str, dtype, requires_grad: bool = False):
        from torch.testing._internal.opinfo.core import SampleInput

        inputs = [tensor.to(device) for tensor in self.make_inputs(str(dtype).removeprefix("torch."))]
        yield SampleInput(inputs[0], args=tuple(inputs[1:]))

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs)


def _generator():
    import torch

    return torch.Generator().manual_seed(SEED)


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def _sdpa_inputs(dtype_name: str) -> tuple:
    import torch

    generator = _generator()
    return tuple(torch.randn(SDPA_SHAPE, generator=generator).to(_dtype(dtype_name)) for _ in range(3))


def _sdpa_with(backend_name: str) -> Callable:
    def run(query, key, value):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([getattr(SDPBackend, backend_name)]):
            return F.scaled_dot_product_attention(query, key, value, is_causal=True)

    run.__name__ = f"sdpa_{backend_name.lower()}"
    return run


def _sdpa_reference(query, key, value):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), is_causal=True)
    return out.to(query.dtype)


def _grid_sample_inputs(dtype_name: str) -> tuple:
    import torch

    generator = _generator()
    n, c, h, w = GRID_SAMPLE_SHAPE
    image = torch.randint(-4, 5, (n, c, h, w), generator=generator).float()
    # Points k/64 in [-1, 1] land between pixels (x = k + 63.5 at 128 px, align_corners=False), and every
    # step of the coordinate arithmetic is exact even in bf16 (CPU bf16 computes coordinates in bf16;
    # a finer lattice there moves points by a quarter pixel). Each output is then 1/4 of a sum of four
    # integers, exact in every dtype.
    grid = torch.randint(-64, 65, (n, h, w, 2), generator=generator) / 64
    return image.to(_dtype(dtype_name)), grid.to(_dtype(dtype_name))


def _grid_sample(image, grid):
    import torch.nn.functional as F

    return F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _grid_sample_reference(image, grid):
    return _grid_sample(image.float(), grid.float()).to(image.dtype)


def _sparse_inputs(dtype_name: str, layout: str) -> tuple:
    import torch

    generator = _generator()
    rows, cols, dense_cols, density = SPARSE_SHAPE
    nnz = int(rows * cols * density)
    indices = torch.stack([torch.randint(rows, (nnz,), generator=generator), torch.randint(cols, (nnz,), generator=generator)])
    # Small integers: each output sums ~41 products of magnitude <= 4 (8 where coalesce merged a duplicate):
    # an integer, in practice far below 256, so exact in bf16.
    values = torch.randint(-2, 3, (nnz,), generator=generator).float().to(_dtype(dtype_name))
    matrix = torch.sparse_coo_tensor(indices, values, (rows, cols)).coalesce()
    if layout == "csr":
        matrix = matrix.to_sparse_csr()
    dense = torch.randint(-2, 3, (cols, dense_cols), generator=generator).float().to(_dtype(dtype_name))
    return matrix, dense


def _sparse_mm(matrix, dense):
    import torch

    return torch.sparse.mm(matrix, dense)


def _sparse_mm_reference(matrix, dense):
    import torch

    coo = matrix.to_sparse_coo() if matrix.layout != torch.sparse_coo else matrix
    return torch.sparse.mm(coo.to(torch.float32), dense.float()).to(dense.dtype)


SIZED_PROBES = (
    SizedProbe("fade.sdpa_flash", _sdpa_inputs, _sdpa_with("FLASH_ATTENTION"), _sdpa_reference),
    SizedProbe("fade.sdpa_efficient", _sdpa_inputs, _sdpa_with("EFFICIENT_ATTENTION"), _sdpa_reference),
    SizedProbe("fade.sdpa_cudnn", _sdpa_inputs, _sdpa_with("CUDNN_ATTENTION"), _sdpa_reference),
    SizedProbe("fade.sdpa_math", _sdpa_inputs, _sdpa_with("MATH"), _sdpa_reference),
    SizedProbe("fade.grid_sample_bilinear", _grid_sample_inputs, _grid_sample, _grid_sample_reference),
    SizedProbe("fade.sparse_coo_mm", lambda dtype: _sparse_inputs(dtype, "coo"), _sparse_mm, _sparse_mm_reference),
    SizedProbe("fade.sparse_csr_mm", lambda dtype: _sparse_inputs(dtype, "csr"), _sparse_mm, _sparse_mm_reference),
)
