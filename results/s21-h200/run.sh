#!/bin/bash
# Prepared in session 20 for the next session's device time (not run yet). One nvidia-h200-x4, four jobs at
# once, each on its GPU and 16 of the 64 cores, results in $OUT/s21.tgz. Run from the repository root with .gpu/
# carried (the pyopencl, expecttest and torchao wheels; the CLBlast debs; commit.txt).
#   GPU 0: issue 29, `fade tune llama-3.1-8b --generate` with BUDGET8 (default 9) minutes: the floor-aware gate
#          (session 20's run stopped at the baseline), the compile mode first, int8 under it
#   GPU 1: issue 28/29, `fade bench llm` on the 8B shape at the tune's 128+64 shape, batch 1: hf-static, fade-loop
#          and the loop in the tuner's other modes (coordinate descent, max-autotune): decode % of the roofline
#   GPU 2: issue 29, `fade tune llama-3.2-1b --generate` (BUDGET1, default 7), then the 1B bench row
#   GPU 3: issue 27, eager resnet50 inference per kernel with FADE_OCL_FLUSH_EVERY 0, 8 and 32 (does the flush
#          give the overlap back?), then ocl_zoo.py's loss rows the first calls left
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
R=/tmp/s21; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
END=${END_S:-560}
job() {  # GPU CORES NAME COMMAND...: one job on its GPU and cores until END_S, its output in $R/NAME.txt
  local gpu=$1 cores=$2 name=$3 left=$(( END - SECONDS )); shift 3
  if [ $left -lt 30 ]; then echo "$name not started ($SECONDS s)" >> $R/rc.txt; return; fi
  (CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_COMPILE_THREADS=16 taskset -c $cores timeout $left "$@" > $R/$name.txt 2>&1
   echo "$name rc=$? $SECONDS s" >> $R/rc.txt)
}
LLM="--batch 1 --dtype bf16 --prompt-tokens 128 --new-tokens 64 --prefill-tokens 128"
job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-9} \
  -o $R/llama-3.1-8b-tuning.json &
job 1 16-31 bench-8b python3 -m fade bench llm --device cuda:0 --config llama-3.1-8b $LLM \
  --variants hf-static,fade-loop,fade-loop+coordinate-descent,fade-loop+max-autotune -o $R/bench-8b.jsonl &
(job 2 32-47 tune-1b python3 -m fade tune llama-3.2-1b --generate --device cuda:0 --batch 1 --budget ${BUDGET1:-7} \
   -o $R/llama-3.2-1b-tuning.json
 job 2 32-47 bench-1b python3 -m fade bench llm --device cuda:0 --config llama-3.2-1b $LLM \
   --variants hf-static,fade-loop,fade-loop+coordinate-descent -o $R/bench-1b.jsonl) &
(for every in 0 8 32; do
   job 3 48-63 kernels-flush$every env FADE_OCL_FLUSH_EVERY=$every python3 benchmarks/ocl_kernels.py $R/kernels-flush$every \
     --models resnet50,mobilenet_v2 --modes infer --batch 64
 done
 job 3 48-63 loss python3 benchmarks/ocl_zoo.py $R/loss --variants eager,graph \
   --models efficientnet_b0,resnext50_32x4d,convnext_small,densenet161 --batch 32 --seq-len 512) &
wait
cat $R/rc.txt; tail -n 30 $R/tune-*.txt; grep -h "^step\|^## " $R/kernels-flush*/kernels.md
tar czf $OUT/s21.tgz --exclude='*.pt' -C /tmp s21
