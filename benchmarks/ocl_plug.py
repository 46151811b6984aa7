"""fade.ocl as a FADE measuring device on a GPU machine: the verbs of issue 17's "It plugs into FADE", each run
through the CLI as a user runs it, beside the vendor path (CUDA/ROCm) where torch has one.

    python benchmarks/ocl_plug.py OUT                                  # GPU machine, every part
    python benchmarks/ocl_plug.py OUT --parts doctor,micro,watch       # some parts; OUT accumulates
    python benchmarks/ocl_plug.py OUT --parts models --models alexnet,resnet18,mobilenet_v2
    python benchmarks/ocl_plug.py /tmp/plug --quick                     # CPU path on PoCL: small sizes

Where one command may run 10 minutes, give each call a few parts (ops and ops_vendor apart, the models part a
few networks at a time): parts write their own files, and summary.json merges what OUT holds.

Parts (each a `python -m fade ...` child process; its console output goes to OUT/<part>.txt):
- doctor: `fade doctor --json` (the OpenCL platforms and devices, what is missing).
- micro:  `fade bench micro --device ocl` on MICRO_ONLY (SGEMM to 8192^3 through CLBlast, device copy, the
          launch cases: launch/eager is the dispatch cost per small op, back to back; launch/sync adds a
          clFinish per op), then the same cases on the vendor device (CUDA fp32 GEMM with TF32 off: torch's
          default) into a separate file. Each record carries extra.ocl_fallbacks.
- models: `fade bench models --device ocl --variants fp32 --resume` for the zoo at batch 64 (train and infer),
          then the vendor device with the same flags. % of vendor = ocl samples/s / vendor samples/s. With
          --resume, the same call again after a cut-off run measures only the cases still missing.
- ops:    `fade ops --device ocl`; ops_vendor: `fade ops --device <vendor>` (the CPU without one); each runs
          `fade ops compare` (the gap table) once both files exist.
- watch:  `fade watch --device ocl` on a tiny script that falls back once per call (cumsum) and syncs.

Writes into OUT: <part>.jsonl / .json result files of the verbs, <part>.txt console logs, and summary.json:
every command with its exit code and wall time, the ocl vs vendor figures (GEMM 8192^3 TFLOP/s, copy GB/s,
dispatch us per op, samples/s per network and mode with % of vendor), the fallback counts per case, and the ops
coverage per dtype. Exit code 0 when every command exited 0 (a failed case is data: its record says why),
1 otherwise, 2 when OUT cannot be written.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fade import __version__
from fade.files import atomic_write_text
from fade.results import read_records

PARTS = ("doctor", "micro", "models", "ops", "ops_vendor", "watch")
MICRO_ONLY = "gemm/fp32,memory/copy,launch,conv/fp32/nchw/fwd,transfer"
QUICK_MICRO_ONLY = "gemm/fp32/1024x1024x1024,memory/copy,launch,conv/fp32/nchw/fwd/layer4.1.conv2,transfer"
QUICK_MODELS = "resnet18"
QUICK_OPS = ["--only", "add,cumsum,sum,matmul,nn.functional.conv2d", "--no-curated"]
OPS_TIMEOUT_S = 60  # per op x dtype, fade ops' own default
WATCH_SCRIPT = """import torch
x = torch.randn(256, 256).to("ocl")
for step in range(5):
    y = torch.cumsum(x @ x, dim=1)  # cumsum has no OpenCL kernel: a CPU fallback at this line
    total = y.sum().item()          # a sync
print("ok", total)
"""


def vendor_device() -> str | None:
    """cuda:0 when torch sees a CUDA or ROCm GPU (asked in a child: this process never starts a runtime)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return "cuda:0" if probe.stdout.strip() == "True" else None


def run_fade(out: Path, name: str, args: list, commands: list) -> int:
    started = time.monotonic()
    with open(out / f"{name}.txt", "a", encoding="utf-8") as log:  # a later call's run of a part adds to it
        done = subprocess.run([sys.executable, "-m", "fade", *args], stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, COLUMNS="160"))
    commands.append({"name": name, "command": ["fade", *args], "exit_code": done.returncode,
                     "wall_s": round(time.monotonic() - started, 1)})
    return done.returncode


def by_case(path: Path) -> dict:
    """case_id -> record of a results file (fade.results' reader), {} when the verb wrote none."""
    if not path.is_file():
        return {}
    return {record["case_id"]: record for record in read_records(path).records}


def bench_pair(out: Path, suite: str, vendor: str | None, flags: list, commands: list) -> tuple:
    """`fade bench SUITE` on ocl, then on the vendor device with the same flags: (ocl, vendor) records by case."""
    sides = [("ocl", "ocl")] + ([("vendor", vendor)] if vendor else [])
    for side, device in sides:
        name = f"{suite}_{side}"
        run_fade(out, name, ["bench", suite, "--device", device, *flags, "-o", str(out / f"{name}.jsonl")], commands)
    return by_case(out / f"{suite}_ocl.jsonl"), by_case(out / f"{suite}_vendor.jsonl")


def micro_part(out: Path, vendor: str | None, quick: bool, commands: list) -> dict:
    only = QUICK_MICRO_ONLY if quick else MICRO_ONLY
    flags = ["--only", only] + (["--quick"] if quick else [])
    ocl, reference = bench_pair(out, "micro", vendor, flags, commands)
    rows = []
    for case_id, record in ocl.items():
        other = reference.get(case_id) or {}
        row = {"case_id": case_id, "status": record["status"], "ocl": record.get("value"), "unit": record.get("unit"),
               "vendor": other.get("value"), "ocl_fallbacks": (record.get("extra") or {}).get("ocl_fallbacks"),
               "note": record.get("error")}
        if row["ocl"] and row["vendor"]:  # microseconds: lower is better, so the ratio inverts
            ratio = row["vendor"] / row["ocl"] if record.get("unit") == "us" else row["ocl"] / row["vendor"]
            row["ocl_pct_of_vendor"] = round(100 * ratio, 1)
        rows.append(row)
    return {"cases": rows}


def models_part(out: Path, vendor: str | None, quick: bool, models: str | None, batch: int | None,
                commands: list) -> dict:
    flags = ["--variants", "fp32", "--resume"]  # a call cut short (a 10-minute limit) continues where it stopped
    if quick:
        flags += ["--quick", "--models", models or QUICK_MODELS]
    elif models:
        flags += ["--models", models]
    if batch:
        flags += ["--batch", str(batch)]
    ocl, reference = bench_pair(out, "models", vendor, flags, commands)
    rows = []
    for case_id, record in ocl.items():
        other = reference.get(case_id) or {}
        extra = record.get("extra") or {}
        row = {"case_id": case_id, "status": record["status"], "ocl_samples_per_s": record.get("value"),
               "vendor_samples_per_s": other.get("value"), "ocl_fallbacks": extra.get("ocl_fallbacks"),
               "ocl_case_wall_s": record.get("duration_s"),
               "ocl_losses": (extra.get("loss_check") or {}).get("losses"),
               "note": record.get("error")}
        if row["ocl_samples_per_s"] and row["vendor_samples_per_s"]:
            row["ocl_pct_of_vendor"] = round(100 * row["ocl_samples_per_s"] / row["vendor_samples_per_s"], 1)
        rows.append(row)
    return {"cases": rows}


def ops_part(out: Path, vendor: str | None, side: str, quick: bool, commands: list) -> dict:
    """side "ocl" or "vendor": one sweep, then the gap table once both sweeps are in OUT."""
    device, name = ("ocl", "ops_ocl") if side == "ocl" else (vendor or "cpu", "ops_reference")
    run_fade(out, name, ["ops", "--device", device, *(QUICK_OPS if quick else []), "--timeout", str(OPS_TIMEOUT_S),
                         "--quiet", "-o",
                         str(out / f"{name}.jsonl"), "--json", str(out / f"{name}.json")], commands)
    if (out / "ops_ocl.jsonl").is_file() and (out / "ops_reference.jsonl").is_file():
        run_fade(out, "ops_gap", ["ops", "compare", str(out / "ops_ocl.jsonl"), str(out / "ops_reference.jsonl"),
                                  "--json", str(out / "ops_gap.json")], commands)
    summary = json.loads((out / f"{name}.json").read_text()) if (out / f"{name}.json").is_file() else {}
    return {"device": device, "wall_s": summary.get("wall_s"), "classes": (summary.get("summary") or {}).get("classes"),
            "coverage": (summary.get("summary") or {}).get("coverage")}


def watch_part(out: Path, commands: list) -> dict:
    script = out / "watch_script.py"
    script.write_text(WATCH_SCRIPT)
    run_fade(out, "watch", ["watch", "--device", "ocl", "--quiet", "--json", str(out / "watch.json"), "--",
                            "python", str(script)], commands)
    report = json.loads((out / "watch.json").read_text()) if (out / "watch.json").is_file() else {}
    return {"sites": [{key: record.get(key) for key in ("kind", "line", "count", "ops", "total_ms")}
                      for record in report.get("records", [])]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output directory (created)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes (PoCL on a CPU)")
    parser.add_argument("--models", help="models part: comma-separated zoo names (default: the whole zoo)")
    parser.add_argument("--batch", type=int, help="models part: batch (default: the bench's, 64; 2 with --quick)")
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        print(f"ocl_plug: unknown part {unknown[0]!r}; parts: {', '.join(PARTS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        earlier = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
        atomic_write_text(out / "summary.json", json.dumps(earlier) + "\n")  # writable before minutes of work
    except (OSError, json.JSONDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        print(f"ocl_plug: cannot write {out}/summary.json: {reason}", file=sys.stderr)
        return 2
    vendor = vendor_device()
    commands: list = []
    summary = {"fade_version": __version__, "vendor_device": vendor, "quick": args.quick, "parts": {},
               "commands": commands}
    if earlier:  # an earlier call's parts stay; this call's parts replace theirs
        summary["parts"] = {**earlier.get("parts", {})}
        commands[:0] = earlier.get("commands", [])
    first_new = len(commands)
    for part in parts:
        if part == "doctor":
            run_fade(out, "doctor", ["doctor", "--json", str(out / "doctor.json")], commands)
            doctor = json.loads((out / "doctor.json").read_text()) if (out / "doctor.json").is_file() else {}
            summary["parts"]["doctor"] = {"opencl": doctor.get("opencl")}
        elif part == "micro":
            summary["parts"]["micro"] = micro_part(out, vendor, args.quick, commands)
        elif part == "models":
            summary["parts"]["models"] = models_part(out, vendor, args.quick, args.models, args.batch, commands)
        elif part in ("ops", "ops_vendor"):
            summary["parts"][part] = ops_part(out, vendor, "ocl" if part == "ops" else "vendor", args.quick, commands)
        elif part == "watch":
            summary["parts"]["watch"] = watch_part(out, commands)
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")  # after each part
    this_call = commands[first_new:]
    failed = [command for command in this_call if command["exit_code"] != 0]
    for command in this_call:
        print(f"{command['exit_code']:>3}  {command['wall_s']:>7.1f} s  {' '.join(command['command'])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
