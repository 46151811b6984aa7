"""Does a CLBlast call block the host until the queue drains? Host time of a call made right after an 8192^3
GEMM (~25 ms of device work) was enqueued, per shape."""
import time, json, sys, ctypes, torch, fade.ocl, numpy as np
fade.ocl.register()
from fade.ocl import runtime
dev = runtime.device(0); cl = dev.cl
def buf(n): return cl.Buffer(dev.context, cl.mem_flags.READ_WRITE, max(n, 1) * 4)
big = [buf(8192 * 8192) for _ in range(3)]
def long_gemm():
    runtime.gemm(dev, torch.float32, False, False, 8192, 8192, 8192, 1.0, big[0], 0, 8192, big[1], 0, 8192, 0.0, big[2], 0, 8192)
cases = [  # (label, ta, tb, m, n, k, batch)
    ("NN 512x3136x4608", False, False, 512, 3136, 4608, 1), ("NT 64x576x4480 x112", False, True, 64, 576, 4480, 112),
    ("NN 512x3136x512 x16", False, False, 512, 3136, 512, 16), ("NN 64x64x64", False, False, 64, 64, 64, 1),
    ("NN 64x4096x25088", False, False, 64, 4096, 25088, 1), ("NT 4096x25088x64", False, True, 4096, 25088, 64, 1),
    ("NN 128x12544x1152 x1", False, False, 128, 12544, 1152, 1), ("NN 64x3136x576 x64", False, False, 64, 3136, 576, 64)]
out = {}
for label, ta, tb, m, n, k, batch in cases:
    a, b_, c = buf(m * k * batch), buf(k * n * batch), buf(m * n * batch)
    lda = m if ta else k; ldb = k if tb else n
    call = lambda: runtime.gemm(dev, torch.float32, ta, tb, m, n, k, 1.0, a, 0, lda, b_, 0, ldb, 0.0, c, 0, n, batch=batch, strides=(m * k, k * n, m * n))
    call(); dev.queue.finish()
    t = time.perf_counter(); call(); idle = time.perf_counter() - t; dev.queue.finish()
    t = time.perf_counter(); dev.queue.finish(); dev_t0 = time.perf_counter()
    call(); dev.queue.finish(); alone = time.perf_counter() - dev_t0
    long_gemm(); t = time.perf_counter(); call(); busy = time.perf_counter() - t; dev.queue.finish()
    out[label] = {"host_ms_idle_queue": idle * 1e3, "host_ms_busy_queue": busy * 1e3, "call_plus_finish_ms": alone * 1e3}
    print(label, {k: round(v, 3) for k, v in out[label].items()}, flush=True)
long_gemm(); dev.queue.finish(); t = time.perf_counter(); long_gemm(); dev.queue.finish(); print("8192^3 ms", (time.perf_counter() - t) * 1e3)
json.dump(out, open(sys.argv[1], "w"), indent=1)
