"""The table of docs/ocl.md "The 17 networks on the H200, eager and graph mode": every record of part*/g*/models.jsonl
(ocl fp32 eager, ocl compile = the graph mode, CUDA fp32 with TF32 off and cudnn.benchmark on), as % of CUDA."""
import glob
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
cells, fallbacks, status = {}, {}, {}
for path in sorted(glob.glob(str(HERE / "part*/g*/models.jsonl"))):
    for line in open(path):
        r = json.loads(line)
        p = r["params"]
        key = (p["model"], p["mode"], "cuda" if r["torch_device"].startswith("cuda") else p["variant"])
        cells[key] = r["value"]
        status[key] = r["status"]
        fb = r.get("extra", {}).get("ocl_fallbacks_timed")
        if fb is not None:
            fallbacks[key] = fb["total"]
order = ["alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2", "convnext_small", "densenet161",
         "mobilenet_v3_small", "mobilenet_v3_large", "resnext50_32x4d", "wide_resnet50_2", "mnasnet1_0",
         "efficientnet_b0", "regnet_y_400mf", "vit_b_16", "gpt2-small", "bert-base"]
print("| network | mode | CUDA | ocl eager | % | ocl graph | % | fallbacks (eager/graph) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
pct = {("train", "fp32"): [], ("train", "compile"): [], ("infer", "fp32"): [], ("infer", "compile"): []}
for name in order:
    for mode in ("train", "infer"):
        cuda = cells.get((name, mode, "cuda"))
        row = [name, mode, f"{cuda:.4g}" if cuda else "-"]
        for variant in ("fp32", "compile"):
            value = cells.get((name, mode, variant))
            if value and cuda:
                pct[(mode, variant)].append(100 * value / cuda)
            row += [f"{value:.4g}" if value else "-", f"{100 * value / cuda:.0f}%" if value and cuda else "-"]
        row.append(f"{fallbacks.get((name, mode, 'fp32'), '-')}/{fallbacks.get((name, mode, 'compile'), '-')}")
        print("| " + " | ".join(row) + " |")
for (mode, variant), values in pct.items():
    print(f"mean {mode} {variant}: {statistics.mean(values):.1f}% over {len(values)}; min {min(values):.0f}%")
bad = {k: v for k, v in status.items() if v != "ok"}
print("records not ok:", bad)
