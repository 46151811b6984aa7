#!/bin/bash
# Issue 27's loss column, prepared in session 19 and not run yet: benchmarks/ocl_zoo.py --variants eager,graph
# (CUDA fp32 and fp64 references in a child process, then ocl eager and graph mode; 0 fallbacks, logits against
# fp64, every training loss against CUDA fp32's). One group of networks per GPU at once (CUDA_VISIBLE_DEVICES picks
# the GPU for CUDA and NVIDIA's OpenCL): GPUS=4 on an nvidia-h200-x4 runs the four groups; on one GPU pick one
# with SETS="2". Run from the repository root with .gpu/ carried (head.tar of the commit, the wheels and debs).
# BATCH (default 32) and END_S (default 560) bound the call; results go to $OUT/loss.tgz.
W=/tmp/w; mkdir -p $W; tar xf $PWD/.gpu/head.tar -C $W
SRC=$W source $PWD/results/ocl-setup-h200/env.sh
cd $W
R=/tmp/loss; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version --format=csv > $R/gpu.txt
G1="vgg16,resnet18,mobilenet_v3_small,regnet_y_400mf"
G2="resnet50,wide_resnet50_2,mobilenet_v2,mnasnet1_0"
G3="densenet161,resnext50_32x4d,convnext_small,efficientnet_b0,alexnet"
G4="vit_b_16,gpt2-small,bert-base,mobilenet_v3_large"
SETS=${SETS:-"1 2 3 4"}; END_S=${END_S:-560}
gpu=0
for g in $SETS; do
  eval models=\$G$g
  (CUDA_VISIBLE_DEVICES=$gpu timeout $END_S python3 benchmarks/ocl_zoo.py $R/g$g --variants eager,graph \
     --models $models --batch ${BATCH:-32} --seq-len 512 > $R/g$g.txt 2>&1; echo "group $g rc=$? $SECONDS s" >> $R/rc.txt) &
  gpu=$(( (gpu + 1) % ${GPUS:-1} ))
  [ "${GPUS:-1}" = 1 ] && wait
done
wait
cat $R/rc.txt
for d in $R/g*/; do python3 -c "
import json, sys
s = json.load(open('$d/summary.json'))
for c in s['cases']:
    l = c.get('losses') or {}
    print(c['model'], c.get('variant'), 'passed' if c['passed'] else 'FAILED', 'fallbacks', c['fallbacks'],
          'max loss rel diff', l.get('max_rel_diff'), 'logits vs fp64', c.get('logits_vs_fp64'), c.get('error') or '')
" 2>/dev/null; done
tar czf $OUT/loss.tgz -C /tmp loss
