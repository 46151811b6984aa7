"""Where an ocl training step's host time goes: commands per step and the host's milliseconds per step, eager and
graph mode, with the OpenCL commands really enqueued and with them stubbed out (the Python side alone), plus the
driver's cost of one kernel launch. issue 27's diagnosis: on the H200 mobilenet_v3_small's step kept the device
busy 16 of its 95 ms (`fade profile --device ocl:0`), so the host, not the kernels, sets its speed.

    python benchmarks/ocl_host_cost.py OUT.json [--models mobilenet_v3_small,...] [--batch 64] [--size N]
        [--variants eager,graph] [--steps 10] [--device ocl:0]

Per network and variant (the zoo's workload as `fade bench models` builds it, its optimizer, training):
- `commands`: kernel launches, CLBlast calls and host<->device copies per step (counted on the real run);
- `real_ms`: median host wall time of a step with every command enqueued, the queue drained before each step and
  not after (the host's issue time; once the queue is deep a driver may block, so this is at least the host's);
  `step_ms`: the same step ended by a sync (what the bench times);
- `stub_ms`: median host time of a step whose launches, CLBlast calls and writes return at once (no device work:
  the values are garbage; the Python and torch side only). `real_ms - stub_ms` is what enqueueing costs.
Also `launch_us`: one launch of a kernel with 8 arguments by each path (launch_costs_us), median of blocks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import fade.ocl as ocl  # noqa: E402
from fade.files import atomic_write_text  # noqa: E402
from fade.measure.zoo import ZOO  # noqa: E402
from fade.measure.zoo.workload import zoo_workload  # noqa: E402
from fade.ocl import runtime  # noqa: E402


class Counts:
    def __init__(self):
        self.launches = self.gemms = self.writes = 0


@contextlib.contextmanager
def instrumented(stub: bool, counts: Counts):
    """Count (and with `stub`, skip) every launch, CLBlast GEMM and host-to-device write."""
    launch, launch_set, gemm, write = runtime.Device.launch, runtime.Device.launch_set, runtime.gemm, \
        runtime.Device.write

    def counted_launch(self, *args, **kwargs):
        counts.launches += 1
        return None if stub else launch(self, *args, **kwargs)

    def counted_launch_set(self, *args, **kwargs):  # the graph mode's replayed launches
        counts.launches += 1
        return None if stub else launch_set(self, *args, **kwargs)

    def counted_gemm(*args, **kwargs):
        counts.gemms += 1
        return None if stub else gemm(*args, **kwargs)

    def counted_write(self, *args, **kwargs):
        counts.writes += 1
        return None if stub else write(self, *args, **kwargs)

    runtime.Device.launch, runtime.Device.launch_set = counted_launch, counted_launch_set
    runtime.gemm, runtime.Device.write = counted_gemm, counted_write
    try:
        yield
    finally:
        runtime.Device.launch, runtime.Device.launch_set, runtime.gemm, runtime.Device.write = \
            launch, launch_set, gemm, write


def launch_costs_us(device: str) -> dict:
    """Host microseconds per kernel launch (a kernel of 8 arguments over 256 work items; median of blocks of 500
    after 2 blocks of warm-up), by path: `launch` (runtime.Device.launch: every argument set, as eager ops do),
    `preset` (arguments set once, pyopencl's enqueue per call: the graph mode's replayed launches),
    `preset_one_buffer` (the same with one buffer argument set per call, as a replay sets a call's fresh
    buffers), and `no_event` (clEnqueueNDRangeKernel through ctypes with no event requested, which pyopencl
    always asks for: what the driver's enqueue alone costs). Issue 27: the H200's host spent ~27 us per replayed
    launch (real minus stubbed step time over the step's launches, results/ocl-gemm-h200-s15) against 2.2 on
    PoCL here."""
    import ctypes
    import ctypes.util

    dev = runtime.device(torch.device(device).index or 0)
    cl = dev.cl
    kernel = dev.kernel("fade_noop", "__kernel void fade_noop(__global float* a, long o, __global float* b, long p, "
                                     "long n, float x, float y, long m) { if (get_global_id(0) == 0 && n < 0) "
                                     "a[o] = b[p] + x * y + m; }")
    a = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 4096)
    b = cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, 4096)
    args = (a, np.int64(0), a, np.int64(0), np.int64(1), np.float32(1), np.float32(2), np.int64(3))
    site = cl.Kernel(kernel.program, kernel.function_name)
    site.set_args(*args)

    def timed(call) -> float:
        blocks = []
        for _ in range(7):
            dev.queue.finish()
            start = time.perf_counter()
            for _ in range(500):
                call()
            blocks.append((time.perf_counter() - start) / 500 * 1e6)
            dev.queue.finish()
        return round(statistics.median(blocks[2:]), 2)

    def one_buffer():
        site.set_arg(2, b)
        dev.launch_set(site, (256,), None)

    costs = {"launch": timed(lambda: dev.launch(kernel, (256,), None, *args)),
             "preset": timed(lambda: dev.launch_set(site, (256,), None)),
             "preset_one_buffer": timed(one_buffer)}
    name = ctypes.util.find_library("OpenCL") or "libOpenCL.so.1"
    try:
        library = ctypes.CDLL(name)
    except OSError as error:
        costs["no_event"] = f"no {name}: {error}"
        return costs
    enqueue = library.clEnqueueNDRangeKernel
    enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    enqueue.restype = ctypes.c_int
    size = (ctypes.c_size_t * 1)(256)
    queue, handle = dev.queue.int_ptr, site.int_ptr
    if enqueue(queue, handle, 1, None, size, None, 0, None, None) != 0:
        costs["no_event"] = "clEnqueueNDRangeKernel failed through ctypes"
        return costs
    costs["no_event"] = timed(lambda: enqueue(queue, handle, 1, None, size, None, 0, None, None))
    return costs


def measure(name: str, variant: str, batch: int, size: int | None, steps: int, device: str) -> dict:
    entry = ZOO[name]
    torch.manual_seed(0)
    work = zoo_workload(entry, batch, size or entry.default_size, device)
    model = torch.compile(work.model, backend="fade_ocl") if variant == "graph" else work.model
    optimizer = work.optimizer()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = work.loss(model(*work.inputs))
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(3):
        step().item()
    result = {"network": name, "variant": variant, "batch": batch, "size": size or entry.default_size}
    for stub in (False, True):
        counts, times, synced = Counts(), [], []
        with instrumented(stub, counts):
            for _ in range(steps):
                if not stub:
                    ocl.synchronize()
                start = time.perf_counter()
                loss = step()
                times.append(time.perf_counter() - start)
                if not stub:
                    ocl.synchronize()
                    synced.append(time.perf_counter() - start)
            del loss
        key = "stub" if stub else "real"
        result[f"{key}_ms"] = round(statistics.median(times) * 1e3, 2)
        if not stub:
            result["step_ms"] = round(statistics.median(synced) * 1e3, 2)
            result["commands"] = {"launches": counts.launches // steps, "clblast": counts.gemms // steps,
                                  "writes": counts.writes // steps}
    ocl.synchronize()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", default="mobilenet_v3_small")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--variants", default="eager,graph")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="ocl:0")
    args = parser.parse_args(argv)
    ocl.register()
    results = {"device": runtime.device(0).info.name, "launch_us": launch_costs_us(args.device), "rows": []}
    print(f"{results['device']}: one launch (us) {results['launch_us']}", flush=True)
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            row = measure(name, variant, args.batch, args.size, args.steps, args.device)
            results["rows"].append(row)
            atomic_write_text(args.out, json.dumps(results, indent=1))
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
