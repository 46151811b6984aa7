"""Per step on ocl: issue wall, per-op self host time (_native), every CLBlast call's host time, launches."""
import sys, time, json, torch, fade.ocl, collections
fade.ocl.register()
import fade.ocl.backend as b
from fade.ocl import runtime
from fade.measure.zoo.workload import build_workload
from fade.measure.step.runner import StepRunner
from fade.measure.step.config import reference_config
out = sys.argv[1]; batch = int(__import__("os").environ.get("B", 64))
dev = runtime.device(0)
tot = collections.Counter(); cnt = collections.Counter(); stack = []
orig = b._native
def spy(op, a, k):
    t0 = time.perf_counter(); stack.append(0.0)
    try: return orig(op, a, k)
    finally:
        el = time.perf_counter() - t0; child = stack.pop()
        key = str(op); tot[key] += el - child; cnt[key] += 1
        if stack: stack[-1] += el
gcalls = []; og = runtime.gemm
def g(dev_, dtype, ta, tb, m, n, k, *a, batch=1, strides=(0, 0, 0), temp=None):
    t = time.perf_counter(); og(dev_, dtype, ta, tb, m, n, k, *a, batch=batch, strides=strides, temp=temp)
    gcalls.append(((time.perf_counter() - t) * 1e3, f"{'T' if ta else 'N'}{'T' if tb else 'N'} {m}x{n}x{k} x{batch} temp={temp is not None}"))
lt = [0.0, 0]; ol = dev.launch
def l(*a, **k):
    t0 = time.perf_counter()
    try: return ol(*a, **k)
    finally: lt[0] += time.perf_counter() - t0; lt[1] += 1
res = {}
for spec in sys.argv[2:]:
    name, mode = spec.split(":")
    torch.manual_seed(0)
    w = build_workload(name, batch, None, "ocl:0")
    r = StepRunner(w, w.model, reference_config(), mode == "train", "ocl:0", track_finite=False)
    for _ in range(3): r.step()
    dev.queue.finish()
    walls = []
    for _ in range(5):
        t = time.perf_counter(); r.step(); iw = time.perf_counter() - t; dev.queue.finish(); walls.append((iw * 1e3, (time.perf_counter() - t) * 1e3))
    b._native = spy; runtime.gemm = g; dev.launch = l; tot.clear(); cnt.clear(); gcalls.clear(); lt[:] = [0.0, 0]
    N = 3; t = time.perf_counter()
    for _ in range(N): r.step()
    iw = (time.perf_counter() - t) / N; dev.queue.finish()
    b._native = orig; runtime.gemm = og; dev.launch = ol
    row = {"plain_issue_vs_step_ms": walls, "instr_issue_ms": iw * 1e3, "native_self_ms": sum(tot.values()) / N * 1e3,
           "gemm_ms": sum(c[0] for c in gcalls) / N, "gemm_calls": len(gcalls) // N, "launch_ms": lt[0] / N * 1e3, "launches": lt[1] // N,
           "ops": [(round(v / N * 1e3, 3), cnt[k] // N, round(v / cnt[k] * 1e6, 1), k) for k, v in tot.most_common(30)],
           "gemm_slowest": sorted(gcalls, reverse=True)[:20]}
    res[spec] = row
    print(spec, json.dumps({k: v for k, v in row.items() if k not in ("ops", "gemm_slowest")}), flush=True)
    for o in row["ops"][:15]: print("   ", o)
    for c in row["gemm_slowest"][:8]: print("   gemm", c)
    json.dump(res, open(out, "w"), indent=1)
    del r, w; b._reclaim(True); dev.empty_cache()
