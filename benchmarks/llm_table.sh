#!/usr/bin/env bash
# Issue 28's decode table on one GPU or several: for each model and batch, `fade bench llm` (hf-generate, hf-static,
# fade-loop) and then benchmarks/llm_reference.py (the same three, written by hand, nothing from fade) for the same
# case, then FADE beside the reference (bar 5%), `fade compare` (the roofline view) and `fade report`.
#
#   bash benchmarks/llm_table.sh OUT                                  # llama-3.2-1b, llama-3.1-8b; batch 1, 8, 32
#   GPUS=4 bash benchmarks/llm_table.sh OUT                           # the same, one job per GPU at a time
#   DEVICE=cpu MODELS=tiny-llama bash benchmarks/llm_table.sh OUT     # CPU smoke: fp32, p16+n16, b1,2: ~30 s
#
# Environment (defaults for a GPU): MODELS="llama-3.2-1b llama-3.1-8b" (names in src/fade/data/llm.toml),
# BATCHES="1 8 32", DEVICE=cuda:0 (each job sees only its GPU, as cuda:0), DTYPE=bf16, PROMPT=512, NEW=128 (fade
# bench llm's defaults), PREFILL=512 (one prefill length: the bench needs at least one, and each costs a model
# build), REPEATS=5 (reference rounds), PYTHON=python3, GPUS=1 (jobs run at once, job k on GPU k mod GPUS; a set
# CUDA_VISIBLE_DEVICES=3,5 maps those to the GPUs it names), DEADLINE_S=540 (no job or reference starts
# after that many seconds), CASE_TIMEOUT=600 (fade bench llm --timeout), TABLES_ONLY=1 (only write the tables).
# DEVICE=cpu switches the defaults to MODELS=tiny-llama, BATCHES="1 2", fp32, p16+n16, PREFILL=16 and --quick.
#
# A job is one (model, batch): fade bench llm for the three variants, then llm_reference.py for the same case.
# With GPUS > 1 each job runs pinned to its GPU's share of the host's cores (taskset; cores/GPUS each, inductor's
# compile threads as many), so one job's compiles do not take the cores of another's timed host-bound loop
# (session 12's table: FADE's eager hf-generate rows ran beside three compiling jobs and read 74-87% of their
# reference). The jobs still share the host's memory bandwidth and caches.
# Jobs run in MODELS x BATCHES order (put the model you need most first); with GPUS > 1 each GPU takes the next
# job left. Everything is appended as it finishes: OUT/fade-<model>-b<batch>.jsonl (FADE records),
# OUT/ref-<model>-b<batch>.jsonl (reference rows), OUT/*.log; progress lines go to stderr and OUT/progress.log.
# Run the same command again on the same OUT and it resumes: `fade bench llm --resume` skips cases measured ok,
# llm_reference.py --resume skips rows it has. The tables are rewritten from whatever is there after each job (one
# GPU) or at the end (several), and on SIGINT/SIGTERM: OUT/llm.jsonl and OUT/reference.jsonl (the job files
# merged), OUT/against.md (FADE beside the reference, bar 5%), OUT/compare.md and compare.txt (`fade compare`),
# OUT/report.html (`fade report`). TABLES_ONLY=1 rewrites them from files a cut run left (here, say).
#
# Time (estimates for one H200, not measured yet: the suite's compiled paths have run on a CPU only). Per decode
# case FADE starts a worker (import torch + transformers ~10 s), builds the model in fp32 and runs an fp32
# hf-generate reference (8B ~10-15 s, 1B ~5 s), compiles what the variant compiles (hf-static: transformers'
# reduce-overhead forward; fade-loop: its step; 8B ~30-60 s cold, 1B ~20-40 s; less when inductor's on-disk
# cache has the graph) and times 3 x 2 rounds (~5-20 s); a prefill case ~20-30 s. The reference builds its model
# once per job, in bf16, and compiles hf-static and its loop again (inductor's cache helps).
#   one llama-3.2-1b job: FADE ~20 (prefill) + 25 (hf-generate) + 50 (hf-static) + 45 (fade-loop) s, reference
#                         ~90 s                                                     ~230 s; 3 jobs ~700 s
#   one llama-3.1-8b job: FADE ~30 + 40 + 90 + 80 s, reference ~150 s               ~390 s; 3 jobs ~1170 s
# On one GPU that is ~30 min, beyond one 10-minute device command and the ~500 s target; with GPUS=4 on
# nvidia-h200-x4 (MODELS="llama-3.1-8b llama-3.2-1b": the long jobs first) ~600 s wall (an 8B job, then a 1B
# job on the GPU that frees first); with GPUS=2 ~950 s. On the device machine $OUT starts empty and brings back at
# most 8 files, so keep OUT in the checkout's ignored out/, pack it, and carry out/llm28 into the next call to
# resume what a cut left (run the same command again):
#   export PYTHONUNBUFFERED=1; GPUS=4 MODELS="llama-3.1-8b llama-3.2-1b" DEADLINE_S=420 timeout 560 \
#     bash benchmarks/llm_table.sh out/llm28; tar czf $OUT/llm28.tgz -C out llm28
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: [DEVICE=cpu MODELS=tiny-llama] bash benchmarks/llm_table.sh OUT" >&2
  exit 2
fi
OUT=$1
cd "$(dirname "$0")/.."
ROOT=$(pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda:0}
if [ "$DEVICE" = cpu ]; then
  MODELS=${MODELS:-tiny-llama}; BATCHES=${BATCHES:-1 2}; DTYPE=${DTYPE:-fp32}
  PROMPT=${PROMPT:-16}; NEW=${NEW:-16}; PREFILL=${PREFILL:-16}; QUICK=--quick
else
  MODELS=${MODELS:-llama-3.2-1b llama-3.1-8b}; BATCHES=${BATCHES:-1 8 32}; DTYPE=${DTYPE:-bf16}
  PROMPT=${PROMPT:-512}; NEW=${NEW:-128}; PREFILL=${PREFILL:-512}; QUICK=
fi
REPEATS=${REPEATS:-5}
GPUS=${GPUS:-1}
DEADLINE_S=${DEADLINE_S:-540}
CASE_TIMEOUT=${CASE_TIMEOUT:-600}
START=$(date +%s)
if [ "$DEVICE" != cpu ] && [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # slots map onto the caller's GPUs (one_job)
  IFS=, read -r -a visible_gpus <<<"$CUDA_VISIBLE_DEVICES"
  if [ "${#visible_gpus[@]}" -lt "$GPUS" ]; then
    echo "llm_table: GPUS=$GPUS but CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' names ${#visible_gpus[@]} GPU(s)" >&2
    exit 2
  fi
fi

progress() {
  local line
  line="llm_table: [$(( $(date +%s) - START ))s] $*"
  echo "$line" >&2
  echo "$line" >>"$OUT/progress.log"
}

late() {  # true when the deadline has passed: no new step starts
  [ $(( $(date +%s) - START )) -ge "$DEADLINE_S" ]
}

tables() {  # merge the per-job files, then FADE beside the reference, fade compare, fade report
  progress "tables from what is in $OUT"
  cat /dev/null "$OUT"/fade-*.jsonl >"$OUT/llm.jsonl" 2>/dev/null
  cat /dev/null "$OUT"/ref-*.jsonl >"$OUT/reference.jsonl" 2>/dev/null
  if [ -s "$OUT/reference.jsonl" ] && [ -s "$OUT/llm.jsonl" ]; then
    if "$PYTHON" benchmarks/llm_reference.py --against "$OUT/llm.jsonl" --out "$OUT/reference.jsonl" >"$OUT/against.md" 2>>"$OUT/tables.log"; then
      progress "FADE vs reference: every pair within 5%"
    else
      progress "FADE vs reference: a pair is missing or outside 5%"
    fi
    cat "$OUT/against.md" >&2
  fi
  if [ -s "$OUT/llm.jsonl" ]; then
    "$PYTHON" -m fade compare "$OUT/llm.jsonl" --markdown "$OUT/compare.md" >"$OUT/compare.txt" 2>>"$OUT/tables.log"
    "$PYTHON" -m fade report "$OUT/llm.jsonl" -o "$OUT/report.html" >>"$OUT/tables.log" 2>&1
  fi
  progress "tables: $OUT/against.md, $OUT/compare.md, $OUT/compare.txt, $OUT/report.html"
}
if [ -n "${TABLES_ONLY:-}" ]; then
  tables
  exit 0
fi
trap 'tables; exit 130' INT TERM

pin() {  # SLOT: with several GPUs, the slot's share of the cores this process may use (taskset) and inductor's
  # compile threads; the share is cut from the allowed core ids (a container or a caller's taskset may allow 64-127)
  local share list
  if [ "$GPUS" -le 1 ] || ! command -v taskset >/dev/null; then return; fi
  list=$("$PYTHON" -c "import os, sys; cores = sorted(os.sched_getaffinity(0)); share = len(cores) // int(sys.argv[2]); slot = int(sys.argv[1]); print(','.join(map(str, cores[slot * share:(slot + 1) * share])), share)" "$1" "$GPUS")
  share=${list##* }; list=${list% *}
  [ "${share:-0}" -ge 1 ] || return
  echo taskset -c "$list" env TORCHINDUCTOR_COMPILE_THREADS="$share"
}

one_job() {  # MODEL BATCH GPU: FADE's three variants, then the reference's, for one model and batch
  local model=$1 batch=$2 gpu=$3 tag="$1-b$2" env_gpu=()
  local visible=$gpu
  if [ "$DEVICE" != cpu ] && [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # the caller's GPUs: slot k takes the k-th
    visible=${visible_gpus[$gpu]}  # read and checked at the start: there are GPUS of them
  fi
  [ "$DEVICE" != cpu ] && env_gpu=(env CUDA_VISIBLE_DEVICES="$visible")
  # shellcheck disable=SC2207
  env_gpu+=($(pin "$gpu"))
  progress "$tag: fade bench llm (hf-generate, hf-static, fade-loop) on GPU $visible -> $OUT/fade-$tag.log"
  "${env_gpu[@]}" "$PYTHON" -m fade bench llm --config "$model" --device "$DEVICE" --dtype "$DTYPE" --batch "$batch" \
    --prompt-tokens "$PROMPT" --new-tokens "$NEW" --prefill-tokens "$PREFILL" \
    --variants hf-generate,hf-static,fade-loop --timeout "$CASE_TIMEOUT" $QUICK \
    -o "$OUT/fade-$tag.jsonl" --resume >"$OUT/fade-$tag.log" 2>&1
  progress "$tag: fade exit $?"
  if late; then progress "$tag: past DEADLINE_S=$DEADLINE_S, reference not started"; return; fi
  progress "$tag: llm_reference.py on GPU $visible -> $OUT/reference-$tag.log"
  "${env_gpu[@]}" "$PYTHON" benchmarks/llm_reference.py --config "$model" --device "$DEVICE" --dtype "$DTYPE" \
    --batch "$batch" --prompt-tokens "$PROMPT" --new-tokens "$NEW" --repeats "$REPEATS" \
    --out "$OUT/ref-$tag.jsonl" --resume >"$OUT/reference-$tag.log" 2>&1
  progress "$tag: reference exit $?"
}

worker() {  # SLOT: take the next unclaimed job (mkdir is atomic) until none is left or the deadline passed
  local slot=$1 job
  for job in "${JOBS[@]}"; do
    mkdir "$CLAIMS/$job" 2>/dev/null || continue
    if late; then progress "$job: past DEADLINE_S=$DEADLINE_S, not started"; continue; fi
    one_job "${job% *}" "${job#* }" "$slot"
    if [ "$GPUS" -eq 1 ]; then tables; fi  # one worker: the tables after each job (several: at the end)
  done
}

if [ "$DEVICE" != cpu ]; then
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used --format=csv >"$OUT/gpus.csv" 2>&1 || true
fi
"$PYTHON" -c "import torch, transformers, sys; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available(), file=sys.stderr)" 2>&1 | tee -a "$OUT/progress.log" >&2
progress "models: $MODELS; batches: $BATCHES; $DEVICE $DTYPE p$PROMPT+n$NEW; GPUS=$GPUS; deadline ${DEADLINE_S}s"

JOBS=()
for model in $MODELS; do
  for batch in $BATCHES; do JOBS+=("$model $batch"); done
done
CLAIMS=$(mktemp -d "${TMPDIR:-/tmp}/llm_table.XXXXXX")
pids=()
for (( slot = 0; slot < GPUS; slot++ )); do
  worker "$slot" &
  pids+=($!)
done
wait "${pids[@]}"
rm -rf "$CLAIMS"
[ "$GPUS" -gt 1 ] && tables
exit 0
