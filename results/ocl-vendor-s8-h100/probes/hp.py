"""Where the host time of ocl steps goes on the device machine: thread CPU time vs wall, counters, cProfile."""
import sys, time, io, os, json, cProfile, pstats, collections, statistics, types
import torch, fade.ocl
fade.ocl.register()
from fade.ocl import runtime
import fade.ocl.backend as b
from fade.measure.zoo.workload import build_workload
from fade.measure.step.runner import StepRunner
from fade.measure.step.config import reference_config
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
dev = runtime.device(0)
stats = collections.Counter(); tm = collections.Counter()
def wrap(obj, attr, label):
    f = getattr(obj, attr)
    def g(*a, **k):
        t = time.perf_counter(); stats[label] += 1
        try: return f(*a, **k)
        finally: tm[label] += time.perf_counter() - t
    setattr(obj, attr, g)
cl = dev.cl
ns = types.SimpleNamespace(**{n: getattr(cl, n) for n in dir(cl) if not n.startswith("__")})
wrap(ns, "Buffer", "cl.Buffer"); wrap(ns, "enqueue_copy", "enqueue_copy"); dev.cl = ns
wrap(runtime, "gemm", "clblast gemm"); b.runtime = runtime
wrap(dev, "launch", "launch"); wrap(dev, "_reclaim_all", "full sweep"); wrap(dev, "empty_cache", "empty_cache")
wrap(b, "_cpu_fallback", "fallback"); wrap(b, "download", "download"); wrap(b, "_native", "_native (incl. nested)")
wrap(b, "empty", "empty")
def t(f, n=2000):
    f(); dev.queue.finish(); s = time.perf_counter()
    for _ in range(n): f()
    e = (time.perf_counter() - s) / n * 1e6; dev.queue.finish(); return e
x = torch.randn(64, 1000).to("ocl:0"); y = torch.randn(64, 1000).to("ocl:0")
aten = torch.ops.aten
micro = {"view": t(lambda: x.view(1000, 64)), "slice": t(lambda: x[3:10]), "add_": t(lambda: x.add_(y)),
         "add": t(lambda: x + y), "py add_": t(lambda: b._dispatch(aten.add_.Tensor, x, y)),
         "empty": t(lambda: b.empty((64, 1000), (1000, 1), torch.float32, 0)),
         "cl.Buffer COPY_HOST_PTR 160B": t(lambda: cl.Buffer(dev.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=__import__("numpy").zeros(20, dtype="int64"))),
         "strided copy": t(lambda: x.t().contiguous()),
         "mm 64x64": t(lambda: torch.mm(x[:, :64], y[:, :64].t()), 500)}
json.dump(micro, open(f"{out}/micro.json", "w"), indent=1); print(micro, flush=True)
for spec in sys.argv[2:]:
    name, mode = spec.split(":")
    torch.manual_seed(0)
    w = build_workload(name, 64, None, "ocl:0")
    r = StepRunner(w, w.model, reference_config(), mode == "train", "ocl:0", track_finite=False)
    for _ in range(3): r.step()
    dev.queue.finish()
    rows = []
    for _ in range(3):
        stats.clear(); tm.clear()
        c0 = time.thread_time(); w0 = time.perf_counter(); r.step(); issued = time.perf_counter() - w0
        cpu = time.thread_time() - c0; dev.queue.finish(); wall = time.perf_counter() - w0
        rows.append({"host_cpu_ms": cpu * 1e3, "issue_wall_ms": issued * 1e3, "step_wall_ms": wall * 1e3,
                     "counts": dict(stats), "ms": {k: v * 1e3 for k, v in tm.items()}})
    p = cProfile.Profile(); p.enable(); r.step(); dev.queue.finish(); p.disable()
    s = io.StringIO(); st = pstats.Stats(p, stream=s); st.sort_stats("tottime").print_stats(40); st.sort_stats("cumtime").print_stats(50)
    open(f"{out}/{name}-{mode}.prof.txt", "w").write(s.getvalue())
    json.dump(rows, open(f"{out}/{name}-{mode}.json", "w"), indent=1)
    print(name, mode, json.dumps(rows[-1])[:600], flush=True)
    del r, w; b._reclaim(True); dev.empty_cache()
