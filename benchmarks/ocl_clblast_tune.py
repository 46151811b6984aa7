"""Issue 19's "CLBlast tuned for the device" on a GPU: tune CLBlast's GEMM parameters for SGEMM 8192^3 plus the
GEMMs of resnet50's and vgg16's training steps (batch 64, 224 px) on fade.ocl within a budget, and write the
per-shape GFLOP/s with CLBlast's own parameters and with the tuned ones, and each step's time before and after.

    python benchmarks/ocl_clblast_tune.py OUT --budget-s 150              # GPU machine, NVIDIA ICD registered
    python benchmarks/ocl_clblast_tune.py OUT --models resnet18 --batch 2 --size 32 --extra 256x256x256 \\
        --budget-s 30                                                    # CPU path (PoCL)

Method: fade.act.tune.oclgemm.run_ocl_pretune (its docstring: every measurement in a fresh process; the step's
GEMMs recorded in the first step with CLBlast's own parameters, the median of 3 later steps before and after;
the search of fade.ocl.tuning within --budget-s; the chosen parameters confirmed in two fresh processes, per
shape, before they are persisted in the tuning cache ($XDG_CACHE_HOME/fade/tune/<device>/clblast.json); the
"after" steps get them from the cache as any fade.ocl user would). Where CUDA is present, cuBLAS fp32 (TF32 off)
on each --extra shape in this process (CUDA events, median of 10 after 3 warm-up calls) gives the "% of cuBLAS".

Writes OUT/progress.log (as it goes), OUT/result.json (everything), OUT/gemm.csv (per shape: calls per step,
default and tuned GFLOP/s, speedup, % of cuBLAS), OUT/steps.csv (per network: step seconds before and after),
OUT/clblast.json (the persisted parameters) and OUT/summary.md. Exit 0 when it ran, 3 when a child could not
run here, 2 on bad input.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from fade.files import atomic_write_text

CUBLAS_WARMUP, CUBLAS_REPEATS = 3, 10


def parse_shape(text: str) -> dict:
    """'8192x8192x8192' -> {m, n, k}; ValueError naming the flag otherwise."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ValueError(f"--extra {text!r}: use MxNxK with positive integers, e.g. 8192x8192x8192")
    return dict(zip(("m", "n", "k"), map(int, parts)))


def cublas_gflops(shape: dict) -> float | None:
    """cuBLAS fp32 GFLOP/s on `shape` (TF32 off), or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.rand(shape["m"], shape["k"], device="cuda") * 2 - 1
    b = torch.rand(shape["k"], shape["n"], device="cuda") * 2 - 1
    for _ in range(CUBLAS_WARMUP):
        a @ b
    times = []
    for _ in range(CUBLAS_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * shape["m"] * shape["n"] * shape["k"] / statistics.median(times) / 1e9


def number(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def csv_text(rows: list, fields: list) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--budget-s", type=float, default=150.0, help="the search's budget in seconds (default 150)")
    parser.add_argument("--models", default="resnet50,vgg16")
    parser.add_argument("--mode", default="train", choices=("train", "infer"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--extra", default="8192x8192x8192", help="comma-separated MxNxK SGEMMs tuned too ('' none)")
    parser.add_argument("--device", default="ocl:0")
    args = parser.parse_args(argv)
    from fade.act.tune.oclgemm import run_ocl_pretune
    from fade.act.tune.tuner import check_request
    from fade.errors import FadeUsageError
    from fade.measure.ocldevice import check_ocl_index

    out = Path(args.out)
    try:
        if not args.budget_s > 0 or args.batch < 1 or args.size < 1:
            raise ValueError("--budget-s, --batch and --size must be > 0")
        extra = [parse_shape(text) for text in args.extra.split(",") if text.strip()]
        models = [name.strip() for name in args.models.split(",") if name.strip()]
        for model in models:
            check_request(model, mode=args.mode, batch=args.batch, budget_min=1.0)
        device = check_ocl_index(args.device)
        out.mkdir(parents=True, exist_ok=True)
    except (ValueError, FadeUsageError, OSError) as error:
        print(f"ocl_clblast_tune: {error}", file=sys.stderr)
        return 2
    log = out / "progress.log"
    started = time.monotonic()

    def progress(message: str) -> None:
        line = f"[{time.monotonic() - started:7.1f} s] {message}"
        print(line, file=sys.stderr, flush=True)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    workloads = [{"model": model, "mode": args.mode, "batch": args.batch, "size": args.size} for model in models]
    try:
        result = run_ocl_pretune(workloads, device=device, budget_s=args.budget_s, extra_shapes=extra,
                                 progress=progress)
    except RuntimeError as error:
        progress(f"could not run here: {error}")
        return 3
    result["wall_s"] = time.monotonic() - started
    result["command"] = sys.argv
    cublas = {json.dumps(shape, sort_keys=True): cublas_gflops(shape) for shape in extra}
    for row in result["gemm"]:
        key = json.dumps({name: row["shape"][name] for name in ("m", "n", "k")}, sort_keys=True)
        reference = cublas.get(key) if row["shape"]["batch"] == 1 and not (row["shape"]["trans_a"] or
                                                                          row["shape"]["trans_b"]) else None
        row["cublas_gflops"] = reference
        for side in ("default", "tuned"):
            value = row.get(f"{side}_gflops")
            row[f"{side}_pct_of_cublas"] = 100 * value / reference if reference and value else None
    for row in result["workloads"]:
        row["before_median_step_s"] = row["before"].get("median_step_s")
        row["after_median_step_s"] = row["after"].get("median_step_s")
        row["before_first_step_s"] = row["before"].get("first_step_s")
        row["after_first_step_s"] = row["after"].get("first_step_s")
        row["after_clblast"] = (row["after"].get("clblast") or {}).get("reason")
    atomic_write_text(out / "result.json", json.dumps(result, indent=2, default=str) + "\n")
    atomic_write_text(out / "gemm.csv", csv_text(result["gemm"], [
        "label", "calls", "default_gflops", "tuned_gflops", "speedup", "default_relative_iqr", "tuned_relative_iqr",
        "cublas_gflops", "default_pct_of_cublas", "tuned_pct_of_cublas"]))
    atomic_write_text(out / "steps.csv", csv_text(result["workloads"], [
        "model", "mode", "batch", "size", "before_median_step_s", "after_median_step_s", "step_speedup",
        "before_first_step_s", "after_first_step_s", "after_clblast"]))
    shutil.copyfile(result["persisted"], out / "clblast.json")
    lines = [f"# CLBlast tuning on {result['device']['name']} ({result['device']['driver']})", "",
             f"verdict: {result['verdict']}; chosen kernels: {', '.join(result['tune']['chosen'] or {}) or 'none'};"
             f" search {result['tune']['elapsed_s']:.0f} s of {args.budget_s:g} s; wall {result['wall_s']:.0f} s", "",
             "| network | step before (s) | step after (s) | speedup |", "|---|---|---|---|"]
    lines += [f"| {row['model']} {row['mode']} b{row['batch']} | {number(row['before_median_step_s'])} | "
              f"{number(row['after_median_step_s'])} | {number(row['step_speedup'])} |" for row in result["workloads"]]
    lines += ["", "| GEMM | calls/step | default GFLOP/s | tuned GFLOP/s | speedup | % of cuBLAS before/after |",
              "|---|---|---|---|---|---|"]
    heaviest = sorted(result["gemm"], key=lambda row: -row["calls"] * row["shape"]["m"] * row["shape"]["n"]
                      * row["shape"]["k"] * row["shape"]["batch"])[:25]
    for row in heaviest:
        pct = f"{row['default_pct_of_cublas']:.1f} / {row['tuned_pct_of_cublas'] or 0:.1f}" \
            if row.get("default_pct_of_cublas") else "-"
        tuned = f"{row['tuned_gflops']:.1f}" if row["tuned_gflops"] else "-"
        speedup = f"{row['speedup']:.2f}" if row["speedup"] else "-"
        lines.append(f"| {row['label']} | {row['calls']} | {row['default_gflops']:.1f} | {tuned} | {speedup} | {pct} |")
    lines += ["", "Notes: " + ("; ".join(result["notes"]) or "none")]
    atomic_write_text(out / "summary.md", "\n".join(lines) + "\n")
    progress(f"wrote {out}/result.json, gemm.csv, steps.csv, clblast.json, summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
