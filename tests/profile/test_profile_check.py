"""benchmarks/profile_check.py's CPU path (--smoke): every case runs through the CLI, the outputs stay within
the eight files a device run may bring back, and the planted sync is found at its line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]


def test_the_harness_smoke_run_writes_its_few_files_and_finds_the_planted_sync(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "benchmarks/profile_check.py", str(out), "--smoke", "--skip", "bench,gpt2"],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(path.name for path in out.iterdir())
    assert len(files) <= 8 and "results.json" in files and "log.txt" in files
    assert {"resnet50-eager.trace.json.gz", "resnet50-graphs.summary.json", "planted-sync.summary.json"} <= set(files)
    results = json.loads((out / "results.json").read_text())
    assert results["must_show"]["planted_sync_named"]["pass"]
    assert results["cases"]["compare"]["status"] == "ok" and "compare" in results
    assert results["must_show"]["profiler_overhead"]["unprofiled_step_ms"] > 0
    assert results["must_show"]["eager_launch_bound"]["verdict"] == "cpu_only"  # no device timeline on the CPU
