"""Collection never crashes or hangs: every missing file, tool or permission becomes data."""

import os
import stat
import sys

from fade.collect import snapshot as snapshot_mod
from fade.collect import system, tools
from fade.collect.snapshot import collect_snapshot, validate_snapshot


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_rocm_box(root):
    """An RX 6700 XT box as sysfs shows it: a CPU node and one gfx1031 GPU node."""
    pci = root / "sys/bus/pci/devices/0000:03:00.0"
    _write(pci / "class", "0x030000\n")
    _write(pci / "vendor", "0x1002\n")
    _write(pci / "device", "0x73df\n")
    nic = root / "sys/bus/pci/devices/0000:04:00.0"
    _write(nic / "class", "0x020000\n")
    _write(nic / "vendor", "0x8086\n")
    _write(nic / "device", "0x1533\n")
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    _write(nodes / "0/properties", "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n")
    _write(nodes / "1/properties", "cpu_cores_count 0\nsimd_count 80\nsimd_per_cu 2\n"
                                   "gfx_target_version 100301\nmax_engine_clk_fcompute 2581\nvendor_id 4098\n"
                                   "device_id 29663\n")
    _write(nodes / "1/name", "gfx1031\n")
    _write(root / "dev/kfd", "")
    os.chmod(root / "dev/kfd", 0)
    _write(root / "dev/dri/renderD128", "")
    _write(root / "proc/mounts", "/dev/sda1 / ext4 rw 0 0\nserver:/home /home nfs4 rw 0 0\n")
    _write(root / "proc/meminfo", "MemTotal:       32768000 kB\n")
    _write(root / "opt/rocm/.info/version", "6.2.4-120\n")


def test_sysfs_probes_read_the_gpu_and_skip_other_pci_classes(tmp_path):
    _fake_rocm_box(tmp_path)
    assert system.pci_devices(str(tmp_path)) == [
        {"address": "0000:03:00.0", "vendor": "0x1002", "device": "0x73df", "class": "0x030000"}]
    nodes = system.kfd_nodes(str(tmp_path))
    assert [n["node"] for n in nodes] == [0, 1]
    assert nodes[1]["properties"]["gfx_target_version"] == 100301
    assert nodes[1]["name"] == "gfx1031"
    assert system.rocm_install(str(tmp_path), environ={}) == {"path": "/opt/rocm", "version": "6.2.4-120"}


def test_network_filesystem_of_the_miopen_db_is_found_by_longest_mount(tmp_path):
    _fake_rocm_box(tmp_path)
    types = system.filesystem_types(["/home/alice/.config/miopen", "/var/tmp"], str(tmp_path))
    assert types == {"/home/alice/.config/miopen": "nfs4", "/var/tmp": "ext4"}


def test_unreadable_kfd_is_recorded_as_not_readable(tmp_path):
    _fake_rocm_box(tmp_path)
    files = system.device_files(str(tmp_path))
    if os.getuid() != 0:  # root reads anything; the permission bits only bind other users
        assert files["/dev/kfd"] == {**files["/dev/kfd"], "exists": True, "readable": False, "writable": False}
    assert "/dev/dri/renderD128" in files


def test_snapshot_of_a_machine_without_sysfs_records_errors_and_validates(tmp_path):
    snap = collect_snapshot(torch="skip", root=str(tmp_path), environ={"HSA_OVERRIDE_GFX_VERSION": "10.3.0",
                                                                      "HOME": "/root", "UNRELATED": "x"},
                            run_tools=False)
    validate_snapshot(snap)
    assert snap["pci"] == [] and snap["kfd_nodes"] == []
    assert "pci" in snap["errors"] and "kfd_nodes" in snap["errors"]
    assert snap["env"] == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert snap["torch"] is None and "torch" in snap["errors"]


def test_snapshot_of_a_fake_rocm_box_validates(tmp_path):
    _fake_rocm_box(tmp_path)
    snap = collect_snapshot(torch="skip", root=str(tmp_path), environ={"HOME": "/home/alice"}, run_tools=False)
    validate_snapshot(snap)
    assert snap["kfd_nodes"][1]["properties"]["simd_count"] == 80
    assert snap["mounts"]["/home/alice/.config/miopen"] == "nfs4"
    assert snap["memory"]["total_bytes"] == 32768000 * 1024


def test_missing_tool_is_null_with_a_reason():
    out, reason = tools.run_tool(["fade-no-such-tool-xyz"])
    assert out is None and reason == "not installed"


def test_hanging_tool_is_killed_at_its_timeout():
    out, reason = tools.run_tool([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert out is None and reason.startswith("timed out")


def test_failing_tool_reports_exit_code():
    out, reason = tools.run_tool([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    assert out is None and reason == "exit 3: boom"


def test_live_torch_probe_reports_this_torch():
    import torch

    info, reason = snapshot_mod._torch_subprocess()
    assert reason is None
    assert info["version"] == torch.__version__
    assert info["available"] == torch.cuda.is_available()


def test_a_probe_that_raises_does_not_lose_the_other_sections(tmp_path, monkeypatch):
    _fake_rocm_box(tmp_path)

    def broken(root="/"):
        raise PermissionError("denied")

    monkeypatch.setattr(system, "kfd_nodes", broken)
    snap = collect_snapshot(torch="skip", root=str(tmp_path), environ={}, run_tools=False)
    assert snap["kfd_nodes"] == [] and snap["errors"]["kfd_nodes"] == "PermissionError: denied"
    assert snap["pci"][0]["vendor"] == "0x1002"
