"""nn.MultiheadAttention's and nn.TransformerEncoderLayer's fused inference ops (`_native_multi_head_attention`,
`_transformer_encoder_layer_fwd`: the "fast path" torch takes in eval mode under no_grad), baddbmm (the slow
path's masked scores) and roll (gpt2's shifted targets) on the ocl device against the CPU, with zero CPU
fallbacks. Run by test_ocl_attention.py in a child process (PrivateUse1 is named once per process)."""

import warnings

import pytest
import torch

import fade.ocl as ocl

ocl.register()
DEV = "ocl:0"


def moved(values: tuple, convert) -> tuple:
    """values converted, the same tensor given twice converted once (the fast path needs query is key is value)."""
    done = {}
    return tuple(done.setdefault(id(v), convert(v)) if isinstance(v, torch.Tensor) else v for v in values)


def compare(module, inputs: tuple, kwargs: dict, dtype, fused_op: str | None):
    """module's outputs on ocl against the CPU's; fused_op must have run on ocl (the fast path was taken)."""
    module = module.eval().to(dtype)
    inputs = moved(inputs, lambda t: t.to(dtype))
    with torch.no_grad():
        expected = module(*inputs, **kwargs)
        module.to(DEV)
        ocl.reset_fallback_counts()
        with warnings.catch_warnings(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            warnings.simplefilter("ignore")
            got = module(*moved(inputs, lambda t: t.to(DEV)),
                         **dict(zip(kwargs, moved(tuple(kwargs.values()), lambda t: t.to(DEV)))))
        fallbacks = ocl.fallback_counts()
    assert fallbacks == {}, fallbacks
    if fused_op:
        assert fused_op in {event.key for event in prof.key_averages()}, f"{fused_op} did not run: no fast path"
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    tolerance = dict(rtol=1e-9, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    for want, have in zip(expected, got):
        if want is None:
            assert have is None
        else:
            torch.testing.assert_close(have.cpu(), want, **tolerance)


torch.manual_seed(0)
X, Y = torch.randn(3, 5, 8), torch.randn(3, 7, 8)
PADDING = torch.zeros(3, 5, dtype=torch.bool)
PADDING[0, 3:] = True
CAUSAL = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
FAST = "aten::_native_multi_head_attention"

MHA_CASES = {
    "self-attention": ((X, X, X), {}),
    "no weights": ((X, X, X), dict(need_weights=False)),
    "weights per head": ((X, X, X), dict(average_attn_weights=False)),
    "cross-attention": ((X, Y, Y), {}),
    "float mask": ((X, X, X), dict(attn_mask=torch.zeros(5, 5).masked_fill(CAUSAL, float("-inf")))),
    "key padding mask": ((X, X, X), dict(key_padding_mask=PADDING)),
    "causal mask": ((X, X, X), dict(attn_mask=CAUSAL)),
    "both masks": ((X, X, X), dict(attn_mask=CAUSAL, key_padding_mask=PADDING)),
}
SLOW_PATH = {"cross-attention", "float mask"}  # torch's fast path takes only self-attention with boolean masks


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", MHA_CASES)
def test_multi_head_attention_inference_stays_on_the_device(case, dtype):
    torch.manual_seed(1)
    inputs, kwargs = MHA_CASES[case]
    if "attn_mask" in kwargs and kwargs["attn_mask"].is_floating_point():
        kwargs = dict(kwargs, attn_mask=kwargs["attn_mask"].to(dtype))
    compare(torch.nn.MultiheadAttention(8, 2, batch_first=True), inputs, kwargs, dtype,
            None if case in SLOW_PATH else FAST)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padding", [False, True])
def test_transformer_encoder_layer_inference_stays_on_the_device(norm_first, activation, padding):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation=activation, batch_first=True,
                                             norm_first=norm_first)
    kwargs = dict(src_key_padding_mask=PADDING) if padding else {}
    compare(layer, (X,), kwargs, torch.float64, "aten::_transformer_encoder_layer_fwd")


def test_multi_head_attention_training_step_with_a_mask_matches_the_cpu():
    """Training takes the slow path (F.multi_head_attention_forward), whose masked scores are one baddbmm."""
    torch.manual_seed(3)
    results = {}
    for device in ("cpu", DEV):
        torch.manual_seed(3)
        module = torch.nn.MultiheadAttention(8, 2, batch_first=True).double().to(device)
        x = X.double().to(device).requires_grad_()
        ocl.reset_fallback_counts()
        out, _ = module(x, x, x, attn_mask=CAUSAL.to(device))
        out.square().sum().backward()
        results[device] = (out.detach().cpu(), x.grad.cpu(), module.in_proj_weight.grad.cpu())
        if device == DEV:
            assert ocl.fallback_counts() == {}
    for want, have in zip(results["cpu"], results[DEV]):
        torch.testing.assert_close(have, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0)])
@pytest.mark.parametrize("self_shape", [(4, 3, 5), (5,), (3, 1)])
def test_baddbmm_matches_the_cpu(beta, alpha, self_shape):
    torch.manual_seed(4)
    base, a, b = torch.randn(self_shape, dtype=torch.float64), torch.randn(4, 3, 6, dtype=torch.float64), \
        torch.randn(4, 6, 5, dtype=torch.float64)
    expected = torch.baddbmm(base, a, b, beta=beta, alpha=alpha)
    ocl.reset_fallback_counts()
    got = torch.baddbmm(base.to(DEV), a.to(DEV), b.to(DEV), beta=beta, alpha=alpha)
    assert ocl.fallback_counts() == {}
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shifts,dims", [(1, None), (-3, None), ((1,), (1,)), ((2, -1), (0, 1)), ((7, 0), (1, 0)),
                                         ((1,), (-1,))])
def test_roll_matches_the_cpu(shifts, dims):
    """torch.roll (gpt2's shifted targets): the pieces of each rolled dimension, on the device."""
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    for source in (x, x.t()):  # contiguous and strided
        expected = torch.roll(source, shifts, dims)
        ocl.reset_fallback_counts()
        got = torch.roll(source.to(DEV) if source.is_contiguous() else x.to(DEV).t(), shifts, dims)
        assert ocl.fallback_counts() == {}
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_the_attention_probe_on_ocl_names_why_math_ran():
    """fade.measure.attention's probe on ocl:0: every request runs as math (fade.ocl has no fused kernel), and
    the finding says so with fade/data/attention.toml's no_fused_kernel_on_backend cause instead of "no reason
    given by torch"."""
    from fade.measure.attention import QUICK_PROBE_TIMING, AttentionShape, probe_attention

    result = probe_attention(AttentionShape(batch=1, q_heads=2, kv_heads=2, head_dim=16, q_len=8, kv_len=8,
                                            mask="none", dtype="fp32"), device=DEV, timing=QUICK_PROBE_TIMING,
                             requests=("default", "flash", "math"))
    rows = {row["requested"]: row for row in result["backends"]}
    assert rows["default"]["ran"] and rows["default"]["backend"] == "math"
    finding = result["finding"]
    assert finding["status"] == "math_fallback", finding
    assert [c["cause"] for c in finding["causes"]] == ["no_fused_kernel_on_backend"]
