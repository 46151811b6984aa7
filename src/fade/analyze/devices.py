"""Decide what each GPU really is, by reconciling torch, KFD sysfs, rocminfo, nvidia-smi and PCI.

Each witness lies in a known way: torch reports WGPs as `multi_processor_count` on RDNA and the
*overridden* arch under HSA_OVERRIDE_GFX_VERSION; sysfs keeps the real gfx and the real SIMD count but
knows no marketing name; rocminfo and nvidia-smi know names and clocks; PCI ids survive a wrong wheel.
The result labels every number with the witness it came from and never "corrects" torch in place.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from fade.analyze import specs
from fade.analyze.tool_output import parse_nvidia_smi, parse_rocminfo
from fade.kfd import KFD_PROPERTY_MAX

PCI_VENDORS = {"0x1002": "amd", "0x10de": "nvidia", "0x8086": "intel"}
AMD_KFD_VENDOR_ID = 4098  # 0x1002


@dataclass
class DeviceTruth:
    index: int | None  # torch device index; None when torch does not see this GPU
    vendor: str  # "amd" | "nvidia" | "intel" | "cpu"
    name: str
    arch: str | None  # the real chip: gfx1031, sm_90
    runtime_arch: str | None  # what torch reports (differs under HSA_OVERRIDE_GFX_VERSION)
    family: str | None
    compute_units: int | None  # physical CUs / SMs
    runtime_units: int | None  # torch's multi_processor_count (WGPs on RDNA in WGP mode)
    runtime_unit_label: str | None  # "WGP", "CU" or "SM"
    wave_size: int | None
    memory_bytes: int | None
    clock_mhz: float | None
    is_integrated: bool | None
    pci_device_id: str | None
    kfd_node: int | None
    peaks: specs.Peaks | None
    witnesses: dict = field(default_factory=dict)  # field → where its value came from
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["peaks"] = asdict(self.peaks) if self.peaks else None
        return data


def numeric_properties(properties: dict) -> dict:
    """The integer KFD properties the analysis can compute with: text values (the collector keeps a line it
    cannot parse as text) and values outside uint64 are left out, so a damaged snapshot loses a witness
    instead of crashing the doctor."""
    return {key: value for key, value in properties.items()
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= KFD_PROPERTY_MAX}

def gfx_from_target_version(version: int | None) -> str | None:
    """KFD `gfx_target_version` (major*10000 + minor*100 + step, decimal) → "gfx90a"."""
    if not version:
        return None
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def gfx_from_override(value: str | None) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION "10.3.0" → "gfx1030"; None if malformed (ROCR parses %u.%u.%u)."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value or "")
    if not match:
        return None
    major, minor, step = (int(g) for g in match.groups())
    if major > 63 or minor > 255 or step > 255:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def base_arch(name: str | None) -> str | None:
    return name.split(":")[0] if name else None


def _gpu_kfd_nodes(snapshot: dict) -> list[dict]:
    return [n for n in snapshot.get("kfd_nodes") or [] if numeric_properties(n["properties"]).get("simd_count")]


def _match_kfd(torch_devices: list[dict], kfd_gpus: list[dict], env: dict) -> dict[int, dict]:
    """torch index → KFD node. HIP enumerates the GPU agents in KFD order, filtered by the visible-devices
    variables (ROCR first, then HIP/CUDA on top: amd-pitfalls I-8)."""
    order = list(range(len(kfd_gpus)))
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None:
            continue
        picked = [int(tok) for tok in value.split(",") if tok.strip().isdigit()]
        order = [order[i] for i in picked if i < len(order)]
    if len(order) < len(torch_devices):
        return {}
    return {dev["index"]: kfd_gpus[order[i]] for i, dev in enumerate(torch_devices)}


def _amd_units(arch_spec, runtime_units, env) -> int | None:
    if runtime_units is None or arch_spec is None:
        return None
    wgp_mode = env.get("GPU_ENABLE_WGP_MODE", "1") != "0"
    return runtime_units * (arch_spec.cus_per_runtime_unit if wgp_mode else 1)


def _truth_for_torch_device(dev: dict, build: str, kfd: dict | None, agent: dict | None,
                            smi_gpu: dict | None, env: dict) -> DeviceTruth:
    vendor = "amd" if build == "rocm" else "nvidia"
    wit, notes = {}, []
    runtime_arch = base_arch(dev.get("gcnArchName")) if vendor == "amd" else f"sm_{dev['major']}{dev['minor']}"
    arch, clock, units, pci_id, node = runtime_arch, None, None, None, None
    wit["arch"] = "torch gcnArchName" if vendor == "amd" else "torch compute capability"
    if kfd is not None:
        props = numeric_properties(kfd["properties"])
        node = kfd["node"]
        real = gfx_from_target_version(props.get("gfx_target_version"))
        if real:
            arch, wit["arch"] = real, "KFD gfx_target_version"
        if props.get("simd_per_cu") and props.get("simd_count"):
            units, wit["compute_units"] = props["simd_count"] // props["simd_per_cu"], "KFD simd_count/simd_per_cu"
        clock = props.get("max_engine_clk_fcompute") or None
        if clock:
            wit["clock_mhz"] = "KFD max_engine_clk_fcompute"
        if props.get("device_id"):
            pci_id = f"0x{props['device_id']:04x}"
    if agent is not None:
        if units is None and agent.get("compute_units"):
            units, wit["compute_units"] = agent["compute_units"], "rocminfo Compute Unit"
        if clock is None and agent.get("max_clock_mhz"):
            clock, wit["clock_mhz"] = agent["max_clock_mhz"], "rocminfo Max Clock Freq."
    if smi_gpu is not None and smi_gpu.get("max_sm_mhz"):
        clock, wit["clock_mhz"] = smi_gpu["max_sm_mhz"], "nvidia-smi Max Clocks SM"
    arch_spec = specs.arch_spec(arch) if arch else None
    runtime_units = dev["multi_processor_count"]
    if units is None:
        if vendor == "nvidia":
            units, wit["compute_units"] = runtime_units, "torch multi_processor_count"
        else:
            units = _amd_units(arch_spec, runtime_units, env)
            if units is not None:
                wit["compute_units"] = "torch multi_processor_count × CUs per WGP (arch table)"
    label = "SM" if vendor == "nvidia" else "CU"
    if vendor == "amd" and arch_spec and arch_spec.cus_per_runtime_unit > 1 and env.get("GPU_ENABLE_WGP_MODE", "1") != "0":
        label = "WGP"
        notes.append(f"torch reports {runtime_units} multiprocessors: these are WGPs (2 CUs each) in HIP's "
                     f"default WGP mode, not a fault; the chip has {units} CUs")
    if runtime_arch and arch and runtime_arch != arch:
        notes.append(f"runtime reports {runtime_arch} but the chip is {arch} (HSA_OVERRIDE_GFX_VERSION is active)")
    wave = dev.get("warp_size") or (arch_spec.wave_size if arch_spec else None)
    wit["wave_size"] = "torch warp_size" if dev.get("warp_size") else "arch table"
    name = dev["name"]
    if agent is not None and agent.get("marketing_name") and vendor == "amd":
        name = agent["marketing_name"] if len(agent["marketing_name"]) > len(name) else name
    peaks = specs.peaks_for(name, arch=arch, pci_device_id=pci_id, compute_units=units, clock_mhz=clock)
    if peaks is not None and peaks.basis == "computed":
        notes.append(f"{name} is not in the spec table: peaks are {peaks.explanation}")
    return DeviceTruth(
        index=dev["index"], vendor=vendor, name=name, arch=arch, runtime_arch=runtime_arch,
        family=arch_spec.family if arch_spec else None, compute_units=units, runtime_units=runtime_units,
        runtime_unit_label=label, wave_size=wave, memory_bytes=dev["total_memory"], clock_mhz=clock,
        is_integrated=bool(dev["is_integrated"]) if dev.get("is_integrated") is not None else None,
        pci_device_id=pci_id, kfd_node=node, peaks=peaks, witnesses=wit, notes=notes)


def _truth_for_kfd_node(kfd: dict, agent: dict | None, env: dict) -> DeviceTruth:
    """A GPU the kernel sees but torch does not (wrong wheel, no permission, unsupported arch)."""
    props = numeric_properties(kfd["properties"])
    arch = gfx_from_target_version(props.get("gfx_target_version"))
    arch_spec = specs.arch_spec(arch) if arch else None
    units = props["simd_count"] // props["simd_per_cu"] if props.get("simd_per_cu") and props.get("simd_count") else None
    clock = props.get("max_engine_clk_fcompute") or None
    pci_id = f"0x{props['device_id']:04x}" if props.get("device_id") else None
    name = (agent or {}).get("marketing_name") or kfd.get("name") or None
    gpu = specs.find_gpu(name, arch=arch, pci_device_id=pci_id, compute_units=units)
    name = name or (gpu.name if gpu else arch or "AMD GPU")
    peaks = specs.peaks_for(name, arch=arch, pci_device_id=pci_id, compute_units=units, clock_mhz=clock)
    wave = props.get("wave_front_size") or (arch_spec.wave_size if arch_spec else None)
    return DeviceTruth(
        index=None, vendor="amd", name=name, arch=arch, runtime_arch=None,
        family=arch_spec.family if arch_spec else None, compute_units=units, runtime_units=None,
        runtime_unit_label=None, wave_size=wave, memory_bytes=props.get("local_mem_size") or None,
        clock_mhz=clock, is_integrated=bool(arch_spec.igpu) if arch_spec else None, pci_device_id=pci_id,
        kfd_node=kfd["node"], peaks=peaks,
        witnesses={"arch": "KFD gfx_target_version", "compute_units": "KFD simd_count/simd_per_cu"},
        notes=["the kernel driver sees this GPU but torch does not"])


def _truth_for_agent(agent: dict) -> DeviceTruth:
    """A GPU only rocminfo reports (no sysfs in the snapshot, torch does not see it)."""
    arch = base_arch(agent.get("name"))
    arch_spec = specs.arch_spec(arch) if arch else None
    name = agent.get("marketing_name") or arch or "AMD GPU"
    units, clock = agent.get("compute_units"), agent.get("max_clock_mhz")
    peaks = specs.peaks_for(name, arch=arch, compute_units=units, clock_mhz=clock)
    return DeviceTruth(
        index=None, vendor="amd", name=name, arch=arch, runtime_arch=arch,
        family=arch_spec.family if arch_spec else None, compute_units=units, runtime_units=None,
        runtime_unit_label=None, wave_size=agent.get("wavefront_size"), memory_bytes=None, clock_mhz=clock,
        is_integrated=bool(arch_spec.igpu) if arch_spec else None, pci_device_id=None, kfd_node=agent.get("node"),
        peaks=peaks, witnesses={"arch": "rocminfo Name", "compute_units": "rocminfo Compute Unit"},
        notes=["rocminfo sees this GPU but torch does not"])


def _truth_for_pci(dev: dict) -> DeviceTruth:
    vendor = PCI_VENDORS.get(dev["vendor"], dev["vendor"])
    gpu = specs.find_gpu(None, pci_device_id=dev["device"])
    peaks = specs.peaks_for(gpu.name, pci_device_id=dev["device"]) if gpu else None
    return DeviceTruth(
        index=None, vendor=vendor, name=gpu.name if gpu else f"PCI {dev['vendor']}:{dev['device']}",
        arch=gpu.arch if gpu else None, runtime_arch=None, family=None,
        compute_units=gpu.compute_units if gpu else None, runtime_units=None, runtime_unit_label=None,
        wave_size=None, memory_bytes=None, clock_mhz=None, is_integrated=None,
        pci_device_id=dev["device"], kfd_node=None, peaks=peaks, witnesses={"name": "PCI id"},
        notes=["only the PCI bus sees this GPU: no usable driver or torch runtime"])


def torch_build(torch: dict | None) -> str | None:
    """"rocm", "cuda", "cpu", or None when torch is not importable."""
    if torch is None:
        return None
    if torch.get("hip"):
        return "rocm"
    if torch.get("cuda"):
        return "cuda"
    return "cpu"


def device_truths(snapshot: dict) -> list[DeviceTruth]:
    """One DeviceTruth per GPU: torch's devices first (in torch order), then GPUs only the OS sees."""
    env = snapshot.get("env") or {}
    torch = snapshot.get("torch")
    build = torch_build(torch)
    kfd_gpus = _gpu_kfd_nodes(snapshot)
    agents = parse_rocminfo((snapshot.get("tools") or {}).get("rocminfo"))
    smi = parse_nvidia_smi((snapshot.get("tools") or {}).get("nvidia-smi"))
    truths: list[DeviceTruth] = []
    torch_devices = torch["devices"] if torch and build in ("rocm", "cuda") else []
    matched_nodes = _match_kfd(torch_devices, kfd_gpus, env) if build == "rocm" else {}
    for dev in torch_devices:
        kfd = matched_nodes.get(dev["index"])
        agent = None
        if build == "rocm" and agents:
            agent = next((a for a in agents if kfd and a.get("node") == kfd["node"]), None)
            if agent is None and len(agents) == len(torch_devices):
                agent = agents[dev["index"]]
        smi_gpu = None
        if build == "cuda" and smi["gpus"]:
            smi_gpu = next((g for g in smi["gpus"] if dev.get("pci_bus_id") and
                            g["bus_id"].lower().endswith(dev["pci_bus_id"].lower()[-7:])), None)
            if smi_gpu is None and len(smi["gpus"]) == len(torch_devices):
                smi_gpu = smi["gpus"][dev["index"]]
        truths.append(_truth_for_torch_device(dev, build, kfd, agent, smi_gpu, env))
    seen_nodes = {t.kfd_node for t in truths if t.kfd_node is not None}
    if not torch_devices or build != "rocm" or len(matched_nodes) == len(torch_devices):
        for kfd in kfd_gpus:
            if kfd["node"] in seen_nodes or (torch_devices and build == "rocm"):
                continue
            agent = next((a for a in agents if a.get("node") == kfd["node"]), None)
            truths.append(_truth_for_kfd_node(kfd, agent, env))
    if not truths and not kfd_gpus:
        truths.extend(_truth_for_agent(agent) for agent in agents)
    seen_vendors = {t.vendor for t in truths}
    for dev in snapshot.get("pci") or []:
        vendor = PCI_VENDORS.get(dev["vendor"])
        if vendor in ("amd", "nvidia") and vendor not in seen_vendors:
            truths.append(_truth_for_pci(dev))
    return truths


def torch_device_truth(snapshot: dict, index: int) -> DeviceTruth:
    """The DeviceTruth of torch device `index` in `snapshot`; IndexError naming the range when there is none."""
    for truth in device_truths(snapshot):
        if truth.index == index:
            return truth
    count = (snapshot.get("torch") or {}).get("device_count", 0)
    raise IndexError(f"no torch GPU device {index} (torch sees {count})")
