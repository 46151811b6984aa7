"""Ad-hoc: OpenCL device copy paths vs CUDA on this GPU (1 GiB, events, median of 10 after warm-up)."""
import json, statistics, sys, numpy as np, pyopencl as cl
out = {}
ctx = cl.Context([d for p in cl.get_platforms() for d in p.get_devices() if d.type & cl.device_type.GPU][:1])
q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
n = 1 << 28  # floats = 1 GiB
a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4); b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n * 4)
cl.enqueue_copy(q, a, np.random.rand(n).astype(np.float32)); q.finish()
prg = cl.Program(ctx, """
__kernel void c1(__global float* o, __global const float* i, long n) { long g = get_global_id(0); if (g < n) o[g] = i[g]; }
__kernel void c4(__global float4* o, __global const float4* i, long n) { long g = get_global_id(0); if (g < n) o[g] = i[g]; }
__kernel void c4s(__global float4* o, __global const float4* i, long n) { for (long g = get_global_id(0); g < n; g += get_global_size(0)) o[g] = i[g]; }
""").build()
def t(f):
    for _ in range(3): f()
    q.finish(); ts = []
    for _ in range(10):
        e = f(); e.wait(); ts.append((e.profile.end - e.profile.start) * 1e-9)
    m = statistics.median(ts); return {"median_s": m, "gbs": 2 * n * 4 / m / 1e9, "min_s": min(ts), "max_s": max(ts)}
out["enqueue_copy"] = t(lambda: cl.enqueue_copy(q, b, a, byte_count=n * 4))
out["kernel_1"] = t(lambda: prg.c1(q, (n,), None, b, a, np.int64(n)))
out["kernel_1_local256"] = t(lambda: prg.c1(q, (n,), (256,), b, a, np.int64(n)))
out["kernel_4"] = t(lambda: prg.c4(q, (n // 4,), None, b, a, np.int64(n // 4)))
out["kernel_4_local256"] = t(lambda: prg.c4(q, (n // 4,), (256,), b, a, np.int64(n // 4)))
out["kernel_4_grid"] = t(lambda: prg.c4s(q, (132 * 2048,), (256,), b, a, np.int64(n // 4)))
import torch
x = torch.randn(n, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); y.copy_(x); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
m = statistics.median(ts); out["cuda_copy"] = {"median_s": m, "gbs": 2 * n * 4 / m / 1e9}
json.dump(out, open(sys.argv[1], "w"), indent=1); print(json.dumps({k: round(v["gbs"]) for k, v in out.items()}))
