#!/bin/bash
# Session 22, call C on an nvidia-h200-x2, after calls A and B of x2.sh, with the tuner's cost fixes (cost
# factors divide a trial's cost, a compile served from Inductor's cache bounds the next one, the probe's cut of
# the SDPA values, the graph modes first once one has won). Results in $OUT/s22-C.tgz.
#   GPU 0 (cores 0-15):  issue 29, `fade tune llama-3.1-8b --generate --budget 9` (the compiler cache of s21 as in A)
#   GPU 1 (cores 16-31): issue 28, the 8B b32 fade-loop pair in one job (fade bench llm, then llm_reference.py);
#                        then issue 29's int8 row: one int8 trial of the 8B decode, each phase timed (int8.py)
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
R=/tmp/s22-C; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
if [ -f .gpu/cl-cache.tgz ]; then mkdir -p $XDG_CACHE_HOME && tar xzf .gpu/cl-cache.tgz -C $XDG_CACHE_HOME; fi
END=${END_S:-560}
source $PWD/results/ocl-setup-h200/job.sh  # job GPU CORES NAME COMMAND...
job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-9} \
  -o $R/llama-3.1-8b-tuning.json &
(job 1 16-31 b32-fade timeout ${B32_S:-200} python3 -m fade bench llm --device cuda:0 --config llama-3.1-8b --batch 32 \
   --dtype bf16 --prompt-tokens 512 --new-tokens 128 --prefill-tokens 512 --variants fade-loop -o $R/b32-fade.jsonl
 job 1 16-31 b32-ref python3 benchmarks/llm_reference.py --config llama-3.1-8b --batch 32 --variants fade-loop --prompt-tokens 512 --new-tokens 128 \
   --out $R/b32-ref.jsonl --against $R/b32-fade.jsonl
 job 1 16-31 int8 python3 results/s22-h200/int8.py llama-3.1-8b $R/int8.json) &
wait
cat $R/rc.txt; tail -n 40 $R/tune-8b.txt; tail -n 8 $R/b32-ref.txt; tail -n 12 $R/int8.txt
tar czf $OUT/s22-C.tgz --exclude='*.pt' -C /tmp s22-C
