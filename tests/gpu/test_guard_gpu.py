"""fade.guard on a real CUDA/ROCm GPU, which CI's stand-in device (tests/guard/conftest.py) cannot make:
sync-debug capture, pageable copies, stream syncs, Inductor-compiled regions, CUDA graph replays, and
`fade watch` on the two example scripts. Each test states what the guard should report.

Marked `gpu`; skipped with the reason when no CUDA/ROCm device exists. On a GPU machine (about a minute on
an H100):

    python -m pytest -m gpu tests/gpu

(This was benchmarks/guard_gpu_check.py, a script printing PASS/FAIL; the checks are unchanged.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from fade.hostwork import GuardViolation, guard

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (torch.cuda.is_available() is False)")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def device():
    return torch.device("cuda", 0)


def _line(path: Path, marker: str) -> int:
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if text.rstrip().endswith(marker)]
    assert len(lines) == 1, (marker, lines)
    return lines[0]


def _kinds(report) -> dict:
    """{(what, line): count}."""
    return {(r.what, r.line): r.count for r in report.records}


def _this_line() -> int:
    return sys._getframe(1).f_lineno


def test_item_is_a_sync_and_the_sync_debug_mode_is_restored(device):
    loss = torch.randn(1024, device=device).sum()
    with guard(device=device.type, quiet=True) as watched:
        line = _this_line() + 1
        loss.item()
        armed = torch.cuda.get_sync_debug_mode()
    found = _kinds(watched.report)
    restored = torch.cuda.get_sync_debug_mode()
    assert found == {("sync", line): 1} and armed == 1 and restored == 0, {"found": found, "armed": armed,
                                                                         "restored": restored}


def test_cpu_index_is_device_mix_and_the_sync_debug_mode_sees_its_sync(device):
    values, index = torch.randn(1024, device=device), torch.tensor([1, 5, 7])
    with guard(device=device.type, quiet=True) as watched:
        line = _this_line() + 1
        values[index]
    found = _kinds(watched.report)
    assert found.get(("device_mix", line)) == 1 and found.get(("sync", line)) == 1, found


def test_pageable_h2d_is_one_copy_not_also_a_sync(device):
    host = torch.randn(1 << 20)
    with guard(device=device.type, quiet=True) as watched:
        torch.zeros(1, device=device)
        line = _this_line() + 1
        host.to(device)
    found = _kinds(watched.report)
    record = watched.report.by_kind("copy")[0] if watched.report.by_kind("copy") else None
    # A blocking H2D ends in memcpy_and_sync, which the sync debug mode reports: the wait belongs to the copy
    # (record.syncs), not to a second record.
    passed = found == {("copy h2d", line): 1} and record.total_bytes == 4 << 20 and record.syncs == 1
    assert passed, {"found": found, "syncs": record.syncs if record else None}


def test_d2h_is_one_copy_and_only_the_blocking_one_waits(device):
    values = torch.randn(1 << 16, device=device)
    with guard(device=device.type, quiet=True) as watched:
        asynchronous = _this_line() + 1
        values.to("cpu", non_blocking=True)
        blocking = _this_line() + 1
        values.cpu()
    torch.cuda.synchronize()
    found = _kinds(watched.report)
    syncs = {r.line: r.syncs for r in watched.report.records}
    passed = found == {("copy d2h", asynchronous): 1, ("copy d2h", blocking): 1} and syncs == {asynchronous: 0,
                                                                                                blocking: 1}
    assert passed, {"found": found, "syncs": syncs}


def test_explicit_and_stream_syncs_count_once_each(device):
    torch.zeros(1, device=device)
    with guard(device=device.type, quiet=True) as watched:
        first = _this_line() + 1
        torch.cuda.synchronize()
        second = _this_line() + 1
        torch.cuda.current_stream().synchronize()
    found = _kinds(watched.report)
    assert found == {("sync", first): 1, ("sync", second): 1}, found


def test_nonzero_and_boolean_mask_sync(device):
    values = torch.randn(1024, device=device)
    with guard(device=device.type, quiet=True) as watched:
        first = _this_line() + 1
        values.nonzero()
        second = _this_line() + 1
        values[values > 0]
    found = _kinds(watched.report)
    assert found == {("sync", first): 1, ("sync", second): 1}, found


def test_zero_dim_cpu_scalar_is_legal(device):
    values = torch.randn(1024, device=device)
    with guard(device=device.type, quiet=True) as watched:
        values * torch.tensor(2.0)
        values.add_(1)
    assert watched.report.records == [], _kinds(watched.report)


def test_strict_raises_from_backward(device):
    class SyncsInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            grad.sum().item()
            return grad * 2

    weights = torch.randn(16, device=device, requires_grad=True)
    with pytest.raises(GuardViolation) as raised, guard("strict", device.type):
        SyncsInBackward.apply(weights).sum().backward()
    assert raised.value.record.in_backward, str(raised.value).splitlines()[0]


def test_inductor_region_stays_compiled_and_clean(device):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    @torch.compile
    def fused(values):
        return torch.nn.functional.gelu(values * 2 + 1).sum(dim=0)

    values = torch.randn(256, 256, device=device)
    with guard(device=device.type, quiet=True) as watched:
        for _ in range(3):
            fused(values)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1 and watched.report.records == [], {"unique_graphs": graphs, "records": _kinds(watched.report)}


def test_cuda_graph_replay_is_invisible(device):
    """Documented limitation: a replay bypasses the dispatcher, so a graph that copies to the host each
    replay reports nothing during replay."""
    static_in = torch.randn(1024, device=device)
    host_out = torch.empty(1024, pin_memory=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        host_out.copy_(static_in * 2, non_blocking=True)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        host_out.copy_(static_in * 2, non_blocking=True)
    with guard(device=device.type, quiet=True) as watched:
        for _ in range(3):
            graph.replay()
    torch.cuda.synchronize()
    assert watched.report.records == [], "replays seen: " + str(_kinds(watched.report))


def test_print_is_seen_only_through_its_syncs(device):
    """Tensor.__repr__ runs under `_disable_current_modes()` (torch/_tensor_str.py::_str), so the dispatch mode
    sees none of printing's ops or copies; the sync debug mode still reports each wait (masked_select, the
    per-element checks, tolist's blocking D2H copy), all as syncs at the print line. A documented limit."""
    values = torch.randn(8, device=device)
    with open(os.devnull, "w") as devnull, guard(device=device.type, quiet=True) as watched:
        line = _this_line() + 1
        print(values, file=devnull)
    found = _kinds(watched.report)
    assert set(found) == {("sync", line)}, found


def _watch(example: Path, json_path: Path) -> tuple[int, dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "fade", "watch", "--quiet", "--json", str(json_path), "--",
                             sys.executable, str(example), "--steps", "20"], capture_output=True, text=True,
                            timeout=300, env=env)
    return result.returncode, json.loads(json_path.read_text()), result.stderr


def test_fade_watch_names_the_three_planted_problems(device):
    example = EXAMPLES / "guard_planted_problems.py"
    with tempfile.TemporaryDirectory() as tmp:
        code, report, stderr = _watch(example, Path(tmp) / "planted.json")
    named = {(r["kind"], r["direction"], r["line"]) for r in report["records"] if r["file"] == str(example)}
    want = {("sync", "", _line(example, "# PLANTED: item")), ("copy", "h2d", _line(example, "# PLANTED: mask")),
            ("copy", "d2h", _line(example, "# PLANTED: numpy"))}
    others = [(r["kind"], r["line"]) for r in report["records"]
              if (r["kind"], r["direction"], r["line"]) not in want and r["kind"] != "cpu_compute"]
    # Both planted copies are blocking: each one's wait is counted in the copy record, never as a sync of its own.
    not_waiting = [(r["direction"], r["line"]) for r in report["records"]
                   if r["kind"] == "copy" and r.get("syncs") != r["count"]]
    assert code == 0 and want <= named and not others and not not_waiting, {
        "exit_code": code, "named": sorted(named), "unexpected": others, "copies_not_all_waiting": not_waiting}


def test_fade_watch_clean_script_reports_nothing(device):
    with tempfile.TemporaryDirectory() as tmp:
        code, report, stderr = _watch(EXAMPLES / "guard_clean.py", Path(tmp) / "clean.json")
    assert code == 0 and report["records"] == [], {"exit_code": code, "records": report["records"]}
