"""GPU topology from public dumps (tests/fixtures/topology/README.md cites each): links per pair, the link
peaks of data/links.toml, and the snapshot section the doctor's dist rules read."""

from pathlib import Path

import pytest

from fade.analyze.facts import topology_facts
from fade.analyze.links import load_links, pair_peak, slowest_link
from fade.collect.topology import collect_topology, nccl_libraries, parse_amd_link_types, parse_nvidia_topo, topology_links

DUMPS = Path(__file__).parent.parent / "fixtures" / "topology"


def dump(name: str) -> str:
    return "\n".join(line for line in (DUMPS / name).read_text().splitlines() if not line.startswith("#"))


def test_nvidia_nv18_gives_one_bonded_nvlink_per_pair():
    links = parse_nvidia_topo(dump("nvidia_8xh100_nv18.txt"))
    assert len(links) == 28  # 8 GPUs: 8 * 7 / 2 pairs
    assert {(link["kind"], link["detail"], link["count"]) for link in links} == {("nvlink", "NV18", 18)}


def test_nvidia_pcie_paths_keep_their_code():
    links = {tuple(link["gpus"]): link for link in parse_nvidia_topo(dump("nvidia_8gpu_pix_phb_sys.txt"))}
    assert (links[(0, 1)]["detail"], links[(0, 2)]["detail"], links[(0, 4)]["detail"]) == ("PIX", "PHB", "SYS")
    assert {link["kind"] for link in links.values()} == {"pcie"}
    assert parse_nvidia_topo(dump("nvidia_2x5090_phb.txt")) == [{"gpus": [0, 1], "kind": "pcie", "detail": "PHB", "count": None}]


def test_rocm_smi_link_types_are_read_and_other_matrices_are_not_mistaken_for_nvidia_s():
    text = dump("rocm_smi_4gpu_pcie.txt")
    links = parse_amd_link_types(text)
    assert len(links) == 6 and {link["kind"] for link in links} == {"pcie"}
    assert parse_nvidia_topo(text) == []  # its weight matrix has 0, not X, on the diagonal
    assert topology_links({"rocm-smi --showtopo": text}) == (links, "rocm-smi --showtopo")


def test_every_link_row_has_a_source_and_the_nvlink4_pair_peak_is_450_gbs():
    assert all(spec.source for spec in load_links())
    nv18 = parse_nvidia_topo(dump("nvidia_8xh100_nv18.txt"))
    assert pair_peak(nv18[0], "9.0")["peak_gbs"] == pytest.approx(450.0)  # 18 links x 25 GB/s per direction
    slowest = slowest_link(nv18, [0, 1], "9.0")
    assert (slowest["kind"], slowest["peak_gbs"], slowest["spec"]) == ("nvlink", 450.0, "nvlink4")


def test_no_peak_is_named_when_a_pair_has_no_known_link():
    pcie = parse_nvidia_topo(dump("nvidia_2x5090_phb.txt"))
    assert slowest_link(pcie, [0, 1], "12.0") is None  # nvidia-smi gives no PCIe generation
    assert slowest_link(parse_nvidia_topo(dump("nvidia_8xh100_nv18.txt")), [0, 9], "9.0") is None


def test_collect_topology_runs_the_tools_through_the_injected_runner(tmp_path):
    asked = []

    def run(argv):
        asked.append(argv[0])
        return (dump("nvidia_2x5090_phb.txt"), None) if argv[0] == "nvidia-smi" else (None, "not installed")

    (tmp_path / "sys/kernel/iommu_groups/0").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro quiet iommu=pt\n")
    topology = collect_topology(str(tmp_path), run=run)
    assert asked == ["nvidia-smi"]  # one tool that shows the matrix is enough
    assert topology["links_from"] == "nvidia-smi topo -m" and len(topology["links"]) == 1
    assert topology["iommu"] == {"groups": 1, "cmdline_iommu": ["iommu=pt"]}
    facts = topology_facts(topology)
    assert {name: facts[name] for name in ("gpu_pairs", "gpu_links_nvlink", "gpu_links_pcie_only", "iommu_translated")} == {
        "gpu_pairs": 1, "gpu_links_nvlink": False, "gpu_links_pcie_only": True, "iommu_translated": False}  # fmt: skip


def test_a_libnccl_on_ld_library_path_that_differs_from_the_wheel_is_a_shadow(tmp_path):
    """rapidsai/cugraph#4465: a system libnccl 2.16.2 found before torch's pip NCCL 2.20.5."""
    (tmp_path / "libnccl.so.2.16.2").write_text("")
    (tmp_path / "libnccl.so.2").write_text("")  # the soname link carries no version: not counted
    found = nccl_libraries({"LD_LIBRARY_PATH": f"/nonexistent:{tmp_path}"}, version_of=lambda package: "2.20.5")
    assert found == {"wheel": {"package": "nvidia-nccl-cu13", "version": "2.20.5"},
                     "ld_library_path": [{"path": str(tmp_path / "libnccl.so.2.16.2"), "version": "2.16.2"}]}  # fmt: skip
    facts = topology_facts({"links": [], "nccl": found})
    assert (facts["nccl_shadowed"], facts["nccl_shadow_version"], facts["nccl_wheel_version"]) == (True, "2.16.2", "2.20.5")
    assert topology_facts({"links": [], "nccl": {"wheel": None, "ld_library_path": found["ld_library_path"]}})["nccl_shadowed"] is None
