#!/bin/bash
# Issue 27, session 16: probe.py on the H200 (run from the repository root with .gpu/ carried; ARGS: --old, --regs).
export PYTHONUNBUFFERED=1
G=$PWD/.gpu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || echo "wheels failed"
mkdir -p /etc/OpenCL/vendors; echo $(ldconfig -p | grep -o '/.*libnvidia-opencl.so.1' | head -1) > /etc/OpenCL/vendors/nvidia.icd
mkdir -p /tmp/oclx; for d in $G/deb/*.deb; do dpkg -x $d /tmp/oclx; done
export LD_LIBRARY_PATH=/tmp/oclx/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH PYTHONPATH=$PWD/src:/tmp/site XDG_CACHE_HOME=/tmp/xdg-empty
R=/tmp/probe; mkdir -p $R; git rev-parse HEAD > $R/commit.txt 2>/dev/null
timeout ${T:-300} python3 results/ocl-gemm-h200-s16/${SCRIPT:-probe.py} $R/out $ARGS > $R/probe.txt 2>&1; echo "rc=$? $SECONDS s" >> $R/probe.txt
tail -c 3000 $R/probe.txt | cut -c1-600; for f in $R/out/*.ptx; do echo $f $(grep -c "fma.rn.f32" $f) fma $(grep -c "mul.rn.f32\|mul.f32" $f) mul; done
tar czf $OUT/probe.tgz -C /tmp probe
