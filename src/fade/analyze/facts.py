"""Turn a snapshot (plus device truths and measurements) into flat facts that rules can test.

Code here only *extracts*: "is /dev/kfd writable", "is the real arch in the wheel". What a fact means,
how bad it is and how to fix it lives in data/rules.toml. A fact that cannot be known is None, and a
rule never fires on None (so a fixture without sysfs cannot trigger a permission finding).
"""

from __future__ import annotations

import re

from fade.analyze import specs
from fade.analyze.attention import ATTENTION_FACTS, attention_facts
from fade.analyze.devices import DeviceTruth, base_arch, gfx_from_override, numeric_properties, torch_build
from fade.analyze.tool_output import parse_nvidia_smi

NETWORK_FILESYSTEMS = {"nfs", "nfs4", "cifs", "smbfs", "smb3", "fuse.sshfs", "lustre", "gpfs", "beegfs",
                       "ceph", "fuse.glusterfs", "9p", "afs", "fuse.s3fs"}
GPU_GROUPS = {"render", "video"}
# The newest ROCm with a PyTorch wheel index when this file was written; used only to build a fix line.
LATEST_ROCM_INDEX = "rocm6.4"

# Every fact name this module produces, in one list: rules.py rejects a rule whose `when` names any other
# (a typo would otherwise silently disable the rule). system_facts and device_facts start from these keys,
# so a fact that cannot be known is present as None, never missing.
SYSTEM_FACTS = (
    "amd_gpu_present", "nvidia_gpu_present", "gpu_present", "torch_importable", "torch_build", "torch_version",
    "torch_available", "torch_device_count", "torch_error", "torch_cuda", "driver_cuda", "driver_version",
    "torch_cuda_newer_than_driver", "driver_too_old_warning", "rocm", "rocm_install", "wheel_rocm", "rocm_index",
    "kfd_exists", "kfd_rw", "kfd_group", "render_node_exists", "render_rw", "dxg_exists", "user_is_root",
    "user_in_gpu_group", "user_name", "tf32_matmul_off",
    "miopen_db_fstype", "miopen_db_network_fs", "miopen_db_path",
    "igpu_first", "dgpu_indices", "igpu_name", "dgpu_name",
    "opencl_no_icd", "opencl_icd_but_no_platform", "opencl_device_present", "opencl_gpu_without_fp16",
    "opencl_fp16_missing_device", "opencl_clblast",
    "gpu_pairs", "gpu_links_nvlink", "gpu_links_pcie_only", "iommu_translated",
    "nccl_wheel_version", "nccl_shadow_version", "nccl_shadow_path", "nccl_shadowed",
)
ENV_FACT_PREFIX = "env."  # plus env.NAME for every variable in the snapshot's env
DEVICE_FACTS = (
    "vendor", "arch", "runtime_arch", "family", "device_name", "device_index", "torch_sees_device",
    "is_integrated", "compute_units", "runtime_units", "override_set", "override_value", "override_valid",
    "override_arch", "override_in_wheel", "override_danger", "hsa_override", "hsa_override_arch",
    "hsa_override_in_wheel", "partitioned", "full_compute_units", "igpu_beside_dgpu", "real_arch_known",
    "arch_in_wheel", "ptx_fallback", "sm",
) + ATTENTION_FACTS  # SDPA on ROCm: what AOTriton was built for (fade.analyze.attention.attention_facts)
MEASURED_FACTS = ("measured.gemm_best_pct", "measured.selftest_ok", "measured.selftest_max_rel_err",
                  "measured.selftest_bad_rows")
# a device rule sees system facts too (doctor.evaluate merges them)
FACT_NAMES = frozenset(SYSTEM_FACTS + DEVICE_FACTS + MEASURED_FACTS)


def is_fact_name(name: str) -> bool:
    return name in FACT_NAMES or (name.startswith(ENV_FACT_PREFIX) and len(name) > len(ENV_FACT_PREFIX))


def _version(text: str | None) -> str | None:
    match = re.match(r"(\d+(?:\.\d+){0,2})", text or "")
    return match.group(1) if match else None


def _wheel_rocm(torch_version: str | None) -> str | None:
    match = re.search(r"\+rocm(\d+(?:\.\d+){0,2})", torch_version or "")
    return match.group(1) if match else None


def _newer(a: str | None, b: str | None) -> bool | None:
    """Is version a newer than b (major.minor)? None when either is unknown."""
    va, vb = _version(a), _version(b)
    if not va or not vb:
        return None
    return tuple(int(x) for x in va.split(".")[:2]) > tuple(int(x) for x in vb.split(".")[:2])


def _rocm_index(rocm_version: str | None) -> str:
    parts = (rocm_version or "").split(".")
    return f"rocm{parts[0]}.{parts[1]}" if len(parts) >= 2 else LATEST_ROCM_INDEX


def system_facts(snapshot: dict, truths: list[DeviceTruth]) -> dict:
    env = snapshot.get("env") or {}
    torch = snapshot.get("torch")
    build = torch_build(torch)
    pci_vendors = {d["vendor"] for d in snapshot.get("pci") or []}
    files = snapshot.get("device_files") or {}
    kfd = files.get("/dev/kfd")
    renders = [v for k, v in files.items() if k.startswith("/dev/dri/renderD")]
    groups = set(snapshot.get("groups") or [])
    user = snapshot.get("user") or {}
    smi = parse_nvidia_smi((snapshot.get("tools") or {}).get("nvidia-smi"))
    mounts = snapshot.get("mounts") or {}
    rocm = snapshot.get("rocm") or {}
    system_rocm = _version(rocm.get("version"))
    kfd_gpus = [n for n in snapshot.get("kfd_nodes") or [] if numeric_properties(n["properties"]).get("simd_count")]
    amd_gpu = "0x1002" in pci_vendors or bool(kfd_gpus) or any(t.vendor == "amd" for t in truths)
    nvidia_gpu = "0x10de" in pci_vendors or bool(smi["gpus"])
    facts = dict.fromkeys(SYSTEM_FACTS)
    facts.update({
        "amd_gpu_present": amd_gpu,
        "nvidia_gpu_present": nvidia_gpu,
        "gpu_present": amd_gpu or nvidia_gpu,
        "torch_importable": torch is not None,
        "torch_build": build,
        "torch_version": torch["version"] if torch else None,
        "torch_available": torch["available"] if torch else None,
        "torch_device_count": torch["device_count"] if torch else None,
        "torch_error": (torch or {}).get("error"),
        "torch_cuda": _version((torch or {}).get("cuda")),
        "driver_cuda": _version(smi["cuda_version"]),
        "driver_version": smi["driver_version"],
        "torch_cuda_newer_than_driver": _newer((torch or {}).get("cuda"), smi["cuda_version"]),
        "driver_too_old_warning": any("driver" in w.lower() and "too old" in w.lower()
                                      for w in (torch or {}).get("warnings") or []) or None,
        "rocm": system_rocm or _wheel_rocm((torch or {}).get("version")),
        "rocm_install": system_rocm,
        "wheel_rocm": _wheel_rocm((torch or {}).get("version")),
        "rocm_index": _rocm_index(system_rocm or _wheel_rocm((torch or {}).get("version"))),
        "kfd_exists": kfd["exists"] if kfd else None,
        "kfd_rw": (kfd["readable"] and kfd["writable"]) if kfd and kfd["exists"] else None,
        "kfd_group": kfd.get("group") if kfd else None,
        "render_node_exists": bool(renders) if files else None,
        "render_rw": all(r["readable"] and r["writable"] for r in renders) if renders else None,
        "dxg_exists": (files.get("/dev/dxg") or {}).get("exists", False) if files else None,
        "user_is_root": user.get("uid") == 0 if "uid" in user else None,
        "user_in_gpu_group": bool(groups & (GPU_GROUPS | ({kfd["group"]} if kfd and kfd.get("group") else set())))
        if groups else None,
        "user_name": user.get("name") or "$USER",
        "tf32_matmul_off": (not torch["backends"].get("matmul_allow_tf32", True)
                            and torch["backends"].get("float32_matmul_precision") == "highest")
        if torch and torch.get("backends") else None,
    })
    miopen_db = _miopen_db_fs(env, mounts)
    facts.update(miopen_db)
    facts.update(_igpu_facts(truths))
    facts.update(opencl_facts(snapshot.get("opencl")))
    facts.update(topology_facts(snapshot.get("topology")))
    for name, value in env.items():
        facts[f"env.{name}"] = value
    return facts


IOMMU_OFF_WORDS = ("iommu=pt", "iommu=off", "amd_iommu=off", "intel_iommu=off")  # no DMA translation for the GPUs


def topology_facts(topology: dict | None) -> dict:
    """GPU-to-GPU links (the snapshot's `topology`, collect.topology): how many pairs, NVLink or PCIe only,
    whether the IOMMU translates DMA (IOMMU groups exist and the kernel command line says neither iommu=pt
    nor off), and whether a libnccl on LD_LIBRARY_PATH (the first one) differs from the pip NCCL torch pins.
    None where the section or the field is missing."""
    links = (topology or {}).get("links") or []
    iommu = (topology or {}).get("iommu") or {}
    groups, words = iommu.get("groups"), iommu.get("cmdline_iommu")
    translated = None
    if groups is not None and words is not None:
        translated = groups > 0 and not any(word in IOMMU_OFF_WORDS for word in words)
    nccl = (topology or {}).get("nccl") or {}
    wheel = (nccl.get("wheel") or {}).get("version")
    shadows = [entry for entry in nccl.get("ld_library_path") or [] if entry.get("version")]
    shadow = shadows[0] if shadows else {}
    return {
        "nccl_wheel_version": wheel,
        "nccl_shadow_version": shadow.get("version"),
        "nccl_shadow_path": shadow.get("path"),
        "nccl_shadowed": (shadow.get("version") != wheel) if wheel and shadow else None,
        "gpu_pairs": len(links) if links else None,
        "gpu_links_nvlink": any(link.get("kind") == "nvlink" for link in links) if links else None,
        "gpu_links_pcie_only": all(link.get("kind") == "pcie" for link in links) if links else None,
        "iommu_translated": translated,
    }


def opencl_facts(opencl: dict | None) -> dict:
    """Facts from the snapshot's optional `opencl` section (fade.ocl's needs); all None without it."""
    if not opencl:
        return {}
    devices = [d for p in opencl.get("platforms") or [] for d in p.get("devices") or []]
    no_fp16 = [d for d in devices if d.get("kind") == "gpu" and d.get("fp16") is False]
    return {
        "opencl_no_icd": not opencl.get("icd_files"),
        "opencl_icd_but_no_platform": bool(opencl.get("icd_files")) and not opencl.get("platforms"),
        "opencl_device_present": bool(devices),
        "opencl_gpu_without_fp16": bool(no_fp16),
        "opencl_fp16_missing_device": no_fp16[0].get("name") if no_fp16 else None,
        "opencl_clblast": opencl.get("clblast"),
    }


def opencl_missing(section: dict) -> list[str]:
    """What keeps fade.ocl from a full OpenCL set-up here, one short phrase each (rules OCL001-004 explain them)."""
    missing = []
    if not section.get("icd_files"):
        missing.append("no ICD registered in /etc/OpenCL/vendors")
    if section.get("loader") is False:
        missing.append("no OpenCL loader (libOpenCL.so: ocl-icd-libopencl1)")
    if section.get("pyopencl") is False:
        missing.append("pyopencl not installed (pip install 'fade[ocl]')")
    if section.get("clblast") is False:
        missing.append("CLBlast not installed (libclblast1): no GEMM on ocl")
    devices = [device for platform in section.get("platforms") or [] for device in platform.get("devices") or []]
    if not devices:
        missing.append("no OpenCL platform or device" + (f" ({section['error']})" if section.get("error") else ""))
    without_fp16 = [device.get("name") or "?" for device in devices if device.get("fp16") is False]
    if without_fp16:
        missing.append(f"no cl_khr_fp16 on {', '.join(without_fp16)}: float32 only there")
    return missing


def _miopen_db_fs(env: dict, mounts: dict) -> dict:
    if not mounts:
        return {"miopen_db_fstype": None, "miopen_db_network_fs": None, "miopen_db_path": None}
    # the DB path is the user-DB entry collect.system.miopen_paths() put second; fall back to any path
    path = env.get("MIOPEN_USER_DB_PATH") or next((p for p in mounts if p.rstrip("/").endswith(".config/miopen")),
                                                  next(iter(mounts)))
    fstype = mounts.get(path)
    return {"miopen_db_fstype": fstype, "miopen_db_path": path,
            "miopen_db_network_fs": fstype in NETWORK_FILESYSTEMS if fstype else None}


def _igpu_facts(truths: list[DeviceTruth]) -> dict:
    visible = [t for t in truths if t.index is not None]
    integrated = [t for t in visible if t.is_integrated]
    discrete = [t for t in visible if t.is_integrated is False]
    first = visible[0] if visible else None
    return {
        "igpu_first": bool(first and first.is_integrated and discrete),
        "dgpu_indices": ",".join(str(t.index) for t in discrete) or None,
        "igpu_name": integrated[0].name if integrated else None,
        "dgpu_name": discrete[0].name if discrete else None,
    }


def _igpu_facts_dgpu(snapshot: dict, truth: DeviceTruth) -> bool:
    devices = (snapshot.get("torch") or {}).get("devices") or []
    return any(d.get("is_integrated") == 0 and d["index"] != truth.index for d in devices)


def device_facts(truth: DeviceTruth, snapshot: dict, measurement: dict | None = None) -> dict:
    env = snapshot.get("env") or {}
    torch = snapshot.get("torch") or {}
    arch_list = [base_arch(a) for a in torch.get("arch_list") or []]
    arch_spec = specs.arch_spec(truth.arch) if truth.arch else None
    override = None
    if truth.kfd_node is not None:
        override = env.get(f"HSA_OVERRIDE_GFX_VERSION_{truth.kfd_node}")
    override = override or env.get("HSA_OVERRIDE_GFX_VERSION")
    override_arch = gfx_from_override(override)
    suggested = arch_spec.hsa_override if arch_spec else None
    suggested_arch = gfx_from_override(suggested)
    facts = dict.fromkeys(DEVICE_FACTS)
    facts.update({
        "vendor": truth.vendor, "arch": truth.arch, "runtime_arch": truth.runtime_arch,
        "family": truth.family, "device_name": truth.name, "device_index": truth.index,
        "torch_sees_device": truth.index is not None,
        "is_integrated": truth.is_integrated,
        "compute_units": truth.compute_units, "runtime_units": truth.runtime_units,
        "override_set": override is not None,
        "override_value": override,
        "override_valid": override_arch is not None if override is not None else None,
        "override_arch": override_arch,
        "override_in_wheel": (override_arch in arch_list) if override_arch and arch_list else None,
        "override_danger": arch_spec.override_danger if arch_spec else None,
        "hsa_override": suggested,
        "hsa_override_arch": suggested_arch,
        # False (not None) when no override is known: "no override helps" is a fact rules act on
        "hsa_override_in_wheel": (suggested_arch in arch_list) if arch_list else None,
        "partitioned": None,
        # an iGPU next to a dGPU: the fix is to hide it (DEVSEL001), not to make it work
        "igpu_beside_dgpu": bool(truth.is_integrated and _igpu_facts_dgpu(snapshot, truth)),
        # only sysfs keeps the real gfx under an override: torch and rocminfo both report the override
        "real_arch_known": truth.witnesses.get("arch") == "KFD gfx_target_version",
    })
    if truth.vendor == "amd" and torch_build(snapshot.get("torch")) == "rocm" and arch_list and truth.arch:
        facts["arch_in_wheel"] = truth.arch in arch_list
    else:
        facts["arch_in_wheel"] = None
    if truth.vendor == "nvidia" and arch_list and truth.arch:
        sm = int(truth.arch[3:])
        ptx = [int(a[8:]) for a in arch_list if a.startswith("compute_") and a[8:].isdigit()]
        facts["arch_in_wheel"] = truth.arch in arch_list
        facts["ptx_fallback"] = any(p <= sm for p in ptx)
        facts["sm"] = sm
    gpu = specs.find_gpu(truth.name, arch=truth.arch) if truth.name else None
    if gpu and truth.compute_units and truth.compute_units < gpu.compute_units:
        facts["partitioned"] = True
        facts["full_compute_units"] = gpu.compute_units
    # AOTriton checks the arch the runtime reports (an override's, when one is set)
    facts.update(attention_facts(vendor=truth.vendor, arch=truth.runtime_arch or truth.arch,
                                 torch_build=torch_build(snapshot.get("torch")),
                                 aotriton_version=(torch.get("aotriton") or {}).get("version"), env=env))  # fmt: skip
    facts.update(measured_facts(measurement))
    return facts


def measured_facts(measurement: dict | None) -> dict:
    """Facts from fade.measure.suites.quick's result for one device (after with_percent_of_peak)."""
    if not measurement or measurement.get("error"):
        return dict.fromkeys(MEASURED_FACTS)
    pcts = [g["pct_of_peak"] for k, g in (measurement.get("gemm") or {}).items()
            if k in ("fp16", "bf16") and g.get("pct_of_peak") is not None]
    selftest = measurement.get("selftest") or {}
    return {"measured.gemm_best_pct": max(pcts) if pcts else None,
            "measured.selftest_ok": selftest.get("ok"),
            "measured.selftest_max_rel_err": selftest.get("max_rel_err"),
            "measured.selftest_bad_rows": ", ".join(str(r) for r in selftest.get("bad_rows") or []) or None}
