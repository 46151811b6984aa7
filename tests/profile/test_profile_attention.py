"""Attention in a profile: SDPA's kernels are their own class on CUDA and ROCm, its FLOPs are counted from the
recorded shapes with torch.utils.flop_counter's formulas, and a summary with known attention time and FLOPs
reports the attention share, its TFLOP/s and its MFU; the step's TFLOP/s uses the unprofiled step time."""

import pytest

from fade.analyze.kernels import classify_kernel
from fade.analyze.profile import summarize_trace
from fade.analyze.trace import HostEvent, op_flops
from fade.errors import FadeUsageError
from tests.profile.synthetic import GEMM, TraceBuilder

# names from FADE's own H100 trace (results/profile-h100/gpt2-small.summary.json, SDPA's cuDNN backend)
CUDNN_FPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
CUDNN_BPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0"
B, H, S, D = 8, 12, 1024, 64  # gpt2-small at batch 8: 12 heads of 64, 1024 tokens
FORWARD_FLOPS = 2 * B * H * S * S * (D + D)  # Q K^T and P V
BACKWARD_FLOPS = 2 * B * H * S * S * (3 * D + 2 * D)  # Q K^T again, dP, dV, dQ, dK


def sdpa_op(name: str, dims: list) -> HostEvent:
    return HostEvent(0, 1, name, 1, {"Input Dims": dims})


def test_cudnn_sdpa_kernels_are_attention_not_convolution():
    """The fprop name carries '_fprop_', which the cuDNN convolution row would take."""
    for name in (CUDNN_FPROP, CUDNN_BPROP, "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)"):
        kind = classify_kernel(name)
        assert kind.kernel_class == "attention" and kind.library.startswith("cuDNN SDPA"), name


@pytest.mark.parametrize("name", ["attn_fwd", "bwd_kernel_dk_dv", "bwd_kernel_dq", "bwd_preprocess",
                                  "fmha_bwd_hd128_bf16_a16_rtne"])
def test_rocm_sdpa_kernels_are_attention(name):
    assert classify_kernel(name).kernel_class == "attention"


def test_sdpa_forward_and_backward_flops_follow_torch_formulas():
    q = [B, H, S, D]
    assert op_flops(sdpa_op("aten::_scaled_dot_product_cudnn_attention", [q, q, q, [], []])) == FORWARD_FLOPS
    assert op_flops(sdpa_op("aten::_scaled_dot_product_flash_attention_backward", [q, q, q, q, q, [B, H, S]])) \
        == BACKWARD_FLOPS
    # the inner flash op takes (batch, sequence, heads, dim): the same count
    bshd = [B, S, H, D]
    assert op_flops(sdpa_op("aten::_flash_attention_forward", [bshd, bshd, bshd])) == FORWARD_FLOPS
    # a packed varlen query (3-D) has no per-sequence lengths in the trace: not counted
    assert op_flops(sdpa_op("aten::_flash_attention_forward", [[B * S, H, D]] * 3)) is None


def test_the_formulas_are_torch_flop_counters_own():
    flop_counter = pytest.importorskip("torch.utils.flop_counter")
    q, k, v = [2, 4, 96, 32], [2, 4, 80, 32], [2, 4, 80, 48]  # cross-attention, value dim unlike the query's
    assert op_flops(sdpa_op("aten::_scaled_dot_product_efficient_attention", [q, k, v])) \
        == flop_counter.sdpa_flop_count(q, k, v)
    grad = [2, 4, 96, 48]
    assert op_flops(sdpa_op("aten::_scaled_dot_product_efficient_attention_backward", [grad, q, k, v])) \
        == flop_counter.sdpa_backward_flop_count(grad, q, k, v)


def attention_trace() -> dict:
    """One 1000 us step: a GEMM (100 us), the cuDNN SDPA forward (150 us) and backward (250 us); the outer
    SDPA ops wrap the inner _cudnn_attention ops, which must not be counted twice."""
    q = [B, H, S, D]
    gemm_dims = [[1024, 768], [768, 2304]]
    return (TraceBuilder()
            .step(1, 0.0, 1000.0)
            .cpu_op("aten::mm", 5.0, 8.0, **{"Input Dims": gemm_dims})
            .cpu_op("aten::_scaled_dot_product_cudnn_attention", 10.0, 30.0, **{"Input Dims": [q, q, q, [], []]})
            .cpu_op("aten::_cudnn_attention_forward", 12.0, 28.0, **{"Input Dims": [q, q, q, []]})
            .cpu_op("aten::_scaled_dot_product_cudnn_attention_backward", 40.0, 60.0,
                    **{"Input Dims": [q, q, q, q, q, [B, H, S]]})
            .cpu_op("aten::_cudnn_attention_backward", 42.0, 58.0, **{"Input Dims": [q, q, q, q, q, [B, H, S]]})
            .kernel(GEMM, launch=6.0, start=50.0, end=150.0)
            .kernel(CUDNN_FPROP, launch=20.0, start=150.0, end=300.0)
            .kernel(CUDNN_BPROP, launch=50.0, start=300.0, end=550.0)
            .trace())


def test_a_summary_reports_the_attention_share_flops_and_mfu():
    summary = summarize_trace(attention_trace(), peak_tflops=1000.0, peak_dtype="bf16")
    total = summary.total
    assert total.busy_us == 500.0
    assert total.class_us["attention"] == 400.0 and total.class_us["gemm"] == 100.0  # 80% and 20% of busy
    assert total.class_us["convolution"] == 0.0
    flops = total.flops
    assert flops["attention"] == FORWARD_FLOPS + BACKWARD_FLOPS  # outer ops only, inner ones skipped
    assert flops["gemm"] == 2 * 1024 * 768 * 2304
    assert flops["total"] == flops["gemm"] + flops["attention"]
    assert flops["tflops_attention"] == pytest.approx(flops["attention"] / 400e-6 / 1e12)
    assert flops["mfu_attention"] == pytest.approx(flops["tflops_attention"] / 1000.0)
    # no unprofiled time passed: the step's rate is over the window, and says so
    assert flops["step_time_basis"] == "profiled window"
    assert flops["tflops_step"] == pytest.approx(flops["total"] / 1000e-6 / 1e12) == flops["tflops_window"]


def test_the_step_rate_uses_the_unprofiled_step_time_when_given():
    """The profiled window (1000 us) holds the profiler's cost; the step measured without it took 600 us."""
    flops = summarize_trace(attention_trace(), peak_tflops=1000.0, step_s=600e-6).total.flops
    assert flops["step_time_basis"] == "unprofiled" and flops["step_s"] == 600e-6
    assert flops["tflops_step"] == pytest.approx(flops["total"] / 600e-6 / 1e12)
    assert flops["tflops_window"] == pytest.approx(flops["total"] / 1000e-6 / 1e12)
    assert flops["mfu_step"] == pytest.approx(flops["tflops_step"] / 1000.0)


@pytest.mark.parametrize("step_s", [0.0, -1.0, float("nan")])
def test_a_bad_unprofiled_step_time_is_one_usage_line(step_s):
    with pytest.raises(FadeUsageError, match="step_s"):
        summarize_trace(attention_trace(), step_s=step_s)


def test_a_real_cpu_trace_of_sdpa_counts_its_attention_flops(tmp_path):
    """torch.profiler's own export of SDPA forward + backward on the CPU: the outer ops carry the shapes, and
    the count equals flop_counter's."""
    torch = pytest.importorskip("torch")
    import json

    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from fade.analyze.trace import collect_events, flops_by_kind

    shape = [2, 4, 64, 32]
    query = torch.randn(*shape, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.scaled_dot_product_attention(query, query, query).sum().backward()
    path = str(tmp_path / "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as handle:
        flops = flops_by_kind(collect_events(json.load(handle)).cpu_ops)
    assert flops["attention"] == sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(shape, shape, shape, shape)
