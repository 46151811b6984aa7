"""Every rule in data/rules.toml fires on a recorded machine and stays quiet on a near one.

Each rule id has a FIRES case and a QUIET case. A case is a fixture snapshot (tests/fixtures/snapshots/,
README.md there cites the public dump behind each) plus, where no recorded machine shows the situation,
a few documented field changes; `why` says what the change models and cites the source that says the
situation is real. Cases run the real path: snapshot -> device truths -> facts -> rules (analyze.doctor
.diagnose), suppression included. A rule added to rules.toml without both cases fails
test_every_rule_has_a_firing_and_a_quiet_case.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from fade.analyze.doctor import diagnose
from fade.analyze.rules import load_rules

FIXTURES = Path(__file__).parent / "fixtures"
DELETE = object()  # a change that removes the key instead of setting it
H100_QUICK = "nvidia_h100_doctor_quick.json"  # fixtures/measurements/: measured figures, cited in the file


@dataclass(frozen=True)
class Case:
    fixture: str  # tests/fixtures/snapshots/<fixture>.json
    why: str = ""  # what the changes model and the source that says it happens; "" when there are none
    changes: tuple = ()  # ((path, value), ...): path is a tuple of keys/indexes into the snapshot
    measurements: str | None = None  # tests/fixtures/measurements/<file>, as `fade doctor` passes them
    measurement_changes: tuple = ()  # the same, into the measurements


def env(**variables) -> tuple:
    """Changes that set environment variables in the snapshot's env (DELETE removes one)."""
    return tuple((("env", name), value) for name, value in variables.items())


def _apply(data: dict, changes) -> dict:
    data = copy.deepcopy(data)
    for path, value in changes:
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if value is DELETE:
            del parent[path[-1]]
        else:
            if isinstance(parent, dict) and path[-1] not in parent and path[0] != "env":
                raise KeyError(f"change {path}: the fixture has no such field (a typo would test nothing)")
            parent[path[-1]] = value
    return data


def _load(name: str, folder: str) -> dict:
    return json.loads((FIXTURES / folder / name).read_text())


def fired_ids(case: Case) -> set[str]:
    snapshot = _apply(_load(case.fixture + ".json", "snapshots"), case.changes)
    measurements = None
    if case.measurements:
        measurements = _apply(_load(case.measurements, "measurements"), case.measurement_changes)
    return {f["id"] for f in diagnose(snapshot, measurements)["findings"]}


HEALTHY_RDNA2 = "rdna2_rx6800xt_rocm62_healthy"
HEALTHY_RDNA3 = "rdna3_rx7900xtx_rocm62_healthy"
H100 = "nvidia_h100_cu130_healthy"
RX6750XT = "rdna2_rx6750xt_gfx1031_override_healthy"
MI300X = "cdna3_mi300x_rocm630_bwd_weight_conv"
OCL_H100 = "nvidia_h100_opencl_registered"
OCL_POCL = "cpu_only_pocl_opencl"
NV18 = "nvidia_8xh100_nv18_topology"  # topology sections: tests/fixtures/topology/README.md
PCIE_5090 = "nvidia_2x5090_pcie_topology"
AMD_PCIE = "amd_4gpu_pcie_topology"
IOMMU_ON = ((("topology", "iommu"), {"groups": 48, "cmdline_iommu": []}),)  # ROCm's IOMMU page: on by default
NCCL_SHADOWED = ((("topology", "nccl"), {"wheel": {"package": "nvidia-nccl-cu11", "version": "2.20.5"},
                                         "ld_library_path": [{"path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.16.2",
                                                              "version": "2.16.2"}]}),)  # fmt: skip
NO_SM90_ARCH_LIST = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]

def with_aotriton(fixture: str, version: str, torch_version: str) -> tuple:
    """A change that gives the fixture's torch a recorded AOTriton library (collect.torch_probe.aotriton_library;
    the file name torch/lib/libaotriton_v2.so.X.Y.Z, as in ROCm/legacy-rocm-build#5404) and a torch version."""
    torch = _load(fixture + ".json", "snapshots")["torch"]
    return ((("torch",), {**torch, "version": torch_version,
                          "aotriton": {"library": f"libaotriton_v2.so.{version}", "version": version}}),)


FIRES = {
    "WHEEL001": Case("amd_rx6800_cpu_wheel_installed"),
    "WHEEL002": Case(H100, "the CPU wheel on an NVIDIA box: the default `pip install torch` is a CPU build "
                     "off Linux x86 and from the CPU index (PyTorch install matrix, pytorch.org/get-started/locally)",
                     changes=((("torch", "version"), "2.11.0+cpu"), (("torch", "cuda"), None),
                              (("torch", "available"), False), (("torch", "device_count"), 0),
                              (("torch", "devices"), []))),
    "WHEEL003": Case("cpu_only_server_cpu_wheel", "torch not installed in this Python: the probe records "
                     "torch as null (docs/snapshot.md)", changes=((("torch",), None),)),
    "WHEEL004": Case(HEALTHY_RDNA2, "the ROCm wheel installed but is_available() False with /dev/kfd usable "
                     "(ROCm/ROCm-docker#90, pytorch/pytorch#140318)",
                     changes=((("torch", "available"), False), (("torch", "device_count"), 0),
                              (("torch", "devices"), []))),
    "NV001": Case("nvidia_rtx3050_laptop_driver_too_old"),
    "NV002": Case("nvidia_a100_tf32_matmul_off"),
    "NV003": Case(H100, "a wheel without sm_90 code and without PTX (its arch list stops at sm_86); the "
                  "CUDA guide's 'Binary Compatibility' says such a binary cannot run on sm_90",
                  changes=((("torch", "arch_list"), NO_SM90_ARCH_LIST),)),
    "NV004": Case(H100, "the same wheel with compute_86 PTX: the driver JIT-compiles it for sm_90 "
                  "(CUDA guide, 'PTX Compatibility')",
                  changes=((("torch", "arch_list"), NO_SM90_ARCH_LIST + ["compute_86"]),)),
    "ARCH001": Case("rdna2_w6600_gfx1032_no_override_missing_arch"),
    "ARCH002": Case("rdna4_rx9070xt_gfx1201_wheel_lacks_arch"),
    "ARCH003": Case(HEALTHY_RDNA2, "HSA_OVERRIDE_GFX_VERSION=10.3.0 left set on a gfx1030 whose code is in "
                    "the wheel (the override guides copy it for every RDNA2 card; crosstalk-solutions/project-nomad#1075)",
                    changes=env(HSA_OVERRIDE_GFX_VERSION="10.3.0")),
    "ARCH004": Case("rdna3_igpu_780m_gfx1103_override_11_0_0"),
    "ARCH005": Case(RX6750XT, "an override in the wrong form (the gfx name instead of major.minor.stepping); "
                    "ROCR's topology.c ignores a value it cannot parse",
                    changes=env(HSA_OVERRIDE_GFX_VERSION="gfx1030")),
    "ARCH006": Case(RX6750XT, "the override set to the card's own version 10.3.1, whose gfx1031 the wheel "
                    "lacks (amd-pitfalls I-3: the override must name an arch in the wheel)",
                    changes=env(HSA_OVERRIDE_GFX_VERSION="10.3.1")),
    "PERM001": Case(HEALTHY_RDNA2, "a container started without --device=/dev/kfd (ROCm/ROCm-docker#90)",
                    changes=((("device_files", "/dev/kfd", "exists"), False),
                             (("device_files", "/dev/kfd", "readable"), False),
                             (("device_files", "/dev/kfd", "writable"), False))),
    "PERM002": Case("amd_mi100_kfd_permission_denied"),
    "PERM003": Case(HEALTHY_RDNA2, "/dev/kfd usable but the render node not: a udev rule that covers only kfd "
                    "(ROCm install docs, 'Configuring permissions for GPU access')",
                    changes=((("device_files", "/dev/dri/renderD128", "readable"), False),
                             (("device_files", "/dev/dri/renderD128", "writable"), False))),
    "PERM004": Case(HEALTHY_RDNA2, "a user in neither render nor video while the device files still open "
                    "(a permissive udev mode; ROCm install docs, 'Configuring permissions for GPU access')",
                    changes=((("groups",), ["user", "adm"]),)),
    "WSL001": Case("wsl2_rx7900xtx_dxg_no_kfd"),
    "DEVSEL001": Case("igpu_gfx1036_device0_rx7900xtx_device1_windows"),
    "DEVSEL002": Case(HEALTHY_RDNA2, "both visibility variables set, as in pytorch/pytorch#140318",
                      changes=env(ROCR_VISIBLE_DEVICES="0", HIP_VISIBLE_DEVICES="0")),
    "FADE001": Case("rdna2_rx6800xt_fade_env_overrides"),
    "FADE002": Case("rdna2_rx6800xt_fade_env_overrides"),
    "MIOPEN001": Case(MI300X),
    "MIOPEN002": Case("amd_mi50_miopen_userdb_on_nfs"),
    "MIOPEN003": Case("rdna4_rx9070xt_gfx1201_wheel_lacks_arch"),
    "MIOPEN004": Case(HEALTHY_RDNA2, "tuning mode left on after tuning (MIOpen docs, find-and-immediate.rst)",
                      changes=env(MIOPEN_FIND_ENFORCE="SEARCH_DB_UPDATE")),
    "MIOPEN005": Case(HEALTHY_RDNA2, "the MIOpen cache switched off (MIOpen docs, cache.rst)",
                      changes=env(MIOPEN_DISABLE_CACHE="1")),
    "PERF001": Case(HEALTHY_RDNA2),
    "PERF002": Case(HEALTHY_RDNA2),
    "PERF003": Case(HEALTHY_RDNA2),
    "ATTN001": Case(HEALTHY_RDNA3, "torch 2.9 with AOTriton 0.11b, which moved gfx1100 back to experimental (its release "
                    "notes, quoted in ROCm/TheRock#1315; pytorch PR#166397)",
                    changes=with_aotriton(HEALTHY_RDNA3, "0.11.0", "2.9.0+rocm6.4")),
    "ATTN002": Case(HEALTHY_RDNA3),
    "ATTN003": Case(HEALTHY_RDNA3, "the same AOTriton 0.11b: gfx11xx capped at head_dim 256 (sdp_utils.cpp aotriton_max_hdim)",
                    changes=with_aotriton(HEALTHY_RDNA3, "0.11.0", "2.9.0+rocm6.4")),
    "PERF004": Case(HEALTHY_RDNA3),
    "PERF005": Case(HEALTHY_RDNA2, "both allocator variables set: the HIP one wins (pytorch "
                    "c10/cuda/CUDAAllocatorConfig.h)",
                    changes=env(PYTORCH_HIP_ALLOC_CONF="expandable_segments:True",
                                PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:512")),
    "PERF006": Case("amd_mi50_miopen_userdb_on_nfs"),
    "PERF007": Case(H100, "TunableOp switched on (pytorch aten/src/ATen/cuda/tunable/README.md)",
                    changes=env(PYTORCH_TUNABLEOP_ENABLED="1")),
    "DBG001": Case(HEALTHY_RDNA2, "a debugging variable left set (ROCm/hip#3465)",
                   changes=env(AMD_SERIALIZE_KERNEL="3")),
    "INST001": Case(MI300X, "the MI300X in CPX mode: each of 8 logical devices has 38 of the 304 CUs "
                    "(ROCm gpu-arch-specs; amdsmi partition docs)",
                    changes=((("kfd_nodes", 2, "properties", "simd_count"), 38 * 4),
                             (("torch", "devices", 0, "multi_processor_count"), 38))),
    "MEAS001": Case(H100, "the self-test failing past row 65536, as rocBLAS did on gfx1201 "
                    "(ROCm/legacy-rocm-build#6595)", measurements=H100_QUICK,
                    measurement_changes=((("devices", "cuda:0", "selftest", "ok"), False),
                                         (("devices", "cuda:0", "selftest", "max_rel_err"), "inf"),
                                         (("devices", "cuda:0", "selftest", "bad_rows"), [65536, 70000]))),
    "MEAS002": Case(H100, "half-precision GEMM at a fifth of the measured figure, as a throttled or "
                    "BLAS-fallback device shows (ROCm/legacy-rocm-build#5643)", measurements=H100_QUICK,
                    measurement_changes=((("devices", "cuda:0", "gemm", "fp16", "value"), 748.7 / 5),
                                         (("devices", "cuda:0", "gemm", "bf16", "value"), 763.9 / 5))),
    "OCL001": Case(OCL_H100, "the same machine before NVIDIA's ICD was registered (issue 17): no .icd file, "
                   "so no platform", ((("opencl", "icd_files"), []), (("opencl", "platforms"), []))),
    "OCL002": Case(OCL_H100, "an nvidia.icd naming a library that does not load: the loader finds no platform "
                   "(Khronos OpenCL-ICD-Loader README)", ((("opencl", "platforms"), []),)),
    "OCL003": Case(OCL_H100),
    "OCL004": Case(OCL_POCL, "the same VM without Debian's libclblast1", ((("opencl", "clblast"), False),)),
    "DIST001": Case(NV18, "NCCL_P2P_DISABLE=1 left from a workaround (NCCL env docs; NVIDIA/nccl#1453's "
                    "thread itself tries it)", env(NCCL_P2P_DISABLE="1")),
    "DIST002": Case(AMD_PCIE),
    "DIST003": Case(AMD_PCIE, "the IOMMU translating, as the kernel does by default (ROCm docs, IOMMU page)",
                    IOMMU_ON),
    "DIST004": Case(NV18, "NCCL_DEBUG=INFO left in a job script (NCCL env docs)", env(NCCL_DEBUG="INFO")),
    "DIST005": Case(PCIE_5090, "multicast forced on PCIe-only GPUs (NCCL env docs, NCCL_NVLS_ENABLE)",
                    env(NCCL_NVLS_ENABLE="1")),
    "DIST006": Case(NV18, "a system libnccl 2.16.2 on LD_LIBRARY_PATH beside torch's pip 2.20.5 (rapidsai/cugraph#4465)",
                    NCCL_SHADOWED),
}

QUIET = {
    "WHEEL001": Case(HEALTHY_RDNA2),
    "WHEEL002": Case(H100),
    "WHEEL003": Case("cpu_only_server_cpu_wheel"),
    "WHEEL004": Case("wsl2_rx7900xtx_dxg_no_kfd"),  # fires there, but WSL001 names the cause and suppresses it
    "NV001": Case(H100),
    "NV002": Case("nvidia_a100_tf32_matmul_off", "the fix applied: torch.backends.cuda.matmul.allow_tf32 = True "
                  "and precision 'high' (PyTorch docs, TF32 on Ampere)",
                  changes=((("torch", "backends", "matmul_allow_tf32"), True),
                           (("torch", "backends", "float32_matmul_precision"), "high"))),
    "NV003": Case(H100),
    "NV004": Case(H100),
    "ARCH001": Case(RX6750XT),  # the same fix, already applied
    "ARCH002": Case(HEALTHY_RDNA3),
    "ARCH003": Case(RX6750XT),  # an override that is needed
    "ARCH004": Case(RX6750XT),
    "ARCH005": Case(RX6750XT),
    "ARCH006": Case(RX6750XT),
    "PERM001": Case("wsl2_rx7900xtx_dxg_no_kfd"),  # no /dev/kfd, but /dev/dxg: WSL001's case
    "PERM002": Case(HEALTHY_RDNA2),
    "PERM003": Case("amd_mi100_kfd_permission_denied"),  # render denied too, but PERM002 covers it
    "PERM004": Case(HEALTHY_RDNA2),
    "WSL001": Case(HEALTHY_RDNA3),
    "DEVSEL001": Case(HEALTHY_RDNA3),
    "DEVSEL002": Case("rdna2_rx6800xt_fade_env_overrides"),  # HIP_VISIBLE_DEVICES alone
    "FADE001": Case(HEALTHY_RDNA2),
    "FADE002": Case("rdna2_rx6800xt_fade_env_overrides", "FADE's overrides without HIP_VISIBLE_DEVICES",
                    changes=env(HIP_VISIBLE_DEVICES=DELETE)),
    "MIOPEN001": Case(MI300X, "the fix applied: MIOPEN_FIND_MODE=3 MIOPEN_FIND_ENFORCE=3 (ROCm/ROCm#4080)",
                      changes=env(MIOPEN_FIND_MODE="3", MIOPEN_FIND_ENFORCE="3")),
    "MIOPEN002": Case(HEALTHY_RDNA2),
    "MIOPEN003": Case(HEALTHY_RDNA3),
    "MIOPEN004": Case(MI300X, "MIOPEN_FIND_ENFORCE=3 (the MIOPEN001 fix) is not tuning mode",
                      changes=env(MIOPEN_FIND_MODE="3", MIOPEN_FIND_ENFORCE="3")),
    "MIOPEN005": Case(HEALTHY_RDNA2),
    "PERF001": Case(HEALTHY_RDNA3),
    "PERF002": Case(HEALTHY_RDNA3),
    "PERF003": Case(HEALTHY_RDNA3),
    "ATTN001": Case(HEALTHY_RDNA3, "the fix applied: TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 (sdp_utils.cpp check_env)",
                    changes=with_aotriton(HEALTHY_RDNA3, "0.11.0", "2.9.0+rocm6.4")
                    + env(TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL="1")),
    "ATTN002": Case(HEALTHY_RDNA3, "the AOTriton version recorded: 0.10b builds gfx1100 as supported",
                    changes=with_aotriton(HEALTHY_RDNA3, "0.10.0", "2.8.0+rocm6.4")),
    "ATTN003": Case(MI300X, "gfx942 under the same AOTriton 0.11b: the 512 limit",
                    changes=with_aotriton(MI300X, "0.11.0", "2.9.0+rocm6.4")),
    "PERF004": Case(HEALTHY_RDNA3, "the fix applied (pytorch ConvUtils.h::miopen_conv_use_channels_last)",
                    changes=env(PYTORCH_MIOPEN_SUGGEST_NHWC="1")),
    "PERF005": Case(HEALTHY_RDNA2),
    "PERF006": Case("amd_mi100_kfd_permission_denied"),  # gfx908 has native host atomics
    "PERF007": Case(H100),
    "DBG001": Case(HEALTHY_RDNA2),
    "INST001": Case(MI300X),  # SPX mode: all 304 CUs
    "MEAS001": Case(H100, measurements=H100_QUICK),
    "MEAS002": Case(H100, measurements=H100_QUICK),
    "OCL001": Case(OCL_H100),
    "OCL002": Case(OCL_H100),
    "OCL003": Case(OCL_POCL),  # PoCL's CPU device lacks cl_khr_fp16 too, but the rule is about GPUs
    "OCL004": Case(OCL_POCL),
    "DIST001": Case(NV18),
    "DIST002": Case(AMD_PCIE, "the fix applied (RCCL usage tips)", env(HSA_FORCE_FINE_GRAIN_PCIE="1")),
    "DIST003": Case(AMD_PCIE, "the fix applied: iommu=pt on the kernel command line (ROCm docs, IOMMU page)",
                    ((("topology", "iommu"), {"groups": 48, "cmdline_iommu": ["iommu=pt"]}),)),
    "DIST004": Case(NV18, "NCCL_DEBUG=WARN prints errors only (NCCL env docs)", env(NCCL_DEBUG="WARN")),
    "DIST005": Case(NV18, "NVLS forced on an NVSwitch system, where it exists (NCCL env docs)",
                    env(NCCL_NVLS_ENABLE="1")),
    "DIST006": Case(NV18, "the same library version on LD_LIBRARY_PATH as the wheel's (rapidsai/cugraph#4465's fix)",
                    ((("topology", "nccl"), {"wheel": {"package": "nvidia-nccl-cu12", "version": "2.20.5"},
                                             "ld_library_path": [{"path": "/usr/lib/libnccl.so.2.20.5", "version": "2.20.5"}]}),)),
}

RULE_IDS = sorted(r.id for r in load_rules())


def test_every_rule_has_a_firing_and_a_quiet_case():
    assert sorted(FIRES) == RULE_IDS, "add a FIRES case for each new rule (and drop ones for removed rules)"
    assert sorted(QUIET) == RULE_IDS, "add a QUIET case for each new rule (and drop ones for removed rules)"


@pytest.mark.parametrize("case", [*FIRES.values(), *QUIET.values()],
                         ids=[*(f"{rule}-fires" for rule in FIRES), *(f"{rule}-quiet" for rule in QUIET)])
def test_a_changed_fixture_says_why_and_every_file_cites_its_source(case):
    assert bool(case.why) == bool(case.changes or case.measurement_changes), "changes need a why, and only they"
    assert _load(case.fixture + ".json", "snapshots")["source"]
    if case.measurements:
        assert _load(case.measurements, "measurements")["source"]


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_fires(rule_id):
    assert rule_id in fired_ids(FIRES[rule_id])


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_rule_stays_quiet(rule_id):
    assert rule_id not in fired_ids(QUIET[rule_id])


def test_a_change_to_a_field_the_fixture_lacks_is_an_error():
    with pytest.raises(KeyError, match="no such field"):
        fired_ids(Case(HEALTHY_RDNA2, "typo", changes=((("torch", "avialable"), False),)))
