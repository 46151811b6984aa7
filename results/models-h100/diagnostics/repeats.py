"""Repeat the bench's _timed_segments on one built case under several configurations, interleaved; the
distribution of FADE-vs-plain per configuration."""
import json, statistics, sys, time, contextlib
sys.path.insert(0, "src")
import torch
from fade.measure import models_case as mc
from fade.measure.suites.models.suite import FULL_TIMING
from fade.measure.suites.models.variants import CUDNN_BENCHMARK, cudnn_benchmark, fp32_math_flags, parse_variant
from fade.measure.zoo.workload import build_workload

model, mode, var, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
configs = sys.argv[5].split(",")
device = "cuda"
variant = parse_variant(var)
torch.manual_seed(0)
w = build_workload(model, 64, None, device)
runnable = w.model
if variant.channels_last:
    runnable = runnable.to(memory_format=torch.channels_last)
    w.inputs = tuple(mc._channels_last(v) for v in w.inputs)
if variant.compile:
    runnable = torch.compile(runnable)

def host_us(fn, n=4000, per_sync=200):
    ts = []
    for i in range(0, n, per_sync):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(per_sync): fn()
        ts.append((time.perf_counter() - t) / per_sync * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(ts), 2)

out = {"case": f"{model}/{mode}/{var}", "runs": []}
with cudnn_benchmark(CUDNN_BENCHMARK), fp32_math_flags(variant.matmul_math, variant.conv_math):
    runner = mc._Runner(w, runnable, variant, mode == "train", device)
    runner.checked_steps(1 if mode == "infer" else 5)
    runner.freeze_weights()
    plain = mc._plain_step(runner)
    original_step = runner.step
    if mode == "infer":
        with torch.inference_mode():
            o = runnable(*w.inputs)
        tr = mc._FiniteTracker(device)
        def inside():
            with torch.inference_mode():
                return o.sum(dtype=torch.float32)
        out["micro_us"] = {"sum_outside_im": host_us(lambda: o.sum(dtype=torch.float32)), "sum_inside_im": host_us(inside),
                           "add_output": host_us(lambda: tr.add_output(o)), "noop": host_us(lambda: None)}
    def step_im_sum():
        with torch.inference_mode(), runner.autocast():
            output = runner.module(*w.inputs)
            runner.tracker.add_output(output)
        return output
    setups = {
        "cur": dict(max_segments=18, step=original_step),
        "seg36": dict(max_segments=36, step=original_step),
        "seg54": dict(max_segments=54, step=original_step),
        "im_sum": dict(max_segments=18, step=step_im_sum),
        "plainstep": dict(max_segments=18, step=plain),
    }
    with mc._gc_frozen():
        for rep in range(reps):
            for name in configs[rep % len(configs):] + configs[: rep % len(configs)]:
                cfg = setups[name]
                runner.step = cfg["step"]
                runner.tracker.reset()
                t0 = time.time()
                timing, segs, plainres = mc._timed_segments(runner, w.samples, device, FULL_TIMING, validate=True, max_segments=cfg["max_segments"])
                runner.tracker.check()
                fade_sps = w.samples / timing.median_s
                row = {"rep": rep, "config": name, "wall_s": round(time.time() - t0, 1), "fade": fade_sps, "plain": plainres["samples_per_s"],
                       "pct": 100 * (fade_sps / plainres["samples_per_s"] - 1), "segments": segs["segments"], "order": segs["order"],
                       "fade_segs": [round(x) for x in segs["samples_per_s"]], "plain_segs": [round(x) for x in plainres["segment_samples_per_s"]],
                       "fade_spread": segs["spread_pct"], "k": timing.calls_per_sample}
                out["runs"].append(row)
                print(json.dumps({k: row[k] for k in ("rep", "config", "wall_s", "pct", "segments", "fade_spread")}), file=sys.stderr, flush=True)
    runner.step = original_step
summary = {}
for name in configs:
    pcts = [r["pct"] for r in out["runs"] if r["config"] == name]
    summary[name] = {"n": len(pcts), "median": statistics.median(pcts), "min": min(pcts), "max": max(pcts),
                     "sd": statistics.stdev(pcts) if len(pcts) > 1 else None, "all": [round(p, 2) for p in pcts]}
out["summary"] = summary
print(json.dumps(out, indent=1))
