#!/bin/bash
# Issue 27, session 15: the GEMMs of four networks' training steps through CLBlast, fade.ocl's own tiled kernel
# (kernels/tiled_gemm.cl, each tiling) and cuBLAS fp32 on one H200 (benchmarks/ocl_gemm_sweep.py); then the
# host cost of mobilenet_v3_small's graph-mode step. Run from the repository root with .gpu/ carried (head.tar of
# the commit, pyopencl wheels, libclblast1 and ocl-icd debs).
export PYTHONUNBUFFERED=1
G=$PWD/.gpu; W=/tmp/w; mkdir -p $W; tar xf $G/head.tar -C $W; cd $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$W/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/gemm; mkdir -p $R; cp $G/commit.txt $R/
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv > $R/gpu.txt
timeout ${SWEEP_S:-330} python3 benchmarks/ocl_gemm_sweep.py $R/sweep --models ${MODELS:-gpt2-small,vit_b_16,convnext_small,resnet50} \
  --tilings ${TILINGS:-128x128,128x64,64x128,64x64,32x64} --budget-s ${BUDGET_S:-270} > $R/sweep.txt 2>&1
echo "sweep rc=$? $SECONDS s" >> $R/rc.txt
FADE_OCL_FOREACH_FUSED=auto timeout 100 python3 benchmarks/ocl_host_cost.py $R/host_cost.json --models mobilenet_v3_small --variants graph --steps 10 > $R/host_cost.txt 2>&1
echo "host_cost rc=$? $SECONDS s" >> $R/rc.txt
cat $R/rc.txt; tail -5 $R/sweep.txt
tar czf $OUT/gemm.tgz -C /tmp gemm
