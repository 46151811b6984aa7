"""The attention truth (issue 28 point 2): the probe on the CPU names what ran and records what could not run;
kernel lists from public traces classify to the backend that produced them; torch's own refusal texts map to
causes; the finding flags a math fallback with its cause; the ROCm rules fire on AOTriton's real arch sets and
stay quiet on a healthy MI300X.

Kernel names: tests/profile/fixtures/kernel_names_cuda.txt and kernel_names_rocm.txt cite where each was read
(FADE's H100 traces, pytorch's flash_attn and mem_eff_attention sources, ROCm/aotriton tritonsrc/flash.py).
Refusal texts: verbatim from pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp @001f694 and
sdp_utils_cpp.h. Arch sets: src/fade/data/attention.toml (ROCm/aotriton tags 0.8b-0.13b).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fade.analyze import attention
from fade.analyze.doctor import diagnose

SNAPSHOTS = Path(__file__).resolve().parent.parent / "fixtures" / "snapshots"
RDNA3 = "rdna3_rx7900xtx_rocm62_healthy"  # ROCm/legacy-rocm-build#2866 (README.md there)
MI300X = "cdna3_mi300x_rocm630_bwd_weight_conv"  # ROCm/legacy-rocm-build#4080

# FADE's H100 trace (results/profile-h100/gpt2-small.summary.json, torch 2.11+cu130)
CUDNN_FPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
# pytorch aten/src/ATen/native/transformers/cuda/flash_attn (kernel_names_cuda.txt)
FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::bfloat16_t>, false, true, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)")
# pytorch mem_eff_attention/kernels (kernel_names_cuda.txt)
CUTLASS = ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
           "true, 64, 64, 64, true, true>::Params)")
# the math backend on an H100: cuBLAS GEMMs (FADE's H100 traces) and PyTorch's softmax (PersistentSoftmax.cuh)
MATH_CUDA = ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
             "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11, false, false>"
             "(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"]  # fmt: skip
# the math backend on ROCm: rocBLAS/hipBLASLt Tensile names (kernel_names_rocm.txt)
MATH_ROCM = ["Cijk_Alik_Bljk_BBS_BH_UserArgs_MT256x224x64_MI16x16x1_SN_LDSB0_AFC0_ISA942_IU1_K1"]


# -- what ran -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernels, library", [
    ([CUDNN_FPROP], "cuDNN SDPA"),
    ([FLASH], "FlashAttention"),
    ([CUTLASS], "PyTorch memory-efficient attention (CUTLASS)"),
    (["attn_fwd"], "AOTriton"),
    (["fmha_bwd_hd128_bf16_a16_rtne"], "aiter"),
])  # fmt: skip
def test_fused_kernels_name_their_library(kernels, library):
    result = attention.classify_kernels(kernels)
    assert result["kernel_path"] == "fused"
    assert result["attention_libraries"][0].startswith(library)


@pytest.mark.parametrize("kernels", [MATH_CUDA, MATH_ROCM])
def test_gemm_and_softmax_without_an_attention_kernel_is_math(kernels):
    assert attention.classify_kernels(kernels)["kernel_path"] == "math"


@pytest.mark.parametrize("op, backend", [
    ("aten::_scaled_dot_product_flash_attention", "flash"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "flash"),
    ("aten::_scaled_dot_product_efficient_attention", "efficient"),
    ("aten::_scaled_dot_product_cudnn_attention", "cudnn"),
    ("aten::_scaled_dot_product_attention_math", "math"),
])  # fmt: skip
def test_the_aten_op_names_the_backend(op, backend):
    run = attention.classify_run(["aten::scaled_dot_product_attention", op], [])
    assert run["backend"] == backend and run["sdpa_ops"] == [op]


def test_op_and_kernels_must_agree():
    assert attention.classify_run(["aten::_scaled_dot_product_flash_attention"], [FLASH])["op_and_kernels_agree"] is True
    assert attention.classify_run(["aten::_scaled_dot_product_attention_math"], MATH_CUDA)["op_and_kernels_agree"] is True
    assert attention.classify_run(["aten::_scaled_dot_product_flash_attention"], MATH_CUDA)["op_and_kernels_agree"] is False


# -- why not ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, cause", [
    ("Flash Efficient attention on Current AMD GPU is still experimental. Enable it with "
     "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.", "experimental_gate"),
    ("Flash attention was not compiled for current AMD GPU architecture. Attempting to run on architecture gfx1030",
     "arch_not_built"),
    ("Flash attention requires q,k,v to have the same last dimension and to be less than or equal to 256. Got "
     "Query.size(-1): 512, Key.size(-1): 512, Value.size(-1): 512 instead.", "head_dim"),
    ("Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float, Key dtype: float, "
     "and Value dtype: float instead.", "dtype"),
    ("Flash Attention does not support non-null attn_mask.", "mask"),
    ("Flash attention does not support the is_causal flag when seqlen_q != seqlen_k. Got seqlen_q: 1 seqlen_k: 4096.",
     "causal_nonsquare"),
    ("For dense input, both fused kernels require query, key and value to have the same num_heads. Query.sizes(): "
     "[1, 32, 2048, 128], Key sizes(): [1, 8, 2048, 128]", "gqa"),
    ("Torch was not compiled with flash attention.", "not_compiled"),
    ("head_dim should be no more than 128", "head_dim"),
])  # fmt: skip
def test_torch_refusal_texts_map_to_causes(text, cause):
    found = attention.causes_of([text])
    assert [entry["cause"] for entry in found] == [cause]
    assert found[0]["fix"] and found[0]["source"]


def test_a_forced_backend_keeps_only_its_own_reasons():
    """select_sdp_backend's debug pass lists every backend; under sdpa_kernel([EFFICIENT]) the others say 'disabled'."""
    lines = ["Memory efficient kernel not used because:", "Mem Efficient attention on Current AMD GPU is still experimental. "
             "Enable it with TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.", "Flash attention kernel not used because:",
             "Flash attention has been runtime disabled.", "cuDNN attention kernel not used because:",
             "cuDNN attention has been runtime disabled.", "No available kernel. Aborting execution."]  # fmt: skip
    assert attention.reasons_for(lines, "efficient") == [lines[1]]
    assert attention.reasons_for(lines, "cudnn") == ["cuDNN attention has been runtime disabled."]


# -- the finding --------------------------------------------------------------------------------------------

def _row(requested, backend, median=None, error=None, reasons=()):
    timing = {"median_s": median, "q1_s": median * 0.98, "q3_s": median * 1.02} if median else None
    return {"requested": requested, "ran": error is None, "backend": backend if error is None else None,
            "timing": timing, "error": error, "reasons": list(reasons)}  # fmt: skip


EXPERIMENTAL = ("Flash Efficient attention on Current AMD GPU is still experimental. Enable it with "
                "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.")


def test_a_silent_math_fallback_is_a_finding_with_its_cause_and_fix():
    rows = [_row("default", "math", 9e-3), _row("flash", None, error="No available kernel. Aborting execution.",
                                                 reasons=[EXPERIMENTAL]),
            _row("efficient", None, error="No available kernel. Aborting execution.", reasons=[EXPERIMENTAL]),
            _row("cudnn", None, error="No available kernel.", reasons=["Torch was not compiled with cuDNN attention."]),
            _row("math", "math", 9e-3)]  # fmt: skip
    finding = attention.attention_finding(rows)
    assert finding["status"] == "math_fallback"
    assert [c["cause"] for c in finding["causes"]] == ["experimental_gate", "not_compiled"]
    assert finding["causes"][0]["fix"].startswith("export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1")
    assert "math" in finding["message"]


def test_math_on_fade_ocl_is_a_finding_that_names_the_backend_as_the_cause():
    """On fade.ocl torch prints no reason (a PrivateUse1 device): the probe adds fade.measure.attention's
    OCL_MATH_LINE to the rows that ran math unasked, and the finding names no_fused_kernel_on_backend with its
    fix, not "no reason given by torch"."""
    from fade.measure.attention import OCL_MATH_LINE

    rows = [_row("default", "math", 9e-3, reasons=[OCL_MATH_LINE]), _row("flash", "math", 9e-3, reasons=[OCL_MATH_LINE]),
            _row("math", "math", 9e-3)]  # fmt: skip
    finding = attention.attention_finding(rows)
    assert finding["status"] == "math_fallback"
    assert [c["cause"] for c in finding["causes"]] == ["no_fused_kernel_on_backend"]
    assert "no reason given" not in finding["message"] and "fade.ocl" in finding["causes"][0]["fix"]
    assert attention.attention_finding([_row("default", "math", 9e-3), _row("math", "math", 9e-3)])["causes"] == []


def test_a_default_slower_than_an_available_fused_backend_is_a_finding():
    rows = [_row("default", "cudnn", 2e-4), _row("flash", "flash", 1e-4), _row("cudnn", "cudnn", 2e-4),
            _row("math", "math", 2e-3)]
    finding = attention.attention_finding(rows)
    assert finding["status"] == "slower_than_available" and finding["fastest"] == "flash"
    assert "FLASH_ATTENTION" in finding["message"]


def test_a_fused_default_within_noise_is_ok():
    rows = [_row("default", "flash", 1.00e-4), _row("flash", "flash", 1.00e-4), _row("cudnn", "cudnn", 0.97e-4),
            _row("math", "math", 2e-3)]
    assert attention.attention_finding(rows)["status"] == "ok"


# -- the probe on this CPU ------------------------------------------------------------------------------------

def test_the_probe_runs_on_the_cpu_and_names_what_ran():
    pytest.importorskip("torch")
    from fade.measure.attention import QUICK_PROBE_TIMING, AttentionShape, probe_attention

    seen = []
    result = probe_attention(AttentionShape(batch=1, q_heads=4, kv_heads=2, head_dim=16, q_len=16, kv_len=16,
                                            mask="causal", dtype="fp32"),
                             device="cpu", timing=QUICK_PROBE_TIMING, on_row=seen.append)  # fmt: skip
    rows = {row["requested"]: row for row in result["backends"]}
    assert [row["requested"] for row in seen] == ["default", "flash", "efficient", "cudnn", "math"]
    assert rows["math"]["ran"] and rows["math"]["backend"] == "math"
    assert "aten::_scaled_dot_product_attention_math" in rows["math"]["sdpa_ops"]
    assert rows["default"]["ran"] and rows["default"]["backend"] in ("flash", "math")
    assert rows["default"]["gqa_path"] in ("enable_gqa", "repeat_kv")
    assert rows["default"]["timing"]["median_s"] > 0
    # the CPU has no efficient or cuDNN kernel: recorded with torch's text, never raised
    assert not rows["cudnn"]["ran"] and rows["cudnn"]["error"]
    assert result["finding"]["status"] in ("ok", "slower_than_available")
    json.dumps(result)  # a record: plain data only


def test_a_static_cache_decode_is_probed_with_its_mask_and_repeated_kv():
    """transformers repeats K and V to the query heads whenever it passes a mask (use_gqa_in_sdpa), as every
    decode step over a static cache does: the probe of that shape never takes enable_gqa, and its label says so.
    The bench's decode probes cover both caches (attention_truth)."""
    pytest.importorskip("torch")
    from fade.measure.attention import QUICK_PROBE_TIMING, AttentionShape, probe_attention

    shape = AttentionShape(batch=1, q_heads=4, kv_heads=2, head_dim=16, q_len=1, kv_len=16, mask="explicit",
                           dtype="fp32", gqa="repeat_kv")  # fmt: skip
    result = probe_attention(shape, device="cpu", timing=QUICK_PROBE_TIMING, requests=("default", "math"))
    assert "repeat_kv" in result["label"] and "explicit" in result["label"]
    assert {row["gqa_path"] for row in result["backends"] if row["ran"]} == {"repeat_kv"}
    auto = probe_attention(AttentionShape(1, 4, 2, 16, 1, 16, "none", "fp32"), device="cpu",
                           timing=QUICK_PROBE_TIMING, requests=("math",))  # fmt: skip
    assert auto["backends"][0]["gqa_path"] in ("enable_gqa", "repeat_kv") and "repeat_kv" not in auto["label"]
    with pytest.raises(ValueError, match="gqa"):
        AttentionShape(1, 4, 2, 16, 1, 16, "none", "fp32", gqa="expand").check()


def test_the_bench_probes_decode_over_both_caches():
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from fade.analyze.llm_table import resolve_config
    from fade.measure.suites.llm.case import attention_truth

    ctx = SimpleNamespace(device="cpu", quick=True)
    truth = attention_truth(resolve_config("tiny-llama"), "fp32", 1, 8, ctx)
    assert list(truth) == ["prefill", "decode", "decode_static_cache"]
    assert truth["decode"]["shape"]["mask"] == "none" and truth["decode"]["shape"]["gqa"] == "auto"
    assert truth["decode_static_cache"]["shape"]["mask"] == "explicit"
    assert truth["decode_static_cache"]["shape"]["gqa"] == "repeat_kv"


def test_a_bad_shape_is_refused_before_anything_runs():
    pytest.importorskip("torch")
    from fade.measure.attention import AttentionShape, probe_attention

    with pytest.raises(ValueError, match="multiple of kv_heads"):
        probe_attention(AttentionShape(1, 6, 4, 16, 8, 8, "causal", "fp32"))


# -- ROCm: AOTriton's arch sets and the doctor's rules ------------------------------------------------------

@pytest.mark.parametrize("arch, version, status", [
    ("gfx1030", None, "not_built"), ("gfx1030", "0.13.0", "not_built"), ("gfx906", None, "not_built"),
    ("gfx908", "0.11.0", "not_built"),
    ("gfx1100", "0.11.0", "experimental"), ("gfx1100", "0.10.0", "built"), ("gfx1100", "0.12.0", "built"),
    ("gfx1101", None, "experimental"), ("gfx1150", None, "experimental"), ("gfx1200", None, "experimental"),
    ("gfx1151", "0.11.0", "experimental"), ("gfx1151", "0.10.0", "not_built"), ("gfx1151", "0.12.0", "built"),
    ("gfx1201", "0.9.2", "experimental"), ("gfx1201", "0.10.0", "built"),
    ("gfx942", None, "built"), ("gfx942", "0.10.0", "built"),
])  # fmt: skip
def test_aotriton_status_per_arch_and_release(arch, version, status):
    facts = attention.attention_facts(vendor="amd", arch=arch, torch_build="rocm", aotriton_version=version, env={})
    assert facts["sdpa_aotriton"] == status


def test_the_experimental_variable_is_read_as_torch_reads_it():
    assert attention.env_flag("1") and attention.env_flag("ON") and attention.env_flag("yes")
    assert attention.env_flag("0") is False and attention.env_flag(None) is None and attention.env_flag("maybe") is None


def _snapshot(name: str, arch: str | None = None, aotriton: str | None = None, env: dict | None = None) -> dict:
    """A recorded machine (tests/fixtures/snapshots, README.md cites each dump) with, where a case needs it, its GPU
    reporting another RDNA3/4 arch (KFD gfx_target_version and torch's gcnArchName, as a card of that arch would),
    a recorded AOTriton library and environment variables."""
    data = copy.deepcopy(json.loads((SNAPSHOTS / f"{name}.json").read_text()))
    if arch:
        major, minor, step = int(arch[3:-2]), int(arch[-2], 16), int(arch[-1], 16)
        for node in data["kfd_nodes"]:
            if node["properties"].get("gfx_target_version"):
                node["properties"]["gfx_target_version"] = major * 10000 + minor * 100 + step
        data["torch"]["devices"][0]["gcnArchName"] = arch
        data["torch"]["arch_list"] = sorted(set(data["torch"]["arch_list"]) | {arch})
    if aotriton:
        data["torch"]["aotriton"] = {"library": f"libaotriton_v2.so.{aotriton}", "version": aotriton}
    data["env"].update(env or {})
    return data


def _attention_ids(snapshot: dict) -> set:
    return {f["id"] for f in diagnose(snapshot)["findings"] if f["id"].startswith("ATTN") or f["id"] == "PERF003"}


# each experimental-gate case: the arch, the AOTriton that gates it (None: every release since 0.10b that builds it)
GATED = [("gfx1100", "0.11.0"),  # AOTriton 0.11b release notes (ROCm/TheRock#1315), pytorch PR#166397
         ("gfx1101", None), ("gfx1150", None), ("gfx1200", None),  # experimental in 0.10b-0.13b util.cc
         ("gfx1151", "0.11.0"),  # experimental in 0.11b-0.11.2b, supported from 0.12b
         ("gfx1201", "0.9.2")]  # RX9070XT experimental in 0.9b's v2src/util.cc  # fmt: skip


@pytest.mark.parametrize("arch, version", GATED)
def test_the_experimental_gate_fires_without_the_variable_and_not_with_it(arch, version):
    fired = diagnose(_snapshot(RDNA3, arch, version))["findings"]
    gate = [f for f in fired if f["id"] == "ATTN001"]
    assert len(gate) == 1 and gate[0]["severity"] == "warn"
    assert gate[0]["fix"].startswith("export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1")
    assert gate[0]["fix_env"] == {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}
    assert "?" not in gate[0]["title"]
    assert "ATTN001" not in _attention_ids(_snapshot(RDNA3, arch, version, {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}))


def test_rdna2_always_gets_math():
    """gfx1030 (RX 6800 XT) is in no AOTriton release's targets."""
    healthy_rdna2 = json.loads((SNAPSHOTS / "rdna2_rx6800xt_rocm62_healthy.json").read_text())
    assert _attention_ids(healthy_rdna2) == {"PERF003"}
    env = {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"}  # the variable cannot help an arch that was never built
    healthy_rdna2["env"].update(env)
    assert _attention_ids(healthy_rdna2) == {"PERF003"}


def test_the_gfx11_head_dim_cap_of_aotriton_011():
    assert "ATTN003" in _attention_ids(_snapshot(RDNA3, "gfx1100", "0.11.0"))
    assert "ATTN003" not in _attention_ids(_snapshot(RDNA3, "gfx1100", "0.12.0"))


def test_an_unknown_aotriton_on_a_version_dependent_arch_says_so():
    assert _attention_ids(_snapshot(RDNA3)) == {"ATTN002"}  # gfx1100, torch 2.5.1, no library recorded
    assert _attention_ids(_snapshot(RDNA3, aotriton="0.10.0")) == set()


@pytest.mark.parametrize("aotriton", [None, "0.10.0", "0.11.0", "0.13.0"])
def test_a_healthy_mi300x_with_aotriton_is_quiet(aotriton):
    assert _attention_ids(_snapshot(MI300X, aotriton=aotriton)) == set()


def test_why_a_backend_did_not_run_is_one_line_from_its_causes_or_error():
    """The CLI's attention lines and the tuner's left-out reasons say it the same way (fade.analyze.attention); a
    row with neither causes nor an error text says "refused" (the CLI's own copy raised IndexError there)."""
    from fade.analyze.attention import why_not_run

    assert why_not_run({"causes": [{"cause": "head_dim > 256"}, {"cause": "fp32"}], "error": "x"}) == "head_dim > 256; fp32"
    assert why_not_run({"error": "RuntimeError: No available kernel.\nmore"}, width=12) == "RuntimeError"
    assert why_not_run({"error": ""}) == why_not_run({}) == "refused"
