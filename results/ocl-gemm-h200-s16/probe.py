"""Issue 27, session 16: is tiled_gemm.cl's inner product compiled to FMAs on NVIDIA's OpenCL? Per source variant
of the kernel (the product written as `+= a * b`, as mad(), as fma()): the PTX's instruction counts (the program
binary NVIDIA's driver returns is PTX text) and seconds per call on gpt2-small's heaviest GEMM shapes, with cuBLAS
fp32 (TF32 off) on the same GPU.  python probe.py OUT_DIR"""
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ocl_gemm_sweep as sweep  # noqa: E402
import fade.ocl as ocl  # noqa: E402
from fade.ocl import gemm, runtime, tuning  # noqa: E402

PLAIN = "acc[i][j] += (ACC)a[i] * (ACC)v[j];"
VARIANTS = {"plus": PLAIN, "mad": "acc[i][j] = mad((ACC)a[i], (ACC)v[j], acc[i][j]);",
            "fma": "acc[i][j] = fma((ACC)a[i], (ACC)v[j], acc[i][j]);"}
OLD = Path(__file__).resolve().parents[2] / ".gpu" / "tiled_gemm_old.cl"  # the kernel at 4a34a40, when given
SOURCES = {"new": None}
OPTIONS = {"": ()}
if "--regs" in sys.argv:  # register caps: does occupancy limit the kernel?
    SOURCES = {"new": None}
    VARIANTS = {"plus": PLAIN}
    OPTIONS = {"": (), "r128": ("-cl-nv-maxrregcount=128",), "r96": ("-cl-nv-maxrregcount=96",)}
if "--old" in sys.argv:
    VARIANTS = {"plus": PLAIN}
    SOURCES = {"old": OLD.read_text(), "new": None}
SHAPES = [tuning.GemmShape(4096, 3072, 768), tuning.GemmShape(4096, 768, 3072),
          tuning.GemmShape(4096, 3072, 768, trans_b=True), tuning.GemmShape(768, 3072, 4096, trans_a=True),
          tuning.GemmShape(4096, 4096, 4096)]
TILES = ["128x128", "128x128k16", "128x64", "128x64k16"]
if "--small" in sys.argv:  # a check of the script on PoCL
    SHAPES = [tuning.GemmShape(s.m // 16, s.n // 16, s.k // 16, s.trans_a, s.trans_b) for s in SHAPES[:2]]


def ptx_counts(kernel, cl) -> dict:
    program = kernel.get_info(cl.kernel_info.PROGRAM)
    text = program.get_info(cl.program_info.BINARIES)[0].decode("latin-1")
    ops = {}
    for op in ("ld.shared.v4.f32", "ld.global.v4.f32", "fma.rn.f32", "mad.f32", "mul.f32", "mul.rn.f32", "add.f32", "add.rn.f32", "ld.shared", "ld.global",
               "bar.sync"):
        ops[op] = len(re.findall(re.escape(op) + r"\b", text))
    return ops, text


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
        row = {"shape": shape.label(), "gflop": shape.flops / 1e9, "clblast_tf": shape.flops / clb["median_s"] / 1e12,
               "cublas_tf": None, "own": {}}
        cub = sweep.cublas_seconds(shape)
        if cub:
            row["cublas_tf"] = shape.flops / cub / 1e12
        c, a, b = sweep.mats(shape, buffers)
        plain_kernel = runtime.Device.kernel
        for (version, base), (variant, text), (opt, options) in [
                (s, v, o) for s in SOURCES.items() for v in VARIANTS.items() for o in OPTIONS.items()]:
            runtime.Device.kernel = lambda self, name, src, _o=(), options=options: plain_kernel(self, name, src,
                                                                                               tuple(options))
            source = base or current
            assert PLAIN in source
            name = f"{version}-{variant}{'-' + opt if opt else ''}"
            gemm._TILED_GEMM_SOURCE = source.replace(PLAIN, text)
            for tiling in TILES:
                kernel = gemm.tiled_gemm_geometry(dev, c, a, b, 1, (0, 0, 0), tiling)[0]
                if shape is SHAPES[0]:
                    counts, text_ptx = ptx_counts(kernel, dev.cl)
                    (out / f"{name}-{tiling}.ptx").write_text(text_ptx)
                    src = next(key[1] for key in dev.programs if dev.programs[key] is kernel)
                    try:
                        built = dev.cl.Program(dev.context, src).build(options=["-cl-nv-verbose", *options])
                        log = built.get_build_info(dev.cl_device, dev.cl.program_build_info.LOG)
                    except Exception as error:  # noqa: BLE001 - not NVIDIA's compiler
                        log = str(error)
                    row.setdefault("regs", {})[f"{name}/{tiling}"] = " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", log))
                    row.setdefault("ptx", {})[f"{name}/{tiling}"] = counts
                result = sweep.timed(lambda: gemm.tiled_mm(c, a, b, 1.0, 0.0, 1, (0, 0, 0), tiling), dev.queue.finish)
                gemm.tiled_mm(c, a, b, 1.0, 0.0, 1, (0, 0, 0), tiling)
                diff = tuning.relative_difference(np, bench.sample(shape, buffers[2]), ref)
                row["own"][f"{name}/{tiling}"] = {"tf": shape.flops / result["median_s"] / 1e12,
                                                  "iqr": result["relative_iqr"], "diff": diff}
        gemm._TILED_GEMM_SOURCE = current
        runtime.Device.kernel = plain_kernel
        rows.append(row)
        print(json.dumps(row), flush=True)
        (out / "probe.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


main()
