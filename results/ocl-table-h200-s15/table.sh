#!/bin/bash
# Issue 27's table, session 15: rows at this commit (tiled GEMM kernel measured per shape against CLBlast,
# FADE_OCL_GEMM_OWN=auto), eager and graph mode against CUDA fp32 on the same GPU in the same call (nvidia-h200,
# one GPU, networks one after another). NETS="name:batch ..." picks them; SWEEP=1 first runs
# benchmarks/ocl_gemm_sweep.py on gpt2-small and convnext_small. Run from the repository root with .gpu/ carried
# (head.tar of the commit, pyopencl wheels, libclblast1 and ocl-icd debs).
W=/tmp/w; mkdir -p $W; tar xf $PWD/.gpu/head.tar -C $W
SRC=$W source $PWD/results/ocl-setup-h200/env.sh  # wheels, ICD, debs, environment; imports from the commit's tree
cd $W
R=/tmp/table$PART; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt; nproc >> $R/gpu.txt
END_S=${END_S:-570}
if [ "$SWEEP" = 1 ]; then
  timeout 150 python3 benchmarks/ocl_gemm_sweep.py $R/sweep --models gpt2-small,convnext_small \
    --tilings 128x128,128x64,32x64,128x128/split --budget-s 110 > $R/sweep.txt 2>&1
  echo "sweep rc=$? $SECONDS s" >> $R/rc.txt
fi
net() {  # model, batch, extra
  local d=$R/$1; mkdir -p $d
  timeout 120 python3 -m fade bench models --device cuda:0 --models $1 --batch $2 $3 --mode both \
    --variants fp32+cudnn_benchmark=on --timing-budget ${BUDGET:-6} -o $d/models.jsonl > $d/cuda.txt 2>&1
  echo "$1 cuda rc=$? $SECONDS s" >> $R/rc.txt
  timeout $((END_S-SECONDS)) python3 -m fade bench models --device ocl:0 --models $1 --batch $2 $3 --mode both \
    --variants fp32,compile --timing-budget ${BUDGET:-6} -o $d/models.jsonl > $d/ocl.txt 2>&1
  echo "$1 ocl rc=$? $SECONDS s" >> $R/rc.txt
}
for spec in $NETS; do
  name=${spec%%:*}; batch=${spec#*:}
  if [ $SECONDS -ge $((END_S-60)) ]; then echo "$name skipped (time) $SECONDS s" >> $R/rc.txt; continue; fi
  case $name in gpt2-small|bert-base) net $name $batch "--seq-len 512" ;; *) net $name $batch ;; esac
done
cat $R/rc.txt
for d in $R/*/; do [ -f $d/models.jsonl ] && python3 -m fade compare $d/models.jsonl --by device --baseline cuda:0 --markdown $d/table.md > $d/compare.txt 2>&1; grep "^|" $d/table.md 2>/dev/null; done
tar czf $OUT/table$PART.tgz -C /tmp table$PART
