"""How long does one pyopencl kernel enqueue take on this OpenCL, against the number of buffers alive in the
context, the argument count and the global size."""
import json, sys, time, numpy as np, pyopencl as cl
ctx = cl.Context([d for p in cl.get_platforms() for d in p.get_devices() if d.type & cl.device_type.GPU][:1])
q = cl.CommandQueue(ctx)
src = """__kernel void k3(__global float* a, __global const float* b, long n) { long i = get_global_id(0); if (i < n) a[i] = b[i] + 1; }
__kernel void k12(__global float* a, __global const float* b, long n, long c1, long c2, long c3, long c4, long c5, long c6, long c7, long c8, long c9) { long i = get_global_id(0); if (i < n) a[i] = b[i] + c1; }"""
prg = cl.Program(ctx, src).build(); k3 = cl.Kernel(prg, "k3"); k12 = cl.Kernel(prg, "k12")
a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 << 20); b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 << 20)
out = {}
def t(label, f, n=300):
    for _ in range(20): f()
    q.finish(); s = time.perf_counter()
    for _ in range(n): f()
    enq = (time.perf_counter() - s) / n; q.finish(); tot = (time.perf_counter() - s) / n
    out[label] = {"enqueue_us": enq * 1e6, "with_finish_us": tot * 1e6}; print(label, round(enq * 1e6, 1), round(tot * 1e6, 1), flush=True)
n = np.int64(1 << 20)
keep = []
for count in (0, 1000, 4000):
    while len(keep) < count:
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 16); keep.append(buf)
        cl.enqueue_fill_buffer(q, buf, np.float32(0), 0, 1 << 16)
    q.finish()
    t(f"k3 1M items, {count} buffers", lambda: k3(q, (1 << 20,), None, a, b, n))
    t(f"k12 1M items, {count} buffers", lambda: k12(q, (1 << 20,), None, a, b, n, *[np.int64(1)] * 9))
    k3.set_args(a, b, n)
    t(f"k3 preset args enqueue_nd_range, {count} buffers", lambda: cl.enqueue_nd_range_kernel(q, k3, (1 << 20,), None))
    t(f"k3 64 items, {count} buffers", lambda: k3(q, (64,), None, a, b, np.int64(64)))
    t(f"k3 64M items, {count} buffers", lambda: k3(q, (1 << 26,), None, a, b, np.int64(1 << 20)), n=100)
    t(f"k3 1M items local 256, {count} buffers", lambda: k3(q, (1 << 20,), (256,), a, b, n))
json.dump(out, open(sys.argv[1], "w"), indent=1)
