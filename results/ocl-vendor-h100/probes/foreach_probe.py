"""H100: SGD's foreach ops as multi-tensor kernels vs per tensor: optimizer step alone and resnet50 train step."""
import json, statistics, sys, time, torch, fade.ocl
fade.ocl.register()
from fade.ocl import backend
from fade.measure.zoo.workload import build_workload
from fade.measure.step.runner import StepRunner
from fade.measure.step.config import reference_config
fused = backend._foreach_fused
out = {}
torch.manual_seed(0)
w = build_workload("resnet50", 64, None, "ocl:0")
r = StepRunner(w, w.model, reference_config(), True, "ocl:0", track_finite=False)
for _ in range(3): r.step()
fade.ocl.synchronize()
def timed(f, n):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); fade.ocl.synchronize(); ts.append(time.perf_counter() - s)
    return {"median_ms": statistics.median(ts) * 1e3, "min_ms": min(ts) * 1e3, "max_ms": max(ts) * 1e3, "n": n}
for rnd in range(2):
    for mode in ("fused", "per_tensor"):
        backend._foreach_fused = fused if mode == "fused" else (lambda *a: False)
        r.step(); fade.ocl.synchronize()
        out[f"{mode}_optimizer_{rnd}"] = timed(r.optimizer.step, 10)
        out[f"{mode}_train_step_{rnd}"] = timed(r.step, 6)
        print(mode, rnd, out[f"{mode}_optimizer_{rnd}"]["median_ms"], out[f"{mode}_train_step_{rnd}"]["median_ms"], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
