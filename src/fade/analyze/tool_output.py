"""Parse the vendor tools' text (rocminfo, nvidia-smi -q) into plain records.

They are a second witness next to torch and sysfs: rocminfo still names the GPU when the torch wheel
is wrong, and nvidia-smi knows the driver's CUDA version and the clocks torch does not expose.
"""

from __future__ import annotations

import re

_ROCMINFO_FIELDS = {
    "Name": "name", "Marketing Name": "marketing_name", "Device Type": "device_type",
    "Compute Unit": "compute_units", "Max Clock Freq. (MHz)": "max_clock_mhz",
    "Wavefront Size": "wavefront_size", "Node": "node", "Uuid": "uuid", "Chip ID": "chip_id",
}
_INT_FIELDS = {"compute_units", "max_clock_mhz", "wavefront_size", "node", "chip_id"}


def parse_rocminfo(text: str | None) -> list[dict]:
    """Agents from rocminfo's `Agent N` blocks: GPU agents only, in enumeration order."""
    if not text:
        return []
    agents, current = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"^\*+$", line):
            continue
        if re.match(r"^Agent \d+$", line):
            current = {}
            agents.append(current)
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        field = _ROCMINFO_FIELDS.get(key.strip())
        if field is None or field in current:  # ISA sub-blocks repeat "Name:"; keep the agent's own
            continue
        value = value.strip()
        if field in _INT_FIELDS:
            match = re.match(r"^(\d+)", value)
            current[field] = int(match.group(1)) if match else None
        else:
            current[field] = value
    return [a for a in agents if a.get("device_type", "").upper() == "GPU"]


def _number(text: str | None) -> float | None:
    match = re.search(r"([\d.]+)", text or "")
    return float(match.group(1)) if match else None


def parse_nvidia_smi(text: str | None) -> dict:
    """{driver_version, cuda_version, gpus: [{bus_id, name, max_sm_mhz, max_mem_mhz}]} from `nvidia-smi -q`."""
    out = {"driver_version": None, "cuda_version": None, "gpus": []}
    if not text:
        return out
    section, gpu = None, None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if re.match(r"^GPU [0-9A-Fa-f:.]+$", stripped):
            gpu = {"bus_id": stripped.split()[1], "name": None, "max_sm_mhz": None, "max_mem_mhz": None}
            out["gpus"].append(gpu)
            section = None
            continue
        if ":" not in stripped:
            section = stripped  # a heading like "Max Clocks"
            continue
        key, _, value = (part.strip() for part in stripped.partition(":"))
        if key == "Driver Version":
            out["driver_version"] = value
        elif key == "CUDA Version":
            out["cuda_version"] = value
        elif gpu is not None and key == "Product Name":
            gpu["name"] = value
        elif gpu is not None and section == "Max Clocks" and key == "SM":
            gpu["max_sm_mhz"] = _number(value)
        elif gpu is not None and section == "Max Clocks" and key == "Memory":
            gpu["max_mem_mhz"] = _number(value)
    return out
