"""Host time of every CLBlast call in one vgg16 training step on ocl, slowest first."""
import sys, time, json, torch, fade.ocl
fade.ocl.register()
from fade.ocl import runtime
import fade.ocl.backend as b
from fade.measure.zoo.workload import build_workload
from fade.measure.step.runner import StepRunner
from fade.measure.step.config import reference_config
name = sys.argv[2] if len(sys.argv) > 2 else "vgg16"
w = build_workload(name, 64, None, "ocl:0")
r = StepRunner(w, w.model, reference_config(), True, "ocl:0", track_finite=False)
for _ in range(3): r.step()
runtime.device(0).queue.finish()
calls = []
real = runtime.gemm
def g(dev, dtype, ta, tb, m, n, k, *a, batch=1, strides=(0, 0, 0), temp=None):
    t = time.perf_counter(); real(dev, dtype, ta, tb, m, n, k, *a, batch=batch, strides=strides, temp=temp)
    calls.append({"ms": (time.perf_counter() - t) * 1e3, "shape": f"{'T' if ta else 'N'}{'T' if tb else 'N'} {m}x{n}x{k} x{batch}", "temp": temp is not None, "lds": a[2:3] + a[5:6] + a[9:10]})
runtime.gemm = g
r.step(); runtime.device(0).queue.finish()
calls.sort(key=lambda c: -c["ms"])
json.dump(calls, open(sys.argv[1], "w"), indent=1)
for c in calls[:14]: print(json.dumps(c))
print("total ms", sum(c["ms"] for c in calls), "calls", len(calls))
