"""Checks FADE's timing engine against independent timers on one device, in one process.

    python benchmarks/validate_timing.py validate.json [--device cuda] [--no-suite] [--quick-suite]

1. bf16 GEMM 8192^3: fade.measure.timing.measure (warm with the suite's sustained settings for this case,
   and with an L2 flush before each call) against triton.testing.do_bench (median) and
   torch.utils.benchmark.Timer.blocked_autorange (median). The timers take turns for ROUNDS rounds
   (ABCD, BCDA, ...), so clock drift under the power cap hits each alike; each figure is the median
   over rounds, and every round's figure is kept in the JSON.
2. Copy bandwidth on 1 GiB arrays: FADE against a plain CUDA-event-timed loop of `copy_`, read + write,
   interleaved the same way.
3. fp32 and tf32 GEMM 8192^3 through the suite's own GEMM case, next to the figures benchmarks/reference.toml
   holds for this device (an H100 has some; other devices show none).
4. The micro suite twice back to back; every "large" case (median call >= LARGE_CASE_MEDIAN_S) must
   agree within AGREEMENT_PCT between the two runs. Suite wall times are reported too (< 2 min each).

On a machine without CUDA it runs a CPU smoke test with small sizes and no triton; the checks are then
informational (the CPU of a shared 2-core VM is not a stable reference). Writes every number to the JSON
path given; exits 1 when a check on a GPU fails.
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

try:
    import fade
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import fade

from fade.measure.case import CaseContext, random_tensor
from fade.measure.suites.micro.gemm import gemm
from fade.measure.suites.micro.suite import FULL_TIMING, QUICK_TIMING, SUSTAINED_TIMING, run_micro
from fade.report.progress import ProgressBar
from fade.results import latest_records, now_iso, read_records
from fade.measure.timing import DEFAULT_FLUSH_BYTES, measure

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import figures_for  # noqa: E402  (benchmarks/reference.py)

AGREEMENT_PCT = 3.0  # the bar: FADE vs do_bench, FADE vs a plain loop, run vs run
LARGE_CASE_MEDIAN_S = 5e-4  # calls of >= 0.5 ms are past launch and event noise; the 3% bar applies to them
PLAIN_LOOP_COPIES = 20  # copies per event pair in the reference loop (nvbandwidth uses 16)
PLAIN_LOOP_REPEATS = 15  # event pairs; their median is the reference
HARNESS = "validate_timing"  # this harness's rows in benchmarks/reference.toml
EXCLUDED_FROM_AGREEMENT = (
    "cpu_vs_gpu/",  # the value includes a CPU timing, not the device under test
    "transfer/h2d/pageable/", "transfer/d2h/pageable/",  # staged through a CPU memcpy: they time the host
)
ROUNDS = 6  # interleaved rounds per timer in checks 1 and 2
BURN_IN_S = 30.0  # heat the GPU to its loaded steady state first, so run 1 and run 2 start equally warm


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--no-suite", action="store_true", help="skip the two back-to-back suite runs")
    parser.add_argument("--quick-suite", action="store_true", help="run the suite with --quick (default on cpu)")
    args = parser.parse_args(argv)

    import torch
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    on_gpu = device.startswith("cuda")
    limit = AGREEMENT_PCT if on_gpu else None
    report = {
        "created": now_iso(),
        "fade_version": fade.__version__,
        "torch": torch.__version__,
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "checks": [],
    }

    def check(name: str, fade_value: float, reference: float, unit: str, reference_name: str) -> None:
        diff_pct = 100.0 * (fade_value - reference) / reference
        report["checks"].append(
            {
                "name": name,
                "fade": fade_value,
                "reference": reference,
                "reference_name": reference_name,
                "unit": unit,
                "diff_pct": diff_pct,
                "limit_pct": limit,
                "pass": None if limit is None else abs(diff_pct) <= limit,
            }
        )

    # 1. bf16 GEMM: the timers take turns (ROUNDS rounds, rotating who goes first), so a clock that walks
    # under the power cap moves every timer alike; each timer's figure is the median of its round figures.
    size = 8192 if on_gpu else 512
    a = random_tensor((size, size), "bf16", device)
    b = random_tensor((size, size), "bf16", device, seed=1)
    matmul = lambda: torch.matmul(a, b)  # noqa: E731  the same callable for every timer
    flops = 2 * size**3
    to_tflops = lambda seconds: flops / seconds / 1e12  # noqa: E731
    console.print(f"bf16 GEMM {size}^3 on {device}: {ROUNDS} interleaved rounds ...")
    suite_timing = dict(SUSTAINED_TIMING if on_gpu else FULL_TIMING)  # what the suite's own case uses
    timers = {"fade_warm": lambda: measure(matmul, device=device, **suite_timing).median_s,
              "torch_timer": lambda: _torch_timer_median_s(matmul, device)}  # fmt: skip
    if on_gpu:
        timers["fade_flushed"] = lambda: measure(matmul, device=device, flush_bytes=DEFAULT_FLUSH_BYTES).median_s
        if _triton_median_ms(matmul) is not None:  # the first call also warms triton's own path
            timers["do_bench"] = lambda: _triton_median_ms(matmul) / 1e3
        else:
            report["triton"] = "not installed"
    rounds = _interleaved_rounds(timers, ROUNDS)
    report["bf16_gemm_rounds_tflops"] = {name: [to_tflops(s) for s in values] for name, values in rounds.items()}
    median_s = {name: statistics.median(values) for name, values in rounds.items()}
    if "do_bench" in median_s:
        check(f"bf16 gemm {size}^3 (warm, sustained)", to_tflops(median_s["fade_warm"]), to_tflops(median_s["do_bench"]), "TFLOP/s", "triton do_bench median")
        check(f"bf16 gemm {size}^3 (L2 flushed)", to_tflops(median_s["fade_flushed"]), to_tflops(median_s["do_bench"]), "TFLOP/s", "triton do_bench median")
    check(f"bf16 gemm {size}^3 (warm, sustained)", to_tflops(median_s["fade_warm"]), to_tflops(median_s["torch_timer"]), "TFLOP/s", "torch Timer.blocked_autorange median")

    # 2. copy bandwidth, FADE and the plain loop in turns
    elements = (2**30 if on_gpu else 64 * 2**20) // 4
    source = random_tensor((elements,), "fp32", device)
    target = random_tensor((elements,), "fp32", device, seed=1)
    copy = lambda: target.copy_(source)  # noqa: E731
    moved = 2 * elements * 4  # read + write
    console.print(f"copy {elements * 4 / 2**20:.0f} MiB on {device}: {ROUNDS} interleaved rounds ...")
    rounds = _interleaved_rounds({"fade": lambda: measure(copy, device=device, **FULL_TIMING).median_s,
                                  "plain_loop": lambda: _plain_loop_median_s(copy, device)}, ROUNDS)  # fmt: skip
    report["copy_rounds_gbs"] = {name: [moved / s / 1e9 for s in values] for name, values in rounds.items()}
    median_s = {name: statistics.median(values) for name, values in rounds.items()}
    check(f"copy {elements * 4 // 2**20} MiB", moved / median_s["fade"] / 1e9, moved / median_s["plain_loop"] / 1e9, "GB/s", "plain event-timed copy_ loop")
    del source, target, a, b

    # 3. fp32 and tf32 GEMM through the suite's case
    ctx = CaseContext(device=device, run_id="validate", timing={**FULL_TIMING, **(SUSTAINED_TIMING if on_gpu else {})})
    report["gemm_8192"] = {}
    for dtype in ("fp32", "tf32", "bf16") if on_gpu else ("fp32",):
        console.print(f"{dtype} GEMM {size}^3 (suite case) ...")
        result = gemm(ctx, m=size, n=size, k=size, dtype=dtype)
        report["gemm_8192"][dtype] = {"tflops": result.value, "stats": result.timing.stats()}
    reference = figures_for(HARNESS, report["device_name"])
    if reference:  # what an independent run on this GPU type reached (not peaks), with where it came from
        report["reference"] = {case: {"value": figure.low, "unit": figure.unit, "machine": figure.machine,
                                      "source": figure.source} for case, figure in reference.items()}

    # 4. the suite twice
    if not args.no_suite:
        quick = args.quick_suite or not on_gpu
        results_dir = Path(tempfile.mkdtemp(prefix="fade-validate-"))
        walls = []
        runs = []
        if on_gpu:
            console.print(f"burn-in: bf16 GEMM {size}^3 for {BURN_IN_S:g} s ...")
            burn_a, burn_b = (random_tensor((size, size), "bf16", device, seed=s) for s in (3, 4))
            deadline = time.monotonic() + BURN_IN_S
            while time.monotonic() < deadline:
                for _ in range(50):
                    burn_a @ burn_b
                torch.cuda.synchronize()
            del burn_a, burn_b
        for index in (1, 2):
            out = results_dir / f"run{index}.jsonl"
            started = time.monotonic()
            summary = run_micro(device, quick=quick, out=out, progress=ProgressBar(console))
            walls.append(time.monotonic() - started)
            runs.append({record["case_id"]: record for record in latest_records(read_records(out).records)})
            shutil.copy(out, Path(args.out).with_name(f"suite-run{index}.jsonl"))  # keep the raw records
            report[f"suite_run{index}"] = summary.to_dict()
        report["suite"] = _compare_runs(runs[0], runs[1], limit)
        report["suite"].update({"quick": quick, "wall_s": walls, "results_dir": str(results_dir)})

    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    table = Table(title=f"FADE timing validation on {report['device_name']} ({device})")
    for column in ("check", "FADE", "reference", "unit", "diff %", "limit %", "pass"):
        table.add_column(column)
    for item in report["checks"]:
        table.add_row(
            item["name"] + f"\nvs {item['reference_name']}", f"{item['fade']:.4g}", f"{item['reference']:.4g}", item["unit"],
            f"{item['diff_pct']:+.2f}", "-" if item["limit_pct"] is None else f"{item['limit_pct']:g}", str(item["pass"]),
        )  # fmt: skip
    for dtype, found in report["gemm_8192"].items():
        expected = (report.get("reference") or {}).get(f"{dtype} gemm 8192^3")
        table.add_row(f"{dtype} gemm {size}^3", f"{found['tflops']:.4g}", "-" if expected is None else f"~{expected['value']:g} (reference)", "TFLOP/s", "", "", "")
    if "suite" in report:
        suite = report["suite"]
        table.add_row(
            f"suite run vs run: {suite['large_cases']} large cases", f"max {suite['max_abs_diff_pct']:.2f}%", "",
            "", "", "-" if limit is None else f"{limit:g}", str(suite["pass"]),
        )  # fmt: skip
        table.add_row("suite wall time", " / ".join(f"{wall:.0f} s" for wall in suite["wall_s"]), "< 120 s (H100)", "", "", "", "")
    console.print(table)
    console.print(f"wrote {args.out}")
    verdicts = [item["pass"] for item in report["checks"]] + [report.get("suite", {}).get("pass")]
    return 1 if any(verdict is False for verdict in verdicts) else 0


def _triton_median_ms(fn):
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    parameters = inspect.signature(do_bench).parameters
    if "return_mode" in parameters:
        return do_bench(fn, return_mode="median")
    if "mode" in parameters:
        return do_bench(fn, mode="median")
    result = do_bench(fn, quantiles=[0.5])
    return result[0] if isinstance(result, (list, tuple)) else result


def _interleaved_rounds(timers: dict, rounds: int) -> dict:
    """{name: [seconds per call, one per round]}: every timer once per round, the starting one rotating."""
    names = list(timers)
    results = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % len(names):] + names[: index % len(names)]:
            results[name].append(timers[name]())
    return results


def _torch_timer_median_s(fn, device: str) -> float:
    import torch.utils.benchmark as benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=__import__("torch").get_num_threads())
    return timer.blocked_autorange(min_run_time=0.5).median


def _plain_loop_median_s(fn, device: str) -> float:
    """Seconds per call: PLAIN_LOOP_COPIES calls between two events (host clock on the CPU), median of repeats."""
    import torch

    for _ in range(10):  # warm-up
        fn()
    per_call = []
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        for _ in range(PLAIN_LOOP_REPEATS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(PLAIN_LOOP_COPIES):
                fn()
            end.record()
            torch.cuda.synchronize(device)
            per_call.append(start.elapsed_time(end) / 1e3 / PLAIN_LOOP_COPIES)
    else:
        for _ in range(PLAIN_LOOP_REPEATS):
            started = time.perf_counter()
            for _ in range(PLAIN_LOOP_COPIES):
                fn()
            per_call.append((time.perf_counter() - started) / PLAIN_LOOP_COPIES)
    return statistics.median(per_call)


def _compare_runs(first: dict, second: dict, limit) -> dict:
    rows = []
    for case_id, record in first.items():
        other = second.get(case_id)
        if not other or record.get("status") != "ok" or other.get("status") != "ok":
            continue
        if case_id.startswith(EXCLUDED_FROM_AGREEMENT):
            continue
        medians = [(r.get("stats") or {}).get("median_s") or 0.0 for r in (record, other)]
        if min(medians) < LARGE_CASE_MEDIAN_S:
            continue
        diff_pct = 100.0 * (other["value"] - record["value"]) / record["value"]
        clocks = [((r.get("telemetry") or {}).get("sm_clock_mhz") or {}).get("median") for r in (record, other)]
        rows.append({"case_id": case_id, "run1": record["value"], "run2": other["value"], "unit": record["unit"],
                     "diff_pct": diff_pct, "sm_clock_mhz": clocks,
                     "throttle_reasons": [(r.get("telemetry") or {}).get("throttle_reasons") for r in (record, other)]})
    rows.sort(key=lambda row: -abs(row["diff_pct"]))
    max_diff = abs(rows[0]["diff_pct"]) if rows else 0.0
    return {
        "large_cases": len(rows),
        "large_case_median_s": LARGE_CASE_MEDIAN_S,
        "max_abs_diff_pct": max_diff,
        "over_limit": [row for row in rows if limit is not None and abs(row["diff_pct"]) > limit],
        "worst": rows[:10],
        "pass": None if limit is None else (bool(rows) and max_diff <= limit),
    }


if __name__ == "__main__":
    sys.exit(main())
