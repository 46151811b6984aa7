"""benchmarks/hand_config.py on the CPU, in its own process as tune_matrix --hand starts it: a zoo network at
32 px and batch 2, eager, one inference and one training configuration. What is specified: the JSON it
writes (config echoed as asked, figures present and positive, the environment), not how fast it ran."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_hand_config(tmp_path, *flags, exit_code=0):
    out = tmp_path / "hand.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hand_config.py"), *flags, "--device", "cpu",
                           "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == exit_code, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_an_inference_configuration_writes_its_figures(tmp_path):
    record = run_hand_config(tmp_path, "--model", "resnet18", "--mode", "infer", "--batch", "2", "--size", "32")
    assert record["kind"] == "fade-hand-config" and record["status"] == "ok"
    assert record["config"] == {"model": "resnet18", "mode": "infer", "batch": 2, "size": 32, "precision": "fp32",
                                "compile": "off", "channels_last": False, "cudnn_benchmark": False,
                                "optimizer_impl": "default", "sdpa_backend": "default", "device": "cpu"}  # fmt: skip
    assert record["samples_per_s"] > 0 and record["median_ms"] > 0 and record["iqr_ms"] >= 0
    assert record["n"] >= 5 and record["timed_steps"] >= 20 and len(record["block_step_ms"]) == record["n"]
    assert record["samples_per_s"] == pytest.approx(2 / (record["median_ms"] / 1e3))
    assert record["warmup"]["steps"] >= 3 and record["compile_s"] is None and record["learning_rate"] is None
    assert record["loss_finite"] is True
    assert record["torch"] and record["device_name"] == "cpu" and "load_average" in record


def test_a_training_configuration_echoes_its_knobs(tmp_path):
    record = run_hand_config(tmp_path, "--model", "resnet18", "--mode", "train", "--batch", "2", "--size", "32",
                             "--precision", "amp-bf16", "--channels-last", "--optimizer-impl", "foreach")  # fmt: skip
    assert record["status"] == "ok" and record["samples_per_s"] > 0
    config = record["config"]
    assert (config["mode"], config["precision"], config["channels_last"], config["optimizer_impl"]) == ("train", "amp-bf16", True, "foreach")
    assert record["learning_rate"] == 0.01  # the workload's SGD rate, as a user runs it (FADE's timed steps use 0)
    assert record["loss_finite"] is True and record["workload"]["optimizer"].startswith("SGD")


def test_a_configuration_that_raises_is_recorded_as_failed(tmp_path):
    """tune_matrix counts it as a failed side; the record says why."""
    record = run_hand_config(tmp_path, "--model", "nosuchpkg.models:build", "--mode", "infer", "--batch", "2", exit_code=1)
    assert record["status"] == "failed" and "nosuchpkg" in record["reason"] and "samples_per_s" not in record
