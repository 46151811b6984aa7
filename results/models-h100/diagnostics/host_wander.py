"""Diagnostic: host enqueue time vs device time per step, over time, plain step vs FADE step, unpinned/pinned."""
import json, os, platform, statistics, sys, time
sys.path.insert(0, "src")
import torch
from fade.measure import models_case as mc
from fade.measure.suites.models.variants import CUDNN_BENCHMARK, cudnn_benchmark, fp32_math_flags, parse_variant
from fade.measure.zoo.workload import build_workload

model, mode, var = sys.argv[1:4]
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
out = {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count(),
       "affinity": sorted(os.sched_getaffinity(0)), "threads_torch": torch.get_num_threads()}
try:
    out["cpu_model"] = [l for l in open("/proc/cpuinfo") if l.startswith("model name")][0].strip()
    out["governor"] = open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").read().strip()
except Exception as e:
    out["cpu_err"] = str(e)
out["loadavg"] = open("/proc/loadavg").read().strip()

def rounds(step, seconds, per_round=16):
    """Rounds of per_round 1-step blocks; returns per round (t, host_ms_per_step, dev_ms_median, dev_ms_total/steps)."""
    res = []
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    while time.perf_counter() - t0 < seconds:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(per_round)]
        h0 = time.perf_counter()
        for s, e in ev:
            s.record(); step(); e.record()
        h1 = time.perf_counter()
        torch.cuda.synchronize()
        h2 = time.perf_counter()
        d = [s.elapsed_time(e) for s, e in ev]
        res.append((h0 - t0, 1e3 * (h1 - h0) / per_round, statistics.median(d), ev[0][0].elapsed_time(ev[-1][1]) / per_round, 1e3 * (h2 - h0) / per_round))
    return res

def summary(res):
    host = [r[1] for r in res]; dev = [r[2] for r in res]; wall = [r[4] for r in res]
    q = lambda v: [round(x, 3) for x in statistics.quantiles(v, n=4)]
    return {"rounds": len(res), "host_q": q(host), "dev_med_q": q(dev), "wall_q": q(wall)}

with cudnn_benchmark(CUDNN_BENCHMARK), fp32_math_flags(variant.matmul_math, variant.conv_math):
    runner = mc._Runner(w, runnable, variant, mode == "train", device)
    runner.checked_steps(1 if mode == "infer" else 5)
    runner.freeze_weights()
    plain = mc._plain_step(runner)
    with mc._gc_frozen():
        for _ in range(30):
            plain()
        torch.cuda.synchronize()
        # 1. long plain trace
        trace = rounds(plain, 8.0)
        out["plain_trace_summary"] = summary(trace)
        out["plain_trace"] = [[round(x, 3) for x in r] for r in trace]
        # 2. alternating chunks plain / fade step, 0.25 s each
        alt = {"plain": [], "fade": []}
        for i in range(32):
            for name, step in (("plain", plain), ("fade", runner.step)) if i % 2 == 0 else (("fade", runner.step), ("plain", plain)):
                r = rounds(step, 0.25)
                alt[name].append((statistics.median([x[1] for x in r]), statistics.median([x[2] for x in r])))
        out["alt_host_med_plain"] = [round(x[0], 3) for x in alt["plain"]]
        out["alt_host_med_fade"] = [round(x[0], 3) for x in alt["fade"]]
        out["alt_dev_med_plain"] = [round(x[1], 3) for x in alt["plain"]]
        out["alt_dev_med_fade"] = [round(x[1], 3) for x in alt["fade"]]
        out["alt_paired_host_diff_pct_median"] = statistics.median(100 * (f[0] / p[0] - 1) for p, f in zip(alt["plain"], alt["fade"]))
        out["alt_paired_dev_diff_pct_median"] = statistics.median(100 * (f[1] / p[1] - 1) for p, f in zip(alt["plain"], alt["fade"]))
        # 3. pinned trace
        core = sorted(os.sched_getaffinity(0))[2]
        os.sched_setaffinity(0, {core})
        trace = rounds(plain, 8.0)
        out["pinned_core"] = core
        out["pinned_trace_summary"] = summary(trace)
        out["pinned_trace"] = [[round(x, 3) for x in r] for r in trace]
        alt = {"plain": [], "fade": []}
        for i in range(16):
            for name, step in (("plain", plain), ("fade", runner.step)) if i % 2 == 0 else (("fade", runner.step), ("plain", plain)):
                r = rounds(step, 0.25)
                alt[name].append((statistics.median([x[1] for x in r]), statistics.median([x[2] for x in r])))
        out["pinned_alt_paired_host_diff_pct_median"] = statistics.median(100 * (f[0] / p[0] - 1) for p, f in zip(alt["plain"], alt["fade"]))
        out["pinned_alt_paired_dev_diff_pct_median"] = statistics.median(100 * (f[1] / p[1] - 1) for p, f in zip(alt["plain"], alt["fade"]))
        out["pinned_alt_host_plain"] = [round(x[0], 3) for x in alt["plain"]]
        out["pinned_alt_host_fade"] = [round(x[0], 3) for x in alt["fade"]]
    runner.tracker.check()
print(json.dumps(out))
