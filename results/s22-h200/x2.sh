#!/bin/bash
# Prepared in session 21 for the next session's device time (not run yet): two calls on an nvidia-h200-x2,
# PART=A then PART=B, each ~9 minutes, results in $OUT/s22-$PART.tgz. Run from the repository root with .gpu/
# carried (wheels, debs, commit.txt; cl-cache.tgz: a compiler cache from an earlier call, if any).
#   A, GPU 0 (cores 0-15):  issue 29, `fade tune llama-3.1-8b --generate --budget 9`: the probe-cut SDPA values,
#                           int8 at its compiled_cost, coordinate descent if the budget reaches it
#   A, GPU 1 (cores 16-31): issue 27, densenet161's loss row alone for the whole call
#   B, GPU 0: issue 28, the 8B b32 fade-loop reference (llm_table.sh resumed from results/s21-h200/C/llm28), then
#             `fade bench llm --device ocl:0` on a small config (the H200 OpenCL run)
#   B, GPU 1: issue 29, `fade tune llama-3.2-1b --generate --budget 8`, then the 1B bench's attention probes
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
PART=${PART:?PART=A or B}
R=/tmp/s22-$PART; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
if [ -f .gpu/cl-cache.tgz ]; then mkdir -p $XDG_CACHE_HOME && tar xzf .gpu/cl-cache.tgz -C $XDG_CACHE_HOME; fi
END=${END_S:-560}
source $PWD/results/ocl-setup-h200/job.sh  # job GPU CORES NAME COMMAND...
if [ $PART = A ]; then
  job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-9} \
    -o $R/llama-3.1-8b-tuning.json &
  job 1 16-31 loss-densenet161 python3 benchmarks/ocl_zoo.py $R/loss-densenet161 --variants eager,graph \
    --models densenet161 --batch 32 --seq-len 512 &
else
  (mkdir -p out && cp -r results/s21-h200/C/llm28 out/llm28
   CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 env TORCHINDUCTOR_COMPILE_THREADS=16 MODELS="llama-3.1-8b" BATCHES="32" \
     DEADLINE_S=300 timeout 400 bash benchmarks/llm_table.sh out/llm28 > $R/llm28.txt 2>&1
   echo "llm28 rc=$? $SECONDS s" >> $R/rc.txt; cp -r out/llm28 $R/
   job 0 0-15 bench-ocl python3 -m fade bench llm --device ocl:0 --config tiny-llama --quick -o $R/bench-ocl.jsonl
   job 0 0-15 bench-ocl-gpt2 python3 -m fade bench llm --device ocl:0 --config gpt2 --quick -o $R/bench-ocl-gpt2.jsonl) &
  (job 1 16-31 tune-1b python3 -m fade tune llama-3.2-1b --generate --device cuda:0 --batch 1 --budget ${BUDGET1:-8} \
     -o $R/llama-3.2-1b-tuning.json
   job 1 16-31 bench-1b python3 -m fade bench llm --device cuda:0 --config llama-3.2-1b --batch 1 --dtype bf16 \
     --prompt-tokens 128 --new-tokens 64 --prefill-tokens 128 --variants fade-loop -o $R/bench-1b.jsonl) &
fi
wait
cat $R/rc.txt; tail -n 30 $R/tune-*.txt 2>/dev/null
tar czf $OUT/s22-$PART.tgz --exclude='*.pt' -C /tmp s22-$PART
