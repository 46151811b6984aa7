"""The ocl device against the CPU, on whatever OpenCL device is present (PoCL in CI); run by test_ocl_device.py
in a child process, because PrivateUse1 can be named once per process and the guard's tests name it "standin"."""

import copy
import io
import itertools
import subprocess
import sys
import warnings

import pytest
import torch

import fade.ocl as ocl
from fade.ocl import runtime

ocl.register()
DEV = "ocl:0"


def close(actual, expected, **tolerance):
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tolerance)


def test_devices_list_the_issue_fields():
    info = ocl.devices()[0]
    assert info.name and info.vendor and info.opencl_version.startswith("OpenCL")
    assert info.compute_units > 0 and info.global_memory_bytes > 0 and isinstance(info.fp16, bool)
    assert torch.device(DEV).type == "ocl" and ocl.device_count() == len(ocl.devices())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.uint8])
def test_round_trip(dtype):
    host = (torch.randn(5, 7) * 10).to(dtype)
    device = host.to(DEV)
    assert device.device == torch.device(DEV) and device.dtype == dtype
    assert torch.equal(device.cpu(), host)
    assert torch.equal(device.t().contiguous().cpu(), host.t())


def test_a_conjugate_and_the_complex_ffts_that_make_one_give_the_cpus_values():
    """Tensor.conj() of a complex ocl tensor is materialized (transfers.conjugate_copy): as a lazy view torch's
    conjugate fallback looped until the process died (fft.ifft and fft.ihfft of a real input did, through it).
    A view with a math bit that reaches the CPU fallback keeps it (host_fallback)."""
    values = torch.randn(6, dtype=torch.complex64)
    assert torch.equal(values.to(DEV).conj().cpu(), values.conj().resolve_conj())
    assert torch.equal(values.to(DEV).conj().conj().cpu(), values)
    real = torch.randn(16)
    for fft in (torch.fft.ifft, torch.fft.ihfft, torch.fft.fft):
        assert torch.allclose(fft(real.to(DEV)).cpu(), fft(real), atol=1e-5), fft.__name__
    assert torch.equal(torch.randn(3).to(DEV).conj().cpu().shape and real[:3].to(DEV).conj().cpu(), real[:3])
    negated = values.to(DEV)._neg_view()
    assert torch.equal(torch.sgn(negated).cpu(), torch.sgn(-values))  # sgn on complex: the CPU fallback


def test_views_and_inplace_ops_alias():
    base = torch.zeros(4, 6).to(DEV)
    base.view(6, 4).fill_(1.0)
    base[1:3, 2:5].mul_(3.0)
    base.t()[0].add_(10.0)
    expected = torch.ones(4, 6)
    expected[1:3, 2:5] *= 3
    expected.t()[0] += 10
    assert torch.equal(base.cpu(), expected)
    detached = base.detach()
    detached.zero_()
    assert base.cpu().abs().sum().item() == 0


def test_broadcasting_and_type_promotion():
    a, b = torch.randn(3, 1, 4), torch.randn(5, 1)
    i = torch.arange(4)
    close(a.to(DEV) * b.to(DEV) - 2, a * b - 2)
    result = i.to(DEV) + a.to(DEV)
    assert result.dtype == torch.float32
    close(result, i + a)
    doubled = a.to(DEV) + a.double().to(DEV)
    assert doubled.dtype == torch.float64
    close(doubled, a + a.double())
    close(a.to(DEV) > b.to(DEV), a > b)
    close(torch.where(a.to(DEV) > 0, a.to(DEV), b.to(DEV)), torch.where(a > 0, a, b))
    close(i.to(DEV) // 1 + i.to(DEV) * 3, i // 1 + i * 3)


@pytest.mark.parametrize("name", ["relu", "sigmoid", "tanh", "exp", "neg", "abs", "sqrt", "gelu"])
def test_unary_ops_match_cpu(name):
    x = torch.randn(64) * 3
    x[0] = float("nan")
    if name != "gelu":  # the CPU's gelu(+-inf) is NaN (its vectorised erf), mathematically +inf / 0: not copied
        x[1], x[2] = float("inf"), float("-inf")
    function = getattr(torch.nn.functional, name, None) or getattr(torch, name)
    close(function(x.to(DEV)), function(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["silu", "hardswish", "hardsigmoid"])
def test_silu_hardswish_and_hardsigmoid_and_their_gradients_run_on_the_device_like_the_cpu(name):
    """Issue 27: SiLU ran on the CPU fallback 147 times a training step (EfficientNet); Hardswish and Hardsigmoid
    are MobileNetV3's. Forward and backward on the device, no fallback, against the CPU (the knees at -3 and 3)."""
    x = torch.randn(257, dtype=torch.float64) * 4
    x[:5] = torch.tensor([-3.0, 3.0, 0.0, float("nan"), -10.0], dtype=torch.float64)
    function = getattr(torch.nn.functional, name)
    ocl.reset_fallback_counts()
    on_device = x.to(DEV).requires_grad_()
    on_cpu = x.clone().requires_grad_()
    close(function(on_device), function(on_cpu), atol=1e-12, rtol=1e-12)
    weight = torch.randn(257, dtype=torch.float64)
    (function(on_device) * weight.to(DEV)).nansum().backward()
    (function(on_cpu) * weight).nansum().backward()
    # the CPU's hardsigmoid_backward multiplies by 1/6 as a float even in float64 (0.1666666716...): 1e-7 relative;
    # its gradient at a NaN input differs between its own scalar and vectorised paths (0 or NaN): not compared
    finite = ~x.isnan()
    close(on_device.grad.cpu()[finite], on_cpu.grad[finite], atol=1e-12, rtol=1e-7)
    assert not any(name in op for op in ocl.fallback_counts()), ocl.fallback_counts()


@pytest.mark.parametrize("dim", [0, 1, -1, (0, 2)])
def test_reductions_over_dims(dim):
    x = torch.randn(3, 5, 4)
    close(x.to(DEV).sum(dim), x.sum(dim), atol=1e-5, rtol=1e-5)
    close(x.to(DEV).mean(dim, keepdim=True), x.mean(dim, keepdim=True), atol=1e-5, rtol=1e-5)
    close(x.to(DEV).amax(dim), x.amax(dim))
    if isinstance(dim, int):
        values, indices = x.to(DEV).max(dim)
        close(values, x.max(dim).values)
        close(indices, x.max(dim).indices)
        close(x.to(DEV).argmax(dim), x.argmax(dim))
        close(torch.softmax(x.to(DEV), dim), torch.softmax(x, dim), atol=1e-6, rtol=1e-5)
        close(torch.log_softmax(x.to(DEV), dim), torch.log_softmax(x, dim), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [7, 1025])
def test_softmax_rows_by_teams_and_by_work_groups_match_the_cpu(n):
    """softmax, log_softmax and _safe_softmax over rows of n: a team of work items per row (up to 1024, the
    row in registers; rows past the last work-group's teams), a work-group per row beyond. A row holding NaN
    gives NaN, a row of -inf NaN (softmax) or zeros (_safe_softmax, attention's fully masked query), half a row
    of -inf the softmax of the rest; float64; a dim that is not last (permuted rows); no fallback. Each n, dtype
    and variant of the team kernel is a program PoCL builds (~1 s each): the full 1024-long row once."""
    x = torch.randn(13, n)
    x[3] = float("-inf")
    x[5, n // 2] = float("nan")
    x[6, : n // 2] = float("-inf")
    x[7, 0] = float("inf")
    for function in (lambda t: torch.softmax(t, -1), lambda t: torch.log_softmax(t, -1),
                     lambda t: torch.ops.aten._safe_softmax(t, -1)):
        close(function(x.to(DEV)), function(x), atol=1e-6, rtol=1e-5)
    assert (torch.ops.aten._safe_softmax(x.to(DEV), -1).cpu()[3] == 0).all()
    if n == 7:  # the longest row a team holds
        full = torch.randn(9, 1024)
        full[2] = float("-inf")
        close(torch.ops.aten._safe_softmax(full.to(DEV), -1), torch.ops.aten._safe_softmax(full, -1), atol=1e-6,
              rtol=1e-5)
    y = torch.randn(3, n, 2, dtype=torch.float64)
    close(torch.ops.aten._safe_softmax(y.to(DEV), 1), torch.ops.aten._safe_softmax(y, 1), atol=1e-12, rtol=1e-12)
    close(torch.log_softmax(y.to(DEV), 1), torch.log_softmax(y, 1), atol=1e-12, rtol=1e-12)
    # backwards (rows by teams up to 1024, else a product, a row sum and a pointwise kernel), last dim and not
    for function in (torch.softmax, torch.log_softmax):
        for dim, shape in ((-1, (5, n)), (1, (2, n, 3))):
            z = torch.randn(shape, dtype=torch.float64, requires_grad=True)
            weight = torch.randn(shape, dtype=torch.float64)
            on_device = z.detach().to(DEV).requires_grad_()
            (function(on_device, dim) * weight.to(DEV)).sum().backward()
            (function(z, dim) * weight).sum().backward()
            close(on_device.grad, z.grad, atol=1e-12, rtol=1e-10)
    assert not [name for name in ocl.fallback_counts() if "softmax" in name]


@pytest.mark.parametrize("shape, dims", [((600, 48), (0,)), ((3, 9000), (1,)), ((9000, 3), (0,)), ((4, 5, 700), (1,)),
                                         ((2, 3, 4, 5), (1, 2)), ((20000,), (0,)), ((6, 40), (1,))])
def test_reductions_by_rows_columns_and_parts_match_the_cpu(shape, dims):
    """The layouts of reduce_rows: work-group rows, long rows in parts, columns read in place with a stride
    (split in parts when narrow), a middle block of dims; NaN propagates; integers too."""
    x = torch.randn(shape, dtype=torch.float64)
    for function in (lambda t: t.sum(dims), lambda t: t.mean(dims), lambda t: t.amax(dims), lambda t: t.amin(dims)):
        close(function(x.to(DEV)), function(x), atol=1e-10, rtol=1e-10)
    if len(dims) == 1:
        close(x.to(DEV).argmin(dims[0]), x.argmin(dims[0]))
    with_nan = x.clone()
    with_nan.view(-1)[7] = float("nan")
    close(with_nan.to(DEV).amax(dims), with_nan.amax(dims))
    close(with_nan.to(DEV).sum(dims), with_nan.sum(dims), atol=1e-10, rtol=1e-10)
    integers = torch.randint(-5, 5, shape)
    close(integers.to(DEV).sum(dims), integers.sum(dims))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_of_a_channels_first_tensor_seen_channels_last_reads_it_in_place(dtype):
    """convnext's layer norm: an NCHW tensor permuted to NHWC, normalized over C (stride H * W). One
    ln_forward_blocks command, no copy; output (contiguous), mean and rstd, and the gradients (the backward
    copies) equal the CPU's; with an offset (a slice), 45 channels (not a multiple of the 32-column tile), 19
    rows per image (blocks that cross work-groups), affine or not. A layout whose blocks are too short
    (ROW_BLOCK_MIN) keeps the copy."""
    torch.manual_seed(0)
    tolerance = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    base = torch.randn(3, 45, 19, 2, dtype=dtype) * 2 + 1
    for affine in (True, False):
        weight = torch.randn(45, dtype=dtype) if affine else None
        bias = torch.randn(45, dtype=dtype) if affine else None
        x = base[1:, :, :, :].permute(0, 2, 3, 1)  # (2, 19, 2, 45), strides (C*H*W, W, 1, H*W), an offset
        xd = base.to(DEV)[1:, :, :, :].permute(0, 2, 3, 1)
        assert xd.stride() == x.stride() and xd.storage_offset() == x.storage_offset() > 0
        with ocl.profile(0) as times:
            got = torch.ops.aten.native_layer_norm(xd, [45], None if weight is None else weight.to(DEV),
                                                   None if bias is None else bias.to(DEV), 1e-6)
        labels = {row["kernel"] for row in times.table(by="label")} - {"copy host-to-device"}
        assert labels == {"ln_forward_blocks"}, labels
        expected = torch.ops.aten.native_layer_norm(x, [45], weight, bias, 1e-6)
        assert got[0].is_contiguous()
        for actual, wanted in zip(got, expected):
            close(actual, wanted, **tolerance)
        leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
        out = torch.nn.functional.layer_norm(leaves[0], [45], leaves[1], leaves[2], 1e-6)
        grad = torch.randn(out.shape, dtype=dtype)
        out.backward(grad)
        device_leaves = [xd.detach().requires_grad_()] + [t.to(DEV).requires_grad_() if t is not None else None
                                                        for t in (weight, bias)]
        torch.nn.functional.layer_norm(device_leaves[0], [45], device_leaves[1], device_leaves[2], 1e-6).backward(
            grad.to(DEV))
        for actual, wanted in zip(device_leaves, leaves):
            if wanted is not None:
                close(actual.grad, wanted.grad, **tolerance)
    narrow = torch.randn(4, 8, 3, 3, dtype=dtype).to(DEV).permute(0, 2, 3, 1)  # blocks of 9 rows: copied first
    with ocl.profile(0) as times:
        torch.ops.aten.native_layer_norm(narrow, [8], None, None, 1e-6)
    assert {row["kernel"] for row in times.table(by="label")} == {"pointwise a", "ln_forward"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, normalized, affine", [((4, 6, 300), (300,), "both"), ((5, 3, 4), (3, 4), "both"),
                                                      ((7, 33), (33,), "none"), ((3, 5), (5,), "weight")])
def test_layer_norm_and_its_gradients_match_the_cpu_in_fused_kernels(dtype, shape, normalized, affine):
    """native_layer_norm and its backward: one ln_forward command for the forward; output, saved mean and rstd,
    and the input, weight and bias gradients against the CPU."""
    x = torch.randn(shape, dtype=dtype) * 3 + 1
    weight = torch.randn(normalized, dtype=dtype) if affine != "none" else None
    bias = torch.randn(normalized, dtype=dtype) if affine == "both" else None
    grad = torch.randn(shape, dtype=dtype)
    results = []
    for device in ("cpu", DEV):
        leaves = [t.clone().to(device).requires_grad_() if t is not None else None for t in (x, weight, bias)]
        out = torch.nn.functional.layer_norm(leaves[0], normalized, leaves[1], leaves[2], 1e-5)
        out.backward(grad.to(device))
        saved = torch.ops.aten.native_layer_norm(*(t.detach() if t is not None else None for t in leaves[:1]),
                                                 list(normalized), *(t.detach() if t is not None else None
                                                                     for t in leaves[1:]), 1e-5)
        results.append([out.detach(), *saved[1:]] + [t.grad for t in leaves if t is not None])
    tolerance = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    for got, expected in zip(results[1], results[0]):
        close(got, expected, **tolerance)
    on_device = x.to(DEV)
    ocl.synchronize()
    with ocl.profile(0, steps=1) as times:
        torch.ops.aten.native_layer_norm(on_device, list(normalized), None, None, 1e-5)
    assert [row["kernel"] for row in times.table("kernel")] == ["ln_forward"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, groups, affine, channels_last", [((2, 6, 5, 7), 2, True, False),
                                                                  ((2, 6, 5, 7), 3, True, True),
                                                                  ((3, 8, 4), 4, False, False)])
def test_group_norm_and_its_gradients_match_the_cpu_with_zero_fallbacks(dtype, shape, groups, affine,
                                                                         channels_last):
    """GroupNorm (U-Nets, diffusion and detection heads) forward and backward on the device: its variance and
    backward ran on the CPU, and a channels-last input failed in torch's composite; now none falls back."""
    x = torch.randn(shape, dtype=dtype) * 2 + 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    norm = torch.nn.GroupNorm(groups, shape[1], affine=affine, dtype=dtype)
    if affine:
        with torch.no_grad():
            norm.weight.normal_()
            norm.bias.normal_()
    norm_ocl = copy.deepcopy(norm).to(DEV)
    grad = torch.randn(shape, dtype=dtype)
    x_cpu, x_ocl = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
    norm(x_cpu).backward(grad)
    ocl.reset_fallback_counts()
    out = norm_ocl(x_ocl)
    out.backward(grad.to(DEV))
    assert ocl.fallback_counts() == {}
    tolerance = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    close(out.detach(), norm(x).detach(), **tolerance)
    close(x_ocl.grad, x_cpu.grad, **tolerance)
    if affine:
        close(norm_ocl.weight.grad, norm.weight.grad, **tolerance)
        close(norm_ocl.bias.grad, norm.bias.grad, **tolerance)


@pytest.mark.timeout(60)
def test_nan_and_inf_terminate_and_propagate_like_the_cpu():
    """Seed 004: dlprimitives hung on NaN in a compare-and-swap loop. Here every row loops to its end."""
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, 2.0], [inf, 1.0, -inf, 0.0], [-inf, -inf, -inf, -inf], [nan, nan, 1.0, inf],
                      [1.0, 2.0, inf, inf]])
    d = x.to(DEV)
    for function in (lambda t: t.sum(1), lambda t: t.mean(0), lambda t: t.amax(1), lambda t: t.max(1).values,
                     lambda t: t.max(1).indices, lambda t: t.argmax(1), lambda t: t.argmax(),
                     lambda t: torch.softmax(t, 1), lambda t: torch.log_softmax(t, 1), lambda t: t.max(),
                     lambda t: torch.relu(t), lambda t: torch.maximum(t, t.flip(1))):
        close(function(d), function(x))
    image = x[:4].reshape(1, 1, 4, 4)
    for kernel, stride in ((2, 2), (3, 1)):
        values, indices = torch.nn.functional.max_pool2d(image.to(DEV), kernel, stride, return_indices=True)
        expected_values, expected_indices = torch.nn.functional.max_pool2d(image, kernel, stride, return_indices=True)
        close(values, expected_values)
        close(indices, expected_indices)


@pytest.mark.parametrize("transpose", [False, True])
def test_gemm_through_clblast(transpose):
    a, b, c = torch.randn(17, 9), torch.randn(9, 13), torch.randn(13)
    if transpose:
        a, b = a.t().contiguous().t(), b.t().contiguous().t()
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-5, rtol=1e-5)
    close(torch.addmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=0.5, alpha=2), torch.addmm(c, a, b, beta=0.5, alpha=2),
          atol=1e-5, rtol=1e-5)
    x, y = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    close(torch.bmm(x.to(DEV), y.to(DEV)), torch.bmm(x, y), atol=1e-5, rtol=1e-5)
    w = torch.randn(6, 9)
    close(torch.nn.functional.linear(a.to(DEV), w.to(DEV), c[:6].to(DEV)), torch.nn.functional.linear(a, w, c[:6]),
          atol=1e-5, rtol=1e-5)
    assert not [name for name in ocl.fallback_counts() if "mm" in name]


def _train(device, model, inputs, targets, steps=5):
    """Losses of `steps` training steps, then the eval-mode loss (batch norm's running statistics), and the
    final state (parameters and buffers)."""
    torch.manual_seed(0)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=False)
    inputs, targets = inputs.to(device), targets.to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    losses.append(torch.nn.functional.cross_entropy(model(inputs), targets).item())
    return losses, {name: p.detach().cpu() for name, p in model.state_dict().items()}


def _seeded_losses(device, build, data, loss_of, make_optimizer, steps):
    """Losses of `steps` training steps of build() on `device`: weights from seed 0, data() from seed 1, both
    made on the CPU generator (so every device starts from the same numbers)."""
    torch.manual_seed(0)
    model = build().to(device)
    optimizer = make_optimizer(model.parameters())
    torch.manual_seed(1)
    tensors = [t.to(device) for t in data()]
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_of(model, *tensors)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _mlp():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 5))


def test_mlp_trains_like_the_cpu_with_zero_fallbacks():
    inputs, targets = torch.randn(16, 12), torch.randint(0, 5, (16,))
    cpu_losses, cpu_params = _train("cpu", _mlp(), inputs, targets)
    ocl.reset_fallback_counts()
    ocl_losses, ocl_params = _train(DEV, _mlp(), inputs, targets)
    assert ocl.fallback_counts() == {}
    torch.testing.assert_close(torch.tensor(ocl_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    assert cpu_losses[-1] < cpu_losses[0]
    for name in cpu_params:
        torch.testing.assert_close(ocl_params[name], cpu_params[name], atol=1e-5, rtol=1e-4)


def test_tiny_conv_net_trains_like_the_cpu_with_zero_fallbacks():
    def net():
        torch.manual_seed(2)
        return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                   torch.nn.MaxPool2d(2), torch.nn.Conv2d(4, 4, 3, stride=1, groups=2),
                                   torch.nn.Tanh(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                   torch.nn.Linear(4, 3))
    inputs, targets = torch.randn(4, 1, 8, 8), torch.randint(0, 3, (4,))
    cpu_losses, cpu_params = _train("cpu", net(), inputs, targets, steps=3)
    ocl.reset_fallback_counts()
    ocl_losses, ocl_params = _train(DEV, net(), inputs, targets, steps=3)
    assert ocl.fallback_counts() == {}
    torch.testing.assert_close(torch.tensor(ocl_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    for name in cpu_params:
        torch.testing.assert_close(ocl_params[name], cpu_params[name], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("cin,cout,kernel,stride,padding,dilation,groups,workspace", [
    (3, 4, 3, 1, 1, 1, 1, None), (4, 6, 3, 2, 0, 1, 2, None), (2, 3, 5, 1, 2, 2, 1, None),
    (4, 4, 3, 1, 1, 1, 4, None),  # depthwise: the direct kernels
    (4, 8, 3, 2, 1, 1, 4, None), (3, 3, 3, 1, 2, 2, 3, None),  # depthwise, 2 outputs per channel; dilated
    (3, 4, 3, 1, 1, 1, 1, 1), (4, 6, 3, 2, 0, 1, 2, 8000),  # im2col over 1 image, and 2 then 1, at a time
    (6, 5, 1, 1, 0, 1, 1, None), (6, 4, 1, 1, 0, 1, 2, None),  # 1x1: the direct GEMMs (FOLD_PIXELS patched)
    (6, 5, 1, 2, 0, 1, 1, None),  # strided 1x1: im2col
])
def test_conv2d_forward_and_both_backwards(cin, cout, kernel, stride, padding, dilation, groups, workspace,
                                           monkeypatch):
    from fade.ocl import convolution

    if workspace is not None:
        monkeypatch.setattr(convolution, "CONV_WORKSPACE_BYTES", workspace)
    if kernel == 1:  # these 9 x 8 images are below FOLD_PIXELS: let the 1x1 path take them unfolded
        monkeypatch.setattr(convolution, "FOLD_PIXELS", 1)
    torch.manual_seed(0)
    conv_matches_the_cpu(torch.randn(3, cin, 9, 8), torch.nn.Conv2d(cin, cout, kernel, stride, padding, dilation,
                                                                     groups), atol=1e-4, rtol=1e-4)


def conv_matches_the_cpu(x, conv, **tolerance):
    """`conv` (a CPU module) and its copy on ocl, forward and both backwards from `x` with one random output
    gradient: output, input, weight and bias gradients equal within `tolerance`. Returns (ocl module, ocl x)."""
    conv_ocl = copy.deepcopy(conv).to(DEV)
    x = x.clone().requires_grad_()
    y = conv(x)
    grad = torch.randn_like(y)
    y.backward(grad)
    x_ocl = x.detach().to(DEV).requires_grad_()
    y_ocl = conv_ocl(x_ocl)
    y_ocl.backward(grad.to(DEV))
    pairs = [(y_ocl, y), (x_ocl.grad, x.grad), (conv_ocl.weight.grad, conv.weight.grad)]
    if conv.bias is not None:
        pairs.append((conv_ocl.bias.grad, conv.bias.grad))
    for actual, expected in pairs:
        close(actual, expected.detach(), **tolerance)
    return conv_ocl, x_ocl


@pytest.mark.parametrize("fold_pixels", [1, 1 << 30])  # per image; folded
def test_conv2d_data_gradient_alone_with_frozen_weights_equals_the_cpu(fold_pixels, monkeypatch):
    """Frozen weights and no bias: the backward computes the data gradient only (no columns are built)."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "FOLD_PIXELS", fold_pixels)
    monkeypatch.setattr(convolution, "CONV_WORKSPACE_BYTES", 20000)  # chunks of a few images
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False, dtype=torch.float64).requires_grad_(False)
    x = torch.randn(5, 4, 7, 6, dtype=torch.float64, requires_grad=True)
    grad = torch.randn_like(conv(x))
    conv(x).backward(grad)
    x_ocl = x.detach().to(DEV).requires_grad_()
    copy.deepcopy(conv).to(DEV)(x_ocl).backward(grad.to(DEV))
    close(x_ocl.grad, x.grad, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, dict(atol=1e-11, rtol=1e-10)),
                                              (torch.float32, dict(atol=1e-4, rtol=1e-4))])
def test_winograd_convolution_equals_the_cpu_forward_and_both_backwards(dtype, tolerance, monkeypatch):
    """The 3x3 stride-1 convolutions through Winograd F(2x2, 3x3), forced on: odd and even sizes (partial output
    tiles), padding 0, 1 and 2 (the data gradient then pads 2, 1 and 0), chunks of a few images, with a bias."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "CONV_WINOGRAD", "on")
    monkeypatch.setattr(convolution, "CONV_WORKSPACE_BYTES", 40000)  # several chunks of images
    launched = []
    real_winograd = convolution.winograd_convolution
    monkeypatch.setattr(convolution, "winograd_convolution",
                        lambda *a, **k: launched.append(a[5]) or real_winograd(*a, **k))
    torch.manual_seed(0)
    for cin, cout, padding, size in ((3, 5, 1, (7, 6)), (4, 2, 0, (8, 9)), (2, 3, 2, (5, 5)), (6, 4, 1, (1, 1))):
        conv_matches_the_cpu(torch.randn(5, cin, *size, dtype=dtype),
                             torch.nn.Conv2d(cin, cout, 3, padding=padding, dtype=dtype), **tolerance)
    assert launched.count(False) == 4 and launched.count(True) == 4  # each forward and each data gradient


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, dict(atol=1e-10, rtol=1e-10)),
                                              (torch.float32, dict(atol=1e-4, rtol=1e-4))])
def test_grouped_convolution_kernels_equal_the_cpu_forward_and_both_backwards(dtype, tolerance, monkeypatch):
    """Grouped convolutions (several input channels a group: RegNet's width-8 groups, ResNeXt's) through the
    direct kernels, forced on: stride, padding, dilation, rectangular kernels, more outputs than inputs a
    group, a bias; one grouped_forward, grouped_grad_input and grouped_grad_weight command each, no GEMM."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "CONV_GROUPED", "on")
    torch.manual_seed(0)
    for n, cin, cout, groups, kernel, stride, padding, dilation, size in (
            (3, 48, 48, 6, 3, 2, 1, 1, (7, 7)), (2, 8, 12, 4, 3, 1, 0, 1, (6, 5)), (2, 12, 24, 3, 1, 1, 0, 1, (4, 4)),
            (1, 32, 32, 4, 5, 2, 2, 1, (10, 10)), (2, 16, 16, 4, 3, 1, 2, 2, (9, 9)),
            (2, 6, 9, 3, (3, 1), (1, 2), (1, 0), 1, (5, 5))):
        conv = torch.nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias=kernel == 1, dtype=dtype)
        conv_matches_the_cpu(torch.randn(n, cin, *size, dtype=dtype), conv, **tolerance)
    x = torch.randn(2, 16, 6, 6, dtype=dtype).to(DEV).requires_grad_()
    weight = torch.randn(16, 4, 3, 3, dtype=dtype).to(DEV).requires_grad_()
    out = torch.nn.functional.conv2d(x, weight, padding=1, groups=4)
    grad = torch.randn(out.shape, dtype=dtype).to(DEV)
    ocl.synchronize()
    with ocl.profile(0, steps=1) as times:
        torch.autograd.grad(torch.nn.functional.conv2d(x, weight, padding=1, groups=4), (x, weight), grad)
    kernels = {row["kernel"] for row in times.table("kernel")}
    assert {"grouped_forward", "grouped_grad_input", "grouped_grad_weight"} <= kernels, kernels
    assert not any("gemm" in kernel.lower() or kernel == "im2col" for kernel in kernels), kernels


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, dict(atol=1e-4, rtol=1e-4)),
                                              (torch.float64, dict(atol=1e-10, rtol=1e-10))])
def test_own_gemm_1x1_convolution_equals_the_cpu_forward_and_both_backwards(dtype, tolerance, monkeypatch):
    """1x1 convolutions with FADE's own GEMM kernel forced on (forward, data gradient, and the weight gradient
    walking k as (image, pixel) blocks, split along k): sizes off the 64 x 64 tile and the 16-deep k step
    (partial tiles on every edge), two groups (a's and b's offsets), a bias, a k of 5115 in 19 slices."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "CONV_OWN_GEMM", "on")
    launched, weight_grads = [], []
    real, real_weight = convolution.own_gemm, convolution.own_weight_grad_1x1
    monkeypatch.setattr(convolution, "own_gemm", lambda *a, **k: launched.append(a[1].rows) or real(*a, **k))
    monkeypatch.setattr(convolution, "own_weight_grad_1x1",
                        lambda *a, **k: weight_grads.append(a[4]) or real_weight(*a, **k))
    torch.manual_seed(0)
    for cin, cout, groups, size in ((3, 5, 1, (7, 6)), (34, 70, 1, (9, 9)), (20, 130, 2, (3, 25)), (16, 8, 1, (1, 1)),
                                    (3, 5, 1, (31, 33))):
        conv_matches_the_cpu(torch.randn(5, cin, *size, dtype=dtype),
                             torch.nn.Conv2d(cin, cout, 1, groups=groups, dtype=dtype), **tolerance)
    assert launched.count(5) == 2 and launched.count(3) == 2  # the 5-row forwards and their data gradients
    assert len(launched) == 2 * (4 + 2 * 1)  # each forward and each data gradient, per group
    assert weight_grads == [1, 1, 2, 1, 1]
    x = torch.randn(2, 3, 4, 4, dtype=dtype, requires_grad=True)  # no output channels: empty gradients
    x_ocl = x.detach().to(DEV).requires_grad_()
    weight = torch.zeros(0, 3, 1, 1, dtype=dtype).to(DEV).requires_grad_()
    out = torch.nn.functional.conv2d(x_ocl, weight)
    out.backward(torch.zeros_like(out))
    assert out.shape == (2, 0, 4, 4) and weight.grad.shape == (0, 3, 1, 1) and not x_ocl.grad.cpu().any()


def test_an_elementwise_op_repeated_on_one_geometry_reuses_its_plan_with_each_calls_operands():
    """The second call with the same shapes, strides, dtypes and scalars runs the plan the first left: other
    storage offsets, other buffers, in place and out of place, a scalar broadcast."""
    from fade.ocl import pointwise

    base = torch.arange(12.0)
    dev_base = base.to(DEV)
    for first, second in ((dev_base[1:9], dev_base[2:10]), (dev_base[0:8], dev_base[4:12])):
        close(first + second, base[first.storage_offset():][:8] + base[second.storage_offset():][:8])
    assert any(key[0] is torch.ops.aten.add.Tensor for key in pointwise.pointwise_plans)
    x = torch.randn(5, 3)
    for scale in (2.0, 2.0, 3.0):
        target = x.to(DEV)
        assert target.mul_(scale) is target
        close(target, x * scale)
    counter = torch.tensor(0).to(DEV)
    for _ in range(3):
        counter.add_(1)
    assert counter.item() == 3


@pytest.mark.parametrize("groups, kernel", [(4, 3), (1, 3), (1, 1), (2, 1)])
def test_convolutions_read_inputs_weights_and_gradients_at_their_storage_offsets(groups, kernel):
    """Input, weight and output gradient as views that start inside their storage (a batch slice, weights cut
    from one flat buffer): depthwise ignored the offsets and read the storage's first elements."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, 6, 6, dtype=torch.float64)
    flat = torch.randn(7 + 4 * (4 // groups) * kernel * kernel, dtype=torch.float64)
    weight = flat[7:].view(4, 4 // groups, kernel, kernel)
    grad = torch.randn(4, 4, 6, 6, dtype=torch.float64)
    padding = kernel // 2

    def run(device):
        xs = x.to(device)[1:].requires_grad_()
        ws = flat.to(device)[7:].view(weight.shape).requires_grad_()
        out = torch.nn.functional.conv2d(xs, ws, padding=padding, groups=groups)
        out.backward(grad.to(device)[2:])
        return out, xs.grad, ws.grad

    for actual, expected in zip(run(DEV), run("cpu")):
        close(actual, expected.detach(), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("own", ["on", "off"])
def test_a_convolution_forward_repeated_on_one_geometry_runs_its_plan_with_each_calls_tensors(own, monkeypatch):
    """Depthwise and own-GEMM 1x1 forwards keep a plan per geometry: the second and third calls (other
    inputs, one starting inside its storage, other weights) run it and still equal the CPU."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "CONV_OWN_GEMM", own)
    torch.manual_seed(0)
    for conv in (torch.nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False, dtype=torch.float64),
                 torch.nn.Conv2d(6, 4, 1, groups=2, bias=False, dtype=torch.float64)):
        before = len(convolution.conv_plans)
        for _ in range(2):
            conv_ocl = copy.deepcopy(conv).to(DEV)
            x = torch.randn(4, 6, 5, 7, dtype=torch.float64)
            close(conv_ocl(x.to(DEV)), conv(x).detach(), atol=1e-12, rtol=1e-12)
            close(conv_ocl(x.to(DEV)[1:]), conv(x[1:]).detach(), atol=1e-12, rtol=1e-12)
            conv.weight.data.normal_()
        planned = len(convolution.conv_plans) > before
        assert planned == (conv.groups == 6 or own == "on")  # depthwise always; 1x1 when own_gemm runs it


def test_an_out_overload_writes_its_own_target_each_call():
    """out= overloads keep no plan: the key knows shapes, not which tensor is the target (a plan made by
    add(x, y, out=x) once wrote a later add(a, b, out=c) into a)."""
    x, y = torch.ones(4).to(DEV), torch.full((4,), 2.0).to(DEV)
    torch.add(x, y, out=x)
    a, b, c = torch.zeros(4).to(DEV), torch.full((4,), 3.0).to(DEV), torch.full((4,), -7.0).to(DEV)
    assert torch.add(a, b, out=c) is c
    close(c, torch.full((4,), 3.0))
    close(a, torch.zeros(4))
    one = torch.ones(1).to(DEV)
    for _ in range(2):  # out= that resizes its target, twice
        target = torch.zeros(1).to(DEV)
        torch.add(one, torch.arange(4.0).to(DEV), out=target)
        close(target, torch.arange(4.0) + 1)
    close(one, torch.ones(1))


def test_a_cpu_fallback_with_several_empty_outputs_gives_each_its_own_memory():
    """Zero-byte tensors share one storage on the device; the CPU fallback gives each its own host storage
    (sort into two empty outputs came back overlapping)."""
    x = torch.tensor([3.0, 1.0, 2.0, 5.0, 4.0])
    values, indices = torch.empty(0).to(DEV), torch.empty(0, dtype=torch.long).to(DEV)
    torch.sort(x.to(DEV), out=(values, indices))
    expected = torch.sort(x)
    close(values, expected.values)
    close(indices, expected.indices)
    top = torch.topk(x.to(DEV), 2, out=(torch.empty(0).to(DEV), torch.empty(0, dtype=torch.long).to(DEV)))
    close(top[0], torch.topk(x, 2)[0])
    close(top[1], torch.topk(x, 2)[1])


def test_embedding_and_adaptive_pool_backwards_read_a_gradient_at_its_storage_offset():
    """Their kernels take no offset: a gradient that starts inside its storage is copied to a fresh one first."""
    torch.manual_seed(0)
    grad, index = torch.randn(6, 4, dtype=torch.float64), torch.tensor([1, 3, 3, 7])
    close(torch.ops.aten.embedding_dense_backward(grad.to(DEV)[2:], index.to(DEV), 10, -1, False),
          torch.ops.aten.embedding_dense_backward(grad[2:], index, 10, -1, False))
    x, pooled = torch.randn(2, 3, 7, 7, dtype=torch.float64), torch.randn(3, 3, 3, 3, dtype=torch.float64)
    close(torch.ops.aten._adaptive_avg_pool2d_backward(pooled.to(DEV)[1:], x.to(DEV)),
          torch.ops.aten._adaptive_avg_pool2d_backward(pooled[1:], x))


def test_a_gemm_that_needs_clblast_scratch_gets_a_pool_buffer_and_equals_the_cpu():
    """A GEMM past CLBlast's direct-kernel size with odd sizes and a transposed operand needs padded copies:
    their size is asked of CLBlast once (gemm_temp_bytes) and a pool buffer passed in (SgemmWithTempBuffer)."""
    from fade.ocl import runtime

    torch.manual_seed(0)
    a, b = torch.randn(1000, 999), torch.randn(1001, 999)
    got = torch.mm(a.to(DEV), b.to(DEV).t())
    close(got, a @ b.t(), atol=1e-3, rtol=1e-4)
    key = (0, torch.float32, False, True, 1000, 1001, 999, 0, 999, 0, 999, 0, 1001)
    assert key in runtime._temp_sizes  # asked, then reused: the next call finds it without asking CLBlast
    close(torch.mm(a.to(DEV), b.to(DEV).t()), got.cpu(), atol=0, rtol=0)


def test_strided_elementwise_kernels_with_compiled_geometry_equal_the_cpu(monkeypatch):
    """Elementwise ops over permuted, sliced and broadcast views take the kernels with their geometry compiled
    in (dimensions merged where every tensor steps through them as one): copies, arithmetic, in-place updates of a
    slice, and a 0-d tensor, each against the CPU."""
    import itertools

    from fade.ocl import pointwise

    monkeypatch.setattr(pointwise, "STRIDED_AFTER", 1)  # each geometry compiled at first sight
    pointwise.flat_kernels.clear()
    torch.manual_seed(0)
    cases = [(shape, perm) for shape in [(3, 4, 5), (2, 1, 6), (1, 1, 3), ()]
             for perm in itertools.permutations(range(len(shape)))]
    cases += [((2, 3, 4, 5), perm) for perm in [(0, 2, 1, 3), (3, 2, 1, 0), (1, 0, 3, 2)]]
    for shape, perm in cases:
        host = torch.randn(shape)
        view = host.to(DEV).permute(perm)
        close(view.contiguous(), host.permute(perm).contiguous(), atol=0, rtol=0)
        close(view * 2 + 1, host.permute(perm) * 2 + 1, atol=1e-6, rtol=1e-6)
    a, b = torch.randn(4, 1, 5), torch.randn(3, 1)
    close(a.to(DEV) + b.to(DEV), a + b, atol=1e-6, rtol=1e-6)
    m = torch.randn(5, 6)
    target = torch.zeros(6, 5).to(DEV)
    target.copy_(m.to(DEV).t())
    close(target, m.t(), atol=0, rtol=0)
    grid = torch.randn(10, 10)
    on_device = grid.to(DEV)
    on_device[2:5, 3:9] += 1
    grid[2:5, 3:9] += 1
    close(on_device, grid, atol=1e-6, rtol=1e-6)
    assert any(key[0] == "strided" for key in pointwise.flat_kernels)  # the compiled-geometry kernels ran


def test_a_strided_geometry_gets_its_own_kernel_only_when_met_again():
    """A geometry met once (a generated sequence's, one token longer each step) runs on the generic kernel, built
    once per expression; met STRIDED_AFTER times (a training step's, every step), it gets a kernel of its own.
    Both equal the CPU."""
    from fade.ocl import pointwise

    pointwise.flat_kernels.clear()
    pointwise.strided_seen.clear()
    built = lambda: [key for key in pointwise.flat_kernels if key[0] == "strided" and key[2] == "a * b"]  # noqa: E731
    torch.manual_seed(0)
    for length in range(5, 9):  # four geometries, each met once
        host = torch.randn(3, length)
        close(host.to(DEV).t() * 3, host.t() * 3, atol=1e-6, rtol=1e-6)
    assert built() == []
    host = torch.randn(3, 4)
    for _ in range(pointwise.STRIDED_AFTER - 1):
        close(host.to(DEV).t() * 3, host.t() * 3, atol=1e-6, rtol=1e-6)
    assert built() == []
    close(host.to(DEV).t() * 3, host.t() * 3, atol=1e-6, rtol=1e-6)
    assert len(built()) == 1


def test_bitwise_not_of_bool_negates_and_generation_stops():
    """~ of a bool tensor is its negation (as uint8, ~1 is 0xFE: nonzero, true), in place and strided too, and
    integers keep their bitwise ~. transformers' greedy loop keeps `unfinished & ~is_done`: with ~True true,
    model.generate on ocl never stopped."""
    flags = torch.tensor([[True, False, True], [False, False, True]])
    close(~flags.to(DEV), ~flags)
    close(~flags.to(DEV).t(), ~flags.t())
    close(torch.logical_not(flags.to(DEV)), torch.logical_not(flags))
    ints = torch.tensor([0, 1, -7, 255])
    close(~ints.to(DEV), ~ints)
    inplace = flags.to(DEV)
    inplace.bitwise_not_()
    close(inplace, ~flags)
    unfinished = torch.ones(2, dtype=torch.long)
    close(unfinished.to(DEV) & ~flags[:, 0].to(DEV), unfinished & ~flags[:, 0])


def test_a_tiny_llama_generates_the_cpus_greedy_tokens_and_stops():
    """model.generate on ocl:0 (dynamic cache, SDPA, a sequence one token longer each step) stops after its
    max_new_tokens and gives the CPU's greedy tokens from the same weights: before, ~True was true there and the
    loop ran on (thousands of tokens), and each step's new geometries built kernels of their own."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model("llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                               max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(0, 128, (2, 5))
    runs = []
    for device in ("cpu", DEV):
        model.to(device)
        with torch.inference_mode():
            runs.append(model.generate(ids.to(device), attention_mask=torch.ones_like(ids).to(device),
                                       max_new_tokens=3, do_sample=False).cpu())
    assert runs[1].shape == (2, 8)
    assert torch.equal(runs[1], runs[0])


def test_fallback_warns_once_per_op_counts_and_keeps_aliasing():
    ocl.reset_fallback_counts()
    base = torch.arange(10.0).to(DEV)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base[2:6].cumsum_(0)
        base[6:].cumsum_(0)
    expected = torch.arange(10.0)
    expected[2:6].cumsum_(0)
    expected[6:].cumsum_(0)
    assert torch.equal(base.cpu(), expected)
    messages = [str(w.message) for w in caught if "fade.ocl" in str(w.message)]
    assert len(messages) == 1 and "aten::cumsum" in messages[0]
    assert sum(count for name, count in ocl.fallback_counts().items() if "cumsum" in name) == 2


def test_state_dict_save_and_load():
    model = torch.nn.Linear(4, 3).to(DEV)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    restored = torch.load(buffer)
    for name, value in model.state_dict().items():
        assert restored[name].device == torch.device(DEV)
        assert torch.equal(restored[name].cpu(), value.cpu())
    buffer.seek(0)
    assert all(v.device.type == "cpu" for v in torch.load(buffer, map_location="cpu").values())


def test_manual_seed_synchronize_empty_cache():
    torch.manual_seed(7)
    first = torch.randn(8, device=DEV)
    torch.manual_seed(7)
    assert torch.equal(torch.randn(8, device=DEV).cpu(), first.cpu())
    ocl.synchronize()
    before = ocl.memory_allocated()
    del first
    big = torch.empty(1 << 20, device=DEV)
    assert ocl.memory_allocated() >= before + big.numel() * 4 - 64
    del big
    ocl.empty_cache()
    assert ocl.memory_allocated() < before + (1 << 20)


def test_fp16_needs_cl_khr_fp16():
    if ocl.devices()[0].fp16:
        pytest.skip("this OpenCL device has cl_khr_fp16")
    with pytest.raises(ocl.OclError, match="cl_khr_fp16"):
        torch.ones(2, dtype=torch.float16).to(DEV)


def test_kernel_build_failure_names_the_kernel_and_the_log():
    with pytest.raises(ocl.OclError, match=r"kernel 'broken' failed to build on ocl:0 .*undefined_name"):
        runtime.device(0).kernel("broken", "__kernel void broken(__global float* x) { x[0] = undefined_name; }")


def test_out_of_memory_is_torch_out_of_memory():
    with pytest.raises(torch.OutOfMemoryError, match="cannot allocate"):
        torch.empty(1 << 42, device=DEV)


class _TokenNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embedding = torch.nn.Embedding(20, 16, padding_idx=0)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, tokens):
        return self.head(torch.relu(self.norm(self.embedding(tokens))).mean(1))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_embedding_layer_norm_and_default_foreach_optimizers_with_zero_fallbacks(optimizer):
    tokens, targets = torch.randint(0, 20, (8, 6)), torch.randint(0, 5, (8,))

    def run(device):
        model = _TokenNet().to(device)
        make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                "adamw": lambda p: torch.optim.AdamW(p, lr=0.01)}[optimizer]  # foreach: torch's default
        opt = make(model.parameters())
        x, y = tokens.to(device), targets.to(device)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}

    cpu_losses, cpu_state = run("cpu")
    ocl.reset_fallback_counts()
    ocl_losses, ocl_state = run(DEV)
    assert ocl.fallback_counts() == {}
    torch.testing.assert_close(torch.tensor(ocl_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    for name, value in cpu_state.items():
        torch.testing.assert_close(ocl_state[name], value, atol=1e-5, rtol=1e-4)


def test_index_select_gathers_rows():
    weight, index = torch.randn(5, 3, 2), torch.tensor([4, 0, 2, 4])
    assert torch.equal(weight.to(DEV).index_select(0, index.to(DEV)).cpu(), weight.index_select(0, index))


def test_dropout_with_the_cpu_rng_matches_the_cpu(monkeypatch):
    from fade.ocl import philox
    monkeypatch.setattr(philox, "DROPOUT_RNG", "cpu")
    x = torch.randn(1000)
    torch.manual_seed(5)
    expected = torch.nn.functional.dropout(x, 0.3)
    torch.manual_seed(5)
    close(torch.nn.functional.dropout(x.to(DEV), 0.3), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_on_the_device_rng(dtype):
    """The default: Philox on the device, seeded from the CPU generator. Same seed, same masks; the next call a
    new mask; the kept share of 2^18 elements within 6 standard deviations of 1 - p, in each of Philox's four
    lanes; kept elements scaled by 1 / (1 - p); the backward uses the same mask."""
    from fade.ocl import philox
    assert philox.DROPOUT_RNG == "device"
    n, p = 1 << 18, 0.3
    x = torch.randn(n, dtype=dtype)
    torch.manual_seed(5)
    first, mask = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    again, _ = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    torch.manual_seed(5)
    repeat, _ = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    first, mask, again, repeat = first.cpu(), mask.cpu(), again.cpu(), repeat.cpu()
    assert mask.dtype == torch.bool and torch.equal(first, repeat) and not torch.equal(first, again)
    sd = (n / 4 * p * (1 - p)) ** 0.5
    for lane in range(4):
        assert abs(mask[lane::4].sum().item() - n / 4 * (1 - p)) < 6 * sd
    torch.testing.assert_close(first, x * mask / (1 - p), rtol=1e-6, atol=0)
    leaf = x.to(DEV).requires_grad_()
    torch.manual_seed(6)
    out = torch.nn.functional.dropout(leaf, p)
    out.backward(torch.ones(n, dtype=dtype).to(DEV))
    kept = out.detach().cpu() != 0
    torch.testing.assert_close(leaf.grad.cpu(), kept.to(dtype) / (1 - p), rtol=1e-6, atol=0)
    keep_all, drop_all = torch.ops.aten.native_dropout(x.to(DEV), 0.0, True), torch.ops.aten.native_dropout(
        x.to(DEV), 1.0, True)
    assert keep_all[1].cpu().all() and torch.equal(keep_all[0].cpu(), x)
    assert not drop_all[1].cpu().any() and not drop_all[0].cpu().any()
    evaluated = torch.ops.aten.native_dropout(x.to(DEV), p, False)
    assert torch.equal(evaluated[0].cpu(), x) and evaluated[1].cpu().all()



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["odd", "sliced", "transposed"])
def test_avg_pool2d_and_its_backward_match_the_cpu(dtype, layout):
    """avg_pool2d over the grid kernel 2/3 x stride 1/2 x padding 0/1 x ceil_mode x count_include_pad x
    divisor_override None/5 (ceil_mode's clipped last windows, each window's own divisor), forward and backward,
    on an odd-sized input, a sliced one (an offset and strides) and a transposed one; no fallback."""
    import itertools
    torch.manual_seed(0)
    base = torch.randn(2, 3, 11, 13, dtype=dtype)
    make = {"odd": lambda t: t[:, :, :7, :9].contiguous(), "sliced": lambda t: t[1:, :, 2:9, 1:12:2],
            "transposed": lambda t: t[:, :, :9, :7].transpose(2, 3)}[layout]
    host, device = make(base), make(base.to(DEV))
    assert device.is_contiguous() == (layout == "odd") and (layout != "sliced" or device.storage_offset())
    ocl.reset_fallback_counts()
    for k, s, p, ceil, include, divisor in itertools.product((2, 3), (1, 2), (0, 1), (False, True), (False, True),
                                                             (None, 5)):
        x, xd = host.clone().requires_grad_(), device.detach().requires_grad_()
        args = (k, s, p, ceil, include, divisor)
        expected, actual = torch.nn.functional.avg_pool2d(x, *args), torch.nn.functional.avg_pool2d(xd, *args)
        close(actual.detach(), expected.detach())
        grad = torch.randn(expected.shape, dtype=dtype)
        expected.backward(grad)
        actual.backward(grad.to(DEV))
        close(xd.grad, x.grad)
    close(torch.nn.functional.avg_pool2d(device[0], 3), torch.nn.functional.avg_pool2d(host[0], 3))  # 3-D, stride=k
    out = torch.empty(0, dtype=dtype).to(DEV)
    torch.ops.aten.avg_pool2d.out(device, [2, 2], [], [1, 1], True, False, None, out=out)
    close(out, torch.ops.aten.avg_pool2d(host, [2, 2], [], [1, 1], True, False, None))
    assert not [name for name in ocl.fallback_counts() if "avg_pool" in name]


ADAPTIVE_SIZES = [((7, 7), (3, 3)), ((10, 10), (4, 4)), ((10, 7), (4, 3)), ((3, 5), (7, 8)), ((9, 6), (5, 1)),
                  ((6, 6), (1, 1)), ((5, 4), (5, 4)), ((13, 11), (6, 7))]  # (input, output): bins of unequal sizes,
# overlapping bins, more outputs than inputs (bins of one element read by several outputs), global, identity


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "channels_last"])
def test_adaptive_max_and_avg_pool2d_of_any_size_and_their_backwards_match_the_cpu(dtype, layout):
    """adaptive_max_pool2d (values, the CPU's indices, the backward's sums where several bins chose one element)
    and adaptive_avg_pool2d for output sizes that do not divide the input (7 -> 3, 10 -> 4, 3 -> 7, ...), on a
    contiguous, a sliced (an offset and strides) and a channels-last input, with ties and a NaN; no fallback.
    float64 equals the CPU's to 1e-12; float32's max pooling is exact (it selects, and the backward adds in the
    CPU's order), its average within 1e-6."""
    torch.manual_seed(0)
    tight = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=1e-6, rtol=1e-5)
    ocl.reset_fallback_counts()
    for (h, w), size in ADAPTIVE_SIZES:
        base = torch.randint(-3, 4, (3, 4, h + 2, w + 3)).to(dtype)  # few values: ties in most bins
        base[0, 1, 1, 1] = float("nan")
        base[1, 2] = float("-inf")  # a whole plane of -inf: each bin's first element is its index
        make = {"contiguous": lambda t: t[:2, :, :h, :w].contiguous(), "sliced": lambda t: t[1:, 1:, 2:, 3:],
                "channels_last": lambda t: t[:2, :, :h, :w].permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)}[layout]
        host, device = make(base), make(base.to(DEV))
        assert host.shape[-2:] == (h, w) and device.is_contiguous() == (layout == "contiguous")
        for pool in ("max", "avg"):
            x, xd = host.clone().requires_grad_(), device.detach().requires_grad_()
            if pool == "max":
                (expected, where), (actual, actual_where) = (torch.nn.functional.adaptive_max_pool2d(t, size, True)
                                                             for t in (x, xd))
                assert torch.equal(actual_where.cpu(), where), (h, w, size)
                close(actual.detach(), expected.detach(), atol=0, rtol=0)
            else:
                expected, actual = (torch.nn.functional.adaptive_avg_pool2d(t, size) for t in (x, xd))
                close(actual.detach(), expected.detach(), **tight)
            grad = torch.randn(expected.shape, dtype=dtype)
            expected.backward(grad)
            actual.backward(grad.to(DEV))
            close(xd.grad, x.grad, **(dict(atol=0, rtol=0) if pool == "max" else tight))
    x = torch.randn(3, 10, 7, dtype=dtype)  # 3-D input; out= overloads; a gradient and indices at offsets
    values, where = torch.empty(0, dtype=dtype).to(DEV), torch.empty(0, dtype=torch.long).to(DEV)
    torch.ops.aten.adaptive_max_pool2d.out(x.to(DEV), [4, 3], out=values, indices=where)
    expected, expected_where = torch.ops.aten.adaptive_max_pool2d(x, [4, 3])
    close(values, expected, atol=0, rtol=0)
    assert torch.equal(where.cpu(), expected_where)
    grad, index = torch.randn(4, 4, 3, dtype=dtype), torch.cat([expected_where[:1], expected_where])
    close(torch.ops.aten.adaptive_max_pool2d_backward(grad.to(DEV)[1:], x.to(DEV), index.to(DEV)[1:]),
          torch.ops.aten.adaptive_max_pool2d_backward(grad[1:], x, expected_where), atol=0, rtol=0)
    assert ocl.fallback_counts() == {}


def test_max_pool2d_of_a_channels_last_input_and_its_backward_match_the_cpu():
    """The kernel writes its outputs contiguous; they had been allocated with the meta result's channels-last
    strides, which scrambled values and indices (found by issue 27's adaptive pooling checks)."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    xd = x.to(DEV).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2).requires_grad_()
    assert xd.stride() == x.stride()
    ocl.reset_fallback_counts()
    x.requires_grad_()
    (expected, where), (actual, actual_where) = (torch.nn.functional.max_pool2d(t, 3, 2, 1, return_indices=True)
                                                 for t in (x, xd))
    close(actual.detach(), expected.detach(), atol=0, rtol=0)
    assert torch.equal(actual_where.cpu(), where)
    grad = torch.randn(expected.shape, dtype=torch.float64)
    expected.backward(grad)
    actual.backward(grad.to(DEV))
    close(xd.grad, x.grad, atol=0, rtol=0)
    assert ocl.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bernoulli_on_the_device_rng(dtype):
    """bernoulli_(p) by dropout's Philox on the device: values 0/1, the mean within 6 standard deviations of p
    over 2^17 elements (p = 0 all zeros, p = 1 all ones), the same seed the same draw, the next call a new one;
    a strided tensor, a tensor p (broadcast) and torch.bernoulli(probs) too; no fallback."""
    n = 1 << 17
    ocl.reset_fallback_counts()
    torch.manual_seed(7)
    first = torch.empty(n, dtype=dtype).to(DEV).bernoulli_(0.3).cpu()
    again = torch.empty(n, dtype=dtype).to(DEV).bernoulli_(0.3).cpu()
    torch.manual_seed(7)
    repeat = torch.empty(n, dtype=dtype).to(DEV).bernoulli_(0.3).cpu()
    assert first.dtype == dtype and ((first == 0) | (first == 1)).all()
    assert torch.equal(first, repeat) and not torch.equal(first, again)
    assert abs(first.sum().item() - n * 0.3) < 6 * (n * 0.3 * 0.7) ** 0.5
    assert not torch.empty(n, dtype=dtype).to(DEV).bernoulli_(0.0).cpu().any()
    assert torch.equal(torch.full((n,), 5, dtype=dtype).to(DEV).bernoulli_(1.0).cpu(), torch.ones(n, dtype=dtype))
    grid = torch.full((64, 64), 3, dtype=dtype).to(DEV)
    grid[:, ::2].bernoulli_(1.0)  # strided: only the even columns are written
    assert torch.equal(grid.cpu()[:, ::2], torch.ones(64, 32, dtype=dtype)) and (grid.cpu()[:, 1::2] == 3).all()
    rows = torch.tensor([[0.0], [1.0], [0.0], [1.0]], dtype=torch.float64).to(DEV)
    drawn = torch.empty(4, 1000, dtype=dtype).to(DEV).bernoulli_(rows).cpu()  # p broadcast over each row
    assert torch.equal(drawn, torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=dtype)[:, None].expand(4, 1000))
    probs = torch.full((n,), 0.3, dtype=dtype).to(DEV)
    sampled = torch.bernoulli(probs).cpu()
    assert ((sampled == 0) | (sampled == 1)).all() and abs(sampled.sum().item() - n * 0.3) < 6 * (n * 0.21) ** 0.5
    assert not [name for name in ocl.fallback_counts() if "bernoulli" in name]



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_and_normal_draw_on_the_device(dtype):
    """uniform_(from, to) and normal_(mean, std) by the device's Philox: over 2^16 elements the values lie in
    [from, to) with mean and variance within 6 standard errors of the distribution's, normal's mean and standard
    deviation likewise; the same seed the same draw, the next call a new one; a strided target writes only its
    elements; torch.rand / torch.randn and a Linear built on the device (kaiming_uniform_) run without a CPU
    fallback."""
    n = 1 << 16
    ocl.reset_fallback_counts()
    torch.manual_seed(3)
    first = torch.empty(n, dtype=dtype).to(DEV).uniform_(-2.0, 3.0).cpu()
    again = torch.empty(n, dtype=dtype).to(DEV).uniform_(-2.0, 3.0).cpu()
    torch.manual_seed(3)
    assert torch.equal(first, torch.empty(n, dtype=dtype).to(DEV).uniform_(-2.0, 3.0).cpu())
    assert not torch.equal(first, again) and first.dtype == dtype
    assert first.min() >= -2.0 and first.max() < 3.0
    assert abs(first.mean().item() - 0.5) < 6 * (25 / 12 / n) ** 0.5  # uniform variance (b - a)^2 / 12
    assert abs(first.var().item() - 25 / 12) < 6 * (25 / 12) * (0.8 / n) ** 0.5  # excess kurtosis -1.2
    drawn = torch.empty(n, dtype=dtype).to(DEV).normal_(1.5, 0.5).cpu()
    assert abs(drawn.mean().item() - 1.5) < 6 * 0.5 / n ** 0.5
    assert abs(drawn.std().item() - 0.5) < 6 * 0.5 / (2 * n) ** 0.5
    assert torch.isfinite(drawn).all() and (drawn - 1.5).abs().max() < 0.5 * 7  # Box-Muller's tails are finite
    grid = torch.full((64, 64), 7.0, dtype=dtype).to(DEV)
    grid[:, ::2].normal_()
    assert (grid.cpu()[:, 1::2] == 7).all() and (grid.cpu()[:, ::2] != 7).all()
    assert torch.rand(100, dtype=dtype, device=DEV).max() < 1 and torch.randn(100, dtype=dtype, device=DEV).std() > 0
    layer = torch.nn.Linear(64, 32, device=DEV, dtype=dtype)
    bound = 1 / 64 ** 0.5  # kaiming_uniform_(a=sqrt(5)) and the bias's uniform: within 1/sqrt(fan_in)
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound and layer.weight.std() > bound / 3
    assert not [name for name in ocl.fallback_counts() if "uniform" in name or "normal" in name]


def test_bernoulli_with_the_cpu_rng_matches_the_cpu(monkeypatch):
    from fade.ocl import philox
    monkeypatch.setattr(philox, "DROPOUT_RNG", "cpu")
    torch.manual_seed(5)
    expected = torch.empty(1000).bernoulli_(0.3)
    torch.manual_seed(5)
    close(torch.empty(1000).to(DEV).bernoulli_(0.3), expected)


def test_an_unknown_setting_warns_and_keeps_the_default(monkeypatch):
    from fade.ocl import settings
    monkeypatch.setenv("FADE_OCL_DROPOUT_RNG", "gpu")
    with pytest.warns(UserWarning, match="FADE_OCL_DROPOUT_RNG='gpu' is not one of device, cpu"):
        assert settings.env_choice("FADE_OCL_DROPOUT_RNG", "device", ("device", "cpu")) == "device"
    monkeypatch.setenv("FADE_OCL_DROPOUT_RNG", "cpu")
    assert settings.env_choice("FADE_OCL_DROPOUT_RNG", "device", ("device", "cpu")) == "cpu"


def test_logical_reductions_and_inf_tests():
    flags = torch.tensor([[True, False], [True, True]])
    close(flags.to(DEV).all(1), flags.all(1))
    close(flags.to(DEV).any(), flags.any())
    values = torch.tensor([float("nan"), 0.0, -float("inf"), float("inf")])
    for function in (torch.all, torch.any, torch.isneginf, torch.isposinf, torch.isinf, torch.isfinite, torch.isnan):
        close(function(values.to(DEV)), function(values))


def test_casts_to_bool_test_the_value_not_its_integer_part():
    """x.bool() is x != 0 in x's own type: converted to an integer first, -0.5 and 0.25 became 0 (False) and NaN
    undefined (fade ops' `bool` mismatched on the H200)."""
    x = torch.tensor([[-0.5, 0.25, 0.0], [-0.0, 2.5, float("nan")]])
    for dtype in (torch.float32, torch.float64):
        y = x.to(dtype)
        close(y.to(DEV).bool(), y.bool())
        close(y.to(DEV).t().bool(), y.t().bool())  # the strided kernel
        close(y.to(DEV).to(torch.bool), y.to(torch.bool))


def test_reductions_over_nothing_give_their_identity():
    """Over zero elements a sum is 0, a mean NaN, any false and all true, written into the output even though
    no element is read: the outputs came from the pool holding an earlier tensor's values (sum() of an empty
    tensor read 1.0 or 5e30, and any() true, so linalg.cholesky of an empty batch checked its errors past the
    end of the info tensor and crashed, in fade ops' cholesky_solve samples)."""
    for _ in range(2):
        (torch.ones(1024, device=DEV) * 7).sum()  # the pool holds sevens
        for shape, dim in (((0,), None), ((0, 3), 0), ((3, 0), 1), ((2, 0, 3), 1)):
            for dtype in (torch.float32, torch.int64, torch.int32):
                x = torch.zeros(shape, dtype=dtype)
                for function in ((torch.sum, torch.any, torch.all) if dtype != torch.float32 else
                                 (torch.sum, torch.mean, torch.any, torch.all)):
                    got = function(x.to(DEV)) if dim is None else function(x.to(DEV), dim)
                    want = function(x) if dim is None else function(x, dim)
                    torch.testing.assert_close(got.cpu(), want, equal_nan=True, msg=f"{function} {shape} {dtype}")
    batch = torch.zeros(0, 2, 2, device=DEV)
    assert torch.linalg.cholesky(batch).shape == (0, 2, 2)


def test_transformer_encoder_layer_trains_like_the_cpu_with_zero_fallbacks():
    """Attention's dropout draws its mask differently on the CPU (a fused attention kernel) and on ocl (the
    math path), so the comparison runs without dropout; dropout itself is compared above."""
    def run(device):
        return _seeded_losses(
            device, lambda: torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                                             batch_first=True),
            lambda: (torch.randn(2, 5, 16), torch.randn(16)),
            lambda layer, x, weights: (layer(x) * weights).mean().pow(2),
            lambda parameters: torch.optim.AdamW(parameters, lr=1e-2), steps=3)

    expected = run("cpu")
    ocl.reset_fallback_counts()
    actual = run(DEV)
    assert ocl.fallback_counts() == {}
    assert expected[-1] < expected[0]
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), atol=1e-6, rtol=1e-4)


def test_zoo_resnet18_trains_like_the_cpu_with_zero_fallbacks():
    """FADE's zoo resnet18 (the seed network) at 64x64, batch 4, two SGD steps. Smaller inputs leave batch norm
    statistics over 1x1 maps of 2-4 values, where the CPU's own gradients are rounding noise."""
    from fade.measure.zoo import vision

    def run(device):
        return _seeded_losses(
            device, lambda: vision.resnet18(num_classes=10),
            lambda: (torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,))),
            lambda model, x, y: torch.nn.functional.cross_entropy(model(x), y),
            lambda parameters: torch.optim.SGD(parameters, lr=0.01, momentum=0.9), steps=2)

    expected = run("cpu")
    ocl.reset_fallback_counts()
    actual = run(DEV)
    assert ocl.fallback_counts() == {}
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_ops_the_zoo_transformers_and_classifiers_need_run_natively():
    """arange, tril/triu, cat, tanh-approximated GELU and adaptive average pooling to 6x6/7x7 (alexnet, vgg16)
    ran on the CPU before; now each matches the CPU with no fallback."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 13, 11)
    m = torch.randn(3, 5, 6)
    ocl.reset_fallback_counts()
    close(torch.arange(3, 40, 3, device=DEV), torch.arange(3, 40, 3))
    close(torch.arange(7, device=DEV, dtype=torch.float32), torch.arange(7, dtype=torch.float32))
    close(torch.arange(0.5, 2.0, 0.25, device=DEV), torch.arange(0.5, 2.0, 0.25))
    for diagonal in (-1, 0, 2):
        close(torch.tril(m.to(DEV), diagonal), torch.tril(m, diagonal))
        close(torch.triu(m.to(DEV), diagonal), torch.triu(m, diagonal))
    inplace = m.to(DEV)
    inplace.tril_()
    close(inplace, m.tril())
    close(torch.cat([m.to(DEV), m[:, :2].to(DEV), torch.empty(0).to(DEV)], 1), torch.cat([m, m[:, :2]], 1))
    close(torch.cat([m.to(DEV), m.int().to(DEV)], 0), torch.cat([m, m.int()], 0))
    g = torch.randn(50, requires_grad=True)
    g_ocl = g.detach().to(DEV).requires_grad_()
    y, y_ocl = torch.nn.functional.gelu(g, approximate="tanh"), torch.nn.functional.gelu(g_ocl, approximate="tanh")
    y.sum().backward()
    y_ocl.sum().backward()
    close(y_ocl, y, atol=1e-6, rtol=1e-5)
    close(g_ocl.grad, g.grad, atol=1e-6, rtol=1e-5)
    for size in ((6, 6), (7, 7), (4, 5), (1, 1), (13, 11)):
        xr = x.clone().requires_grad_()
        x_ocl = x.to(DEV).requires_grad_()
        pooled = torch.nn.functional.adaptive_avg_pool2d(xr, size)
        pooled_ocl = torch.nn.functional.adaptive_avg_pool2d(x_ocl, size)
        grad = torch.randn_like(pooled)
        pooled.backward(grad)
        pooled_ocl.backward(grad.to(DEV))
        close(pooled_ocl, pooled, atol=1e-6, rtol=1e-5)
        close(x_ocl.grad, xr.grad, atol=1e-6, rtol=1e-5)
    assert ocl.fallback_counts() == {}


def test_long_reductions_keep_the_cpus_accuracy():
    """A long, cancelling sum (batch norm's gradient sums look like this) summed in float one element after
    another loses ~1e-3 of its value; in parts and in double (where the device has fp64) it keeps the CPU's."""
    torch.manual_seed(0)
    x = torch.randn(3, 200_000) + 1000.0
    x = x - x.double().mean(1, keepdim=True).float()
    expected = x.double().sum(1)
    got = x.to(DEV).sum(1).cpu().double()
    cpu_error = (x.sum(1).double() - expected).abs().max().item()
    assert (got - expected).abs().max().item() <= max(4 * cpu_error, 1e-3)
    close(x.to(DEV).mean(1), x.mean(1), atol=1e-6, rtol=1e-4)
    close(x.to(DEV).amax(1), x.amax(1))
    with_nan = x.clone()
    with_nan[1, 150_000] = float("nan")
    close(with_nan.to(DEV).amax(1), with_nan.amax(1))
    close(with_nan.to(DEV).sum(1), with_nan.sum(1), atol=1e-2, rtol=1e-4)


def test_batch_norm_legit_runs_natively():
    """`_native_batch_norm_legit` is the form batch norm takes under FlopCounterMode (fade bench's FLOP count)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    for training in (True, False):
        mean, var = torch.randn(3), torch.rand(3) + 0.5
        mean_ocl, var_ocl = mean.to(DEV), var.to(DEV)
        ocl.reset_fallback_counts()
        got = torch.ops.aten._native_batch_norm_legit(x.to(DEV), None, None, mean_ocl, var_ocl, training, 0.1, 1e-5)
        expected = torch.ops.aten._native_batch_norm_legit(x, None, None, mean, var, training, 0.1, 1e-5)
        assert ocl.fallback_counts() == {}
        close(got[0], expected[0], atol=1e-5, rtol=1e-5)
        close(mean_ocl, mean, atol=1e-6, rtol=1e-5)
        close(var_ocl, var, atol=1e-6, rtol=1e-5)


def test_cached_meta_results_follow_dtypes_scalars_and_strides():
    """Elementwise ops reuse their meta result by the arguments' geometry, dtypes and scalars: the same shapes
    with another dtype, another scalar type or other strides must still get their own result."""
    i = torch.arange(6).reshape(2, 3)
    f = i.float()
    for x, y in ((f, f), (i, f), (i, i)):
        got = x.to(DEV) + y.to(DEV)
        assert got.dtype == (x + y).dtype
        close(got, x + y)
    for scalar in (2, 2.5, True):
        got = i.to(DEV) * scalar
        assert got.dtype == (i * scalar).dtype
        close(got, i * scalar)
    t = f.to(DEV).t()  # the same values, transposed strides: the output keeps the input's layout as on the CPU
    got = t + 1
    assert got.shape == (3, 2) and got.stride() == (f.t() + 1).stride()
    close(got, f.t() + 1)


@pytest.mark.parametrize("fold_pixels", [1, 1 << 30])  # every convolution per image; every one folded
def test_conv2d_folded_and_per_image_paths_equal_the_cpu_in_float64(fold_pixels, monkeypatch):
    """Both GEMM layouts of the im2col convolution (one strided-batched GEMM per image, or every image of a chunk
    in one GEMM and a permuting copy) and the direct 1x1 one, against the CPU in float64."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "FOLD_PIXELS", fold_pixels)
    monkeypatch.setattr(convolution, "CONV_WORKSPACE_BYTES", 20000)  # chunks of a few images
    torch.manual_seed(0)
    for cin, cout, kernel, stride, padding, groups in ((4, 6, 3, 1, 1, 1), (4, 6, 3, 2, 1, 2), (6, 8, 1, 1, 0, 2)):
        conv_matches_the_cpu(torch.randn(5, cin, 7, 6, dtype=torch.float64),
                             torch.nn.Conv2d(cin, cout, kernel, stride, padding, groups=groups, dtype=torch.float64),
                             atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("kernel", ["128x128t16x8", "128x64t8x8", "32x64", "128x128t16x8/split", "64x64/generic"])
def test_tiled_gemm_equals_the_cpu_in_every_transposition(kernel, monkeypatch):
    """mm, addmm (alpha and beta), bmm and linear through kernels/tiled_gemm.cl (gemm_kernel patched to one
    kernel): either operand transposed or not, sizes off the tiles' multiples, float32 and float64; the split
    kernel over a long k (its partial products summed by sum_pieces), and bmm unsplit. One launch per product.
    float64, and addmm's self read in place in every broadcast, for the two cheapest programs only (32 x 64 and
    the generic kernel; each geometry and dtype is a program PoCL builds, 1-3 s each for 16 x 8 per item, and
    the source is one for all tilings). The generic kernel (shape and strides as arguments) builds one program
    per operand layout for all the shapes."""
    from fade.ocl import gemm

    monkeypatch.setattr(gemm, "gemm_kernel", lambda *args: kernel)
    torch.manual_seed(0)
    k = 1100 if kernel.endswith("/split") else 37
    programs = runtime.device(0).programs
    before = set(programs)
    cheap = kernel in ("32x64", "64x64/generic")
    for dtype in (torch.float32, torch.float64) if cheap else (torch.float32,):
        tolerance = {"atol": 1e-10, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
        for trans_a, trans_b in itertools.product((False, True), repeat=2):
            a = torch.randn(k, 130, dtype=dtype).t() if trans_a else torch.randn(130, k, dtype=dtype)
            b = torch.randn(70, k, dtype=dtype).t() if trans_b else torch.randn(k, 70, dtype=dtype)
            c = torch.randn(130, 70, dtype=dtype)
            a_ocl = a.t().contiguous().to(DEV).t() if trans_a else a.to(DEV)
            b_ocl = b.t().contiguous().to(DEV).t() if trans_b else b.to(DEV)
            close(a_ocl @ b_ocl, a @ b, **tolerance)
            close(torch.addmm(c.to(DEV), a_ocl, b_ocl, beta=0.5, alpha=2.0), torch.addmm(c, a, b, beta=0.5, alpha=2.0),
                  **tolerance)
        x, y = torch.randn(3, 20, k, dtype=dtype), torch.randn(3, k, 9, dtype=dtype)
        with ocl.profile(0) as times:
            close(torch.bmm(x.to(DEV), y.to(DEV)), torch.bmm(x, y), **tolerance)
        gemms = [row for row in times.table(by="kernel") if "gemm" in row["kernel"].lower()]
        assert [(row["kernel"], row["calls"]) for row in gemms] == [("tiled_gemm", 1)]
        w, bias = torch.randn(6, k, dtype=dtype), torch.randn(6, dtype=dtype)
        with ocl.profile(0) as times:
            close(torch.nn.functional.linear(x[0].to(DEV), w.to(DEV), bias.to(DEV)),
                  torch.nn.functional.linear(x[0], w, bias), **tolerance)
        launched = {row["kernel"] for row in times.table(by="kernel") if not row["kernel"].startswith("copy")}
        # addmm's bias read by the unsplit kernel's beta term in place (stride 0 down the rows); split, copied first
        assert launched == ({"tiled_gemm", "sum_pieces", "pointwise"} if kernel.endswith("/split") else
                            {"tiled_gemm"}), launched
        # self down the columns (m x 1), one element for all, and an m x n view with strides (2, 40)
        for self_ in (torch.randn(20, 1, dtype=dtype), bias[:1], torch.randn(6, 40, dtype=dtype)[:, ::2].t()) \
                if cheap else ():
            close(torch.addmm(self_.to(DEV), x[0].to(DEV), w.t().to(DEV), beta=0.5, alpha=2.0),
                  torch.addmm(self_, x[0], w.t(), beta=0.5, alpha=2.0), **tolerance)
    if kernel.endswith("/generic"):
        # a long k under few tiles (a small convolution's weight gradient) splits along k, in every transposition:
        # the same program (the split is an argument), then sum_pieces
        for trans_a, trans_b in itertools.product((False, True), repeat=2):
            a = torch.randn(3000, 20).t() if trans_a else torch.randn(20, 3000)
            b = torch.randn(9, 3000).t() if trans_b else torch.randn(3000, 9)
            a_ocl = a.t().contiguous().to(DEV).t() if trans_a else a.to(DEV)
            b_ocl = b.t().contiguous().to(DEV).t() if trans_b else b.to(DEV)
            with ocl.profile(0) as times:
                close(a_ocl @ b_ocl, a @ b, atol=1e-4, rtol=1e-4)
            assert {row["kernel"] for row in times.table(by="kernel") if not row["kernel"].startswith("copy")} == \
                {"tiled_gemm", "sum_pieces"}
        # products of 130 x 70, 20 x 9 (bmm), 20 x 6 (linear), 20 x 9 split, ...: a program per
        built = [key[1] for key in set(programs) - before if key[0] == "tiled_gemm"]  # layout and dtype
        assert all("RUNTIME_GEOMETRY 1\n" in src for src in built) and len(built) <= 8, len(built)
    if kernel in ("128x64t8x8", "32x64"):  # the T4 load path, shared by the tilings (two T4s per item and one)
        # T4 loads from global memory (VA / VB): extents and strides multiples of 4 but not of the tiles, in every
        # transposition, batched, and at offsets that allow them (a multiple of 4) and that do not
        programs = runtime.device(0).programs
        before = set(programs)
        k = 40
        for trans_a, trans_b in itertools.product((False, True), repeat=2):
            a = torch.randn(k, 132).t() if trans_a else torch.randn(132, k)
            b = torch.randn(68, k).t() if trans_b else torch.randn(k, 68)
            a_ocl = a.t().contiguous().to(DEV).t() if trans_a else a.to(DEV)
            b_ocl = b.t().contiguous().to(DEV).t() if trans_b else b.to(DEV)
            close(a_ocl @ b_ocl, a @ b, atol=1e-4, rtol=1e-4)
        x, y = torch.randn(3, 20, k), torch.randn(3, k, 12)
        close(torch.bmm(x.to(DEV), y.to(DEV)), torch.bmm(x, y), atol=1e-4, rtol=1e-4)
        wide = torch.randn(140, k + 8)
        for rows, cols in ((slice(4, 136), slice(4, k + 4)), (slice(3, 135), slice(1, k + 1))):
            close(wide.to(DEV)[rows, cols] @ b_ocl, wide[rows, cols] @ b, atol=1e-4, rtol=1e-4)
        built = [key[1] for key in set(programs) - before if key[0] == "tiled_gemm"]
        flags = {("VA 1\n" in src, "VB 1\n" in src, "A_K1 1\n" in src, "B_K1 1\n" in src) for src in built}
        assert {(True, True, a_k1, b_k1) for a_k1 in (0, 1) for b_k1 in (0, 1)} <= flags  # every layout as T4s
        assert any(not va for va, *_ in flags)  # the offset of 1 read A element by element
    # whole tiles (the kernel built without edge guards), and for split a k of whole slices
    a, b = torch.randn(128, 1024 if kernel.endswith("/split") else 64), torch.randn(1024 if kernel.endswith(
        "/split") else 64, 128)
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)
    assert not [name for name in ocl.fallback_counts() if "mm" in name or "linear" in name]


def test_inference_mode_copies_of_views_equal_the_cpu():
    """Under torch.inference_mode, an expanded view of a tensor made outside it (a model's weights, a KV cache)
    is copied, reshaped and attended over as on the CPU: the views fade.ocl makes inside its kernels stay normal
    tensors (autograd gives them the base's version counter, which an inference tensor refuses); a base made
    inside inference mode too."""
    torch.manual_seed(0)
    outside = torch.randn(2, 4, 8)
    with torch.inference_mode():
        inside = torch.randn(2, 4, 8).to(DEV)
    for base, cpu in ((outside.to(DEV), outside), (inside, inside.cpu())):
        with torch.inference_mode():
            close(base[:, None].expand(2, 3, 4, 8).contiguous(), cpu[:, None].expand(2, 3, 4, 8).contiguous())
            close(base[:, None].expand(2, 3, 4, 8).reshape(2, 12, 8), cpu[:, None].expand(2, 3, 4, 8).reshape(2, 12, 8))
            attend = torch.nn.functional.scaled_dot_product_attention
            close(attend(base[None], base[None], base[None], is_causal=True),
                  attend(cpu[None], cpu[None], cpu[None], is_causal=True), atol=1e-5, rtol=1e-5)


def test_a_pool_miss_finds_old_dead_buffers_by_a_full_sweep(monkeypatch):
    """Buffers of tensors that died while newer ones live (an eager training step's outputs and gradients, dead
    by the next step) are found by the full sweep the allocator makes on a miss once FULL_SWEEP_ALLOCATIONS
    allocations went by: a pool miss's look at the newest tensors does not reach them, and before, each such
    miss made a new OpenCL buffer until 256 MB were made."""
    monkeypatch.setattr(runtime, "FULL_SWEEP_ALLOCATIONS", 100)
    ocl.empty_cache()
    dev = runtime.device(0)
    old = [torch.empty(12345, device=DEV) for _ in range(150)]  # 49380 bytes: pool size 65536
    newer = [torch.empty(777, device=DEV) for _ in range(150)]  # another pool size, alive throughout
    del old
    held = dev.held_bytes
    again = [torch.empty(12345, device=DEV) for _ in range(150)]
    assert dev.held_bytes - held <= 100 * 65536  # without the full sweep: all 150 new
    del newer, again


def test_gemm_kernel_is_measured_once_per_shape_and_kept(monkeypatch):
    """FADE_OCL_GEMM_OWN=measure: the first GEMM of a shape times CLBlast and the tiled kernels into a scratch
    output (the real output is written once, right, whichever won: addmm's beta reads it), the choice is kept,
    and the next call of the shape measures nothing."""
    from fade.ocl import gemm

    monkeypatch.setattr(gemm, "GEMM_OWN", "measure")
    monkeypatch.setattr(gemm, "gemm_kernels", {})
    torch.manual_seed(0)
    a, b, c = torch.randn(130, 37), torch.randn(37, 70), torch.randn(130, 70)
    close(torch.addmm(c.to(DEV), a.to(DEV), b.to(DEV), beta=0.5), torch.addmm(c, a, b, beta=0.5), atol=1e-4,
          rtol=1e-4)
    assert len(gemm.gemm_kernels) == 1
    chosen = dict(gemm.gemm_kernels)
    assert set(chosen.values()) <= {"clblast", *gemm.tiled_options(runtime.device(0), 130, 70, 37, 1)}
    with ocl.profile(0) as times:
        close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)
    assert gemm.gemm_kernels == chosen
    assert sum(row["calls"] for row in times.table(by="kernel") if "gemm" in row["kernel"].lower()) == 1  # measured no more


def test_auto_measures_only_gemms_worth_their_builds(monkeypatch):
    """FADE_OCL_GEMM_OWN=auto on a GPU measures a GEMM of at least GEMM_MEASURE_FLOPS and gives a smaller one to
    the tiled kernel's runtime-geometry program without measuring (measuring builds a program per tiling: minutes
    of a first step over a network's many small products; CLBlast's host cost per call is ~130 us); off a GPU,
    nothing is measured and CLBlast runs."""
    import dataclasses

    from fade.ocl import gemm

    dev = runtime.device(0)
    monkeypatch.setattr(gemm, "GEMM_OWN", "auto")
    monkeypatch.setattr(gemm, "gemm_kernels", {})
    monkeypatch.setattr(gemm, "GEMM_MEASURE_FLOPS", 2 * 130 * 70 * 37)
    torch.manual_seed(0)
    a, b, small = torch.randn(130, 37), torch.randn(37, 70), torch.randn(130, 36)
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)
    assert gemm.gemm_kernels == {}  # not a GPU
    monkeypatch.setattr(dev, "info", dataclasses.replace(dev.info, kind="gpu"))
    with ocl.profile(0) as times:
        close(small.to(DEV) @ b[:36].to(DEV), small @ b[:36], atol=1e-4, rtol=1e-4)
    assert gemm.gemm_kernels == {}  # below the threshold: unmeasured, the generic tiled kernel
    assert [row["kernel"] for row in times.table(by="kernel") if "emm" in row["kernel"]] == ["tiled_gemm"]
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)
    assert len(gemm.gemm_kernels) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_split_k_gemm_equals_the_cpu(dtype, monkeypatch):
    """A small output with a long k is computed as pieces of k summed by a kernel (a weight gradient's shape);
    with beta, a transposed operand and a leftover of k that is not a whole piece."""
    from fade.ocl import gemm

    monkeypatch.setattr(gemm, "SPLIT_K_CHUNK", 64)
    torch.manual_seed(0)
    a, b, c = torch.randn(5, 1000, dtype=dtype), torch.randn(3, 1000, dtype=dtype), torch.randn(5, 3, dtype=dtype)
    tolerance = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-5}
    close(a.to(DEV) @ b.to(DEV).t(), a @ b.t(), **tolerance)
    close(torch.addmm(c.to(DEV), a.to(DEV), b.to(DEV).t(), beta=0.5, alpha=2.0),
          torch.addmm(c, a, b.t(), beta=0.5, alpha=2.0), **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_equals_the_cpu(dtype, affine, training):
    """The fused kernels: statistics over N x H x W in parts (the image is larger than one part), running
    statistics, all three gradients, eval mode from the running statistics; a shifted input (mean 5) checks
    the variance against cancellation."""
    torch.manual_seed(0)
    results = []
    for device in ("cpu", DEV):
        bn = torch.nn.BatchNorm2d(3, affine=affine, dtype=dtype)
        if affine:
            with torch.no_grad():
                bn.weight.copy_(torch.tensor([0.5, 1.0, 2.0])), bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        bn.running_mean.fill_(0.5), bn.running_var.fill_(2.0)
        bn.train(training)
        bn = bn.to(device)
        torch.manual_seed(1)
        x = (torch.randn(4, 3, 70, 60, dtype=dtype) * 3 + 5).to(device).requires_grad_()
        y = bn(x)
        y.backward(torch.randn(y.shape, dtype=dtype).to(device))
        results.append([y, x.grad, bn.running_mean, bn.running_var] +
                       ([bn.weight.grad, bn.bias.grad] if affine else []))
    tolerance = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}
    for got, expected in zip(results[1], results[0]):
        close(got, expected.detach(), **tolerance)


def test_kernel_profile_labels_commands_and_sums_device_time():
    a, b = torch.randn(64, 32).to(DEV), torch.randn(32, 16).to(DEV)
    ocl.synchronize()
    with ocl.profile(0, steps=2) as times:
        for _ in range(2):
            (a @ b).relu().sum()
            a.clone()
    rows = {row["kernel"]: row for row in times.table("kernel")}
    assert {"Sgemm", "pointwise", "reduce_rows", "copy"} <= set(rows), rows
    assert rows["Sgemm"]["calls"] == 1 and rows["pointwise"]["calls"] >= 1  # per step
    assert any(row["kernel"] == "Sgemm NN 64x16x32" for row in times.table())
    assert times.device_s > 0 and times.wall_s >= times.device_s and 0 <= times.host_bound < 1
    assert abs(sum(row["share"] for row in times.table()) - 1) < 1e-9
    assert runtime.device(0).recording is None  # recording stops with the block


def test_convolution_layout_is_measured_once_per_shape_and_cached(monkeypatch):
    """With CONV_BENCHMARK on, the first call of a shape times both GEMM layouts and keeps the faster; the
    result is the CPU's whichever won, and the next call of the shape reuses the choice."""
    from fade.ocl import convolution

    monkeypatch.setattr(convolution, "CONV_BENCHMARK", "on")
    monkeypatch.setattr(convolution, "conv_layouts", {})
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1, dtype=torch.float64)
    x = torch.randn(3, 4, 8, 8, dtype=torch.float64)
    conv_ocl, x_ocl = conv_matches_the_cpu(x, conv, atol=1e-12, rtol=1e-10)
    assert len(convolution.conv_layouts) == 2  # the forward and the backward shape, each measured once
    layouts = dict(convolution.conv_layouts)
    close(conv_ocl(x_ocl), conv(x).detach(), atol=1e-12, rtol=1e-10)
    assert convolution.conv_layouts == layouts


def test_a_spent_build_budget_stops_measuring_what_builds_programs_per_shape(monkeypatch):
    """densenet161's ~80 convolution widths kept its first eager step building programs for more than 540 s on
    the H200 (results/s22-h200/A): every shape measured each layout and each GEMM tiling, a program apiece. Builds
    are counted and timed per device; once BUILD_BUDGET_S is spent (FADE_OCL_BUILD_BUDGET=auto) a new
    convolution takes its default layout unmeasured, and a new GEMM is measured against CLBlast and the tiled
    kernel's runtime-geometry programs only (shared by every shape). Shapes measured before keep their choice;
    results stay the CPU's."""
    import dataclasses

    from fade.ocl import convolution, gemm

    dev = runtime.device(0)
    builds = dev.builds
    dev.kernel("probe_build", "__kernel void probe_build(__global float* x) { x[0] = 1.0f; }")
    assert dev.builds == builds + 1 and dev.build_s > 0
    monkeypatch.setattr(dev, "info", dataclasses.replace(dev.info, kind="gpu"))
    for module in (gemm, convolution):
        monkeypatch.setattr(module, "GEMM_OWN" if module is gemm else "CONV_BENCHMARK", "auto")
    monkeypatch.setattr(gemm, "gemm_kernels", {})
    monkeypatch.setattr(convolution, "conv_layouts", {})
    monkeypatch.setattr(gemm, "GEMM_MEASURE_FLOPS", 2 * 130 * 70 * 37)
    monkeypatch.setattr(runtime, "BUILD_BUDGET", "auto")
    monkeypatch.setattr(runtime, "BUILD_BUDGET_S", dev.build_s + 3600.0)  # not spent yet
    torch.manual_seed(0)
    a, b = torch.randn(130, 37), torch.randn(37, 70)
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)
    first = dict(gemm.gemm_kernels)
    assert len(first) == 1 and set(first.values()) <= {"clblast", *gemm.tiled_options(dev, 130, 70, 37, 1)}
    x = torch.randn(3, 4, 8, 8)
    conv_matches_the_cpu(x, torch.nn.Conv2d(4, 6, 3, padding=1), atol=1e-4, rtol=1e-4)
    assert len(convolution.conv_layouts) == 2  # the forward and the backward shape
    monkeypatch.setattr(runtime, "BUILD_BUDGET_S", 0.0)  # spent
    offered = []
    fastest = gemm.measured.fastest

    def spy(dev, table, key, options, run, **kwargs):
        offered.append(options)
        return fastest(dev, table, key, options, run, **kwargs)

    monkeypatch.setattr(gemm.measured, "fastest", spy)
    wide = torch.randn(37, 90)
    close(a.to(DEV) @ wide.to(DEV), a @ wide, atol=1e-4, rtol=1e-4)
    new = {key: value for key, value in gemm.gemm_kernels.items() if key not in first}
    assert len(new) == 1 and len(offered) == 1 and "clblast" in offered[0] and len(offered[0]) > 1
    assert all(option == "clblast" or option.endswith("/generic") for option in offered[0])
    close(a.to(DEV) @ b.to(DEV), a @ b, atol=1e-4, rtol=1e-4)  # measured before: kept
    assert {key: gemm.gemm_kernels[key] for key in first} == first
    conv_matches_the_cpu(x, torch.nn.Conv2d(4, 6, 3, padding=1, stride=2), atol=1e-4, rtol=1e-4)
    assert len(convolution.conv_layouts) == 2  # the new shape took its default layouts, unmeasured
    monkeypatch.setattr(runtime, "BUILD_BUDGET", "off")
    assert not dev.builds_spent()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_foreach_inplace_ops_run_as_multi_tensor_kernels_and_equal_the_cpu(dtype, monkeypatch):
    """SGD's in-place foreach ops over many tensors of mixed sizes (more than one launch's width, empty ones
    among them) as multi-tensor kernels (forced on: by default only GPUs use them), large tensors in launches of
    their own; a non-contiguous tensor sends the op the per-tensor way."""
    from fade.ocl import foreach

    monkeypatch.setattr(foreach, "FOREACH_FUSED", "on")
    torch.manual_seed(0)
    sizes = [(3,), (5, 7), (100,), (1,), (0,), (33, 3, 3)] * 4
    for contiguous, alone, per_op in ((True, 1 << 20, 2), (False, 1 << 20, 0), (True, 200, 5)):
        monkeypatch.setattr(foreach, "FOREACH_ALONE", alone)  # 200: the four 297-element tensors alone
        host = [torch.randn(size, dtype=dtype) for size in sizes]
        other = [torch.randn_like(t) for t in host]
        dev_host, dev_other = [t.to(DEV) for t in host], [t.to(DEV) for t in other]
        if not contiguous:
            host[1], dev_host[1] = host[1].t(), dev_host[1].t()
            other[1], dev_other[1] = other[1].t(), dev_other[1].t()
        ocl.synchronize()
        with ocl.profile() as times:
            for tensors, others in ((host, other), (dev_host, dev_other)):
                torch._foreach_add_(tensors, others, alpha=0.3)
                torch._foreach_mul_(tensors, 0.9)
                torch._foreach_add_(tensors, 1.5)
                torch._foreach_mul_(tensors, others)
        launches = sum(1 for label, _ in times.commands if label.startswith("foreach"))
        assert launches == 4 * per_op  # 20 non-empty tensors: 2 launches of up to 16, or 4 alone and 1 of 16
        for got, expected in zip(dev_host, host):
            close(got, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adam_and_adamw_foreach_steps_run_as_multi_tensor_kernels_like_the_cpu(dtype, monkeypatch):
    """Adam's and AdamW's multi-tensor steps (lerp_, mul_, addcmul_, sqrt, div_ and addcdiv_ by lists of scalars,
    weight decay) as multi-tensor kernels (forced on): parameters equal the CPU's after three steps, and a step
    after the first (which makes the state) runs no optimizer op per tensor."""
    from fade.ocl import foreach

    monkeypatch.setattr(foreach, "FOREACH_FUSED", "on")
    torch.manual_seed(0)
    sizes = [(3,), (5, 7), (100,), (1,), (33, 3, 3)] * 4
    for make in (lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
                 lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)):
        params = [torch.randn(size, dtype=dtype) for size in sizes]
        grads = [[torch.randn(size, dtype=dtype) for size in sizes] for _ in range(3)]
        results = []
        for device in ("cpu", DEV):
            leaves = [p.clone().to(device).requires_grad_() for p in params]
            optimizer = make(leaves)
            uploaded = [[grad.to(device) for grad in step] for step in grads]
            for index, step in enumerate(uploaded):  # the first step makes the state (zeros), then profiled
                for leaf, grad in zip(leaves, step):
                    leaf.grad = grad
                ocl.synchronize()
                with ocl.profile() as times:
                    optimizer.step()
            results.append(leaves)
        labels = [label for label, _ in times.commands]
        assert labels and all(label.startswith("foreach") for label in labels), set(labels)
        assert len(labels) <= 8 * 2  # 20 tensors: 2 launches an op, at most 8 ops a step
        for got, expected in zip(results[1], results[0]):
            close(got.detach(), expected.detach(), atol=1e-6, rtol=1e-5)


def test_a_training_step_reads_nothing_back_to_the_host():
    """No hidden sync: cross-entropy's backward divides by its total weight on the device (it used to read it
    back each step), so a whole SGD step enqueues no device-to-host copy."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).to(DEV)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, target = torch.randn(5, 6).to(DEV), torch.tensor([0, 2, 1, 1, 0]).to(DEV)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), target).backward()
        optimizer.step()

    step()
    with ocl.profile() as times:
        step()
    labels = {label for label, _ in times.commands}
    assert "copy device-to-host" not in labels and any(label.startswith("nll") for label in labels), labels


DEEPCOPY_CHILD = """
import copy, torch, fade.ocl as ocl
ocl.register()
base = torch.arange(24.0).view(4, 6).to("ocl:0")
first, second = copy.deepcopy([base, base.t()[1:3]])
assert first.untyped_storage()._cdata == second.untyped_storage()._cdata != base.untyped_storage()._cdata
first.add_(1)
assert torch.equal(first.cpu(), torch.arange(24.0).view(4, 6) + 1) and torch.equal(second.cpu(), first.cpu().t()[1:3])
assert torch.equal(base.cpu(), torch.arange(24.0).view(4, 6))
leaf = torch.ones(3).to("ocl:0").requires_grad_()
leaf.sum().backward()
twin = copy.deepcopy(leaf)
assert twin.requires_grad and torch.equal(twin.grad.cpu(), torch.ones(3))
assert copy.deepcopy(torch.empty(0, 3).to("ocl:0")).shape == (0, 3)
assert base.untyped_storage().clone().device.type == "ocl"
print("deepcopy ok")
"""


def test_deepcopy_of_device_tensors_copies_them_on_the_device_without_killing_the_interpreter():
    """Issue 30: copy.deepcopy of an ocl tensor went through torch.UntypedStorage(n, device="ocl"), which needs a
    C++ allocator a Python backend has not, and the process died of a segfault. It runs in a process of its own, so
    a crash fails this check with its exit status and the other checks still run."""
    child = subprocess.run([sys.executable, "-c", DEEPCOPY_CHILD], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and "deepcopy ok" in child.stdout, (child.returncode, child.stderr[-3000:])


INTEGERS = torch.tensor([-7, -6, -3, -1, 0, 1, 3, 6, 7, 10, 2**40, -(2**40)])
DIVISORS = torch.tensor([3, -4, 2, -1, 5, 7, -3, 4, -2, 3, 7, -1])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_remainder_ceil_floor_and_pow_build_and_equal_the_cpu(dtype):
    """Issue 30: int64 `%`, ceil, floor and pow did not build (OpenCL C has no integer ceil or pow) or did not
    dispatch (a wrapped scalar reached the op as a Python number). remainder follows Python's sign rule, ceil and
    floor of an integer are the identity, integer pow wraps as the CPU's does."""
    x, y = INTEGERS.to(dtype) if dtype == torch.int64 else INTEGERS.clamp(-1000, 1000).to(dtype), DIVISORS.to(dtype)
    ocl.reset_fallback_counts()
    for actual, expected in [(x.to(DEV) % y.to(DEV), x % y), (x.to(DEV) % 3, x % 3), (x.to(DEV) % -4, x % -4),
                             (torch.remainder(7, y.to(DEV)), torch.remainder(7, y)),
                             (torch.ceil(x.to(DEV)), torch.ceil(x)), (torch.floor(x.to(DEV)), torch.floor(x)),
                             (x.to(DEV) ** 2, x ** 2), (x.to(DEV) ** 3, x ** 3),
                             (torch.pow(x.to(DEV), y.abs().to(DEV)), torch.pow(x, y.abs())),
                             (torch.pow(2, y.abs().to(DEV)), torch.pow(2, y.abs())),
                             (x.to(DEV).t().t()[::2] % 5, x[::2] % 5)]:
        assert actual.dtype == expected.dtype
        assert torch.equal(actual.cpu(), expected)
    base = torch.tensor([1, -1, 2, -2, 0], dtype=dtype)
    exponent = torch.tensor([-3, -3, -1, -2, 5], dtype=dtype)
    assert torch.equal(torch.pow(base.to(DEV), exponent.to(DEV)).cpu(), torch.pow(base, exponent))
    in_place = x.to(DEV)
    in_place.remainder_(3)
    assert torch.equal(in_place.cpu(), x % 3)
    assert ocl.fallback_counts() == {}


def test_an_integer_remainder_by_zero_gives_zero_instead_of_trapping():
    """The CPU raises ZeroDivisionError and CUDA's result is undefined; on a CPU OpenCL device a division by zero
    (or INT64_MIN % -1) traps and kills the process, so the kernel never divides by 0 or -1."""
    x = torch.tensor([5, -5, -(2**63)])
    assert torch.equal((x.to(DEV) % torch.tensor([0, 0, -1]).to(DEV)).cpu(), torch.tensor([0, 0, 0]))


def test_float_remainder_follows_the_divisors_sign_like_the_cpu():
    x = torch.tensor([5.5, -5.5, 5.0, -5.0, 0.25, float("inf"), float("nan")])
    y = torch.tensor([2.0, 2.0, -2.5, 2.5, -1.0, 2.0, 3.0])
    close(x.to(DEV) % y.to(DEV), x % y)
    close(x.to(DEV) % 1.5, x % 1.5)
    close(torch.pow(x.abs().to(DEV), 2), torch.pow(x.abs(), 2))
    close(torch.ceil(x.to(DEV)), torch.ceil(x))


def test_ops_given_a_wrapped_scalar_fall_back_to_the_cpu_instead_of_failing():
    """fmod(x, 3) reaches the backend with 3 as a Python number in a Tensor argument; the CPU fallback must call
    the op with a tensor again (it failed with "Expected a value of type 'Tensor'")."""
    x = torch.tensor([-7, 3, 5])
    assert torch.equal(torch.fmod(x.to(DEV), 3).cpu(), torch.fmod(x, 3))
    assert torch.equal((x.to(DEV) ^ 3).cpu(), x ^ 3)
    close(torch.fmod(x.double().to(DEV), 2.5), torch.fmod(x.double(), 2.5))


BFLOAT16_SOURCES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", BFLOAT16_SOURCES)
def test_casts_to_and_from_bfloat16_run_on_the_device_and_round_like_the_cpu(dtype):
    """Issue 30: casting to bfloat16 on the device raised NotImplementedError. bfloat16 words are cast by a kernel
    that rounds to nearest even (ties included), with any strides, and no op falls back to the CPU."""
    x = torch.randn(6, 5) * 100
    x[0, :3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    x[1, :3] = torch.tensor([1.00390625, 1.01171875, 3.0e38])  # 1 + 2^-8 and 1 + 3 * 2^-8 are ties
    host = x.to(dtype) if dtype.is_floating_point else x.nan_to_num(0, 0, 0).clamp(0, 255).to(dtype)
    ocl.reset_fallback_counts()
    device = host.to(DEV).to(torch.bfloat16)
    assert device.dtype == torch.bfloat16 and device.device.type == "ocl"
    exact = dict(rtol=0, atol=0)
    close(device, host.to(torch.bfloat16), **exact)
    close(device.to(dtype), host.to(torch.bfloat16).to(dtype), **exact)
    close(host.to(DEV).t()[1:4].to(torch.bfloat16), host.t()[1:4].to(torch.bfloat16), **exact)
    close(device.t()[1:4].to(dtype), host.to(torch.bfloat16).t()[1:4].to(dtype), **exact)
    close(device.t().contiguous(), host.to(torch.bfloat16).t().contiguous(), **exact)
    assert ocl.fallback_counts() == {}


def test_channels_last_layouts_are_the_ones_asked_for():
    """contiguous(channels_last), .to(memory_format=...) and empty(memory_format=...) give torch's channels-last
    strides on ocl (the memory format was once ignored: a channels-last variant then measured NCHW), values kept."""
    x = torch.randn(2, 3, 4, 5)
    expected = x.contiguous(memory_format=torch.channels_last).stride()
    on = x.to(DEV)
    for got in (on.contiguous(memory_format=torch.channels_last), on.to(memory_format=torch.channels_last)):
        assert got.stride() == expected and got.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(got.cpu(), x, rtol=0, atol=0)
    assert torch.empty(2, 3, 4, 5, device=DEV, memory_format=torch.channels_last).stride() == expected
    volume = torch.empty(1, 2, 3, 4, 5, device=DEV, memory_format=torch.channels_last_3d)
    assert volume.stride() == torch.empty(1, 2, 3, 4, 5, memory_format=torch.channels_last_3d).stride()
