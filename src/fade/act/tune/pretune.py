"""Pre-tuning (seed 002): run one model step through exhaustive find/tuning so its shapes land in the
per-device cache, and measure what that does to a fresh process's first iteration.

Method: three fresh processes (`python -m fade.act.tune.pretune ...`, each builds the model and times its
first and second step, synchronized, with the host clock):
    before   the cache's paths but an empty temporary DB (MIOpen and TunableOp start cold);
    tune     PRETUNE_ENV: MIOpen NORMAL find with SEARCH enforcement (every solver benchmarked, results
             written to MIOPEN_USER_DB_PATH), TunableOp tuning on (results to PYTORCH_TUNABLEOP_FILENAME),
             cudnn.benchmark on; it runs PRETUNE_STEPS steps so every forward/backward shape is seen;
    after    LOOKUP_ENV: MIOpen HYBRID find (DB hit, else full find) and TunableOp reading, not tuning.
The figures are first-step seconds of `before` and `after`; the second step shows the steady state.
On CUDA, cuDNN's benchmark results live only in the process (pytorch#88410), so pre-tuning persists
TunableOp results (torch >= 2.14 has real candidates) and nothing for convolutions; the result says so.
The process runner is injectable: tests pass a fake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

PRETUNE_STEPS = 3  # step 1 meets every shape; 2-3 catch shapes that appear after the first update
PRETUNE_ENV = {
    "MIOPEN_FIND_MODE": "1",  # NORMAL: full find for every convolution (amd-pitfalls I-9)
    "MIOPEN_FIND_ENFORCE": "3",  # SEARCH: auto-tune solvers unless the perf DB has them
    "PYTORCH_TUNABLEOP_ENABLED": "1",
    "PYTORCH_TUNABLEOP_TUNING": "1",
}
LOOKUP_ENV = {
    "MIOPEN_FIND_MODE": "3",  # HYBRID: FindDb hit, else full find
    "PYTORCH_TUNABLEOP_ENABLED": "1",
    "PYTORCH_TUNABLEOP_TUNING": "0",  # read the tuned file, tune nothing new
}
CHILD_TIMEOUT_S = 600.0  # an exhaustive MIOpen search of resnet50's training step can take minutes


def run_pretune(
    model: str,
    *,
    mode: str = "train",
    batch: int = 64,
    device: Optional[str] = None,
    size: Optional[int] = None,
    fingerprint: Optional[dict] = None,
    cache_base=None,
    run_child: Optional[Callable[[dict, list], dict]] = None,
) -> dict:
    """Pre-tune `model` into the device cache; returns {before, tune, after, first_step_speedup, cache_dir, notes}."""
    from fade.act.tune.cache import open_cache
    from fade.act.tune.tuner import check_request, worker_fingerprint

    check_request(model, mode=mode, batch=batch, budget_min=1.0)
    fingerprint = fingerprint or worker_fingerprint(device)
    cache = open_cache(fingerprint, base=cache_base)
    run_child = run_child or run_child_json
    arguments = ["--model", model, "--mode", mode, "--batch", str(batch), "--device", device or "cuda"]
    if size is not None:
        arguments += ["--size", str(size)]
    cache_env = cache.env()
    notes = list(cache.messages)
    if fingerprint.get("backend") == "cuda":
        notes.append("CUDA: cuDNN keeps benchmark results in the process only; pre-tuning persists TunableOp GEMMs (real candidates with torch >= 2.14) and compile caches")
    with tempfile.TemporaryDirectory(prefix="fade-pretune-cold-") as cold:
        cold_env = {**cache_env, "MIOPEN_USER_DB_PATH": cold, "PYTORCH_TUNABLEOP_FILENAME": os.path.join(cold, "tunableop_results%d.csv")}
        before = run_child({**cold_env, **LOOKUP_ENV, "PYTORCH_TUNABLEOP_TUNING": "0"}, arguments)
    with cache.lock():  # one pre-tuner at a time writes this device's DBs
        tuned = run_child({**cache_env, **PRETUNE_ENV}, arguments + ["--steps", str(PRETUNE_STEPS), "--benchmark"])
    after = run_child({**cache_env, **LOOKUP_ENV}, arguments)
    speedup = None
    if before.get("first_step_s") and after.get("first_step_s"):
        speedup = before["first_step_s"] / after["first_step_s"]
    return {
        "model": model, "mode": mode, "batch": batch, "device": fingerprint, "cache_dir": str(cache.root),
        "before": before, "tune": tuned, "after": after, "first_step_speedup": speedup,
        "pretune_env": PRETUNE_ENV, "lookup_env": LOOKUP_ENV, "notes": notes,
    }  # fmt: skip


def run_child_json(env: dict, arguments: list, *, module: str = "fade.act.tune.pretune",
                   timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """One fresh process, `python -m module *arguments` with `env` added, whose last stdout line is a JSON object:
    that object plus process_s, or {error} (a timeout, or the exit status and the last stderr line)."""
    started = time.monotonic()
    try:
        completed = subprocess.run([sys.executable, "-m", module, *arguments], env={**os.environ, **env},
                                   capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout_s:g} s"}
    if completed.returncode != 0:
        tail = (completed.stderr.strip().splitlines() or ["no stderr"])[-1]
        return {"error": f"exit {completed.returncode}: {tail}"}
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["process_s"] = time.monotonic() - started
    return result


def child_main(argv=None) -> int:
    """Build the model, time its first and second step (synchronized, host clock), print JSON."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fade.act.tune.pretune")
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", default="train")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--benchmark", action="store_true")
    args = parser.parse_args(argv)
    from fade.measure.worker import die_with_parent

    die_with_parent()  # a killed `fade tune --pretune` takes this child along: nothing writes the DBs unlocked
    import torch

    from fade.measure.case import synchronize
    from fade.measure.step.conditions import pinned_flags
    from fade.measure.step.config import StepConfig
    from fade.measure.step.runner import WEIGHT_SEED, StepRunner
    from fade.measure.zoo.workload import build_workload

    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(args.model, args.batch, args.size, args.device)
    # the baseline configuration's step, as the tuner's trials and the model bench run it
    runner = StepRunner(workload, workload.model, StepConfig(), args.mode == "train", args.device, track_finite=False)
    times = []
    with pinned_flags(cudnn_benchmark=args.benchmark):
        for _ in range(max(2, args.steps)):
            synchronize(args.device)
            started = time.perf_counter()
            runner.step()
            synchronize(args.device)
            times.append(time.perf_counter() - started)
    print(json.dumps({"first_step_s": times[0], "second_step_s": times[1], "steps": len(times)}))
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
