"""benchmarks/dist_check.py's CPU path (gloo): FADE's run, the plain loop and the scaling run all write their
files under OUT, and the summary pairs FADE's all_reduce figure with the plain loop's per size. No figure is
judged: a 2-core CI host says nothing about a GPU's links."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_smoke_writes_every_result_under_out(tmp_path):
    out = tmp_path / "check"
    completed = subprocess.run([sys.executable, "benchmarks/dist_check.py", str(out), "--device", "cpu", "--smoke",
                                "--scaling-model", "tests.dist.tiny_model:make"], cwd=ROOT, capture_output=True,
                               text=True, timeout=300)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert {"dist-x2.jsonl", "plain-x2.json", "scaling.jsonl", "summary.json", "summary.md"} <= {p.name for p in out.iterdir()}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert [row["size"] for row in summary["all_reduce"]] == ["64KiB"]
    assert all(row["fade_busbw_gbs"] and row["plain_busbw_gbs"] for row in summary["all_reduce"])
    assert [entry["world"] for entry in summary["scaling"]] == [1, 2]
