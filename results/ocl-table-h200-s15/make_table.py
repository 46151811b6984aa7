"""issue 27's 17-network table on the H200 as of session 15: each network's newest rows, CUDA and ocl from the
same device call. Session 15's calls (tableA and tableB at 4a34a40: the tiled GEMM kernel measured per shape
against CLBlast) replace session 14's (../ocl-table-h200-s14: 9b71f25, 7442073), which replaced session 13's
(../ocl-table-h200-s13, 151df2a); the commit column says which. A network whose call did not finish all its
cells (CUDA, eager and graph mode, train and infer) keeps its older rows whole.
Cells: samples/s (median step) ± half the IQR as a share of the median, and % of CUDA fp32 (TF32 off,
cudnn.benchmark on).

    python make_table.py [LATER_DIR ...]

Each LATER_DIR (a later session's results folder, oldest first) adds its table*/*/models.jsonl calls on top, each
call by the same rule (left out unless complete)."""
import glob
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent
S13, S14 = HERE.parent / "ocl-table-h200-s13", HERE.parent / "ocl-table-h200-s14"
SOURCES = [(S13, "part*/g*/models.jsonl"), (S14, "tableA/*/models.jsonl"), (S14, "tableB/*/models.jsonl"),
           (S14, "tableC/*/models.jsonl"), (S14, "tuned/untuned/*/models.jsonl"), (HERE, "tableA/*/models.jsonl"),
           (HERE, "tableB/*/models.jsonl")] + [(Path(d).resolve(), "table*/*/models.jsonl") for d in sys.argv[1:]]
NEEDED = {(mode, kind) for mode in ("train", "infer") for kind in ("cuda", "fp32", "compile")}


def complete(path) -> bool:
    """Every cell of the network's call is in this file (a call cut short by its time limit is left out)."""
    found = set()
    for line in open(path):
        r = json.loads(line)
        if r.get("status") == "ok":
            found.add((r["params"]["mode"], "cuda" if r["torch_device"].startswith("cuda") else r["params"]["variant"]))
    return NEEDED <= found
cells, commit = {}, {}
for root, pattern in SOURCES:
    for path in sorted(glob.glob(str(root / pattern))):
        if root not in (S13, S14) and not complete(path):
            print(f"left out (incomplete call): {Path(path).relative_to(root.parent)}", file=sys.stderr)
            continue
        sha = next(Path(path).parents[i] / "commit.txt" for i in range(4)
                   if (Path(path).parents[i] / "commit.txt").exists()).read_text().strip()[:7]
        for line in open(path):
            r = json.loads(line)
            p = r["params"]
            key = (p["model"], p["mode"], "cuda" if r["torch_device"].startswith("cuda") else p["variant"])
            cells[key] = r
            commit[(p["model"], key[2])] = sha


def cell(r):
    stats = r.get("stats") or {}
    iqr = stats.get("iqr_s")
    spread = f" ±{100 * iqr / stats['median_s'] / 2:.0f}%" if iqr is not None and stats.get("median_s") else ""
    return f"{r['value']:.4g}{spread}"


order = ["alexnet", "resnet18", "resnet50", "vgg16", "mobilenet_v2", "convnext_small", "densenet161",
         "mobilenet_v3_small", "mobilenet_v3_large", "resnext50_32x4d", "wide_resnet50_2", "mnasnet1_0",
         "efficientnet_b0", "regnet_y_400mf", "vit_b_16", "gpt2-small", "bert-base"]
print("| network | mode | commit (CUDA / eager / graph) | CUDA | ocl eager | % | ocl graph | % | fallbacks (eager/graph) | status |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
pct = {("train", "fp32"): [], ("train", "compile"): [], ("infer", "fp32"): [], ("infer", "compile"): []}
below = []
for name in order:
    for mode in ("train", "infer"):
        cuda = cells.get((name, mode, "cuda"))
        row = [name, mode, " / ".join(commit.get((name, kind), "-") for kind in ("cuda", "fp32", "compile")),
               cell(cuda) if cuda else "-"]
        falls, status = [], []
        for variant in ("fp32", "compile"):
            r = cells.get((name, mode, variant))
            share = 100 * r["value"] / cuda["value"] if r and cuda else None
            if share is not None:
                pct[(mode, variant)].append(share)
                if variant == "compile" and share < 50:
                    below.append(f"{name} {mode} {share:.0f}%")
            row += [cell(r) if r else "-", f"{share:.0f}%" if share is not None else "-"]
            fb = (r or {}).get("extra", {}).get("ocl_fallbacks_timed") if r else None
            falls.append(str(fb["total"]) if fb is not None else "-")
            status.append(r["status"] if r else "-")
        row += ["/".join(falls), "/".join(sorted(set(status + ([cuda["status"]] if cuda else []))))]
        print("| " + " | ".join(row) + " |")
for (mode, variant), values in pct.items():
    print(f"mean {mode} {'eager' if variant == 'fp32' else 'graph'}: {statistics.mean(values):.1f}% over "
          f"{len(values)}; min {min(values):.0f}%")
print("graph cells below 50%:", ", ".join(below) or "none")
