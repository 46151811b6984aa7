#!/bin/bash
# Issue 27, session 17, one nvidia-h200 call (run from the repository root with .gpu/ carried): probe2.py's GEMM
# cases, then graph-mode inference profiles of the networks whose inference lags their training
# (PROFILES="model:batch ..."), then the same on CUDA fp32 for the kernel-by-kernel comparison.
source $PWD/results/ocl-setup-h200/env.sh  # wheels, ICD, debs, environment
R=/tmp/diag; mkdir -p $R; git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short > $R/dirty.txt 2>/dev/null
END_S=${END_S:-560}
if [ -n "$PROBE" ]; then
  timeout ${PROBE} python3 results/ocl-gemm-h200-s17/probe2.py $R/probe $PROBE_ARGS > $R/probe.txt 2>&1; echo "probe rc=$? $SECONDS s" >> $R/rc.txt
fi
for spec in $PROFILES; do
  name=${spec%%:*}; batch=${spec#*:}
  if [ $SECONDS -ge $((END_S-60)) ]; then echo "$name skipped (time) $SECONDS s" >> $R/rc.txt; continue; fi
  extra=""; case $name in gpt2-small|bert-base) extra="--size 512" ;; esac
  timeout $((END_S-SECONDS)) python3 -m fade profile $name --device ocl:0 --batch $batch --mode ${MODE:-infer} $extra \
    --variants compile -o $R/$name > $R/$name.txt 2>&1; echo "$name ocl rc=$? $SECONDS s" >> $R/rc.txt
  if [ -n "$CUDA" ]; then timeout 100 python3 -m fade profile $name --device cuda:0 --batch $batch --mode ${MODE:-infer} $extra \
    --variants fp32+cudnn_benchmark=on -o $R/$name-cuda > $R/$name-cuda.txt 2>&1; echo "$name cuda rc=$? $SECONDS s" >> $R/rc.txt; fi
done
cat $R/rc.txt; tail -c 2500 $R/probe.txt 2>/dev/null | cut -c1-400
find $R -name "*.json.gz" -o -name "*trace*.json" | xargs rm -f
tar czf $OUT/diag.tgz -C /tmp diag
