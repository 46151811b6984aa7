"""Median ocl step (ms) per case in this process's settings: 5 warm-up steps, then 21 steps each synchronized."""
import sys, time, json, statistics, torch, fade.ocl
fade.ocl.register()
from fade.ocl import runtime
from fade.measure.zoo.workload import build_workload
from fade.measure.step.runner import StepRunner
from fade.measure.step.config import reference_config
dev = runtime.device(0); out = {}
for spec in sys.argv[2:]:
    name, mode = spec.split(":")
    torch.manual_seed(0)
    w = build_workload(name, 64, None, "ocl:0")
    r = StepRunner(w, w.model, reference_config(), mode == "train", "ocl:0", track_finite=False)
    for _ in range(5): r.step()
    dev.queue.finish(); ts = []
    for _ in range(21):
        t = time.perf_counter(); r.step(); dev.queue.finish(); ts.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(ts, n=4)
    out[spec] = {"median_ms": statistics.median(ts), "iqr_ms": q[2] - q[0], "steps_ms": ts}
    print(spec, round(out[spec]["median_ms"], 2), "ms, IQR", round(q[2] - q[0], 2), flush=True)
    del r, w
print(json.dumps({"clblast": fade.ocl.clblast_tuning(0) if hasattr(fade.ocl, "clblast_tuning") else None}, default=str)[:300])
json.dump(out, open(sys.argv[1], "w"), indent=1)
