"""GPU-to-GPU topology: the links between each pair of GPUs, from `nvidia-smi topo -m`, `amd-smi topology` or
`rocm-smi --showtopo` (run through collect.tools.run_tool), plus the kernel's IOMMU state and the NCCL
libraries a process would load, for the snapshot's `topology` section (docs/snapshot.md).

A link is {"gpus": [i, j], "kind": "nvlink" | "xgmi" | "pcie", "detail": the tool's code ("NV18", "PHB",
"XGMI", "PCIE"), "count": bonded links (NV#), else null}. nvidia-smi's codes are its legend's: NV# = a bonded
set of # NVLinks; PIX, PXB, PHB, NODE, SYS = a PCIe path (one bridge, several bridges, the host bridge, the
host bridges of one NUMA node, across NUMA nodes). amd-smi and rocm-smi print a "link type" matrix of XGMI
or PCIE per pair. The parsers are pure functions of the tool's text, so saved dumps test them.
"""

from __future__ import annotations

import re
from pathlib import Path

from fade.collect.tools import run_tool

TOPOLOGY_COMMANDS = {
    "nvidia-smi topo -m": ["nvidia-smi", "topo", "-m"],
    "amd-smi topology": ["amd-smi", "topology"],
    "rocm-smi --showtopo": ["rocm-smi", "--showtopo"],
}
NVIDIA_PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
AMD_LINK_KINDS = {"XGMI": "xgmi", "PCIE": "pcie"}
# where the matrix of link types starts in each AMD tool's output
AMD_LINK_TABLE_TITLES = ("Link Type between two GPUs", "LINK TYPE TABLE")


def parse_nvidia_topo(text: str | None) -> list:
    """The GPU-GPU links of `nvidia-smi topo -m`; [] when `text` holds no GPU matrix."""
    if not text:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if re.match(r"^\s*GPU0\b", line)), None)
    if header is None:
        return []
    columns = header.split()
    gpu_columns = [index for index, name in enumerate(columns) if re.fullmatch(r"GPU\d+", name)]
    links = []
    for line in lines:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]) or line is header:
            continue
        row = int(cells[0][3:])
        if row + 1 < len(cells) and cells[row + 1] != "X":
            return []  # nvidia-smi marks the diagonal X; another tool's GPU matrix (rocm-smi's weights) is not this
        for index in gpu_columns:
            if index + 1 >= len(cells):
                break
            column = int(columns[index][3:])
            if column <= row:
                continue
            links.append(_nvidia_link(row, column, cells[index + 1]))
    return links


def _nvidia_link(a: int, b: int, code: str) -> dict:
    match = re.fullmatch(r"NV(\d+)", code)
    if match:
        return {"gpus": [a, b], "kind": "nvlink", "detail": code, "count": int(match.group(1))}
    kind = "pcie" if code in NVIDIA_PCIE_CODES else "unknown"
    return {"gpus": [a, b], "kind": kind, "detail": code, "count": None}


def parse_amd_link_types(text: str | None) -> list:
    """The GPU-GPU links of rocm-smi --showtopo's "Link Type between two GPUs" or amd-smi topology's "LINK TYPE
    TABLE" (rows and columns are GPUs in order, named GPUn or by PCI address); [] without one."""
    if not text:
        return []
    lines = text.splitlines()
    start = next((index for index, line in enumerate(lines) if any(title in line for title in AMD_LINK_TABLE_TITLES)), None)
    if start is None:
        return []
    rows = []
    for line in lines[start + 1:]:
        cells = line.split()
        if not cells:
            if rows:
                break
            continue
        if line.lstrip().startswith("=") or cells[-1].endswith(":"):
            if rows:
                break
            continue
        rows.append(cells)
    if len(rows) < 2:
        return []
    body = rows[1:]  # rows[0] names the columns
    links = []
    for row_index, cells in enumerate(body):
        for column_index, code in enumerate(cells[1:]):
            if column_index <= row_index:
                continue
            kind = AMD_LINK_KINDS.get(code.upper(), "unknown")
            links.append({"gpus": [row_index, column_index], "kind": kind, "detail": code.upper(), "count": None})
    return links


def topology_links(outputs: dict) -> tuple:
    """(links, the tool they came from) from the first tool whose output holds a GPU matrix; ([], None) else."""
    for name, parse in (("nvidia-smi topo -m", parse_nvidia_topo), ("amd-smi topology", parse_amd_link_types),
                        ("rocm-smi --showtopo", parse_amd_link_types)):  # fmt: skip
        links = parse(outputs.get(name))
        if links:
            return links, name
    return [], None


def iommu_state(root: str = "/") -> dict:
    """{"groups": IOMMU groups the kernel made (0: no IOMMU translation), "cmdline_iommu": the iommu= and
    amd_iommu= / intel_iommu= words of /proc/cmdline}; a field the host does not show is None."""
    groups = None
    base = Path(root, "sys/kernel/iommu_groups")
    try:
        groups = sum(1 for _ in base.iterdir())
    except OSError:
        pass
    words = None
    try:
        cmdline = Path(root, "proc/cmdline").read_text(errors="replace")
        words = [word for word in cmdline.split() if re.match(r"^(iommu|amd_iommu|intel_iommu)=", word)]
    except OSError:
        pass
    return {"groups": groups, "cmdline_iommu": words}


NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")  # the pip NCCL torch's CUDA wheels pin


def nccl_libraries(environ: dict | None = None, version_of=None) -> dict:
    """{"wheel": {"package", "version"} of the pip NCCL that torch's CUDA wheels load, or None; "ld_library_path":
    [{"path", "version"}] for each libnccl.so.2.X.Y in a LD_LIBRARY_PATH directory}: a library there is found
    before the wheel's (torch's RUNPATH comes after LD_LIBRARY_PATH), so its version is the one that runs.
    `version_of(package)` is injectable (importlib.metadata.version); no torch is imported."""
    import importlib.metadata
    import os

    environ = os.environ if environ is None else environ
    version_of = version_of or importlib.metadata.version
    wheel = None
    for package in NCCL_WHEELS:
        try:
            wheel = {"package": package, "version": version_of(package)}
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    found = []
    for directory in filter(None, environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            match = re.fullmatch(r"libnccl\.so\.(\d+\.\d+\.\d+)", name)
            if match:
                found.append({"path": str(Path(directory, name)), "version": match.group(1)})
    return {"wheel": wheel, "ld_library_path": found}


def collect_topology(root: str = "/", run=run_tool, environ: dict | None = None) -> dict:
    """The snapshot's `topology` section: each tool's raw output (None when it did not run), the parsed
    links, which tool they came from, the IOMMU state and the NCCL libraries in reach (nccl_libraries).
    `run` is injectable (collect.tools.run_tool)."""
    outputs = {}
    errors = {}
    for name, argv in TOPOLOGY_COMMANDS.items():
        outputs[name], reason = run(argv)
        if reason:
            errors[name] = reason
        if outputs[name] and topology_links({name: outputs[name]})[0]:
            break  # one tool that shows the matrix is enough
    links, tool = topology_links(outputs)
    return {"outputs": outputs, "errors": errors, "links": links, "links_from": tool, "iommu": iommu_state(root),
            "nccl": nccl_libraries(environ)}  # fmt: skip
