"""The GPU spec tables and their loader: which row a device gets, what it falls back to, and what a row must carry."""

import subprocess
import sys

import pytest

from fade.analyze import specs

READ_DATE = "2026-11-22"

# Targets and SKUs the tables promise to cover (FADE's supported hardware list).
REQUIRED_ARCHS = [
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
    "gfx1010", "gfx1012", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201", "gfx90c",
    "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
]

# runtime name as torch / rocminfo / nvidia-smi report it -> row name
RUNTIME_NAMES = {
    "AMD Radeon RX 6400": "AMD Radeon RX 6400",
    "AMD Radeon RX 6500 XT": "AMD Radeon RX 6500 XT",
    "AMD Radeon RX 6600": "AMD Radeon RX 6600",
    "AMD Radeon RX 6600 XT": "AMD Radeon RX 6600 XT",
    "AMD Radeon RX 6650 XT": "AMD Radeon RX 6650 XT",
    "AMD Radeon RX 6700 XT": "AMD Radeon RX 6700 XT",
    "AMD Radeon RX 6750 XT": "AMD Radeon RX 6750 XT",
    "AMD Radeon RX 6800": "AMD Radeon RX 6800",
    "AMD Radeon RX 6800 XT": "AMD Radeon RX 6800 XT",
    "AMD Radeon RX 6900 XT": "AMD Radeon RX 6900 XT",
    "AMD Radeon RX 6950 XT": "AMD Radeon RX 6950 XT",
    "AMD Radeon RX 7600": "AMD Radeon RX 7600",
    "AMD Radeon RX 7600 XT": "AMD Radeon RX 7600 XT",
    "AMD Radeon RX 7700 XT": "AMD Radeon RX 7700 XT",
    "AMD Radeon RX 7800 XT": "AMD Radeon RX 7800 XT",
    "AMD Radeon RX 7900 GRE": "AMD Radeon RX 7900 GRE",
    "AMD Radeon RX 7900 XT": "AMD Radeon RX 7900 XT",
    "Radeon RX 7900 XTX": "AMD Radeon RX 7900 XTX",
    "AMD Radeon RX 9060 XT": "AMD Radeon RX 9060 XT",
    "AMD Radeon RX 9070": "AMD Radeon RX 9070",
    "AMD Radeon RX 9070 XT": "AMD Radeon RX 9070 XT",
    "AMD Radeon 780M Graphics": "AMD Radeon 780M Graphics",
    "AMD Instinct MI100": "AMD Instinct MI100",
    "AMD Instinct MI210": "AMD Instinct MI210",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
    "AMD Instinct MI325X": "AMD Instinct MI325X",
    "AMD Instinct MI300A": "AMD Instinct MI300A",
    "AMD Instinct MI355X": "AMD Instinct MI355X",
    "NVIDIA GeForce RTX 3060": "NVIDIA GeForce RTX 3060",
    "NVIDIA GeForce RTX 3060 Ti": "NVIDIA GeForce RTX 3060 Ti",
    "NVIDIA GeForce RTX 3070": "NVIDIA GeForce RTX 3070",
    "NVIDIA GeForce RTX 3070 Ti": "NVIDIA GeForce RTX 3070 Ti",
    "NVIDIA GeForce RTX 3080": "NVIDIA GeForce RTX 3080",
    "NVIDIA GeForce RTX 3080 Ti": "NVIDIA GeForce RTX 3080 Ti",
    "NVIDIA GeForce RTX 3090": "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 3090 Ti": "NVIDIA GeForce RTX 3090 Ti",
    "NVIDIA GeForce RTX 4060": "NVIDIA GeForce RTX 4060",
    "NVIDIA GeForce RTX 4060 Ti": "NVIDIA GeForce RTX 4060 Ti",
    "NVIDIA GeForce RTX 4070": "NVIDIA GeForce RTX 4070",
    "NVIDIA GeForce RTX 4070 SUPER": "NVIDIA GeForce RTX 4070 SUPER",
    "NVIDIA GeForce RTX 4070 Ti": "NVIDIA GeForce RTX 4070 Ti",
    "NVIDIA GeForce RTX 4070 Ti SUPER": "NVIDIA GeForce RTX 4070 Ti SUPER",
    "NVIDIA GeForce RTX 4080": "NVIDIA GeForce RTX 4080",
    "NVIDIA GeForce RTX 4080 SUPER": "NVIDIA GeForce RTX 4080 SUPER",
    "NVIDIA GeForce RTX 4090": "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 5070": "NVIDIA GeForce RTX 5070",
    "NVIDIA GeForce RTX 5070 Ti": "NVIDIA GeForce RTX 5070 Ti",
    "NVIDIA GeForce RTX 5080": "NVIDIA GeForce RTX 5080",
    "NVIDIA GeForce RTX 5090": "NVIDIA GeForce RTX 5090",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 PCIe 40GB",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM4 40GB",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM4 80GB",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL": "NVIDIA H100 NVL",
    "NVIDIA H200": "NVIDIA H200 SXM",
    "NVIDIA H200 NVL": "NVIDIA H200 NVL",
    "NVIDIA L40S": "NVIDIA L40S",
    "NVIDIA A10": "NVIDIA A10",
    "Tesla T4": "NVIDIA Tesla T4",
    "Tesla V100-SXM2-16GB": "NVIDIA Tesla V100 SXM2 16GB",
    "Tesla V100-SXM2-32GB": "NVIDIA Tesla V100 SXM2 32GB",
    "Tesla V100-PCIE-16GB": "NVIDIA Tesla V100 PCIe 16GB",
}

NUMERIC_FIELDS = ("compute_units", "boost_mhz", "memory_gb", "memory_bandwidth_gbs", "peak_tflops")

GOOD_ARCH = """
[[arch]]
arch = "gfx1030"
vendor = "amd"
family = "RDNA2"
wave_size = 32
cus_per_runtime_unit = 2
flops_per_clock_per_unit = { fp32 = 128, fp16 = 256 }
source = "test fixture"
"""

GOOD_GPU = """
[[gpu]]
name = "AMD Radeon RX 6800 XT"
match = ["Radeon RX 6800 XT"]
arch = "gfx1030"
compute_units = 72
boost_mhz = 2250
peak_tflops = { fp32 = 20.74 }
[gpu.sources]
compute_units = "test fixture"
boost_mhz = "test fixture"
peak_tflops = "test fixture"
"""


# ---------------------------------------------------------------- the bundled tables

def test_bundled_tables_pass_their_own_cross_checks():
    """Every row loads, names a known arch, and agrees with the formula or explains why."""
    assert specs.validate_tables() == []


@pytest.mark.parametrize("arch", REQUIRED_ARCHS)
def test_every_supported_arch_has_a_row(arch):
    assert specs.arch_spec(arch) is not None


@pytest.mark.parametrize(("runtime_name", "row_name"), sorted(RUNTIME_NAMES.items()))
def test_runtime_name_finds_its_sku(runtime_name, row_name):
    gpu = specs.find_gpu(runtime_name)
    assert gpu is not None and gpu.name == row_name


def test_every_row_finds_itself_by_its_own_name():
    """Callers pass a row's name back in (devices.py does); that must land on the same row."""
    for gpu in specs.load_gpus():
        assert specs.find_gpu(gpu.name, arch=gpu.arch, compute_units=gpu.compute_units) == gpu, gpu.name


def test_every_number_has_a_source():
    for gpu in specs.load_gpus():
        for field in NUMERIC_FIELDS:
            if getattr(gpu, field) is not None:
                citation = gpu.sources.get(field, "")
                assert READ_DATE in citation, f"{gpu.name}: {field} citation lacks a read date: {citation!r}"
    for arch in specs.load_archs().values():
        assert READ_DATE in arch.source, arch.arch


def test_derived_numbers_say_so_in_their_citation():
    """A peak with no vendor figure behind it must read 'derived: units x flops/clk x MHz'."""
    gpu = specs.find_gpu("AMD Radeon RX 6800 XT")
    assert gpu.sources["peak_tflops"].startswith("derived: 72 CUs x FLOP/clk/unit")


def test_table_peaks_agree_with_formula_or_explain():
    archs = specs.load_archs()
    for gpu in specs.load_gpus():
        for dtype in specs.formula_mismatches(gpu, archs[gpu.arch]):
            assert dtype in gpu.notes, f"{gpu.name}: {dtype} disagrees with the formula and notes do not say why"


def test_h100_datasheet_uses_the_tensor_clock_not_max_boost():
    """989.4 TF bf16 is 132 SMs x 4096 x 1830 MHz; at the 1980 MHz max boost the formula gives 8% more."""
    gpu = specs.find_gpu("NVIDIA H100 80GB HBM3")
    mismatches = specs.formula_mismatches(gpu, specs.arch_spec("sm_90"))
    assert set(mismatches) == {"tf32", "fp16", "bf16", "fp8"}
    assert "1830" in gpu.notes
    assert 132 * 4096 * 1830 / 1e6 == pytest.approx(gpu.peak_tflops["bf16"], rel=1e-3)


def test_h100_sxm_measured_anchors_are_sensible_fractions_of_peak():
    """Measured 8192^3 GEMMs and a copy kernel on H100 SXM must land at 60-95% of the table peaks."""
    peaks = specs.peaks_for("NVIDIA H100 80GB HBM3", arch="sm_90", compute_units=132)
    assert peaks.basis == "table"
    assert peaks.tflops["bf16"] == 989.4 and peaks.tflops["tf32"] == 494.7 and peaks.tflops["fp32"] == 66.9
    measured = {"bf16": 766, "fp32": 51, "tf32": 356}
    for dtype, tflops in measured.items():
        assert 0.6 < tflops / peaks.tflops[dtype] < 0.95, dtype
    assert 0.6 < 2960 / peaks.bandwidth_gbs < 0.95


def test_mi250x_row_is_per_gcd():
    """Each GCD is its own torch device: 110 CUs, 64 GB, half the OAM's 383 TF and 3.2 TB/s."""
    gpu = specs.find_gpu("AMD Instinct MI250X/MI250", arch="gfx90a:sramecc+:xnack-", compute_units=110)
    assert gpu.name == "AMD Instinct MI250X (one GCD)"
    assert gpu.compute_units == 110 and gpu.memory_gb == 64
    assert gpu.peak_tflops["bf16"] == 191.5 and gpu.memory_bandwidth_gbs == 1638.4
    assert "OAM" in gpu.notes and "383.0" in gpu.notes


def test_mi250_and_mi250x_share_a_name_and_need_compute_units():
    assert specs.find_gpu("AMD Instinct MI250X / MI250") is None
    assert specs.find_gpu("AMD Instinct MI250X / MI250", compute_units=104).name == "AMD Instinct MI250 (one GCD)"
    assert specs.find_gpu(None, pci_device_id="0x7408").name == "AMD Instinct MI250X (one GCD)"


def test_rdna2_has_no_bf16_path():
    """RDNA2 has neither WMMA nor native bf16, whatever torch.cuda.is_bf16_supported() says."""
    for arch in ("gfx1030", "gfx1031", "gfx1032", "gfx1034"):
        assert "bf16" not in specs.arch_spec(arch).flops_per_clock_per_unit
    assert "bf16" in specs.arch_spec("gfx1030").notes
    assert "bf16" not in specs.find_gpu("AMD Radeon RX 6800 XT").peak_tflops


def test_rdna3_and_rdna4_fp32_is_the_dual_issue_figure_and_says_so():
    for arch in ("gfx1100", "gfx1201"):
        spec = specs.arch_spec(arch)
        assert spec.flops_per_clock_per_unit["fp32"] == 256
        assert "dual-issue" in spec.notes


def test_rdna_reports_two_cus_per_runtime_unit_and_gcn_one():
    for spec in specs.load_archs().values():
        rdna = spec.arch.startswith("gfx1")
        assert spec.cus_per_runtime_unit == (2 if rdna else 1), spec.arch
        assert spec.wave_size == (64 if spec.vendor == "amd" and not rdna else 32), spec.arch


# ---------------------------------------------------------------- arch rows: override knowledge

@pytest.mark.parametrize(("arch", "override"), [
    ("gfx1031", "10.3.0"), ("gfx1032", "10.3.0"), ("gfx1036", "10.3.0"),
    ("gfx1101", "11.0.0"), ("gfx1103", "11.0.0"), ("gfx1150", "11.0.0"), ("gfx1151", "11.0.0"),
    ("gfx90c", "9.0.0"),
])
def test_override_suggested_for_unsupported_consumer_arch(arch, override):
    assert specs.arch_spec(arch).hsa_override == override


def test_no_override_is_suggested_for_gfx1010():
    """RDNA1 segfaults or computes zeros under every known override."""
    assert specs.arch_spec("gfx1010").hsa_override is None


def test_override_on_gfx1103_carries_its_danger():
    danger = specs.arch_spec("gfx1103").override_danger
    assert "page faults" in danger and "MIOpen#3954" in danger


def test_integrated_only_archs_are_marked():
    for arch in ("gfx1035", "gfx1036", "gfx1103", "gfx1150", "gfx1151", "gfx90c"):
        assert specs.arch_spec(arch).igpu, arch
    assert not specs.arch_spec("gfx1030").igpu


@pytest.mark.parametrize(("spelling", "arch"), [
    ("gfx90a:sramecc+:xnack-", "gfx90a"), ("GFX1030", "gfx1030"),
    ("sm_90", "sm_90"), ("sm90", "sm_90"), ("SM_120", "sm_120"),
])
def test_arch_names_accept_feature_suffixes_and_sm_spellings(spelling, arch):
    assert specs.arch_spec(spelling).arch == arch


def test_unknown_arch_is_none():
    assert specs.arch_spec("gfx9999") is None


# ---------------------------------------------------------------- lookup rules

def test_longest_match_wins_for_rx_6800_xt():
    assert specs.find_gpu("AMD Radeon RX 6800 XT").name == "AMD Radeon RX 6800 XT"
    assert specs.find_gpu("AMD Radeon RX 6800").name == "AMD Radeon RX 6800"


def test_lookup_ignores_case():
    assert specs.find_gpu("amd radeon rx 7900 xtx").name == "AMD Radeon RX 7900 XTX"


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA A100-SXM4-64GB", "AMD Radeon RX 7600M XT", "NVIDIA L40"])
def test_a_match_string_does_not_claim_a_longer_model_number(name):
    """'NVIDIA A10' must not take an A100 or A10G, nor 'Radeon RX 7600' a 7600M, nor 'L40S' an L40."""
    assert specs.find_gpu(name) is None


def test_laptop_variant_does_not_get_desktop_peak():
    assert specs.find_gpu("NVIDIA GeForce RTX 4090 Laptop GPU") is None


def test_pci_id_match_wins_over_name_match():
    assert specs.find_gpu("AMD Radeon RX 6800", pci_device_id="0x73a5").name == "AMD Radeon RX 6950 XT"


def test_generic_name_is_resolved_by_pci_id_and_compute_units():
    """iGPUs and some drivers report 'AMD Radeon Graphics'; the PCI id plus CU count still finds the SKU."""
    gpu = specs.find_gpu("AMD Radeon Graphics", pci_device_id="73BF", compute_units=72)
    assert gpu.name == "AMD Radeon RX 6800 XT"


def test_shared_pci_id_alone_is_ambiguous():
    """0x73bf is RX 6800, 6800 XT and 6900 XT: no guess without a name or CU count."""
    assert specs.find_gpu(None, pci_device_id="0x73bf") is None


def test_name_breaks_a_pci_id_tie():
    assert specs.find_gpu("AMD Radeon RX 6750 XT", pci_device_id="0x73df").name == "AMD Radeon RX 6750 XT"


def test_arch_must_agree_with_the_row():
    assert specs.find_gpu("AMD Radeon RX 6800 XT", arch="gfx1100") is None
    assert specs.find_gpu("AMD Radeon RX 6800 XT", arch="gfx1030").name == "AMD Radeon RX 6800 XT"


def test_cut_down_sku_does_not_get_full_peak():
    """The 12 GB RTX 3080 (70 SMs) shares the 10 GB card's name; it gets a computed peak, not the row."""
    assert specs.find_gpu("NVIDIA GeForce RTX 3080", compute_units=70) is None
    peaks = specs.peaks_for("NVIDIA GeForce RTX 3080", arch="sm_86", compute_units=70, clock_mhz=1710)
    assert peaks.basis == "computed"
    assert peaks.tflops["fp32"] == pytest.approx(70 * 256 * 1710 / 1e6)


def test_mi300x_partition_gets_a_per_partition_peak():
    """CPX mode shows 8 devices of 38 CUs named 'AMD Instinct MI300X'; each must not claim 304 CUs' peak."""
    peaks = specs.peaks_for("AMD Instinct MI300X", arch="gfx942", compute_units=38, clock_mhz=2100)
    assert peaks.basis == "computed"
    assert peaks.tflops["bf16"] == pytest.approx(1307.4 / 8, rel=1e-3)


# ---------------------------------------------------------------- peaks

def test_table_row_peaks_carry_bandwidth_and_citation():
    peaks = specs.peaks_for("AMD Radeon RX 6800 XT", arch="gfx1030", compute_units=72, clock_mhz=2400)
    assert peaks.basis == "table"
    assert peaks.explanation == "table row 'AMD Radeon RX 6800 XT'"
    assert peaks.tflops["fp32"] == 20.74  # the table's boost clock, not the caller's 2400 MHz
    assert peaks.bandwidth_gbs == 512
    assert "gpu-monkey.com" in peaks.source


def test_unknown_sku_of_known_arch_gets_computed_peak():
    peaks = specs.peaks_for("AMD Radeon PRO W6600", arch="gfx1032", compute_units=28, clock_mhz=2903)
    assert peaks.basis == "computed"
    assert peaks.tflops["fp32"] == pytest.approx(28 * 128 * 2903 / 1e6)
    assert peaks.bandwidth_gbs is None
    assert "28 CUs" in peaks.explanation and "2903 MHz" in peaks.explanation and "gfx1032" in peaks.explanation
    assert "archs.toml gfx1032" in peaks.source


def test_computed_nvidia_peak_counts_sms():
    peaks = specs.peaks_for("NVIDIA RTX 6000 Ada Generation", arch="sm_89", compute_units=142, clock_mhz=2505)
    assert "142 SMs" in peaks.explanation


@pytest.mark.parametrize("kwargs", [
    {"arch": "gfx1030", "compute_units": 60},  # no clock
    {"arch": "gfx1030", "clock_mhz": 2000},  # no units
    {"arch": "gfx9999", "compute_units": 60, "clock_mhz": 2000},  # unknown arch
    {"compute_units": 60, "clock_mhz": 2000},  # no arch
])
def test_no_peak_without_arch_units_and_clock(kwargs):
    assert specs.peaks_for("Some Unknown GPU", **kwargs) is None


# ---------------------------------------------------------------- validation of user-edited tables

@pytest.mark.parametrize(("text", "expected"), [
    (GOOD_ARCH + GOOD_ARCH.replace('source = "test fixture"\n', ""), "missing 'source'"),
    (GOOD_ARCH + GOOD_ARCH.replace("fp16 = 256", "bf61 = 256"), "unknown dtype 'bf61'"),
    (GOOD_ARCH + GOOD_ARCH.replace("fp16 = 256", "fp16 = 0"), "must be a positive number"),
    (GOOD_ARCH + GOOD_ARCH.replace("wave_size = 32", "wave_size = 48"), "wave_size must be 32 or 64"),
    (GOOD_ARCH + GOOD_ARCH, "duplicate arch 'gfx1030' (first defined in row 1)"),
])
def test_bad_arch_row_is_rejected_with_file_and_row(tmp_path, text, expected):
    path = tmp_path / "archs.toml"
    path.write_text(text)
    with pytest.raises(specs.SpecError) as error:
        specs.load_archs(path)
    message = str(error.value)
    assert str(path) in message and "[[arch]] row 2 ('gfx1030')" in message and expected in message


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD_GPU.replace('compute_units = "test fixture"\n', ""), "no citation for 'compute_units'"),
    (GOOD_GPU.replace("fp32 = 20.74", "fp32 = -1"), "peak_tflops.fp32 must be a positive number"),
    (GOOD_GPU.replace('arch = "gfx1030"', 'arch = "gfx1030"\npci_device_ids = ["0x73BF"]'), "lower-case hex"),
    (GOOD_GPU.replace("boost_mhz = 2250", "boost_mhz = 0"), "boost_mhz must be a positive number"),
])
def test_bad_gpu_row_is_rejected_with_file_and_row(tmp_path, text, expected):
    path = tmp_path / "gpus.toml"
    path.write_text(text)
    with pytest.raises(specs.SpecError) as error:
        specs.load_gpus(path)
    message = str(error.value)
    assert str(path) in message and "[[gpu]] row 1 ('AMD Radeon RX 6800 XT')" in message and expected in message


def test_misspelt_key_gets_a_did_you_mean(tmp_path):
    path = tmp_path / "archs.toml"
    path.write_text(GOOD_ARCH.replace("cus_per_runtime_unit", "cus_per_runtime_units"))
    with pytest.raises(specs.SpecError, match="did you mean 'cus_per_runtime_unit'"):
        specs.load_archs(path)


def test_spec_error_is_a_value_error_and_a_usage_error():
    from fade.errors import FadeUsageError

    assert issubclass(specs.SpecError, ValueError) and issubclass(specs.SpecError, FadeUsageError)


def test_unexplained_formula_gap_is_reported(tmp_path):
    archs, gpus = tmp_path / "archs.toml", tmp_path / "gpus.toml"
    archs.write_text(GOOD_ARCH)
    gpus.write_text(GOOD_GPU.replace("fp32 = 20.74", "fp32 = 41.47"))
    problems = specs.validate_tables(archs, gpus)
    assert len(problems) == 1 and "fp32 41.47 TF disagrees with the formula (20.7 TF)" in problems[0]
    explained = 'fp32 = 41.47 }\nnotes = "fp32 is quoted at twice the rate: a test"'
    gpus.write_text(GOOD_GPU.replace("fp32 = 20.74 }", explained))
    assert specs.validate_tables(archs, gpus) == []


def test_user_tables_feed_the_lookup(tmp_path):
    """A user's tables go through the same loader and lookup as the bundled ones."""
    archs, gpus = tmp_path / "archs.toml", tmp_path / "gpus.toml"
    archs.write_text(GOOD_ARCH)
    gpus.write_text(GOOD_GPU)
    table = specs.load_gpus(gpus)
    assert specs.peaks_for("AMD Radeon RX 6800 XT", gpus=table).tflops == {"fp32": 20.74}
    computed = specs.peaks_for("Other", arch="gfx1030", compute_units=10, clock_mhz=1000, gpus=table,
                               archs=specs.load_archs(archs))
    assert computed.tflops == {"fp32": 1.28, "fp16": 2.56}


def test_callers_cannot_corrupt_the_cached_tables():
    specs.load_archs().clear()
    specs.load_gpus().clear()
    assert specs.arch_spec("gfx1030") is not None
    assert specs.find_gpu("AMD Radeon RX 6800 XT") is not None
    peaks = specs.peaks_for("AMD Radeon RX 6800 XT")
    peaks.tflops["fp32"] = 0.0
    assert specs.peaks_for("AMD Radeon RX 6800 XT").tflops["fp32"] == 20.74


def test_results_copy_and_serialize():
    """Snapshots deep-copy and JSON-dump device results that embed Peaks and rows."""
    import copy
    import dataclasses
    import json

    peaks = specs.peaks_for("NVIDIA H100 80GB HBM3")
    assert copy.deepcopy(peaks) == peaks
    json.dumps(dataclasses.asdict(peaks))
    json.dumps(dataclasses.asdict(specs.find_gpu("NVIDIA H100 80GB HBM3")))


def test_spec_module_imports_neither_torch_nor_collect():
    code = (
        "import sys, fade.analyze.specs as s; s.load_gpus(); "
        "print('torch' in sys.modules, any(m.startswith('fade.collect') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
