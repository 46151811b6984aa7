#!/usr/bin/env bash
# The doctor on a GPU machine: report, JSON, snapshot, wall time with and without measurements, and
# where start-up time goes. Usage (repo root): OUT=/some/dir bash benchmarks/device_doctor.sh
set -u
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-results}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
python3 benchmarks/startup_costs.py | tee "$OUT/startup-costs.txt"
python3 -m fade doctor --no-measure > /dev/null 2>&1  # warms the page cache: not timed
python3 - "$OUT" <<'PY' | tee "$OUT/doctor-times.txt"
import statistics, subprocess, sys, time
out = sys.argv[1]
for mode in (["--no-measure"], []):
    times = []
    for i in range(5):
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "fade", "doctor", *mode, "--json",
                               f"{out}/doctor{'-nomeasure' if mode else ''}-{i}.json"], stdout=subprocess.DEVNULL).returncode
        times.append(time.perf_counter() - t0)
    print(f"fade doctor {' '.join(mode) or '(with measurements)'}: median {statistics.median(times):.2f} s, "
          f"min {min(times):.2f}, max {max(times):.2f} over {len(times)} runs (exit {code})")
PY
python3 -m fade snapshot -o "$OUT/snapshot.json"
COLUMNS=140 python3 -m fade doctor | tee "$OUT/doctor.txt"
