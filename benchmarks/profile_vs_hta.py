"""Time FADE's step summary against Holistic Trace Analysis' idle-time and temporal breakdowns on one synthetic
Kineto-shaped trace (docs/profile.md quotes the numbers).

    python benchmarks/profile_vs_hta.py --kernels 100000 --hta-python /tmp/hta/venv/bin/python

The trace has `--steps` ProfilerStep#N spans; each kernel has its cudaLaunchKernel call (correlation) and an
aten op around it; one kernel in 50 is launched after the previous one ended (a host-wait gap). HTA runs in
the interpreter given by --hta-python (a scratch venv with `pip install holistictraceanalysis`), each tool in
its own process, timed from process start to result (parse included), best of --repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

KERNEL_NAMES = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    "_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>>",
    "triton_per_fused_native_layer_norm_3",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
)

FADE_CODE = """
import sys, time
started = time.perf_counter()
from fade.analyze.trace import read_trace
from fade.analyze.profile import summarize_trace
summary = summarize_trace(read_trace(sys.argv[1]))
print(time.perf_counter() - started, summary.total.idle_us)
"""

HTA_CODE = """
import sys, time, logging
logging.disable(logging.WARNING)
started = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[2], trace_files={0: sys.argv[1]})
idle, _ = analysis.get_idle_time_breakdown(visualize=False)
temporal = analysis.get_temporal_breakdown(visualize=False)
print(time.perf_counter() - started, idle.groupby("idle_category").idle_time.sum().to_dict())
"""


def make_trace(kernels: int, steps: int) -> dict:
    events, ts = [], 0.0
    per_step = max(1, kernels // steps)
    correlation = 0
    device_free = 0.0
    for step in range(steps):
        step_start = ts
        step_events = []
        for index in range(per_step):
            correlation += 1
            ts += 4.0
            duration = 6.0 + (index % 7)
            start = max(ts + 5.0, device_free + 1.0)
            if index % 50 == 0:
                ts = device_free + 20.0  # the host falls behind: the launch comes after the device went idle
                start = ts + 5.0
            step_events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                                "ts": ts - 1.0, "dur": 4.5, "args": {"External id": correlation}})
            step_events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                                "ts": ts, "dur": 3.0, "args": {"correlation": correlation, "External id": correlation}})
            step_events.append({"ph": "X", "cat": "kernel", "name": KERNEL_NAMES[index % len(KERNEL_NAMES)],
                                "pid": 0, "tid": 7, "ts": start, "dur": duration,
                                "args": {"device": 0, "stream": 7, "correlation": correlation,
                                         "External id": correlation}})
            step_events.append({"ph": "f", "id": correlation, "pid": 0, "tid": 7, "ts": start, "cat": "ac2g",
                                "name": "ac2g", "bp": "e"})
            step_events.append({"ph": "s", "id": correlation, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g",
                                "name": "ac2g"})
            device_free = start + duration
        ts = max(ts, device_free) + 10.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": step_start, "dur": ts - step_start, "args": {}})
        events.extend(step_events)
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "deviceProperties": [],
            "traceEvents": events}


def best_of(command: list, repeat: int, env: dict) -> tuple:
    best, output = None, ""
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            return None, done.stderr.strip().splitlines()[-1:] or ["failed"]
        best = wall if best is None else min(best, wall)
        output = done.stdout.strip()
    return best, output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--hta-python", help="python of a venv with holistictraceanalysis installed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "rank0.json")
        with open(path, "w") as handle:
            json.dump(make_trace(args.kernels, args.steps), handle)
        size_mb = os.path.getsize(path) / 2**20
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src"))
        fade_s, fade_out = best_of([sys.executable, "-c", FADE_CODE, path], args.repeat, env)
        sys.stdout.write(f"trace: {args.kernels} kernels, {args.steps} steps, {size_mb:.1f} MiB\n")
        sys.stdout.write(f"fade summarize_trace: {fade_s:.2f} s (wall, process) -> {fade_out}\n")
        if args.hta_python:
            hta_s, hta_out = best_of([args.hta_python, "-c", HTA_CODE, path, scratch], args.repeat, dict(os.environ))
            shown = "failed" if hta_s is None else f"{hta_s:.2f} s"
            sys.stdout.write(f"HTA idle+temporal breakdown: {shown} -> {hta_out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
