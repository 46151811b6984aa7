#!/bin/bash
# Prepared in session 22 for the next session's device time (not run yet): two calls on an nvidia-h200-x2,
# PART=A then PART=B, each ~9 minutes, results in $OUT/s23-$PART.tgz. Run from the repository root with .gpu/
# carried (wheels, debs, commit.txt; cl-cache.tgz: session 21's compiler cache of the 8B decode).
#   A, GPU 0 (cores 0-15):  issues 28/29: `fade bench llm` at the tune's shape with fade-loop and
#                           fade-loop+coordinate-descent (FadeLoop.decode now returns the logits too: the decode
#                           rate against session 21's 179.1 and 205.1; its compile warms the cache with the graph
#                           the tune's trials build), then `fade tune llama-3.1-8b --generate --budget 8` on it
#   A, GPU 1 (cores 16-31): issue 27, densenet161's loss row under FADE_OCL_BUILD_BUDGET=auto
#   B, GPU 0: issue 29, int8.py on the 8B again (is the gate's compile now a cache hit?), then issue 28's 8B b32
#             fade-loop pair in one job (fade bench llm, then llm_reference.py, then --against on the two files)
#   B, GPU 1: issue 27, resnet50 and mobilenet_v3_small (train, infer) through benchmarks/ocl_kernels.py: the build
#             budget must not cost the networks that pass (docs/ocl.md's speed table)
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
PART=${PART:?PART=A or B}
R=/tmp/s23-$PART; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
if [ -f .gpu/cl-cache.tgz ]; then mkdir -p $XDG_CACHE_HOME && tar xzf .gpu/cl-cache.tgz -C $XDG_CACHE_HOME; fi
END=${END_S:-560}
source $PWD/results/ocl-setup-h200/job.sh  # job GPU CORES NAME COMMAND...
if [ $PART = A ]; then
  (job 0 0-15 bench-8b python3 -m fade bench llm --device cuda:0 --config llama-3.1-8b --batch 1 --dtype bf16 \
     --prompt-tokens 128 --new-tokens 64 --prefill-tokens 128 --variants fade-loop,fade-loop+coordinate-descent \
     -o $R/bench-8b.jsonl
   job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-8} \
     -o $R/llama-3.1-8b-tuning.json) &
  job 1 16-31 loss-densenet161 env FADE_OCL_BUILD_BUDGET=auto python3 benchmarks/ocl_zoo.py $R/loss-densenet161 \
    --variants eager,graph --models densenet161 --batch 32 --seq-len 512 &
else
  (job 0 0-15 int8 python3 results/s22-h200/int8.py llama-3.1-8b $R/int8.json
   job 0 0-15 b32-fade python3 -m fade bench llm --device cuda:0 --config llama-3.1-8b --batch 32 --dtype bf16 \
     --prompt-tokens 512 --new-tokens 128 --prefill-tokens 512 --variants fade-loop -o $R/b32-fade.jsonl
   job 0 0-15 b32-ref python3 benchmarks/llm_reference.py --config llama-3.1-8b --batch 32 --variants fade-loop \
     --prompt-tokens 512 --new-tokens 128 --out $R/b32-ref.jsonl
   python3 benchmarks/llm_reference.py --against $R/b32-fade.jsonl --out $R/b32-ref.jsonl > $R/b32-against.md 2>&1) &
  job 1 16-31 ocl-speed python3 benchmarks/ocl_kernels.py $R/ocl-speed --models resnet50,mobilenet_v3_small \
    --modes train,infer --batch 64 &
fi
wait
cat $R/rc.txt; tail -n 30 $R/tune-*.txt 2>/dev/null; cat $R/b32-against.md 2>/dev/null; tail -n 12 $R/int8.txt 2>/dev/null
tar czf $OUT/s23-$PART.tgz --exclude='*.pt' -C /tmp s23-$PART
