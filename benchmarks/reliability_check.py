"""Issue 15's must-show runs on a real machine: a full disk (a small tmpfs) under `fade bench micro`,
`fade report` and `fade snapshot`, and `fade bench micro --quick` on a quiet host against one whose cores
(and, with --gpu-burner, the GPU) another process keeps busy.

    python benchmarks/reliability_check.py OUT [--device cuda] [--gpu-burner] [--only PATTERN] [--skip-full-disk]

Everything lands in OUT: quiet.jsonl, busy.jsonl and their console text, full_disk.json, summary.json.
The full-disk part mounts a tmpfs (root needed; without it that part records why it was skipped). Promise:
under a full disk each verb exits 2 with one stderr line, every record written before stays whole and the
previous report and snapshot are untouched; the busy run flags its cases `contended`, the quiet one none
(a quiet host is the caller's job: nothing else running).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURNER = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
GPU_BURNER = ("import time, torch\nend = time.monotonic() + {seconds}\na = torch.randn(4096, 4096, device='{device}')\n"
              "while time.monotonic() < end:\n    a @ a\n    torch.cuda.synchronize()\n")  # fmt: skip


def fade(*argv, env=None) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200", **(env or {}))
    return subprocess.run([sys.executable, "-m", "fade", *argv], capture_output=True, text=True, env=environment,
                          encoding="utf-8", errors="replace")  # fmt: skip


def bench_args(device: str, only, out: Path) -> list:
    return ["bench", "micro", "--quick", "--device", device, "-o", str(out)] + (["--only", only] if only else [])


def contended_counts(path: Path) -> dict:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {"records": len(records), "contended": sum(bool((r.get("telemetry") or {}).get("contended")) for r in records),
            "other_cpu_share": [round(((r.get("telemetry") or {}).get("contention") or {}).get("other_cpu_share") or 0, 3) for r in records],
            "gpu_other_processes": [((r.get("telemetry") or {}).get("contention") or {}).get("gpu_other_processes") for r in records]}  # fmt: skip


def contention(out: Path, device: str, only, gpu_burner: bool) -> dict:
    quiet = fade(*bench_args(device, only, out / "quiet.jsonl"))
    (out / "quiet.console.txt").write_text(quiet.stdout + quiet.stderr, encoding="utf-8")
    burners = [subprocess.Popen([sys.executable, "-c", BURNER.format(seconds=600)]) for _ in range(os.cpu_count() or 1)]
    if gpu_burner:
        burners.append(subprocess.Popen([sys.executable, "-c", GPU_BURNER.format(seconds=600, device=device)]))
        time.sleep(10)  # its CUDA context is up before the bench starts
    try:
        busy = fade(*bench_args(device, only, out / "busy.jsonl"))
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    (out / "busy.console.txt").write_text(busy.stdout + busy.stderr, encoding="utf-8")
    return {"quiet": {"exit": quiet.returncode, **contended_counts(out / "quiet.jsonl"),
                      "console_says_contended": "contended" in quiet.stdout},
            "busy": {"exit": busy.returncode, "burners": len(burners), **contended_counts(out / "busy.jsonl"),
                     "console_says_contended": "contended" in busy.stdout}}  # fmt: skip


def full_disk(out: Path, device: str, only, size_kb: int = 64) -> dict:
    mount = out / "tmpfs"
    mount.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mount)], capture_output=True, text=True)
    if mounted.returncode:
        return {"skipped": f"cannot mount a tmpfs here: {mounted.stderr.strip()}"}
    try:
        results = mount / "micro.jsonl"
        first = fade(*bench_args(device, only or "launch/*", results))  # earlier records
        report, snapshot = mount / "report.html", mount / "snapshot.json"
        fade("report", str(results), "-o", str(report))
        fade("snapshot", "-o", str(snapshot))
        before = {path.name: path.read_bytes() for path in (results, report, snapshot)}
        filler = mount / "filler"
        with open(filler, "wb") as handle:  # leave about one record's room: the run fills the disk mid-way
            free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
            handle.write(b"\0" * max(0, free - 4096))
        runs = {"bench micro": fade(*bench_args(device, only, results)), "report": fade("report", str(results), "-o", str(report)),
                "snapshot": fade("snapshot", "-o", str(snapshot))}  # fmt: skip
        lines = results.read_text(encoding="utf-8").splitlines()
        whole = all(json.loads(line) for line in lines if line.strip())
        return {
            "size_kb": size_kb, "setup_exit": first.returncode,
            "runs": {name: {"exit": run.returncode, "stderr": run.stderr.strip().splitlines()[-3:],
                            "stderr_error_lines": sum(line.startswith("fade: error") for line in run.stderr.splitlines())}
                     for name, run in runs.items()},
            "earlier_records_intact": results.read_bytes().startswith(before["micro.jsonl"]),
            "every_line_parses": whole, "records_after": len(lines),
            "report_untouched": report.read_bytes() == before["report.html"],
            "snapshot_untouched": snapshot.read_bytes() == before["snapshot.json"],
            "leftover_temp_files": sorted(p.name for p in mount.iterdir() if p.name.startswith(".")),
        }  # fmt: skip
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", help="bench micro --only PATTERN (a smaller run)")
    parser.add_argument("--gpu-burner", action="store_true", help="also run a matmul loop on --device while busy")
    parser.add_argument("--skip-full-disk", action="store_true")
    parser.add_argument("--skip-contention", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"device": args.device, "only": args.only}
    if not args.skip_full_disk:
        summary["full_disk"] = full_disk(out, args.device, args.only)
        (out / "full_disk.json").write_text(json.dumps(summary["full_disk"], indent=1) + "\n", encoding="utf-8")
    if not args.skip_contention:
        summary["contention"] = contention(out, args.device, args.only, args.gpu_burner)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
