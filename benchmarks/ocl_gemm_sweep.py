"""The GEMMs networks' training steps make on an OpenCL device, each timed through CLBlast, through fade.ocl's own
tiled kernel in each of its tilings (kernels/tiled_gemm.cl) and, where CUDA is there, through cuBLAS fp32 (TF32
off) on the same GPU: which one fade.ocl should run per shape, and how far each is from the vendor's.

    python benchmarks/ocl_gemm_sweep.py OUT_DIR [--models gpt2-small,vit_b_16,...] [--batch 64]
        [--seq-len 512] [--size N] [--tilings 128x128,64x64,...] [--device ocl:0] [--budget-s 240]

The shapes are recorded from one training step per network (the zoo's workload, after a warm-up step, so that
per-shape layout measurements are not counted; a "TILING/split" kernel runs unsplit on a batched shape, as
fade.ocl would). Per distinct shape (float32): seconds per call (median of 5
timed blocks of ~20 ms, fade.ocl.tuning.ShapeBench's scheme) and the largest relative difference of a sample of
C against CLBlast's. Writes OUT_DIR/gemm.jsonl (one row per shape, written as it is measured) and
OUT_DIR/summary.json (per network: GEMM milliseconds per step through CLBlast, through the best tiling per shape,
through the better of the two per shape, and through cuBLAS).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import fade.ocl as ocl  # noqa: E402
from fade.files import atomic_write_text  # noqa: E402
from fade.measure.zoo import ZOO  # noqa: E402
from fade.measure.zoo.workload import zoo_workload  # noqa: E402
from fade.ocl import runtime, tuning  # noqa: E402
from fade.ocl.gemm import TILINGS, tiled_mm  # noqa: E402
from fade.ocl.memory import Mat  # noqa: E402


def recorded_shapes(name: str, batch: int, size: int | None, seq_len: int, device: str) -> list:
    entry = ZOO[name]
    torch.manual_seed(0)
    size = seq_len if entry.kind == "tokens" else (size or entry.default_size)
    work = zoo_workload(entry, batch, size, device)
    optimizer = work.optimizer()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = work.loss(work.model(*work.inputs))
        loss.backward()
        optimizer.step()
        return loss

    step().item()
    with runtime.record_gemms() as calls:
        step().item()
    del work, optimizer
    return [s for s in tuning.shapes_from_calls(calls) if s.dtype == "float32"]


def timed(call, sync) -> dict:
    """ShapeBench.measure's timing (tuning.time_blocks) for any call: {median_s, relative_iqr}."""
    return tuning.spread(tuning.time_blocks(call, sync)[0])


def mats(shape, buffers) -> tuple:
    """(out, a, b) Mats over ShapeBench's buffers as ShapeBench.call lays them out (row-major, op(A) m x k)."""
    a, b, c = buffers
    m, n, k = shape.m, shape.n, shape.k
    a_mat = Mat(a, torch.float32, 0, 0, m, k, 1, m) if shape.trans_a else Mat(a, torch.float32, 0, 0, m, k, k, 1)
    b_mat = Mat(b, torch.float32, 0, 0, k, n, 1, k) if shape.trans_b else Mat(b, torch.float32, 0, 0, k, n, n, 1)
    return Mat(c, torch.float32, 0, 0, m, n, n, 1), a_mat, b_mat


def cublas_seconds(shape) -> float | None:
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand(shape.batch, shape.k, shape.m, device="cuda", generator=g).transpose(1, 2) if shape.trans_a \
        else torch.rand(shape.batch, shape.m, shape.k, device="cuda", generator=g)
    b = torch.rand(shape.batch, shape.n, shape.k, device="cuda", generator=g).transpose(1, 2) if shape.trans_b \
        else torch.rand(shape.batch, shape.k, shape.n, device="cuda", generator=g)
    out = torch.empty(shape.batch, shape.m, shape.n, device="cuda")
    result = timed(lambda: torch.bmm(a, b, out=out), torch.cuda.synchronize)
    del a, b, out
    torch.cuda.empty_cache()
    return result["median_s"]


def write_build_log(dev, path: Path, tiling: str) -> None:
    """The driver's build log of tiled_gemm for one geometry, built with -cl-nv-verbose (NVIDIA: ptxas's
    register and spill counts; other drivers ignore or reject the option, which the log then says)."""
    from fade.ocl.gemm import tiled_gemm_geometry

    square = Mat(None, torch.float32, 0, 0, 4096, 4096, 4096, 1)
    tiled_gemm_geometry(dev, square, square, square, 1, (0, 0, 0), tiling)
    source = next(key[1] for key in dev.programs if key[0] == "tiled_gemm" and f"BM {TILINGS[tiling][0]}\n" in key[1]
                  and f"BK {TILINGS[tiling][2]}\n" in key[1] and f"BN {TILINGS[tiling][1]}\n" in key[1])
    try:
        program = dev.cl.Program(dev.context, source).build(options=["-cl-nv-verbose"])
        log = program.get_build_info(dev.cl_device, dev.cl.program_build_info.LOG)
    except Exception as error:  # noqa: BLE001 - a diagnostic: the reason is the log
        log = f"build with -cl-nv-verbose failed: {error}"
    atomic_write_text(path, log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", default="gpt2-small,vit_b_16,convnext_small,resnet50")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--transformer-batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--tilings", default=",".join(TILINGS), help="tiled_mm kernels: TILING or TILING/split")
    parser.add_argument("--device", default="ocl:0")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--build-log", action="store_true",
                        help="also write each tiling's NVIDIA build log (-cl-nv-verbose: registers, spills) for a "
                             "4096 x 4096 x 4096 NN product to OUT_DIR/build-TILING.txt")
    args = parser.parse_args(argv)
    tilings = args.tilings.split(",")
    unknown = [t for t in tilings if t.partition("/")[0] not in TILINGS]
    if unknown:
        print(f"ocl_gemm_sweep: unknown tiling {unknown[0]!r} (have {', '.join(TILINGS)})", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ocl.register()
    dev = runtime.device(torch.device(args.device).index or 0)
    bench = tuning.ShapeBench(dev)
    if args.build_log:
        for tiling in tilings:
            write_build_log(dev, out / f"build-{tiling.replace('/', '-')}.txt", tiling.partition("/")[0])
    started = time.perf_counter()
    rows, summary = [], {"device": dev.info.name, "networks": {}}
    seen: dict = {}
    for name in args.models.split(","):
        batch = args.transformer_batch if ZOO[name].kind == "tokens" else args.batch
        shapes = recorded_shapes(name, batch, args.size, args.seq_len, args.device)
        shapes.sort(key=lambda s: -s.flops * s.calls)
        totals = {"clblast_ms": 0.0, "own_ms": 0.0, "best_ms": 0.0, "cublas_ms": 0.0, "shapes": len(shapes),
                  "measured": 0}
        for shape in shapes:
            if time.perf_counter() - started > args.budget_s:
                break
            key = (shape.m, shape.n, shape.k, shape.trans_a, shape.trans_b, shape.batch)
            row = seen.get(key)
            if row is None:
                buffers = bench._buffers(shape)
                clblast = bench.measure(shape)
                row = {"shape": shape.label(), "m": shape.m, "n": shape.n, "k": shape.k, "trans_a": shape.trans_a,
                       "trans_b": shape.trans_b, "batch": shape.batch, "gflop": shape.flops / 1e9,
                       "clblast_s": clblast["median_s"], "clblast_iqr": clblast["relative_iqr"], "own": {}}
                reference = clblast["sample"]
                c_mat, a_mat, b_mat = mats(shape, buffers)
                strides = (shape.m * shape.k, shape.k * shape.n, shape.m * shape.n)
                for tiling in tilings:
                    def call(tiling=tiling):
                        tiled_mm(c_mat, a_mat, b_mat, 1.0, 0.0, shape.batch, strides, tiling)
                    result = timed(call, dev.queue.finish)
                    dev.cl.enqueue_fill_buffer(dev.queue, buffers[2], np.float32(tuning.C_RESET), 0,
                                               4 * shape.m * shape.n * shape.batch)
                    call()
                    sample = bench.sample(shape, buffers[2])
                    row["own"][tiling] = {"s": result["median_s"], "iqr": result["relative_iqr"],
                                          "difference": tuning.relative_difference(np, sample, reference)}
                row["cublas_s"] = cublas_seconds(shape)
                seen[key] = row
            own_best = min(row["own"].values(), key=lambda r: r["s"])["s"]
            totals["clblast_ms"] += 1e3 * shape.calls * row["clblast_s"]
            totals["own_ms"] += 1e3 * shape.calls * own_best
            totals["best_ms"] += 1e3 * shape.calls * min(own_best, row["clblast_s"])
            totals["cublas_ms"] += 1e3 * shape.calls * (row["cublas_s"] or 0.0)
            totals["measured"] += 1
            line = {"network": name, "calls": shape.calls, **row}
            rows.append(line)
            atomic_write_text(out / "gemm.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
            best = min(row["own"], key=lambda t: row["own"][t]["s"])
            print(f"{name} {row['shape']} x{shape.calls}: CLBlast {row['gflop'] / row['clblast_s'] / 1e3:.1f} TF, "
                  f"own {best} {row['gflop'] / row['own'][best]['s'] / 1e3:.1f} TF"
                  + (f", cuBLAS {row['gflop'] / row['cublas_s'] / 1e3:.1f} TF" if row["cublas_s"] else ""),
                  flush=True)
        summary["networks"][name] = {k: round(v, 3) if isinstance(v, float) else v for k, v in totals.items()}
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
        print(name, summary["networks"][name], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
