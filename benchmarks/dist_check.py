"""Multi-GPU check of `fade bench dist` (issue 18's must-show): all_reduce bus bandwidth at 8 / 64 / 512 MiB against
the issue's 2xH200 anchors and against a plain torch.distributed loop run in the same session, all_gather and
reduce_scatter at the same sizes, and DDP resnet50 scaling on 1, 2 (and 4) GPUs.

    python benchmarks/dist_check.py OUT                       # every GPU of the host; worlds 2 and, with 4+ GPUs, 4
    python benchmarks/dist_check.py OUT --worlds 2            # only 2 GPUs
    python benchmarks/dist_check.py OUT --device cpu --smoke  # the CPU path (gloo), tiny sizes, in seconds

Every process this script starts (FADE's torchrun, the plain loop's torchrun, their ranks) runs with
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1: NVLink multicast stays off.

Per world size N, in this order: (1) `fade bench dist --nproc N --collectives all_reduce,all_gather,reduce_scatter
--sizes 8M,64M,512M` (fp32, as nccl-tests' default), (2) the plain loop: this file under torchrun (--plain),
which times all_reduce the way nccl-tests does: WARMUP_CALLS calls, then PLAIN_REPEATS blocks of PLAIN_CALLS
back-to-back calls between two CUDA events (host clock after a barrier on the CPU), seconds per call = block
time / calls, median over blocks, the slowest rank's; busbw = size / time x 2(n-1)/n. Then (3) `fade bench dist
--nproc MAX --scaling resnet50` (DDP, batch SCALING_BATCH per GPU; on 1, 2, 4 ... MAX GPUs).

Writes into OUT: dist-xN.jsonl (FADE's records), dist-xN.json (its run summary), plain-xN.json, scaling.jsonl,
scaling.json, and summary.json + summary.md: per size, FADE's busbw, the plain loop's, FADE / plain, FADE / the
anchor (benchmarks/reference.toml, harness "dist_check", shown only for a device whose name matches), the 95%
checks, and the scaling efficiencies. Exit 0 when every FADE run exited 0, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SIZES = ("8M", "64M", "512M")
SMOKE_SIZES = ("64K",)
COLLECTIVES = "all_reduce,all_gather,reduce_scatter"
WARMUP_CALLS = 5
PLAIN_CALLS = 20  # nccl-tests' default -n
PLAIN_REPEATS = 10
SCALING_MODEL = "resnet50"
SCALING_BATCH = 32  # per GPU
SHARE_BAR = 0.95  # the bar: >= 95% of the anchors and of the plain loop
ROOT = Path(__file__).resolve().parent.parent


def size_bytes(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def fade_command(*arguments: str) -> list:
    return [sys.executable, "-m", "fade", "bench", "dist", *arguments]


def run(command: list, env: dict, log: Path, timeout_s: float) -> int:
    """Run `command`, its output into `log`; the exit code (124 after `timeout_s`)."""
    with open(log, "w", encoding="utf-8") as output:
        try:
            return subprocess.run(command, env=env, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return 124


# -- the plain loop (runs under torchrun: one process per rank) -------------------------------------------
def plain_loop(out: str, sizes: list) -> None:
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and os.environ.get("DIST_CHECK_DEVICE", "cuda") == "cuda"
    local_rank = int(os.environ["LOCAL_RANK"])
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{local_rank}" if cuda else "cpu"
    results = []
    for size in sizes:
        data = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(WARMUP_CALLS):
            dist.all_reduce(data)
        per_call = []
        for _ in range(PLAIN_REPEATS):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(PLAIN_CALLS):
                    dist.all_reduce(data)
                end.record()
                torch.cuda.synchronize()
                per_call.append(start.elapsed_time(end) / 1e3 / PLAIN_CALLS)
            else:
                dist.barrier()
                started = time.perf_counter()
                for _ in range(PLAIN_CALLS):
                    dist.all_reduce(data)
                per_call.append((time.perf_counter() - started) / PLAIN_CALLS)
        median = torch.tensor([statistics.median(per_call)], dtype=torch.float64, device=device)
        dist.all_reduce(median, op=dist.ReduceOp.MAX)  # the slowest rank's
        seconds = float(median.item())
        algbw = size / seconds / 1e9
        results.append({"size_bytes": size, "median_s": seconds, "algbw_gbs": algbw,
                        "busbw_gbs": algbw * 2 * (world - 1) / world})  # fmt: skip
    if rank == 0:
        name = torch.cuda.get_device_name(local_rank) if cuda else "cpu"
        Path(out).write_text(json.dumps({"world": world, "device": name, "calls_per_block": PLAIN_CALLS,
                                         "blocks": PLAIN_REPEATS, "warmup_calls": WARMUP_CALLS, "all_reduce": results},
                                        indent=1))  # fmt: skip
    dist.destroy_process_group()


# -- the harness ----------------------------------------------------------------------------------------
def fade_busbw(path: Path) -> dict:
    """(collective, size_bytes) -> busbw GB/s from FADE's records, and the device name."""
    figures, device = {}, None
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            extra = record.get("extra") or {}
            if record.get("status") == "ok" and extra.get("collective"):
                figures[(extra["collective"], extra["size_bytes"])] = extra["busbw_gbs"]
                device = device or (record.get("device") or {}).get("torch", {}).get("name") or record.get("torch_device")
    return {"figures": figures, "device": device}


def anchors_for(device: str | None) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from reference import figures_for

    return figures_for("dist_check", device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory for every result file")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--worlds", help="comma-separated process counts (default 2, and 4 with 4+ GPUs; cpu: 2)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and a tiny scaling run (the CPU path)")
    parser.add_argument("--scaling-model", default=SCALING_MODEL, help="zoo model or module:function (default resnet50)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per command before it is stopped")
    parser.add_argument("--plain", metavar="JSON", help=argparse.SUPPRESS)  # internal: the plain loop's rank entry
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain_loop(args.plain, [size_bytes(text) for text in args.sizes.split(",")])
        return 0
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").write_text("")
        (out / ".write-test").unlink()
    except OSError as error:
        print(f"dist_check: cannot write to {out}: {error.strerror or error}", file=sys.stderr)
        return 2
    env = {**os.environ, **MULTICAST_OFF, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "DIST_CHECK_DEVICE": args.device}  # fmt: skip
    if args.worlds:
        worlds = [int(text) for text in args.worlds.split(",")]
    elif args.device == "cpu":
        worlds = [2]
    else:
        import torch

        count = torch.cuda.device_count()
        if count < 2:
            print(f"dist_check: {count} GPU(s) here; the check needs 2 (use --device cpu for the CPU path)", file=sys.stderr)
            return 2
        worlds = [2] + ([4] if count >= 4 else [])
    sizes = SMOKE_SIZES if args.smoke else SIZES
    common = ["--device", args.device, "--dtypes", "fp32"] + (["--quick"] if args.smoke else [])
    summary = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "env": MULTICAST_OFF, "sizes": list(sizes), "worlds": worlds, "exit_codes": {}, "all_reduce": [],
               "other_collectives": [], "scaling": None}  # fmt: skip
    failed = False
    device_name = None
    for world in worlds:
        stem = f"dist-x{world}"
        code = run(fade_command("--nproc", str(world), "--collectives", COLLECTIVES, "--sizes", ",".join(sizes), *common,
                                "-o", str(out / f"{stem}.jsonl"), "--json", str(out / f"{stem}.json")),
                   env, out / f"{stem}.log", args.timeout)  # fmt: skip
        summary["exit_codes"][stem] = code
        failed |= code != 0
        plain_path = out / f"plain-x{world}.json"
        plain_code = run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                          str(Path(__file__).resolve()), str(out), "--plain", str(plain_path), "--sizes", ",".join(sizes)],
                         env, out / f"plain-x{world}.log", args.timeout)  # fmt: skip
        summary["exit_codes"][f"plain-x{world}"] = plain_code
        fade = fade_busbw(out / f"{stem}.jsonl")
        device_name = device_name or fade["device"]
        plain = json.loads(plain_path.read_text()) if plain_path.exists() else {"all_reduce": []}
        plain_by_size = {entry["size_bytes"]: entry["busbw_gbs"] for entry in plain["all_reduce"]}
        anchors = anchors_for(fade["device"]) if world == 2 else {}
        for text in sizes:
            size = size_bytes(text)
            mine = fade["figures"].get(("all_reduce", size))
            theirs = plain_by_size.get(size)
            label = f"{size // 2**20}MiB" if size >= 2**20 else f"{size // 2**10}KiB"
            anchor = anchors.get(f"all_reduce busbw {label} x2 nccl-tests")
            anchor_plain = anchors.get(f"all_reduce busbw {label} x2 plain loop")
            row = {"world": world, "size": label, "fade_busbw_gbs": mine, "plain_busbw_gbs": theirs,
                   "fade_vs_plain": None if not (mine and theirs) else mine / theirs,
                   "anchor_nccl_tests_gbs": anchor.low if anchor else None,
                   "anchor_plain_gbs": anchor_plain.low if anchor_plain else None}  # fmt: skip
            row["fade_vs_anchor"] = None if not (mine and anchor) else mine / anchor.low
            row["meets_plain_bar"] = None if row["fade_vs_plain"] is None else row["fade_vs_plain"] >= SHARE_BAR
            row["meets_anchor_bar"] = None if row["fade_vs_anchor"] is None else row["fade_vs_anchor"] >= SHARE_BAR
            summary["all_reduce"].append(row)
            for collective in ("all_gather", "reduce_scatter"):
                summary["other_collectives"].append({"world": world, "collective": collective, "size": label,
                                                     "fade_busbw_gbs": fade["figures"].get((collective, size))})  # fmt: skip
    scaling_world = max(worlds)
    scaling_args = ["--scaling", args.scaling_model] + ([] if args.smoke else ["--batch", str(SCALING_BATCH)])
    code = run(fade_command("--nproc", str(scaling_world), *scaling_args, *common, "-o", str(out / "scaling.jsonl"),
                            "--json", str(out / "scaling.json")), env, out / "scaling.log", args.timeout)  # fmt: skip
    summary["exit_codes"]["scaling"] = code
    failed |= code != 0
    if (out / "scaling.jsonl").exists():
        for line in (out / "scaling.jsonl").read_text().splitlines():
            record = json.loads(line)
            if record.get("status") == "ok":
                summary["scaling"] = record["extra"]["scaling"]
    summary["device"] = device_name
    summary["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 1 if failed else 0


def markdown(summary: dict) -> str:
    def number(value, digits=".1f"):
        return "-" if value is None else format(value, digits)

    lines = [f"# dist_check on {summary.get('device')} ({summary['started']})", "",
             "Env in every process: " + " ".join(f"{k}={v}" for k, v in summary["env"].items()), "",
             "## all_reduce busbw (GB/s; busbw = algbw x 2(n-1)/n)", "",
             "| n | size | FADE | plain loop | FADE/plain | nccl-tests anchor | FADE/anchor |", "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in summary["all_reduce"]:
        lines.append(f"| {row['world']} | {row['size']} | {number(row['fade_busbw_gbs'])} | {number(row['plain_busbw_gbs'])} | "
                     f"{number(row['fade_vs_plain'], '.1%')} | {number(row['anchor_nccl_tests_gbs'])} | {number(row['fade_vs_anchor'], '.1%')} |")  # fmt: skip
    lines += ["", "## all_gather, reduce_scatter busbw (GB/s; busbw = algbw x (n-1)/n)", "", "| n | collective | size | FADE |",
              "| --- | --- | --- | --- |"]  # fmt: skip
    lines += [f"| {row['world']} | {row['collective']} | {row['size']} | {number(row['fade_busbw_gbs'])} |" for row in summary["other_collectives"]]
    lines += ["", "## DDP scaling", "", "| processes | samples/s per process | efficiency | exposed comm |", "| --- | --- | --- | --- |"]
    for entry in summary.get("scaling") or []:
        lines.append(f"| {entry['world']} | {entry['samples_per_s_per_process']:.1f} | {entry['efficiency_pct']:.1f}% | "
                     f"{entry['exposed_comm_pct']:.1f}% |")  # fmt: skip
    lines += ["", "Exit codes: " + ", ".join(f"{name} {code}" for name, code in summary["exit_codes"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
