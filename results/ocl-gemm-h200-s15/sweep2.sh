#!/bin/bash
# Issue 27, session 15, second sweep: the unrolled tiled kernel (32-bit indices) on gpt2-small's GEMMs with the
# k16 tilings and split-K, plus each tiling's NVIDIA build log (registers, spills). Run from the repository root
# with .gpu/ carried.
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/gemm2; mkdir -p $R; cp $G/commit.txt $R/
timeout 200 python3 benchmarks/ocl_gemm_sweep.py $R/sweep --models ${MODELS:-gpt2-small} --build-log \
  --tilings ${TILINGS:-128x128,128x128k16,128x64,128x64k16,128x128/split} --budget-s ${BUDGET_S:-150} > $R/sweep.txt 2>&1
echo "sweep rc=$? $SECONDS s" >> $R/rc.txt
cat $R/rc.txt; tail -3 $R/sweep.txt; grep -h "registers\|spill" $R/sweep/build-*.txt | head -20
tar czf $OUT/gemm2.tgz -C /tmp gemm2
