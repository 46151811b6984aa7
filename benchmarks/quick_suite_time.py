"""Wall time of `fade bench micro --quick` on the CPU, start-up included: the target is under 60 s.

    python benchmarks/quick_suite_time.py [--runs 3] [--device cpu] [--json FILE]

Each run is a fresh `python -m fade bench micro --quick --device DEVICE -o TMP.jsonl` process, timed with
time.perf_counter from spawn to exit, so interpreter start-up, `import torch` and worker start-up count, as
they do for a user. Runs are sequential; nothing else is controlled, so a loaded machine shows a longer time
(one such run took 68 s: that is why this is a benchmark and not a unit test). Statistic: the median over
the runs, with min and max. Every run must exit 0 and write only `ok` records covering the quick suite's
families; the script exits 1 if one does not, or if the median misses TARGET_S.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))
from fade.results import read_records  # noqa: E402  (the schema reader: docs/results.md)

TARGET_S = 60.0  # the bar for the quick suite on a CPU, start-up included (docs/performance.md)
FAMILIES = {"gemm", "memory", "launch", "conv", "sdpa", "norm"}  # what --quick covers on a CPU


def one_run(device: str, out: Path) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    code = subprocess.run([sys.executable, "-m", "fade", "bench", "micro", "--quick", "--device", device, "-o", str(out)],
                          stdout=subprocess.DEVNULL, env=env).returncode
    return time.perf_counter() - started, code


def check_records(path: Path) -> str | None:
    """None when every record is ok and the families are all there, else what is wrong."""
    cases = read_records(path, strict=True).records
    bad = [r["case_id"] for r in cases if r.get("status") != "ok"]
    families = {r["case_id"].split("/")[0] for r in cases}
    if bad:
        return f"not ok: {', '.join(bad)}"
    if families != FAMILIES:
        return f"families {sorted(families)}, expected {sorted(FAMILIES)}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", metavar="FILE", help="write every run's time and the verdict here")
    args = parser.parse_args(argv)
    times, problems = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.runs):
            out = Path(tmp) / f"quick-{index}.jsonl"
            seconds, code = one_run(args.device, out)
            times.append(seconds)
            problem = f"exit {code}" if code else (check_records(out) if out.exists() else "no records written")
            if problem:
                problems.append(f"run {index + 1}: {problem}")
            print(f"run {index + 1}: {seconds:.1f} s (exit {code})", flush=True)
    median = statistics.median(times)
    verdict = "met" if median < TARGET_S else "MISSED"
    print(f"fade bench micro --quick --device {args.device}: median {median:.1f} s, min {min(times):.1f}, "
          f"max {max(times):.1f} over {len(times)} runs; target < {TARGET_S:g} s: {verdict}")
    for problem in problems:
        print(problem)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "runs_s": times, "median_s": median,
                                               "target_s": TARGET_S, "target_met": median < TARGET_S,
                                               "problems": problems}, indent=2) + "\n")
    return 0 if median < TARGET_S and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
