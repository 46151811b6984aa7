#!/bin/bash
# Session 21's device time on an nvidia-h200-x2 (the x4 that run.sh was written for was not lent): the same
# jobs as run.sh in two calls, PART=A then PART=B, each ~9 minutes, results in $OUT/s21-$PART.tgz. Run from the
# repository root with .gpu/ carried (wheels, debs, commit.txt; cl-cache.tgz when call A brought one back).
#   A, GPU 0 (cores 0-15):  issue 29, `fade tune llama-3.1-8b --generate`, BUDGET8 (default 7) minutes
#   A, GPU 1 (cores 16-31): issue 27, ocl_zoo.py's four missing loss rows, one process per network on 4 cores
#                           each (the first calls were cut by NVIDIA's kernel builds, one core each); a
#                           correctness run, so their shared GPU does not matter
#   B, GPU 0: issue 27, eager resnet50 inference per kernel with FADE_OCL_FLUSH_EVERY 8, 0, 32 (GPU 1 busy with
#             its own jobs on other cores), then issue 28/29's 8B bench at the tune's shape
#   B, GPU 1: issue 29, `fade tune llama-3.2-1b --generate` (BUDGET1, default 5), then the 1B bench
#   C, GPU 0: the 8B tune again after the final check's reserve fix (BUDGET8 6.5); GPU 1: issue 28's missing table
#             rows, resumed from results/llm-h200-s20/llm28 (benchmarks/llm_table.sh)
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
PART=${PART:?PART=A, B or C}
R=/tmp/s21-$PART; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
if [ -f .gpu/cl-cache.tgz ]; then mkdir -p $XDG_CACHE_HOME && tar xzf .gpu/cl-cache.tgz -C $XDG_CACHE_HOME; fi
END=${END_S:-540}
job() {  # GPU CORES NAME COMMAND...: one job on its GPU and cores until END_S, its output in $R/NAME.txt
  local gpu=$1 cores=$2 name=$3 left=$(( END - SECONDS )); shift 3
  if [ $left -lt 30 ]; then echo "$name not started ($SECONDS s)" >> $R/rc.txt; return; fi
  (CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_COMPILE_THREADS=16 taskset -c $cores timeout $left "$@" > $R/$name.txt 2>&1
   echo "$name rc=$? $SECONDS s" >> $R/rc.txt)
}
LLM="--batch 1 --dtype bf16 --prompt-tokens 128 --new-tokens 64 --prefill-tokens 128"
if [ $PART = A ]; then
  job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-7} \
    -o $R/llama-3.1-8b-tuning.json &
  i=0
  for net in densenet161 convnext_small resnext50_32x4d efficientnet_b0; do
    lo=$(( 16 + 4 * i )); i=$(( i + 1 ))
    job 1 $lo-$(( lo + 3 )) loss-$net python3 benchmarks/ocl_zoo.py $R/loss-$net --variants eager,graph \
      --models $net --batch 32 --seq-len 512 &
  done
elif [ $PART = C ]; then  # after the final check's reserve fix: the 8B tune again on call A's compiler cache; the
  # table's missing rows (1B b8 reference, 1B b32, 8B b32 reference) resumed from session 20's OUT on GPU 1
  job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-6.5} \
    -o $R/llama-3.1-8b-tuning.json &
  mkdir -p out && cp -r results/llm-h200-s20/llm28 out/llm28 && cp .gpu/commit.txt out/llm28/commit-s21.txt
  (CUDA_VISIBLE_DEVICES=1 taskset -c 16-31 env TORCHINDUCTOR_COMPILE_THREADS=16 MODELS="llama-3.2-1b llama-3.1-8b" \
     BATCHES="8 32" DEADLINE_S=$(( END - 90 )) timeout $(( END - SECONDS )) bash benchmarks/llm_table.sh out/llm28 \
     > $R/llm28.txt 2>&1; echo "llm28 rc=$? $SECONDS s" >> $R/rc.txt; cp -r out/llm28 $R/) &
else
  (for every in 8 0 32; do
     job 0 0-15 kernels-flush$every env FADE_OCL_FLUSH_EVERY=$every python3 benchmarks/ocl_kernels.py \
       $R/kernels-flush$every --models resnet50 --modes infer --batch 64
   done
   job 0 0-15 bench-8b python3 -m fade bench llm --device cuda:0 --config llama-3.1-8b $LLM \
     --variants hf-static,fade-loop,fade-loop+coordinate-descent,fade-loop+max-autotune -o $R/bench-8b.jsonl) &
  (job 1 16-31 tune-1b python3 -m fade tune llama-3.2-1b --generate --device cuda:0 --batch 1 --budget ${BUDGET1:-5} \
     -o $R/llama-3.2-1b-tuning.json
   job 1 16-31 bench-1b python3 -m fade bench llm --device cuda:0 --config llama-3.2-1b $LLM \
     --variants hf-static,fade-loop,fade-loop+coordinate-descent -o $R/bench-1b.jsonl) &
fi
wait
cat $R/rc.txt; tail -n 25 $R/tune-*.txt 2>/dev/null; grep -h "^step\|^## " $R/kernels-flush*/kernels.md 2>/dev/null
grep -h '"passed"' $R/loss-*/cases.jsonl 2>/dev/null | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d['model'], d['variant'], 'passed' if d.get('passed') else 'FAILED', d.get('fallbacks'), d.get('error'))"
tar czf $OUT/s21-$PART.tgz --exclude='*.pt' -C /tmp s21-$PART
( cd $XDG_CACHE_HOME && tar czf $OUT/cl-cache.tgz . ) 2>/dev/null; ls -la $OUT
