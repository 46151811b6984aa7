"""Pre-tuning on fade.ocl (`fade tune MODEL --device ocl --pretune`): record the GEMMs of one model step, tune
CLBlast's parameters for them (fade.ocl.tuning), keep them only if fresh processes confirm the gain, persist
them per device fingerprint in the tuning cache, and measure the step before and after.

Method, every measurement in a fresh process (`python -m fade.act.tune.oclgemm ...`, one JSON line out):
    before   per workload: FADE_OCL_CLBLAST_TUNED=0 (CLBlast's own parameters); the first step runs under
             runtime.record_gemms (its GEMM shapes and counts), then STEPS_TIMED more steps, each synchronized
             and timed with the host clock; the figure is their median (the first step builds kernels);
    tune     FADE_OCL_CLBLAST_TUNED=0, fade.ocl.tuning.tune over the union of the shapes within the budget;
    confirm  two processes time every shape, CLBlast's parameters then the chosen ones (given explicitly):
             the per-shape GFLOP/s default vs tuned; the chosen parameters are persisted only when their
             time-weighted total beats the default's by more than the search's noise (else {} is persisted:
             "CLBlast's own, measured");
    after    per workload: the step again, fade.ocl applying the cache when it opens the device.
The process runner is injectable: tests pass a fake.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Callable, Optional

from fade.act.tune.pretune import run_child_json

MODULE = "fade.act.tune.oclgemm"
STEPS_TIMED = 3  # after the first (building) step: the median of 3 ignores one disturbed step
DEFAULTS_ENV = {"FADE_OCL_CLBLAST_TUNED": "0"}  # fade.ocl.tuning.DISABLE_ENV: CLBlast's own parameters
TUNE_FIELDS = ("chosen", "note", "searched_shapes", "stages", "noise", "elapsed_s", "budget_s", "method", "rejected")
MAX_LOST_RESTARTS = 3  # searches restarted after a candidate broke the device's queue (tuning.DeviceLost)
MIN_RESTART_BUDGET_S = 30.0  # a restarted search gets at least this (it measures every shape again first)
CHILD_OVERHEAD_S = 300.0  # a tune child's time beyond its budget: model-free, but the last candidate and the
# final measurement of every shape run after the budget's check


def run_ocl_pretune(workloads: list, *, device: str = "ocl:0", budget_s: float = 300.0, extra_shapes=(),
                    cache_base=None, run_child: Optional[Callable] = None,
                    progress: Optional[Callable[[str], None]] = None) -> dict:
    """Pre-tune CLBlast for `workloads` ([{model, mode, batch, size}]) plus `extra_shapes` (GemmShape dicts) on
    `device`; returns {workloads (before/after step times), shapes, tune, gemm (per shape default vs tuned
    GFLOP/s), verdict, persisted, cache_dir, device, notes}. Nothing here touches OpenCL: the children do."""
    from fade.version import __version__
    from fade.act.tune.cache import open_cache
    from fade.ocl.tuning import CACHE_FILE, persist, shape_from_dict

    run_child = run_child or run_child_json
    progress = progress or (lambda message: None)
    notes: list = []
    rows = []
    shapes: dict = {}
    for workload in workloads:
        progress(f"{_name(workload)}: step with CLBlast's own parameters (recording its GEMMs)")
        before = run_child(DEFAULTS_ENV, ["step", *_step_arguments(workload, device), "--record"], module=MODULE)
        rows.append({**workload, "before": before})
        if "error" in before:
            raise RuntimeError(f"{_name(workload)} on {device}: {before['error']}")
        progress(f"{_name(workload)}: median step {_seconds(before.get('median_step_s'))} (first "
                 f"{_seconds(before.get('first_step_s'))}), {len(before.get('shapes', []))} GEMM shapes")
        for shape in before.get("shapes", []):
            key = json.dumps({**shape, "calls": 0}, sort_keys=True)
            shapes[key] = {**shape, "calls": shapes.get(key, {}).get("calls", 0) + shape["calls"]}
    for shape in extra_shapes:
        checked = shape_from_dict(dict(shape)).as_dict()
        key = json.dumps({**checked, "calls": 0}, sort_keys=True)
        shapes[key] = {**checked, "calls": shapes.get(key, {}).get("calls", 0) + checked["calls"]}
    shape_list = list(shapes.values())
    with tempfile.TemporaryDirectory(prefix="fade-oclgemm-") as work:
        shapes_file = os.path.join(work, "shapes.json")
        with open(shapes_file, "w", encoding="utf-8") as handle:
            json.dump(shape_list, handle)
        progress(f"tuning CLBlast on {len(shape_list)} GEMM shapes within {budget_s:g} s")
        tuned, excluded, left_s = {}, [], budget_s
        for _ in range(1 + MAX_LOST_RESTARTS):  # a candidate that breaks the queue ends its process: go on without it
            begun = time.monotonic()
            tuned = run_child(DEFAULTS_ENV, ["tune", "--shapes", shapes_file, "--budget-s", str(left_s), "--device",
                                             device] + (["--exclude", json.dumps(excluded)] if excluded else []),
                              module=MODULE, timeout_s=left_s + CHILD_OVERHEAD_S)
            if not tuned.get("lost_on"):
                break
            excluded.append(tuned["lost_on"])
            notes.append(f"candidate {tuned['lost_on']} broke the device's queue; the search restarted without it "
                         "in a fresh process")
            progress(notes[-1])
            left_s = max(MIN_RESTART_BUDGET_S, left_s - (time.monotonic() - begun))
        if "error" in tuned:
            raise RuntimeError(f"tuning CLBlast on {device}: {tuned['error']}")
        chosen = tuned.get("chosen") or {}
        progress(f"search done in {tuned.get('elapsed_s', 0):.0f} s: chose {', '.join(chosen) or 'nothing'}"
                 + (f" ({tuned['note']})" if tuned.get("note") else ""))
        gemm, verdict = [], "kept-defaults"
        if chosen:
            progress("confirming in fresh processes: CLBlast's parameters, then the chosen ones")
            parameters_file = os.path.join(work, "parameters.json")
            with open(parameters_file, "w", encoding="utf-8") as handle:
                json.dump(chosen, handle)
            measure = ["measure", "--shapes", shapes_file, "--device", device]
            default = run_child(DEFAULTS_ENV, measure, module=MODULE)
            candidate = run_child(DEFAULTS_ENV, measure + ["--parameters", parameters_file], module=MODULE)
            if "error" in default or "error" in candidate:
                notes.append(f"confirmation failed: {default.get('error') or candidate.get('error')}")
                verdict = "not-confirmed"
            else:
                gemm = compare_rows(default["rows"], candidate["rows"])
                progress(f"confirmation: {default['total_s'] * 1e3:.4g} ms of GEMM per step with CLBlast's "
                         f"parameters, {candidate['total_s'] * 1e3:.4g} ms with the chosen ones")
                confirmed = candidate["total_s"] < default["total_s"] * (1 - tuned.get("noise", 0.0))
                verdict = "tuned" if confirmed and candidate["worst_rel_diff"] <= tuned["method"]["gemm_rtol"] \
                    else "not-confirmed"
    if not gemm:  # nothing confirmed: the search's own figures for CLBlast's parameters, no tuned column
        gemm = [{"label": row["label"], "shape": row["shape"], "calls": row["shape"]["calls"],
                 "default_gflops": row["gflops"], "tuned_gflops": None, "default_relative_iqr": row["relative_iqr"],
                 "tuned_relative_iqr": None, "speedup": None} for row in (tuned.get("default") or {}).get("rows", [])]
    kept = chosen if verdict == "tuned" else {}
    cache = open_cache(tuned["fingerprint"], base=cache_base)
    notes += cache.messages
    evidence = {"verdict": verdict, "gemm": gemm, "noise": tuned.get("noise"), "stages": tuned.get("stages"),
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    persisted = persist(cache, tuned["fingerprint"], kept, evidence)
    if cache.temporary:
        notes.append(f"{CACHE_FILE} went to a temporary cache: the next run will not find it")
    for row in rows:
        progress(f"{_name(row)}: step with the cache applied")
        row["after"] = run_child({}, ["step", *_step_arguments(row, device)], module=MODULE)
        before_s, after_s = row["before"].get("median_step_s"), row["after"].get("median_step_s")
        row["step_speedup"] = before_s / after_s if before_s and after_s else None
        progress(f"{_name(row)}: median step {_seconds(before_s)} before, {_seconds(after_s)} after "
                 f"({(row['after'].get('clblast') or {}).get('reason')})")
    return {"schema_version": 1, "fade_version": __version__, "device": tuned["fingerprint"], "workloads": rows,
            "shapes": shape_list, "tune": {key: tuned.get(key) for key in TUNE_FIELDS},
            "gemm": gemm, "verdict": verdict, "persisted": str(persisted), "cache_dir": str(cache.root),
            "notes": notes}


def compare_rows(default_rows: list, tuned_rows: list) -> list:
    """Per shape: label, calls, default and tuned GFLOP/s and the speedup (default seconds / tuned seconds)."""
    return [{"label": old["label"], "shape": old["shape"], "calls": old["shape"]["calls"],
             "default_gflops": old["gflops"], "tuned_gflops": new["gflops"],
             "default_relative_iqr": old["relative_iqr"], "tuned_relative_iqr": new["relative_iqr"],
             "speedup": old["median_s"] / new["median_s"]} for old, new in zip(default_rows, tuned_rows)]


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.4g} s"


def _name(workload: dict) -> str:
    size = f" {workload['size']}px" if workload.get("size") else ""
    return f"{workload['model']} {workload.get('mode', 'train')} b{workload.get('batch', 64)}{size}"


def _step_arguments(workload: dict, device: str) -> list:
    arguments = ["--model", workload["model"], "--mode", workload.get("mode", "train"), "--batch",
                 str(workload.get("batch", 64)), "--device", device]
    return arguments + (["--size", str(workload["size"])] if workload.get("size") else [])


# the children: each prints one JSON line (this module's process owns its stdout)
def _child_step(args) -> dict:
    import torch

    from fade.measure.case import synchronize
    from fade.measure.ocldevice import resolve_ocl
    from fade.measure.step.config import StepConfig
    from fade.measure.step.runner import WEIGHT_SEED, StepRunner
    from fade.measure.zoo.workload import build_workload
    from fade.ocl import runtime, tuning

    device = resolve_ocl(args.device)
    torch.manual_seed(WEIGHT_SEED)
    workload = build_workload(args.model, args.batch, args.size, device)
    runner = StepRunner(workload, workload.model, StepConfig(), args.mode == "train", device, track_finite=False)
    times, calls = [], []
    for step in range(1 + STEPS_TIMED):
        synchronize(device)
        started = time.perf_counter()
        if step == 0 and args.record:
            with runtime.record_gemms() as calls:
                runner.step()
        else:
            runner.step()
        synchronize(device)
        times.append(time.perf_counter() - started)
    timed = sorted(times[1:])
    result = {"step_s": times, "first_step_s": times[0], "median_step_s": timed[len(timed) // 2],
              "clblast": tuning.applied.get(int(device.split(":")[1]))}
    if args.record:
        result["shapes"] = [shape.as_dict() for shape in tuning.shapes_from_calls(calls)]
    return result


def _child_tune(args) -> dict:
    from fade.ocl import runtime, tuning

    dev = runtime.device(_index(args.device))
    shapes = _load_shapes(args.shapes)
    try:
        result = tuning.tune(dev, shapes, args.budget_s, progress=lambda message: print(message, file=sys.stderr),
                             exclude=frozenset(json.loads(args.exclude)))
    except tuning.DeviceLost as lost:
        return {"error": str(lost), "lost_on": lost.candidate}
    for part in ("default", "tuned"):
        if result.get(part):
            result[part].pop("samples", None)
    return {**result, "fingerprint": tuning.fingerprint(dev)}


def _child_measure(args) -> dict:
    from fade.ocl import runtime, tuning

    dev = runtime.device(_index(args.device))
    if args.parameters:
        with open(args.parameters, encoding="utf-8") as handle:
            tuning.apply(dev, json.load(handle))
    result = tuning.measure_shapes(dev, _load_shapes(args.shapes))
    samples = result.pop("samples")
    result["worst_rel_diff"] = _check_against_defaults(dev, samples) if args.parameters else 0.0
    return result


def _check_against_defaults(dev, samples: dict) -> float:
    """The largest relative difference of the chosen parameters' sampled C from a host float64 GEMM of the
    same seeded data (the defaults are not restorable in this process: CLBlast has no reset)."""
    import numpy

    from fade.ocl import tuning

    worst = 0.0
    for shape, sample in samples.items():
        if shape.m * shape.n * shape.k * shape.batch > 1 << 30:  # the host GEMM would cost seconds: skipped
            continue
        seed_a, seed_b = tuning.operand_seeds(shape)
        a = tuning.uniform_host(numpy, seed_a, shape.m * shape.k * shape.batch).astype(numpy.float64)
        b = tuning.uniform_host(numpy, seed_b, shape.k * shape.n * shape.batch).astype(numpy.float64)
        a = a.reshape(shape.batch, shape.k, shape.m).transpose(0, 2, 1) if shape.trans_a else \
            a.reshape(shape.batch, shape.m, shape.k)
        b = b.reshape(shape.batch, shape.n, shape.k).transpose(0, 2, 1) if shape.trans_b else \
            b.reshape(shape.batch, shape.k, shape.n)
        full = (a @ b).reshape(-1)
        stride, _ = tuning.sample_positions(full.size)
        reference = numpy.concatenate([full[::stride], full[-1:]])
        worst = max(worst, tuning.relative_difference(numpy, sample.astype(numpy.float64), reference))
    return worst


def _index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def _load_shapes(path: str) -> list:
    from fade.ocl.tuning import shape_from_dict

    with open(path, encoding="utf-8") as handle:
        return [shape_from_dict(row) for row in json.load(handle)]


def child_main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    verbs = parser.add_subparsers(dest="verb", required=True)
    step = verbs.add_parser("step")
    step.add_argument("--model", required=True)
    step.add_argument("--mode", default="train")
    step.add_argument("--batch", type=int, default=64)
    step.add_argument("--size", type=int, default=None)
    step.add_argument("--record", action="store_true")
    tune = verbs.add_parser("tune")
    tune.add_argument("--budget-s", type=float, required=True)
    tune.add_argument("--exclude", default="[]", help="a JSON list of candidates not to try (\"Xgemm:label\")")
    measure = verbs.add_parser("measure")
    measure.add_argument("--parameters", default=None)
    for verb in (step, tune, measure):
        verb.add_argument("--device", default="ocl:0")
    for verb in (tune, measure):
        verb.add_argument("--shapes", required=True)
    args = parser.parse_args(argv)
    from fade.measure.worker import die_with_parent

    die_with_parent()  # a killed `fade tune --pretune` takes this child along
    result = {"step": _child_step, "tune": _child_tune, "measure": _child_measure}[args.verb](args)
    print(json.dumps(result, default=str), flush=True)
    if "lost_on" in result:  # the queue is broken: tearing down its context could crash and lose the answer
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
