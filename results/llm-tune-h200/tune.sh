#!/bin/bash
# Session 20's second call on one nvidia-h200-x4, four jobs at once, each on its GPU and its 16 of the 64 cores:
#   GPU 0: issue 29, `fade tune llama-3.1-8b --generate` (bf16, batch 1; BUDGET8 minutes, default 6)
#   GPU 1: issue 29, `fade tune llama-3.2-1b --generate` (BUDGET1, default 5)
#   GPU 2: issue 27, benchmarks/ocl_kernels.py: resnet50 eager inference per kernel at b46c1a6 and at this commit
#          (the eager inference row fell from 78% to 49% of CUDA between them), then ocl_zoo.py's loss rows for
#          regnet_y_400mf (its third loss left CUDA fp32 by 1.4e-3 in the first call: judged now against the
#          spread of rounding-perturbed fp64 runs) and the networks the first call left (group 3: cut by time)
#   GPU 3: `fade bench llm` hf-static and fade-loop at the tune's own shape (128-token prompt, 64 new tokens,
#          batch 1) for both models: the HF static-cache row issue 29 compares with, on the same machine
# Run from the repository root with .gpu/ carried (b46.tar: git archive b46c1a6; the pyopencl, expecttest and
# torchao wheels; the CLBlast debs). END_S bounds every job (default 540). Results: $OUT/tune.tgz.
SRC=$PWD source $PWD/results/ocl-setup-h200/env.sh
R=/tmp/tune; mkdir -p $R; cp .gpu/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
END=${END_S:-540}
job() {  # GPU CORES NAME COMMAND...: one job on its GPU and cores until END_S, its output in $R/NAME.txt
  local gpu=$1 cores=$2 name=$3 left=$(( END - SECONDS )); shift 3
  if [ $left -lt 30 ]; then echo "$name not started ($SECONDS s)" >> $R/rc.txt; return; fi
  (CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_COMPILE_THREADS=16 taskset -c $cores timeout $left "$@" > $R/$name.txt 2>&1
   echo "$name rc=$? $SECONDS s" >> $R/rc.txt)
}
job 0 0-15 tune-8b python3 -m fade tune llama-3.1-8b --generate --device cuda:0 --batch 1 --budget ${BUDGET8:-6} \
  -o $R/llama-3.1-8b-tuning.json &
job 1 16-31 tune-1b python3 -m fade tune llama-3.2-1b --generate --device cuda:0 --batch 1 --budget ${BUDGET1:-5} \
  -o $R/llama-3.2-1b-tuning.json &
(mkdir -p /tmp/b46 && tar xf .gpu/b46.tar -C /tmp/b46
 for tree in /tmp/b46 $PWD; do
   tag=$(basename $tree); [ $tree = $PWD ] && tag=head
   job 2 32-47 kernels-$tag env PYTHONPATH=$tree/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-$tag python3 $tree/benchmarks/ocl_kernels.py $R/kernels-$tag \
     --models resnet50 --modes infer --batch 64
 done
 job 2 32-47 loss-g3 python3 benchmarks/ocl_zoo.py $R/loss-g3 --variants eager,graph \
   --models regnet_y_400mf,alexnet,efficientnet_b0,resnext50_32x4d,convnext_small,densenet161 --batch 32 --seq-len 512) &
(for config in llama-3.1-8b llama-3.2-1b; do
   job 3 48-63 bench-$config python3 -m fade bench llm --device cuda:0 --config $config --variants hf-static,fade-loop \
     --batch 1 --dtype bf16 --prompt-tokens 128 --new-tokens 64 --prefill-tokens 128 -o $R/bench-$config.jsonl
 done) &
wait
cat $R/rc.txt; tail -n 25 $R/tune-*.txt; cat $R/kernels-*/kernels.md 2>/dev/null | head -60
tar czf $OUT/tune.tgz --exclude='*.pt' -C /tmp tune
