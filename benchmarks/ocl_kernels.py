"""Issue 19's per-kernel table: where each zoo network's ocl step spends its device time, from OpenCL profiling
events (fade.ocl.profile), beside the step's wall time.

    python benchmarks/ocl_kernels.py OUT                                   # the five CNNs, train and infer, b64
    python benchmarks/ocl_kernels.py OUT --models resnet18 --batch 2 --size 64 --modes infer   # CPU smoke (PoCL)

Per case, in this one process (one ocl device): the workload as `fade bench models` builds it
(zoo.workload.build_workload, the fp32 reference configuration, StepRunner), WARMUP_STEPS steps (kernel builds,
first calls), a synchronized step timed by the host clock, then PROFILED_STEPS steps under fade.ocl.profile.
`fade profile MODEL --device ocl:0` gives the same table with torch.profiler's host view beside it; this
harness skips the profiler to fit ten cases in one device call.

Writes OUT/kernels.jsonl (one line per case as it finishes: the KernelTimes summary, the plain step time) and
OUT/kernels.md (the top commands per case). Exit 0 when every case ran, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

WARMUP_STEPS = 2
PROFILED_STEPS = 2
TOP = 12


def run_case(name: str, mode: str, batch: int, size, device: str) -> dict:
    import torch

    import fade.ocl
    from fade.measure.step.config import reference_config
    from fade.measure.step.runner import StepRunner
    from fade.measure.zoo.workload import build_workload

    torch.manual_seed(0)
    workload = build_workload(name, batch, size, device)
    runner = StepRunner(workload, workload.model, reference_config(), mode == "train", device, track_finite=False)
    for _ in range(WARMUP_STEPS):
        runner.step()
    fade.ocl.synchronize()
    start = time.perf_counter()
    runner.step()
    fade.ocl.synchronize()
    plain_s = time.perf_counter() - start
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    with fade.ocl.profile(index, steps=PROFILED_STEPS) as times:
        for _ in range(PROFILED_STEPS):
            runner.step()
    return {"model": name, "mode": mode, "batch": batch, "size": size, "plain_step_ms": plain_s * 1e3,
            "fallbacks": fade.ocl.fallback_counts(), **times.as_dict()}


def markdown(cases: list) -> str:
    lines = ["# Per-kernel device time of fade.ocl steps (OpenCL profiling events, per step)", ""]
    for case in cases:
        lines += [f"## {case['model']} {case['mode']} b{case['batch']}", "",
                  f"step {case['plain_step_ms']:.1f} ms (plain), device busy {case['device_ms']:.1f} ms of "
                  f"{case['wall_ms']:.1f} ms profiled ({case['host_bound']:.0%} host-bound), "
                  f"{case['commands']:.0f} OpenCL commands", "",
                  "| kernel | device ms | share | calls | mean us |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {row['kernel']} | {row['device_ms']:.2f} | {row['share']:.1%} | {row['calls']:g} | "
                  f"{row['mean_us']:.1f} |" for row in case["by_kernel"]]
        lines += ["", "| command (shape, expression) | device ms | share | calls | mean us |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {row['kernel']} | {row['device_ms']:.2f} | {row['share']:.1%} | {row['calls']:g} | "
                  f"{row['mean_us']:.1f} |" for row in case["by_label"][:TOP]]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", default="alexnet,resnet18,resnet50,vgg16,mobilenet_v2")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=None, help="image side (default: the zoo's)")
    parser.add_argument("--device", default="ocl:0")
    args = parser.parse_args(argv)
    from fade.measure.zoo import ZOO

    names, modes = args.models.split(","), args.modes.split(",")
    unknown = [n for n in names if n not in ZOO] + [m for m in modes if m not in ("train", "infer")]
    if unknown or args.batch < 1:
        print(f"ocl_kernels: unknown model or mode {unknown} (or batch < 1)", file=sys.stderr)
        return 2
    from fade.files import atomic_write_text
    from fade.measure.ocldevice import resolve_ocl

    device = resolve_ocl(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    cases, failed = [], 0
    with open(args.out / "kernels.jsonl", "a", encoding="utf-8") as log:
        for name in names:
            for mode in modes:
                try:
                    case = run_case(name, mode, args.batch, args.size, device)
                except Exception as error:  # a case's failure is its record, never the end of the run
                    case, failed = {"model": name, "mode": mode, "error": f"{type(error).__name__}: {error}"}, failed + 1
                log.write(json.dumps(case) + "\n")
                log.flush()
                print(name, mode, {k: case.get(k) for k in ("plain_step_ms", "device_ms", "host_bound", "error")},
                      flush=True)
                if "error" not in case:
                    cases.append(case)
    atomic_write_text(args.out / "kernels.md", markdown(cases))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
