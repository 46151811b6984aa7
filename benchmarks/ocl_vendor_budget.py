"""What `fade bench models --device ocl:0,cuda:0 --models alexnet,resnet18,resnet50,vgg16,mobilenet_v2 --batch 64
--mode both --variants fp32+cudnn_benchmark=on` (issue 19's table) costs, in steps and seconds, from the model
bench's own timing code (case.time_step with FULL_TIMING) run on a simulated clock, for given step times.

Default step times: the H100 figures of docs/ocl.md's zoo table (ocl and CUDA fp32 with TF32 off and
cudnn.benchmark on, batch 64, 2026-11-25); fade.ocl's dispatch has become cheaper since, so ocl's are upper
bounds. Per case: the checked steps (variants.run_as: on ocl the variant runs as fp32 and is its own reference,
5 training steps; on CUDA the fp32 reference, its rounding run and the variant's, 15; inference: one BatchNorm
calibration forward plus one checked forward, and one reference forward on CUDA), then the timing engine's
calls. Two timings: "steady" (steps within +-3% of each other, so no segment batch disagrees: one batch of
TIMING_SEGMENTS) and "wandering" (a step time that jumps by 20% in spells, so batches keep disagreeing and
run up to MAX_TIMING_SEGMENTS). The overheads not simulated are assumptions, named below; the printed total
says which part is which.

    python benchmarks/ocl_vendor_budget.py [--timing-budget S] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from types import SimpleNamespace
from typing import Optional

# Assumptions (not simulated): a worker's start (torch import, device init, FADE's session) per start, and
# per case the build of the network and its batch, the record and the worker round trip. The run starts
# three workers: both devices once before any case (runner.start_devices; the first stays open), then the
# second again for its cases.
WORKER_START_S = 15.0
WORKER_STARTS = 3
CASE_OVERHEAD_S = 1.5
OCL_KERNEL_BUILD_S = 5.0  # the first ocl case builds fade.ocl's kernels (alexnet's first case: 4.6 s on the H100)
CUDA_BENCHMARK_SEARCH_S = 2.0  # cudnn.benchmark's search per case, in the checked steps (not timed)
DEVICE_LIMIT_S = 600.0  # the device machine's limit per command
TARGET_S = 540.0  # the brief's ~9 minutes

# docs/ocl.md, "The seven zoo networks on the H100": median step (ms) after the first, batch 64
H100_STEP_MS = {
    "ocl:0": {("alexnet", "infer"): 19, ("alexnet", "train"): 110, ("resnet18", "infer"): 113,
              ("resnet18", "train"): 633, ("resnet50", "infer"): 311, ("resnet50", "train"): 1927,
              ("vgg16", "infer"): 233, ("vgg16", "train"): 1254, ("mobilenet_v2", "infer"): 457,
              ("mobilenet_v2", "train"): 2044},
    "cuda:0": {("alexnet", "infer"): 2, ("alexnet", "train"): 14, ("resnet18", "infer"): 7,
               ("resnet18", "train"): 26, ("resnet50", "infer"): 21, ("resnet50", "train"): 73,
               ("vgg16", "infer"): 43, ("vgg16", "train"): 106, ("mobilenet_v2", "infer"): 7,
               ("mobilenet_v2", "train"): 37},
}  # fmt: skip
VARIANT = "fp32+cudnn_benchmark=on"


class SimulatedClock:
    """A clock that only a step moves: `step_s` times a factor, steady (+-3%) or wandering (+20% in spells)."""

    def __init__(self, step_s: float, wandering: bool):
        self.now, self.step_s, self.wandering, self.calls = 0.0, step_s, wandering, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.calls += 1
        factor = 1.03 if self.calls % 2 else 0.97  # keeps CoV above 1%: no early "converged"
        if self.wandering and int(self.now / (4 * self.step_s + 0.5)) % 3 == 0:
            factor *= 1.2
        self.now += self.step_s * factor


def timing_cost(step_s: float, *, wandering: bool, timing_budget_s: Optional[float] = None) -> dict:
    """Steps and seconds the model bench's timing takes for a step of `step_s`, from case.time_step itself, with
    `fade bench models --timing-budget` when given."""
    from fade.measure.suites.models.case import TIMING_BUDGET_KEY, time_step
    from fade.measure.suites.models.suite import FULL_TIMING

    settings = dict(FULL_TIMING)
    if timing_budget_s is not None:
        settings[TIMING_BUDGET_KEY] = timing_budget_s
    clock = SimulatedClock(step_s, wandering)
    runner = SimpleNamespace(step=clock.step, module=None, workload=None, optimizer=None, scaler=None,
                             training=True, sdpa_backend=None)  # what time_step reads besides step
    _, segments, _, _ = time_step(runner, 64, "cpu", settings, clock=clock)
    return {"steps": clock.calls, "seconds": clock.now, "segments": segments["segments"]}


def checked_steps(device: str, mode: str) -> int:
    """Untimed steps before the timing: the checked steps, the fp32 reference's where the variant is not it."""
    from fade.measure.step.config import reference_config
    from fade.measure.step.numerics import CALIBRATION_FORWARDS
    from fade.measure.step.runner import checked_step_count
    from fade.measure.suites.models.variants import parse_variant, run_as

    training = mode == "train"
    steps = checked_step_count(training, False)
    if run_as(parse_variant(VARIANT), device) != reference_config():
        steps += steps * (2 if training else 1)  # the reference, and its rounding run when training
    return steps + (0 if training else CALIBRATION_FORWARDS)


def estimate(step_ms: dict, timing_budget_s: Optional[float] = None) -> dict:
    cases, totals = [], {"steady": 0.0, "wandering": 0.0}
    for device, table in step_ms.items():
        for (model, mode), milliseconds in table.items():
            step_s = milliseconds / 1e3
            untimed = checked_steps(device, mode)
            overhead = CASE_OVERHEAD_S + (CUDA_BENCHMARK_SEARCH_S if device.startswith("cuda") else 0.0)
            row = {"device": device, "model": model, "mode": mode, "step_ms": milliseconds, "checked_steps": untimed}
            for kind in totals:
                cost = timing_cost(step_s, wandering=kind == "wandering", timing_budget_s=timing_budget_s)
                seconds = untimed * step_s + cost["seconds"] + overhead
                row[kind] = {"timed_steps": cost["steps"], "segments": cost["segments"], "case_s": round(seconds, 1)}
                totals[kind] += seconds
            cases.append(row)
    fixed = WORKER_STARTS * WORKER_START_S + OCL_KERNEL_BUILD_S
    return {"cases": cases, "fixed_s": fixed,
            "total_s": {kind: round(value + fixed, 1) for kind, value in totals.items()},
            "assumptions": {"worker_start_s": WORKER_START_S, "worker_starts": WORKER_STARTS,
                            "case_overhead_s": CASE_OVERHEAD_S, "ocl_kernel_build_s": OCL_KERNEL_BUILD_S,
                            "cuda_benchmark_search_s": CUDA_BENCHMARK_SEARCH_S},
            "timing_budget_s": timing_budget_s, "target_s": TARGET_S, "device_limit_s": DEVICE_LIMIT_S}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing-budget", type=float, metavar="S", help="as `fade bench models --timing-budget S`")
    parser.add_argument("--json", metavar="OUT", help="also write the estimate as JSON")
    args = parser.parse_args(argv)
    result = estimate(H100_STEP_MS, args.timing_budget)
    print(f"{'device':7} {'case':20} {'step ms':>8} {'checked':>8} {'timed (segs)':>13} {'case s':>7} "
          f"{'wandering: timed (segs)':>24} {'case s':>7}")
    for row in result["cases"]:
        steady, wandering = row["steady"], row["wandering"]
        print(f"{row['device']:7} {row['model'] + ' ' + row['mode']:20} {row['step_ms']:>8} {row['checked_steps']:>8} "
              f"{steady['timed_steps']:>7} ({steady['segments']:>2}) {steady['case_s']:>7} "
              f"{wandering['timed_steps']:>18} ({wandering['segments']:>2}) {wandering['case_s']:>7}")
    for kind, total in result["total_s"].items():
        verdict = "fits" if total <= TARGET_S else "does NOT fit"
        print(f"{kind}: {total:.0f} s ({total / 60:.1f} min) including {result['fixed_s']:.0f} s of worker starts and "
              f"kernel builds (assumed); {verdict} the {TARGET_S / 60:.0f}-minute target")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
