"""Variant names: one precision plus modifiers, explicit and canonical; invalid ones are usage errors, and
variants a device cannot run are skipped with the reason."""

import pytest
import torch

from fade.errors import FadeUsageError
from fade.measure.step.conditions import flags_in_effect as knobs_in_effect
from fade.measure.step.conditions import pinned_flags as fp32_math_flags
from fade.measure.step.config import StepConfig, step_knobs
from fade.measure.suites.models.variants import (
    Variant,
    ignored_knobs,
    parse_variant,
    parse_variants,
    run_as,
    skip_reason,
)

CPU_SUPPORT = {"fp32": None, "fp16": None, "bf16": None, "tf32": "tf32 is a GPU tensor-core mode; the cpu has none"}


@pytest.mark.parametrize(
    "text, name",
    [
        ("fp32", "fp32"),
        ("default", "default"),
        ("compile", "compile"),
        ("default+compile", "compile"),
        ("channels-last+amp-bf16", "amp-bf16+channels-last"),
        ("AMP_BF16+Channels_Last+compile", "amp-bf16+channels-last+compile"),
        ("tf32+compile", "tf32+compile"),
    ],
)
def test_variant_names_are_canonical(text, name):
    assert parse_variant(text).name == name


def test_a_variant_without_a_precision_uses_pytorchs_defaults():
    variant = parse_variant("channels-last")
    assert variant.precision == "default"
    assert (variant.matmul_math, variant.conv_math) == ("ieee", "tf32")


def test_fp32_turns_tf32_off_for_matmul_and_convolutions():
    variant = parse_variant("fp32")
    assert (variant.matmul_math, variant.conv_math) == ("ieee", "ieee")
    assert parse_variant("tf32").record()["matmul_fp32_math"] == "tf32"


@pytest.mark.parametrize(
    "text, message",
    [
        ("bf16", "did you mean 'amp-bf16'"),
        ("fp32+amp-bf16", "two precisions"),
        ("compile+compile", "given twice"),
        ("turbo", "unknown part 'turbo'"),
    ],
)
def test_bad_variant_is_a_one_line_usage_error(text, message):
    with pytest.raises(FadeUsageError, match=message) as caught:
        parse_variant(text)
    assert "\n" not in str(caught.value)


def test_duplicate_spellings_collapse_to_one_variant():
    assert [v.name for v in parse_variants(["fp32", "compile", "default+compile", "fp32"])] == ["fp32", "compile"]


def test_amp_fp16_and_tf32_are_skipped_on_the_cpu_with_a_reason():
    assert "GPU configuration" in skip_reason(Variant("amp-fp16"), "cpu", CPU_SUPPORT)
    assert "tf32" in skip_reason(Variant("tf32"), "cpu", CPU_SUPPORT)
    assert skip_reason(Variant("amp-bf16", channels_last="on"), "cpu", CPU_SUPPORT) is None


def test_a_gpu_knob_in_a_variant_is_skipped_on_the_cpu_with_the_tables_reason():
    assert "a gpu knob" in skip_reason(parse_variant("sdpa_backend=flash"), "cpu", CPU_SUPPORT)
    assert "a gpu knob" in skip_reason(parse_variant("optimizer_impl=fused"), "cpu", CPU_SUPPORT, "train")
    assert skip_reason(parse_variant("cudnn_benchmark=on"), "cuda:0", {}) is None
    assert "changes nothing in infer" in skip_reason(parse_variant("optimizer_impl=fused"), "cuda:0", {}, "infer")
    assert skip_reason(parse_variant("optimizer_impl=fused"), "cuda:0", {}, "train") is None


def test_compile_without_a_compiler_is_skipped(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in skip_reason(Variant("default", compile="default"), "cpu", CPU_SUPPORT)


def test_fp32_math_flags_are_pinned_and_restored():
    before = knobs_in_effect()
    with fp32_math_flags("tf32", "ieee"):
        inside = knobs_in_effect()
    after = knobs_in_effect()
    effective = ("matmul_allow_tf32", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark")
    assert {name: after[name] for name in effective} == {name: before[name] for name in effective}
    assert (inside["matmul_allow_tf32"], inside["cudnn_allow_tf32"]) == (True, False)


def test_pinned_mixed_math_leaves_the_legacy_flags_readable_for_inductor():
    """Inductor's max-autotune lowering reads allow_tf32; a matmul/conv mix set through the new API made
    that read raise ("mix of the legacy and new APIs") and every max-autotune trial fail on an H100."""
    with fp32_math_flags("ieee", "tf32"):
        assert torch.backends.cuda.matmul.allow_tf32 is False
        assert torch.backends.cudnn.allow_tf32 is True
        assert torch.get_float32_matmul_precision() == "highest"


def test_a_variant_name_is_an_alias_of_a_knob_configuration():
    """The bench's names and the tuner's knob names are one vocabulary: the alias, the knob spelling and the
    config made from a knob dict are the same configuration, with the same canonical name."""
    alias = parse_variant("amp-bf16+channels-last+compile")
    spelled = parse_variant("precision=amp-bf16+channels_last=on+compile=default")
    from_knobs = StepConfig.from_knobs({"precision": "amp-bf16", "channels_last": "on", "compile": "default", "tunableop": "on"})
    assert alias == spelled == from_knobs
    assert alias.name == "amp-bf16+channels-last+compile"
    assert alias.changed == {"precision": "amp-bf16", "channels_last": "on", "compile": "default"}
    assert parse_variant("compile=max-autotune").name == "compile=max-autotune"
    assert parse_variant(parse_variant("tf32+sdpa_backend=math").name) == StepConfig(precision="tf32", sdpa_backend="math")


def test_the_record_keeps_the_fields_results_files_compare_on():
    record = parse_variant("amp-bf16+channels-last+compile").record()
    assert {key: record[key] for key in ("name", "precision", "autocast", "matmul_fp32_math", "conv_fp32_math",
                                         "channels_last", "compile")} == {  # fmt: skip
        "name": "amp-bf16+channels-last+compile", "precision": "amp-bf16", "autocast": "bf16",
        "matmul_fp32_math": "ieee", "conv_fp32_math": "tf32", "channels_last": True, "compile": True}  # fmt: skip


def test_a_knob_id_the_table_lacks_is_an_error_not_a_baseline():
    from fade.measure.step.config import ConfigError

    with pytest.raises(ConfigError, match="channel_last: not a knob"):
        StepConfig.from_knobs({"channel_last": "on"})


def test_config_defaults_are_the_knob_tables_baselines():
    assert StepConfig().knobs == {knob_id: knob.baseline for knob_id, knob in step_knobs().items()}


@pytest.mark.parametrize(
    "text, message",
    [("compile=fastest", "compile='fastest' is not a value"), ("tunableop=on", "not a knob a step applies"),
     ("channels_last=on+channels-last", "given twice")],
)
def test_a_bad_knob_in_a_variant_is_a_one_line_usage_error(text, message):
    with pytest.raises(FadeUsageError, match=message) as caught:
        parse_variant(text)
    assert "\n" not in str(caught.value)


def test_pinned_flags_are_restored_when_the_block_raises():
    before = knobs_in_effect()
    with pytest.raises(RuntimeError, match="boom"):
        with fp32_math_flags("tf32", "tf32", cudnn_benchmark=not before["cudnn_benchmark"]) as inside:
            assert inside["matmul_allow_tf32"] is True and inside["cudnn_benchmark"] is not before["cudnn_benchmark"]
            raise RuntimeError("boom")
    after = knobs_in_effect()
    effective = ("matmul_allow_tf32", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark")
    assert {name: after[name] for name in effective} == {name: before[name] for name in effective}


def test_flags_are_pinned_and_restored_where_torch_froze_its_global_flags():
    """torch's OpInfo harness calls disable_global_flags() (for the whole process, so a child runs it), and
    the op probe pins fp32 math under it: setting cudnn.allow_tf32 directly raises there."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(
        """
        import torch
        from fade.measure.step.conditions import flags_in_effect, pinned_flags

        torch.backends.disable_global_flags()
        before = flags_in_effect()
        with pinned_flags("ieee", "ieee", cudnn_benchmark=not before["cudnn_benchmark"]) as inside:
            assert inside["cudnn_allow_tf32"] is False and inside["cudnn_benchmark"] is not before["cudnn_benchmark"]
        effective = ("matmul_allow_tf32", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark")
        after = flags_in_effect()
        assert {name: after[name] for name in effective} == {name: before[name] for name in effective}, (after, before)
        """
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]


@pytest.mark.parametrize("device", ["cpu", "ocl:0"])
def test_cudnn_benchmark_runs_where_it_is_ignored_as_the_variant_without_it(device):
    """The fair CUDA side of issue 19 (fp32, TF32 off, cudnn.benchmark on) must pair with a row on the CPU and on
    fade.ocl: torch ignores the flag without cuDNN, so the variant runs there as fp32 and says so."""
    vendor = parse_variant("fp32+cudnn_benchmark=on")
    assert skip_reason(vendor, device, {}, "train") is None
    assert run_as(vendor, device) == parse_variant("fp32")
    assert ignored_knobs(vendor, device) == {
        "cudnn_benchmark=on": f"a gpu knob (data/knobs.toml) that {device.split(':')[0]} ignores: ran at cudnn_benchmark=off"}


def test_on_a_gpu_cudnn_benchmark_is_applied_as_asked():
    vendor = parse_variant("fp32+cudnn_benchmark=on")
    assert run_as(vendor, "cuda:0") is vendor and ignored_knobs(vendor, "cuda:0") == {}
