#!/bin/bash
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in .ocl/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$PWD/src:/tmp/site
export XDG_CACHE_HOME=/tmp/xdg
R=/tmp/tune1; mkdir -p $R; pack() { tar czf $OUT/tune1.tgz -C /tmp tune1 xdg 2>/dev/null; }
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $R/gpu.txt; git rev-parse HEAD > $R/commit.txt 2>/dev/null
echo "== tune $(date +%T)"
timeout 560 python3 benchmarks/ocl_clblast_tune.py $R/clblast --models alexnet,resnet18,vgg16 --budget-s 110 > $R/tune_log.txt 2>&1; echo "tune rc=$?"
tail -30 $R/tune_log.txt; cat $R/clblast/summary.md 2>/dev/null | head -60; pack
echo "== done $(date +%T)"
