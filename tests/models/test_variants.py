"""Variant names: one precision plus modifiers, explicit and canonical; invalid ones are usage errors, and
variants a device cannot run are skipped with the reason."""

import pytest
import torch

from fade.errors import FadeUsageError
from fade.measure.suites.models.variants import (
    Variant,
    fp32_math_flags,
    knobs_in_effect,
    parse_variant,
    parse_variants,
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
    assert parse_variant("tf32").knobs()["matmul_fp32_math"] == "tf32"


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
    assert skip_reason(Variant("amp-bf16", channels_last=True), "cpu", CPU_SUPPORT) is None


def test_compile_without_a_compiler_is_skipped(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in skip_reason(Variant("default", compile=True), "cpu", CPU_SUPPORT)


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
