#!/usr/bin/env bash
# Issue 28's decode table on one GPU: for each model and batch, `fade bench llm` (hf-generate, hf-static,
# fade-loop) and then benchmarks/llm_reference.py (the same three, written by hand, nothing from fade) for the same
# case, then FADE beside the reference (bar 5%), `fade compare` (the roofline view) and `fade report`.
#
#   bash benchmarks/llm_table.sh OUT                                  # H200: llama-3.2-1b, llama-3.1-8b; b1,8,32
#   DEVICE=cpu MODELS=tiny-llama bash benchmarks/llm_table.sh OUT     # CPU smoke: fp32, p16+n16, b1,2, ~2-3 min
#
# Environment (defaults for a GPU): MODELS="llama-3.2-1b llama-3.1-8b" (names in src/fade/data/llm.toml),
# BATCHES="1 8 32", DEVICE=cuda, DTYPE=bf16, PROMPT=512, NEW=128 (fade bench llm's defaults), PREFILL=512 (one
# prefill length per model: the bench needs one, and each costs a model build), REPEATS=5 (reference rounds),
# PYTHON=python3, GPUS (number of GPUs to spread the models over, one model per GPU at a time; default: 1).
#
# Order: model by model (the 1B first: cheap), and within a model batch by batch, FADE then the reference, so that a
# cut leaves finished (FADE, reference) pairs. Everything is appended as it finishes: OUT/fade-<model>.jsonl (FADE
# records), OUT/ref-<model>.jsonl (reference rows), OUT/*.log; progress lines go to stderr and OUT/progress.log.
# Run the same command again on the same OUT and it resumes: `fade bench llm --resume` skips cases measured ok,
# llm_reference.py --resume skips rows it has. After each batch (and at the end, or on SIGINT/SIGTERM) the tables
# are rewritten from whatever is there: OUT/llm.jsonl and OUT/reference.jsonl (the per-model files merged),
# OUT/against.md (FADE beside the reference, bar 5%), OUT/compare.md and compare.txt (`fade compare`),
# OUT/report.html (`fade report`). TABLES_ONLY=1 writes only the tables (e.g. here, from files a cut run left).
#
# Time (estimates for one H200, not yet measured: the suite has run its compiled paths on a CPU only). Per decode
# case FADE starts a worker (import torch + transformers ~10 s), builds the model in fp32 and runs an fp32
# hf-generate reference (8B: ~10-15 s; 1B: ~5 s), compiles what the variant compiles (hf-static: transformers'
# reduce-overhead forward; fade-loop: the step; ~30-60 s cold for the 8B, ~20-40 s for the 1B, less when
# inductor's on-disk cache has the graph) and times 3 x 2 rounds (~5-20 s). The reference builds its model once per
# batch, in bf16 (no fp32 reference), and compiles hf-static and its loop again (inductor's cache helps).
#   llama-3.2-1b: FADE ~25 s (hf-generate) + ~50 s (hf-static) + ~45 s (fade-loop) per batch -> ~360 s for 3
#                 batches + ~20 s prefill; reference ~90 s per batch -> ~270 s.          total ~650 s
#   llama-3.1-8b: FADE ~40 + ~90 + ~80 s per batch -> ~630 s + ~30 s prefill; reference ~150 s per batch -> ~450 s.
#                                                                                          total ~1100 s
# So everything is ~30 min of device time: more than one 10-minute device command and the ~500 s target. Run it
# as several commands on the same OUT (it resumes; DEADLINE_S, default 540, starts no step after that many
# seconds, but a step already running at the device's limit is lost and redone): on the device machine, where $OUT
# starts empty, keep OUT in the checkout's ignored out/ and carry it back each time:
#   timeout 580 bash benchmarks/llm_table.sh out/llm28; cp -r out/llm28 $OUT/      (then carry ["out/llm28"])
# with MODELS=llama-3.2-1b first, then MODELS=llama-3.1-8b (twice). On nvidia-h200-x2, GPUS=2 runs the two models
# at once, one per GPU (~1100 s wall: the 8B is the long pole; the tables are written at the end only).
# Each FADE case has --timeout CASE_TIMEOUT (default 600).
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
DEVICE=${DEVICE:-cuda}
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

progress() {
  local line
  line="llm_table: [$(( $(date +%s) - START ))s] $*"
  echo "$line" >&2
  echo "$line" >>"$OUT/progress.log"
}

late() {  # true when the deadline has passed: no new step starts
  [ $(( $(date +%s) - START )) -ge "$DEADLINE_S" ]
}

tables() {  # merge the per-model files, then FADE beside the reference, fade compare, fade report
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

one_model() {  # MODEL GPU: every batch of one model, FADE then the reference per batch
  local model=$1 gpu=$2 batch tag
  local env_gpu=()
  [ "$DEVICE" != cpu ] && env_gpu=(env CUDA_VISIBLE_DEVICES="$gpu")
  for batch in $BATCHES; do
    tag="$model-b$batch"
    if late; then progress "$tag: past DEADLINE_S=$DEADLINE_S, not started"; return; fi
    progress "$tag: fade bench llm (hf-generate, hf-static, fade-loop) -> $OUT/fade-$tag.log"
    "${env_gpu[@]}" "$PYTHON" -m fade bench llm --config "$model" --device "$DEVICE" --dtype "$DTYPE" --batch "$batch" \
      --prompt-tokens "$PROMPT" --new-tokens "$NEW" --prefill-tokens "$PREFILL" \
      --variants hf-generate,hf-static,fade-loop --timeout "$CASE_TIMEOUT" $QUICK \
      -o "$OUT/fade-$model.jsonl" --resume >"$OUT/fade-$tag.log" 2>&1
    progress "$tag: fade exit $?"
    if late; then progress "$tag: past DEADLINE_S=$DEADLINE_S, reference not started"; return; fi
    progress "$tag: llm_reference.py -> $OUT/reference-$tag.log"
    "${env_gpu[@]}" "$PYTHON" benchmarks/llm_reference.py --config "$model" --device "$DEVICE" --dtype "$DTYPE" \
      --batch "$batch" --prompt-tokens "$PROMPT" --new-tokens "$NEW" --repeats "$REPEATS" \
      --out "$OUT/ref-$model.jsonl" --resume >"$OUT/reference-$tag.log" 2>&1
    progress "$tag: reference exit $?"
    if [ "$GPUS" -eq 1 ]; then tables; fi
  done
}

if [ "$DEVICE" != cpu ]; then
  nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used --format=csv >"$OUT/gpus.csv" 2>&1 || true
fi
"$PYTHON" -c "import torch, transformers, sys; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available(), file=sys.stderr)" 2>&1 | tee -a "$OUT/progress.log" >&2
progress "models: $MODELS; batches: $BATCHES; $DEVICE $DTYPE p$PROMPT+n$NEW; GPUS=$GPUS; deadline ${DEADLINE_S}s"

slot=0
pids=()
for model in $MODELS; do
  if [ "$GPUS" -gt 1 ]; then
    one_model "$model" "$slot" &
    pids+=($!)
    slot=$(( (slot + 1) % GPUS ))
    if [ "$slot" -eq 0 ]; then wait "${pids[@]}"; pids=(); fi
  else
    one_model "$model" 0
  fi
done
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
tables
