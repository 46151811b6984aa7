"""Issue 27, session 17: which work-item arrangement and per-item tile bring tiled_gemm.cl nearer cuBLAS on
NVIDIA's OpenCL? Per case (tiling BMxBN, k step, outputs per item TMxTN, REMAP: a warp as 8 x 4 items of the
grid instead of 16 x 2): registers and spills (-cl-nv-verbose), TFLOP/s on gpt2-small's heaviest products and
4096^3, the relative difference from CLBlast's result, and cuBLAS fp32 (TF32 off) on the same GPU.
python probe2.py OUT_DIR [--set2] [--small]"""
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ocl_gemm_sweep as sweep  # noqa: E402
import fade.ocl as ocl  # noqa: E402
from fade.ocl import gemm, runtime, tuning  # noqa: E402

# name: (BM, BN, BK, TM, TN), REMAP
CASES = {
    "128x128": ((128, 128, 8, 8, 8), 0),
    "128x128 remap": ((128, 128, 8, 8, 8), 1),
    "128x128 t16x8": ((128, 128, 8, 16, 8), 0),
    "128x128 t16x8 remap": ((128, 128, 8, 16, 8), 1),
    "128x128 t8x16 remap": ((128, 128, 8, 8, 16), 1),
    "256x128 t16x8 remap": ((256, 128, 8, 16, 8), 1),
    "128x256 t8x16 remap": ((128, 256, 8, 8, 16), 1),
    "128x64k16": ((128, 64, 16, 8, 4), 0),
    "128x64k16 remap": ((128, 64, 16, 8, 4), 1),
    "64x128 t4x8 remap": ((64, 128, 8, 4, 8), 1),
}
SHAPES = [tuning.GemmShape(4096, 3072, 768), tuning.GemmShape(4096, 768, 3072),
          tuning.GemmShape(4096, 3072, 768, trans_b=True), tuning.GemmShape(768, 3072, 4096, trans_a=True),
          tuning.GemmShape(4096, 4096, 4096)]
if "--set2" in sys.argv:  # round 2, around the first round's best (128x128, 16x8 per item, 128 items)
    CASES = {
        "128x128 t16x8": ((128, 128, 8, 16, 8), 0),
        "128x128 t16x8 k16": ((128, 128, 16, 16, 8), 0),
        "128x128 t8x16": ((128, 128, 8, 8, 16), 0),
        "256x128 t16x8": ((256, 128, 8, 16, 8), 0),
        "128x64 t16x8": ((128, 64, 8, 16, 8), 0),
        "128x64 t8x8": ((128, 64, 8, 8, 8), 0),
        "64x128 t8x8": ((64, 128, 8, 8, 8), 0),
        "64x64 t8x8": ((64, 64, 8, 8, 8), 0),
        "128x64k16": ((128, 64, 16, 8, 4), 0),
        "128x128 t16x8/split": ((128, 128, 8, 16, 8), 0),
        "128x128/split": ((128, 128, 8, 8, 8), 0),
    }
    SHAPES += [tuning.GemmShape(12544, 1536, 384), tuning.GemmShape(12608, 2304, 768, trans_b=True),
               tuning.GemmShape(1024, 1024, 1024)]  # convnext_small stage 3, vit_b_16's qkv at batch 64, small
if "--small" in sys.argv:  # a check of the script on PoCL
    SHAPES = [tuning.GemmShape(s.m // 16, s.n // 16, s.k // 16, s.trans_a, s.trans_b) for s in SHAPES[:2]]
    CASES = {k: CASES[k] for k in list(CASES)[:2] + list(CASES)[-2:]}


def main():
    out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
    ocl.register()
    dev = runtime.device(0)
    bench = tuning.ShapeBench(dev)
    current = gemm._TILED_GEMM_SOURCE
    rows = []
    for shape in SHAPES:
        buffers = bench._buffers(shape)
        clb = bench.measure(shape)
        ref = clb["sample"]
        row = {"shape": shape.label(), "clblast_tf": shape.flops / clb["median_s"] / 1e12, "cublas_tf": None,
               "own": {}}
        cub = sweep.cublas_seconds(shape)
        if cub:
            row["cublas_tf"] = shape.flops / cub / 1e12
        c, a, b = sweep.mats(shape, buffers)
        for name, (tiling, remap) in CASES.items():
            key = name.replace(" ", "_")
            base, _, split = key.partition("/")
            gemm.TILINGS[base] = tiling
            gemm._TILED_GEMM_SOURCE = f"#define REMAP {remap}\n" + current
            try:
                kernel = gemm.tiled_gemm_geometry(dev, c, a, b, 1, (0, 0, 0), base)[0]
                if shape is SHAPES[0]:
                    src = next(k[1] for k in dev.programs if dev.programs[k] is kernel)
                    try:
                        built = dev.cl.Program(dev.context, src).build(options=["-cl-nv-verbose"])
                        log = built.get_build_info(dev.cl_device, dev.cl.program_build_info.LOG)
                    except Exception as error:  # noqa: BLE001 - not NVIDIA's compiler
                        log = str(error)
                    row.setdefault("regs", {})[name] = " ".join(
                        re.findall(r"Used \d+ registers|\d+ bytes spill stores", log))
                result = sweep.timed(lambda: gemm.tiled_mm(c, a, b, 1.0, 0.0, 1, (0, 0, 0), key), dev.queue.finish)
                gemm.tiled_mm(c, a, b, 1.0, 0.0, 1, (0, 0, 0), key)
                diff = tuning.relative_difference(np, bench.sample(shape, buffers[2]), ref)
                row["own"][name] = {"tf": shape.flops / result["median_s"] / 1e12, "iqr": result["relative_iqr"],
                                    "diff": diff}
            except Exception as error:  # noqa: BLE001 - a case that does not build or run is reported
                row["own"][name] = {"error": str(error)[:300]}
            finally:
                gemm._TILED_GEMM_SOURCE = current
        rows.append(row)
        print(json.dumps(row), flush=True)
        (out / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


main()
