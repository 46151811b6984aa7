"""The step summary splits a synthetic trace's time exactly as its definitions say, picks the launch-bound
verdict for a step that waits on the host, compares two profiles, and refuses malformed traces in one line."""

import gzip
import json

import pytest

from fade.analyze.profile import HOST_WAIT_SHARE, compare_profiles, summarize_trace
from fade.analyze.trace import op_flops, read_trace, HostEvent
from fade.errors import FadeUsageError
from tests.profile.synthetic import ADD, GEMM, TraceBuilder, launch_bound_trace, mixed_idle_trace


def test_a_step_waiting_on_launches_is_launch_bound():
    """720 of 1000 us idle, every gap behind a launch that came after the device went idle."""
    summary = summarize_trace(launch_bound_trace())
    step = summary.total
    assert step.window_us == 1000.0 and step.busy_us == 280.0
    assert step.idle_us == {"host_wait": 720.0, "sync_wait": 0.0, "other": 0.0}
    assert step.class_us["gemm"] == 100.0 and step.class_us["elementwise"] == 180.0
    assert summary.verdict["rule"] == "launch_bound" and 0.72 >= HOST_WAIT_SHARE
    assert "reduce-overhead" in summary.verdict["fix"] and "fade tune MODEL --mode train" in summary.verdict["fix"]
    named = summarize_trace(launch_bound_trace(), tune_command="fade tune mobilenet_v2 --mode infer")
    assert "fade tune mobilenet_v2 --mode infer" in named.verdict["fix"] and "MODEL" not in named.verdict["fix"]


def test_each_idle_cause_is_counted_where_the_trace_puts_it():
    steps = summarize_trace(mixed_idle_trace()).steps
    assert [s.step for s in steps] == ["ProfilerStep#1", "ProfilerStep#2"]
    second = steps[1]
    assert second.busy_us == 840.0
    assert second.idle_us == {"host_wait": 30.0, "sync_wait": 30.0, "other": 100.0}
    assert second.syncs["count"] == 1 and second.syncs["by_name"] == {"cudaStreamSynchronize": 1}


def test_top_kernels_carry_count_mean_and_class():
    kernels = {k["name"]: k for k in summarize_trace(mixed_idle_trace()).total.top_kernels}
    assert kernels[ADD]["count"] == 4 and kernels[ADD]["class"] == "elementwise"
    assert kernels[GEMM]["mean_us"] == pytest.approx((100 + 480) / 2)


def test_short_kernels_are_counted_against_the_launch_overhead():
    builder = TraceBuilder().step(1, 0, 100)
    for index in range(10):
        builder.kernel(ADD, launch=index * 9.0, start=index * 9.0 + 5, end=index * 9.0 + 7)
    launches = summarize_trace(builder.trace()).total.launches
    assert launches["kernels"] == 10 and launches["shorter_than_overhead"] == 10


def test_flops_give_tflops_and_mfu_from_the_peak_passed_in():
    flops = summarize_trace(launch_bound_trace(), peak_tflops=1.0, peak_dtype="bf16").total.flops
    assert flops["gemm"] == 2 * 128 * 256 * 512
    assert flops["tflops_gemm_conv"] == pytest.approx(flops["gemm"] / 100e-6 / 1e12)  # GEMM kernels ran 100 us
    assert flops["mfu_gemm_conv"] == pytest.approx(flops["tflops_gemm_conv"])


def test_convolution_flops_follow_torch_formula_from_shapes():
    event = HostEvent(0, 1, "aten::convolution", 1, {
        "Input Dims": [[2, 3, 16, 16], [4, 3, 3, 3], [4], [], [], [], [], [], []],
        "Concrete Inputs": ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]})
    assert op_flops(event) == 2 * 2 * 4 * 14 * 14 * 3 * 3 * 3


def test_a_copy_heavy_step_points_to_the_guard():
    builder = TraceBuilder().step(1, 0, 1000)
    builder.kernel("Memcpy HtoD (Pageable -> Device)", launch=0, start=5, end=600, category="gpu_memcpy",
                   nbytes=64 * 2**20)
    builder.kernel(GEMM, launch=10, start=600, end=990)
    summary = summarize_trace(builder.trace(), peak_bandwidth_gbs=3350.0)
    rules = [v["rule"] for v in summary.verdicts]
    assert "copy_bound" in rules
    copy = next(v for v in summary.verdicts if v["rule"] == "copy_bound")
    assert "fade watch" in copy["fix"]
    assert summary.total.copies["HtoD"]["bytes"] == 64 * 2**20


def test_a_rocm_backward_weight_convolution_gets_the_miopen_find_mode_advice():
    builder = TraceBuilder(runtime_prefix="hip").step(1, 0, 1000)
    builder.kernel("naive_conv_wrw_nchw_fp32", launch=0, start=2, end=990)
    summary = summarize_trace(builder.trace())
    assert summary.platform == "rocm"
    dominant = next(v for v in summary.verdicts if v["rule"] == "one_kernel_dominates")
    assert "MIOPEN_FIND_MODE=3" in dominant["fix"]


def test_compare_says_which_classes_got_faster():
    before = summarize_trace(launch_bound_trace())
    faster = (TraceBuilder().step(1, 0.0, 400.0)
              .kernel(GEMM, launch=1.0, start=5.0, end=55.0)
              .kernel(ADD, launch=2.0, start=55.0, end=100.0)
              .trace())
    comparison = compare_profiles(before, summarize_trace(faster).to_dict())
    classes = {row["name"]: row for row in comparison["classes"]}
    assert classes["gemm"]["speedup"] == pytest.approx(2.0)
    assert classes["elementwise"]["speedup"] == pytest.approx(4.0)
    assert comparison["step"]["speedup"] == pytest.approx(2.5)
    assert json.loads(json.dumps(comparison))["kind"] == "profile-comparison"


def test_compare_refuses_something_that_is_not_a_summary():
    with pytest.raises(FadeUsageError, match="not a profile summary"):
        compare_profiles({"schema_version": 1}, summarize_trace(launch_bound_trace()))


def test_the_summary_is_versioned_json():
    data = json.loads(json.dumps(summarize_trace(mixed_idle_trace()).to_dict()))
    assert data["schema_version"] == 1 and data["fade_version"] and data["device_timeline"] is True
    assert data["thresholds"]["launch_overhead_us"] > 0


@pytest.mark.parametrize("trace, message", [
    ({"events": []}, "no 'traceEvents'"),
    ({"traceEvents": {}}, "not a list"),
    ({"traceEvents": [{"ph": "X", "name": "k", "ts": "soon", "dur": 1}]}, "no valid 'ts'/'dur'"),
    ({"traceEvents": [{"ph": "X", "name": "k", "ts": 1.0, "dur": -5}]}, "no valid 'ts'/'dur'"),
    ({"traceEvents": ["kernel"]}, "not an object"),
    ("trace", "not str"),
])
def test_a_malformed_trace_is_one_usage_line(trace, message):
    with pytest.raises(FadeUsageError) as error:
        summarize_trace(trace)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_read_trace_reads_gzip_and_refuses_broken_or_oversized_files(tmp_path):
    good = tmp_path / "trace.json.gz"
    with gzip.open(good, "wt") as handle:
        json.dump(launch_bound_trace(), handle)
    assert summarize_trace(read_trace(good)).total.busy_us == 280.0
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    with pytest.raises(FadeUsageError, match="not a JSON trace"):
        read_trace(broken)
    big = tmp_path / "big.json"
    big.write_text(json.dumps(launch_bound_trace()))
    with pytest.raises(FadeUsageError, match="over the .* this reader accepts"):
        read_trace(big, max_bytes=100)
    with pytest.raises(FadeUsageError, match="cannot read"):
        read_trace(tmp_path / "missing.json")
    bomb = tmp_path / "bomb.json.gz"  # small on disk, large once inflated
    with gzip.open(bomb, "wt") as handle:
        json.dump({"traceEvents": [{"ph": "i", "name": "x" * 100}] * 2000}, handle)
    with pytest.raises(FadeUsageError, match="inflates to over"):
        read_trace(bomb, max_bytes=100_000)


def _rocm_step_behind_a_dtoh_copy() -> dict:
    """One ROCm step: a GEMM, a blocking hipMemcpyWithStream (a device-to-host copy) issued during it, then a
    copy kernel launched 190 us after the copy ended."""
    builder = TraceBuilder(runtime_prefix="hip").step(1, 0.0, 1000.0)
    builder.kernel("Cijk_Alik_Bljk_SB_MT64x64x8_SN_1LDSB0_APM1_ABV0", launch=1.0, start=5.0, end=400.0)
    builder.correlation += 1
    builder.events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyWithStream", "pid": 1, "tid": 1,
                           "ts": 10.0, "dur": 400.0, "args": {"correlation": builder.correlation}})
    builder.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Host)", "pid": 0,
                           "tid": 7, "ts": 400.0, "dur": 5.0,
                           "args": {"device": 0, "stream": 7, "correlation": builder.correlation, "bytes": 4}})
    builder.kernel("__amd_rocclr_copyBuffer", launch=600.0, start=610.0, end=620.0)
    return builder.trace()


def test_a_device_to_host_copy_on_rocm_counts_as_a_sync_and_its_gap_as_sync_wait():
    """hipMemcpyWithStream of a DtoH copy blocks the host like .item(): the gap after it is sync_wait."""
    step = summarize_trace(_rocm_step_behind_a_dtoh_copy()).total
    assert step.syncs["by_name"] == {"hipMemcpyWithStream": 1}
    assert step.idle_us["sync_wait"] == pytest.approx(610.0 - 405.0)
    assert step.class_us["copy"] == pytest.approx(15.0) and step.class_us["gemm"] == pytest.approx(395.0)


def test_the_sync_verdict_names_the_users_line_the_caller_recorded():
    """A step idle behind a sync: the sync_bound verdict ends with the user's line from `host_lines`; without
    lines it says no line (the trace alone does not know it)."""
    trace = _rocm_step_behind_a_dtoh_copy()
    lines = [{"kind": "sync", "file": "train.py", "line": 42, "code": "loss.item()", "count": 1, "ops": {}}]
    named = summarize_trace(trace, host_lines=lines)
    sync = next(v for v in named.verdicts if v["rule"] == "sync_bound")
    assert sync["title"].endswith("at train.py:42 (loss.item())")
    assert named.to_dict()["host_lines"] == lines
    plain = next(v for v in summarize_trace(trace).verdicts if v["rule"] == "sync_bound")
    assert " at " not in plain["title"]


def test_read_trace_refuses_a_fifo_and_a_hostile_depth_in_one_line(tmp_path):
    """A FIFO would block a plain open(); JSON nested 100,000 deep would overflow json's recursion: both one line."""
    import os
    import threading

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    outcome = {}

    def read():
        try:
            read_trace(fifo)
        except FadeUsageError as error:
            outcome["error"] = str(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=5)  # a safety timeout: a hang fails here instead of blocking the suite
    assert "not a regular file" in outcome.get("error", "")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(FadeUsageError, match="nested too deeply"):
        read_trace(deep)


def _gemm_step(m: int, dtype: str = "c10::BFloat16") -> dict:
    """One 1000 us step, 900 us of it one GEMM of an (m x 4096) by (4096 x 4096) product, launched in time."""
    return (TraceBuilder()
            .step(1, 0.0, 1000.0)
            .cpu_op("aten::mm", 5.0, 40.0, **{"Input Dims": [[m, 4096], [4096, 4096]], "Input type": [dtype, dtype]})
            .kernel(GEMM, launch=10.0, start=50.0, end=950.0)
            .trace())


def test_a_gemv_below_the_ridge_is_bandwidth_bound_not_low_peak():
    """A batch-1 decode's GEMM (1 x 4096 by 4096 x 4096, bf16) does 2 FLOPs per weight of 2 bytes: ~1 FLOP/byte,
    far below an H200's ridge (989 TFLOP/s over 4.8 TB/s: 206). Its 0.004% of peak says nothing about the matrix
    units; autocast or channels_last cannot help it. The same GEMM with 4096 rows is above the ridge, and low
    peak is the verdict there."""
    gemv = summarize_trace(_gemm_step(1), peak_tflops=989.0, peak_dtype="bf16", peak_bandwidth_gbs=4800.0).total
    assert gemv.flops["gemm_intensity"] == pytest.approx(2 * 4096 * 4096 / (2 * (4096 + 4096 * 4096 + 4096)))
    assert gemv.flops["ridge_intensity"] == pytest.approx(989e12 / 4800e9)
    # 33.6 MB least bytes in 900 us: 37 GB/s, 0.78% of 4.8 TB/s
    assert gemv.flops["pct_of_bandwidth_gemm"] == pytest.approx(100 * 2 * (4096 + 4096 * 4096 + 4096) / 900e-6 / 4800e9)
    rules = [verdict["rule"] for verdict in summarize_trace(_gemm_step(1), peak_tflops=989.0, peak_dtype="bf16",
                                                            peak_bandwidth_gbs=4800.0).verdicts]  # fmt: skip
    assert "gemm_bandwidth_bound" in rules and "gemm_low_peak" not in rules

    square = summarize_trace(_gemm_step(4096), peak_tflops=989.0, peak_dtype="bf16", peak_bandwidth_gbs=4800.0)
    rules = [verdict["rule"] for verdict in square.verdicts]
    assert square.total.flops["gemm_intensity"] > square.total.flops["ridge_intensity"]
    assert "gemm_low_peak" in rules and "gemm_bandwidth_bound" not in rules


def test_without_a_bandwidth_or_a_type_the_gemm_verdict_stays_low_peak():
    """No spec bandwidth, or a trace without "Input type" (older torch): no ridge to judge by, the old rule."""
    no_bandwidth = summarize_trace(_gemm_step(1), peak_tflops=989.0, peak_dtype="bf16")
    assert no_bandwidth.total.flops["ridge_intensity"] is None
    assert "gemm_low_peak" in [verdict["rule"] for verdict in no_bandwidth.verdicts]
    untyped = summarize_trace(_gemm_step(1, dtype="c10::SomethingNew"), peak_tflops=989.0, peak_dtype="bf16",
                              peak_bandwidth_gbs=4800.0)  # fmt: skip
    assert untyped.total.flops["gemm_intensity"] is None
    assert "gemm_low_peak" in [verdict["rule"] for verdict in untyped.verdicts]


@pytest.mark.parametrize("dims", [[[1, "4096"], [4096, 4096]], [[1, -4096], [4096, 4096]], [[1, 4096.5], [4096, 4096]],
                                  [[True, 4096], [4096, 4096]], [7, [4096, 4096]], [[1, 4096]]])
def test_a_gemm_whose_shapes_are_not_positive_integers_has_no_byte_count(dims):
    """A trace written elsewhere (fade profile reads any Chrome trace): odd sizes give no bytes and so no intensity,
    never an exception or a negative figure."""
    from fade.analyze.trace import op_gemm_bytes

    event = HostEvent(0, 1, "aten::mm", 1, {"Input Dims": dims, "Input type": ["c10::BFloat16", "c10::BFloat16"]})
    assert op_gemm_bytes(event) is None
    good = HostEvent(0, 1, "aten::mm", 1, {"Input Dims": [[1, 4096], [4096, 4096]], "Input type": ["float", "float"]})
    assert op_gemm_bytes(good) == 4.0 * (4096 + 4096 * 4096 + 4096)
