#!/usr/bin/env bash
# fade ops on a GPU machine (CUDA or ROCm): the full OpInfo sweep on the device (float32, float16, bfloat16,
# int64), a CPU sweep of the same ops, and the device-vs-CPU gap table.
#
# Usage (repo root):  OUT=/some/dir bash benchmarks/ops_sweep.sh [all|cuda|cpu|compare] [DEVICE]
#   DEVICE   the torch device of the GPU sweep (default cuda, which is also ROCm's; cpu with ONLY=sum,mean
#            smoke-tests this script on a machine without a GPU). The phase and file names say "cuda" for
#            the GPU sweep whatever the device.
#   all      the three phases in one call (3-7 min on one H100 host, docs/performance.md); a phase that would not
#            fit TOTAL_LIMIT_S is stopped cleanly and resumed by calling that phase again
#   cuda     the GPU sweep only; a second `cuda` resumes a sweep that was cut off
#   cpu      the CPU sweep only (resumes likewise)
#   compare  the gap table from the two files
# Needs `expecttest` and `numpy` importable (torch's OpInfo database imports them): without network, make
# them travel with the tree, e.g. here: pip install --target .ops-deps expecttest  (this script adds
# .ops-deps to PYTHONPATH). Results are kept in $WORK (default results/ops, git-ignored, so it survives
# between calls on the same machine) and copied to $OUT after every phase: at most 7 files, the JSONL
# gzipped (records repeat the device and stack, ~3-5 KB each).
set -u
PHASE=${1:-all}
GPU=${2:-${GPU:-cuda}}
export PYTHONPATH=$PWD/src:$PWD/.ops-deps${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
OUT=${OUT:-results/ops-out}
WORK=${WORK:-results/ops}
TOTAL_LIMIT_S=${TOTAL_LIMIT_S:-570}  # the whole script, inside one 10-minute call
CUDA_LIMIT_S=${CUDA_LIMIT_S:-540}  # a sweep past its limit is stopped with SIGINT: it keeps what it wrote,
CPU_LIMIT_S=${CPU_LIMIT_S:-400}    # and the next call of the same phase resumes it
SCRIPT_START=$(date +%s)
DTYPES="float32 float16 bfloat16 int64"
SELECT=${ONLY:+--only $ONLY --no-curated}
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
FADE="$PY -m fade"
LOG="$WORK/run.txt"

if ! $PY -c "import expecttest, numpy" 2>/dev/null; then
    echo "fade ops needs expecttest and numpy: pip install --target .ops-deps expecttest (and numpy if missing)" | tee -a "$LOG"
    cp "$LOG" "$OUT/" 2>/dev/null
    exit 3
fi

copy_out() {
    for name in ops-cuda.jsonl ops-cpu.jsonl; do
        [ -f "$WORK/$name" ] && gzip -c "$WORK/$name" > "$OUT/$name.gz"
    done
    for name in ops-cuda.txt ops-cpu.txt gap.txt gap.json run.txt; do
        [ -f "$WORK/$name" ] && cp "$WORK/$name" "$OUT/$name"
    done
}

sweep() {  # sweep DEVICE NAME LIMIT
    local device=$1 name=$2 limit=$3 started code
    started=$(date +%s.%N)
    timeout -s INT "$limit" $FADE ops --device "$device" --dtypes $DTYPES --timeout 30 --resume $SELECT \
        -o "$WORK/ops-$name.jsonl" --json "$WORK/ops-$name.summary.json" > "$WORK/ops-$name.stdout" 2> "$WORK/ops-$name.progress"
    code=$?
    $PY - "$started" "$device" "$code" "$WORK/ops-$name.jsonl" <<'PY' | tee -a "$LOG"
import json, sys, time
started, device, code, path = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
lines = sum(1 for _ in open(path)) if __import__("os").path.exists(path) else 0
print(f"fade ops --device {device}: {time.time() - started:.0f} s wall, exit {code}, {lines} records in {path}")
PY
    # The terminal summary (stdout) with the notable lines of the progress log (stderr) after it.
    cat "$WORK/ops-$name.stdout" "$WORK/ops-$name.progress" > "$WORK/ops-$name.txt"
}

{
    date -u +"%Y-%m-%dT%H:%M:%SZ phase $PHASE"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv 2>&1 \
        || rocm-smi --showproductname --showclocks 2>&1 || echo "no nvidia-smi or rocm-smi"
    $PY -c "import torch, os; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'threads', torch.get_num_threads(), 'cpus', os.cpu_count())"
} >> "$LOG"

if [ "$PHASE" = all ] || [ "$PHASE" = cuda ]; then
    sweep "$GPU" cuda "$CUDA_LIMIT_S"
    # --resume on a finished file: the time to start a worker, load the catalog and skip everything.
    started=$(date +%s.%N)
    $FADE ops --device "$GPU" --dtypes $DTYPES --resume --quiet $SELECT -o "$WORK/ops-cuda.jsonl" --json "$WORK/resume.json" > /dev/null 2>&1
    $PY -c "import json,sys,time; d=json.load(open('$WORK/resume.json')); print(f'resume of the finished cuda sweep: {time.time()-$started:.0f} s, {d[\"tasks_resumed\"]} of {d[\"tasks_selected\"]} op x dtypes skipped')" | tee -a "$LOG"
    copy_out
fi
if [ "$PHASE" = all ] || [ "$PHASE" = cpu ]; then
    left=$(( TOTAL_LIMIT_S - ($(date +%s) - SCRIPT_START) - 20 ))  # 20 s kept for the compare
    [ "$left" -lt "$CPU_LIMIT_S" ] && CPU_LIMIT_S=$left
    if [ "$CPU_LIMIT_S" -gt 30 ]; then
        sweep cpu cpu "$CPU_LIMIT_S"
    else
        echo "no time left for the cpu sweep in this call: run the phase 'cpu' next" | tee -a "$LOG"
    fi
    copy_out
fi
if { [ "$PHASE" = all ] || [ "$PHASE" = compare ]; } && [ -s "$WORK/ops-cpu.jsonl" ]; then
    $FADE ops compare "$WORK/ops-cuda.jsonl" "$WORK/ops-cpu.jsonl" --json "$WORK/gap.json" > "$WORK/gap.txt" 2>&1
    echo "compare exit $?" >> "$LOG"
    copy_out
fi
