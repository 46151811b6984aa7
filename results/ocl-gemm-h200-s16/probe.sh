#!/bin/bash
# Issue 27, session 16: probe.py on the H200 (run from the repository root with .gpu/ carried; ARGS: --old, --regs).
source $PWD/results/ocl-setup-h200/env.sh  # wheels, ICD, debs, environment
R=/tmp/probe; mkdir -p $R; git rev-parse HEAD > $R/commit.txt 2>/dev/null
timeout ${T:-300} python3 results/ocl-gemm-h200-s16/${SCRIPT:-probe.py} $R/out $ARGS > $R/probe.txt 2>&1; echo "rc=$? $SECONDS s" >> $R/probe.txt
tail -c 3000 $R/probe.txt | cut -c1-600; for f in $R/out/*.ptx; do echo $f $(grep -c "fma.rn.f32" $f) fma $(grep -c "mul.rn.f32\|mul.f32" $f) mul; done
tar czf $OUT/probe.tgz -C /tmp probe
